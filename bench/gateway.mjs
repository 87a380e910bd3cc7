#!/usr/bin/env node
// Gateway overhead: req/s and p50/p99 latency of get and put through
// `braid gateway` against the engine directly, in one run.
//
//   node bench/gateway.mjs [--duration 5] [--connections 16] [--warmup 2]
//
// Starts its own engine and gateway (node bin/braid.js ...) on ephemeral
// loopback ports with a temp data dir. When taskset exists, the servers run
// on CPU 0 and this load generator on CPU 1. Needs dist/ (npm run build:ts).
import autocannon from 'autocannon';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cli = path.join(root, 'bin', 'braid.js');

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? Number(process.argv[i + 1]) : fallback;
}
const duration = arg('duration', 5);
const connections = arg('connections', 16);
const warmup = arg('warmup', 2);

const hasTaskset = spawnSync('taskset', ['-c', '0', 'true'], { stdio: 'ignore' }).status === 0;

// Pin this process (the load generator) to CPU 1 by re-running it under taskset.
if (hasTaskset && process.env.BRAID_BENCH_PINNED !== '1') {
  const res = spawnSync('taskset', ['-c', '1', process.execPath, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, BRAID_BENCH_PINNED: '1' },
  });
  process.exit(res.status ?? 1);
}

const children = [];

function startServer(args) {
  const command = hasTaskset ? 'taskset' : process.execPath;
  const argv = hasTaskset ? ['-c', '0', process.execPath, cli, ...args] : [cli, ...args];
  const child = spawn(command, argv, {
    cwd: root,
    env: { ...process.env, BRAID_LOG_LEVEL: 'error' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 60_000);
    child.stdout.on('data', () => {
      const m = /listening on (http:\/\/[^\s]+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}: ${out}`));
    });
  });
}

function stopAll() {
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
}

const TOKEN = 'bench-token';
const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` };
const KEYS = 1000;
const record = (id, n) => ({ table: 'bench', tenant_id: 't1', id, fields: { n, title: `record ${id}`, tags: ['a', 'b'] } });

async function post(url, body) {
  const res = await fetch(url, { method: 'POST', headers: HEADERS, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json();
}

function run(url, kind, seconds) {
  let n = 0;
  const requests = kind === 'get'
    ? [{
      method: 'POST',
      path: '/v1/records/get',
      setupRequest: (req) => ({ ...req, body: JSON.stringify({ table: 'bench', tenant_id: 't1', id: `r${n++ % KEYS}` }) }),
    }]
    : [{
      method: 'POST',
      path: '/v1/records/put',
      setupRequest: (req) => {
        const i = n++;
        return { ...req, body: JSON.stringify(record(`p${i % KEYS}`, i)) };
      },
    }];
  return new Promise((resolve, reject) => {
    autocannon({ url, connections, duration: seconds, headers: HEADERS, requests }, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-bench-gw-'));
process.on('exit', () => {
  stopAll();
  rmSync(dataDir, { recursive: true, force: true });
});
process.on('SIGINT', () => process.exit(130));

try {
  const engineUrl = await startServer(['serve', '--port', '0', '--data-dir', dataDir]);
  const gatewayUrl = await startServer([
    'gateway', '--port', '0', '--engine', engineUrl, '--token', TOKEN,
    // limiter on, with a budget the load cannot exhaust: its cost is part of the measurement
    '--rate-limit', '1000000000', '--rate-window', '1000',
  ]);
  for (let i = 0; i < KEYS; i += 500) {
    await post(`${engineUrl}/v1/records/put-batch`, { records: Array.from({ length: 500 }, (_, j) => record(`r${i + j}`, i + j)) });
  }

  const rows = [];
  for (const kind of ['get', 'put']) {
    for (const [target, url] of [['engine', engineUrl], ['gateway', gatewayUrl]]) {
      if (warmup > 0) await run(url, kind, warmup);
      const r = await run(url, kind, duration);
      rows.push({
        kind, target,
        rps: r.requests.average,
        p50: r.latency.p50,
        p99: r.latency.p99,
        total: r.requests.total,
        bad: r.errors + r.timeouts + r.non2xx,
      });
    }
  }

  const cpus = hasTaskset ? 'servers on CPU 0, load generator on CPU 1 (taskset)' : 'no taskset: unpinned';
  console.log(`gateway bench: ${duration} s per case, ${connections} connections, node ${process.version}, ${cpus}`);
  console.log('');
  console.log('| case | target  |   req/s | p50 ms | p99 ms | requests | errors/non-2xx |');
  console.log('|------|---------|--------:|-------:|-------:|---------:|---------------:|');
  for (const r of rows) {
    console.log(`| ${r.kind.padEnd(4)} | ${r.target.padEnd(7)} | ${r.rps.toFixed(0).padStart(7)} | ${r.p50.toFixed(2).padStart(6)} | ${r.p99.toFixed(2).padStart(6)} | ${String(r.total).padStart(8)} | ${String(r.bad).padStart(14)} |`);
  }
  console.log('');
  console.log('| case | gateway/engine req/s | p50 gateway/engine | p99 gateway/engine |');
  console.log('|------|---------------------:|-------------------:|-------------------:|');
  for (const kind of ['get', 'put']) {
    const e = rows.find((r) => r.kind === kind && r.target === 'engine');
    const g = rows.find((r) => r.kind === kind && r.target === 'gateway');
    const ratio = (a, b) => (b > 0 ? (a / b).toFixed(2) : 'n/a');
    console.log(`| ${kind.padEnd(4)} | ${ratio(g.rps, e.rps).padStart(20)} | ${ratio(g.p50, e.p50).padStart(18)} | ${ratio(g.p99, e.p99).padStart(18)} |`);
  }
} catch (err) {
  console.error(err);
  process.exitCode = 1;
} finally {
  stopAll();
}
