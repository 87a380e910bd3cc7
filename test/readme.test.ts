// The README's curl tour runs against a real server, so its examples cannot rot.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startTestServer, type TestServer } from './helpers.js';

let s: TestServer;
// async: the server runs in this process, so a blocking exec would deadlock it
const run = promisify(execFile);

/** The curl commands of the README's sh blocks, continuation lines joined, comments dropped. */
function curlCommands(markdown: string): string[] {
  const blocks = [...markdown.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const commands: string[] = [];
  for (const block of blocks) {
    let current = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('curl')) {
        if (current) commands.push(current);
        current = line;
      } else if (current && !line.startsWith('#') && !line.startsWith('npm') && !line.startsWith('node')) {
        current += `\n${line}`;
      } else if (current) {
        commands.push(current);
        current = '';
      }
    }
    if (current) commands.push(current);
  }
  return commands.map((c) => c.replace(/\s+#[^'\n]*$/gm, '').trim());
}

beforeAll(async () => {
  s = await startTestServer();
});

afterAll(async () => {
  await s.destroy();
});

describe('README tour', () => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const commands = curlCommands(readme).filter((c) => c.includes('localhost:8080'));

  it('has a tour', () => {
    expect(commands.length).toBeGreaterThanOrEqual(12);
  });

  it('every curl example succeeds against a real engine', async () => {
    const base = new URL(s.url);
    for (const command of commands) {
      const local = command.replaceAll('localhost:8080', `${base.hostname}:${base.port}`).replace(/^curl -s/, 'curl -s -w "\\n%{http_code}"');
      const { stdout: out } = await run('bash', ['-c', local], { encoding: 'utf8' });
      const lines = out.trimEnd().split('\n');
      const status = Number(lines.pop());
      expect(status, `${command}\n=> ${out}`).toBe(200);
      if (command.includes('/metrics ') || command.endsWith('/metrics')) {
        // the Prometheus text format, not JSON
        expect(lines.join('\n'), command).toContain('# TYPE braid_http_requests_total counter');
        continue;
      }
      const body = JSON.parse(lines.join('\n'));
      expect(body.code, command).toBeUndefined();
      if (command.includes('/v1/graphql')) expect(body.errors, command).toBeUndefined();
    }
  });

  it('the tour really finds what it wrote', async () => {
    const r = await s.post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] WHERE topic = 'energy' LIMIT 5" });
    expect(r.body.results.map((x: { record_id: string }) => x.record_id)).toEqual(['a1', 'a2']);
    // the JSON form finds the same
    const json = await s.post('/v1/query', { table: 'articles', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], scalar_eq: { topic: 'energy' }, top_k: 5 });
    expect(json.body.results.map((x: { record_id: string }) => x.record_id)).toEqual(['a1', 'a2']);
    // found by a black-box test: the walk started at a3 as of epoch 1, before a3 was written, and found nothing
    const walk = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', graph_seed: 'a3', temporal_as_of: 2 });
    expect(walk.body.access_paths).toContainEqual(expect.objectContaining({ access_path_id: 'graph', candidates: 2 }));
    const audit = await s.post('/v1/records/get', { table: 'articles', tenant_id: 'acme', id: 'a1' }, { 'x-braid-branch': 'audit' });
    expect(audit.body.record.id).toBe('a1');
  });
});
