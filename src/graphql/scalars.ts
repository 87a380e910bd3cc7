/** The JSON scalar: any JSON value (record fields, scalar_eq, explain, column declarations). */
import { GraphQLError, GraphQLFloat as SpecFloat, GraphQLScalarType, Kind, valueFromASTUntyped, type ValueNode } from 'graphql';

/**
 * Refuses the keys a JSON body may not hold either (src/json.ts): a
 * `__proto__` key, and a `constructor` object with a `prototype` key. A
 * JavaScript object cannot keep the first as a key, so it would be dropped
 * instead of stored.
 */
function refusePrototypeKeys(ast: ValueNode): void {
  if (ast.kind === Kind.LIST) ast.values.forEach(refusePrototypeKeys);
  if (ast.kind !== Kind.OBJECT) return;
  for (const field of ast.fields) {
    const key = field.name.value;
    const poisons =
      key === '__proto__' ||
      (key === 'constructor' && field.value.kind === Kind.OBJECT && field.value.fields.some((f) => f.name.value === 'prototype'));
    if (poisons) {
      throw new GraphQLError(`a JSON object may not have a ${key === '__proto__' ? '__proto__' : 'constructor.prototype'} key`, {
        nodes: field,
        extensions: { code: 'graphql_validation_failed' },
      });
    }
    refusePrototypeKeys(field.value);
  }
}

function literal(ast: ValueNode, variables?: Record<string, unknown> | null): unknown {
  // valueFromASTUntyped turns IntValue/FloatValue into numbers, objects and lists recursively,
  // and reads $variables inside object and list literals.
  if (ast.kind === Kind.VARIABLE) return variables?.[ast.name.value];
  refusePrototypeKeys(ast);
  return valueFromASTUntyped(ast, variables ?? undefined);
}

export const GraphQLJSON = new GraphQLScalarType({
  name: 'JSON',
  description: 'Any JSON value: object, list, string, number, boolean or null.',
  specifiedByURL: 'https://www.rfc-editor.org/rfc/rfc8259',
  serialize: (value) => value,
  parseValue: (value) => value,
  parseLiteral: (ast, variables) => literal(ast, variables as Record<string, unknown> | null | undefined),
});

/** A whole number a JSON reader holds exactly: -(2^53 - 1) to 2^53 - 1. */
function safeInteger(value: unknown): number {
  if (typeof value === 'number' && Number.isSafeInteger(value)) return value;
  throw new GraphQLError(`SafeInt holds a whole number from -(2^53 - 1) to 2^53 - 1, got ${String(value)}`);
}

/**
 * Epochs, version ids and counts in answers. GraphQL's `Int` is 32 bits, and
 * a branch passes 2^31 - 1 epochs after about 1.5 days of single puts at
 * Braid's measured rate, after which every `epoch` field would fail to
 * serialise; this holds what JSON's numbers hold exactly, as the REST
 * answers do. Arguments stay `Int` (a variable declared `Int` keeps working).
 */
export const GraphQLSafeInt = new GraphQLScalarType({
  name: 'SafeInt',
  description: 'A whole number from -(2^53 - 1) to 2^53 - 1, written as a JSON number.',
  serialize: safeInteger,
  parseValue: safeInteger,
  parseLiteral: (ast) => {
    if (ast.kind !== Kind.INT) throw new GraphQLError('SafeInt takes a whole number literal', { nodes: ast });
    return safeInteger(Number(ast.value));
  },
});

/**
 * GraphQL's `Float`, reading a variable's number as its literal is read: a
 * JSON number past f64's range (`1e400`) is infinity either way, refused by
 * the engine with the code every door gives it (`vector_not_finite` in a
 * vector, `invalid_query` in fusion weights). graphql-js's own `Float`
 * refused only the variable's, as `graphql_validation_failed` (found by a
 * black-box review). The same name and description, and every other value
 * read and written as graphql-js reads and writes it.
 */
export const GraphQLFloat = new GraphQLScalarType({
  ...SpecFloat.toConfig(),
  parseValue: (value) => (typeof value === 'number' ? value : SpecFloat.parseValue(value)),
});
