// Hybrid queries over HTTP: explain (route 4), the native query language (route 2) and its JSON form
// (POST /v1/query).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BraidClient, RemoteBraidError } from '../src/client.js';
import { startTestServer, waitFor, type HttpResult, type TestServer } from './helpers.js';

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
  // every row scored by the index, not the hot overlay: several tests compare two requests, and the indexer
  // catching up between them would change a freshness_penalty (a CI run on Node 26 saw it)
  for (const tenant of ['acme', 'other']) {
    await waitFor(`${tenant} indexed`, async () => {
      const e = await s.post('/v1/explain', { table: 'articles', tenant_id: tenant, text: 'solar', vector: [1, 0, 0], freshness: 'indexed' });
      return e.status === 200 && e.body.pending_feature_count === 0;
    });
  }
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
      'fusion_method', 'graph_nodes_read', 'hot_overlay_searched', 'lexical_cache_hits', 'lexical_cache_misses', 'lexical_indexed_documents',
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

describe('JSON query (POST /v1/query, the JSON form of route 2)', () => {
  const shelf = [
    { id: 'b1', fields: { title: 'solar roof tiles', body: 'panels on every roof', topic: 'energy', year: 2024, emb: [1, 0, 0], links: ['b2', 'b5'] } },
    { id: 'b2', fields: { title: 'solar farms', body: 'fields of panels and sheep', topic: 'energy', year: 2023, emb: [0.9, 0.1, 0], links: ['b3'] } },
    { id: 'b3', fields: { title: 'wind farms at sea', body: 'turbines beside solar buoys', topic: 'energy', year: 2024, emb: [0.7, 0.3, 0], links: [] } },
    { id: 'b4', fields: { title: 'solar ovens', body: 'cooking with the sun', topic: 'food', year: 2022, emb: [0.5, 0.5, 0], links: ['b1'] } },
    { id: 'b5', fields: { title: 'bread and butter', body: 'flour water yeast salt', topic: 'food', year: 2024, emb: [0, 1, 0], links: ['b4'] } },
    { id: 'b6', fields: { title: 'solar storage', body: 'batteries for the night', topic: 'energy', year: 2022, emb: [0.8, 0, 0.2], links: ['b1'] } },
    { id: 'b7', fields: { title: 'hydro dams', body: 'water and solar hybrids', topic: 'energy', year: 2021, emb: [0.6, 0.2, 0.2], links: [] } },
    { id: 'b8', fields: { title: 'soup of the day', body: 'a warm solar-cooked soup', topic: 'food', year: 2023, emb: [0.1, 0.9, 0], links: ['b5'] } },
  ];
  const ids = (r: HttpResult) => r.body.results.map((x: { record_id: string }) => x.record_id);
  /**
   * A cursor's signed payload without its issue time (`t`, ms): two runs of one query at one epoch issue
   * cursors that differ only there (crates/engine/src/query/cursor.rs).
   */
  const cursorPosition = (cursor: string | null) => {
    if (cursor === null) return null;
    const { t: _issued, ...position } = JSON.parse(Buffer.from(cursor.split('.')[0]!, 'base64url').toString('utf8'));
    return position;
  };
  /** What both routes must agree on: the rows, the page position and the plan; not the measured timings. */
  /** `paged`: the two may differ in which access paths ran, since only the first request of a page after the first ranks it (docs/query.md, "Paging"). */
  const agree = (json: HttpResult, ql: HttpResult, what: string, paged = false) => {
    expect(json.status, `${what}: ${JSON.stringify(json.body)}`).toBe(200);
    expect(ql.status, `${what}: ${JSON.stringify(ql.body)}`).toBe(200);
    expect(Object.keys(json.body).sort()).toEqual(['explain', 'next_cursor', 'results']);
    expect(json.body.results, what).toEqual(ql.body.results);
    expect(cursorPosition(json.body.next_cursor), what).toEqual(cursorPosition(ql.body.next_cursor));
    for (const field of [
      'read_epoch', 'selected_strategy', 'fusion_method', 'freshness_mode', 'returned_count', 'candidate_budget',
      'text_candidates', 'vector_candidates', 'scalar_filter_predicates', 'skipped_access_paths', ...(paged ? [] : ['opened_candidate_streams']),
    ]) expect(json.body.explain[field], `${what}: explain.${field}`).toEqual(ql.body.explain[field]);
    expect(json.body.explain.planner_candidates.map((c: { record_id: string }) => c.record_id), what)
      .toEqual(ql.body.explain.planner_candidates.map((c: { record_id: string }) => c.record_id));
  };
  const both = async (json: Record<string, unknown>, ql: string) => ({
    json: await s.post('/v1/query', { table: 'shelf', tenant_id: 'acme', ...json }),
    ql: await s.post('/v1/nativeql', {
      query: ql.startsWith('EXPLAIN ') ? `EXPLAIN SEARCH shelf TENANT 'acme' ${ql.slice(8)}` : `SEARCH shelf TENANT 'acme' ${ql}`,
    }),
  });

  beforeAll(async () => {
    const r = await s.post('/v1/records/put-batch', { records: shelf.map((d) => ({ table: 'shelf', tenant_id: 'acme', ...d })) });
    expect(r.status).toBe(200);
    // the rows scored by the index, not the hot overlay, so that the indexer catching up between the two
    // requests of a comparison cannot change a freshness_penalty
    await waitFor('the shelf indexed', async () => {
      const e = await s.post('/v1/explain', { table: 'shelf', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], freshness: 'indexed' });
      return e.status === 200 && e.body.pending_feature_count === 0;
    });
  });

  it('answers as /v1/nativeql does for the same query: text, vector, filter, graph, time and hybrid', async () => {
    const epoch = (await s.get('/v1/metrics/public-safe')).body.latest_epoch;
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['text', { text: 'solar' }, "MATCH 'solar'"],
      ['text in one column', { text: 'solar', text_field: 'title', top_k: 3 }, "MATCH 'solar' IN title LIMIT 3"],
      ['vector', { vector: [1, 0, 0] }, 'NEAR [1, 0, 0]'],
      ['vector in one column', { vector: [0, 1, 0], vector_field: 'emb', top_k: 4 }, 'NEAR [0, 1, 0] IN emb LIMIT 4'],
      ['filter', { scalar_eq: { topic: 'food', year: 2024 } }, "WHERE topic = 'food' AND year = 2024"],
      ['graph', { graph_seed: 'b1', graph_depth: 2 }, "GRAPH FROM 'b1' DEPTH 2"],
      ['hybrid', { text: 'solar panels', vector: [1, 0, 0], scalar_eq: { topic: 'energy' }, top_k: 3 }, "MATCH 'solar panels' NEAR [1, 0, 0] WHERE topic = 'energy' LIMIT 3"],
      [
        'hybrid, relative_score, graph, as of, explain',
        {
          explain: true, text: 'solar', vector: [1, 0, 0], graph_seed: 'b4', temporal_as_of: epoch, freshness: 'latest',
          fusion: 'relative_score', fusion_weights: { lexical: 0.5, vector: 0.3, relational: 0.2 }, candidate_budget: 50, top_k: 4,
        },
        `EXPLAIN MATCH 'solar' NEAR [1, 0, 0] GRAPH FROM 'b4' AS OF ${epoch} FRESHNESS latest
           FUSE relative_score WEIGHTS (lexical 0.5, vector 0.3, relational 0.2) BUDGET 50 LIMIT 4`,
      ],
      ['indexed freshness', { text: 'solar', freshness: 'indexed' }, "MATCH 'solar' FRESHNESS indexed"],
      ['projection', { text: 'solar', return_fields: ['title', 'year'] }, "MATCH 'solar' RETURN title, year"],
      ['no fields', { vector: [1, 0, 0], return_fields: [] }, 'NEAR [1, 0, 0] RETURN NONE'],
    ];
    // every route's answer here is written by the engine (docs/api.md, "How a request is served"): the
    // same members as the schemas give, nested alike, and the same type
    const shape = (v: unknown): unknown => {
      if (Array.isArray(v)) return v.length === 0 ? [] : [shape(v[0])];
      if (v === null || typeof v !== 'object') return v === null ? 'null' : typeof v;
      return Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b)).map(([k, x]) => [k, shape(x)]));
    };
    for (const [what, json, ql] of cases) {
      const r = await both(json, ql);
      agree(r.json, r.ql, what);
      expect(r.json.body.results.length, what).toBeGreaterThan(0);
      expect(shape(r.json.body), what).toEqual(shape(r.ql.body));
      // the explain route fills planner_candidates, as a query with explain: true does
      const explained = await s.post('/v1/explain', { table: 'shelf', tenant_id: 'acme', ...json });
      const withCandidates = await s.post('/v1/query', { table: 'shelf', tenant_id: 'acme', ...json, explain: true });
      expect(shape(withCandidates.body.explain), what).toEqual(shape(explained.body));
      expect(r.json.headers.get('content-type'), what).toBe(explained.headers.get('content-type'));
      expect(r.ql.headers.get('content-type'), what).toBe(explained.headers.get('content-type'));
    }
    // a few of them, pinned: the JSON form really ran what it was given
    const hybrid = await s.post('/v1/query', { table: 'shelf', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], scalar_eq: { topic: 'energy' }, top_k: 3 });
    expect(ids(hybrid).sort()).toEqual(['b1', 'b2', 'b6']);
    const finals = hybrid.body.results.map((x: { score: { final_score: number } }) => x.score.final_score);
    expect(finals).toEqual([...finals].sort((a, b) => b - a));
    for (const row of hybrid.body.results) {
      expect(row.fields.topic).toBe('energy');
      expect(row.score.lexical).toBeGreaterThan(0);
      expect(row.score.vector).toBeGreaterThan(0.9);
    }
    expect(hybrid.body.explain.fusion_method).toBe('rrf');
    expect(hybrid.body.explain.planner_candidates).toEqual([]);
    const explained = await s.post('/v1/query', { table: 'shelf', tenant_id: 'acme', text: 'solar', explain: true });
    expect(explained.body.explain.planner_candidates.length).toBeGreaterThan(0);
    const filtered = await s.post('/v1/query', { table: 'shelf', tenant_id: 'acme', scalar_eq: { topic: 'food' }, top_k: 10 });
    expect(ids(filtered).sort()).toEqual(['b4', 'b5', 'b8']);
    const projected = await s.post('/v1/query', { table: 'shelf', tenant_id: 'acme', text: 'solar', return_fields: ['year'] });
    for (const row of projected.body.results) expect(Object.keys(row.fields)).toEqual(['year']);
  });

  it('pages with next_cursor like /v1/nativeql, and the cursors of one route page the other', async () => {
    const json = { table: 'shelf', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], top_k: 2 };
    const ql = "SEARCH shelf TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] LIMIT 2";
    const whole = await s.post('/v1/query', { ...json, top_k: 100 });
    expect(whole.body.next_cursor).toBeNull();
    const seen: string[] = [];
    let jsonCursor: string | null = null;
    let qlCursor: string | null = null;
    for (let page = 0; page === 0 || jsonCursor !== null; page++) {
      expect(page, 'pages end').toBeLessThan(10);
      const a = await s.post('/v1/query', jsonCursor === null ? json : { ...json, cursor: jsonCursor });
      const b = await s.post('/v1/nativeql', { query: qlCursor === null ? ql : `${ql} CURSOR '${qlCursor}'` });
      agree(a, b, `page ${page + 1}`, page > 0);
      if (page === 1) {
        // page 2 is ranked again by the first request at the pinned epoch, and its list kept for the next
        expect(a.body.explain.lexical_cache_misses).toBe(1);
        expect(b.body.explain.lexical_cache_hits).toBe(1);
      }
      // across: the JSON route's cursor on the QL route, and the QL route's cursor as JSON
      if (jsonCursor !== null) {
        const crossQl = await s.post('/v1/nativeql', { query: `${ql} CURSOR '${jsonCursor}'` });
        const crossJson = await s.post('/v1/query', { ...json, cursor: qlCursor });
        agree(a, crossQl, `page ${page + 1}, JSON cursor on nativeql`, true);
        agree(crossJson, b, `page ${page + 1}, QL cursor on /v1/query`, true);
      }
      seen.push(...ids(a));
      jsonCursor = a.body.next_cursor;
      qlCursor = b.body.next_cursor;
      expect(qlCursor === null).toBe(jsonCursor === null);
    }
    // every row once, in the order of one big page
    expect(seen).toEqual(ids(whole));
    expect(seen.length).toBeGreaterThan(4);
    // a cursor belongs to its query, on either route
    const first = await s.post('/v1/query', json);
    const other = await s.post('/v1/query', { ...json, text: 'wind', cursor: first.body.next_cursor });
    expect(other.status).toBe(400);
    expect(other.body.code).toBe('cursor_query_mismatch');
    // the same query with its defaults spelled out is the same query
    const spelled = { ...json, candidate_budget: 100, freshness: 'latest', fusion: 'rrf', fusion_weights: {}, scalar_eq: {} };
    const second = await s.post('/v1/query', { ...spelled, cursor: first.body.next_cursor });
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    expect(ids(second)).toEqual(seen.slice(2, 4));
  });

  it('refuses bad bodies with the codes and messages /v1/explain gives', async () => {
    const base = { table: 'shelf', tenant_id: 'acme' };
    const bad: Array<[string, unknown, string]> = [
      ['an unknown field', { ...base, bogus: 1 }, 'unknown_field'],
      ['a body branch_id (branches are addressed by header)', { ...base, branch_id: 'main' }, 'unknown_field'],
      ['a wrong type', { ...base, top_k: '5' }, 'invalid_request'],
      ['a nested unknown field', { ...base, fusion_weights: { lexical: 1, social: 2 } }, 'unknown_field'],
      ['top_k over 1000', { ...base, top_k: 5000 }, 'top_k_out_of_range'],
      ['top_k 0', { ...base, text: 'solar', top_k: 0 }, 'top_k_out_of_range'],
      ['no tenant', { table: 'shelf' }, 'invalid_query'],
      ['no table', { tenant_id: 'acme' }, 'invalid_query'],
      ['a bad table name', { ...base, table: 'no-dashes' }, 'invalid_name'],
      ['a table that does not exist', { ...base, table: 'nope' }, 'unknown_table'],
      ['a column that does not exist', { ...base, scalar_eq: { nope: 1 } }, 'unknown_column'],
      ['a vector of another length', { ...base, vector: [1, 2] }, 'vector_dimension_mismatch'],
      ['a forged cursor', { ...base, cursor: 'forged.cursor' }, 'invalid_cursor'],
      ['an unknown freshness', { ...base, freshness: 'soon' }, 'invalid_query'],
      ['an unknown fusion', { ...base, fusion: 'best' }, 'invalid_query'],
      ['an epoch in the future', { ...base, temporal_as_of: Number.MAX_SAFE_INTEGER }, 'temporal_in_future'],
      ['not an object', [base], 'invalid_request'],
      ['not JSON', '{"table": ', 'invalid_json'],
      // bodies the engine's reading of /v1/query leaves to the service (crates/engine/src/wire.rs)
      ['a null where the schema has none', { ...base, top_k: null }, 'invalid_request'],
      ['a null table', { ...base, table: null }, 'invalid_request'],
      ['a fractional top_k', { ...base, top_k: 2.5 }, 'invalid_request'],
      ['a null weight', { ...base, fusion_weights: { lexical: null } }, 'invalid_request'],
      ['a vector holding a string', { ...base, vector: [1, '0', 0] }, 'invalid_request'],
      ['a __proto__ key in scalar_eq', '{"table":"shelf","tenant_id":"acme","scalar_eq":{"__proto__":{}}}', 'invalid_json'],
      ['a lone surrogate', '{"table":"shelf","tenant_id":"acme","text":"\\ud800"}', 'invalid_json'],
      ['a number past f64', '{"table":"shelf","tenant_id":"acme","vector":[1e400,0,0]}', 'vector_not_finite'],
      ['a list of members', '[["shelf","acme"]]', 'invalid_request'],
    ];
    for (const [what, body, code] of bad) {
      const json = await s.post('/v1/query', body);
      const explain = await s.post('/v1/explain', body);
      expect(json.status, what).toBe(400);
      expect(json.body, what).toEqual({ code, error: expect.any(String) });
      expect(json.body, what).toEqual(explain.body);
    }
    const missingBranch = await s.post('/v1/query', base, { 'x-braid-branch': 'nope' });
    expect(missingBranch.status).toBe(404);
    expect(missingBranch.body).toEqual((await s.post('/v1/explain', base, { 'x-braid-branch': 'nope' })).body);
    expect(missingBranch.body.code).toBe('branch_not_found');
    const badHeader = await s.post('/v1/query', base, { 'x-braid-branch': 'not a name' });
    expect(badHeader.status).toBe(400);
    expect(badHeader.body.code).toBe('invalid_name');
    const wrongMethod = await s.get('/v1/query');
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
  });

  it('reads the branch its headers address, as /v1/nativeql does', async () => {
    expect((await s.post('/v1/admin/snapshot', { target: 'shelf_snap' })).status).toBe(200);
    expect((await s.post('/v1/admin/restore', { source: 'shelf_snap', target: 'shelf_fork' })).status).toBe(200);
    const fork = { 'x-braid-branch': 'shelf_fork' };
    const put = await s.post('/v1/records/put', { table: 'shelf', tenant_id: 'acme', id: 'f1', fields: { title: 'solar only on the fork' } }, fork);
    expect(put.status).toBe(200);
    const body = { table: 'shelf', tenant_id: 'acme', text: 'fork' };
    const onFork = await s.post('/v1/query', body, fork);
    const qlOnFork = await s.post('/v1/nativeql', { query: "SEARCH shelf TENANT 'acme' MATCH 'fork'" }, fork);
    expect(ids(onFork)).toEqual(['f1']);
    expect(ids(qlOnFork)).toEqual(['f1']);
    expect(ids(await s.post('/v1/query', body))).toEqual([]);
  });

  it('BraidClient.query sends it: the answer of nativeQuery, errors as RemoteBraidError with the code, a branch by ref', async () => {
    const client = new BraidClient({ url: s.url });
    const json = await client.query({ table: 'shelf', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], top_k: 3 });
    const ql = await client.nativeQuery("SEARCH shelf TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] LIMIT 3");
    expect(json.results).toEqual(ql.results);
    expect(json.results).toHaveLength(3);
    expect(cursorPosition(json.next_cursor)).toEqual(cursorPosition(ql.next_cursor));
    const page2 = await client.query({ table: 'shelf', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], top_k: 3, cursor: json.next_cursor });
    expect(page2.results.map((r) => r.record_id)).not.toContain(json.results[0]!.record_id);
    const refused = client.query({ table: 'shelf', tenant_id: 'acme', top_k: 0 });
    await expect(refused).rejects.toBeInstanceOf(RemoteBraidError);
    await expect(refused).rejects.toMatchObject({ code: 'top_k_out_of_range', httpStatus: 400, body: { code: 'top_k_out_of_range' } });
    const onFork = await client.query({ table: 'shelf', tenant_id: 'acme', text: 'fork' }, { branchId: 'shelf_fork' });
    expect(onFork.results.map((r) => r.record_id)).toEqual(['f1']);
    const forkClient = new BraidClient({ url: s.url, branch: { branchId: 'shelf_fork' } });
    expect((await forkClient.query({ table: 'shelf', tenant_id: 'acme', text: 'fork' })).results).toHaveLength(1);
    await expect(client.query({ table: 'shelf', tenant_id: 'acme' }, { branchId: 'nope' })).rejects.toMatchObject({ code: 'branch_not_found', httpStatus: 404 });
  });

  // found by a black-box test: the engine wrote `1.0` where the replay, written by the service, had `1`
  it('a replay is the bytes of the answer it replays, on /v1/query and /v1/nativeql', async () => {
    const send = async (route: string, body: unknown, key: string) => {
      const res = await fetch(`${s.url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: JSON.stringify(body) });
      return { replayed: res.headers.get('idempotent-replayed'), text: await res.text() };
    };
    // a filter-only list: every final_score is the whole number 1
    for (const [route, body] of [
      ['/v1/query', { table: 'shelf', tenant_id: 'acme', scalar_eq: { topic: 'energy' }, top_k: 3 }],
      ['/v1/nativeql', { query: "SEARCH shelf TENANT 'acme' WHERE topic = 'energy' LIMIT 3" }],
    ] as const) {
      const first = await send(route, body, `bytes-${route}`);
      const again = await send(route, body, `bytes-${route}`);
      expect([first.replayed, again.replayed]).toEqual([null, 'true']);
      expect(first.text).toContain('"final_score":1,');
      expect(again.text).toBe(first.text);
    }
  });

  it('takes Idempotency-Key like /v1/nativeql: a retry replays the first answer, another body is 409', async () => {
    const body = { table: 'shelf', tenant_id: 'acme', text: 'solar', top_k: 2 };
    const key = { 'idempotency-key': 'json-query-1' };
    const first = await s.post('/v1/query', body, key);
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    // a write in between: a retry still answers what the first request answered, cursor and timings included
    await s.post('/v1/records/put', { table: 'shelf', tenant_id: 'acme', id: 'b9', fields: { title: 'solar solar solar' } });
    const again = await s.post('/v1/query', body, key);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(JSON.stringify(again.body)).toBe(JSON.stringify(first.body));
    const fresh = await s.post('/v1/query', body);
    expect(ids(fresh)).toContain('b9');
    const reused = await s.post('/v1/query', { ...body, top_k: 3 }, key);
    expect(reused.status).toBe(409);
    expect(reused.body.code).toBe('idempotency_key_reused');
    // scoped by method and path: the same key on /v1/nativeql is another request
    const ql = await s.post('/v1/nativeql', { query: "SEARCH shelf TENANT 'acme' MATCH 'solar' LIMIT 2" }, key);
    expect(ql.status).toBe(200);
    expect(ql.headers.get('idempotent-replayed')).toBeNull();
    // a failed request stores nothing: fixed, the same key runs
    const failed = await s.post('/v1/query', { ...body, top_k: 0 }, { 'idempotency-key': 'json-query-2' });
    expect(failed.body.code).toBe('top_k_out_of_range');
    const retried = await s.post('/v1/query', { ...body, top_k: 0 }, { 'idempotency-key': 'json-query-2' });
    expect(retried.body.code).toBe('top_k_out_of_range');
    const invalid = await s.post('/v1/query', body, { 'idempotency-key': 'x'.repeat(256) });
    expect(invalid.status).toBe(400);
    expect(invalid.body.code).toBe('idempotency_key_invalid');
  });
});

describe('equality filters on long strings (keyed by a digest, checked against the value)', () => {
  it('return exactly the records holding the string, over /v1/query and /v1/nativeql', async () => {
    const stem = 'a paragraph far longer than the sixty-four bytes an equality index keeps as the key itself, ';
    const records = ['one', 'two', 'one', 'three'].map((n, i) => ({ table: 'notes', tenant_id: 'acme', id: `n${i}`, fields: { body: `${stem}${n}` } }));
    expect((await s.post('/v1/records/put-batch', { records })).status).toBe(200);
    const filtered = async (value: string) => {
      const r = await s.post('/v1/query', { table: 'notes', tenant_id: 'acme', scalar_eq: { body: value }, top_k: 10 });
      expect(r.status).toBe(200);
      return (r.body.results as { record_id: string }[]).map((x) => x.record_id).sort();
    };
    expect(await filtered(`${stem}one`)).toEqual(['n0', 'n2']);
    expect(await filtered(`${stem}three`)).toEqual(['n3']);
    expect(await filtered(`${stem}four`)).toEqual([]);
    expect(await filtered(stem)).toEqual([]);
    const ql = await s.post('/v1/nativeql', { query: `SEARCH notes TENANT 'acme' WHERE body = '${stem}two' LIMIT 10` });
    expect(ql.status).toBe(200);
    expect((ql.body.results as { record_id: string }[]).map((x) => x.record_id)).toEqual(['n1']);
  });
});
