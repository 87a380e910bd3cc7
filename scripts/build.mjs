#!/usr/bin/env node
// Builds what a fresh clone needs to run: the native addon (when the crates
// are here and it is stale) and the TypeScript in dist/. Runs on
// `npm install` (the prepare script) and before the test suite.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildNative } from './build-native.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export function buildAll({ force = false } = {}) {
  buildNative({ force });
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  if (existsSync(path.join(root, 'src')) && existsSync(tsc)) {
    // tsc emits even when it reports type errors; those fail `npm run
    // typecheck` (and CI) on their own, so a build for tests goes on.
    const res = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
    if (res.status !== 0) console.error('warning: tsc reported errors (run `npm run typecheck`)');
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  buildAll({ force: process.argv.includes('--force') });
}
