/**
 * buildGateway: the gateway's HTTP service, without listen. Every request
 * needs a configured bearer token (401, ./auth.ts), then passes the
 * per-token rate limiter (429), then is either served here (./ops.ts:
 * metrics, branches, readiness; the console) or proxied to the engine of
 * the catalog branch it addresses (./proxy.ts).
 */
import { lazyRequestLogger } from '../request-logger.js';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import { deprecationHeaders } from '../deprecation.js';
import { answerHalfClosed, continueIfExpected, deferContinue, answerPipelinedInOrder, clientErrorHandler, clientGone, errorBody, failureLevel, frameworkErrors, httpError, logRefusedCredential, onRawAnswer, refuseConnect, refuseExpectation, requestTimeoutOptions, sendRefusal } from '../http-errors.js';
import { BraidError } from '../errors.js';
import { REQUEST_ID_HEADER, requestId } from '../request-id.js';
import { consoleRoutes } from '../routes/console.js';
import { authOf, authenticateRequests, authorizeRequests } from './auth.js';
import type { GatewayConfig } from './config.js';
import { Engines } from './engines.js';
import { gatewayMetrics, routeOf } from './metrics.js';
import { gatewayOpsRoutes } from './ops.js';
import { bufferSmallBodies, checkDeclaredLength } from './body.js';
import { proxyRoutes } from './proxy.js';
import { checkRequestTarget, pathOf } from '../request-target.js';
import type { GatewayState } from './state.js';

export type { GatewayState } from './state.js';

export interface GatewayOptions {
  config: GatewayConfig;
  /** Pino logger options; off by default. */
  logger?: boolean | object;
}

export async function buildGateway(options: GatewayOptions): Promise<FastifyInstance> {
  const { config } = options;
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: config.bodyLimitBytes,
    // as the engine's: a stalled request is 408, a refused one has a {code, error} body
    requestTimeout: config.requestTimeoutMs,
    http: requestTimeoutOptions(config.requestTimeoutMs),
    clientErrorHandler,
    // fastify's own drain answer has no `code`; the onRequest hook below
    // answers 503 shutting_down instead
    return503OnClosing: false,
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'request_id' }),
    // the client's X-Request-Id when it is a plain token, else a new one; the
    // engine gets it too, so one id names the request in both logs
    genReqId: requestId,
    // a request's pino child is made at its first log line (src/request-logger.ts)
    childLoggerFactory: lazyRequestLogger,
    frameworkErrors,
  });
  refuseConnect(app.server);
  refuseExpectation(app.server);
  answerHalfClosed(app.server);
  deferContinue(app.server);
  if (config.maxConnections > 0) app.server.maxConnections = config.maxConnections;
  answerPipelinedInOrder(app.server);
  const engines = new Engines(config);
  const state: GatewayState = { config, engines, limiter: config.rateLimitMax > 0, requests: 0, metered: 0, closing: false };
  // answers written with no request of fastify's (src/http-errors.ts) are requests answered too
  onRawAnswer(app.server, () => {
    state.requests += 1;
  });
  app.decorate('gateway', state);

  app.addHook('onSend', async (request, reply, payload) => {
    // draining: keep-alive connections close after their response, so close() ends
    if (state.closing) reply.header('connection', 'close');
    reply.header(REQUEST_ID_HEADER, request.id);
    return payload;
  });
  // the request log line (level info), as the engine's: no bodies, headers or tokens
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { method: request.method, route: routeOf(request), status: reply.statusCode, duration_ms: Number(reply.elapsedTime.toFixed(3)) },
      'request',
    );
  });
  app.addHook('onReady', async () => engines.start());
  app.addHook('preClose', async () => {
    state.closing = true;
  });
  app.addHook('onClose', async () => engines.close());

  // first, so refused requests (401, 403, 429) are counted too
  const metrics = gatewayMetrics(app, engines);

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', bufferSmallBodies);

  app.addHook('onRequest', async (request, reply) => {
    state.requests += 1;
    // every answer on a deprecated path says so: the gateway's own refusals (401, 405, 429) too
    const deprecation = deprecationHeaders(request.url);
    if (deprecation) reply.headers(deprecation);
    checkRequestTarget(request);
    // readiness answers not ready itself, in its own shape
    if (state.closing && pathOf(request.url) !== '/v1/ready') {
      reply.header('connection', 'close');
      throw new BraidError('shutting_down', 'the gateway is shutting down; retry against another gateway or after the restart');
    }
  });
  authenticateRequests(app, state);
  if (state.limiter) {
    await app.register(rateLimit, {
      global: true,
      hook: 'onRequest',
      max: config.rateLimitMax,
      timeWindow: config.rateWindowMs,
      keyGenerator: (request) => authOf(request)?.token ?? '',
      errorResponseBuilder: (_request, context) =>
        new BraidError('rate_limited', `rate limit of ${context.max} requests per ${config.rateWindowMs} ms exceeded for this token; retry in ${context.after}`),
    });
  }
  authorizeRequests(app);
  // every route's body, before it is read: a streamed one is counted as it goes (./body.ts)
  app.addHook('preParsing', async (request, reply, payload) => {
    checkDeclaredLength(request.headers, config.bodyLimitBytes);
    continueIfExpected(request, reply, config.bodyLimitBytes);
    return payload;
  });

  app.setErrorHandler((err, request, reply) => {
    const braidErr = httpError(err);
    // every 5xx, as the engine logs its own (docs/operations.md, "Logs and request ids"); an engine's
    // own 5xx answer, passed through, is logged by the proxy
    // a client that left has nobody to answer, and is no failure of the gateway's (a
    // black-box review saw its abort logged as a 500)
    if (clientGone(request)) {
      request.log.info({ code: braidErr.code }, 'client closed the connection before its answer');
      return;
    }
    if (braidErr.status >= 500) request.log[failureLevel(braidErr.code)]({ err, code: braidErr.code }, 'gateway request failed');
    logRefusedCredential(request, braidErr.code);
    return sendRefusal(request, reply, braidErr.status, errorBody(braidErr));
  });

  await app.register(gatewayOpsRoutes, { metrics });
  // the same console as the engine's, served here (not proxied): it needs no engine, and with a
  // catalog of several engines there is no one engine to ask for it
  await app.register(consoleRoutes, { routeConfig: { rateLimit: false } });
  await app.register(proxyRoutes, { metrics });
  return app;
}
