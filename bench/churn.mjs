#!/usr/bin/env node
// Memory while a few records are rewritten as fast as the server takes
// them, with retention on: whether retention keeps up when the writes outpace
// the vector graphs. One `braid serve` on the release addon in
// target/bench-native (`node scripts/build-native.mjs --release`, then copy
// native/* there) with --history-epochs; put-batches of --batch records over --keys
// keys, each with a --dim vector and 20 words of text, sent one after
// another. Every --every versions it prints the versions the branch keeps,
// those retention removed, the server's resident memory (anonymous and
// file pages) and the engine's own memory estimate. At the end it waits for
// the indexes, asks for a checkpoint (a snapshot takes one) and prints the
// same after it.
//
//   node bench/churn.mjs [--versions 400000] [--keys 1000] [--batch 500] [--dim 128] [--history-epochs 20] [--every 50000]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServer } from './server-process.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return Number(i >= 0 ? process.argv[i + 1] : dflt);
};
const VERSIONS = arg('versions', 400_000);
const KEYS = arg('keys', 1_000);
const BATCH = arg('batch', 500);
const DIM = arg('dim', 128);
const HISTORY = arg('history-epochs', 20);
const EVERY = arg('every', 50_000);
const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega'.split(' ');

const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-churn-'));
const { child: server, exited, url: base } = await startServer(dataDir, ['--history-epochs', String(HISTORY)]);

/** The server's resident memory in MB: all, anonymous, file pages. */
function rss() {
  const status = readFileSync(`/proc/${server.pid}/status`, 'utf8');
  const mb = (key) => Math.round(Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)[1]) / 1024);
  return { rss_mb: mb('VmRSS'), anon_mb: mb('RssAnon'), file_mb: mb('RssFile') };
}

async function figures() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const gauge = (name) => Number(new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)`, 'm').exec(text)?.[2]);
  const estimate = [...text.matchAll(/^braid_branch_memory_bytes\{[^}]*structure="(\w+)"\} (\S+)/gm)].reduce((sum, m) => sum + Number(m[2]), 0);
  return {
    versions: gauge('braid_branch_versions'),
    purged: gauge('braid_branch_retention_purged_versions'),
    ...rss(),
    estimate_mb: Math.round(estimate / 1048576),
  };
}

const t0 = performance.now();
let written = 0;
let next = EVERY;
for (let k = 0; written < VERSIONS; ) {
  const records = [];
  for (let j = 0; j < BATCH; j++, k++) {
    const text = `${Array.from({ length: 20 }, () => WORDS[Math.floor(Math.random() * WORDS.length)]).join(' ')} w${written + j}`;
    const vector = Array.from({ length: DIM }, () => Math.round(Math.random() * 1e4) / 1e4);
    records.push({ table: 'churn', tenant_id: `t${(k % KEYS) % 10}`, id: `k${k % KEYS}`, fields: { text, n: written + j, v: vector } });
  }
  const res = await fetch(`${base}/v1/records/put-batch`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ records }) });
  if (res.status !== 200) throw new Error(`put-batch: ${res.status} ${await res.text()}`);
  await res.arrayBuffer();
  written += BATCH;
  if (written >= next) {
    next += EVERY;
    console.log(JSON.stringify({ written, seconds: Math.round((performance.now() - t0) / 1000), ...(await figures()) }));
  }
}
for (;;) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const lag = [...text.matchAll(/^braid_branch_(?:text|vector)_index_lag_rows\{[^}]*\} (\S+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
  if (lag === 0) break;
  await new Promise((r) => setTimeout(r, 500));
}
console.log(JSON.stringify({ indexed: true, ...(await figures()) }));
await fetch(`${base}/v1/admin/snapshot`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'churn' }) });
await new Promise((r) => setTimeout(r, 5_000));
console.log(JSON.stringify({ after_checkpoint: true, ...(await figures()) }));
server.kill('SIGTERM');
await exited;
rmSync(dataDir, { recursive: true, force: true });
