/**
 * Braid's native query language (route `POST /v1/nativeql`, body `{query}`):
 * a SQL-like text form of `HybridQuery`. Grammar and error format: docs/ql.md.
 */
import type { HybridQuery } from '../native/index.js';
import { QlSyntaxError, formatQlError, type QlDiagnostic, type QlErrorBody } from './diagnostics.js';
import { parse } from './parser.js';

export { QlSyntaxError, formatQlError, type QlDiagnostic, type QlErrorBody };

/** Parses a query; throws `QlSyntaxError` (and nothing else) when it does not parse. */
export function parseNativeQuery(source: string): HybridQuery {
  // The HTTP layer validates the body, but a non-string must still fail as a
  // diagnostic rather than a TypeError from deep inside the lexer.
  if (typeof source !== 'string') throw notAString(source);
  return parse(source);
}

export type QlParseResult = { ok: true; query: HybridQuery } | { ok: false; diagnostic: QlDiagnostic };

/** Like `parseNativeQuery`, but returns the diagnostic as data instead of throwing. */
export function tryParseNativeQuery(source: string): QlParseResult {
  try {
    return { ok: true, query: parseNativeQuery(source) };
  } catch (err) {
    if (err instanceof QlSyntaxError) return { ok: false, diagnostic: err.diagnostic };
    throw err;
  }
}

function notAString(source: unknown): QlSyntaxError {
  const found = source === null ? 'null' : typeof source;
  return new QlSyntaxError({
    line: 1,
    column: 1,
    offset: 0,
    expected: ['a query string'],
    found,
    message: `line 1, column 1: expected a query string, found ${found}`,
  });
}
