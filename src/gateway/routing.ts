/**
 * Managed routing: picks the catalog branch a request addresses (headers
 * x-braid-database / x-braid-branch, or the put body's database_id /
 * branch_id), and what the engine receives of a put body.
 */
import { BraidError } from '../errors.js';
import { encodeRequestJson, holdsNonFinite } from '../json.js';
import { DEFAULT_BRANCH, type Catalog, type CatalogBranch } from './config.js';

export { BRANCH_HEADER, DATABASE_HEADER } from '../names.js';

const GET = ['GET', 'HEAD'];
const POST = ['POST'];
/**
 * The paths Braid serves and their methods, as the engine serves them (a
 * test checks the two agree): a known path asked with another method is
 * answered 405 by the gateway, before it is routed by its branch headers.
 * The paths are also the route label of the gateway's metrics (any other is
 * "other").
 */
export const API_METHODS: ReadonlyMap<string, readonly string[]> = new Map([
  ['/v1/graphql/schema', GET], ['/v1/nativeql', POST], ['/v1/query', POST], ['/v1/admin/restore', POST], ['/v1/explain', POST],
  ['/v1/insert', POST], ['/v1/graphql/bounded', POST], ['/v1/graphql', POST], ['/v1/branches', GET],
  ['/v1/records/put-batch', POST], ['/v1/admin/snapshot', POST], ['/v1/records/put', POST],
  ['/v1/metrics/public-safe', GET], ['/v1/ready', GET], ['/v1/records/get', POST], ['/v1/admin/branch-state', POST],
  ['/v1/openapi.json', GET], ['/metrics', GET],
]);

export { pathOf } from '../request-target.js';

/** Where a request goes: the catalog names, the engine's names and the endpoint. */
export interface Route {
  database_id: string;
  branch_id: string;
  upstreamDatabaseId: string;
  upstreamBranchId: string;
  endpoint: string;
}

/** A branch an engine reports in its `GET /v1/branches`. */
export interface ReportedBranch {
  database_id: string;
  branch_id: string;
}

/**
 * The catalog's branches, plus the branches the engines report (restored
 * branches, for example): a branch an engine reports is routable under a
 * catalog database that has a branch on that engine under its own name
 * (not an alias), with the engine's names. The catalog wins on a name both
 * have.
 */
export class Router {
  private readonly routes = new Map<string, Map<string, Route>>();
  private readonly defaultBranches = new Map<string, string>();
  /**
   * database -> branch -> endpoint -> route, learned from the engines. A
   * name two engines of one database report is ambiguous: the gateway had
   * routed it to whichever answered last, so a write went to one engine and
   * a later read to the other (a black-box review).
   */
  private readonly discovered = new Map<string, Map<string, Map<string, Route>>>();
  /** Databases whose `branches` are the exact list (discover_branches: false). */
  private readonly pinned = new Set<string>();

  constructor(readonly catalog: Catalog, readonly defaultDatabase: string) {
    for (const db of catalog.databases) {
      const branches = new Map<string, Route>();
      for (const b of db.branches) branches.set(b.branch_id, toRoute(db.database_id, b));
      this.routes.set(db.database_id, branches);
      const fallback = branches.has(DEFAULT_BRANCH) ? DEFAULT_BRANCH : db.branches[0]!.branch_id;
      this.defaultBranches.set(db.database_id, db.default_branch ?? fallback);
      if (db.discover_branches === false) this.pinned.add(db.database_id);
    }
  }

  /** Resolves a database/branch pair (undefined = default); throws branch_not_found. */
  resolve(databaseId: string | undefined, branchId: string | undefined): Route {
    const db = databaseId || this.defaultDatabase;
    const branches = this.routes.get(db);
    if (!branches) throw new BraidError('branch_not_found', `database ${db} is not in the gateway catalog`);
    const branch = branchId || this.defaultBranches.get(db)!;
    const catalog = branches.get(branch);
    if (catalog) return catalog;
    const reported = [...(this.discovered.get(db)?.get(branch)?.values() ?? [])];
    if (reported.length === 0) throw new BraidError('branch_not_found', `branch ${db}/${branch} is neither in the gateway catalog nor reported by its engines`);
    if (reported.length > 1) {
      throw new BraidError(
        'branch_ambiguous',
        `branch ${db}/${branch} is reported by ${reported.length} engines of the database (${reported.map((r) => r.endpoint).join(', ')}): the gateway cannot tell which is meant; name it in the catalog, or rename one`,
      );
    }
    return reported[0]!;
  }

  /** The engines other than `endpoint` that report branch `branchId` of database `databaseId`. */
  reportedElsewhere(databaseId: string, branchId: string, endpoint: string): string[] {
    return [...(this.discovered.get(databaseId)?.get(branchId)?.keys() ?? [])].filter((e) => e !== endpoint);
  }

  /** The catalog's own branch `branchId` of database `databaseId`, not one learned from the engines. */
  catalogRoute(databaseId: string, branchId: string): Route | undefined {
    return this.routes.get(databaseId)?.get(branchId);
  }

  /** Replaces what `endpoint` reported before with `reported`. */
  learn(endpoint: string, reported: ReportedBranch[]): void {
    for (const branches of this.discovered.values()) {
      for (const [name, engines] of branches) {
        engines.delete(endpoint);
        if (engines.size === 0) branches.delete(name);
      }
    }
    for (const [db, branches] of this.routes) {
      if (this.pinned.has(db)) continue;
      const home = [...branches.values()].some((r) => r.endpoint === endpoint && r.upstreamDatabaseId === db);
      if (!home) continue;
      for (const b of reported) {
        if (b.database_id !== db || branches.has(b.branch_id)) continue;
        const found = this.discovered.get(db) ?? new Map<string, Map<string, Route>>();
        const engines = found.get(b.branch_id) ?? new Map<string, Route>();
        engines.set(endpoint, { database_id: db, branch_id: b.branch_id, upstreamDatabaseId: db, upstreamBranchId: b.branch_id, endpoint });
        found.set(b.branch_id, engines);
        this.discovered.set(db, found);
      }
    }
  }

  /** Every catalog branch, in catalog order, then the discovered ones (a name two engines report, once for each). */
  all(): Route[] {
    const catalog = [...this.routes.values()].flatMap((branches) => [...branches.values()]);
    const discovered = [...this.discovered.values()].flatMap((branches) => [...branches.values()].flatMap((engines) => [...engines.values()]));
    return [...catalog, ...discovered];
  }

  /** Distinct engine endpoints, each with the first catalog route that uses it (for readiness checks). */
  endpoints(): Map<string, Route> {
    const out = new Map<string, Route>();
    for (const r of [...this.routes.values()].flatMap((m) => [...m.values()])) if (!out.has(r.endpoint)) out.set(r.endpoint, r);
    return out;
  }

  get databaseCount(): number {
    return this.routes.size;
  }
}

function toRoute(databaseId: string, b: CatalogBranch): Route {
  return {
    database_id: databaseId,
    branch_id: b.branch_id,
    upstreamDatabaseId: b.upstream_database_id ?? databaseId,
    upstreamBranchId: b.upstream_branch_id ?? b.branch_id,
    endpoint: b.endpoint,
  };
}

/** First value of a header. */
export function headerValue(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return v === undefined || v === '' ? undefined : v;
}

/**
 * The put body (route 11) as the gateway reads it: the branch its wrapper
 * names, if any, and the body to forward to the routed engine. The engine
 * routes by the `x-braid-database` / `x-braid-branch` headers the gateway
 * sets, so the bytes the client sent go on unchanged -- the engine then
 * takes every body the gateway takes (the same limit) and an
 * Idempotency-Key hashes the client's own bytes. Only a wrapper that names
 * its branch by catalog names the engine knows by other names (an alias,
 * `upstream_database_id` / `upstream_branch_id`) is rewritten with the
 * engine's names, else the engine would refuse it as naming another branch
 * than its headers. A body that is not a JSON object, or a wrapper with a
 * malformed routing field, is returned as undefined: its bytes go to the
 * engine, which answers with its own validation error.
 */
export interface ParsedPut {
  /** database_id / branch_id the client put in the wrapper, if any. */
  databaseId: string | undefined;
  branchId: string | undefined;
  /** The body to send to the engine of `route`: the client's bytes, or the wrapper with the engine's names. */
  forRoute(route: Route): Buffer;
}

/**
 * A number literal that may be too large for a double (JSON.parse reads it as
 * Infinity, which JSON.stringify would write as null): an exponent of three
 * digits or more, or 309 digits in a row.
 */
const OVERFLOWING_NUMBER = /[eE][+-]?\d{3}|\d{309}/;

export function parsePutBody(raw: Buffer): ParsedPut | undefined {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const obj = body as Record<string, unknown>;
  const isWrapper = 'record' in obj;
  const asString = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  // A wrapper with a malformed routing field goes to the engine untouched, which rejects it.
  for (const key of ['database_id', 'branch_id']) {
    if (isWrapper && key in obj && asString(obj[key]) === undefined) return undefined;
  }
  const databaseId = isWrapper ? asString(obj.database_id) : undefined;
  const branchId = isWrapper ? asString(obj.branch_id) : undefined;
  return {
    databaseId,
    branchId,
    forRoute(route: Route): Buffer {
      const agrees = (named: string | undefined, upstream: string) => named === undefined || named === upstream;
      if (agrees(databaseId, route.upstreamDatabaseId) && agrees(branchId, route.upstreamBranchId)) return raw;
      // a body JSON.stringify would not write back as it was read goes as it is (the engine refuses it)
      if (OVERFLOWING_NUMBER.test(raw.toString('latin1')) && holdsNonFinite(body)) return raw;
      const wrapper: Record<string, unknown> = { ...obj };
      if (databaseId !== undefined) wrapper.database_id = route.upstreamDatabaseId;
      if (branchId !== undefined) wrapper.branch_id = route.upstreamBranchId;
      return Buffer.from(encodeRequestJson(wrapper), 'utf8');
    },
  };
}
