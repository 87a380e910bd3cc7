// What schemathesis's full checks (scripts/fuzz-api.sh) found, pinned over real HTTP against a real
// engine and an in-process gateway in front of it (issue 14 item 6): bearer security declared only where
// a token is required, 405 with Allow for a method a path does not take, branch headers refused on every
// route, record field keys that are not column names refused even when they hold null, and the OpenAPI
// document stating what the engine and the JSON parser refuse, checked against the engine at each edge;
// and the fuzzer's per-operation configuration kept to 400 codes of the error table.
import { readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Braid } from '../src/engine.js';
import { ERROR_STATUS } from '../src/errors.js';
import { API_METHODS } from '../src/gateway/routing.js';
import { resolveGatewayConfig, startGateway, type RunningGateway } from '../src/gateway/index.js';
import { ROOT, request, startTestServer, tempDir, type HttpResult, type TestServer } from './helpers.js';

type Json = Record<string, any>;

const TOKEN = { authorization: 'Bearer good' };
const rec = (id: string, fields: Json = {}) => ({ table: 'docs', tenant_id: 'acme', id, fields });

let s: TestServer;
let secured: TestServer;
let gateway: RunningGateway;
let doc: Json;

/** Any method, TRACE included (fetch refuses to send it). */
function raw(url: string, method: string, headers: Record<string, string> = {}): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      let text = '';
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => {
        const out = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') out.set(k, v);
        resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : null, headers: out });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  s = await startTestServer({ config: { maxVectorDim: 8, maxBatch: 3 }, engine: { maxVectorDim: 8, maxBatch: 3 } });
  secured = await startTestServer({ config: { authTokens: ['good', 'reader:read'] } });
  gateway = await startGateway(resolveGatewayConfig({ engine: s.url, token: ['good', 'reader:read'], rateLimit: 0, authFailureLimit: 0, port: 0, logLevel: 'error' }, {}));
  doc = (await s.get('/v1/openapi.json')).body;
  expect((await s.post('/v1/records/put-batch', { records: [rec('d1', { title: 'solar', lang: 'en', embedding: [0.5] })] })).status).toBe(200);
});

afterAll(async () => {
  await gateway?.close();
  await s?.destroy();
  await secured?.destroy();
});

describe('bearer security is declared where a token is required', () => {
  it('an engine without tokens declares none: any request is accepted, with or without a token', async () => {
    expect(doc.security).toBeUndefined();
    expect(doc.components.securitySchemes).toBeUndefined();
    expect((await s.get('/v1/branches')).status).toBe(200);
    expect((await s.get('/v1/branches', { authorization: 'Bearer anything' })).status).toBe(200);
  });

  it('an engine started with tokens declares bearer auth on every operation, and refuses requests without one', async () => {
    const securedDoc = (await secured.get('/v1/openapi.json', TOKEN)).body;
    expect(securedDoc.security).toEqual([{ bearer: [] }]);
    expect(securedDoc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(Object.keys(securedDoc.paths)).toEqual(Object.keys(doc.paths));
    expect((await secured.get('/v1/branches')).status).toBe(401);
  });

  it('the gateway serves the engine document with bearer auth declared, though its engine has no tokens', async () => {
    const viaGateway = await request(`${gateway.url}/v1/openapi.json`, 'GET', undefined, TOKEN);
    expect(viaGateway.status).toBe(200);
    expect(viaGateway.body.security).toEqual([{ bearer: [] }]);
    expect(viaGateway.body.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(viaGateway.body.components.schemas).toEqual(doc.components.schemas);
    expect(viaGateway.body.paths).toEqual(doc.paths);
    expect((await request(`${gateway.url}/v1/openapi.json`, 'GET')).status).toBe(401);
  });

  it('403 and 415 are documented on every operation, and real ones match the document', async () => {
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      for (const op of Object.values(item as Json)) {
        for (const status of ['403', '415']) expect(op.responses[status]?.content['application/json'].schema.required, `${path} ${status}`).toEqual(['code', 'error']);
      }
    }
    const forbidden = await secured.post('/v1/records/put', rec('x'), { authorization: 'Bearer reader' });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.code).toBe('forbidden');
    const encoded = await s.post('/v1/records/put', rec('x'), { 'content-encoding': 'gzip' });
    expect(encoded.status).toBe(415);
    expect(encoded.body.code).toBe('unsupported_content_encoding');
  });
});

describe('a path asked with a method it does not take is 405 with Allow (ST204)', () => {
  it('engine: every other method, with the methods the path takes; unknown paths stay 404', async () => {
    for (const method of ['TRACE', 'DELETE', 'PUT', 'PATCH', 'OPTIONS', 'QUERY']) {
      const r = await raw(`${s.url}/v1/records/put`, method, { 'content-type': 'application/json' });
      expect(r.status, method).toBe(405);
      expect(r.headers.get('allow')).toBe('POST');
      expect(r.body.code).toBe('method_not_allowed');
    }
    const onGet = await raw(`${s.url}/v1/branches`, 'POST');
    expect(onGet.status).toBe(405);
    expect(onGet.headers.get('allow')).toBe('GET, HEAD');
    expect((await raw(`${s.url}/v1/branches`, 'HEAD')).status).toBe(200);
    // QUERY is a method fastify reads a body for: the 405 comes before content-type parsing
    expect((await raw(`${s.url}/v1/branches`, 'QUERY')).status).toBe(405);
    expect((await raw(`${s.url}/metrics`, 'DELETE')).headers.get('allow')).toBe('GET, HEAD');
    const unknown = await raw(`${s.url}/v1/nope`, 'DELETE');
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('route_not_found');
  });

  it('a secured engine asks for the token first', async () => {
    expect((await raw(`${secured.url}/v1/records/put`, 'DELETE')).status).toBe(401);
    expect((await raw(`${secured.url}/v1/records/put`, 'DELETE', TOKEN)).status).toBe(405);
  });

  it('gateway: 405 before routing by branch headers (a database outside the catalog was a 404)', async () => {
    const r = await raw(`${gateway.url}/v1/explain`, 'TRACE', { ...TOKEN, 'x-braid-database': 'elsewhere' });
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('POST');
    expect(r.body.code).toBe('method_not_allowed');
    expect((await raw(`${gateway.url}/v1/branches`, 'DELETE', TOKEN)).headers.get('allow')).toBe('GET, HEAD');
    expect((await raw(`${gateway.url}/v1/explain`, 'TRACE')).status).toBe(401);
  });

  it("the gateway's table of paths and methods is the engine's", async () => {
    const served = new Map<string, string[]>([
      ['/v1/openapi.json', ['GET', 'HEAD']],
      ['/metrics', ['GET', 'HEAD']],
    ]);
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      served.set(path, Object.keys(item).flatMap((m) => (m === 'get' ? ['GET', 'HEAD'] : [m.toUpperCase()])));
    }
    expect(new Map([...API_METHODS].map(([p, m]) => [p, [...m]]))).toEqual(served);
    for (const [path, methods] of served) {
      const other = methods.includes('POST') ? 'GET' : 'POST';
      expect((await raw(`${s.url}${path}`, other)).headers.get('allow'), path).toBe(methods.join(', '));
    }
  });
});

describe('branch headers are names on every route (ST201)', () => {
  it('engine: an empty or malformed header is 400 invalid_name, also where no branch is addressed', async () => {
    const cases: Array<[string, () => Promise<HttpResult>]> = [
      ['GET /v1/branches', () => s.get('/v1/branches', { 'x-braid-database': '' })],
      ['POST /v1/admin/branch-state', () => s.post('/v1/admin/branch-state', { branch_id: 'main', state: 'active' }, { 'x-braid-branch': 'B EJ' })],
      ['GET /v1/ready', () => s.get('/v1/ready', { 'x-braid-branch': '' })],
      ['POST /v1/graphql', () => s.post('/v1/graphql', { query: '{ tables { name } }' }, { 'x-braid-database': '9x' })],
    ];
    for (const [what, send] of cases) {
      const r = await send();
      expect(r.status, what).toBe(400);
      expect(r.body.code, what).toBe('invalid_name');
    }
    // the state of main did not change on the way
    expect((await s.get('/v1/branches')).body.branches.find((b: Json) => b.branch_id === 'main').state).toBe('active');
  });

  it('gateway: an empty header is refused, not routed to the default branch', async () => {
    const r = await request(`${gateway.url}/v1/records/put-batch`, 'POST', { records: [rec('gw-empty')] }, { ...TOKEN, 'x-braid-database': '' });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('invalid_name');
    expect((await s.post('/v1/records/get', { table: 'docs', tenant_id: 'acme', id: 'gw-empty' })).body.record).toBeNull();
    const branches = await request(`${gateway.url}/v1/branches`, 'GET', undefined, { ...TOKEN, 'x-braid-branch': '' });
    expect(branches.status).toBe(400);
  });
});

describe('record field keys are column names, whatever they hold (positive data of the document)', () => {
  it('a key that is not a name is 400 invalid_name even with null or [] (the engine let those through)', async () => {
    for (const value of [null, [], 1]) {
      const r = await s.post('/v1/records/put', rec('bad-key', { 'bad name': value }));
      expect(r.status, JSON.stringify(value)).toBe(400);
      expect(r.body).toMatchObject({ code: 'invalid_name', index: 0 });
    }
    const batch = await s.post('/v1/records/put-batch', { records: [rec('ok-1', { fine: 1 }), rec('bad-2', { 'x y': [] })] });
    expect(batch.body).toMatchObject({ code: 'invalid_name', index: 1 });
    expect((await s.post('/v1/records/get', { table: 'docs', tenant_id: 'acme', id: 'ok-1' })).body.record).toBeNull();
    const gql = await s.post('/v1/graphql', { query: 'mutation { put(record: {table: "docs", tenant_id: "acme", id: "g", fields: {nope: null, _ok: null}}) { epoch } }' });
    expect(gql.body.errors).toBeUndefined();
    const badGql = await s.post('/v1/graphql', { query: 'mutation($f: JSON) { put(record: {table: "docs", tenant_id: "acme", id: "g2", fields: $f}) { epoch } }', variables: { f: { 'a-b': null } } });
    expect(badGql.body.errors[0].extensions.code).toBe('invalid_name');
  });

  it('the embedded API refuses them too', async () => {
    const dir = tempDir();
    const db = Braid.open({ dataDir: dir });
    try {
      await expect(db.put({ table: 'docs', tenant_id: 't', id: 'x', fields: { '': null } })).rejects.toMatchObject({ code: 'invalid_name' });
    } finally {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the document states what is refused, and the engine refuses it at each edge', () => {
  const bodyOf = (path: string): Json => doc.paths[path].post.requestBody.content['application/json'].schema;
  const explain = () => bodyOf('/v1/explain');
  const recordFields = () => bodyOf('/v1/insert').properties.fields;

  it('a hybrid query needs table and tenant_id', async () => {
    expect(explain().required).toEqual(expect.arrayContaining(['table', 'tenant_id']));
    expect(bodyOf('/v1/query')).toEqual(explain());
    for (const path of ['/v1/explain', '/v1/query']) {
      for (const body of [{ tenant_id: 'acme' }, { table: 'docs' }]) {
        const r = await s.post(path, body);
        expect(r.status, path).toBe(400);
        expect(r.body.code, path).toBe('invalid_query');
      }
    }
  });

  it('field keys match the column pattern; a non-empty array of numbers is a vector of at most maxVectorDim finite f32s', async () => {
    const fields = recordFields();
    expect(fields.propertyNames.pattern).toBe('^[A-Za-z_][A-Za-z0-9_]{0,63}$');
    const vector = fields.additionalProperties.anyOf.find((m: Json) => m.description === 'a vector');
    expect(vector.maxItems).toBe(8);
    const limit = vector.items.exclusiveMaximum;
    expect(limit).toBe(2 ** 128 - 2 ** 103);
    expect(vector.items.exclusiveMinimum).toBe(-limit);

    const below = limit - 2 ** 75; // the largest double under the limit: rounds to f32::MAX
    const write = (id: string, v: number[]) => s.post('/v1/records/put', { table: 'vec', tenant_id: 'acme', id, fields: { v } });
    expect((await write('max', [below, -below])).status).toBe(200);
    for (const bad of [limit, -limit]) {
      const r = await write('inf', [bad, 0]);
      expect(r.status).toBe(400);
      expect(r.body.code).toBe('vector_not_finite');
    }
    // query vectors: the same edge
    expect((await s.post('/v1/explain', { table: 'vec', tenant_id: 'acme', vector: [below, 1] })).status).toBe(200);
    expect((await s.post('/v1/explain', { table: 'vec', tenant_id: 'acme', vector: [limit, 1] })).body.code).toBe('vector_not_finite');
    // maxItems: 8 numbers is a vector, 9 is too long
    const wide = (n: number) => s.post('/v1/records/put', { table: 'wide', tenant_id: 'acme', id: `w${n}`, fields: { [`v${n}`]: Array.from({ length: n }, () => 1) } });
    expect((await wide(8)).status).toBe(200);
    expect((await wide(9)).body.code).toBe('vector_dimension_too_large');
  });

  it('no object anywhere in a body has a __proto__ key or a constructor object with a prototype key', async () => {
    const { JsonObject } = doc.components.schemas;
    expect(JsonObject.propertyNames).toEqual({ not: { enum: ['__proto__'] } });
    expect(JsonObject.properties.constructor.not).toEqual({ type: 'object', required: ['prototype'] });
    expect(recordFields().propertyNames.not).toEqual({ enum: ['__proto__'] });
    const graphqlVariables = bodyOf('/v1/graphql').properties.variables.anyOf[0];
    expect(graphqlVariables.propertyNames).toEqual({ not: { enum: ['__proto__'] } });

    const refused = [
      '{"table":"docs","tenant_id":"acme","id":"p","fields":{"__proto__":{}}}',
      '{"table":"docs","tenant_id":"acme","id":"p","fields":{"meta":{"deep":[{"__proto__":1}]}}}',
      '{"table":"docs","tenant_id":"acme","id":"p","fields":{"constructor":{"prototype":{}}}}',
    ];
    for (const body of refused) {
      const r = await s.post('/v1/records/put', body);
      expect(r.status, body).toBe(400);
      expect(r.body.code).toBe('invalid_json');
    }
    // a constructor field that is not an object with a prototype is an ordinary column
    expect((await s.post('/v1/records/put', rec('c', { constructor: 'plain' }))).status).toBe(200);
  });

  it('filters, weights, epochs and batches: the documented ranges are the enforced ones', async () => {
    const q = explain().properties;
    expect(q.scalar_eq.additionalProperties).toEqual({ type: ['string', 'number', 'boolean'] });
    expect(q.fusion_weights.properties.lexical.minimum).toBe(0);
    expect(q.temporal_as_of.anyOf[0]).toMatchObject({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
    expect(bodyOf('/v1/records/put-batch').properties.records).toMatchObject({ minItems: 1, maxItems: 3 });

    const base = { table: 'docs', tenant_id: 'acme' };
    expect((await s.post('/v1/explain', { ...base, scalar_eq: { lang: 'en' } })).status).toBe(200);
    expect((await s.post('/v1/explain', { ...base, scalar_eq: { lang: null } })).body.code).toBe('invalid_query');
    expect((await s.post('/v1/explain', { ...base, fusion_weights: { lexical: 0 } })).status).toBe(200);
    expect((await s.post('/v1/explain', { ...base, fusion_weights: { lexical: -0.5 } })).body.code).toBe('invalid_query');
    expect((await s.post('/v1/explain', { ...base, temporal_as_of: 0 })).status).toBe(200);
    expect((await s.post('/v1/explain', { ...base, temporal_as_of: -1 })).body.code).toBe('invalid_query');
    expect((await s.post('/v1/explain', { ...base, temporal_as_of: Number.MAX_SAFE_INTEGER })).body.code).toBe('temporal_in_future');
    const records = (n: number) => Array.from({ length: n }, (_, i) => rec(`b${i}`));
    expect((await s.post('/v1/records/put-batch', { records: records(3) })).status).toBe(200);
    expect((await s.post('/v1/records/put-batch', { records: records(4) })).body.code).toBe('batch_too_large');
  });
});

describe('scripts/schemathesis.toml', () => {
  it('lets schema-valid data be refused only on documented operations, with 400 codes of the error table', () => {
    const toml = readFileSync(path.join(ROOT, 'scripts', 'schemathesis.toml'), 'utf8');
    const sections = toml.split('[[operations]]').slice(1);
    const refusing = new Map<string, string[]>();
    for (const section of sections) {
      const name = /include-name = "([^"]+)"/.exec(section)![1]!;
      const [method, route] = name.split(' ') as [string, string];
      expect(doc.paths[route]?.[method.toLowerCase()], name).toBeDefined();
      const codes = /checks\.data_dependent_refusal\.codes = \[([^\]]*)\]/.exec(section);
      const lets400 = /checks\.positive_data_acceptance\.expected-statuses = \[[^\]]*"400"/.test(section);
      // a 400 let through positive_data_acceptance is always narrowed to listed codes
      expect(lets400, name).toBe(codes !== null);
      if (codes) refusing.set(name, [...codes[1]!.matchAll(/"([a-z_]+)"/g)].map((m) => m[1]!));
    }
    expect([...refusing.keys()].sort()).toEqual(
      ['POST /v1/explain', 'POST /v1/graphql/bounded', 'POST /v1/insert', 'POST /v1/nativeql', 'POST /v1/query', 'POST /v1/records/put', 'POST /v1/records/put-batch'],
    );
    // the JSON form of route 2 takes the body of /v1/explain: refused for the same reasons
    expect(refusing.get('POST /v1/query')).toEqual(refusing.get('POST /v1/explain'));
    for (const [name, codes] of refusing) {
      expect(codes.length, name).toBeGreaterThan(0);
      for (const code of codes) expect((ERROR_STATUS as Record<string, number>)[code], `${name}: ${code}`).toBe(400);
    }
    // no check is switched off anywhere
    expect(toml).not.toMatch(/checks\.[a-z_]+\.enabled\s*=\s*false/);
    expect(toml).not.toMatch(/^\[checks/m);
  });
});
