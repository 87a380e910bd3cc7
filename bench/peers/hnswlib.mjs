// hnswlib-node (C++ HNSW, vectors only): one index per tenant (the natural
// multi-tenant layout when the index has no tenant filter), cosine, M 16,
// ef_construction 200 like Braid's. The category filter is hnswlib's filter
// callback, which calls into JS for every candidate.
import hnswlib from 'hnswlib-node';
import { TOP_K, run } from './common.mjs';

const { HierarchicalNSW } = hnswlib;
const indexes = new Map();
let corpusRef;

await run({
  name: 'hnswlib',
  kinds: ['vector', 'vector_filter'],
  ladder: [10, 20, 40, 80, 160, 320, 640, 1280].map((ef) => ({ ef })),
  notes: ['hnswlib-node: one HierarchicalNSW per tenant (cosine, M 16, ef_construction 200), single-threaded addPoint; category filter through the JS filter callback; no text, so no text or hybrid kinds'],
  ingest(corpus) {
    corpusRef = corpus;
    const counts = new Map();
    for (let i = 0; i < corpus.n; i++) counts.set(corpus.tenant(i), (counts.get(corpus.tenant(i)) ?? 0) + 1);
    for (const [tenant, count] of counts) {
      const index = new HierarchicalNSW('cosine', corpus.dim);
      index.initIndex(count, 16, 200, 100);
      indexes.set(tenant, index);
    }
    for (let i = 0; i < corpus.n; i++) indexes.get(corpus.tenant(i)).addPoint(Array.from(corpus.vector(i)), i);
    return { indexes: Object.fromEntries(counts) };
  },
  query(kind, q, s) {
    const index = indexes.get(q.tenant);
    index.setEf(Math.max(s.ef, TOP_K));
    let res;
    if (kind === 'vector') res = index.searchKnn(Array.from(q.vector), TOP_K);
    else {
      const cat = Number(q.category.slice(1));
      const cats = corpusRef.categoryIdx;
      res = index.searchKnn(Array.from(q.vector), TOP_K, (label) => cats[label] === cat);
    }
    return res.neighbors.map((i) => corpusRef.id(i));
  },
});
