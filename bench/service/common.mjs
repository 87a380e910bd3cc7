// What the service benchmark's processes share (bench/service.mjs, bench/http.mjs
// and the children in this folder): where the release addon is, core pinning,
// starting and stopping a server, running a pinned child that writes JSON,
// CPU time of a process, latency summaries, and the one definition of the
// table, its records and its queries that both the embedded and the HTTP
// side use.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TABLE, columns, f32 } from '../braid-schema.mjs';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const nativeDir = path.join(root, 'target', 'bench-native');
/** Every child sees the release addon; the engine logs errors only. */
export const childEnv = { BRAID_NATIVE_DIR: process.env.BRAID_NATIVE_DIR ?? nativeDir, RUST_LOG: process.env.RUST_LOG ?? 'error' };

export function flag(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

export function log(msg) {
  process.stderr.write(`${msg}\n`);
}

/**
 * The release addon (scripts/build-native.mjs --release, into
 * target/bench-native, leaving the dev addon the tests load alone) and the
 * TypeScript half of scripts/build.mjs, as bench/hybrid.mjs builds them.
 */
export function build() {
  for (const argv of [['scripts/build-native.mjs', '--release'], [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json']]) {
    log(`$ node ${argv.join(' ')}`);
    const res = spawnSync(process.execPath, argv, { cwd: root, stdio: 'inherit' });
    if (res.status !== 0) throw new Error(`node ${argv.join(' ')} failed with status ${res.status}`);
  }
}

function has(cmd) {
  try {
    execFileSync('which', [cmd], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export const hasWrk = has('wrk');
/** Servers run on core 0 and load generators on core 1; without taskset or a second core nothing is pinned. */
export const pinned = has('taskset') && cpus().length >= 2;
export const SERVER_CORE = 0;
export const CLIENT_CORE = 1;
export const pin = (core, argv) => (pinned ? ['taskset', '-c', String(core), ...argv] : argv);

/**
 * Starts a server (argv already pinned) and resolves once its stdout says
 * `listening on <url>`; `exited` resolves when it ends.
 */
export function startServer(argv, env, label) {
  const [cmd, ...args] = argv;
  const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ child, exited, url: m[1], label });
    });
    child.once('exit', (code, signal) => reject(new Error(`${label} exited with ${signal ?? code} before listening: ${out}`)));
  });
}

/** The Braid server (`braid serve`) on a data directory, pinned to the server core, configured through its environment. */
export function startBraid(dataDir) {
  const env = { ...childEnv, BRAID_DATA_DIR: dataDir, BRAID_PORT: '0', BRAID_HOST: '127.0.0.1', BRAID_LOG_LEVEL: 'error' };
  return startServer(pin(SERVER_CORE, [process.execPath, 'bin/braid.js', 'serve']), env, 'braid serve');
}

/** SIGTERM, then waits: the engine closes (and checkpoints) before the data directory is used again. */
export async function stopServer(server) {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return;
  const timer = setTimeout(() => server.child.kill('SIGKILL'), 60_000);
  server.child.kill('SIGTERM');
  await server.exited;
  clearTimeout(timer);
}

/**
 * Runs `node <script> ...args --out <file>` pinned to `core` (or unpinned
 * when core is null) and resolves with the JSON the child wrote.
 */
export function runChild(script, args, core) {
  const out = path.join(tmpdir(), `braid-service-${process.pid}-${path.basename(script, '.mjs')}-${Date.now()}.json`);
  const argv = [process.execPath, path.join(root, 'bench', script), ...args, '--out', out];
  const [cmd, ...rest] = core === null ? argv : pin(core, argv);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, rest, { cwd: root, env: { ...process.env, ...childEnv }, stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('exit', (code, signal) => {
      try {
        if (code !== 0) throw new Error(`${script} ${args.join(' ')} exited with ${signal ?? code}`);
        resolve(JSON.parse(readFileSync(out, 'utf8')));
      } catch (err) {
        reject(err);
      } finally {
        rmSync(out, { force: true });
      }
    });
  });
}

const clockTicks = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * CPU seconds (user + system, every thread) a process has used; with
 * `children`, also those of the children it has waited for (wrk).
 */
export function cpuSeconds(pid = 'self', children = false) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // fields after the parenthesised command name: utime is the 14th field, stime the 15th
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
  const ticks = f[11] + f[12] + (children ? f[13] + f[14] : 0);
  return ticks / clockTicks;
}

/** Busy and total jiffies of each core, from /proc/stat. */
export function coreTimes() {
  const out = [];
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+) (.*)/.exec(line);
    if (!m) continue;
    const [user, nice, system, idle, iowait, irq, softirq, steal] = m[2].trim().split(/\s+/).map(Number);
    const busy = user + nice + system + irq + softirq + steal;
    out[Number(m[1])] = { busy, total: busy + idle + iowait };
  }
  return out;
}

/** The share of each core that was busy (with anything, not only our processes) between two coreTimes(). */
export function coreBusy(before, after = coreTimes()) {
  return after.map((a, i) => (a.busy - before[i].busy) / Math.max(1, a.total - before[i].total));
}

/** p50, p99 and mean of latencies in milliseconds (nearest rank). */
export function summarise(samples) {
  const sorted = Float64Array.from(samples).sort();
  const at = (p) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
  return { samples: sorted.length, p50_ms: at(50), p99_ms: at(99), mean_ms: sorted.reduce((a, b) => a + b, 0) / sorted.length };
}

export const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

/** The engine's own time for a query (its explain's `total` phase), to tell it from the time around it. */
export const engineMs = (res) => res.explain.phase_timings.find((p) => p.phase === 'total')?.elapsed_ms ?? 0;

// -- the table, records and queries both sides use

export { TABLE, columns };
export const TOP_K = 10;
export const KINDS = ['text', 'vector', 'hybrid'];

/**
 * A vector as the embedded side passes it (`Float32Array`, the binding's
 * typed path) or as a JSON body carries it (numbers).
 */
const vectorAs = (v, json) => (json ? Array.from(v, f32) : Float32Array.from(v));

/** Corpus record `src` under id `id` (`json`: vectors as numbers, for a request body). */
export function record(corpus, src, id, json) {
  return {
    table: TABLE,
    tenant_id: corpus.tenant(src),
    id,
    fields: {
      text: corpus.text(src),
      category: corpus.category(src),
      year: corpus.year[src],
      flag: corpus.flag[src] === 1,
      embedding: vectorAs(corpus.vector(src), json),
    },
  };
}

/**
 * Batch `b` of `size` records: the corpus's records from b * size on
 * (wrapping around), each under an id of its own batch, so every batch
 * writes new keys.
 */
export function batch(corpus, b, size, json) {
  return Array.from({ length: size }, (_, i) => {
    const src = (b * size + i) % corpus.n;
    return record(corpus, src, `b${b}-${corpus.id(src)}`, json);
  });
}

/** Top-10 ids only: `text` (BM25), `vector` or `hybrid` (both, fused with RRF), engine defaults otherwise. */
export function query(kind, q, json) {
  const out = { table: TABLE, tenant_id: q.tenant, top_k: TOP_K, return_fields: [] };
  if (kind !== 'vector') Object.assign(out, { text: q.text, text_field: 'text' });
  if (kind !== 'text') Object.assign(out, { vector: vectorAs(q.vector, json), vector_field: 'embedding' });
  return out;
}
