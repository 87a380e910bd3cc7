// Starts `braid serve` (release addon, target/bench-native) on fresh copies of
// a kept data directory, each copy synced to disk first, and prints how long
// until it listens and its recovery event's split (the checkpoint image's
// load, the replay of the log's tail), and how long until it has answered a
// read of the last record bench/restart.mjs wrote (`r<records - 1>`, when the
// directory is named by its record count, as --keep-copy names it). Beside bench/restart.mjs, which
// restarts the server the moment it has killed it, while the kernel still
// writes back the file pages the killed server left dirty.
//
//   node bench/restart.mjs --keep-copy DIR          # leaves DIR/<records> per milestone
//   node bench/restart-copy.mjs DIR/1000000 [--runs 3] [--no-sync]   (--no-sync: the copy's pages left dirty)
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { flag } from './peers/common.mjs';
import { post, startServer } from './server-process.mjs';

const source = process.argv[2];
if (!source || source.startsWith('--')) throw new Error('usage: node bench/restart-copy.mjs DATA_DIR [--runs 3]');
const runs = Number(flag('runs', 3));
const records = Number(path.basename(source));
for (let i = 0; i < runs; i++) {
  const parent = mkdtempSync(path.join(tmpdir(), 'braid-restart-copy-'));
  const dir = path.join(parent, 'data');
  cpSync(source, dir, { recursive: true });
  if (!process.argv.includes('--no-sync')) execFileSync('sync');
  const started = performance.now();
  const server = await startServer(dir, [], { logLevel: 'info' });
  const listening = performance.now() - started;
  let read = '';
  if (Number.isInteger(records) && records > 0) {
    const got = await post(`${server.url}/v1/records/get`, { table: 'wn', tenant_id: 'one', id: `r${records - 1}` });
    if (!got.record) throw new Error(`r${records - 1} missing after the start`);
    read = `, first read after ${(performance.now() - started).toFixed(0)} ms`;
  }
  const r = server.recovery ?? {};
  console.log(
    `${source}: listening after ${listening.toFixed(0)} ms${read}; image load ${Number(r.checkpoint_load_ms).toFixed(0)} ms, ` +
      `tail replay ${Number(r.replay_ms).toFixed(0)} ms (${r.commits_replayed} commits)`,
  );
  server.child.kill('SIGKILL');
  await server.exited;
  rmSync(parent, { recursive: true, force: true });
}
