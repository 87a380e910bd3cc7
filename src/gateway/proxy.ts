/**
 * The proxy: every request the gateway does not answer itself goes to the
 * engine of the catalog branch it addresses; status, headers and body come
 * back. Bodies are not parsed: small ones (a known length up to
 * SMALL_BODY_BYTES) are read into a Buffer so the engine gets headers and
 * body in one write, larger or chunked ones stream from the client to the
 * engine. A put is routed by its body, a GraphQL document needs the scope of
 * what it runs.
 */
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import { graphqlScope, requireScope, type Scope } from '../auth.js';
import { BraidError } from '../errors.js';
import { parseRequestJson } from '../json.js';
import { checkBranchNames } from '../names.js';
import { parseDocument } from '../graphql/bounds.js';
import { authOf } from './auth.js';
import { isObject, type Engines } from './engines.js';
import { responseHeaders } from './headers.js';
import type { GatewayMetrics } from './metrics.js';
import { BRANCH_HEADER, DATABASE_HEADER, headerValue, parsePutBody, pathOf, type Route } from './routing.js';
import { resolveBranch } from '../services/branch.js';
import { upstreamFailure } from './upstream.js';

const PUT_PATH = '/v1/records/put';
const GRAPHQL_PATH = '/v1/graphql';
/** Bodies and engine answers up to this size are buffered and sent in one write instead of streamed. */
const SMALL_BODY_BYTES = 64 * 1024;

/** The gateway's one content-type parser: small bodies of a known length become a Buffer, others stay a stream. */
export function bufferSmallBodies(request: FastifyRequest, payload: IncomingMessage, done: (err: Error | null, body?: unknown) => void): void {
  const length = Number(request.headers['content-length']);
  if (!Number.isInteger(length) || length > SMALL_BODY_BYTES) {
    done(null);
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  payload.on('data', (chunk: Buffer) => {
    size += chunk.length;
    chunks.push(chunk);
  });
  payload.on('end', () => done(null, Buffer.concat(chunks, size)));
  payload.on('error', (err) => done(err));
}

/** Reads a request body up to `limit` bytes. */
async function readBody(raw: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(raw.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    throw new BraidError('body_too_large', `request body is larger than the limit of ${limit} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of raw) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new BraidError('body_too_large', `request body is larger than the limit of ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks, size);
}

function hasBody(headers: IncomingHttpHeaders): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && length !== '0';
}

/**
 * The scope a GraphQL request body needs. A body that is not JSON is
 * `400 invalid_json` here, as at the engine; a document that does not parse
 * needs only `read` (the engine parses it with the same parser and rejects
 * it without running anything).
 */
function graphqlDocumentScope(bytes: Buffer): Scope {
  // the engine's own parser (it takes a leading BOM, as JSON.parse does
  // not): a body the gateway read otherwise could run there unchecked
  const body = parseRequestJson(bytes);
  if (!isObject(body) || typeof body.query !== 'string') return 'read';
  try {
    const operationName = typeof body.operationName === 'string' ? body.operationName : undefined;
    return graphqlScope(parseDocument(body.query), operationName);
  } catch {
    return 'read';
  }
}

/**
 * A put's route: the branch its body names (SDKs inject it), which must
 * agree with the headers, else the headers'; the body rewritten with the
 * engine's names of that branch.
 */
async function routePut(engines: Engines, request: FastifyRequest, bytes: Buffer): Promise<{ route: Route; body: Buffer }> {
  const parsed = parsePutBody(bytes);
  // the one branch rule of every front door (src/services/branch.ts): a body's names must agree with the headers
  const headers = { databaseId: headerValue(request.headers[DATABASE_HEADER]), branchId: headerValue(request.headers[BRANCH_HEADER]) };
  checkBranchNames({ database_id: parsed?.databaseId, branch_id: parsed?.branchId });
  resolveBranch(headers, { database_id: parsed?.databaseId, branch_id: parsed?.branchId });
  const route = await engines.route(request, parsed?.databaseId, parsed?.branchId);
  return { route, body: parsed ? parsed.rewrite(route) : bytes };
}

export interface ProxyOptions {
  metrics: GatewayMetrics;
}

/** Registers the proxy for every path and method the gateway does not answer itself. */
export async function proxyRoutes(app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { config, engines } = app.gateway;
  const { upstreamDuration, upstreamErrors } = options.metrics;

  const proxy = async (request: FastifyRequest, reply: FastifyReply) => {
    const raw = request.raw;
    const pathname = pathOf(request.url);
    // the gateway routes a put by its body: a body it cannot read would pass
    // unrouted, so compressed bodies are refused on every route
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
      throw new BraidError('unsupported_content_encoding', `Content-Encoding ${encoding} is not accepted: send the body uncompressed`);
    }
    let route: Route;
    let body: Buffer | IncomingMessage | undefined;
    const buffered = Buffer.isBuffer(request.body) ? request.body : undefined;
    if (request.method === 'POST' && pathname === PUT_PATH) {
      ({ route, body } = await routePut(engines, request, buffered ?? await readBody(raw, config.bodyLimitBytes)));
    } else if (request.method === 'POST' && pathname === GRAPHQL_PATH) {
      const bytes = buffered ?? await readBody(raw, config.bodyLimitBytes);
      requireScope(authOf(request)!.scope, graphqlDocumentScope(bytes), 'this GraphQL operation');
      route = await engines.route(request);
      body = bytes;
    } else {
      route = await engines.route(request);
      body = buffered ?? (hasBody(request.headers) ? raw : undefined);
    }
    const up = engines.upstreamOf(route);
    if (up.notReady) throw new BraidError('not_ready', up.readiness.error);

    const headers = engines.headers(request, route);
    if (Buffer.isBuffer(body)) headers['content-length'] = String(body.length);
    else if (body === undefined) delete headers['content-length'];

    let res: Dispatcher.ResponseData;
    const sent = process.hrtime.bigint();
    try {
      res = await up.request({ method: request.method as Dispatcher.HttpMethod, path: request.url, headers, body });
    } catch (err) {
      void up.check();
      const failure = upstreamFailure(route.endpoint, err);
      upstreamErrors.inc({ engine: route.endpoint, code: failure.code });
      throw failure;
    }
    upstreamDuration.observe({ engine: route.endpoint, status: String(res.statusCode) }, Number(process.hrtime.bigint() - sent) / 1e9);
    if (res.statusCode === 503) void up.check();
    // Small answers with a known length are read first and sent in one write;
    // anything else streams through.
    let payload: Buffer | Dispatcher.ResponseData['body'] = res.body;
    const length = Number(res.headers['content-length']);
    if (request.method !== 'HEAD' && Number.isInteger(length) && length <= SMALL_BODY_BYTES) {
      try {
        payload = Buffer.from(await res.body.arrayBuffer());
      } catch (err) {
        void up.check();
        throw upstreamFailure(route.endpoint, err);
      }
    }
    reply.status(res.statusCode);
    for (const [name, value] of responseHeaders(res.headers)) reply.header(name, value);
    // Every Braid body is JSON: label an unlabelled one so, rather than fastify's octet-stream default.
    if (res.headers['content-type'] === undefined && Buffer.isBuffer(payload) && payload.length > 0) {
      reply.header('content-type', 'application/json; charset=utf-8');
    }
    return reply.send(payload);
  };

  app.all('/*', proxy);
  app.setNotFoundHandler(app.gateway.limiter ? { preHandler: app.rateLimit() } : {}, proxy);
}
