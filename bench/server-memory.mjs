// The HTTP server's memory while it loads a corpus (issue 11's "at most 2x
// the raw bytes of the records' vectors and text"): `braid serve` on the
// release addon, the corpus of bench/hybrid.mjs (synthetic, or WordNet with
// BRAID_BENCH_CORPUS=wordnet) written with put-batches of 2,500 records, as
// bench/hybrid.mjs's braid-http does, until every index covers them. Its
// /proc status is read every 5 ms, so the peak is the process's own VmHWM
// split into anonymous memory (the process's own) and mapped file pages
// (page cache the kernel may drop and read again), with the engine's own
// per-structure estimate (braid_branch_memory_bytes) beside it, and the
// anonymous memory by the kind of region that holds it at the largest of
// the samples taken 4 times a second (C heap, the addon's allocator, V8).
// V8's own figures come from the server's /metrics, scraped every 15 s as
// Prometheus would (--scrape-ms): scraped 4 times a second, the scrapes
// alone grew V8's young generation by 12 MB and the peak by about 20 MB
// (bench/JOURNAL.md, "The twentieth session").
//
//   node scripts/build-native.mjs --release && npm run build:ts
//   [BRAID_BENCH_CORPUS=wordnet] node bench/server-memory.mjs [--records 100000] [--scrape-ms 15000]
import http from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CORPUS_KIND, ensureCorpus, loadCorpus } from './corpus.mjs';
import { TABLE, columns, f32 } from './braid-schema.mjs';
import { flag } from './peers/common.mjs';
import { startServer } from './server-process.mjs';

const records = Number(flag('records', 100_000));
const scrapeMs = Number(flag('scrape-ms', 15_000));
const chunk = 2_500;
ensureCorpus(records);
const corpus = loadCorpus(records);
const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-server-memory-'));
const server = await startServer(dataDir);
const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });

function request(method, route, body) {
  const payload = body === undefined ? null : Buffer.from(JSON.stringify(body));
  const headers = payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {};
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}${route}`, { method, agent, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        if (res.statusCode !== 200) reject(new Error(`${route}: ${res.statusCode} ${text.slice(0, 300)}`));
        else resolve(text);
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const mb = (kb) => kb / 1024;
function status() {
  const text = readFileSync(`/proc/${server.child.pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(text)?.[1] ?? 0);
  return { rss: mb(kb('VmRSS')), anon: mb(kb('RssAnon')), file: mb(kb('RssFile')), hwm: mb(kb('VmHWM')) };
}

/** Resident file pages by the kind of file mapped (/proc/<pid>/smaps), in MB, largest first. */
function filePages() {
  const by = {};
  let file = null;
  for (const line of readFileSync(`/proc/${server.child.pid}/smaps`, 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s+(.*)$/.exec(line);
    if (head) {
      const name = head[1].trim();
      file = name.startsWith('/') && !name.includes('(deleted)') ? name : null;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && file) {
      const base = path.basename(file);
      const kind = file.includes(dataDir) ? base.replace(/[0-9a-f]{8,}|\d+/g, 'N') : base;
      by[kind] = (by[kind] ?? 0) + Number(rss[1]) / 1024;
    }
  }
  return Object.entries(by).filter(([, mb]) => mb >= 1).sort((a, b) => b[1] - a[1]).map(([k, mb]) => `${k} ${mb.toFixed(0)}`).join(', ');
}

/**
 * Resident anonymous memory by the kind of region holding it
 * (/proc/<pid>/smaps), in MB: the C heap (glibc's main arena: node's own
 * allocations, the Buffers V8 counts as external memory), regions of 512 MiB
 * and more (reservations of the addon's allocator, mimalloc: the engine),
 * regions under 1 MiB (V8's heap pages and the like) and the rest.
 */
function anonRegions() {
  const by = { 'C heap': 0, 'mimalloc (>= 512 MiB regions)': 0, 'regions < 1 MiB': 0, 'other regions': 0 };
  let kind = null;
  for (const line of readFileSync(`/proc/${server.child.pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const size = (Number.parseInt(head[2], 16) - Number.parseInt(head[1], 16)) / 2 ** 20;
      const name = head[3].trim();
      if (name === '[heap]') kind = 'C heap';
      else if (name !== '') kind = null;
      else if (size >= 512) kind = 'mimalloc (>= 512 MiB regions)';
      else if (size < 1) kind = 'regions < 1 MiB';
      else kind = 'other regions';
      continue;
    }
    const anon = /^Anonymous:\s+(\d+) kB/.exec(line);
    if (anon && kind) by[kind] += Number(anon[1]) / 1024;
  }
  return by;
}

/** The engine's estimate per structure, in MB. */
async function structures() {
  const out = {};
  for (const line of (await request('GET', '/metrics')).split('\n')) {
    const m = /^braid_branch_memory_bytes\{.*structure="(\w+)"\} (\S+)/.exec(line);
    if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[2]) / 2 ** 20;
  }
  return out;
}

/** V8's heap (total reserved) and external memory (Buffers), in MB. */
async function v8() {
  const text = await request('GET', '/metrics');
  const get = (name) => Number(new RegExp(`^braid_${name} (\\S+)`, 'm').exec(text)?.[1] ?? 0) / 2 ** 20;
  return { heap: get('nodejs_heap_size_total_bytes'), external: get('nodejs_external_memory_bytes') };
}

const idle = { ...status(), ...(await v8()) };
let v8Peak = { heap: 0, external: 0 };
let v8AtPeak = null; // a scrape taken within 3% of the peak, if one was
// the anonymous regions at the largest of the 4-a-second samples
let regionsAtPeak = { rss: 0, regions: anonRegions() };
let peak = { ...idle, at_s: 0, phase: 'idle' };
let phase = 'writes';
const t0 = performance.now();
const sampler = setInterval(() => {
  const s = status();
  if (s.rss > peak.rss) peak = { ...s, at_s: (performance.now() - t0) / 1000, phase };
}, 5);
// the anonymous regions, from /proc (no work for the server), 4 times a second
const regionSampler = setInterval(() => {
  const now = status().rss;
  if (now > regionsAtPeak.rss) regionsAtPeak = { rss: now, regions: anonRegions() };
}, 250);
// V8's figures come from /metrics, so they are read as a scraper would
const v8Sampler = setInterval(async () => {
  const v = await v8().catch(() => null);
  if (!v) return;
  v8Peak = { heap: Math.max(v8Peak.heap, v.heap), external: Math.max(v8Peak.external, v.external) };
  if (status().rss >= peak.rss * 0.97) v8AtPeak = v;
}, scrapeMs);

await request('POST', '/v1/graphql', {
  query: 'mutation($t: String!, $c: JSON!) { declare_table(table: $t, columns: $c) { epoch } }',
  variables: { t: TABLE, c: columns(corpus.dim) },
});
let rawBytes = 0;
for (let start = 0; start < corpus.n; start += chunk) {
  const batch = [];
  for (let i = start; i < Math.min(corpus.n, start + chunk); i++) {
    const text = corpus.text(i);
    rawBytes += Buffer.byteLength(text) + corpus.dim * 4;
    batch.push({
      table: TABLE,
      tenant_id: corpus.tenant(i),
      id: corpus.id(i),
      fields: { text, category: corpus.category(i), year: corpus.year[i], flag: corpus.flag[i] === 1, embedding: Array.from(corpus.vector(i), f32) },
    });
  }
  await request('POST', '/v1/records/put-batch', { records: batch });
}
const writesS = (performance.now() - t0) / 1000;
const afterWrites = { ...status(), structures: await structures(), files: filePages() };
phase = 'indexing';
const q = corpus.queries[0];
const probe = { table: TABLE, tenant_id: q.tenant, text: q.text, text_field: 'text', vector: Array.from(q.vector, f32), vector_field: 'embedding' };
while (JSON.parse(await request('POST', '/v1/explain', probe)).pending_feature_count > 0) await new Promise((r) => setTimeout(r, 100));
const indexedS = (performance.now() - t0) / 1000;
clearInterval(sampler);
clearInterval(regionSampler);
clearInterval(v8Sampler);
const end = { ...status(), structures: await structures(), ...(await v8()), files: filePages() };
server.child.kill('SIGTERM');
await server.exited;
agent.destroy();
rmSync(dataDir, { recursive: true, force: true });

const f = (x) => x.toFixed(0);
const raw = rawBytes / 2 ** 20;
console.log(`${records.toLocaleString('en')} ${CORPUS_KIND} records (${corpus.dim}-d), put-batches of ${chunk}; writes ${writesS.toFixed(1)} s, indexed ${indexedS.toFixed(1)} s`);
console.log(`raw vectors + text: ${f(raw)} MB (2x: ${f(2 * raw)} MB); /metrics scraped every ${scrapeMs} ms`);
console.log('');
console.log('| moment | RSS MB | anonymous MB | file pages MB | engine estimate MB (rows / keys / vectors / graphs) |');
console.log('|---|---:|---:|---:|---|');
const est = (s) => (s ? ['rows', 'keys', 'vectors', 'vector_graphs'].map((k) => f(s[k] ?? 0)).join(' / ') : '');
console.log(`| idle, before the first write | ${f(idle.rss)} | ${f(idle.anon)} | ${f(idle.file)} | |`);
console.log(`| peak (${peak.phase}, at ${peak.at_s.toFixed(1)} s) | **${f(peak.rss)}** (${(peak.rss / raw).toFixed(2)}x raw) | ${f(peak.anon)} | ${f(peak.file)} | |`);
console.log(`| after the writes | ${f(afterWrites.rss)} | ${f(afterWrites.anon)} | ${f(afterWrites.file)} | ${est(afterWrites.structures)} |`);
console.log(`| indexed | ${f(end.rss)} | ${f(end.anon)} | ${f(end.file)} | ${est(end.structures)} |`);
console.log(`VmHWM at the end: ${f(end.hwm)} MB`);
console.log(`file pages after the writes (MB): ${afterWrites.files}`);
console.log(`file pages once indexed (MB): ${end.files}`);
console.log(
  `anonymous MB by region at the largest 250 ms sample (RSS ${f(regionsAtPeak.rss)} MB): ` +
    Object.entries(regionsAtPeak.regions).map(([k, mb]) => `${k} ${f(mb)}`).join(', '),
);
console.log(
  `V8 heap (reserved) / external MB: idle ${f(idle.heap)} / ${f(idle.external)}, near the peak ${v8AtPeak ? `${f(v8AtPeak.heap)} / ${f(v8AtPeak.external)}` : '(no scrape near it)'}, ` +
    `highest scraped ${f(v8Peak.heap)} / ${f(v8Peak.external)}, indexed ${f(end.heap)} / ${f(end.external)}`,
);
