#!/usr/bin/env node
// HTTP throughput of the engine (npm run bench:http; also part 1 of
// bench/service.mjs): gets, single durable puts at 1 and 32 concurrent
// clients and put-batch of 1,000 small records, against a bare fastify route
// doing no work (bench/bare-server.mjs) as this machine's HTTP ceiling,
// measured before and after the engine's cases. The servers run pinned to
// core 0 and the load generator (wrk when installed, else autocannon;
// bench/service/load.mjs) to core 1. Each case runs untimed for a moment
// first, starts once the engine's indexes have caught up with earlier
// writes, and reports how busy each core was.
//
//   node bench/http.mjs [--seconds 5] [--warmup-seconds 1] [--skip-build]
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLIENT_CORE, SERVER_CORE, build, flag, hasWrk, log, pin, pinned, runChild, startBraid, startServer, stopServer } from './service/common.mjs';

const tag = Date.now().toString(36);
const batchRecords = Array.from({ length: 1000 }, (_, i) => ({ table: 'bench', tenant_id: `t${i % 4}`, id: `batch-${i}`, fields: { title: `batch record ${i} about solar wind`, n: i % 100 } }));
const BARE = { server: 'bare', connections: 32, path: '/noop', body: '{"table":"bench","tenant_id":"t1","id":"x"}' };
const PUT = { server: 'braid', path: '/v1/records/put', body: `{"record":{"table":"bench","tenant_id":"t{seq%4}","id":"${tag}-{seq}","fields":{"title":"record {seq} about solar wind and rain","n":{seq%100}}}}` };
const SEEDS = 2000;

/**
 * The cases in the order they run; bodies are templates (bench/service/load.mjs).
 * `target`: the least req/s as a share of the bare route's (issue 13).
 */
export const CASES = [
  { id: 'bare_before', name: 'bare fastify POST (no work), before', ...BARE },
  { id: 'get_32', name: 'get, 32 clients', server: 'braid', connections: 32, path: '/v1/records/get', body: '{"table":"bench","tenant_id":"t{rand%4}","id":"seed-{rand}"}', range: SEEDS, target: 0.7 },
  { id: 'put_1', name: 'put, 1 client', ...PUT, connections: 1 },
  { id: 'put_32', name: 'put, 32 clients', ...PUT, connections: 32, target: 0.5 },
  { id: 'put_batch_4', name: 'put-batch of 1,000 records, 4 clients', server: 'braid', connections: 4, path: '/v1/records/put-batch', body: JSON.stringify({ records: batchRecords }), recordsPerRequest: 1000 },
  { id: 'bare_after', name: 'bare fastify POST (no work), after', ...BARE },
];

/**
 * Waits until the engine's indexes have taken every committed row (the lag
 * gauges of GET /metrics are 0), so the indexing a case's writes leave behind
 * on the server's core is not charged to the next case.
 */
async function settle(url, limitMs = 180_000) {
  const t0 = performance.now();
  for (;;) {
    const text = await (await fetch(`${url}/metrics`)).text();
    const lag = [...text.matchAll(/^braid_branch_(?:text|vector)_index_lag_rows\{[^}]*\} (\d+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
    if (lag === 0) return performance.now() - t0;
    if (performance.now() - t0 > limitMs) {
      log(`[http] indexes still ${lag} rows behind after ${limitMs / 1000} s; going on`);
      return performance.now() - t0;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function seed(url) {
  const records = Array.from({ length: SEEDS }, (_, i) => ({ table: 'bench', tenant_id: `t${i % 4}`, id: `seed-${i}`, fields: { title: `seed ${i}`, n: i } }));
  const res = await fetch(`${url}/v1/records/put-batch`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ records }) });
  if (res.status !== 200) throw new Error(`seeding: ${res.status} ${await res.text()}`);
}

/**
 * Runs every case for `seconds`; returns the rows and the bare route's
 * req/s (the mean of its runs before and after) every ratio divides by.
 */
export async function throughput({ seconds, warmupSeconds = 1 }) {
  // the server's data directory and the load generator's case files
  const work = mkdtempSync(path.join(tmpdir(), 'braid-http-bench-'));
  const servers = {};
  try {
    servers.braid = await startBraid(path.join(work, 'data'));
    servers.bare = await startServer(pin(SERVER_CORE, [process.execPath, 'bench/bare-server.mjs']), {}, 'bare fastify');
    await seed(servers.braid.url);
    const rows = [];
    for (const c of CASES) {
      const server = servers[c.server];
      const spec = path.join(work, `${c.id}.json`);
      writeFileSync(spec, JSON.stringify({ path: c.path, body: c.body, range: c.range }));
      const load = (s) => runChild('service/load.mjs', ['--url', server.url, '--spec', spec, '--connections', String(c.connections), '--seconds', String(s), '--server-pid', String(server.child.pid)], CLIENT_CORE);
      // a short untimed run first: connections open, the server's code paths warm
      if (warmupSeconds > 0) await load(warmupSeconds);
      const settle_ms = await settle(servers.braid.url);
      const r = await load(seconds);
      const row = { id: c.id, name: c.name, route: c.path, connections: c.connections, ...r, records_per_s: r.rps * (c.recordsPerRequest ?? 1), settle_ms, target: c.target ?? null };
      rows.push(row);
      log(`[http] ${c.name}: ${row.rps.toFixed(0)} req/s, p50 ${row.p50_ms} ms, p99 ${row.p99_ms} ms, non-2xx ${row.non2xx}, errors ${row.errors}, server ${pct(row.server_cpu)} of core ${SERVER_CORE} (busy ${pct(row.cores_busy[SERVER_CORE])}), client ${pct(row.client_cpu)} of core ${CLIENT_CORE} (busy ${pct(row.cores_busy[CLIENT_CORE])})`);
    }
    const bare = rows.filter((r) => r.id.startsWith('bare'));
    const bareRps = bare.reduce((a, r) => a + r.rps, 0) / bare.length;
    for (const r of rows) r.vs_bare = r.rps / bareRps;
    return { generator: rows[0].generator, pinned, seconds, warmup_seconds: warmupSeconds, bare_rps: bareRps, cases: rows };
  } finally {
    await Promise.all(Object.values(servers).map(stopServer));
    rmSync(work, { recursive: true, force: true });
  }
}

const pct = (x) => `${Math.round(x * 100)}%`;

export function throughputTable(t) {
  const lines = [
    `${t.seconds} s per case after ${t.warmup_seconds} s untimed;${t.generator.startsWith('autocannon') ? ' latencies in whole ms (autocannon);' : ''} indexes caught up before each case; ${t.pinned ? `servers on core ${SERVER_CORE}, ${t.generator} on core ${CLIENT_CORE}` : `not pinned (no taskset or one core), ${t.generator}`}; bare ceiling = mean of its two runs, ${t.bare_rps.toFixed(0)} req/s.`,
    '',
    `| case | req/s | records/s | p50 ms | p99 ms | non-2xx + errors | core ${SERVER_CORE}: server / all busy | core ${CLIENT_CORE}: client / all busy | req/s vs bare | target |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  const digits = t.generator.startsWith('autocannon') ? 0 : 2;
  for (const r of t.cases) {
    const target = r.target === null ? '' : `>= ${r.target}x: ${r.vs_bare >= r.target ? 'met' : 'NOT met'}`;
    lines.push(`| ${r.name} | ${r.rps.toFixed(0)} | ${r.records_per_s.toFixed(0)} | ${r.p50_ms?.toFixed(digits) ?? '-'} | ${r.p99_ms?.toFixed(digits) ?? '-'} | ${r.non2xx + r.errors} | ${pct(r.server_cpu)} / ${pct(r.cores_busy[SERVER_CORE])} | ${pct(r.client_cpu)} / ${pct(r.cores_busy[CLIENT_CORE])} | ${r.vs_bare.toFixed(2)}x | ${target} |`);
  }
  return lines.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (!process.argv.includes('--skip-build')) build();
  const seconds = Number(flag('seconds', process.env.BENCH_SECONDS ?? 5));
  log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}); load generator: ${hasWrk ? 'wrk' : 'autocannon'}`);
  console.log(throughputTable(await throughput({ seconds, warmupSeconds: Number(flag('warmup-seconds', 1)) })));
}
