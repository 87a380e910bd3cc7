// GET /v1/openapi.json: the OpenAPI document generated from the route schemas describes every spec route,
// and the real responses of every route (successes and errors) validate against it.
import { Ajv, type ValidateFunction } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type HttpResult, type TestServer } from './helpers.js';

/** The 14 routes of the service interface; `idem` routes take Idempotency-Key and document 409. */
const SPEC_ROUTES = [
  { n: 1, method: 'get', path: '/v1/graphql/schema', idem: false },
  { n: 2, method: 'post', path: '/v1/nativeql', idem: true },
  { n: 3, method: 'post', path: '/v1/admin/restore', idem: true },
  { n: 4, method: 'post', path: '/v1/explain', idem: false },
  { n: 5, method: 'post', path: '/v1/insert', idem: true },
  { n: 6, method: 'post', path: '/v1/graphql/bounded', idem: false },
  { n: 7, method: 'post', path: '/v1/graphql', idem: true },
  { n: 8, method: 'get', path: '/v1/branches', idem: false },
  { n: 9, method: 'post', path: '/v1/records/put-batch', idem: true },
  { n: 10, method: 'post', path: '/v1/admin/snapshot', idem: true },
  { n: 11, method: 'post', path: '/v1/records/put', idem: true },
  { n: 12, method: 'get', path: '/v1/metrics/public-safe', idem: false },
  { n: 13, method: 'get', path: '/v1/ready', idem: false },
  { n: 14, method: 'post', path: '/v1/records/get', idem: false },
] as const;

/** Extensions (docs/api.md) described like the spec routes. */
const EXTENSION_ROUTES = [
  { n: 'query', method: 'post', path: '/v1/query', idem: true },
] as const;

const ROUTES = [...SPEC_ROUTES, ...EXTENSION_ROUTES];

const ERROR_STATUSES = ['400', '401', '403', '404', '415', '429', '500', '502', '503'];

type Json = Record<string, any>;

let s: TestServer;
let secured: TestServer;
let doc: Json;
const ajv = new Ajv({ strict: false, allErrors: true });
const validators = new Map<string, ValidateFunction>();
/** `${method} ${path}` -> statuses whose real responses were validated. */
const exercised = new Map<string, Set<number>>();

/**
 * The response schema, made strict: an object schema that lists properties and says nothing about
 * others gets `additionalProperties: false`, so a field the document does not describe fails.
 */
function strict(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(strict);
  if (!schema || typeof schema !== 'object') return schema;
  const out: Json = {};
  for (const [k, v] of Object.entries(schema)) out[k] = k === 'properties' || k === 'patternProperties' ? Object.fromEntries(Object.entries(v as Json).map(([p, sub]) => [p, strict(sub)])) : strict(v);
  if (out.properties && !('additionalProperties' in out) && !out.patternProperties) out.additionalProperties = false;
  return out;
}

function validatorFor(method: string, path: string, status: number, mediaType = 'application/json'): ValidateFunction {
  const key = `${method} ${path} ${status} ${mediaType}`;
  let fn = validators.get(key);
  if (!fn) {
    const response = doc.paths?.[path]?.[method]?.responses?.[String(status)];
    expect(response, `${key} is not in the document`).toBeDefined();
    const schema = response.content?.[mediaType]?.schema;
    expect(schema, `${key} has no ${mediaType} schema`).toBeDefined();
    fn = ajv.compile(strict(schema) as object);
    validators.set(key, fn);
  }
  return fn;
}

/** Checks a real response against the document and records that the route/status was exercised. */
function conforms(method: 'get' | 'post', path: string, r: HttpResult, expected: number): HttpResult {
  expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBe(expected);
  const mediaType = (r.headers.get('content-type') ?? '').split(';')[0]!.trim();
  // JSON, or GraphQL's JSON to a client that asks for it
  expect(mediaType).toMatch(/^application\/(graphql-response\+)?json$/);
  const fn = validatorFor(method, path, r.status, mediaType);
  expect(fn(r.body), `${method.toUpperCase()} ${path} ${r.status} ${JSON.stringify(r.body).slice(0, 400)}\n${ajv.errorsText(fn.errors)}`).toBe(true);
  const seen = exercised.get(`${method} ${path}`) ?? new Set<number>();
  seen.add(r.status);
  exercised.set(`${method} ${path}`, seen);
  return r;
}

const post = (path: string, body: unknown, expected: number, headers?: Record<string, string>) =>
  s.post(path, body, headers).then((r) => conforms('post', path, r, expected));
const get = (path: string, expected: number, headers?: Record<string, string>) => s.get(path, headers).then((r) => conforms('get', path, r, expected));

const rec = (id: string, fields: Json) => ({ table: 'articles', tenant_id: 'acme', id, fields });

beforeAll(async () => {
  s = await startTestServer();
  secured = await startTestServer({ config: { authTokens: ['s3cret'] } });
  const r = await s.get('/v1/openapi.json');
  expect(r.status).toBe(200);
  doc = r.body;
});

afterAll(async () => {
  await s?.destroy();
  await secured?.destroy();
});

describe('the document', () => {
  it('is OpenAPI 3 with info; bearer security only from an engine that requires a token', async () => {
    expect(doc.openapi).toMatch(/^3\.\d+\.\d+$/);
    expect(doc.info).toMatchObject({ title: 'Braid', version: expect.any(String) });
    // this engine accepts any request (development): a declared requirement would be untrue
    expect(doc.security).toBeUndefined();
    const securedDoc = (await secured.get('/v1/openapi.json', { authorization: 'Bearer s3cret' })).body;
    expect(securedDoc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(securedDoc.security).toEqual([{ bearer: [] }]);
  });

  it('describes every spec route and POST /v1/query with its method, body, 200 and error statuses', () => {
    for (const route of ROUTES) {
      const item = doc.paths[route.path];
      expect(item, `route ${route.n} ${route.path}`).toBeDefined();
      expect(Object.keys(item), route.path).toEqual([route.method]);
      const op = item[route.method];
      expect(op.summary, route.path).toEqual(expect.any(String));
      const statuses = Object.keys(op.responses).sort();
      const expected = ['200', ...ERROR_STATUSES, ...(route.idem ? ['409'] : [])].sort();
      expect(statuses, route.path).toEqual(expected);
      for (const status of statuses) {
        expect(op.responses[status].description, `${route.path} ${status}`).toEqual(expect.any(String));
        expect(op.responses[status].content['application/json'].schema, `${route.path} ${status}`).toBeTypeOf('object');
      }
      for (const status of ERROR_STATUSES) {
        const schema = op.responses[status].content['application/json'].schema;
        // /v1/ready answers 503 with its readiness body, whose `code` is there only when not ready
        const required = route.path === '/v1/ready' && status === '503' ? ['error', 'ready'] : ['code', 'error'];
        expect(schema.required, `${route.path} ${status}`).toEqual(expect.arrayContaining(required));
        expect(Object.keys(schema.properties), `${route.path} ${status}`).toEqual(expect.arrayContaining(['code', 'error']));
      }
      if (route.method === 'post') expect(op.requestBody.content['application/json'].schema, route.path).toBeTypeOf('object');
      else expect(op.requestBody, route.path).toBeUndefined();
      const headers = (op.parameters ?? []).filter((p: Json) => p.in === 'header').map((p: Json) => p.name.toLowerCase());
      expect(headers, route.path).toEqual(expect.arrayContaining(['x-braid-database', 'x-braid-branch']));
      expect(headers.includes('idempotency-key'), route.path).toBe(route.idem);
    }
    expect(doc.paths['/v1/records/put'].post.requestBody.content['application/json'].schema.anyOf).toHaveLength(2);
    expect(doc.paths['/v1/insert'].post.deprecated).toBe(true);
    expect(doc.paths['/v1/ready'].get.responses['503'].content['application/json'].schema.required).toContain('ready');
  });

  it('the strict validation rejects a field the document does not describe', () => {
    const fn = validatorFor('post', '/v1/records/get', 200);
    expect(fn({ record: null })).toBe(true);
    expect(fn({ record: null, extra: 1 })).toBe(false);
    expect(fn({ record: { id: 'a', table: 't', tenant_id: 'x', version_id: 1, fields: {}, extra: 1 } })).toBe(false);
    // error bodies are open: ql_syntax_error adds line, column and expected, put-batch adds index
    expect(validatorFor('post', '/v1/nativeql', 400)({ code: 'ql_syntax_error', error: 'e', line: 1 })).toBe(true);
  });

  it('POST /v1/query takes the body of /v1/explain and answers the body of /v1/nativeql', () => {
    const op = (path: string) => doc.paths[path].post;
    const body = (path: string) => op(path).requestBody.content['application/json'].schema;
    expect(body('/v1/query')).toEqual(body('/v1/explain'));
    expect(op('/v1/query').responses).toEqual(op('/v1/nativeql').responses);
  });

  it('also describes the branch-state extension, and not itself', () => {
    expect(Object.keys(doc.paths['/v1/admin/branch-state'])).toEqual(['post']);
    expect(doc.paths['/v1/openapi.json']).toBeUndefined();
    expect(Object.keys(doc.paths).sort()).toEqual([...ROUTES.map((r) => r.path), '/v1/admin/branch-state'].sort());
  });
});

describe('real responses validate against the document', () => {
  it('records: put (11), insert (5), put-batch (9), get (14)', async () => {
    await post('/v1/records/put', { record: rec('a1', { title: 'Solar panels', topic: 'energy', year: 2024, embedding: [0.9, 0.1, 0], related: ['a2'] }) }, 200);
    await post('/v1/records/put', rec('a0', { title: 'Bare record input' }), 200);
    await post('/v1/records/put', { record: rec('a1', {}), branch_id: 'nope' }, 404);
    await post('/v1/records/put', { record: rec('a1', {}), extra: 1 }, 400);
    await post('/v1/records/put', '{"record": ', 400);
    await post('/v1/records/put', 'not json', 400, { 'content-type': 'text/plain' });
    await post('/v1/records/put', rec('a1', {}), 415, { 'content-encoding': 'gzip' });

    const insert = await post('/v1/insert', rec('a5', { title: 'Inserted' }), 200);
    expect(insert.headers.get('deprecation')).toBe('true');
    await post('/v1/insert', { ...rec('a5', {}), table: 'bad-name' }, 400);

    const batch = await post('/v1/records/put-batch', {
      include_write_timing: true,
      records: [
        rec('a2', { title: 'Wind and solar hybrids', topic: 'energy', year: 2023, embedding: [0.8, 0.2, 0], related: [] }),
        rec('a3', { title: 'Sourdough', topic: 'food', year: 2024, embedding: [0, 1, 0], related: ['a1'] }),
      ],
    }, 200);
    expect(batch.body.write_timing).toHaveProperty('wal_fsync_ms');
    await post('/v1/records/put-batch', { records: [rec('a4', {})] }, 200);
    const bad = await post('/v1/records/put-batch', { records: [rec('a6', {}), rec('a7', { year: 'x' })] }, 400);
    expect(bad.body).toMatchObject({ code: 'schema_type_mismatch', index: 1 });
    await post('/v1/records/put-batch', { records: [] }, 400);

    await post('/v1/records/get', { table: 'articles', tenant_id: 'acme', id: 'a1' }, 200);
    const missing = await post('/v1/records/get', { table: 'articles', tenant_id: 'acme', id: 'zz' }, 200);
    expect(missing.body.record).toBeNull();
    await post('/v1/records/get', { table: 'articles', tenant_id: 'acme' }, 400);
    await post('/v1/records/get', { table: 'articles', tenant_id: 'acme', id: 'a1' }, 404, { 'x-braid-branch': 'nope' });
  });

  it('idempotent writes: replay (200) and reuse (409)', async () => {
    const key = { 'idempotency-key': 'openapi-1' };
    await post('/v1/records/put', rec('k1', { title: 'once' }), 200, key);
    const replayed = await post('/v1/records/put', rec('k1', { title: 'once' }), 200, key);
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    await post('/v1/records/put', rec('k1', { title: 'twice' }), 409, key);
    const batchKey = { 'idempotency-key': 'openapi-2' };
    await post('/v1/records/put-batch', { records: [rec('k2', {})] }, 200, batchKey);
    await post('/v1/records/put-batch', { records: [rec('k2', {})] }, 200, batchKey);
    await post('/v1/records/put-batch', { records: [rec('k3', {})] }, 409, batchKey);
    await post('/v1/insert', rec('k4', {}), 200, { 'idempotency-key': 'openapi-3' });
    await post('/v1/insert', rec('k5', {}), 409, { 'idempotency-key': 'openapi-3' });
    await post('/v1/records/put', rec('k6', {}), 400, { 'idempotency-key': 'x'.repeat(256) });
  });

  it('queries: explain (4), nativeql (2), query (extension)', async () => {
    await post('/v1/explain', { table: 'articles', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], scalar_eq: { topic: 'energy' }, top_k: 5 }, 200);
    await post('/v1/explain', { table: 'articles', tenant_id: 'acme', graph_seed: 'a3', temporal_as_of: 1 }, 200);
    await post('/v1/explain', { table: 'articles', tenant_id: 'acme', text: 'solar', top_k: 0 }, 400);
    await post('/v1/explain', { table: 'articles', tenant_id: 'acme', nope: true }, 400);
    await post('/v1/explain', { table: 'articles', tenant_id: 'acme' }, 404, { 'x-braid-branch': 'nope' });

    const q = "EXPLAIN SEARCH articles TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] WHERE topic = 'energy' LIMIT 1";
    const page = await post('/v1/nativeql', { query: q }, 200);
    expect(page.body.next_cursor).toEqual(expect.any(String));
    expect(page.body.explain.planner_candidates.length).toBeGreaterThan(0);
    await post('/v1/nativeql', { query: `${q} CURSOR '${page.body.next_cursor}'` }, 200);
    const syntax = await post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' LIMTI 5" }, 400);
    expect(syntax.body).toMatchObject({ code: 'ql_syntax_error', line: 1, column: 31 });
    await post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' CURSOR 'forged'" }, 400);
    const key = { 'idempotency-key': 'openapi-ql' };
    await post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' MATCH 'solar'" }, 200, key);
    await post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' MATCH 'solar'" }, 200, key);
    await post('/v1/nativeql', { query: "SEARCH articles TENANT 'acme' MATCH 'wind'" }, 409, key);

    const json = { table: 'articles', tenant_id: 'acme', text: 'solar', vector: [1, 0, 0], scalar_eq: { topic: 'energy' }, top_k: 1, explain: true };
    const first = await post('/v1/query', json, 200);
    expect(first.body.next_cursor).toEqual(expect.any(String));
    expect(first.body.explain.planner_candidates.length).toBeGreaterThan(0);
    await post('/v1/query', { ...json, cursor: first.body.next_cursor }, 200);
    await post('/v1/query', { table: 'articles', tenant_id: 'acme', graph_seed: 'a3', temporal_as_of: 1, return_fields: [] }, 200);
    await post('/v1/query', { ...json, top_k: 0 }, 400);
    await post('/v1/query', { ...json, nope: true }, 400);
    await post('/v1/query', { ...json, cursor: 'forged' }, 400);
    await post('/v1/query', json, 404, { 'x-braid-branch': 'nope' });
    const jsonKey = { 'idempotency-key': 'openapi-query' };
    await post('/v1/query', json, 200, jsonKey);
    await post('/v1/query', json, 200, jsonKey);
    await post('/v1/query', { ...json, text: 'wind' }, 409, jsonKey);
  });

  it('GraphQL: schema (1), bounded (6), graphql (7)', async () => {
    const schema = await get('/v1/graphql/schema', 200);
    expect(schema.body.tables).toContain('articles');
    await get('/v1/graphql/schema', 404, { 'x-braid-branch': 'nope' });

    await post('/v1/graphql/bounded', { query: '{ search(table: "articles", tenant_id: "acme", text: "solar", top_k: 5) { results { record_id } } }' }, 200);
    await post('/v1/graphql/bounded', { query: '{ search(' }, 400);
    await post('/v1/graphql/bounded', { nope: 1 }, 400);

    const data = await post('/v1/graphql', { query: '{ search(table: "articles", tenant_id: "acme", text: "solar", top_k: 5) { results { record_id score { final_score } } } }' }, 200);
    expect(data.body.errors).toBeUndefined();
    const errors = await post('/v1/graphql', { query: '{ nope }' }, 200);
    expect(errors.body.errors[0].extensions.code).toEqual(expect.any(String));
    await post('/v1/graphql', { query: 42 }, 400);
    // a document that does not parse is reported inside a 200 `errors` list (spec 4.3 rule 3) ...
    const unparsed = await post('/v1/graphql', { query: '{ search(' }, 200);
    expect(unparsed.body.errors[0].extensions.code).toBe('graphql_bad_request');
    // ... and as a 400 to a client that asks for the GraphQL-over-HTTP media type
    await post('/v1/graphql', { query: '{ search(' }, 400, { accept: 'application/graphql-response+json' });
    // found by a black-box review: the document had no schema for the media type such a client gets
    const asked = await post('/v1/graphql', { query: '{ tables { name } }' }, 200, { accept: 'application/graphql-response+json' });
    expect(asked.headers.get('content-type')).toMatch(/^application\/graphql-response\+json/);
  });

  it('admin: snapshot (10), restore (3), branches (8), branch-state', async () => {
    const snap = await post('/v1/admin/snapshot', { target: 'oa_snap' }, 200);
    expect(snap.body).toMatchObject({ snapshot: true, target: 'oa_snap' });
    await post('/v1/admin/snapshot', { target: 'oa_snap' }, 409);
    await post('/v1/admin/snapshot', { target: 'bad name' }, 400);
    await post('/v1/admin/snapshot', { target: 'oa_snap2' }, 404, { 'x-braid-branch': 'nope' });

    const restored = await post('/v1/admin/restore', { source: 'oa_snap', target: 'oa_audit', verify_record: { table: 'articles', tenant_id: 'acme', id: 'a1' } }, 200);
    expect(restored.body.verification.status).toBe('passed');
    const failed = await post('/v1/admin/restore', { source: 'oa_snap', target: 'oa_audit2', verify_record: { table: 'articles', tenant_id: 'acme', id: 'zz' } }, 200);
    expect(failed.body.verification).toMatchObject({ status: 'failed', record: null, record_visible: false });
    await post('/v1/admin/restore', { source: 'oa_snap', target: 'oa_audit3' }, 200);
    await post('/v1/admin/restore', { source: 'oa_snap', target: 'oa_audit' }, 409);
    await post('/v1/admin/restore', { source: 'no_such', target: 'x' }, 404);
    await post('/v1/admin/restore', { source: 'oa_snap' }, 400);

    await post('/v1/admin/branch-state', { branch_id: 'oa_audit3', state: 'archived' }, 200);
    await post('/v1/records/put', rec('z', {}), 409, { 'x-braid-branch': 'oa_audit3' });
    await post('/v1/admin/branch-state', { branch_id: 'nope', state: 'archived' }, 404);
    await post('/v1/admin/branch-state', { branch_id: 'oa_audit3', state: 'frozen' }, 400);

    const branches = await get('/v1/branches', 200);
    expect(branches.body.branches.map((b: Json) => b.branch_id)).toEqual(expect.arrayContaining(['main', 'oa_audit', 'oa_audit3']));
  });

  it('operations: metrics (12), ready (13)', async () => {
    await get('/v1/metrics/public-safe', 200);
    await get('/v1/metrics/public-safe', 404, { 'x-braid-branch': 'nope' });
    const ready = await get('/v1/ready', 200);
    expect(ready.body.ready).toBe(true);
    const notReady = await get('/v1/ready', 503, { 'x-braid-branch': 'nope' });
    expect(notReady.body).toMatchObject({ ready: false, code: 'branch_not_found' });
  });

  it('401 of every route, from a server that requires a token', async () => {
    for (const route of ROUTES) {
      const r = route.method === 'get' ? await secured.get(route.path) : await secured.post(route.path, {});
      conforms(route.method, route.path, r, 401);
      expect(r.body.code).toBe('unauthorized');
    }
    expect((await secured.get('/v1/openapi.json')).status).toBe(401);
    const ok = await secured.get('/v1/openapi.json', { authorization: 'Bearer s3cret' });
    expect(ok.body.paths).toEqual(doc.paths);
  });

  it('states the names, ranges and enums the engine enforces, and the engine enforces them at the edges (issue 14 item 5)', async () => {
    const bodyOf = (path: string): Json => {
      const schema = doc.paths[path].post.requestBody.content['application/json'].schema;
      return schema.$ref ? doc.components.schemas[schema.$ref.split('/').pop()] : schema;
    };
    const explain = bodyOf('/v1/explain').properties;
    expect(explain.top_k).toMatchObject({ minimum: 1, maximum: 1000 });
    expect(explain.candidate_budget).toMatchObject({ minimum: 1, maximum: 10000 });
    expect(explain.graph_depth).toMatchObject({ minimum: 1, maximum: 8 });
    expect(explain.freshness.enum).toEqual(['latest', 'indexed']);
    expect(explain.fusion.enum).toEqual(['rrf', 'relative_score']);
    expect(JSON.stringify(explain.table)).toContain('^[A-Za-z_][A-Za-z0-9_]{0,63}$');
    expect(JSON.stringify(bodyOf('/v1/admin/snapshot').properties.target)).toContain('^[A-Za-z_][A-Za-z0-9_]{0,63}$');
    const branchHeader = doc.paths['/v1/records/get'].post.parameters.find((p: Json) => p.name === 'x-braid-branch');
    expect(branchHeader.schema.pattern).toBe('^[A-Za-z_][A-Za-z0-9_]{0,63}$');
    const keyHeader = doc.paths['/v1/records/put'].post.parameters.find((p: Json) => p.name === 'idempotency-key');
    expect(keyHeader.schema.pattern).toBe('^[\\x20-\\x7e]{1,255}$');

    // each documented edge: the last value inside is answered, the first outside is a 400 with a code
    const base = { table: 'articles', tenant_id: 'acme', text: 'solar' };
    const edges: Array<[string, unknown, unknown, Json?]> = [
      ['top_k', 1000, 1001],
      ['top_k', 1, 0],
      ['candidate_budget', 10000, 10001],
      ['graph_depth', 8, 9, { graph_seed: 'a1' }],
      ['freshness', 'indexed', 'sometimes'],
      ['fusion', 'relative_score', 'mean'],
      ['table', 'a'.repeat(64), 'a'.repeat(65)],
    ];
    for (const [field, ok, bad, extra] of edges) {
      const good = await s.post('/v1/explain', { ...base, ...extra, [field]: ok });
      expect(good.status === 200 || good.body.code === 'unknown_table', `${field}=${ok}: ${JSON.stringify(good.body)}`).toBe(true);
      const refused = await s.post('/v1/explain', { ...base, ...extra, [field]: bad });
      expect(refused.status, `${field}=${bad}`).toBe(400);
      expect(refused.body.code).toEqual(expect.any(String));
    }
    const header = await s.post('/v1/records/get', { table: 'articles', tenant_id: 'acme', id: 'a1' }, { 'x-braid-branch': 'not a name' });
    expect(header.status).toBe(400);
  });

  it('every spec route and POST /v1/query was exercised with 200 and at least one error status', () => {
    for (const route of ROUTES) {
      const seen = exercised.get(`${route.method} ${route.path}`) ?? new Set<number>();
      expect(seen.has(200), route.path).toBe(true);
      expect(seen.has(401), route.path).toBe(true);
      // GET /v1/branches reads no branch and takes no body: 401 is the error a client can provoke
      if (route.path !== '/v1/branches') expect([...seen].some((status) => status >= 400 && status !== 401), `${route.path}: ${[...seen]}`).toBe(true);
    }
  });
});
