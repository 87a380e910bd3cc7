#!/usr/bin/env node
// HTTP benchmark of the engine (npm run bench:http): single puts at 1 and 32
// concurrent clients, put-batch of 1,000 records, and gets, plus a bare
// fastify route doing no work as this machine's HTTP ceiling. The server runs
// pinned to core 0 and the load generator (wrk, else autocannon) to core 1.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const has = (cmd) => {
  try {
    execFileSync('which', [cmd], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};
const pin = (core, argv) => (has('taskset') ? ['taskset', '-c', String(core), ...argv] : argv);

function build() {
  execFileSync(process.execPath, [path.join(root, 'scripts', 'build-native.mjs'), '--release'], { stdio: 'inherit' });
  execFileSync(process.execPath, [path.join(root, 'scripts', 'build.mjs')], { stdio: 'inherit' });
}

function start(argv, env, pattern) {
  const [cmd, ...args] = argv;
  const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = pattern.exec(out);
      if (m) resolve({ child, url: m[1] });
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
}

const luaHeader = `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n`;
function script(name, body) {
  const file = path.join(tmpdir(), `braid-bench-${name}.lua`);
  writeFileSync(file, luaHeader + body);
  return file;
}

const putLua = script('put', `
local n = 0
local tag = tostring(math.random(1, 1000000000))
request = function()
  n = n + 1
  local body = string.format('{"record":{"table":"bench","tenant_id":"t%d","id":"%s-%d","fields":{"title":"record %d about solar wind and rain","n":%d}}}', n % 4, tag, n, n, n % 100)
  return wrk.format(nil, "/v1/records/put", nil, body)
end`);

const batchRecords = Array.from({ length: 1000 }, (_, i) => ({ table: 'bench', tenant_id: `t${i % 4}`, id: `batch-${i}`, fields: { title: `batch record ${i} about solar wind`, n: i % 100 } }));
const batchLua = script('batch', `wrk.body = [[${JSON.stringify({ records: batchRecords })}]]\nwrk.path = "/v1/records/put-batch"\n`);

const getLua = script('get', `
request = function()
  local i = math.random(0, 1999)
  local body = string.format('{"table":"bench","tenant_id":"t%d","id":"seed-%d"}', i % 4, i)
  return wrk.format(nil, "/v1/records/get", nil, body)
end`);

const noopLua = script('noop', `wrk.body = '{"table":"bench","tenant_id":"t1","id":"x"}'\nwrk.path = "/noop"\n`);

function parseWrk(out) {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
  const unit = (v, u) => Number(v) * ({ us: 0.001, ms: 1, s: 1000 }[u] ?? 1);
  const pct = (p) => {
    const m = new RegExp(`\\s${p}%\\s+([\\d.]+)(us|ms|s)`).exec(out);
    return m ? unit(m[1], m[2]) : NaN;
  };
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  return { rps, p50: pct(50), p99: pct(99), errors: non2xx };
}

async function load(url, luaFile, connections) {
  if (has('wrk')) {
    const [cmd, ...args] = pin(1, ['wrk', '-t', '1', '-c', String(connections), '-d', `${seconds}s`, '--latency', '-s', luaFile, url]);
    const out = execFileSync(cmd, args, { encoding: 'utf8' });
    return parseWrk(out);
  }
  throw new Error('wrk is not installed: apt-get install wrk');
}

async function main() {
  build();
  const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-http-bench-'));
  const env = { BRAID_NATIVE_DIR: path.join(root, 'target', 'bench-native'), BRAID_LOG_LEVEL: 'error' };
  const engine = await start(pin(0, [process.execPath, 'bin/braid.js', 'serve', '--port', '0', '--data-dir', dataDir]), env, /listening on (http:\/\/\S+)/);
  const bare = await start(pin(0, [process.execPath, 'bench/bare-server.mjs']), {}, /listening on (http:\/\/\S+)/);
  try {
    // seed records for the get benchmark
    const seed = Array.from({ length: 2000 }, (_, i) => ({ table: 'bench', tenant_id: `t${i % 4}`, id: `seed-${i}`, fields: { title: `seed ${i}`, n: i } }));
    await fetch(`${engine.url}/v1/records/put-batch`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ records: seed }) });
    const cases = [
      ['bare fastify POST (no work)', bare.url, noopLua, 32],
      ['put, 1 client', engine.url, putLua, 1],
      ['put, 32 clients', engine.url, putLua, 32],
      ['put-batch of 1,000 records, 4 clients', engine.url, batchLua, 4],
      ['get, 32 clients', engine.url, getLua, 32],
    ];
    const rows = [];
    for (const [name, url, lua, conns] of cases) {
      const r = await load(url, lua, conns);
      rows.push({ name, ...r });
      console.error(`${name}: ${r.rps.toFixed(0)} req/s p50 ${r.p50} ms p99 ${r.p99} ms errors ${r.errors}`);
    }
    const ceiling = rows[0].rps;
    const cpu = cpus()[0]?.model ?? 'unknown';
    let table = `Machine: ${cpus().length} cores (${cpu}); ${seconds} s per case; server on core 0, wrk on core 1.\n\n`;
    table += '| case | req/s | records/s | p50 ms | p99 ms | non-2xx | req/s vs bare fastify |\n|---|---:|---:|---:|---:|---:|---:|\n';
    for (const r of rows) {
      const perReq = r.name.startsWith('put-batch') ? 1000 : 1;
      table += `| ${r.name} | ${r.rps.toFixed(0)} | ${(r.rps * perReq).toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.errors} | ${(r.rps / ceiling).toFixed(2)} |\n`;
    }
    console.log(table);
  } finally {
    engine.child.kill('SIGTERM');
    bare.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

if (!existsSync(path.join(root, 'bin', 'braid.js'))) throw new Error('run from a checkout');
await main();
