// Memory under retention, while writing and after kill -9 (bench/README.md,
// "Memory with retention, and after a kill"): a server keeping no history
// (--history-epochs 0) and checkpointing every 300 rows takes put-batches of
// 50 records that rewrite 200 keys, from two writers; each cycle writes for
// --seconds, kills the server with SIGKILL and starts it again on the same
// directory. Prints resident memory before each kill and after each restart.
//
//   node bench/retention-crash.mjs [--cycles 8] [--seconds 6] [--numbers-only]
//
// Uses the release addon in target/bench-native (node scripts/build-native.mjs --release).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { memory, post, startServer } from './server-process.mjs';

const flag = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const cycles = flag('cycles', 8);
const seconds = flag('seconds', 6);
const numbersOnly = process.argv.includes('--numbers-only');
const dir = mkdtempSync(path.join(os.tmpdir(), 'braid-retention-crash-'));
const flags = ['--history-epochs', '0', '--checkpoint-rows', '300'];

let seed = 7;
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed / 2 ** 31;
};
const record = () => {
  const id = `k${Math.floor(random() * 200)}`;
  const fields = numbersOnly
    ? { n: Math.floor(random() * 1e9) }
    : { body: `w ${Math.floor(random() * 1e9)}`, v: Array.from({ length: 16 }, () => random() * 2 - 1) };
  return { table: 'docs', tenant_id: 't1', id, fields };
};

console.log(`| cycle | rows written | RSS before the kill MB | RSS after the restart MB (+2 s) |`);
console.log('|---:|---:|---:|---:|');
let server = await startServer(dir, flags);
let rows = 0;
try {
  for (let cycle = 1; cycle <= cycles; cycle++) {
    const until = performance.now() + seconds * 1000;
    const writer = async () => {
      while (performance.now() < until) {
        await post(`${server.url}/v1/records/put-batch`, { records: Array.from({ length: 50 }, record) });
        rows += 50;
      }
    };
    await Promise.all([writer(), writer()]);
    const before = memory(server.child.pid).rssMb;
    server.child.kill('SIGKILL');
    await server.exited;
    server = await startServer(dir, flags);
    await new Promise((r) => setTimeout(r, 2000));
    const after = memory(server.child.pid).rssMb;
    console.log(`| ${cycle} | ${rows.toLocaleString('en-US')} | ${before.toFixed(0)} | ${after.toFixed(0)} |`);
  }
} finally {
  server.child.kill('SIGTERM');
  await server.exited;
  rmSync(dir, { recursive: true, force: true });
}
