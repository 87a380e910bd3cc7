// The error table in docs/errors.md and the one in src/errors.ts must agree.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_STATUS } from '../src/errors.js';
import { ROOT } from './helpers.js';

describe('docs/errors.md', () => {
  it('lists every code with its status, and nothing else', () => {
    const doc = readFileSync(path.join(ROOT, 'docs', 'errors.md'), 'utf8');
    const rows = [...doc.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]);
    expect(Object.fromEntries(rows)).toEqual(ERROR_STATUS);
  });

  it('every engine error code is in the table', () => {
    const rust = readFileSync(path.join(ROOT, 'crates', 'engine', 'src', 'error.rs'), 'utf8');
    const codes = [...rust.matchAll(/=> "([a-z_]+)"/g)].map((m) => m[1]!);
    expect(codes.length).toBeGreaterThan(10);
    for (const code of codes) expect(ERROR_STATUS, code).toHaveProperty(code);
  });
});
