/**
 * Bearer tokens with scopes, shared by the engine (`--auth-token`) and the
 * gateway (`--token`, `tokens` in its config). docs/gateway.md, "Tokens".
 *
 * - A token is configured as `secret` or `secret:scope`, or in a config file
 *   as `{token, scope}`. Scopes nest: `admin` > `write` > `read`. A colon
 *   suffix that is not a scope is refused (`invalid_config`).
 * - A token without a scope has every scope (`admin`), as before scopes
 *   existed and as Qdrant's main `api-key` does; give clients scoped tokens.
 * - Reads (gets, queries, explain, metrics, branches, readiness, schema
 *   exports, GraphQL queries) need `read`; record writes (put, put-batch,
 *   insert, GraphQL put / put_batch / delete) need `write`; snapshots,
 *   restores, branch state and GraphQL snapshot / restore / declare_table
 *   need `admin`. A token without the scope gets 403 `forbidden`.
 * - Tokens are compared in constant time (SHA-256 digests with
 *   `timingSafeEqual`, against every configured token).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { Kind, type DocumentNode, type FragmentDefinitionNode, type OperationDefinitionNode, type SelectionSetNode } from 'graphql';
import { BraidError } from './errors.js';
import { headerLines } from './request-target.js';

export const SCOPES = ['read', 'write', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];

const RANK: Record<Scope, number> = { read: 0, write: 1, admin: 2 };

export interface TokenSpec {
  token: string;
  scope: Scope;
}

/**
 * What an `Authorization: Bearer` header can carry: visible ASCII, no
 * spaces. A configured token outside it could never be presented (a space
 * ends it; a client sends UTF-8 where Node reads Latin-1), so it is refused
 * at start-up instead of locking its holder out.
 */
const SENDABLE_TOKEN = /^[\x21-\x7e]+$/;

/** `token` when a bearer header can carry it, else invalid_config naming `where` (never the token). */
export function sendableToken(token: string, where: string, code: 'invalid_config' | 'invalid_request' = 'invalid_config'): string {
  if (!SENDABLE_TOKEN.test(token)) {
    throw new BraidError(code, `${where} must be visible ASCII characters without spaces, which is all a bearer header can carry`);
  }
  return token;
}

function checked(token: string, scope: Scope, where: string): TokenSpec {
  return { token: sendableToken(token, where), scope };
}

/**
 * Parses `secret` or `secret:scope`. What follows the last colon must be a
 * scope: a misspelt one (`app:wirte`) had been kept as part of an admin
 * token. A secret that holds a colon takes its scope after it (`a:b:admin`).
 */
export function parseTokenSpec(spec: string | { token?: unknown; scope?: unknown }, where = 'token'): TokenSpec {
  if (typeof spec === 'string') {
    const at = spec.lastIndexOf(':');
    if (at < 0) return checked(spec, 'admin', where);
    const suffix = spec.slice(at + 1);
    if (!(SCOPES as readonly string[]).includes(suffix)) {
      // not even the part after the colon is printed: in a secret that
      // holds a colon (and no scope after it) it is part of the secret
      throw new BraidError(
        'invalid_config',
        `${where} ends in ":" and a scope that is not one of ${SCOPES.join(', ')} (a secret with a colon in it takes a scope after it: secret:admin; the value is not printed, since it may be part of a secret)`,
      );
    }
    if (at === 0) throw new BraidError('invalid_config', `${where} ${JSON.stringify(spec)} names a scope but no secret before it`);
    return checked(spec.slice(0, at), suffix as Scope, where);
  }
  if (typeof spec !== 'object' || spec === null || typeof spec.token !== 'string' || spec.token === '') {
    throw new BraidError('invalid_config', `${where} must be a string or {token, scope}`);
  }
  // a misspelt "scope" would otherwise leave the default: an admin token
  const unknown = Object.keys(spec).filter((k) => k !== 'token' && k !== 'scope');
  if (unknown.length) throw new BraidError('invalid_config', `${where} has an unknown key ${JSON.stringify(unknown[0])}; a token is {token, scope}`);
  const scope = spec.scope ?? 'admin';
  if (typeof scope !== 'string' || !(SCOPES as readonly string[]).includes(scope)) {
    throw new BraidError('invalid_config', `${where}.scope must be one of ${SCOPES.join(', ')}`);
  }
  return checked(spec.token, scope as Scope, where);
}

export function allows(have: Scope, need: Scope): boolean {
  return RANK[have] >= RANK[need];
}

export function requireScope(have: Scope, need: Scope, what: string): void {
  if (!allows(have, need)) {
    throw new BraidError('forbidden', `${what} needs a token with the ${need} scope; this token has ${have}`);
  }
}

/** The challenge a 401 carries (RFC 9110 11.6.1: a 401 must say how to authenticate), at the engine and the gateway. */
export const WWW_AUTHENTICATE = 'Bearer realm="braid"';

const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

/** A short, stable, non-reversible name of a token (idempotency scoping, logs). */
export function tokenId(token: string): string {
  return digest(token).subarray(0, 12).toString('hex');
}

/** The configured tokens; checks bearer headers in constant time. */
/**
 * Where one secret is listed with two scopes, a description of it (by the
 * places of its specs, never the secret), else undefined. Found by a
 * black-box test: the wider scope had won, so an operator who added
 * `secret:read` to narrow an admin token still had an admin token.
 */
export function conflictingScopes(specs: Array<{ spec: TokenSpec; where: string }>): string | undefined {
  const first = new Map<string, { spec: TokenSpec; where: string }>();
  for (const entry of specs) {
    const seen = first.get(entry.spec.token);
    if (!seen) {
      first.set(entry.spec.token, entry);
    } else if (seen.spec.scope !== entry.spec.scope) {
      return `one token is given two scopes (${seen.where} ${seen.spec.scope}, ${entry.where} ${entry.spec.scope}); list each token once, with the scope it should have`;
    }
  }
  return undefined;
}

export class TokenSet {
  private readonly entries: { digest: Buffer; scope: Scope }[];

  constructor(specs: Array<string | TokenSpec>) {
    const parsed = specs.map((s, i) => ({ spec: typeof s === 'string' ? parseTokenSpec(s) : s, where: `tokens[${i}]` }));
    const conflict = conflictingScopes(parsed);
    if (conflict) throw new BraidError('invalid_config', `tokens are invalid: ${conflict}`);
    this.entries = parsed.map(({ spec }) => ({ digest: digest(spec.token), scope: spec.scope }));
  }

  get size(): number {
    return this.entries.length;
  }

  /** The scope of `token`, or undefined; compares against every token so the time taken does not say which matched. */
  scopeOf(token: string): Scope | undefined {
    const d = digest(token);
    let found: Scope | undefined;
    for (const e of this.entries) {
      if (timingSafeEqual(e.digest, d) && (found === undefined || RANK[e.scope] > RANK[found])) found = e.scope;
    }
    return found;
  }

  has(token: string): boolean {
    return this.scopeOf(token) !== undefined;
  }

  /**
   * The token and scope of an `Authorization: Bearer <token>` header, or a
   * 401 `unauthorized` error.
   */
  check(header: string | undefined): { token: string; scope: Scope } {
    const token = bearerToken(header);
    if (token === undefined) {
      // found by a black-box test: `Bearer tok extra` was answered as if no header had been sent
      throw new BraidError(
        'unauthorized',
        header === undefined
          ? 'missing Authorization: Bearer <token> header'
          : 'the Authorization header is not "Bearer <token>" (the Bearer scheme and one token without spaces)',
      );
    }
    const scope = this.scopeOf(token);
    if (scope === undefined) throw new BraidError('unauthorized', 'bearer token is not valid');
    return { token, scope };
  }
}

/**
 * The request's `Authorization` header. Node keeps the first of several and
 * drops the rest; a proxy in front may read another, so a request that
 * sends more than one (RFC 9110 allows one) is refused instead of judged
 * by the first (found by a black-box review).
 */
export function authorizationOf(raw: IncomingMessage): string | undefined {
  const header = raw.headers.authorization;
  if (header === undefined) return undefined;
  const count = headerLines(raw.rawHeaders, 'authorization');
  if (count > 1) throw new BraidError('unauthorized', `the request has ${count} Authorization headers; send one`);
  return header;
}

/** The token of an `Authorization: Bearer <token>` header. */
export function bearerToken(header: string | undefined): string | undefined {
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header ?? '');
  return match?.[1];
}

const ADMIN_ROUTES = new Set(['/v1/admin/snapshot', '/v1/admin/restore', '/v1/admin/branch-state']);
const WRITE_ROUTES = new Set(['/v1/records/put', '/v1/records/put-batch', '/v1/insert']);

/**
 * The scope a REST request needs. `POST /v1/graphql` needs what its
 * document does ({@link graphqlScope}); here it needs `read` to get that far.
 */
export function routeScope(method: string, path: string): Scope {
  if (method !== 'POST') return 'read';
  if (ADMIN_ROUTES.has(path)) return 'admin';
  if (WRITE_ROUTES.has(path)) return 'write';
  return 'read';
}

const ADMIN_MUTATIONS = new Set(['snapshot', 'restore', 'declare_table']);

/**
 * The scope a GraphQL document needs: the operation it runs (by name, or
 * every operation when the name does not pick one): `admin` for snapshot,
 * restore or declare_table, `write` for any other mutation, else `read`.
 * A mutation's root fields are found through its fragments, inline
 * (`... on Mutation { put }`) and named (`...F`), nested: a write token's
 * put inside a fragment had been refused as if it could be anything. A
 * spread of a fragment the document does not define, or one that spreads
 * itself, cannot be resolved and needs `admin`, the strictest.
 */
export function graphqlScope(document: DocumentNode, operationName?: string | null): Scope {
  const ops = document.definitions.filter((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION);
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const d of document.definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
  const picked = operationName ? ops.filter((o) => o.name?.value === operationName) : ops;
  const resolved = new Map<string, ReadonlySet<string | undefined>>();
  let need: Scope = 'read';
  for (const op of picked.length ? picked : ops) {
    if (op.operation !== 'mutation') continue;
    if (RANK.write > RANK[need]) need = 'write';
    for (const name of rootFields(op.selectionSet, fragments, resolved)) {
      if (name === undefined || ADMIN_MUTATIONS.has(name)) return 'admin';
    }
  }
  return need;
}

/**
 * The fields each operation of a GraphQL document selects at its root,
 * through its fragments (undefined for a spread that cannot be resolved):
 * every operation, whichever `operationName` picks, since the document is
 * validated whole.
 */
export function graphqlRootFields(document: DocumentNode): Array<Set<string | undefined>> {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const d of document.definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
  const resolved = new Map<string, ReadonlySet<string | undefined>>();
  return document.definitions
    .filter((d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION)
    .map((op) => rootFields(op.selectionSet, fragments, resolved));
}

/**
 * The names of the fields a selection set selects at its own level, through
 * its fragments; undefined stands for a spread that cannot be resolved. Each
 * named fragment is resolved once, so fragments that spread each other many
 * times over cost no more than their count.
 */
function rootFields(
  set: SelectionSetNode,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  resolved: Map<string, ReadonlySet<string | undefined>>,
  spreading: ReadonlySet<string> = new Set(),
): Set<string | undefined> {
  const out = new Set<string | undefined>();
  for (const sel of set.selections) {
    if (sel.kind === Kind.FIELD) {
      out.add(sel.name.value);
      continue;
    }
    if (sel.kind === Kind.INLINE_FRAGMENT) {
      for (const name of rootFields(sel.selectionSet, fragments, resolved, spreading)) out.add(name);
      continue;
    }
    const name = sel.name.value;
    const fragment = fragments.get(name);
    if (!fragment || spreading.has(name)) {
      out.add(undefined);
      continue;
    }
    let names = resolved.get(name);
    if (!names) {
      names = rootFields(fragment.selectionSet, fragments, resolved, new Set([...spreading, name]));
      resolved.set(name, names);
    }
    for (const n of names) out.add(n);
  }
  return out;
}
