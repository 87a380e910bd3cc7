/**
 * Request bodies the engine reads from their bytes (src/routes/body-bytes.ts):
 * read as fastify's own reader reads them, and a large one freed as soon as
 * its route is done with it, not when V8's collector next runs.
 */
import http from 'node:http';
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Fastify, { type FastifyInstance } from 'fastify';
import { keepBodyBytes, withBody } from '../src/routes/body-bytes.js';
import { type TestServer, startTestServer, waitFor } from './helpers.js';

interface Answer {
  status: number;
  text: string;
}

/** POSTs `body` over a real socket, with a Content-Length or chunked (in 10,000-byte writes). */
function upload(url: string, route: string, body: Buffer, chunked = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { 'content-type': 'application/json' };
    if (!chunked) headers['content-length'] = body.length;
    const req = http.request(`${url}${route}`, { method: 'POST', headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString('utf8') }));
    });
    req.on('error', reject);
    if (chunked) for (let at = 0; at < body.length; at += 10_000) req.write(body.subarray(at, at + 10_000));
    req.end(chunked ? undefined : body);
  });
}

/** A JSON body of `bytes` bytes. */
function jsonOf(bytes: number): Buffer {
  const head = '{"pad":"';
  return Buffer.from(`${head}${'x'.repeat(bytes - head.length - 2)}"}`);
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('a body read into a buffer of its own', () => {
  let app: FastifyInstance;
  let url: string;
  /** What each request's handler saw, and its body's length once the answer was sent. */
  const seen: { digest: string; length: number; after?: number }[] = [];
  /** The bodies of requests answered before a handler ran (this hook runs before the context's own). */
  const unhandled: Buffer[] = [];

  beforeAll(async () => {
    app = Fastify({ bodyLimit: 1_000_000 });
    // the root's hook runs for the routes below too, after the route is done
    app.addHook('onResponse', async (request) => {
      const entry = (request as { seenEntry?: (typeof seen)[number] }).seenEntry;
      const body = request.body;
      if (entry) entry.after = Buffer.isBuffer(body) ? body.length : -1;
      else if (Buffer.isBuffer(body)) unhandled.push(body);
    });
    await app.register(async (context) => {
      keepBodyBytes(context);
      context.post('/read', async (request) => withBody(request, async () => {
        const body = request.body as Buffer;
        const entry = { digest: sha(body), length: body.length };
        seen.push(entry);
        (request as { seenEntry?: typeof entry }).seenEntry = entry;
        // as the engine would: the body is read after the handler has awaited
        await new Promise((r) => setTimeout(r, 5));
        return { digest: sha(body), length: body.length };
      }));
      // answered before any handler reads the body (as a refusal or a replay is)
      context.post('/refused', {
        preHandler: async (_request, reply) => reply.code(409).send({ refused: true }),
      }, async () => ({ never: true }));
    });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    await app.close();
  });

  it('a large body arrives whole, with a Content-Length or chunked, and the one of its own is freed once answered', async () => {
    for (const size of [64 * 1024, 300_000, 999_999]) {
      for (const chunked of [false, true]) {
        const body = jsonOf(size);
        seen.length = 0;
        const res = await upload(url, '/read', body, chunked);
        expect(res.status, `${size} chunked ${chunked}`).toBe(200);
        expect(JSON.parse(res.text)).toEqual({ digest: sha(body), length: size });
        expect(seen).toHaveLength(1);
        expect(seen[0]).toMatchObject({ digest: sha(body), length: size });
        // a declared length gets a buffer of its own, freed when the route was done;
        // a chunked body is concatenated, as fastify does, and left to the collector
        expect(seen[0]?.after, `${size} chunked ${chunked}`).toBe(chunked ? size : 0);
      }
    }
  });

  it('a small body is read as fastify reads it and left to the collector', async () => {
    const body = jsonOf(1000);
    seen.length = 0;
    const res = await upload(url, '/read', body);
    expect(JSON.parse(res.text)).toEqual({ digest: sha(body), length: 1000 });
    expect(seen[0]?.after).toBe(1000);
  });

  it('a large body answered before its handler ran is freed too', async () => {
    const res = await upload(url, '/refused', jsonOf(200_000));
    expect(res.status).toBe(409);
    expect(unhandled).toHaveLength(1);
    // freed by the context's onResponse hook, which runs after the root's
    await waitFor('the refused body freed', () => unhandled[0]?.length === 0);
  });

  it('a body over the limit is refused, declared or counted, and the server goes on', async () => {
    for (const chunked of [false, true]) {
      const res = await upload(url, '/read', jsonOf(1_000_001), chunked);
      expect(res.status, `chunked ${chunked}`).toBe(413);
      expect(JSON.parse(res.text).code).toBe('FST_ERR_CTP_BODY_TOO_LARGE');
    }
    expect((await upload(url, '/read', jsonOf(70_000))).status).toBe(200);
  });

  it('a body cut short by its client leaves the server serving', async () => {
    const { port } = new URL(url);
    await new Promise<void>((resolve) => {
      const req = http.request({ host: '127.0.0.1', port, path: '/read', method: 'POST', headers: { 'content-type': 'application/json', 'content-length': 500_000 } });
      req.on('error', () => resolve());
      req.write(jsonOf(500_000).subarray(0, 200_000), () => setTimeout(() => {
        req.destroy();
        resolve();
      }, 20));
    });
    const body = jsonOf(300_000);
    const res = await upload(url, '/read', body);
    expect(JSON.parse(res.text)).toEqual({ digest: sha(body), length: 300_000 });
  });
});

describe('the engine\'s routes with large bodies', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(async () => {
    await s.destroy();
  });

  it('a put-batch of megabytes, with a Content-Length or chunked, writes every record, and a get and a query after read them', async () => {
    for (const chunked of [false, true]) {
      const records = Array.from({ length: 400 }, (_, i) => ({
        table: 'notes',
        tenant_id: 't1',
        id: `big-${chunked}-${i}`,
        fields: { text: `record ${i} ${'word '.repeat(400)}`, embedding: Array.from({ length: 64 }, (_, j) => ((i * 31 + j) % 97) / 97) },
      }));
      const body = Buffer.from(JSON.stringify({ records }));
      expect(body.length).toBeGreaterThan(1_000_000);
      const res = await upload(s.url, '/v1/records/put-batch', body, chunked);
      expect(res.status, res.text).toBe(200);
      expect(JSON.parse(res.text).record_count).toBe(400);
      const got = await s.post('/v1/records/get', { table: 'notes', tenant_id: 't1', id: `big-${chunked}-399` });
      expect(got.body.record.fields.text).toBe(records[399]?.fields.text);
      expect(got.body.record.fields.embedding).toHaveLength(64);
    }
    // a query body over 64 KiB (a long text) is read and answered
    const query = await upload(s.url, '/v1/query', Buffer.from(JSON.stringify({
      table: 'notes', tenant_id: 't1', text: `record 7 ${'word '.repeat(14_000)}`, text_field: 'text', top_k: 3,
    })));
    expect(query.status, query.text).toBe(200);
    expect(JSON.parse(query.text).results.length).toBeGreaterThan(0);
  });
});
