// What a request line may name (src/request-target.ts), found by a black-box
// test of token scopes (2026-11-25): a read token wrote, took snapshots and
// archived branches with a path the router decodes (`/v1/records/%70ut`) or
// an absolute-form target (`POST http://x/v1/admin/snapshot`), on the engine
// and through the gateway, and through the gateway with a GraphQL body
// behind a byte-order mark. Each is now refused before it runs; through the
// gateway, a refused request of a valid token counts against its rate budget.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveGatewayConfig, startGateway, type RunningGateway } from '../src/gateway/index.js';
import { parseRawAnswer, rawHttp, request, startTestServer, type TestServer } from './helpers.js';

let engine: TestServer;
let gateway: RunningGateway;

beforeAll(async () => {
  engine = await startTestServer({ config: { authTokens: ['adm', 'rd:read'] } });
  gateway = await startGateway(
    resolveGatewayConfig({ engine: engine.url, token: ['boss', 'ro:read'], rateLimit: 1000, port: 0, logLevel: 'error' }, { BRAID_ENGINE_TOKEN: 'adm' }),
  );
});

afterAll(async () => {
  await gateway?.close();
  await engine?.destroy();
});

const record = (id: string) => ({ record: { table: 'notes', tenant_id: 't', id, fields: { title: id } } });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** The record `id` as the engine's admin sees it (null when it was never written). */
async function stored(id: string): Promise<unknown> {
  return (await engine.post('/v1/records/get', { table: 'notes', tenant_id: 't', id }, bearer('adm'))).body.record ?? null;
}

describe.each([
  ['the engine', () => engine.url, 'rd'],
  ['the gateway', () => gateway.url, 'ro'],
])('through %s, with a read token', (_name, base, reader) => {
  it('a path with a percent-escape is 400 invalid_request and runs nothing', async () => {
    expect((await engine.post('/v1/records/put', record('seed'), bearer('adm'))).status).toBe(200);
    for (const [path, body] of [
      ['/v1/records/%70ut', record(`enc-${reader}`)],
      ['/v1/admin/%73napshot', { target: `enc_${reader}` }],
      ['/v1/admin/branch-stat%65', { branch_id: 'main', state: 'archived' }],
      ['/v1/%67raphql', { query: `mutation { put(record: {table: "notes", tenant_id: "t", id: "gq-${reader}", fields: {}}) { epoch } }` }],
    ] as const) {
      const res = await request(`${base()}${path}`, 'POST', body, bearer(reader));
      expect(res.status, path).toBe(400);
      expect(res.body, path).toEqual({ code: 'invalid_request', error: expect.stringContaining('percent-escape') });
    }
    expect(await stored(`enc-${reader}`)).toBeNull();
    expect(await stored(`gq-${reader}`)).toBeNull();
    const snapshots = await engine.engine.snapshots();
    expect(snapshots.map((s) => s.name)).not.toContain(`enc_${reader}`);
    // main is still writable
    expect((await engine.post('/v1/records/put', record('after'), bearer('adm'))).status).toBe(200);
  });

  it('an absolute-form, asterisk-form or fragment-bearing target is 400 invalid_request and runs nothing', async () => {
    const body = JSON.stringify({ target: `abs_${reader}` });
    for (const target of [`http://x/v1/admin/snapshot`, '*', '/v1/admin/snapshot#x', '/v1/admin/snapshot?#']) {
      const answer = await rawHttp(
        base(),
        `POST ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${reader}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
      expect(parseRawAnswer(answer), target).toEqual({ status: 400, body: { code: 'invalid_request', error: expect.any(String) } });
    }
    expect((await engine.engine.snapshots()).map((s) => s.name)).not.toContain(`abs_${reader}`);
  });

  it('a GraphQL mutation behind a byte-order mark is refused for its scope (403), not let through as unreadable', async () => {
    const body = `\ufeff${JSON.stringify({ query: 'mutation { snapshot(target: "bom_snap") { snapshot } }' })}`;
    const res = await request(`${base()}/v1/graphql`, 'POST', body, { ...bearer(reader), 'content-type': 'application/json' });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('forbidden');
    expect((await engine.engine.snapshots()).map((s) => s.name)).not.toContain('bom_snap');
  });

  it('an HTTP/1.1 request without Host is 400 invalid_request with a code', async () => {
    const answer = await rawHttp(base(), `GET /v1/branches HTTP/1.1\r\nAuthorization: Bearer ${reader}\r\nConnection: close\r\n\r\n`);
    expect(parseRawAnswer(answer)).toEqual({ status: 400, body: { code: 'invalid_request', error: expect.stringContaining('Host') } });
  });

  // found by a black-box test: the gateway took a request with two Host lines (RFC 9112 3.2: 400)
  it('a request with two Host headers is 400 invalid_request with a code', async () => {
    const { host } = new URL(base());
    const answer = await rawHttp(base(), `GET /v1/branches HTTP/1.1\r\nHost: ${host}\r\nHost: elsewhere.example\r\nAuthorization: Bearer ${reader}\r\nConnection: close\r\n\r\n`);
    expect(parseRawAnswer(answer)).toEqual({ status: 400, body: { code: 'invalid_request', error: expect.stringContaining('more than one Host') } });
    const one = await rawHttp(base(), `GET /v1/branches HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${reader}\r\nConnection: close\r\n\r\n`);
    expect(parseRawAnswer(one).status).toBe(200);
  });

  // found by a black-box review: the first Content-Type was taken (a body sent as JSON and as text was
  // read as JSON), and the gateway joined two Idempotency-Keys into "a, b" and wrote under that key
  it('a request with two Content-Type or two Idempotency-Key headers is refused with a code', async () => {
    const { host } = new URL(base());
    const body = JSON.stringify({ table: 'notes', tenant_id: 't', id: 'twice' });
    const send = (headers: string) =>
      rawHttp(base(), `POST /v1/records/get HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${reader}\r\n${headers}Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
    const types = await send('Content-Type: application/json\r\ncontent-type: text/plain\r\n');
    expect(parseRawAnswer(types)).toEqual({ status: 400, body: { code: 'invalid_request', error: expect.stringContaining('more than one Content-Type') } });
    const keys = await send('Content-Type: application/json\r\nIdempotency-Key: a\r\nidempotency-key: b\r\n');
    expect(parseRawAnswer(keys)).toEqual({ status: 400, body: { code: 'idempotency_key_invalid', error: 'Idempotency-Key was sent more than once' } });
    const once = await send('Content-Type: application/json\r\nIdempotency-Key: a\r\n');
    expect(parseRawAnswer(once).status).toBe(200);
  });

  // found by a black-box review: a body labelled latin1 or utf-16 was read as UTF-8
  it('a JSON body labelled with a charset other than UTF-8 is unsupported_media_type', async () => {
    const body = { table: 'notes', tenant_id: 't', id: 'charset' };
    for (const type of ['application/json; charset=latin1', 'application/json;charset="utf-16"', 'application/json; CHARSET=iso-8859-1']) {
      const res = await request(`${base()}/v1/records/get`, 'POST', JSON.stringify(body), { authorization: `Bearer ${reader}`, 'content-type': type });
      expect(res.status, type).toBe(400);
      expect(res.body, type).toEqual({ code: 'unsupported_media_type', error: expect.stringContaining('is not accepted') });
    }
    for (const type of ['application/json; charset=utf-8', 'application/json; charset=UTF-8', 'application/json; charset="utf8"', 'application/json']) {
      const res = await request(`${base()}/v1/records/get`, 'POST', JSON.stringify(body), { authorization: `Bearer ${reader}`, 'content-type': type });
      expect(res.status, type).toBe(200);
    }
  });

  // found by a black-box review: Node's parser took these, and they were answered as HTTP/1.1 requests
  it('a request line of HTTP/2.0, or without a version (HTTP/0.9), is 505 http_version_not_supported', async () => {
    const { host } = new URL(base());
    for (const line of ['GET /v1/ready HTTP/2.0', 'GET /v1/ready']) {
      const answer = await rawHttp(base(), `${line}\r\nHost: ${host}\r\nAuthorization: Bearer ${reader}\r\nConnection: close\r\n\r\n`);
      expect(parseRawAnswer(answer), line).toEqual({ status: 505, body: { code: 'http_version_not_supported', error: expect.stringContaining('is not supported') } });
    }
    const old = await rawHttp(base(), `GET /v1/ready HTTP/1.0\r\nHost: ${host}\r\nAuthorization: Bearer ${reader}\r\n\r\n`);
    expect(parseRawAnswer(old.replace(/^HTTP\/1\.[01]/, 'HTTP/1.1')).status).toBe(200);
  });

  // found by a black-box review: the gateway answered a GET of its own with `Content-Encoding: gzip`, which
  // the engine refused
  it('a Content-Encoding other than identity is 415 on every route, a GET without a body included', async () => {
    for (const route of ['/v1/branches', '/v1/ready']) {
      const res = await request(`${base()}${route}`, 'GET', undefined, { authorization: `Bearer ${reader}`, 'content-encoding': 'gzip' });
      expect(res.status, route).toBe(415);
      expect(res.body, route).toEqual({ code: 'unsupported_content_encoding', error: expect.stringContaining('Content-Encoding gzip') });
      expect((await request(`${base()}${route}`, 'GET', undefined, { authorization: `Bearer ${reader}`, 'content-encoding': 'identity' })).status, route).toBe(200);
    }
  });

  // found by a black-box fuzz: `gzip, chunked` was accepted and its bytes read as the body
  it('a Transfer-Encoding other than chunked is 415 unsupported_content_encoding', async () => {
    const { host } = new URL(base());
    const body = JSON.stringify({ table: 'notes', tenant_id: 't', id: 'te' });
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const send = (coding: string) => rawHttp(base(), `POST /v1/records/get HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${reader}\r\nContent-Type: application/json\r\nTransfer-Encoding: ${coding}\r\nConnection: close\r\n\r\n${chunked}`);
    for (const coding of ['gzip, chunked', 'deflate,chunked']) {
      expect(parseRawAnswer(await send(coding)), coding).toEqual({ status: 415, body: { code: 'unsupported_content_encoding', error: expect.stringContaining('Transfer-Encoding') } });
    }
    expect(parseRawAnswer(await send('Chunked')).status).toBe(200);
  });

  // found by a black-box test: the engine's 401 had no challenge, the gateway's had
  it('a 401 carries WWW-Authenticate: Bearer realm="braid"', async () => {
    for (const headers of [{}, bearer('nope')]) {
      const res = await request(`${base()}/v1/branches`, 'GET', undefined, headers);
      expect(res.status).toBe(401);
      expect(res.headers.get('www-authenticate')).toBe('Bearer realm="braid"');
    }
  });
});

describe('GET /metrics on the engine', () => {
  it('answers its errors as {code, error} like every route', async () => {
    const res = await request(`${engine.url}/metrics`, 'GET');
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ code: 'unauthorized', error: expect.any(String) });
  });
});

describe('the gateway rate limit', () => {
  it('counts a refused request of a valid token and answers it with the x-ratelimit headers', async () => {
    const before = await request(`${gateway.url}/v1/branches`, 'GET', undefined, bearer('ro'));
    const remaining = Number(before.headers.get('x-ratelimit-remaining'));
    const refused = await request(`${gateway.url}/v1/records/put`, 'POST', record('limited'), bearer('ro'));
    expect(refused.status).toBe(403);
    expect(Number(refused.headers.get('x-ratelimit-remaining'))).toBe(remaining - 1);
  });
});
