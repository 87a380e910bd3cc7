// Deterministic corpus and query set for bench/hybrid.mjs.
//
// Records: text drawn from a Zipf vocabulary (30,000 pseudo-words, s = 1.1,
// 8-40 words), mixed with a per-category topic vocabulary so that records of
// one category share words; a 384-d float32 vector DERIVED from the text
// (tf x self-information term weights through a fixed seeded Gaussian random
// projection, normalised), so vectors cluster and agree with the words;
// scalars category (12 values, skewed), year (2015-2024), flag (bool); one of
// 4 tenants. The first M records of an N-record corpus are the M-record
// corpus (one sequential generator), and the queries do not depend on N.
//
// Queries: 2-3 words (from the category's topic or the global Zipf), their
// vector through the same projection, and a filter (tenant + category).
//
// Everything is cached as binary files under bench/.cache/corpus-<N>/ and
// reused across runs; exact ground truth (brute force, cosine) is cached
// beside it.
//
//   node bench/corpus.mjs [--records 100000]    builds the cache and prints a summary
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TENANTS, WORDNET, buildWordnet } from './wordnet.mjs';

export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
export const CACHE_DIR = path.join(BENCH_DIR, '.cache');

/**
 * Which corpus: `zipf` (the synthetic one below, default), or real text:
 * `wordnet` (known-item queries of six words) or `wordnet-short` (one to
 * three words); see bench/wordnet.mjs. Children inherit it from the harness.
 */
export const CORPUS_KIND = process.env.BRAID_BENCH_CORPUS || 'zipf';
if (!['zipf', 'wordnet', 'wordnet-short'].includes(CORPUS_KIND)) {
  throw new Error(`BRAID_BENCH_CORPUS must be zipf, wordnet or wordnet-short, not ${CORPUS_KIND}`);
}

export const CORPUS = {
  version: 1,
  seed: 0x62726169, // "brai"
  vocab: 30_000,
  zipfS: 1.1,
  minWords: 8,
  maxWords: 40,
  dim: 384,
  categories: 12,
  tenants: 4,
  years: [2015, 2024],
  topicShare: 0.35, // share of a record's words drawn from its category's topic
  topicSize: 1_500, // words per category topic (drawn from ranks >= 200)
  queries: 200,
  queryTopicShare: 0.6,
};

// -- PRNG: sfc32 seeded through splitmix32
function splitmix32(a) {
  return () => {
    a |= 0;
    a = (a + 0x9e3779b9) | 0;
    let t = a ^ (a >>> 16);
    t = Math.imul(t, 0x21f0aaad);
    t ^= t >>> 15;
    t = Math.imul(t, 0x735a2d97);
    return (t ^ (t >>> 15)) >>> 0;
  };
}

export function rng(seed) {
  const s = splitmix32(seed);
  let a = s(), b = s(), c = s(), d = s();
  const next = () => {
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
  for (let i = 0; i < 12; i++) next();
  let spare = null;
  return {
    next,
    int: (n) => Math.floor(next() * n),
    gauss() {
      if (spare !== null) { const v = spare; spare = null; return v; }
      let u = 0, v = 0;
      while (u === 0) u = next();
      v = next();
      const r = Math.sqrt(-2 * Math.log(u));
      spare = r * Math.sin(2 * Math.PI * v);
      return r * Math.cos(2 * Math.PI * v);
    },
  };
}

// -- vocabulary: pronounceable pseudo-words; vowels a/i/o/u only and final
// consonants that no English stemmer strips, so tokenisers agree
function makeVocab(n, r) {
  const cons = 'bdfgklmnprtvz';
  const vows = 'aiou';
  const finals = ['', '', 'n', 'r', 'k', 'm', 't'];
  const seen = new Set();
  const words = [];
  while (words.length < n) {
    const syl = 2 + r.int(3);
    let w = '';
    for (let i = 0; i < syl; i++) w += cons[r.int(cons.length)] + vows[r.int(vows.length)];
    w += finals[r.int(finals.length)];
    if (!seen.has(w)) { seen.add(w); words.push(w); }
  }
  return words;
}

function cdf(weights) {
  const out = new Float64Array(weights.length);
  let acc = 0;
  for (let i = 0; i < weights.length; i++) { acc += weights[i]; out[i] = acc; }
  for (let i = 0; i < out.length; i++) out[i] /= acc;
  return out;
}

function sample(cdfArr, u) {
  let lo = 0, hi = cdfArr.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cdfArr[mid] < u) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/** The fixed parts every record and query uses: vocabulary, distributions, projection. */
export function model() {
  const c = CORPUS;
  const r = rng(c.seed);
  const words = makeVocab(c.vocab, r);
  const zipfW = new Float64Array(c.vocab);
  for (let k = 0; k < c.vocab; k++) zipfW[k] = 1 / (k + 1) ** c.zipfS;
  const zipfCdf = cdf(zipfW);
  const zsum = zipfW.reduce((a, b) => a + b, 0);
  // term weight: self-information of the word under the global Zipf
  const termWeight = new Float32Array(c.vocab);
  for (let k = 0; k < c.vocab; k++) termWeight[k] = Math.log(zsum / zipfW[k]);
  // topics: each category favours its own mid/low-frequency words
  const topics = [];
  const topicW = new Float64Array(c.topicSize);
  for (let k = 0; k < c.topicSize; k++) topicW[k] = 1 / (k + 1) ** 0.9;
  const topicCdf = cdf(topicW);
  for (let cat = 0; cat < c.categories; cat++) {
    const t = new Uint16Array(c.topicSize);
    const used = new Set();
    for (let k = 0; k < c.topicSize; k++) {
      let w;
      do { w = 200 + r.int(c.vocab - 200); } while (used.has(w));
      used.add(w);
      t[k] = w;
    }
    topics.push(t);
  }
  // skewed category frequencies (about 20% .. 4.6%)
  const catW = new Float64Array(c.categories);
  for (let k = 0; k < c.categories; k++) catW[k] = 1 / (k + 1) ** 0.6;
  const catCdf = cdf(catW);
  // random projection: one Gaussian row per word
  const proj = new Float32Array(c.vocab * c.dim);
  const scale = 1 / Math.sqrt(c.dim);
  for (let i = 0; i < proj.length; i++) proj[i] = r.gauss() * scale;
  return { words, zipfCdf, termWeight, topics, topicCdf, catCdf, proj };
}

/** The normalised vector of a bag of word ids, written into out[off..off+dim). */
export function embed(m, ids, out, off = 0) {
  const dim = CORPUS.dim;
  const tf = new Map();
  for (const w of ids) tf.set(w, (tf.get(w) ?? 0) + 1);
  out.fill(0, off, off + dim);
  for (const [w, n] of tf) {
    const weight = (1 + Math.log(n)) * m.termWeight[w];
    const base = w * dim;
    for (let d = 0; d < dim; d++) out[off + d] += weight * m.proj[base + d];
  }
  let norm = 0;
  for (let d = 0; d < dim; d++) norm += out[off + d] * out[off + d];
  norm = Math.sqrt(norm) || 1;
  for (let d = 0; d < dim; d++) out[off + d] /= norm;
}

function drawWord(m, r, cat, topicShare) {
  if (r.next() < topicShare) return m.topics[cat][sample(m.topicCdf, r.next())];
  return sample(m.zipfCdf, r.next());
}

function generate(n, m) {
  const c = CORPUS;
  const r = rng(c.seed ^ 0x5eed);
  const offsets = new Uint32Array(n + 1);
  const wordIds = [];
  const category = new Uint8Array(n);
  const tenant = new Uint8Array(n);
  const year = new Uint16Array(n);
  const flag = new Uint8Array(n);
  const vectors = new Float32Array(n * c.dim);
  for (let i = 0; i < n; i++) {
    tenant[i] = r.int(c.tenants);
    category[i] = sample(m.catCdf, r.next());
    year[i] = c.years[0] + r.int(c.years[1] - c.years[0] + 1);
    flag[i] = r.next() < 0.3 ? 1 : 0;
    const len = c.minWords + r.int(c.maxWords - c.minWords + 1);
    const ids = [];
    for (let k = 0; k < len; k++) ids.push(drawWord(m, r, category[i], c.topicShare));
    offsets[i] = wordIds.length;
    for (const w of ids) wordIds.push(w);
    embed(m, ids, vectors, i * c.dim);
  }
  offsets[n] = wordIds.length;
  return { n, offsets, words: Uint16Array.from(wordIds), category, tenant, year, flag, vectors };
}

function generateQueries(m) {
  const c = CORPUS;
  const r = rng(c.seed ^ 0x9e77);
  const queries = [];
  const vectors = new Float32Array(c.queries * c.dim);
  for (let q = 0; q < c.queries; q++) {
    const tenant = r.int(c.tenants);
    const category = sample(m.catCdf, r.next());
    const len = 2 + r.int(2);
    const ids = [];
    while (ids.length < len) {
      const w = drawWord(m, r, category, c.queryTopicShare);
      if (!ids.includes(w)) ids.push(w);
    }
    embed(m, ids, vectors, q * c.dim);
    queries.push({ tenant, category, words: ids });
  }
  return { queries, vectors };
}

// -- naming shared by every system
export const tenantName = (t) => `t${t}`;
export const categoryName = (c) => `c${c}`;
export const recordId = (i) => `r${String(i).padStart(7, '0')}`;

function cacheDir(n) {
  if (CORPUS_KIND !== 'zipf') return path.join(CACHE_DIR, `${CORPUS_KIND}-v${WORDNET.version}-${n}${TENANTS === 1 ? '' : `-t${TENANTS}`}`);
  return path.join(CACHE_DIR, `corpus-v${CORPUS.version}-${n}`);
}

function writeBin(dir, name, typed) {
  writeFileSync(path.join(dir, name), Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength));
}

function readBin(dir, name, Type) {
  const buf = readFileSync(path.join(dir, name));
  const copy = new Uint8Array(buf.byteLength);
  copy.set(buf);
  return new Type(copy.buffer);
}

/** Builds (or finds) the cached corpus of n records; returns its directory. */
export function ensureCorpus(n) {
  const dir = cacheDir(n);
  if (existsSync(path.join(dir, 'meta.json'))) return dir;
  if (CORPUS_KIND !== 'zipf') {
    buildWordnet(n, dir, CORPUS_KIND);
    return dir;
  }
  const started = performance.now();
  const m = model();
  const corpus = generate(n, m);
  const qs = generateQueries(m);
  const tmp = `${dir}.tmp-${process.pid}`;
  mkdirSync(tmp, { recursive: true });
  writeBin(tmp, 'offsets.u32', corpus.offsets);
  writeBin(tmp, 'words.u16', corpus.words);
  writeBin(tmp, 'category.u8', corpus.category);
  writeBin(tmp, 'tenant.u8', corpus.tenant);
  writeBin(tmp, 'year.u16', corpus.year);
  writeBin(tmp, 'flag.u8', corpus.flag);
  writeBin(tmp, 'vectors.f32', corpus.vectors);
  writeBin(tmp, 'query-vectors.f32', qs.vectors);
  writeFileSync(path.join(tmp, 'vocab.json'), JSON.stringify(m.words));
  writeFileSync(path.join(tmp, 'queries.json'), JSON.stringify(qs.queries));
  writeFileSync(path.join(tmp, 'meta.json'), JSON.stringify({ ...CORPUS, records: n, generated_ms: performance.now() - started }, null, 2));
  renameSync(tmp, dir);
  return dir;
}

/**
 * Loads a cached corpus: records as parallel arrays plus a lazily built text
 * per record, and the queries (text, vector, filter).
 */
export function loadCorpus(n) {
  const dir = ensureCorpus(n);
  const meta = JSON.parse(readFileSync(path.join(dir, 'meta.json'), 'utf8'));
  const vocab = JSON.parse(readFileSync(path.join(dir, 'vocab.json'), 'utf8'));
  const offsets = readBin(dir, 'offsets.u32', Uint32Array);
  // a real vocabulary may not fit 16 bits
  const words = existsSync(path.join(dir, 'words.u32')) ? readBin(dir, 'words.u32', Uint32Array) : readBin(dir, 'words.u16', Uint16Array);
  const vectors = readBin(dir, 'vectors.f32', Float32Array);
  const qvec = readBin(dir, 'query-vectors.f32', Float32Array);
  const dim = meta.dim;
  const rawQueries = JSON.parse(readFileSync(path.join(dir, 'queries.json'), 'utf8'));
  const queries = rawQueries.map((q, i) => ({
    index: i,
    tenant: tenantName(q.tenant),
    category: categoryName(q.category),
    text: q.words.map((w) => vocab[w]).join(' '),
    words: q.words.map((w) => vocab[w]),
    vector: qvec.subarray(i * dim, (i + 1) * dim),
    // known-item queries: the record the words were taken from
    ...(q.target !== undefined ? { target: q.target } : {}),
  }));
  const tenantIdx = readBin(dir, 'tenant.u8', Uint8Array);
  const categoryIdx = readBin(dir, 'category.u8', Uint8Array);
  return {
    dir,
    meta,
    n,
    dim,
    vocab,
    tenantIdx,
    categoryIdx,
    year: readBin(dir, 'year.u16', Uint16Array),
    flag: readBin(dir, 'flag.u8', Uint8Array),
    vectors,
    queries,
    id: recordId,
    tenant: (i) => tenantName(tenantIdx[i]),
    category: (i) => categoryName(categoryIdx[i]),
    text(i) {
      let s = '';
      for (let k = offsets[i]; k < offsets[i + 1]; k++) s += (k > offsets[i] ? ' ' : '') + vocab[words[k]];
      return s;
    },
    vector: (i) => vectors.subarray(i * dim, (i + 1) * dim),
  };
}

/**
 * Exact top-k by cosine (vectors are normalised: dot product) for every
 * query: `vector` over the query's tenant, `vector_filter` over its tenant
 * and category. Cached beside the corpus.
 */
export function groundTruth(corpus, k = 10) {
  const file = path.join(corpus.dir, `truth-${k}.json`);
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8'));
  const { n, dim, vectors, tenantIdx, categoryIdx } = corpus;
  const out = { vector: [], vector_filter: [] };
  for (const q of corpus.queries) {
    const t = Number(q.tenant.slice(1));
    const c = Number(q.category.slice(1));
    const all = [];
    const filtered = [];
    for (let i = 0; i < n; i++) {
      if (tenantIdx[i] !== t) continue;
      let s = 0;
      const base = i * dim;
      for (let d = 0; d < dim; d++) s += vectors[base + d] * q.vector[d];
      all.push([i, s]);
      if (categoryIdx[i] === c) filtered.push([i, s]);
    }
    const top = (list) => list.sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, k).map(([i, s]) => ({ id: recordId(i), score: s }));
    out.vector.push(top(all));
    out.vector_filter.push(top(filtered));
  }
  writeFileSync(file, JSON.stringify(out));
  return out;
}

/** recall@k: the share of the exact top-k ids among the first k returned. */
export function recallAt(truth, returnedIds, k = 10) {
  const exact = truth.slice(0, k);
  if (exact.length === 0) return 1;
  const ids = new Set(exact.map((e) => e.id));
  let hits = 0;
  for (const id of returnedIds.slice(0, k)) if (ids.has(id)) hits++;
  return hits / exact.length;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const i = process.argv.indexOf('--records');
  const n = i >= 0 ? Number(process.argv[i + 1]) : 100_000;
  const t0 = performance.now();
  const corpus = loadCorpus(n);
  const t1 = performance.now();
  groundTruth(corpus);
  const t2 = performance.now();
  const perTenantCat = new Map();
  for (let r = 0; r < n; r++) {
    const key = `${corpus.tenantIdx[r]}/${corpus.categoryIdx[r]}`;
    perTenantCat.set(key, (perTenantCat.get(key) ?? 0) + 1);
  }
  const sizes = [...perTenantCat.values()].sort((a, b) => a - b);
  console.log(`corpus ${corpus.dir}: ${n} records, ${corpus.queries.length} queries (load ${(t1 - t0).toFixed(0)} ms, truth ${(t2 - t1).toFixed(0)} ms)`);
  console.log(`tenant+category set sizes: min ${sizes[0]}, median ${sizes[sizes.length >> 1]}, max ${sizes[sizes.length - 1]}`);
  console.log('record 0:', corpus.text(0));
  console.log('query 0:', corpus.queries[0].text, corpus.queries[0].tenant, corpus.queries[0].category);
}
