// Structured logs (issue 15 item 2, engine side): a request id echoed in
// X-Request-Id (the client's when it is a plain token), and one JSON line per
// request with its id, route, status and duration, without bodies or tokens.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Braid } from '../src/engine.js';
import { buildApp } from '../src/app.js';
import { request, tempDir } from './helpers.js';
import { rmSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';

const lines: Array<Record<string, unknown>> = [];
const sink = new Writable({
  write(chunk, _encoding, done) {
    for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
    done();
  },
});

let app: FastifyInstance;
let engine: Braid;
let url: string;
const dataDir = tempDir();

beforeAll(async () => {
  engine = Braid.open({ dataDir });
  app = await buildApp({ engine, config: { dataDir, authTokens: ['s3cret-token'] }, logger: { level: 'info', stream: sink } });
  url = await app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await app.close();
  engine.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const auth = { authorization: 'Bearer s3cret-token' };

describe('request ids and request log lines', () => {
  it('echoes a plain client id, replaces anything else, and makes one when none is sent', async () => {
    const given = await request(`${url}/v1/ready`, 'GET', undefined, { ...auth, 'x-request-id': 'trace-42.a:b' });
    expect(given.headers.get('x-request-id')).toBe('trace-42.a:b');
    const odd = await request(`${url}/v1/ready`, 'GET', undefined, { ...auth, 'x-request-id': 'has space' });
    expect(odd.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const none = await request(`${url}/v1/ready`, 'GET', undefined, auth);
    const other = await request(`${url}/v1/ready`, 'GET', undefined, auth);
    expect(none.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    expect(other.headers.get('x-request-id')).not.toBe(none.headers.get('x-request-id'));
  });

  it('logs one line per request with id, route, status and duration, and no body or token', async () => {
    lines.length = 0;
    const put = await request(`${url}/v1/records/put`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'a', fields: { secret_field: 'do-not-log' } }, { ...auth, 'x-request-id': 'put-1' });
    expect(put.status).toBe(200);
    const refused = await request(`${url}/v1/records/get`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'a' }, { authorization: 'Bearer wrong-token', 'x-request-id': 'get-1' });
    expect(refused.status).toBe(401);
    await new Promise((r) => setTimeout(r, 50));
    const mine = lines.filter((l) => l.msg === 'request');
    expect(mine.find((l) => l.request_id === 'put-1')).toMatchObject({ method: 'POST', route: '/v1/records/put', status: 200, duration_ms: expect.any(Number) });
    expect(mine.find((l) => l.request_id === 'get-1')).toMatchObject({ route: '/v1/records/get', status: 401 });
    expect(mine.filter((l) => l.request_id === 'put-1')).toHaveLength(1);
    const all = JSON.stringify(lines);
    expect(all).not.toContain('do-not-log');
    expect(all).not.toContain('s3cret-token');
    expect(all).not.toContain('wrong-token');
  });
});
