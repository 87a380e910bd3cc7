/**
 * buildApp: the engine's HTTP service, without listen. server.ts owns
 * listening, signals and shutdown.
 */
import Fastify, { type FastifyError, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Braid, type BranchRef } from './engine.js';
import { BraidError, isErrorCode } from './errors.js';
import { DEFAULTS, type ServerConfig } from './config.js';
import { ajv, validationError } from './validation.js';
import { recordRoutes } from './routes/records.js';
import { opsRoutes } from './routes/ops.js';
import { queryRoutes } from './routes/query.js';
import { graphqlRoutes } from './routes/graphql.js';
import { adminRoutes } from './routes/admin.js';
import { idempotency } from './idempotency/index.js';
import sjson from 'secure-json-parse';
import { QlSyntaxError, formatQlError } from './ql/index.js';
import swagger from '@fastify/swagger';

export interface AppOptions {
  engine: Braid;
  config?: Partial<ServerConfig>;
  /** Pino logger options; off by default. */
  logger?: boolean | object;
}

/** Per-process counters and state shared by the routes. */
export interface ServiceState {
  engine: Braid;
  config: ServerConfig;
  requests: number;
  closing: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    braid: ServiceState;
  }
}

export type App = FastifyInstance & { withTypeProvider: () => FastifyInstance };

const BRANCH_HEADER = 'x-braid-branch';
const DATABASE_HEADER = 'x-braid-database';

/** The branch a request addresses through headers (body fields win on put). */
export function branchOf(request: FastifyRequest): BranchRef {
  const header = (name: string): string | undefined => {
    const v = request.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  return { databaseId: header(DATABASE_HEADER), branchId: header(BRANCH_HEADER) };
}

/** The branch a keyed request's receipt lives in: the one its write goes to. */
function receiptBranch(request: FastifyRequest): BranchRef {
  const headers = branchOf(request);
  const body = request.body as { record?: unknown; database_id?: string; branch_id?: string } | undefined;
  if (request.routeOptions.url === '/v1/records/put' && body && typeof body === 'object' && 'record' in body) {
    return { databaseId: body.database_id ?? headers.databaseId, branchId: body.branch_id ?? headers.branchId };
  }
  return headers;
}

function errorReply(err: FastifyError | BraidError | Error): BraidError {
  if (err instanceof BraidError) return err;
  const e = err as FastifyError & { validation?: unknown[]; validationContext?: string };
  if (e.validation) return validationError(e.validation as never, e.validationContext ?? 'body');
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new BraidError('invalid_json', e.message.toLowerCase());
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BraidError('body_too_large', 'request body is larger than the configured limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BraidError('unsupported_media_type', 'request body must be application/json');
    default:
      break;
  }
  if (e instanceof SyntaxError || e.statusCode === 400) return new BraidError('invalid_json', e.message);
  if (typeof e.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, e.message);
  return new BraidError('internal_error', e.message || 'internal error');
}

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const config: ServerConfig = { ...DEFAULTS, ...options.config };
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: config.bodyLimitBytes,
    return503OnClosing: true,
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.setValidatorCompiler(({ schema }) => ajv.compile(schema));
  app.removeContentTypeParser('text/plain');
  // keep the raw body: idempotency receipts hash exactly what the client sent
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const raw = body as string;
    request.rawBody = raw;
    if (raw.trim() === '') {
      done(new BraidError('invalid_json', 'request body is empty but content-type is application/json'), undefined);
      return;
    }
    try {
      done(null, sjson.parse(raw, undefined, { protoAction: 'error', constructorAction: 'error' }));
    } catch (err) {
      done(new BraidError('invalid_json', `body is not valid json: ${(err as Error).message.toLowerCase()}`), undefined);
    }
  });

  const state: ServiceState = { engine: options.engine, config, requests: 0, closing: false };
  app.decorate('braid', state);

  app.addHook('onRequest', async (request) => {
    state.requests += 1;
    if (config.authTokens.length === 0) return;
    const header = request.headers.authorization ?? '';
    const match = /^Bearer\s+(.+)$/i.exec(header);
    if (!match || !config.authTokens.includes(match[1]!.trim())) {
      throw new BraidError('unauthorized', match ? 'bearer token is not valid' : 'missing Authorization: Bearer <token> header');
    }
  });

  app.setErrorHandler((err, request, reply) => {
    if (err instanceof QlSyntaxError) return reply.status(400).send(formatQlError(err));
    const braidErr = errorReply(err as Error);
    if (braidErr.status >= 500) request.log.error({ err }, 'request failed');
    const body: Record<string, unknown> = braidErr.toBody();
    if (braidErr.index !== undefined) body.index = braidErr.index;
    return reply.status(braidErr.status).send(body);
  });

  app.setNotFoundHandler((request, reply) => {
    return reply.status(404).send({ code: 'route_not_found', error: `no route ${request.method} ${request.url.split('?')[0]}` });
  });

  // Draining: once close() starts, in-flight requests finish but their
  // keep-alive connections are closed after the response, so close() ends.
  app.addHook('preClose', async () => {
    state.closing = true;
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    if (state.closing) reply.header('connection', 'close');
    return payload;
  });

  // OpenAPI 3.1 document of every route, generated from the route schemas (docs/api.md, "OpenAPI")
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Braid', version: '1', description: 'Braid hybrid record database: the 14 routes of the service interface and the extensions of docs/api.md' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'required by the gateway, and by an engine started with --auth-token' } } },
      security: [{ bearer: [] }],
    },
    // documentation only (validation is unchanged): the branch headers every route takes, Idempotency-Key on the keyed routes
    transform: ({ schema, url }) => {
      const keyed = schema?.response !== undefined && 409 in (schema.response as object);
      const header = (description: string) => ({ type: 'string', description });
      const headers = {
        type: 'object',
        properties: {
          'x-braid-database': header('database to address (default: default)'),
          'x-braid-branch': header('branch to address (default: main)'),
          ...(keyed ? { 'idempotency-key': header('1-255 printable ASCII characters; replays the first response of the same key and body') } : {}),
        },
      };
      return { schema: { ...schema, headers } as typeof schema, url };
    },
  });
  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  await app.register(idempotency, { engine: options.engine, branchOf: receiptBranch });
  await app.register(recordRoutes);
  await app.register(opsRoutes);
  await app.register(queryRoutes);
  await app.register(graphqlRoutes);
  await app.register(adminRoutes);
  return app;
}
