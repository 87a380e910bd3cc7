// Structured logs (issue 15 item 2, engine side): a request id echoed in
// X-Request-Id (the client's when it is a plain token), one JSON line per
// request with its id, route, status and duration, without bodies or tokens,
// and the engine's events (recovery, checkpoints, storage faults).
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Braid } from '../src/engine.js';
import { buildApp } from '../src/app.js';
import { request, tempDir, waitFor } from './helpers.js';
import { appendFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';

type Line = Record<string, unknown>;

/** A pino destination that parses each line into `out`. */
function sinkInto(out: Line[]): Writable {
  return new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line.trim()) out.push(JSON.parse(line));
      done();
    },
  });
}

const lines: Line[] = [];
const sink = sinkInto(lines);

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
    // a refused credential is a warning with the client's address (found by a black-box review)
    expect(lines.find((l) => l.request_id === 'get-1' && l.msg === 'credentials refused')).toMatchObject({
      level: 40, code: 'unauthorized', method: 'POST', path: '/v1/records/get', remote_address: '127.0.0.1',
    });
    const all = JSON.stringify(lines);
    expect(all).not.toContain('do-not-log');
    expect(all).not.toContain('s3cret-token');
    expect(all).not.toContain('wrong-token');
  });

  it('logs a 503 shutting_down answered while draining as a warning, other 5xx as errors', async () => {
    lines.length = 0;
    app.braid.closing = true;
    const res = await request(`${url}/v1/records/get`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'a' }, { ...auth, 'x-request-id': 'drain-1' });
    app.braid.closing = false;
    expect(res.body).toMatchObject({ code: 'shutting_down' });
    await waitFor('the request line', () => lines.some((l) => l.msg === 'request' && l.request_id === 'drain-1'));
    expect(lines.find((l) => l.request_id === 'drain-1' && l.level === 50)).toBeUndefined();
    expect(lines.find((l) => l.request_id === 'drain-1' && l.level === 40)).toMatchObject({ code: 'shutting_down', msg: 'request failed' });
  });
});

describe('engine events in the log', () => {
  const PINO = { info: 30, warn: 40, error: 50 };
  const dir = tempDir();
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** An engine and its server on `dir`, checkpointing every 32 KiB of WAL, logging into `out`. */
  async function start(out: Line[]): Promise<{ engine: Braid; app: FastifyInstance; url: string }> {
    const engine = Braid.open({ dataDir: dir, checkpointBytes: 32768 });
    const app = await buildApp({ engine, config: { dataDir: dir }, logger: { level: 'info', stream: sinkInto(out) } });
    return { engine, app, url: await app.listen({ host: '127.0.0.1', port: 0 }) };
  }
  const event = (out: Line[], name: string) => out.find((l) => l.msg === name);

  it('logs the recovery at open, each checkpoint, a torn tail cut at the next open, and a storage fault', async () => {
    const first: Line[] = [];
    const a = await start(first);
    expect(event(first, 'recovery')).toMatchObject({ level: PINO.info, event: 'recovery', database: 'default', branch: 'main', checkpoint_generation: null, commits_replayed: 0 });
    for (let i = 0; i < 40; i++) {
      const put = await request(`${a.url}/v1/records/put`, 'POST', { table: 'docs', tenant_id: 'acme', id: `r${i}`, fields: { body: `do-not-log-body ${'x'.repeat(1000)}` } });
      expect(put.status).toBe(200);
    }
    await waitFor('a checkpoint log line', () => event(first, 'checkpoint') !== undefined);
    expect(event(first, 'checkpoint')).toMatchObject({
      level: PINO.info,
      event: 'checkpoint',
      database: 'default',
      branch: 'main',
      trigger: 'wal_bytes',
      generation: 1,
      epoch: expect.any(Number),
      bytes: expect.any(Number),
      duration_ms: expect.any(Number),
      at_ms: expect.any(Number),
    });
    await a.app.close();
    a.engine.close();

    // a torn tail: bytes after the last frame of the newest WAL segment (the
    // close checkpoint started it), as a crash mid-append leaves them
    const branchDir = path.join(dir, 'db', 'default', 'main');
    const newest = readdirSync(branchDir).filter((f) => /^wal-\d+\.log$/.test(f)).sort().at(-1)!;
    appendFileSync(path.join(branchDir, newest), Buffer.alloc(40, 0xab));
    const second: Line[] = [];
    const b = await start(second);
    try {
      await waitFor('a recovery log line', () => event(second, 'recovery') !== undefined);
      const recovery = event(second, 'recovery')!;
      expect(recovery).toMatchObject({ level: PINO.warn, truncated_bytes: 40, segments_replayed: 1, latest_epoch: 40 });
      expect(recovery.checkpoint_generation).toBeGreaterThanOrEqual(2);

      await b.engine.faultForTest('wal::sync', 'return(eio)');
      const failed = await request(`${b.url}/v1/records/put`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'lost', fields: { body: 'do-not-log-body' } });
      await b.engine.faultForTest('wal::sync', 'off');
      expect(failed.body.code).toBe('storage_failure');
      await waitFor('a storage fault log line', () => event(second, 'storage_failed') !== undefined);
      expect(event(second, 'storage_failed')).toMatchObject({ level: PINO.error, stage: 'wal', error: expect.stringContaining('injected at wal::sync') });
    } finally {
      await b.app.close();
      b.engine.close();
    }
    expect(JSON.stringify([...first, ...second])).not.toContain('do-not-log-body');
  });
});

// found by a black-box test: the gateway's request lines had no `route`, and its 5xx answers
// (an engine it cannot reach, an engine's own 500 passed through) were not logged at error
describe('the gateway\'s request log lines', () => {
  it('name the route, and every 5xx answer is also logged at error', async () => {
    const { createServer } = await import('node:http');
    const { buildGateway } = await import('../src/gateway/app.js');
    const { gatewayConfig } = await import('../src/gateway/config.js');
    // an engine that fails every request with `code` and `status` (readiness aside)
    const scripted = async (code: string, status: number) => {
      const server = createServer((req, res) => {
        const ready = req.url === '/v1/ready';
        const body = JSON.stringify(ready ? { ready: true } : { code, error: 'scripted failure' });
        res.writeHead(ready ? 200 : status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
    };
    const { server: failing, url: failingUrl } = await scripted('internal_error', 500);
    const { server: draining, url: drainingUrl } = await scripted('shutting_down', 503);
    const gatewayLines: Line[] = [];
    const gateway = await buildGateway({
      config: gatewayConfig({
        tokens: ['gw-token'],
        engineUrl: url,
        engineToken: 's3cret-token',
        catalog: {
          databases: [
            { database_id: 'default', branches: [{ branch_id: 'main', endpoint: url }] },
            { database_id: 'failing', branches: [{ branch_id: 'main', endpoint: failingUrl }] },
            { database_id: 'down', branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:9' }] },
            { database_id: 'draining', branches: [{ branch_id: 'main', endpoint: drainingUrl }] },
          ],
        },
      }),
      logger: { level: 'info', stream: sinkInto(gatewayLines) },
    });
    const gatewayUrl = await gateway.listen({ host: '127.0.0.1', port: 0 });
    try {
      const gwAuth = { authorization: 'Bearer gw-token' };
      const put = await request(`${gatewayUrl}/v1/records/put`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'g', fields: {} }, { ...gwAuth, 'x-request-id': 'gw-put' });
      expect(put.status).toBe(200);
      expect((await request(`${gatewayUrl}/v1/nope`, 'GET', undefined, { ...gwAuth, 'x-request-id': 'gw-nope' })).status).toBe(404);
      const engineError = await request(`${gatewayUrl}/v1/records/get`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'g' }, { ...gwAuth, 'x-braid-database': 'failing', 'x-request-id': 'gw-500' });
      expect(engineError.status).toBe(500);
      const unreachable = await request(`${gatewayUrl}/v1/records/get`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'g' }, { ...gwAuth, 'x-braid-database': 'down', 'x-request-id': 'gw-502' });
      expect(unreachable.status).toBe(502);
      // an engine that answers without its branch list is not one that did not answer (found by a black-box review)
      const branches = await request(`${gatewayUrl}/v1/branches`, 'GET', undefined, gwAuth);
      expect(branches.status).toBe(200);
      const stateOf = (database: string) => branches.body.branches.find((b: { database_id: string }) => b.database_id === database)?.state;
      expect([stateOf('default'), stateOf('failing'), stateOf('down')]).toEqual(['active', 'error', 'unreachable']);
      expect(gatewayLines.find((l) => l.msg === 'engine answered GET /v1/branches without its branch list')).toMatchObject({ level: 40, engine: failingUrl, status: 500 });
      const requestLine = (id: string) => gatewayLines.find((l) => l.msg === 'request' && l.request_id === id);
      await waitFor('the gateway\'s request lines', () => ['gw-put', 'gw-nope', 'gw-500', 'gw-502'].every((id) => requestLine(id) !== undefined));
      expect(requestLine('gw-put')).toMatchObject({ method: 'POST', route: '/v1/records/put', status: 200, duration_ms: expect.any(Number) });
      expect(requestLine('gw-nope')).toMatchObject({ route: 'other', status: 404 });
      expect(requestLine('gw-500')).toMatchObject({ route: '/v1/records/get', status: 500 });
      const errorLine = (id: string) => gatewayLines.find((l) => l.level === 50 && l.request_id === id);
      expect(errorLine('gw-500')).toMatchObject({ status: 500, code: 'internal_error', engine: failingUrl });
      expect(errorLine('gw-502')).toMatchObject({ code: 'upstream_unreachable', err: expect.objectContaining({ message: expect.stringContaining('unreachable') }) });
      expect(errorLine('gw-put')).toBeUndefined();
      // a draining engine's 503 is expected during a restart: a warning, not an error
      const drained = await request(`${gatewayUrl}/v1/records/get`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'g' }, { ...gwAuth, 'x-braid-database': 'draining', 'x-request-id': 'gw-503' });
      expect(drained.status).toBe(503);
      // and so is the gateway's own while it drains
      gateway.gateway.closing = true;
      const closing = await request(`${gatewayUrl}/v1/records/get`, 'POST', { table: 'docs', tenant_id: 'acme', id: 'g' }, { ...gwAuth, 'x-request-id': 'gw-closing' });
      gateway.gateway.closing = false;
      expect(closing.body).toMatchObject({ code: 'shutting_down' });
      await waitFor('the draining lines', () => ['gw-503', 'gw-closing'].every((id) => requestLine(id) !== undefined));
      for (const id of ['gw-503', 'gw-closing']) {
        expect(errorLine(id), id).toBeUndefined();
        expect(gatewayLines.find((l) => l.level === 40 && l.request_id === id), id).toMatchObject({ code: 'shutting_down' });
      }
      const all = JSON.stringify(gatewayLines);
      expect(all).not.toContain('gw-token');
      expect(all).not.toContain('s3cret-token');
    } finally {
      await gateway.close();
      for (const server of [failing, draining]) {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    }
  });
});
