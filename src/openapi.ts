/**
 * The document-level parts of the OpenAPI document (GET /v1/openapi.json);
 * the routes' parts come from their typebox schemas and
 * src/openapi-constraints.ts. Bearer security depends on how the process
 * runs: the engine declares it only when it checks tokens (`--auth-token`),
 * since a development engine accepts every request; the gateway always
 * requires a token, so it declares it on the engine's document it serves.
 * docs/api.md, "OpenAPI".
 */
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import { JSON_SCHEMAS } from './openapi-constraints.js';

export const BEARER_SCHEME = {
  type: 'http',
  scheme: 'bearer',
  description: 'a configured token (docs/gateway.md, "Tokens"); a token without the scope a route needs is 403 forbidden',
} as const;

type Document = { components?: Record<string, unknown> & { securitySchemes?: Record<string, unknown> } } & Record<string, unknown>;

/** `doc` with the bearer scheme and a requirement of it on every operation. */
export function securedDocument<T extends Document>(doc: T): T {
  const components = doc.components ?? {};
  return {
    ...doc,
    components: { ...components, securitySchemes: { ...components.securitySchemes, bearer: BEARER_SCHEME } },
    security: [{ bearer: [] }],
  };
}

/** The engine's document options: info, the shared JSON schemas, and bearer security when `secured`. */
export function engineDocument(secured: boolean): NonNullable<FastifyDynamicSwaggerOptions['openapi']> {
  const doc = {
    openapi: '3.1.0',
    info: { title: 'Braid', version: '1', description: 'Braid hybrid record database: the 14 routes of the service interface and the extensions of docs/api.md' },
    components: { schemas: structuredClone(JSON_SCHEMAS) },
  };
  // the JSON schemas use 3.1 forms (type lists) the 3.0 typings do not know
  return (secured ? securedDocument(doc) : doc) as unknown as NonNullable<FastifyDynamicSwaggerOptions['openapi']>;
}
