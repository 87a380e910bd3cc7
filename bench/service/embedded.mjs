// The embedded side of bench/service.mjs, one task per run, in its own process
// (the harness pins it to the server's core, except `load`):
//
//   --task prepare --data-dir D           declares the table, closes
//   --task load --data-dir D --records N  declares the table, putBatch of the corpus in chunks of 5,000, waitIndexed, closes
//   --task latency --data-dir D --records N --warmup W --passes P
//                                          the fixed queries of each kind one at a time: W warm-up queries of every kind, then
//                                          per kind W warm-up queries and P timed passes;
//                                          the vector kinds again with the vector as plain numbers; with --idle-ms I,
//                                          every kind again with the thread asleep I ms before each query (as a
//                                          server's core sleeps between one client's requests)
//   --task batches --data-dir D --records N --batch-size S --batches B --warmup-batches W [--vectors typed|numbers]
//                                          putBatch of S fresh records, one at a time: W warm-up batches, then B timed;
//                                          vectors as Float32Array (default) or as the arrays of numbers a parsed JSON body holds
//
// Writes its result as JSON to --out. The corpus comes from bench/corpus.mjs
// (BRAID_BENCH_CORPUS is set by the harness).
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { KINDS, TABLE, batch, columns, engineMs, flag, log, msSince, query, record, root, summarise } from './common.mjs';

const { loadCorpus } = await import('../corpus.mjs');
const { Braid } = await import(path.join(root, 'dist', 'index.js'));

const task = flag('task', '');
const dataDir = flag('data-dir', '');
const records = Number(flag('records', 100_000));
const out = flag('out', '');
const INDEX_TIMEOUT_MS = 30 * 60_000;

function open() {
  const t0 = process.hrtime.bigint();
  const db = Braid.open({ dataDir });
  return { db, open_ms: msSince(t0) };
}

async function prepare(corpus) {
  const { db } = open();
  await db.declareTable(TABLE, columns(corpus.dim));
  db.close();
  return {};
}

async function load(corpus) {
  const { db } = open();
  await db.declareTable(TABLE, columns(corpus.dim));
  const chunk = 5_000;
  const t0 = process.hrtime.bigint();
  for (let start = 0; start < corpus.n; start += chunk) {
    const rows = [];
    for (let i = start; i < Math.min(corpus.n, start + chunk); i++) rows.push(record(corpus, i, corpus.id(i), false));
    await db.putBatch(rows);
  }
  const writes_ms = msSince(t0);
  if (!(await db.waitIndexed(INDEX_TIMEOUT_MS))) throw new Error('waitIndexed timed out');
  const index_wait_ms = msSince(t0) - writes_ms;
  db.close();
  return { records: corpus.n, chunk, writes_ms, index_wait_ms };
}

async function latency(corpus) {
  const warmup = Number(flag('warmup', 30));
  const passes = Number(flag('passes', 3));
  const { db, open_ms } = open();
  const t0 = process.hrtime.bigint();
  if (!(await db.waitIndexed(INDEX_TIMEOUT_MS))) throw new Error('waitIndexed timed out');
  const index_wait_ms = msSince(t0);
  const idleMs = Number(flag('idle-ms', 0));
  const asleep = new Int32Array(new SharedArrayBuffer(4));
  const warm = async (queries) => {
    for (const q of queries.slice(0, warmup)) await db.query(q);
  };
  // one pass set: warm-up, then `passes` passes over the queries, one at a time, each after `idle` ms asleep
  async function timed(queries, ids, idle = 0) {
    await warm(queries);
    const samples = [];
    const outside = [];
    for (let pass = 0; pass < passes; pass++) {
      for (const q of queries) {
        if (idle > 0) Atomics.wait(asleep, 0, 0, idle);
        const t = process.hrtime.bigint();
        const res = await db.query(q);
        const ms = msSince(t);
        samples.push(ms);
        outside.push(ms - engineMs(res));
        if (pass === 0 && ids) ids.push(res.results.map((r) => r.record_id));
      }
    }
    return { ...summarise(samples), outside: summarise(outside) };
  }
  // every kind warms once before the first is timed, so the first is not the one that pays for a cold start
  for (const kind of KINDS) await warm(corpus.queries.map((q) => query(kind, q, false)));
  const kinds = {};
  const ids = {};
  for (const kind of KINDS) {
    ids[kind] = [];
    kinds[kind] = await timed(corpus.queries.map((q) => query(kind, q, false)), ids[kind]);
    log(`[embedded] ${kind}: p50 ${kinds[kind].p50_ms.toFixed(3)} ms over ${kinds[kind].samples} queries`);
    // the same with the vector as the array of numbers a parsed JSON body holds (no target; where the time goes)
    if (kind !== 'text') kinds[kind].numbers = await timed(corpus.queries.map((q) => query(kind, q, true)), null);
    if (idleMs > 0) {
      kinds[kind].after_idle = { idle_ms: idleMs, ...(await timed(corpus.queries.map((q) => query(kind, q, false)), null, idleMs)) };
      log(`[embedded] ${kind}, ${idleMs} ms asleep before each: p50 ${kinds[kind].after_idle.p50_ms.toFixed(3)} ms`);
    }
  }
  db.close();
  return { open_ms, index_wait_ms, warmup, passes, kinds, ids };
}

async function batches(corpus) {
  const size = Number(flag('batch-size', 1_000));
  const count = Number(flag('batches', 10));
  const warmup = Number(flag('warmup-batches', 2));
  const vectors = flag('vectors', 'typed');
  // built before any timing, as the HTTP client serialises its bodies beforehand
  const all = Array.from({ length: warmup + count }, (_, b) => batch(corpus, b, size, vectors === 'numbers'));
  const { db } = open();
  const samples = [];
  for (const [b, rows] of all.entries()) {
    const t = process.hrtime.bigint();
    const res = await db.putBatch(rows);
    const ms = msSince(t);
    if (res.committed?.record_count !== size) throw new Error(`batch ${b}: committed ${JSON.stringify(res)}`);
    if (b >= warmup) samples.push(ms);
  }
  db.close();
  return { batch_size: size, batches: count, warmup_batches: warmup, vectors, batch_ms: samples };
}

const TASKS = { prepare, load, latency, batches };
if (!TASKS[task] || !dataDir || !out) throw new Error(`usage: embedded.mjs --task ${Object.keys(TASKS).join('|')} --data-dir D --out F`);
const corpus = loadCorpus(records);
writeFileSync(out, JSON.stringify(await TASKS[task](corpus)));
