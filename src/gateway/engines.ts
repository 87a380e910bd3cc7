/**
 * The engines behind the gateway: one Upstream (pool and readiness check)
 * per endpoint of the catalog, the router of the catalog's branches, and the
 * branches learned from the engines themselves (a restore makes one): learned
 * whenever a request names a branch the gateway does not know (one look-up
 * at a time, shared by the requests that wait for it) and whenever
 * GET /v1/branches lists them.
 */
import type { FastifyRequest } from 'fastify';
import { BraidError } from '../errors.js';
import { tokenId } from '../auth.js';
import { authOf } from './auth.js';
import type { GatewayConfig } from './config.js';
import { requestHeaders } from './headers.js';
import { BRANCH_HEADER, DATABASE_HEADER, Router, headerValue, type Route } from './routing.js';
import { Upstream, upstreamFailure } from './upstream.js';

/** A branch as an engine's GET /v1/branches lists it. */
export interface ListedBranch {
  branch_id: string;
  database_id: string;
  latest_epoch: number;
  parent_branch_id: string | null;
  state: string;
}

/** Each endpoint's branches by `listedKey`; undefined when the engine did not answer. */
/**
 * Each engine's branches by endpoint, or why there are none: `unreachable`
 * when the engine did not answer, `error` when it answered with something
 * other than its list (a token it refuses, for instance).
 */
export type Listing = Map<string, Map<string, ListedBranch> | 'unreachable' | 'error'>;

/** The key of a branch in a Listing. */
export const listedKey = (databaseId: string, branchId: string): string => `${databaseId}\u0000${branchId}`;

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export class Engines {
  readonly router: Router;
  readonly upstreams = new Map<string, Upstream>();
  /** `Authorization` toward the engines when an engine token is configured; without one, clients' own go through. */
  readonly authorization: string | undefined;
  private discovering: Promise<void> | undefined;

  constructor(config: GatewayConfig) {
    this.router = new Router(config.catalog, config.defaultDatabase);
    this.authorization = config.engineToken ? `Bearer ${config.engineToken}` : undefined;
    for (const [endpoint, probe] of this.router.endpoints()) {
      this.upstreams.set(endpoint, new Upstream(endpoint, probe, {
        connectTimeoutMs: config.connectTimeoutMs,
        upstreamTimeoutMs: config.upstreamTimeoutMs,
        connections: config.connectionsPerEngine,
        readyIntervalMs: config.readyIntervalMs,
        // without an engine token, clients' headers are forwarded; checks use the first client token
        probeAuthorization: this.authorization ?? `Bearer ${config.tokens[0]!.token}`,
      }));
    }
  }

  /** Starts every engine's readiness check. */
  start(): void {
    for (const up of this.upstreams.values()) up.start();
  }

  async close(): Promise<void> {
    await Promise.all([...this.upstreams.values()].map((up) => up.close()));
  }

  upstreamOf(route: Route): Upstream {
    return this.upstreams.get(route.endpoint)!;
  }

  /** Request headers toward the engine of `route` (src/gateway/headers.ts), as the authenticated client. */
  headers(request: FastifyRequest, route: Route): Record<string, string | string[]> {
    const auth = authOf(request);
    return requestHeaders(request, route, { authorization: this.authorization, principal: auth && tokenId(auth.token) });
  }

  /**
   * The catalog branch a request addresses: `databaseId` / `branchId` (the
   * put body's) or else its headers. A branch the router does not know is
   * looked up on the engines first; still unknown, it is branch_not_found.
   */
  async route(request: FastifyRequest, databaseId?: string, branchId?: string): Promise<Route> {
    const resolve = () =>
      this.router.resolve(databaseId ?? headerValue(request.headers[DATABASE_HEADER]), branchId ?? headerValue(request.headers[BRANCH_HEADER]));
    try {
      return resolve();
    } catch (err) {
      if (!(err instanceof BraidError && err.code === 'branch_not_found')) throw err;
      // a look-up already under way may have asked before the branch existed:
      // when it does not find it, ask once more
      const joined = this.discovering !== undefined;
      for (const last of joined ? [false, true] : [true]) {
        this.discovering ??= this.list(request).then(() => undefined).finally(() => (this.discovering = undefined));
        await this.discovering;
        try {
          return resolve();
        } catch (again) {
          if (last) throw again;
        }
      }
      throw err;
    }
  }

  /**
   * Each branch's parent as its engine last listed it (a parent never
   * changes), by endpoint and engine names: what `GET /v1/branches` says of
   * it while its engine does not answer.
   */
  private readonly parents = new Map<string, string | null>();

  /** The parent of `route`'s branch as its engine last listed it; null when never listed. */
  lastParent(route: Route): string | null {
    return this.parents.get(`${route.endpoint}\n${listedKey(route.upstreamDatabaseId, route.upstreamBranchId)}`) ?? null;
  }

  /** Each engine's `GET /v1/branches`, asked with the request's credentials; teaches the router. */
  async list(request: FastifyRequest): Promise<Listing> {
    const perEndpoint: Listing = new Map();
    await Promise.all([...this.router.endpoints()].map(async ([endpoint, probe]) => {
      const up = this.upstreams.get(endpoint)!;
      let listed: Map<string, ListedBranch> | 'unreachable' | 'error' = 'error';
      try {
        const headers = this.headers(request, probe);
        delete headers['content-length'];
        const res = await up.getJson('/v1/branches', headers, true);
        if (res.status === 200 && isObject(res.body) && Array.isArray(res.body.branches)) {
          const branches = (res.body.branches as unknown[]).filter(
            (b): b is ListedBranch => isObject(b) && typeof b.database_id === 'string' && typeof b.branch_id === 'string',
          );
          listed = new Map(branches.map((b) => [listedKey(b.database_id, b.branch_id), b]));
          for (const [key, b] of listed) if (typeof b.parent_branch_id === 'string' || b.parent_branch_id === null) this.parents.set(`${endpoint}\n${key}`, b.parent_branch_id);
          this.router.learn(endpoint, branches);
        } else {
          request.log.warn({ engine: endpoint, status: res.status }, 'engine answered GET /v1/branches without its branch list');
        }
      } catch {
        listed = 'unreachable';
        void up.check();
      }
      perEndpoint.set(endpoint, listed);
    }));
    return perEndpoint;
  }

  /** GETs a JSON route of the engine of `route` for `request`; a failure is upstream_unreachable or upstream_error. */
  async getJson(request: FastifyRequest, route: Route, path: string): Promise<{ status: number; body: unknown }> {
    const up = this.upstreamOf(route);
    const headers = this.headers(request, route);
    delete headers['content-length'];
    try {
      return await up.getJson(path, headers);
    } catch (err) {
      void up.check();
      throw upstreamFailure(route.endpoint, err);
    }
  }
}
