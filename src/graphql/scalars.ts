/** The JSON scalar: any JSON value (record fields, scalar_eq, explain, column declarations). */
import { GraphQLError, GraphQLFloat as SpecFloat, GraphQLScalarType, Kind, type ValidationRule, type ValueNode, getNamedType, valueFromASTUntyped, visit } from 'graphql';

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

/**
 * A JSON literal's value, as graphql-js's `valueFromASTUntyped` reads one,
 * except for two things JSON cannot say, refused rather than guessed (a
 * black-box review): an unquoted word (`{topic: energy}`, an enum value in
 * GraphQL) had been read as the string "energy", where the typed fields
 * refuse it; and a `$variable` the request did not provide, inside an
 * object or list, had been left out, so `scalar_eq: {topic: $t}` without
 * `$t` searched unfiltered and `fields: {title: $t}` wrote no title.
 */
function jsonValue(ast: ValueNode, variables: Record<string, unknown> | null | undefined): unknown {
  switch (ast.kind) {
    case Kind.VARIABLE: {
      const name = ast.name.value;
      // validation reads literals before any variable has a value: only execution can tell
      if (variables == null) return undefined;
      if (!Object.hasOwn(variables, name)) {
        throw new GraphQLError(`variable $${name} is used inside a JSON value but was not provided: give it a value (null included), or leave it out of the literal`, {
          nodes: ast,
          extensions: { code: 'graphql_validation_failed' },
        });
      }
      return variables[name];
    }
    case Kind.ENUM:
      throw new GraphQLError(`${ast.value} is not a JSON value: quote it as a string ("${ast.value}")`, {
        nodes: ast,
        extensions: { code: 'graphql_validation_failed' },
      });
    case Kind.LIST:
      return ast.values.map((v) => jsonValue(v, variables));
    case Kind.OBJECT:
      return Object.fromEntries(ast.fields.map((f) => [f.name.value, jsonValue(f.value, variables)]));
    default:
      return valueFromASTUntyped(ast);
  }
}

/**
 * A validation rule for one request: every `$variable` inside a JSON literal
 * (an object or list given where the schema takes `JSON`) is one the request
 * provides, or one its operation gives a default. graphql-js validates
 * literals before variables have values, and at execution turns a refusal
 * from the scalar into "Argument has invalid value" without its reason, so
 * the check runs here, with the request's variables, and names the variable.
 */
export function jsonVariablesProvided(variables: Record<string, unknown> | null | undefined): ValidationRule {
  return (context) => {
    const defaults = new Set<string>();
    for (const definition of context.getDocument().definitions) {
      if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
      for (const v of definition.variableDefinitions ?? []) if (v.defaultValue) defaults.add(v.variable.name.value);
    }
    const provided = (name: string) => (variables != null && Object.hasOwn(variables, name)) || defaults.has(name);
    const jsonLiteral = (node: ValueNode) => {
      if (getNamedType(context.getInputType())?.name !== GraphQLJSON.name) return undefined;
      visit(node, {
        Variable(variable) {
          const name = variable.name.value;
          if (!provided(name)) {
            context.reportError(
              new GraphQLError(`variable $${name} is used inside a JSON value but was not provided: give it a value (null included), or leave it out of the literal`, {
                nodes: variable,
              }),
            );
          }
        },
      });
      // its inside is JSON, not the schema's types: nothing more to visit
      return false;
    };
    return { ObjectValue: jsonLiteral, ListValue: jsonLiteral };
  };
}

function literal(ast: ValueNode, variables?: Record<string, unknown> | null): unknown {
  if (ast.kind === Kind.VARIABLE) return variables?.[ast.name.value];
  refusePrototypeKeys(ast);
  return jsonValue(ast, variables);
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
