/**
 * The one error table: every stable code Braid returns and its HTTP status.
 * Engine codes come from `crates/engine/src/error.rs` (the binding's
 * `errorCodes()` lists them with their statuses; test/binding.test.ts checks
 * this table against it); service codes are added here. Every error the
 * TypeScript side raises is a `BraidError` with a code of this table.
 * Documented in docs/errors.md; a test checks the two agree.
 */
export const ERROR_STATUS = {
  // request shape
  invalid_json: 400,
  invalid_request: 400,
  unknown_field: 400,
  body_too_large: 400,
  unsupported_media_type: 400,
  unsupported_content_encoding: 415,
  request_timeout: 408,
  headers_too_large: 431,
  expectation_failed: 417,
  branch_mismatch: 400,
  // engine validation
  invalid_name: 400,
  invalid_record: 400,
  invalid_query: 400,
  schema_type_mismatch: 400,
  vector_dimension_mismatch: 400,
  vector_dimension_too_large: 400,
  vector_not_finite: 400,
  too_many_terms: 400,
  batch_too_large: 400,
  batch_empty: 400,
  too_many_columns: 400,
  unknown_table: 400,
  unknown_column: 400,
  top_k_out_of_range: 400,
  temporal_before_horizon: 400,
  temporal_in_future: 400,
  invalid_cursor: 400,
  cursor_expired: 400,
  cursor_query_mismatch: 400,
  ql_syntax_error: 400,
  graphql_bad_request: 400,
  graphql_not_allowed: 400,
  graphql_too_deep: 400,
  graphql_too_costly: 400,
  graphql_validation_failed: 400,
  idempotency_key_invalid: 400,
  // auth and routing
  unauthorized: 401,
  forbidden: 403,
  route_not_found: 404,
  method_not_allowed: 405,
  branch_not_found: 404,
  snapshot_not_found: 404,
  // conflicts
  idempotency_key_reused: 409,
  idempotency_response_too_large: 409,
  snapshot_exists: 409,
  branch_exists: 409,
  branch_archived: 409,
  branch_ambiguous: 409,
  // limits
  rate_limited: 429,
  // failures
  internal_error: 500,
  internal_panic: 500,
  upstream_unreachable: 502,
  upstream_error: 502,
  not_ready: 503,
  shutting_down: 503,
  storage_failure: 503,
  indexer_failed: 503,
  wal_corrupt: 503,
  format_unsupported: 503,
  data_dir_locked: 503,
  native_binding_missing: 503,
  invalid_config: 500,
  http_version_not_supported: 505,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export function statusOf(code: string): number {
  return (ERROR_STATUS as Record<string, number>)[code] ?? 500;
}

/** Longest error message an answer carries; a longer one (that quotes a huge input) is cut. */
const MAX_MESSAGE_CHARS = 2048;

/** `message`, cut to MAX_MESSAGE_CHARS with a note of how much was left out. */
export function boundedMessage(message: string): string {
  if (message.length <= MAX_MESSAGE_CHARS) return message;
  return `${message.slice(0, MAX_MESSAGE_CHARS)}... (${message.length - MAX_MESSAGE_CHARS} more characters)`;
}

/**
 * A parser's message as the tail of a sentence: its first letter in lower
 * case ("Unexpected token" -> "unexpected token"), the input it quotes as the
 * client sent it.
 */
export function parserMessage(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.charAt(0).toLowerCase() + message.slice(1);
}

/** An error with a stable code, raised by the engine binding or the service. */
export class BraidError extends Error {
  readonly code: ErrorCode;
  readonly index: number | undefined;

  constructor(code: ErrorCode, message: string, index?: number) {
    super(message);
    this.name = 'BraidError';
    this.code = code;
    this.index = index;
  }

  get status(): number {
    return statusOf(this.code);
  }

  /** The error body: `{code, error}`, and `index` for the offending record of a batch. */
  toBody(): { code: string; error: string; index?: number } {
    const error = boundedMessage(this.message);
    return this.index === undefined ? { code: this.code, error } : { code: this.code, error, index: this.index };
  }
}

export function isErrorCode(code: string): code is ErrorCode {
  return code in ERROR_STATUS;
}
