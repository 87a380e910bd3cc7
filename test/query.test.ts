// Hybrid queries over HTTP: explain (route 4) and the native query language (route 2).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './helpers.js';

let s: TestServer;

const docs = [
  { id: 'd1', fields: { title: 'solar power plants', body: 'panels convert sunlight', topic: 'energy', year: 2024, emb: [1, 0, 0], links: ['d2'] } },
  { id: 'd2', fields: { title: 'wind power', body: 'turbines and solar hybrids', topic: 'energy', year: 2023, emb: [0.9, 0.1, 0], links: ['d3'] } },
  { id: 'd3', fields: { title: 'baking bread', body: 'flour water yeast', topic: 'food', year: 2024, emb: [0, 1, 0], links: [] } },
  { id: 'd4', fields: { title: 'solar cooking', body: 'ovens powered by the sun', topic: 'food', year: 2022, emb: [0.5, 0.5, 0], links: ['d1'] } },
];

beforeAll(async () => {
  s = await startTestServer();
  const r = await s.post('/v1/records/put-batch', { records: docs.map((d) => ({ table: 'articles', tenant_id: 'acme', ...d })) });
  expect(r.status).toBe(200);
  await s.post('/v1/records/put', { table: 'articles', tenant_id: 'other', id: 'x1', fields: { title: 'solar solar solar', topic: 'energy', year: 2024, emb: [1, 0, 0] } });
});

afterAll(async () => {
  await s.destroy();
});

describe('explain (route 4)', () => {
  it('returns every HybridExplain field at top level, filled from the query', async () => {
    const r = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], scalar_eq: { topic: 'energy' }, top_k: 5 });
    expect(r.status).toBe(200);
    const e = r.body;
    for (const field of [
      'access_path_timings', 'access_paths', 'candidate_budget', 'deduped_candidate_count', 'dirty_feature_count', 'early_stop_reason',
      'exact_fallback_triggered', 'failed_feature_count', 'final_visibility_guard_count', 'final_visibility_guard_removed', 'freshness_mode',
      'fusion_method', 'hot_overlay_searched', 'lexical_cache_hits', 'lexical_cache_misses', 'lexical_indexed_documents',
      'lexical_scored_documents', 'materialized_count', 'missing_feature_count', 'module_versions', 'opened_candidate_streams',
      'pending_feature_count', 'phase_timings', 'planner_candidates', 'policy_epoch', 'read_epoch', 'returned_count',
      'scalar_filter_applied', 'scalar_filter_predicates', 'scalar_filter_removed_records', 'scalar_filter_visible_records',
      'schema_epoch', 'segments_scanned', 'selected_strategy', 'skipped_access_paths', 'tenant_mask_visible_records',
      'text_candidates', 'vector_candidates',
    ]) expect(e, field).toHaveProperty(field);
    expect(e.tenant_mask_visible_records).toBe(4);
    expect(e.scalar_filter_visible_records).toBe(2);
    expect(e.scalar_filter_removed_records).toBe(2);
    expect(e.scalar_filter_predicates).toEqual(['topic = "energy"']);
    expect(e.text_candidates).toBe(2);
    expect(e.vector_candidates).toBe(2);
    expect(e.returned_count).toBe(2);
    expect(e.deduped_candidate_count).toBe(2);
    expect(e.final_visibility_guard_count).toBe(2);
    expect(e.fusion_method).toBe('rrf');
    expect(e.freshness_mode).toBe('latest');
    expect(e.selected_strategy).toBe('hybrid(text_bm25+vector_exact)+rrf');
    expect(e.opened_candidate_streams).toEqual(expect.arrayContaining(['text', 'tenant_mask', 'scalar']));
    expect(e.read_epoch).toBe((await s.get('/v1/metrics/public-safe')).body.latest_epoch);
    expect(e.planner_candidates.length).toBe(2);
    expect(e.planner_candidates[0]).toMatchObject({ visibility_checked: true, source: 'text+vector' });
    expect(e.phase_timings.map((p: { phase: string }) => p.phase)).toEqual(expect.arrayContaining(['validate', 'plan', 'total']));
    expect(e.module_versions.length).toBeGreaterThan(0);
  });

  it('rejects unknown fields and bad values with codes', async () => {
    const unknown = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', bogus: 1 });
    expect(unknown.status).toBe(400);
    expect(unknown.body.code).toBe('unknown_field');
    const topK = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', top_k: 5000 });
    expect(topK.body.code).toBe('top_k_out_of_range');
    const col = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', scalar_eq: { nope: 1 } });
    expect(col.body.code).toBe('unknown_column');
    const table = await s.post('/v1/explain', { table: 'nope', tenant_id: 'acme' });
    expect(table.body.code).toBe('unknown_table');
    const dim = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', vector: [1, 2] });
    expect(dim.body.code).toBe('vector_dimension_mismatch');
    const cursor = await s.post('/v1/explain', { table: 'articles', tenant_id: 'acme', cursor: 'forged.cursor' });
    expect(cursor.body.code).toBe('invalid_cursor');
  });
});

describe('native query language (route 2)', () => {
  it('runs a hybrid query and returns rows with real score components', async () => {
    const r = await s.post('/v1/nativeql', {
      query: "SEARCH articles TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] WHERE topic = 'energy' LIMIT 5",
    });
    expect(r.status).toBe(200);
    expect(Object.keys(r.body).sort()).toEqual(['explain', 'next_cursor', 'results']);
    expect(r.body.results.map((x: { record_id: string }) => x.record_id)).toEqual(['d1', 'd2']);
    const top = r.body.results[0];
    expect(top).toMatchObject({ tenant_id: 'acme', version_id: 1 });
    expect(top.score.lexical).toBeGreaterThan(0);
    expect(top.score.vector).toBeCloseTo(1, 5);
    expect(top.score.relational).toBeNull();
    expect(top.score.final_score).toBeCloseTo(2 / 61, 9);
    expect(top.fields.title).toBe('solar power plants');
  });

  it('expresses every HybridQuery field', async () => {
    const epoch = (await s.get('/v1/metrics/public-safe')).body.latest_epoch;
    const r = await s.post('/v1/nativeql', {
      query: `EXPLAIN SEARCH articles TENANT 'acme'
        MATCH 'solar' IN title
        NEAR [1, 0, 0] IN emb
        WHERE year = 2024
        GRAPH FROM 'd4' DEPTH 2
        AS OF ${epoch}
        FRESHNESS latest
        FUSE relative_score WEIGHTS (lexical 1, vector 1, relational 1)
        BUDGET 50
        LIMIT 1`,
    });
    expect(r.status).toBe(200);
    expect(r.body.explain.fusion_method).toBe('relative_score');
    expect(r.body.explain.read_epoch).toBe(epoch);
    expect(r.body.explain.candidate_budget).toBe(50);
    expect(r.body.results).toHaveLength(1);
    expect(r.body.results[0].record_id).toBe('d1');
    expect(r.body.results[0].score.relational).toBe(1);
    expect(typeof r.body.next_cursor).toBe('string');
    const page2 = await s.post('/v1/nativeql', {
      query: `EXPLAIN SEARCH articles TENANT 'acme' MATCH 'solar' IN title NEAR [1, 0, 0] IN emb WHERE year = 2024
        GRAPH FROM 'd4' DEPTH 2 AS OF ${epoch} FRESHNESS latest
        FUSE relative_score WEIGHTS (lexical 1, vector 1, relational 1) BUDGET 50 LIMIT 1 CURSOR '${r.body.next_cursor}'`,
    });
    expect(page2.status).toBe(200);
    expect(page2.body.results.map((x: { record_id: string }) => x.record_id)).not.toContain('d1');
  });

  it('RETURN projects the fields of each result without changing the ranking', async () => {
    const q = "SEARCH articles TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] LIMIT 2";
    const full = await s.post('/v1/nativeql', { query: q });
    const some = await s.post('/v1/nativeql', { query: `${q} RETURN title, year` });
    expect(some.status).toBe(200);
    const ids = (r: typeof full) => r.body.results.map((x: { record_id: string }) => x.record_id);
    expect(ids(some)).toEqual(ids(full));
    expect(some.body.results.map((x: { score: unknown }) => x.score)).toEqual(full.body.results.map((x: { score: unknown }) => x.score));
    for (const row of some.body.results) expect(Object.keys(row.fields).sort()).toEqual(['title', 'year']);
    expect(some.body.results[0].fields.title).toBe(full.body.results[0].fields.title);
    // the next page of the same cursor may ask for other fields
    const page2 = await s.post('/v1/nativeql', { query: `${q} RETURN topic CURSOR '${some.body.next_cursor}'` });
    expect(page2.status).toBe(200);
    expect(page2.body.results.length).toBeGreaterThan(0);
    for (const row of page2.body.results) expect(Object.keys(row.fields)).toEqual(['topic']);
    expect(ids(page2)).not.toContain(ids(some)[0]);
    // JSON `[]` (GraphQL here) returns no fields at all
    const none = await s.post('/v1/graphql', {
      query: '{ search(table: "articles", tenant_id: "acme", text: "solar", top_k: 2, return_fields: []) { results { record_id fields } } }',
    });
    expect(none.status).toBe(200);
    expect(none.body.data.search.results.map((x: { fields: unknown }) => x.fields)).toEqual([{}, {}]);
  });

  it('RETURN of a column the table lacks is unknown_column, and writes nothing', async () => {
    const r = await s.post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' MATCH 'solar' RETURN title, nope" });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('unknown_column');
    expect(r.body.error).toContain('nope');
    const empty = await s.post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' RETURN" });
    expect(empty.status).toBe(400);
    expect(empty.body.code).toBe('ql_syntax_error');
  });

  it('tenants never see each other', async () => {
    const r = await s.post('/v1/nativeql', { query: "SEARCH articles TENANT 'other' MATCH 'solar'" });
    expect(r.body.results.map((x: { record_id: string }) => x.record_id)).toEqual(['x1']);
  });

  it('parse errors are 400 with line, column and what was expected', async () => {
    const r = await s.post('/v1/nativeql', { query: "SEARCH articles\n  TENANT 'acme' LIMIT ten" });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('ql_syntax_error');
    expect(r.body.line).toBe(2);
    expect(r.body.column).toBe(23);
    expect(Array.isArray(r.body.expected)).toBe(true);
    expect(r.body.error).toContain('line 2, column 23');
  });

  it('engine errors keep their codes', async () => {
    const r = await s.post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' LIMIT 0" });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('top_k_out_of_range');
    const missing = await s.post('/v1/nativeql', { nope: 1 });
    expect(missing.body.code).toBe('unknown_field');
  });

  it('a deleted record disappears from queries at later epochs only', async () => {
    await s.post('/v1/records/put', { table: 'articles', tenant_id: 'acme', id: 'gone', fields: { title: 'ephemeral solar note' } });
    const before = (await s.get('/v1/metrics/public-safe')).body.latest_epoch;
    await s.engine.delete({ table: 'articles', tenant_id: 'acme', id: 'gone' });
    const now = await s.post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' MATCH 'ephemeral'" });
    expect(now.body.results).toEqual([]);
    const then = await s.post('/v1/nativeql', { query: `SEARCH articles TENANT 'acme' MATCH 'ephemeral' AS OF ${before}` });
    expect(then.body.results.map((x: { record_id: string }) => x.record_id)).toEqual(['gone']);
  });
});
