// LanceDB (embedded, Rust core over napi-rs): one table on local disk, an
// IVF_HNSW_SQ vector index (cosine, m 16, ef_construction 200 like Braid's
// HNSW), an FTS index on text (no stemming or stop-words, like the others),
// bitmap indexes on tenant and category. Filters are prefilters. Hybrid is
// FTS + vector with the built-in RRFReranker (k = 60).
// lance logs a deprecation warning per query through its Rust logger
process.env.LANCEDB_LOG ??= 'error';
const lancedb = await import('@lancedb/lancedb');
import * as arrow from 'apache-arrow';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HYBRID_DEPTH, RRF_K, TOP_K, run } from './common.mjs';

const dir = mkdtempSync(path.join(tmpdir(), 'lance-bench-'));
let table;
let reranker;
const esc = (s) => s.replaceAll("'", "''");

function arrowTable(corpus, start, end) {
  const n = end - start;
  const dim = corpus.dim;
  const strings = (f) => arrow.vectorFromArray(Array.from({ length: n }, (_, k) => f(start + k)), new arrow.Utf8());
  const child = arrow.makeData({ type: new arrow.Float32(), length: n * dim, data: corpus.vectors.subarray(start * dim, end * dim) });
  const vecType = new arrow.FixedSizeList(dim, new arrow.Field('item', new arrow.Float32(), true));
  const vectors = arrow.makeVector(arrow.makeData({ type: vecType, length: n, nullCount: 0, child }));
  return new arrow.Table({
    id: strings(corpus.id),
    text: strings((i) => corpus.text(i)),
    tenant: strings(corpus.tenant),
    category: strings(corpus.category),
    year: arrow.makeVector(Int32Array.from(corpus.year.subarray(start, end))),
    flag: arrow.vectorFromArray(Array.from(corpus.flag.subarray(start, end), (f) => f === 1), new arrow.Bool()),
    vector: vectors,
  });
}

function filterOf(kind, q) {
  return kind === 'vector_filter' || kind === 'hybrid_filter' ? `tenant = '${esc(q.tenant)}' AND category = '${esc(q.category)}'` : `tenant = '${esc(q.tenant)}'`;
}

// HNSW needs ef >= the rows asked of it (limit x refineFactor)
const tune = (vq, s, limit = TOP_K) => vq.distanceType('cosine').nprobes(s.nprobes).ef(Math.max(s.ef, limit * s.refineFactor)).refineFactor(s.refineFactor);

await run({
  name: 'lancedb',
  kinds: ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'],
  ladder: [
    { nprobes: 4, ef: 32, refineFactor: 1 },
    { nprobes: 8, ef: 64, refineFactor: 1 },
    { nprobes: 16, ef: 128, refineFactor: 2 },
    { nprobes: 32, ef: 256, refineFactor: 5 },
    { nprobes: 64, ef: 256, refineFactor: 10 },
    { nprobes: 128, ef: 512, refineFactor: 10 },
    { nprobes: 256, ef: 1024, refineFactor: 20 },
  ],
  notes: [
    `@lancedb/lancedb with apache-arrow 18.1.0; IVF_HNSW_SQ (cosine, m 16, ef_construction 200, default partitions), FTS (stem and stop-words off), bitmap indexes on tenant and category; prefilter`,
    `hybrid: fullTextSearch + nearestTo with RRFReranker(k ${RRF_K}), ${HYBRID_DEPTH} per side, top 10 of the fused list`,
  ],
  async ingest(corpus) {
    const db = await lancedb.connect(dir);
    const chunk = 20_000;
    const t = performance.now();
    table = await db.createTable('docs', arrowTable(corpus, 0, Math.min(chunk, corpus.n)));
    for (let s = chunk; s < corpus.n; s += chunk) await table.add(arrowTable(corpus, s, Math.min(corpus.n, s + chunk)));
    const write_ms = performance.now() - t;
    const ti = performance.now();
    await table.createIndex('vector', { config: lancedb.Index.hnswSq({ distanceType: 'cosine', m: 16, efConstruction: 200 }) });
    const vector_index_ms = performance.now() - ti;
    const tf = performance.now();
    await table.createIndex('text', { config: lancedb.Index.fts({ withPosition: false, stem: false, removeStopWords: false, asciiFolding: false }) });
    const fts_index_ms = performance.now() - tf;
    const ts = performance.now();
    await table.createIndex('tenant', { config: lancedb.Index.bitmap() });
    await table.createIndex('category', { config: lancedb.Index.bitmap() });
    const scalar_index_ms = performance.now() - ts;
    reranker = await lancedb.rerankers.RRFReranker.create(RRF_K);
    const stats = await table.indexStats('vector_idx').catch(() => null);
    return { write_ms, vector_index_ms, fts_index_ms, scalar_index_ms, vector_index: stats, rows: await table.countRows() };
  },
  async query(kind, q, s) {
    let rows;
    if (kind === 'text') {
      rows = await table.query().fullTextSearch(q.text, { columns: ['text'] }).where(filterOf(kind, q)).select(['id']).limit(TOP_K).toArray();
    } else if (kind === 'hybrid' || kind === 'hybrid_filter') {
      const vq = tune(table.query().nearestTo(q.vector), s, HYBRID_DEPTH).fullTextSearch(q.text, { columns: ['text'] }).where(filterOf(kind, q)).select(['id']);
      rows = (await vq.rerank(reranker).limit(HYBRID_DEPTH).toArray()).slice(0, TOP_K);
    } else {
      rows = await tune(table.query().nearestTo(q.vector), s).where(filterOf(kind, q)).select(['id']).limit(TOP_K).toArray();
    }
    return rows.map((r) => r.id);
  },
  close() {
    rmSync(dir, { recursive: true, force: true });
  },
});
