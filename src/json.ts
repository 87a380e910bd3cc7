/**
 * JSON text of a request's values as they are passed on: to the engine
 * (src/engine.ts) and, rewritten, by the gateway to an engine
 * (src/gateway/routing.ts).
 */
import { isUtf8 } from 'node:buffer';
import sjson from 'secure-json-parse';
import { BraidError, parserMessage } from './errors.js';

/** Whether `value` holds a number that is not finite (NaN or an infinity), at any depth (or nests too deeply to tell). */
export function holdsNonFinite(value: unknown): boolean {
  const walk = (v: unknown): boolean => {
    if (typeof v === 'number') return !Number.isFinite(v);
    if (typeof v !== 'object' || v === null) return false;
    return Object.values(v).some(walk);
  };
  try {
    return walk(value);
  } catch {
    return true;
  }
}

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

/** A surrogate escape (`\uD800`-`\uDFFF`) in JSON text, paired or not. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F][0-9a-fA-F]{2}/;
/** A lone surrogate: in a `u` regex a well-formed pair is one code point, which this does not match. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/** A list or object met on the way down, and how it was reached (for the message). */
interface Level {
  value: object;
  parent: Level | undefined;
  /** `body`, `[3]` or `.key`. */
  step: string;
}

function pathOf(level: Level | undefined): string {
  let path = '';
  for (let at = level; at; at = at.parent) path = at.step + path;
  return path;
}

/**
 * Where in `value` a string or key holds a lone surrogate, or undefined.
 * Walked with a stack of its own, not by recursion: a body nested some
 * thousands of levels deep (which JSON.parse reads) overflowed the call
 * stack here, a 500 for what is the request's doing.
 */
function loneSurrogateAt(value: unknown): string | undefined {
  if (typeof value === 'string') return LONE_SURROGATE.test(value) ? 'body' : undefined;
  if (typeof value !== 'object' || value === null) return undefined;
  const stack: Level[] = [{ value, parent: undefined, step: 'body' }];
  for (let level = stack.pop(); level; level = stack.pop()) {
    const container = level.value;
    if (Array.isArray(container)) {
      for (let i = 0; i < container.length; i++) {
        const item: unknown = container[i];
        if (typeof item === 'string') {
          if (LONE_SURROGATE.test(item)) return `${pathOf(level)}[${i}]`;
        } else if (typeof item === 'object' && item !== null) {
          stack.push({ value: item, parent: level, step: `[${i}]` });
        }
      }
      continue;
    }
    for (const [key, item] of Object.entries(container)) {
      if (LONE_SURROGATE.test(key)) return `a key of ${pathOf(level)}`;
      if (typeof item === 'string') {
        if (LONE_SURROGATE.test(item)) return `${pathOf(level)}.${key}`;
      } else if (typeof item === 'object' && item !== null) {
        stack.push({ value: item, parent: level, step: `.${key}` });
      }
    }
  }
  return undefined;
}

/**
 * A request body's value: JSON.parse's, refusing `__proto__` keys and
 * `constructor.prototype` (prototype poisoning), as 400 invalid_json. So is
 * text that is not Unicode, which would otherwise be rewritten to U+FFFD on
 * its way to the engine (two ids or tenants could then become one): bytes
 * that are not UTF-8, and a `\uD800`-`\uDFFF` escape without its pair (RFC
 * 8259 §8.2; PostgreSQL's jsonb refuses both too).
 */
export function parseRequestJson(body: string | Buffer): unknown {
  if (typeof body !== 'string' && !isUtf8(body)) throw new BraidError('invalid_json', 'body is not valid UTF-8 text');
  const raw = typeof body === 'string' ? body : body.toString('utf8');
  if (raw.trim() === '') throw new BraidError('invalid_json', 'request body is empty but content-type is application/json');
  let value: unknown;
  try {
    value = sjson.parse(raw, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    throw new BraidError('invalid_json', `body is not valid json: ${parserMessage(err)}`);
  }
  // only a surrogate escape can make a lone surrogate (decoded UTF-8 has none)
  const lone = SURROGATE_ESCAPE.test(raw) ? loneSurrogateAt(value) : undefined;
  if (lone) throw new BraidError('invalid_json', `${lone} holds an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF), which is not Unicode text`);
  return value;
}
