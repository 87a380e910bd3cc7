/**
 * Which branch a request addresses: the one rule every front door applies.
 * Every route names its branch with the `x-braid-database` and
 * `x-braid-branch` headers (checked as names before any route runs:
 * src/names.ts); a put may also name it in its body (`database_id`,
 * `branch_id`, which SDKs and the gateway inject). Unset parts are the
 * engine's defaults (`default`, `main`).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { BraidError } from '../errors.js';
import { BRANCH_HEADER, DATABASE_HEADER, checkBranchNames } from '../names.js';
import type { BranchRef } from '../native/engine.js';

export type { BranchRef };

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The branch the headers address. */
export function headerBranch(headers: IncomingHttpHeaders): BranchRef {
  return { databaseId: header(headers, DATABASE_HEADER), branchId: header(headers, BRANCH_HEADER) };
}

/** What a body may say about its branch. */
export interface NamedBranch {
  database_id?: string;
  branch_id?: string;
}

/**
 * The branch of a request whose body may name one: the body's names, else
 * the headers'. The two must agree where both are given: the gateway routes
 * by its catalog and sets the headers, so a body that names another branch
 * is refused (400 branch_mismatch) rather than allowed to reach a branch the
 * catalog does not expose.
 */
export function resolveBranch(headers: BranchRef, body: NamedBranch): BranchRef {
  if (body.database_id === undefined && body.branch_id === undefined) return headers;
  // a name that is not one is that, whatever the headers say (through the gateway, which sets
  // them, an empty database_id had been a branch_mismatch naming a header the client never sent)
  checkBranchNames({ database_id: body.database_id, branch_id: body.branch_id });
  return {
    databaseId: pick('database_id', 'x-braid-database', headers.databaseId, body.database_id),
    branchId: pick('branch_id', 'x-braid-branch', headers.branchId, body.branch_id),
  };
}

/** resolveBranch for names the engine read from a body (a BranchRef, null where none). */
export function resolveNamedBranch(headers: BranchRef, named: BranchRef): BranchRef {
  return resolveBranch(headers, { database_id: named.databaseId ?? undefined, branch_id: named.branchId ?? undefined });
}

function pick(what: string, headerName: string, fromHeader: string | undefined, named: string | undefined): string | undefined {
  if (fromHeader !== undefined && named !== undefined && fromHeader !== named) {
    throw new BraidError('branch_mismatch', `body ${what} "${named}" disagrees with the request's ${headerName} header "${fromHeader}"`);
  }
  return named ?? fromHeader;
}
