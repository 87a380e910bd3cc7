/**
 * The deprecated route 5, `POST /v1/insert`, and what every answer on its
 * path says: `Deprecation: true` (RFC 9745) and a `successor-version` link
 * to `/v1/records/put` (RFC 8288). Every answer means every one: the
 * route's, a replay's, a refusal before any route runs (a bad branch
 * header, a 405 of another method, a 417, the gateway's 401), so each
 * server marks the answer as the request arrives.
 */
import { pathOf } from './request-target.js';

export const DEPRECATION_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  deprecation: 'true',
  link: '</v1/records/put>; rel="successor-version"',
});

/** The headers a request's answer carries for its path: the deprecation's on `/v1/insert`, else none. */
export function deprecationHeaders(url: string | undefined): Readonly<Record<string, string>> | undefined {
  return url?.startsWith('/v1/insert') && pathOf(url) === '/v1/insert' ? DEPRECATION_HEADERS : undefined;
}
