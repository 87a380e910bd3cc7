/**
 * JSON text of a request's values as they are passed on: to the engine
 * (src/engine.ts) and, rewritten, by the gateway to an engine
 * (src/gateway/routing.ts).
 */
import sjson from 'secure-json-parse';
import { BraidError } from './errors.js';

/**
 * JSON.stringify recurses into nested lists and objects, so a value nested
 * some thousands of levels deep (a record field, scalar_eq, a GraphQL JSON
 * variable; JSON.parse reads it without recursion) overflows the stack with
 * a RangeError, as a string past V8's length limit does. Either is the
 * request's doing: invalid_record, as the engine answers a value nested past
 * its own limit of 128 levels, not an internal error. Checking the depth
 * first would walk every value of every call, a good part of the cost of
 * encoding a large batch, for what only such a request does.
 */
export function encodeRequestJson(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    throw new BraidError('invalid_record', `the request cannot be encoded for the engine, its values nest too deeply or are too large: ${err.message}`);
  }
}

/**
 * A request body's value: JSON.parse's, refusing `__proto__` keys and
 * `constructor.prototype` (prototype poisoning), as 400 invalid_json.
 */
export function parseRequestJson(raw: string): unknown {
  if (raw.trim() === '') throw new BraidError('invalid_json', 'request body is empty but content-type is application/json');
  try {
    return sjson.parse(raw, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    throw new BraidError('invalid_json', `body is not valid json: ${(err as Error).message.toLowerCase()}`);
  }
}
