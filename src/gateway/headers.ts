/**
 * Which headers cross the gateway. Hop-by-hop headers, and those a
 * `Connection` header names, describe one connection and cross in neither
 * direction (RFC 9110 7.6.1). Toward the engine the gateway sets the route,
 * the request id, the client's address and who the client is.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { REQUEST_ID_HEADER } from '../request-id.js';
import { BRANCH_HEADER, DATABASE_HEADER, headerValue, type Route } from './routing.js';

/** Set toward engines: a digest of the client's token (see src/idempotency). */
export const PRINCIPAL_HEADER = 'x-braid-principal';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'host', 'expect', 'http2-settings',
]);
/** Response headers the gateway's own server sets. */
const RESPONSE_SKIP = new Set([...HOP_BY_HOP, 'date']);

/** Header names a `Connection` header lists: hop-by-hop for this message too. */
function connectionTokens(value: string | string[] | undefined): Set<string> {
  const joined = Array.isArray(value) ? value.join(',') : value ?? '';
  return new Set(joined.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
}

export interface TowardEngine {
  /** Replaces the client's `Authorization` (an engine token); undefined forwards the client's. */
  authorization: string | undefined;
  /** The client's principal (a token digest); undefined removes any the client sent. */
  principal: string | undefined;
}

/** Request headers toward the engine of `route`: the client's minus hop-by-hop ones, with the route injected. */
export function requestHeaders(request: FastifyRequest, route: Route, toward: TowardEngine): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const named = connectionTokens(request.headers.connection);
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  out[DATABASE_HEADER] = route.upstreamDatabaseId;
  out[BRANCH_HEADER] = route.upstreamBranchId;
  // who the client is, for the engine's idempotency scoping when every
  // client reaches it with the one engine token (never the token itself)
  if (toward.principal) out[PRINCIPAL_HEADER] = toward.principal;
  else delete out[PRINCIPAL_HEADER];
  if (toward.authorization) out.authorization = toward.authorization;
  out[REQUEST_ID_HEADER] = request.id;
  const forwarded = headerValue(request.headers['x-forwarded-for']);
  out['x-forwarded-for'] = forwarded ? `${forwarded}, ${request.ip}` : request.ip;
  return out;
}

/** The engine's response headers the client gets. */
export function responseHeaders(headers: IncomingHttpHeaders): Array<[string, string | string[]]> {
  const named = connectionTokens(headers.connection);
  const out: Array<[string, string | string[]]> = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !RESPONSE_SKIP.has(name) && !named.has(name)) out.push([name, value]);
  }
  return out;
}
