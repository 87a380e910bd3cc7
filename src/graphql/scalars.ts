/** The JSON scalar: any JSON value (record fields, scalar_eq, explain, column declarations). */
import { GraphQLScalarType, Kind, valueFromASTUntyped, type ValueNode } from 'graphql';

function literal(ast: ValueNode, variables?: Record<string, unknown> | null): unknown {
  // valueFromASTUntyped turns IntValue/FloatValue into numbers, objects and lists recursively,
  // and reads $variables inside object and list literals.
  if (ast.kind === Kind.VARIABLE) return variables?.[ast.name.value];
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
