// One failure, one code, whichever door a query comes through (issue 17):
// REST POST /v1/query and /v1/explain, native QL over HTTP and embedded,
// GraphQL (route 7 in its 200 `errors`, the bounded route 6 as a 400) and
// the embedded API. A door whose language cannot say the query at all fails
// in that language first (ql_syntax_error, graphql_validation_failed):
// docs/errors.md, "One code per failure".
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundedSchema } from '../src/graphql/bounded.js';
import { BraidError } from '../src/errors.js';
import { startTestServer, type TestServer } from './helpers.js';

type Door = 'rest' | 'explain' | 'embedded' | 'ql' | 'embedded_ql' | 'graphql' | 'bounded';

interface Case {
  what: string;
  /** The query as JSON: the REST body, the embedded argument, the GraphQL arguments. */
  query: unknown;
  /** The REST body as text, when JSON.stringify cannot write it (Infinity). */
  raw?: string;
  /** The embedded argument, when it differs from `query` (NaN). */
  embedded?: unknown;
  /** The statement; null when the query language cannot say the query. */
  ql: string | null;
  /** What every door that can say the query answers. */
  code: string;
  /** Languages that cannot say it, and the code they answer instead. */
  language?: { ql?: string; graphql?: string };
  /** Doors the query cannot be sent through at all. */
  skip?: Door[];
}

const base = { table: 'docs', tenant_id: 'acme' };
const SEARCH = "SEARCH docs TENANT 'acme'";
const manyFields = Array.from({ length: 1001 }, (_, i) => `f${i}`);

const CASES: Case[] = [
  { what: 'return_fields over the limit', query: { ...base, text: 'solar', return_fields: manyFields }, ql: `${SEARCH} MATCH 'solar' RETURN ${manyFields.join(', ')}`, code: 'invalid_query' },
  {
    what: 'an unknown query field',
    query: { ...base, text: 'solar', bogus: 1 },
    ql: null,
    code: 'unknown_field',
    language: { ql: 'ql_syntax_error', graphql: 'graphql_validation_failed' },
  },
  {
    what: 'a nested unknown field',
    query: { ...base, text: 'solar', fusion_weights: { lexical: 1, social: 2 } },
    ql: `${SEARCH} MATCH 'solar' FUSE rrf WEIGHTS (lexical 1, social 2)`,
    code: 'unknown_field',
    language: { ql: 'ql_syntax_error', graphql: 'graphql_validation_failed' },
  },
  { what: 'k of 0', query: { ...base, text: 'solar', top_k: 0 }, ql: `${SEARCH} MATCH 'solar' LIMIT 0`, code: 'top_k_out_of_range' },
  { what: 'k over 1000', query: { ...base, text: 'solar', top_k: 1001 }, ql: `${SEARCH} MATCH 'solar' LIMIT 1001`, code: 'top_k_out_of_range' },
  {
    what: 'k of another type',
    query: { ...base, text: 'solar', top_k: '5' },
    ql: `${SEARCH} MATCH 'solar' LIMIT '5'`,
    code: 'invalid_request',
    language: { ql: 'ql_syntax_error', graphql: 'graphql_validation_failed' },
  },
  {
    what: 'a vector of strings',
    query: { ...base, vector: ['a', 'b', 'c'] },
    ql: `${SEARCH} NEAR ['a', 'b', 'c']`,
    code: 'invalid_request',
    language: { ql: 'ql_syntax_error', graphql: 'graphql_validation_failed' },
  },
  { what: 'a vector of another length', query: { ...base, vector: [1, 0] }, ql: `${SEARCH} NEAR [1, 0]`, code: 'vector_dimension_mismatch' },
  { what: 'a vector value past the 32-bit floats', query: { ...base, vector: [1e39, 0, 0] }, ql: `${SEARCH} NEAR [1e39, 0, 0]`, code: 'vector_not_finite' },
  {
    what: 'NaN and Infinity in a vector',
    query: { ...base, vector: [Infinity, 0, 0] },
    raw: '{"table": "docs", "tenant_id": "acme", "vector": [1e999, 0, 0]}',
    embedded: { ...base, vector: [NaN, 0, 0] },
    ql: `${SEARCH} NEAR [1e999, 0, 0]`,
    code: 'vector_not_finite',
    // GraphQL's Float is finite by definition, and JSON variables cannot write NaN
    language: { graphql: 'graphql_validation_failed' },
  },
  { what: 'an unknown table', query: { ...base, table: 'nope', text: 'solar' }, ql: "SEARCH nope TENANT 'acme' MATCH 'solar'", code: 'unknown_table' },
  { what: 'a table name that is not a name', query: { ...base, table: 'no_such_table_' + 'x'.repeat(60) }, ql: `SEARCH ${'no_such_table_' + 'x'.repeat(60)} TENANT 'acme'`, code: 'invalid_name' },
  {
    what: 'no tenant',
    query: { table: 'docs', text: 'solar' },
    ql: "SEARCH docs MATCH 'solar'",
    code: 'invalid_query',
    language: { ql: 'ql_syntax_error', graphql: 'graphql_validation_failed' },
  },
  { what: 'an unknown column', query: { ...base, scalar_eq: { nope: 1 } }, ql: `${SEARCH} WHERE nope = 1`, code: 'unknown_column' },
  { what: 'a forged cursor', query: { ...base, text: 'solar', cursor: 'forged.cursor' }, ql: `${SEARCH} MATCH 'solar' CURSOR 'forged.cursor'`, code: 'invalid_cursor' },
  { what: 'a graph deeper than 8', query: { ...base, graph_seed: 'd1', graph_depth: 9 }, ql: `${SEARCH} GRAPH FROM 'd1' DEPTH 9`, code: 'invalid_query' },
  { what: 'an unknown fusion', query: { ...base, text: 'solar', fusion: 'best' }, ql: `${SEARCH} MATCH 'solar' FUSE best`, code: 'invalid_query' },
  { what: 'a candidate budget of 0', query: { ...base, vector: [1, 0, 0], candidate_budget: 0 }, ql: `${SEARCH} NEAR [1, 0, 0] BUDGET 0`, code: 'invalid_query' },
  { what: 'an epoch in the future', query: { ...base, temporal_as_of: 1_000_000 }, ql: `${SEARCH} AS OF 1000000`, code: 'temporal_in_future' },
  { what: 'a query that is not an object', query: [base], ql: null, code: 'invalid_request', skip: ['ql', 'embedded_ql', 'graphql', 'bounded'] },
];

const searchArgs = new Map(boundedSchema.getQueryType()!.getFields().search!.args.map((a) => [a.name, String(a.type)]));

/** A GraphQL search of the query: known fields as typed variables, unknown ones as literals. */
function graphqlSearch(query: Record<string, unknown>): { query: string; variables: Record<string, unknown> } {
  const defs: string[] = [];
  const args: string[] = [];
  const variables: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(query)) {
    const type = searchArgs.get(name);
    if (type) {
      defs.push(`$${name}: ${type}`);
      args.push(`${name}: $${name}`);
      variables[name] = value;
    } else {
      args.push(`${name}: ${JSON.stringify(value)}`);
    }
  }
  return { query: `query Q${defs.length ? `(${defs.join(', ')})` : ''} { search(${args.join(', ')}) { next_cursor } }`, variables };
}

describe('the same bad query answers the same code through every door', () => {
  let s: TestServer;

  beforeAll(async () => {
    s = await startTestServer();
    const put = await s.post('/v1/records/put-batch', {
      records: [
        { table: 'docs', tenant_id: 'acme', id: 'd1', fields: { title: 'solar wind', lang: 'en', v: [1, 0, 0] } },
        { table: 'docs', tenant_id: 'acme', id: 'd2', fields: { title: 'rain', lang: 'de', v: [0, 1, 0] } },
      ],
    });
    expect(put.status).toBe(200);
  });

  afterAll(async () => {
    await s.destroy();
  });

  async function embeddedCode(call: () => Promise<unknown>): Promise<string> {
    const err = await call().then(
      () => 'answered',
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BraidError);
    return (err as BraidError).code;
  }

  async function codes(c: Case): Promise<Partial<Record<Door, string>>> {
    const out: Partial<Record<Door, string>> = {};
    const skip = new Set(c.skip);
    const body = c.raw ?? c.query;
    if (!skip.has('rest')) {
      const r = await s.post('/v1/query', body);
      expect(r.status, `${c.what}: rest`).toBe(400);
      out.rest = r.body.code;
    }
    if (!skip.has('explain')) {
      const r = await s.post('/v1/explain', body);
      expect(r.status, `${c.what}: explain`).toBe(400);
      out.explain = r.body.code;
    }
    if (!skip.has('embedded')) out.embedded = await embeddedCode(() => s.engine.query((c.embedded ?? c.query) as never));
    const statement = c.ql ?? `${SEARCH} BOGUS 1`;
    if (!skip.has('ql')) {
      const r = await s.post('/v1/nativeql', { query: statement });
      expect(r.status, `${c.what}: ql`).toBe(400);
      out.ql = r.body.code;
    }
    if (!skip.has('embedded_ql')) out.embedded_ql = await embeddedCode(() => s.engine.nativeQuery(statement));
    if (!skip.has('graphql') || !skip.has('bounded')) {
      const request = graphqlSearch(c.query as Record<string, unknown>);
      const native = await s.post('/v1/graphql', request);
      expect(native.status, `${c.what}: graphql`).toBe(200);
      const graphqlCodes = new Set(native.body.errors.map((e: { extensions: { code: string } }) => e.extensions.code));
      expect(graphqlCodes.size, `${c.what}: graphql`).toBe(1);
      out.graphql = native.body.errors[0].extensions.code;
      const bounded = await s.post('/v1/graphql/bounded', request);
      expect(bounded.status, `${c.what}: bounded`).toBe(400);
      out.bounded = bounded.body.code;
    }
    return out;
  }

  for (const c of CASES) {
    it(c.what, async () => {
      const expected: Partial<Record<Door, string>> = {};
      for (const door of ['rest', 'explain', 'embedded', 'ql', 'embedded_ql', 'graphql', 'bounded'] as Door[]) {
        if (c.skip?.includes(door)) continue;
        const language = door === 'ql' || door === 'embedded_ql' ? c.language?.ql : door === 'graphql' || door === 'bounded' ? c.language?.graphql : undefined;
        expected[door] = language ?? c.code;
      }
      expect(await codes(c), c.what).toEqual(expected);
    });
  }

  it('the embedded API takes a typed-array vector, and judges its values as the engine does', async () => {
    const plain = await s.engine.query({ ...base, vector: [1, 0, 0], top_k: 2 });
    const typed = await s.engine.query({ ...base, vector: new Float32Array([1, 0, 0]), top_k: 2 });
    expect(typed.results.map((r) => r.record_id)).toEqual(plain.results.map((r) => r.record_id));
    expect(await embeddedCode(() => s.engine.query({ ...base, vector: new Float32Array([NaN, 0, 0]) }))).toBe('vector_not_finite');
    expect(await embeddedCode(() => s.engine.query({ ...base, vector: new Float64Array([1, 0]) }))).toBe('vector_dimension_mismatch');
    // the rest of the query is still checked for its shape
    expect(await embeddedCode(() => s.engine.query({ ...base, vector: new Float32Array([1, 0, 0]), bogus: 1 } as never))).toBe('unknown_field');
  });

  it('a QL syntax error is a BraidError from the one table, on every door', async () => {
    const err = await s.engine.nativeQuery(`${SEARCH} LIMTI 5`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BraidError);
    expect(err).toMatchObject({ code: 'ql_syntax_error', status: 400 });
    const http = await s.post('/v1/nativeql', { query: `${SEARCH} LIMTI 5` });
    expect(http.body).toEqual({ ...(err as BraidError).toBody(), code: 'ql_syntax_error' });
    expect(http.body).toMatchObject({ line: 1, column: 27, expected: expect.any(Array) });
  });
});
