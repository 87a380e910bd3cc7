// Query cost as the corpus grows: one embedded Braid (release addon) loaded
// in steps to each size of --sizes, and at each size the same queries timed
// again. Braid's claim is that a query's cost grows with k and the filter,
// not with the corpus; this is the measurement behind it (bench/README.md,
// "Query cost as the corpus grows").
//
//   node bench/scale.mjs [--sizes 100000,300000,1000000] [--skip-build]
//                        [--passes 2] [--budget 100] [--no-recall]
//
// Records: WordNet 3.1 glosses (bench/wordnet.mjs, about 117,000 synsets),
// reused past the corpus's end: record i is synset s = i mod N. The first
// copy is the gloss as it is; a later copy is a document of its own made of
// real words, not a duplicate (8.5 identical copies of every gloss at 1M
// would tie every known-item query's best score 8.5 ways, which no real
// corpus does): each word of the gloss kept with probability 3/4, then the
// first half of another synset's gloss. A query's common words still match a
// growing share of the rows. The vector is the synset's with a little seeded
// noise, renormalised, so that no two vectors are equal. One tenant;
// category = lexicographer file.
//
// Queries, at every size: the 200 known-item queries of `wordnet` (six
// consecutive words of a gloss) and the 200 short ones of `wordnet-short`
// (one to three words), top 10 and top 100, ids only; vector, vector +
// category filter, hybrid (text + vector, RRF) and hybrid + filter, top 10,
// candidate_budget --budget at every size. Each is run once untimed, then
// --passes times timed one at a time; a sample of 50 per kind with EXPLAIN
// gives the rows the text path scored. Vector recall@10 is measured against
// an exact scan of the loaded vectors (--no-recall skips it).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TABLE, columns } from './braid-schema.mjs';
import { CACHE_DIR, rng } from './corpus.mjs';
import { buildWordnet } from './wordnet.mjs';

const bench = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(bench, '..');
const argv = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && argv[i + 1] !== undefined ? argv[i + 1] : fallback;
};
const sizes = flag('sizes', '100000,300000,1000000').split(',').map(Number);
const passes = Number(flag('passes', 2));
const budget = Number(flag('budget', 100));
const withRecall = !argv.includes('--no-recall');
const CHUNK = 5_000;
const NOISE = 0.05;

// -- build
const nativeDir = path.join(root, 'target', 'bench-native');
if (!argv.includes('--skip-build')) {
  for (const args of [
    ['scripts/build-native.mjs', '--release'],
    [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'],
  ]) {
    const res = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
    if (res.status !== 0) throw new Error(`${args.join(' ')} failed with status ${res.status}`);
  }
}
process.env.BRAID_NATIVE_DIR = nativeDir;
const { Braid } = await import(path.join(root, 'dist', 'index.js'));

// -- corpus: every synset, and the queries of both kinds
function readCache(kind) {
  const dir = path.join(CACHE_DIR, `scale-${kind}`);
  try {
    readFileSync(path.join(dir, 'meta.json'));
  } catch {
    mkdirSync(CACHE_DIR, { recursive: true });
    buildWordnet(Number.MAX_SAFE_INTEGER, dir, kind);
  }
  const bin = (name, Type) => {
    const buf = readFileSync(path.join(dir, name));
    return new Type(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  };
  const meta = JSON.parse(readFileSync(path.join(dir, 'meta.json'), 'utf8'));
  const vocab = JSON.parse(readFileSync(path.join(dir, 'vocab.json'), 'utf8'));
  const qvec = bin('query-vectors.f32', Float32Array);
  const queries = JSON.parse(readFileSync(path.join(dir, 'queries.json'), 'utf8')).map((q, i) => ({
    text: q.words.map((w) => vocab[w]).join(' '),
    category: `c${q.category}`,
    vector: qvec.subarray(i * meta.dim, (i + 1) * meta.dim),
  }));
  return { meta, vocab, queries, offsets: bin('offsets.u32', Uint32Array), words: bin('words.u32', Uint32Array), category: bin('category.u8', Uint8Array), vectors: bin('vectors.f32', Float32Array) };
}
const long = readCache('wordnet');
const short = readCache('wordnet-short');
const synsets = long.meta.records;
const dim = long.meta.dim;

const glossWords = (s) => Array.from(long.words.subarray(long.offsets[s], long.offsets[s + 1]), (w) => long.vocab[w]);

/** Record i's text: its synset's gloss, or for a later copy a variant of it (see the top). */
function textOf(i) {
  const s = i % synsets;
  const words = glossWords(s);
  if (i < synsets) return words.join(' ');
  const r = rng(0x7e47 ^ i);
  const kept = words.filter(() => r.next() < 0.75);
  const other = glossWords((s * 7919 + Math.floor(i / synsets) * 104_729) % synsets);
  return [...kept, ...other.slice(0, Math.ceil(other.length / 2))].join(' ');
}

/** Record i's vector: its synset's, plus seeded noise past the first copy, renormalised. */
function vectorOf(i, out) {
  const s = i % synsets;
  out.set(long.vectors.subarray(s * dim, (s + 1) * dim));
  if (i >= synsets) {
    const r = rng(0x5ca1e ^ i);
    let norm = 0;
    for (let d = 0; d < dim; d++) {
      out[d] += (r.gauss() * NOISE) / Math.sqrt(dim);
      norm += out[d] * out[d];
    }
    norm = Math.sqrt(norm);
    for (let d = 0; d < dim; d++) out[d] /= norm;
  }
  return out;
}

// -- the engine, loaded in steps
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'braid-scale-'));
const db = Braid.open({ dataDir });
await db.declareTable(TABLE, columns(dim));
const all = new Float32Array(Math.max(...sizes) * dim); // every loaded vector, for the exact recall scan

const rssMb = () => {
  const status = readFileSync('/proc/self/status', 'utf8');
  const mb = (key) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(status)[1]) / 1024;
  return { rss: mb('VmRSS'), peak: mb('VmHWM') };
};

const query = (kind, q, k) => {
  const out = { table: TABLE, tenant_id: 't0', top_k: k, return_fields: [] };
  if (kind.startsWith('text') || kind.startsWith('hybrid')) Object.assign(out, { text: q.text, text_field: 'text' });
  if (kind.startsWith('vector') || kind.startsWith('hybrid')) Object.assign(out, { vector: q.vector, vector_field: 'embedding', candidate_budget: budget });
  if (kind.endsWith('filter')) out.scalar_eq = { category: q.category };
  return out;
};

const KINDS = [
  ['text (known-item)', 'text', long.queries, 10],
  ['text (known-item), top 100', 'text', long.queries, 100],
  ['text (short)', 'text', short.queries, 10],
  ['text (short), top 100', 'text', short.queries, 100],
  ['vector', 'vector', long.queries, 10],
  ['vector, top 100', 'vector', long.queries, 100],
  ['vector + filter', 'vector_filter', long.queries, 10],
  ['hybrid', 'hybrid', long.queries, 10],
  ['hybrid + filter', 'hybrid_filter', long.queries, 10],
];

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** Exact top-10 ids (dot product of normalised vectors) of each query over the first n records. */
function exactTop10(queries, n) {
  return queries.map((q) => {
    const best = []; // [score, i], ascending, at most 10
    for (let i = 0; i < n; i++) {
      let dot = 0;
      const base = i * dim;
      for (let d = 0; d < dim; d++) dot += q.vector[d] * all[base + d];
      if (best.length < 10 || dot > best[0][0]) {
        best.push([dot, i]);
        best.sort((a, b) => a[0] - b[0]);
        if (best.length > 10) best.shift();
      }
    }
    return new Set(best.map(([, i]) => `r${String(i).padStart(7, '0')}`));
  });
}

const results = [];
let loaded = 0;
let loadMs = 0;
for (const size of sizes) {
  const t0 = performance.now();
  while (loaded < size) {
    const batch = [];
    for (let i = loaded; i < Math.min(size, loaded + CHUNK); i++) {
      const v = vectorOf(i, all.subarray(i * dim, (i + 1) * dim));
      batch.push({ table: TABLE, tenant_id: 't0', id: `r${String(i).padStart(7, '0')}`, fields: { text: textOf(i), category: `c${long.category[i % synsets]}`, year: 2015 + (i % 10), flag: i % 3 === 0, embedding: v } });
    }
    await db.putBatch(batch);
    loaded += batch.length;
  }
  if (!(await db.waitIndexed(3_600_000))) throw new Error('waitIndexed timed out');
  loadMs += performance.now() - t0;
  const mem = rssMb();
  console.error(`${size} records loaded (${((performance.now() - t0) / 1000).toFixed(1)} s this step), RSS ${mem.rss.toFixed(0)} MB`);

  const row = { records: size, load_s_total: loadMs / 1000, rss_mb: mem.rss, peak_rss_mb: mem.peak, loadavg_before_queries: os.loadavg()[0], kinds: {} };
  for (const [label, kind, qs, k] of KINDS) {
    for (const q of qs) await db.query(query(kind, q, k)); // untimed
    const times = [];
    for (let p = 0; p < passes; p++) {
      for (const q of qs) {
        const t = process.hrtime.bigint();
        await db.query(query(kind, q, k));
        times.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
    }
    let scored = 0;
    const sample = qs.slice(0, 50);
    for (const q of sample) scored += (await db.query({ ...query(kind, q, k), explain: true })).explain.lexical_scored_documents / sample.length;
    row.kinds[label] = { p50_ms: pct(times, 50), p99_ms: pct(times, 99), samples: times.length, mean_text_scored: scored };
  }
  if (withRecall) {
    const truth = exactTop10(long.queries, size);
    let hits = 0;
    for (const [i, q] of long.queries.entries()) {
      const res = await db.query(query('vector', q, 10));
      hits += res.results.filter((r) => truth[i].has(r.record_id)).length;
    }
    row.vector_recall_at_10 = hits / (10 * long.queries.length);
  }
  row.loadavg_after_queries = os.loadavg()[0];
  results.push(row);
  console.error(JSON.stringify(row));
}
db.close();
rmSync(dataDir, { recursive: true, force: true });

// -- report
const fmt = (x) => (x === undefined ? '' : x < 10 ? x.toFixed(2) : x.toFixed(0));
const first = results[0];
const last = results.at(-1);
const lines = [
  `| kind | ${results.map((r) => `${r.records.toLocaleString('en-US')}: p50 / p99 ms (rows scored)`).join(' | ')} | p50 ${last.records.toLocaleString('en-US')} / ${first.records.toLocaleString('en-US')} |`,
  `|---|${results.map(() => '---:|').join('')}---:|`,
  ...KINDS.map(([label]) => {
    const cells = results.map((r) => {
      const c = r.kinds[label];
      return `${fmt(c.p50_ms)} / ${fmt(c.p99_ms)}${label.startsWith('text') || label.startsWith('hybrid') ? ` (${Math.round(c.mean_text_scored).toLocaleString('en-US')})` : ''}`;
    });
    return `| ${label} | ${cells.join(' | ')} | ${(last.kinds[label].p50_ms / first.kinds[label].p50_ms).toFixed(2)}x |`;
  }),
  `| vector recall@10 (budget ${budget}) | ${results.map((r) => fmt(r.vector_recall_at_10)).join(' | ')} | |`,
  `| load (cumulative s), RSS after load MB | ${results.map((r) => `${r.load_s_total.toFixed(0)} s, ${r.rss_mb.toFixed(0)} MB`).join(' | ')} | |`,
  `| load average (1 min) before / after the queries | ${results.map((r) => `${r.loadavg_before_queries.toFixed(2)} / ${r.loadavg_after_queries.toFixed(2)}`).join(' | ')} | |`,
];
const table = lines.join('\n');
console.log(table);
const resultsDir = path.join(bench, 'results');
mkdirSync(resultsDir, { recursive: true });
const file = path.join(resultsDir, `scale-${new Date().toISOString().replaceAll(':', '-')}.json`);
const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).stdout.trim();
writeFileSync(file, JSON.stringify({ command: `node bench/scale.mjs ${argv.join(' ')}`.trim(), commit, cpus: os.cpus().length, model: os.cpus()[0]?.model, budget, passes, synsets, results, table }, null, 2));
console.error(`wrote ${file}`);
