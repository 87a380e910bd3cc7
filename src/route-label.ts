/**
 * The `route` label of a request in logs and metrics: the route's pattern
 * (`/v1/records/put`); for a path served with other methods (answered 405),
 * that path; `unmatched` only for a path no route has, so label values stay
 * bounded whatever paths clients send.
 */
import type { FastifyRequest } from 'fastify';

const knownPaths = new WeakMap<FastifyRequest, string>();

/** Marks `request` (which no route takes) as asking for the served path `path`. */
export function labelKnownPath(request: FastifyRequest, path: string): void {
  knownPaths.set(request, path);
}

export function routeLabel(request: FastifyRequest): string {
  return request.routeOptions.url ?? knownPaths.get(request) ?? 'unmatched';
}
