// Shutdown time with many branches: loads 50,000 records (64-d vectors and
// text), snapshots them, restores the snapshot into N branches (each
// branch's indexer then links its graph's tail), and times SIGTERM to exit
// of `braid serve` right after the last restore.
//
//   node bench/shutdown.mjs [--restores 30] [--records 50000]
//
// Uses the addon in native/ (`node scripts/build-native.mjs`).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const flag = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const restores = flag('restores', 30);
const records = flag('records', 50_000);
const BATCH = 2_500;

const dir = mkdtempSync(path.join(tmpdir(), 'braid-shutdown-'));
const child = spawn(process.execPath, ['bin/braid.js', 'serve'], {
  cwd: root,
  env: { ...process.env, BRAID_DATA_DIR: dir, BRAID_PORT: '0', BRAID_HOST: '127.0.0.1', BRAID_LOG_LEVEL: 'error' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const exited = new Promise((resolve) => child.on('exit', resolve));
try {
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const found = /listening on (http:\/\/\S+)/.exec(out);
      if (found) resolve(found[1]);
    });
    child.once('exit', () => reject(new Error(`braid serve exited before listening: ${out}`)));
  });
  const post = async (route, body) => {
    const res = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (res.status !== 200) throw new Error(`${route}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  let seed = 1;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  for (let start = 0; start < records; start += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, records - start) }, (_, i) => ({
      table: 'docs',
      tenant_id: 't',
      id: `r${start + i}`,
      fields: { title: `record ${start + i} about wind and rain`, v: Array.from({ length: 64 }, random) },
    }));
    await post('/v1/records/put-batch', { records: batch });
  }
  await post('/v1/admin/snapshot', { target: 's1' });
  for (let i = 0; i < restores; i++) await post('/v1/admin/restore', { source: 's1', target: `b${i}` });
  const started = performance.now();
  child.kill('SIGTERM');
  const code = await exited;
  console.log(`${restores} restores of ${records.toLocaleString('en-US')} records: SIGTERM to exit ${((performance.now() - started) / 1000).toFixed(1)} s (exit ${code})`);
} finally {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
