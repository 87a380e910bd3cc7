/**
 * The engine's identifier rule (crates/engine/src/names.rs), for the few
 * places the service applies it itself: branch headers (the engine and the
 * gateway check them on every route, those that address no branch included)
 * and record field keys, which the engine checks only when a value types a
 * column (a key holding null or [] passed unchecked). The OpenAPI document
 * states the same pattern (src/openapi-constraints.ts).
 */
import { isUtf8 } from 'node:buffer';
import type { IncomingHttpHeaders } from 'node:http';
import { BraidError } from './errors.js';

/** Tables, columns, databases, branches, snapshots. */
export const NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,63}$';
const NAME_RE = new RegExp(NAME_PATTERN);

export function isName(value: string): boolean {
  return NAME_RE.test(value);
}

export const DATABASE_HEADER = 'x-braid-database';
export const BRANCH_HEADER = 'x-braid-branch';

/**
 * Refuses a branch header that is not a name (400 invalid_name), empty or
 * repeated ones included, before anything reads it: a route that addresses
 * no branch (branches, branch-state) would otherwise accept a header the
 * OpenAPI document calls invalid, and the gateway would route an empty one
 * to the default branch.
 */
export function checkBranchHeaders(headers: IncomingHttpHeaders): void {
  for (const name of [DATABASE_HEADER, BRANCH_HEADER]) {
    const value = headers[name];
    if (value !== undefined && (typeof value !== 'string' || !isName(value))) {
      throw new BraidError('invalid_name', `${name} header ${JSON.stringify(typeof value === 'string' ? headerText(value) : value)} must match ${NAME_PATTERN}`);
    }
  }
}

/**
 * A header value as the text the client sent: Node reads header bytes as
 * Latin-1, so UTF-8 `mäin` arrives as `mÃ¤in` (found by a black-box test,
 * which saw it echoed so). Bytes that are not UTF-8 stay as Node read them.
 */
export function headerText(value: string): string {
  let high = false;
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    // a character past Latin-1 cannot come from the wire
    if (code > 0xff) return value;
    if (code >= 0x80) high = true;
  }
  if (!high) return value;
  const bytes = Buffer.from(value, 'latin1');
  return isUtf8(bytes) ? bytes.toString('utf8') : value;
}

/**
 * Refuses a put wrapper's `database_id` / `branch_id` that is not a name,
 * as the engine does (400 invalid_name), before a router looks it up.
 */
export function checkBranchNames(names: { database_id?: string; branch_id?: string }): void {
  for (const [field, value] of Object.entries(names)) {
    if (value !== undefined && !isName(value)) throw new BraidError('invalid_name', `${field} ${JSON.stringify(value)} must match ${NAME_PATTERN}`);
  }
}

/**
 * Every field key of every record is a column name, or 400 invalid_name
 * naming the record (`index`), as the engine reports its own name errors.
 */
export function checkFieldNames(records: ReadonlyArray<{ fields?: Record<string, unknown> }>): void {
  for (const [index, record] of records.entries()) {
    if (record === null || typeof record !== 'object') {
      throw new BraidError('invalid_record', `records[${index}] is not a record object`, index);
    }
    const fields = record.fields;
    if (fields === null || typeof fields !== 'object') continue;
    for (const key of Object.keys(fields)) {
      if (!isName(key)) {
        throw new BraidError('invalid_name', `records[${index}]: column ${JSON.stringify(key)} must match ${NAME_PATTERN}`, index);
      }
    }
  }
}
