// Orama 3 (pure JS): BM25 text, vector search (an exact linear scan over the
// where-filtered set, so recall is 1 and there is nothing to tune) and its own
// hybrid mode (weighted normalised scores, not RRF). `exact: true` turns off
// prefix matching, `threshold: 1` keeps OR semantics, `similarity: -1` keeps
// every vector hit (the default cuts hits below 0.8).
import { create, insertMultiple, search } from '@orama/orama';
import { TOP_K, run } from './common.mjs';

let db;

await run({
  name: 'orama',
  kinds: ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'],
  ladder: null,
  notes: ['@orama/orama 3 in memory: insertMultiple in batches of 5,000; tenant and category as enum where-filters; hybrid uses Orama\'s default weights (text 0.5, vector 0.5), not RRF'],
  async ingest(corpus) {
    db = create({
      schema: { rid: 'string', text: 'string', tenant: 'enum', category: 'enum', year: 'number', flag: 'boolean', embedding: `vector[${corpus.dim}]` },
    });
    const chunk = 5_000;
    for (let s = 0; s < corpus.n; s += chunk) {
      const docs = [];
      for (let i = s; i < Math.min(corpus.n, s + chunk); i++) {
        docs.push({ id: corpus.id(i), rid: corpus.id(i), text: corpus.text(i), tenant: corpus.tenant(i), category: corpus.category(i), year: corpus.year[i], flag: corpus.flag[i] === 1, embedding: Array.from(corpus.vector(i)) });
      }
      await insertMultiple(db, docs, chunk);
    }
    return { chunk };
  },
  async query(kind, q) {
    const where = kind === 'vector_filter' || kind === 'hybrid_filter' ? { tenant: { eq: q.tenant }, category: { eq: q.category } } : { tenant: { eq: q.tenant } };
    const vector = { value: Array.from(q.vector), property: 'embedding' };
    let res;
    if (kind === 'text') res = await search(db, { term: q.text, properties: ['text'], exact: true, threshold: 1, where, limit: TOP_K });
    else if (kind === 'hybrid' || kind === 'hybrid_filter') res = await search(db, { mode: 'hybrid', term: q.text, properties: ['text'], exact: true, threshold: 1, vector, similarity: -1, where, limit: TOP_K });
    else res = await search(db, { mode: 'vector', vector, similarity: -1, where, limit: TOP_K });
    return res.hits.map((h) => h.id);
  },
});
