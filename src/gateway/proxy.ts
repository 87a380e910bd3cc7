/**
 * The proxy: every request the gateway does not answer itself goes to the
 * engine of the catalog branch it addresses; status, headers and body come
 * back. Bodies are not parsed: small ones (a known length up to
 * SMALL_BODY_BYTES) are read into a Buffer so the engine gets headers and
 * body in one write, larger or chunked ones stream from the client to the
 * engine. A put is routed by its body, a GraphQL document needs the scope of
 * what it runs.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { DocumentNode } from 'graphql';
import type { Dispatcher } from 'undici';
import { graphqlScope, requireScope, type Scope } from '../auth.js';
import { BraidError } from '../errors.js';
import { parseRequestJson } from '../json.js';
import { checkBranchNames } from '../names.js';
import { parseDocument } from '../graphql/bounds.js';
import { authOf } from './auth.js';
import { answerBranches, asksForBranches, mergeBranches } from './graphql-branches.js';
import { LimitedBody, SMALL_BODY_BYTES, hasBody, readBody } from './body.js';
import { isObject, type Engines } from './engines.js';
import { responseHeaders } from './headers.js';
import type { GatewayMetrics } from './metrics.js';
import { BRANCH_HEADER, DATABASE_HEADER, headerValue, parsePutBody, pathOf, type Route } from './routing.js';
import { resolveBranch } from '../services/branch.js';
import { upstreamFailure } from './upstream.js';
import { clientGone, failureLevel } from '../http-errors.js';

const PUT_PATH = '/v1/records/put';
const GRAPHQL_PATH = '/v1/graphql';
const SNAPSHOT_PATH = '/v1/admin/snapshot';
const RESTORE_PATH = '/v1/admin/restore';

/**
 * A snapshot's answer names the branch it copied, as its engine knows it; a
 * client that addressed it by a catalog alias gets the catalog's names, as
 * `GET /v1/branches` lists it (found by a black-box test: the answer said
 * `default/rb3` for the alias `ana/main`). Any other answer is unchanged.
 */
function inCatalogNames(payload: Buffer, route: Route): Buffer {
  if (route.database_id === route.upstreamDatabaseId && route.branch_id === route.upstreamBranchId) return payload;
  let body: unknown;
  try {
    body = JSON.parse(payload.toString('utf8'));
  } catch {
    return payload;
  }
  if (!isObject(body) || body.database_id !== route.upstreamDatabaseId || body.branch_id !== route.upstreamBranchId) return payload;
  return Buffer.from(JSON.stringify({ ...body, database_id: route.database_id, branch_id: route.branch_id }));
}

/** A restore's target as the client named it and as its engine knows it. */
interface RestoreAlias {
  catalog: string;
  upstream: string;
}

/**
 * A restore's body as the engine of `route` takes it. Its `target` names the
 * branch the client will read through this gateway: one the catalog lists
 * under another name on that engine (an alias) is restored under the
 * engine's name, so that the alias reaches it, and the answer names it as
 * the client did; one the catalog serves from another engine is 409
 * `branch_exists`. Found by a black-box review: the engine made a branch of
 * the alias's own name, which no client could reach, and its verification
 * "passed" on it.
 */
function routeRestore(engines: Engines, route: Route, bytes: Buffer): { body: Buffer; alias?: RestoreAlias } {
  let body: unknown;
  try {
    // the engine's parser (a leading BOM had let a body past the rewrite; found by a recheck)
    body = parseRequestJson(bytes);
  } catch {
    return { body: bytes };
  }
  if (!isObject(body) || typeof body.target !== 'string') return { body: bytes };
  const listed = engines.router.catalogRoute(route.database_id, body.target);
  if (!listed) {
    // a branch of that name another engine of the database reports: the new one would make the name
    // ambiguous (found by a black-box review: the gateway then routed it to either engine)
    const elsewhere = engines.router.reportedElsewhere(route.database_id, body.target, route.endpoint);
    if (elsewhere.length > 0) {
      throw new BraidError('branch_exists', `branch ${route.database_id}/${body.target} exists on another engine of the database (${elsewhere.join(', ')}); restore under another name`);
    }
    // through a database that aliases another (upstream_database_id), the engine makes the branch in
    // the other one, which this database's name never reaches (found by a black-box review: 200, then
    // 404 for every read of it by that name)
    if (route.upstreamDatabaseId !== route.database_id) {
      throw new BraidError(
        'invalid_request',
        `database ${route.database_id} aliases ${route.upstreamDatabaseId} on its engine: a branch restored through it is made in ${route.upstreamDatabaseId} and is not reachable as ${route.database_id}/${body.target}; restore through database ${route.upstreamDatabaseId}, or list the target in the catalog`,
      );
    }
    return { body: bytes };
  }
  if (listed.endpoint !== route.endpoint) {
    throw new BraidError('branch_exists', `branch ${route.database_id}/${body.target} is in the gateway's catalog, on another engine than this restore's`);
  }
  // the engine makes the branch in the snapshot's database, taken through this request's
  if (listed.upstreamDatabaseId !== route.upstreamDatabaseId) {
    throw new BraidError('branch_exists', `branch ${route.database_id}/${body.target} is in the gateway's catalog as ${listed.upstreamDatabaseId}/${listed.upstreamBranchId}, in another database than this restore's`);
  }
  if (listed.upstreamBranchId === body.target) return { body: bytes };
  return { body: Buffer.from(JSON.stringify({ ...body, target: listed.upstreamBranchId })), alias: { catalog: body.target, upstream: listed.upstreamBranchId } };
}

/** A restore's answer naming its target as the client did. */
function restoredAs(payload: Buffer, alias: RestoreAlias): Buffer {
  let body: unknown;
  try {
    body = JSON.parse(payload.toString('utf8'));
  } catch {
    return payload;
  }
  if (!isObject(body) || body.target !== alias.upstream) return payload;
  return Buffer.from(JSON.stringify({ ...body, target: alias.catalog }));
}

/**
 * A GraphQL request body as the gateway reads it: the scope it needs, and
 * its document when it parses. A body that is not JSON is `400 invalid_json`
 * here, as at the engine; a document that does not parse needs only `read`
 * (the engine parses it with the same parser and rejects it without running
 * anything).
 */
function readGraphql(bytes: Buffer, contentType: string | undefined): { scope: Scope; body?: Record<string, unknown>; document?: DocumentNode } {
  // a body that is not JSON content runs nothing at the engine, which
  // answers it unsupported_media_type, as it does direct (the gateway had
  // answered invalid_json; found by a black-box review)
  if ((contentType ?? '').split(';')[0]!.trim().toLowerCase() !== 'application/json') return { scope: 'read' };
  // the engine's own parser (it takes a leading BOM, as JSON.parse does
  // not): a body the gateway read otherwise could run there unchecked
  const body = parseRequestJson(bytes);
  if (!isObject(body) || typeof body.query !== 'string') return { scope: 'read' };
  try {
    const operationName = typeof body.operationName === 'string' ? body.operationName : undefined;
    const document = parseDocument(body.query);
    return { scope: graphqlScope(document, operationName), body, document };
  } catch {
    return { scope: 'read' };
  }
}

/**
 * A put's route: the branch its body names (SDKs inject it), which must
 * agree with the headers, else the headers'; the body as the engine of that
 * branch takes it (routing.ts, ParsedPut): the client's bytes, or a wrapper
 * naming an alias rewritten with the engine's names, which must still be
 * within the limit the engine holds it to.
 */
async function routePut(engines: Engines, request: FastifyRequest, bytes: Buffer, limit: number): Promise<{ route: Route; body: Buffer }> {
  const parsed = parsePutBody(bytes);
  // the one branch rule of every front door (src/services/branch.ts): a body's names must agree with the headers
  const headers = { databaseId: headerValue(request.headers[DATABASE_HEADER]), branchId: headerValue(request.headers[BRANCH_HEADER]) };
  checkBranchNames({ database_id: parsed?.databaseId, branch_id: parsed?.branchId });
  resolveBranch(headers, { database_id: parsed?.databaseId, branch_id: parsed?.branchId });
  const route = await engines.route(request, parsed?.databaseId, parsed?.branchId);
  const body = parsed ? parsed.forRoute(route) : bytes;
  if (body.length > limit) {
    throw new BraidError('body_too_large', `request body is ${body.length} bytes once its database_id / branch_id are rewritten with the engine's names, over the limit of ${limit} bytes`);
  }
  return { route, body };
}

/** The `code` of an engine's error body read whole, for the log; undefined when streamed or not one. */
function engineCode(payload: unknown): string | undefined {
  if (!Buffer.isBuffer(payload)) return undefined;
  try {
    const body: unknown = JSON.parse(payload.toString('utf8'));
    return isObject(body) && typeof body.code === 'string' ? body.code : undefined;
  } catch {
    return undefined;
  }
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
    // (a compressed body, which the gateway could not route by, was refused by checkRequestTarget)
    const limit = config.bodyLimitBytes;
    let route: Route;
    let body: Buffer | undefined;
    /** GraphQL `branches` fields answered here, to put into the engine's answer. */
    let branches: Record<string, unknown> | undefined;
    const buffered = Buffer.isBuffer(request.body) ? request.body : undefined;
    let alias: RestoreAlias | undefined;
    if (request.method === 'POST' && pathname === PUT_PATH) {
      ({ route, body } = await routePut(engines, request, buffered ?? await readBody(raw, limit), limit));
    } else if (request.method === 'POST' && pathname === GRAPHQL_PATH) {
      const bytes = buffered ?? await readBody(raw, limit);
      const read = readGraphql(bytes, request.headers['content-type']);
      requireScope(authOf(request)!.scope, read.scope, 'this GraphQL operation');
      if (read.body && read.document && asksForBranches(read.document)) {
        const answer = await answerBranches(engines, request, read.body, read.document);
        if (answer.whole) return reply.status(200).send(answer.whole);
        branches = answer.fields;
      }
      route = await engines.route(request);
      body = bytes;
    } else if (request.method === 'POST' && pathname === RESTORE_PATH) {
      const bytes = buffered ?? await readBody(raw, limit);
      route = await engines.route(request);
      // what every engine reports now, so a target another engine holds is found (routeRestore)
      await engines.list(request);
      ({ body, alias } = routeRestore(engines, route, bytes));
    } else {
      route = await engines.route(request);
      body = buffered;
    }
    const up = engines.upstreamOf(route);
    if (up.notReady) throw new BraidError('not_ready', up.readiness.error);

    const headers = engines.headers(request, route);
    // a body not read yet streams from the client, counted against the limit
    const streamed = body === undefined && hasBody(request.headers) ? new LimitedBody(raw, limit) : undefined;
    if (body) headers['content-length'] = String(body.length);
    else if (!streamed) delete headers['content-length'];

    let res: Dispatcher.ResponseData;
    const sent = process.hrtime.bigint();
    try {
      res = await up.request({ method: request.method as Dispatcher.HttpMethod, path: request.url, headers, body: body ?? streamed });
    } catch (err) {
      // a streamed body over the limit: the gateway's own answer, not the engine's failure
      if (streamed?.exceeded) throw streamed.error;
      // a client that left mid-body failed its own request, not the engine's (found by a black-box review)
      if (clientGone(request)) throw err;
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
    if (branches || (request.method !== 'HEAD' && Number.isInteger(length) && length <= SMALL_BODY_BYTES)) {
      try {
        payload = Buffer.from(await res.body.arrayBuffer());
      } catch (err) {
        void up.check();
        throw upstreamFailure(route.endpoint, err);
      }
    }
    const renamed = Buffer.isBuffer(payload) && res.statusCode === 200 && ((request.method === 'POST' && pathname === SNAPSHOT_PATH) || branches !== undefined || alias !== undefined);
    if (renamed && branches) payload = mergeBranches(payload as Buffer, branches);
    else if (renamed && alias) payload = restoredAs(payload as Buffer, alias);
    else if (renamed) payload = inCatalogNames(payload as Buffer, route);
    if (res.statusCode >= 500) {
      const code = engineCode(payload);
      request.log[failureLevel(code)]({ engine: route.endpoint, status: res.statusCode, code }, 'engine answered with a server error');
    }
    reply.status(res.statusCode);
    for (const [name, value] of responseHeaders(res.headers)) reply.header(name, value);
    if (renamed) reply.header('content-length', String((payload as Buffer).length));
    // Every Braid body is JSON: label an unlabelled one so, rather than fastify's octet-stream default.
    if (res.headers['content-type'] === undefined && Buffer.isBuffer(payload) && payload.length > 0) {
      reply.header('content-type', 'application/json; charset=utf-8');
    }
    return reply.send(payload);
  };

  app.all('/*', proxy);
  app.setNotFoundHandler(app.gateway.limiter ? { preHandler: app.rateLimit() } : {}, proxy);
}
