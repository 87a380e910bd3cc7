/**
 * Request validation: one Ajv instance for every route, configured so that
 * nothing is coerced or dropped: an unknown field is an error naming it.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { BraidError } from './errors.js';

export const ajv = new Ajv({
  // all errors, so an unknown field is reported even when a required one is also missing
  allErrors: true,
  coerceTypes: false,
  removeAdditional: false,
  useDefaults: false,
  strict: false,
  // the route schemas are fixed in the code and checked against the
  // meta-schema by test/schemas.test.ts; compiling the meta-schema to check
  // them at every start had taken about 90 ms of it
  validateSchema: false,
});

/** The Ajv error a refusal reports: an unknown member first, else the first. */
function reported(errors: ErrorObject[] | null | undefined): ErrorObject | undefined {
  return errors?.find((e) => e.keyword === 'additionalProperties') ?? errors?.[0];
}

/**
 * validationError for a body holding records, whose refusal of one of them
 * carries its position (`index`), as the engine's refusals of a record's
 * values do: `indexOf` reads it from the failing member's path (put-batch's
 * `/records/<i>`; a put's record is 0). Found by a black-box review: a
 * record out of shape was refused without its index.
 */
export function recordsValidationError(errors: ErrorObject[] | null | undefined, indexOf: (instancePath: string) => number | undefined): BraidError {
  const refused = validationError(errors);
  const first = reported(errors);
  const index = first && indexOf(first.instancePath);
  return index === undefined ? refused : new BraidError(refused.code, refused.message, index);
}

/** Turns the first Ajv error into a BraidError with a stable code. */
export function validationError(errors: ErrorObject[] | null | undefined, dataVar = 'body'): BraidError {
  const first = reported(errors);
  if (!first) return new BraidError('invalid_request', `${dataVar} is invalid`);
  const where = `${dataVar}${first.instancePath.replaceAll('/', '.')}`;
  if (first.keyword === 'additionalProperties') {
    const field = (first.params as { additionalProperty: string }).additionalProperty;
    return new BraidError('unknown_field', `unknown field "${field}" in ${where}`);
  }
  if (first.keyword === 'required') {
    const field = (first.params as { missingProperty: string }).missingProperty;
    return new BraidError('invalid_request', `${where} is missing required field "${field}"`);
  }
  if (first.keyword === 'const') {
    // a union of literals fails each of them: name every value it takes
    const allowed = errors!.filter((e) => e.keyword === 'const' && e.instancePath === first.instancePath).map((e) => JSON.stringify((e.params as { allowedValue: unknown }).allowedValue));
    return new BraidError('invalid_request', `${where} must be ${allowed.length > 1 ? `one of ${allowed.join(', ')}` : allowed[0]}`);
  }
  return new BraidError('invalid_request', `${where} ${first.message ?? 'is invalid'}`);
}

const compiled = new WeakMap<object, ValidateFunction>();

export function compile(schema: object): ValidateFunction {
  let fn = compiled.get(schema);
  if (!fn) {
    fn = ajv.compile(schema);
    compiled.set(schema, fn);
  }
  return fn;
}

/** Validates a value against a schema or throws a 400 BraidError. */
export function check<T>(schema: object, value: unknown, dataVar = 'body'): T {
  const fn = compile(schema);
  if (!fn(value)) throw validationError(fn.errors, dataVar);
  return value as T;
}
