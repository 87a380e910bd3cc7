/**
 * The error a request answers with when what failed is not Braid's own code:
 * fastify's errors (body limit, content type, JSON parse), plugins' errors
 * that carry a code of the table in src/errors.ts, anything else. Codes and
 * statuses all come from that table, for the engine and the gateway alike.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { BraidError, isErrorCode } from './errors.js';

/** `err` as a BraidError: known fastify errors by their code, other 4xx as invalid_request, the rest internal_error. */
export function toBraidError(err: unknown): BraidError {
  if (err instanceof BraidError) return err;
  const e = (err ?? {}) as Partial<FastifyError>;
  const message = typeof e.message === 'string' ? e.message : '';
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new BraidError('invalid_json', message.toLowerCase());
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BraidError('body_too_large', 'request body is larger than the configured limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BraidError('unsupported_media_type', 'request body must be application/json');
    default:
      break;
  }
  if (typeof e.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, message);
  if (err instanceof SyntaxError) return new BraidError('invalid_json', message);
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new BraidError('invalid_request', message || 'bad request');
  }
  return new BraidError('internal_error', message || 'internal error');
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
  const braidErr = toBraidError(err);
  void reply.status(braidErr.status).send(errorBody(braidErr));
}
