// The load generator of bench/http.mjs: one case for --seconds at
// --connections, with wrk when it is installed, else autocannon (a
// devDependency). The harness pins this process to the client core; wrk
// inherits the pinning.
//
//   node bench/service/load.mjs --url U --spec FILE --connections C --seconds S [--server-pid P] --out F
//
// FILE holds {path, body, range} as JSON (a put-batch body is too long for an
// argument).
//
// A body is a template: {seq} is the request's sequence number, {rand} a
// random integer in [0, range) drawn once per request, and {seq%K} or
// {rand%K} the same modulo K. Both generators expand the same template.
//
// Writes { generator, rps (2xx responses per second), p50_ms, p99_ms,
// non2xx, errors, wall_s, client_cpu and server_cpu (CPU seconds per wall
// second: this process with wrk, and the server), cores_busy (each core's
// busy share, every process on the machine counted) }.
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { coreBusy, coreTimes, cpuSeconds, flag, hasWrk } from './common.mjs';

const TOKEN = /\{(seq|rand)(?:%(\d+))?\}/g;

const url = flag('url', '');
const spec = JSON.parse(readFileSync(flag('spec', ''), 'utf8'));
const connections = Number(flag('connections', 32));
const seconds = Number(flag('seconds', 5));
const out = flag('out', '');
const serverPid = flag('server-pid', null);

function viaAutocannon() {
  const range = spec.range ?? 1;
  let seq = 0;
  const expand = () => {
    seq += 1;
    const rand = Math.floor(Math.random() * range);
    return spec.body.replace(TOKEN, (_, name, mod) => {
      const x = name === 'seq' ? seq : rand;
      return String(mod ? x % Number(mod) : x);
    });
  };
  const request = { method: 'POST', path: spec.path, headers: { 'content-type': 'application/json' } };
  const templated = TOKEN.test(spec.body);
  TOKEN.lastIndex = 0;
  const requests = [templated ? { ...request, setupRequest: (req) => ({ ...req, body: expand() }) } : { ...request, body: spec.body }];
  return new Promise((resolve, reject) => {
    autocannon({ url, connections, duration: seconds, requests }, (err, r) => {
      if (err) return reject(err);
      // autocannon records latency in whole milliseconds
      resolve({ generator: 'autocannon 8', rps: r['2xx'] / r.duration, p50_ms: r.latency.p50, p99_ms: r.latency.p99, non2xx: r.non2xx, errors: r.errors + r.timeouts });
    });
  });
}

/** The same template as a wrk Lua script: string.format with %d for each token. */
function luaScript() {
  const args = [];
  const format = spec.body
    .replace(TOKEN, (_, name, mod) => {
      args.push(mod ? `${name} % ${mod}` : name);
      return '\u0000';
    })
    .replaceAll('%', '%%')
    .replaceAll('\u0000', '%d');
  const head = `wrk.method = "POST"\nwrk.path = "${spec.path}"\nwrk.headers["Content-Type"] = "application/json"\n`;
  if (args.length === 0) return `${head}wrk.body = [==[${spec.body}]==]\n`;
  return `${head}local seq = 0
request = function()
  seq = seq + 1
  local rand = math.random(0, ${(spec.range ?? 1) - 1})
  return wrk.format(nil, nil, nil, string.format([==[${format}]==], ${args.join(', ')}))
end
`;
}

function parseWrk(text) {
  const unit = (v, u) => Number(v) * ({ us: 0.001, ms: 1, s: 1000 }[u] ?? 1);
  const pct = (p) => {
    const m = new RegExp(`\\s${p}%\\s+([\\d.]+)(us|ms|s)`).exec(text);
    return m ? unit(m[1], m[2]) : null;
  };
  const requests = Number(/(\d+) requests in ([\d.]+)(us|ms|s|m)/.exec(text)?.[1] ?? 0);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? 0);
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text)?.slice(1).reduce((a, b) => a + Number(b), 0) ?? 0;
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
  // Requests/sec counts every response; keep only the 2xx share
  return { generator: 'wrk', rps: requests ? (rps * (requests - non2xx)) / requests : rps, p50_ms: pct(50), p99_ms: pct(99), non2xx, errors };
}

function viaWrk() {
  const file = path.join(tmpdir(), `braid-load-${process.pid}.lua`);
  writeFileSync(file, luaScript());
  try {
    const text = execFileSync('wrk', ['-t', '1', '-c', String(connections), '-d', `${seconds}s`, '--latency', '-s', file, url], { encoding: 'utf8' });
    return parseWrk(text);
  } finally {
    rmSync(file, { force: true });
  }
}

// CPU is counted over the load's own window: this process (and wrk), the server, and each core as a whole
const cpu0 = cpuSeconds('self', true);
const server0 = serverPid ? cpuSeconds(serverPid) : 0;
const cores0 = coreTimes();
const t0 = performance.now();
const result = hasWrk ? viaWrk() : await viaAutocannon();
const wall = (performance.now() - t0) / 1000;
const cpu = {
  wall_s: wall,
  client_cpu: (cpuSeconds('self', true) - cpu0) / wall,
  server_cpu: serverPid ? (cpuSeconds(serverPid) - server0) / wall : null,
  cores_busy: coreBusy(cores0),
};
writeFileSync(out, JSON.stringify({ ...result, connections, seconds, ...cpu }));
