/**
 * Any failure of an HTTP request as a `BraidError`, so its body is
 * `{code, error}` with a code of the one table (src/errors.ts): fastify's own
 * errors (body parsing, schema validation, limits) are mapped here once, for
 * the engine's app and the gateway alike.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { BraidError, isErrorCode } from './errors.js';
import { validationError } from './validation.js';

export function httpError(err: unknown): BraidError {
  if (err instanceof BraidError) return err;
  const e = err as (FastifyError & { validation?: unknown[]; validationContext?: string }) | undefined;
  if (e?.validation) return validationError(e.validation as never, e.validationContext ?? 'body');
  switch (e?.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new BraidError('invalid_json', e.message.toLowerCase());
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BraidError('body_too_large', 'request body is larger than the configured limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BraidError('unsupported_media_type', 'request body must be application/json');
    default:
      break;
  }
  if (e instanceof SyntaxError) return new BraidError('invalid_json', e.message);
  if (typeof e?.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, e.message);
  if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return new BraidError('invalid_request', e.message || 'bad request');
  return new BraidError('internal_error', (e as Error | undefined)?.message || 'internal error');
}

/** The JSON body of an error answer: `code`, `error`, and the failing item's `index` when there is one. */
export function errorBody(err: BraidError): { code: string; error: string; index?: number } {
  return err.index === undefined ? err.toBody() : { ...err.toBody(), index: err.index };
}

/**
 * fastify's `frameworkErrors` option: what fastify answers itself before any
 * route or hook runs (a path that does not decode, FST_ERR_BAD_URL) gets the
 * error body every other failure has, instead of fastify's own without a code.
 */
export function frameworkErrors(err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const braidErr = httpError(err);
  void reply.status(braidErr.status).send(errorBody(braidErr));
}
