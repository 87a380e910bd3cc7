// What fuzzing the GraphQL routes found (issue 14 item 6; the GraphQL passes of scripts/fuzz-api.sh),
// pinned over real HTTP against a real engine and an in-process gateway in front of it:
//
// - schemathesis's not_a_server_error counted every resolver error as a server error: route 7's errors
//   said only Braid's own codes, which no generic tool can read, so an unknown table or a bad name looked
//   like a crash. Each error now also carries extensions.classification, BAD_REQUEST or INTERNAL_ERROR.
// - a document nested a few thousand levels deep (selection sets, inline fragments, list or object
//   values, list types), well under the token limit, overflowed graphql-js's recursive parser: a 500 on
//   routes 6 and 7. The nesting is now counted on the tokens before parsing: graphql_too_deep.
// - a value nested a few thousand levels deep (a record field, scalar_eq, a GraphQL JSON variable)
//   overflowed JSON.stringify on its way to the engine, and in the gateway's rewrite of a put body: a
//   500 on every route that passes one. It is now invalid_record, as the engine answers a value nested
//   past its own limit of 128 levels.
//
// schemathesis found the first; the other two were found probing what it does not generate.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveGatewayConfig, startGateway, type RunningGateway } from '../src/gateway/index.js';
import { MAX_NESTING } from '../src/graphql/bounds.js';
import { request, startTestServer, type HttpResult, type TestServer } from './helpers.js';

const TOKEN = { authorization: 'Bearer good' };
const DEEP = 5000;

let s: TestServer;
let gateway: RunningGateway;

const graphql = (query: string, variables?: Record<string, unknown>, headers?: Record<string, string>) =>
  s.post('/v1/graphql', variables ? { query, variables } : { query }, headers);
const bounded = (query: string) => s.post('/v1/graphql/bounded', { query });

/** `[[[...1...]]]`, `depth` lists deep, as JSON text (JSON.stringify could not write it). */
const nestedList = (depth: number) => `${'['.repeat(depth)}1${']'.repeat(depth)}`;

/** The engine still answers after a request that used to overflow the stack. */
async function stillServes(): Promise<void> {
  const res = await graphql('{ tables { name } }');
  expect(res.status).toBe(200);
  expect(res.body.data.tables).toEqual([{ name: 'docs' }]);
}

beforeAll(async () => {
  s = await startTestServer();
  gateway = await startGateway(resolveGatewayConfig({ engine: s.url, token: ['good'], rateLimit: 0, authFailureLimit: 0, port: 0, logLevel: 'error' }, {}));
  const seeded = await s.post('/v1/records/put', { table: 'docs', tenant_id: 'acme', id: 'd1', fields: { title: 'solar', lang: 'en' } });
  expect(seeded.status).toBe(200);
});

afterAll(async () => {
  await gateway?.close();
  await s?.destroy();
});

describe('route 7 errors say whose fault they are (extensions.classification)', () => {
  it('an engine refusal inside a resolver is BAD_REQUEST, next to its own code', async () => {
    const res = await graphql('{ search(table: "nope", tenant_id: "acme", text: "x") { next_cursor } record(table: "", tenant_id: "acme", id: "d1") { id } }');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ search: null, record: null });
    // the two fields run at once on the engine's workers: their errors come in the order they finish
    const errors = res.body.errors.map((e: { path: string[]; extensions: unknown }) => [e.path, e.extensions]);
    expect(errors.sort((a: [string[]], b: [string[]]) => a[0][0]!.localeCompare(b[0][0]!))).toEqual([
      [['record'], { code: 'invalid_name', classification: 'BAD_REQUEST' }],
      [['search'], { code: 'unknown_table', classification: 'BAD_REQUEST' }],
    ]);
  });

  it('a put_batch refusal keeps its index; request-level failures are BAD_REQUEST too', async () => {
    const batch = await graphql('mutation { put_batch(records: []) { epoch } }');
    expect(batch.body.errors[0].extensions).toEqual({ code: 'batch_empty', classification: 'BAD_REQUEST' });
    const named = await graphql('mutation { put_batch(records: [{table: "docs", tenant_id: "acme", id: ""}]) { epoch } }');
    expect(named.body.errors[0].extensions).toEqual({ code: 'invalid_name', classification: 'BAD_REQUEST', index: 0 });
    for (const [query, code] of [
      ['{ tables { name }', 'graphql_bad_request'],
      ['{ nope }', 'graphql_validation_failed'],
      ['{ a { b { c { d { e { f { g { h { i } } } } } } } } }', 'graphql_too_deep'],
    ]) {
      const res = await graphql(query!);
      expect(res.status).toBe(200);
      expect(res.body.errors[0].extensions).toEqual({ code, classification: 'BAD_REQUEST' });
    }
  });

  it('a failure of the server is INTERNAL_ERROR', async () => {
    const failing = await startTestServer({ config: { testHooks: true } });
    try {
      expect((await failing.post('/v1/_test/fault', { point: 'wal::sync', actions: 'return(eio)' })).status).toBe(200);
      const res = await failing.post('/v1/graphql', { query: 'mutation { put(record: {table: "docs", tenant_id: "acme", id: "d1"}) { epoch } }' });
      expect(res.status).toBe(200);
      expect(res.body.data).toEqual({ put: null });
      expect(res.body.errors[0]).toMatchObject({ path: ['put'], extensions: { code: 'storage_failure', classification: 'INTERNAL_ERROR' } });
    } finally {
      // fail points are process-wide: leave none behind for the other servers in this file
      await failing.post('/v1/_test/fault', { point: 'wal::sync', actions: 'off' });
      await failing.destroy();
    }
  });

  it('the OpenAPI document states the classification of a GraphQL error', async () => {
    const doc = (await s.get('/v1/openapi.json')).body;
    const error = doc.paths['/v1/graphql'].post.responses['200'].content['application/json'].schema.properties.errors.items;
    expect(error.properties.extensions.required).toEqual(['code', 'classification']);
    expect(error.properties.extensions.properties.classification.anyOf.flatMap((v: { enum: string[] }) => v.enum)).toEqual(['BAD_REQUEST', 'INTERNAL_ERROR']);
  });
});

describe('a document nested deeper than graphql-js can recurse is graphql_too_deep, not a 500', () => {
  const deepDocuments: Record<string, string> = {
    'selection sets': `{ ${'a { '.repeat(DEEP)}b${' }'.repeat(DEEP)} }`,
    'inline fragments': `{ ${'... { '.repeat(DEEP)}tables { name }${' }'.repeat(DEEP)} }`,
    'a list value': `mutation { put(record: {table: "docs", tenant_id: "acme", id: "d2", fields: {a: ${nestedList(DEEP)}}}) { epoch } }`,
    'an object value': `{ search(table: "docs", tenant_id: "acme", scalar_eq: ${'{a: '.repeat(DEEP)}1${'}'.repeat(DEEP)}) { next_cursor } }`,
    'a list type': `query($v: ${'['.repeat(DEEP)}Float${']'.repeat(DEEP)}) { tables { name } }`,
  };

  for (const [what, query] of Object.entries(deepDocuments)) {
    it(`${what}: route 7 answers 200 with the error, route 6 a 400`, async () => {
      const native = await graphql(query);
      expect(native.status).toBe(200);
      expect(native.body.errors).toHaveLength(1);
      expect(native.body.errors[0].extensions).toEqual({ code: 'graphql_too_deep', classification: 'BAD_REQUEST' });
      expect(native.body.errors[0].message).toMatch(/nests braces, brackets and parentheses more than 128 levels deep \(line 1, column \d+\)/);
      const adapter = await bounded(query);
      expect(adapter.status).toBe(400);
      expect(adapter.body.code).toBe('graphql_too_deep');
      await stillServes();
    });
  }

  it('GraphQL over HTTP: a 400 for a client that accepts application/graphql-response+json', async () => {
    const res = await graphql(deepDocuments['selection sets']!, undefined, { accept: 'application/graphql-response+json' });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('graphql_too_deep');
  });

  it('through the gateway too, which reads the document for its scope', async () => {
    for (const query of Object.values(deepDocuments)) {
      const res = await request(`${gateway.url}/v1/graphql`, 'POST', { query }, TOKEN);
      expect(res.status).toBe(200);
      expect(res.body.errors[0].extensions.code).toBe('graphql_too_deep');
    }
  });

  it(`${MAX_NESTING} levels are read and run; one more is refused`, async () => {
    // `mutation {` `put(` `record: {` `fields: {` `a: ` nest 4 levels before the value
    const at = (depth: number) => `mutation { put(record: {table: "docs", tenant_id: "acme", id: "d3", fields: {a: ${nestedList(depth - 4)}}}) { epoch } }`;
    const within = await graphql(at(MAX_NESTING));
    expect(within.status).toBe(200);
    // parsed and executed: the binding reads the value (within its 128 levels) and the engine stores it
    expect(within.body.errors).toBeUndefined();
    expect(within.body.data.put.epoch).toBeGreaterThan(0);
    const over = await graphql(at(MAX_NESTING + 1));
    expect(over.body.errors[0]).toMatchObject({ extensions: { code: 'graphql_too_deep' } });
    expect(over.body.data).toBeUndefined();
  });
});

describe('a value nested deeper than JSON.stringify can recurse is invalid_record, not a 500', () => {
  const deepBody = (template: string): string => template.replace('DEEP', nestedList(DEEP));

  it('REST: a record field, a keyed one, and scalar_eq of a query', async () => {
    const cases: [string, string, Record<string, string>?][] = [
      ['/v1/records/put', '{"table": "docs", "tenant_id": "acme", "id": "d4", "fields": {"a": DEEP}}'],
      ['/v1/records/put-batch', '{"records": [{"table": "docs", "tenant_id": "acme", "id": "d4", "fields": {"a": DEEP}}]}', { 'idempotency-key': 'deep-batch' }],
      ['/v1/explain', '{"table": "docs", "tenant_id": "acme", "scalar_eq": {"lang": DEEP}}'],
    ];
    for (const [route, body, headers] of cases) {
      const res: HttpResult = await s.post(route, deepBody(body), headers);
      expect(res.status, route).toBe(400);
      expect(res.body.code, route).toBe('invalid_record');
      expect(res.body.error, route).toMatch(/nest too deeply/);
    }
    const get = await s.post('/v1/records/get', { table: 'docs', tenant_id: 'acme', id: 'd4' });
    expect(get.body.record).toBeNull();
  });

  it('the gateway, which rewrites a put body with the routed branch', async () => {
    for (const body of [
      '{"table": "docs", "tenant_id": "acme", "id": "d4", "fields": {"a": DEEP}}',
      '{"record": {"table": "docs", "tenant_id": "acme", "id": "d4", "fields": {"a": DEEP}}}',
    ]) {
      const res = await request(`${gateway.url}/v1/records/put`, 'POST', deepBody(body), TOKEN);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('invalid_record');
    }
    const batch = await request(`${gateway.url}/v1/records/put-batch`, 'POST', deepBody('{"records": [{"table": "docs", "tenant_id": "acme", "id": "d4", "fields": {"a": DEEP}}]}'), TOKEN);
    expect(batch.status).toBe(400);
    expect(batch.body.code).toBe('invalid_record');
  });

  it('GraphQL: a JSON variable, as the 200 body of route 7 and a 400 on route 6', async () => {
    const put = await s.post(
      '/v1/graphql',
      deepBody('{"query": "mutation($r: RecordInput!) { put(record: $r) { epoch } }", "variables": {"r": {"table": "docs", "tenant_id": "acme", "id": "d4", "fields": {"a": DEEP}}}}'),
    );
    expect(put.status).toBe(200);
    expect(put.body.data).toEqual({ put: null });
    expect(put.body.errors[0]).toMatchObject({ path: ['put'], extensions: { code: 'invalid_record', classification: 'BAD_REQUEST' } });
    const search = await s.post(
      '/v1/graphql/bounded',
      deepBody('{"query": "query($eq: JSON) { search(table: \\"docs\\", tenant_id: \\"acme\\", scalar_eq: $eq) { next_cursor } }", "variables": {"eq": {"lang": DEEP}}}'),
    );
    expect(search.status).toBe(400);
    expect(search.body.code).toBe('invalid_record');
    await stillServes();
  });
});
