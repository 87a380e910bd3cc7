// The route schemas are valid JSON Schema. The server's Ajv skips checking
// each schema against the meta-schema as it compiles it (src/validation.ts:
// compiling the meta-schema took about 90 ms of every start), so it is
// checked here, for every schema the schema modules (and the GraphQL
// routes' module) export.
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import * as graphql from '../src/graphql/http.js';
import * as admin from '../src/schemas/admin.js';
import * as common from '../src/schemas/common.js';
import * as ops from '../src/schemas/ops.js';
import * as query from '../src/schemas/query.js';
import * as records from '../src/schemas/records.js';
import { ajv as serverAjv } from '../src/validation.js';

const MODULES = { 'schemas/admin': admin, 'schemas/common': common, 'schemas/ops': ops, 'schemas/query': query, 'schemas/records': records, 'graphql/http': graphql };

function schemasOf(module: Record<string, unknown>): [string, object][] {
  return Object.entries(module).filter(
    (entry): entry is [string, object] =>
      typeof entry[1] === 'object' && entry[1] !== null && ('type' in entry[1] || 'anyOf' in entry[1] || '$ref' in entry[1]),
  );
}

describe('route schemas', () => {
  const checker = new Ajv({ strict: false, allErrors: true });
  for (const [name, module] of Object.entries(MODULES)) {
    it(`every schema src/${name}.ts exports is valid against the meta-schema`, () => {
      const schemas = schemasOf(module);
      expect(schemas.length).toBeGreaterThan(0);
      for (const [exported, schema] of schemas) {
        const valid = checker.validateSchema(schema);
        expect({ exported, valid, errors: checker.errors ?? null }).toEqual({ exported, valid: true, errors: null });
      }
    });
  }

  it('the meta-schema check catches a malformed schema (what the server no longer checks at compile)', () => {
    const malformed = { type: 'object', properties: { n: { type: 'string', minLength: -1 } } };
    expect(checker.validateSchema(malformed)).toBe(false);
    // and the server's own Ajv compiles it without complaint
    expect(() => serverAjv.compile(malformed)).not.toThrow();
  });
});
