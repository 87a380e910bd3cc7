/** GraphQL errors in the 200 body of route 7: {message, locations?, path?, extensions: {code, index?}}. */
import { GraphQLError } from 'graphql';
import { BraidError } from '../errors.js';

export interface GraphQlErrorBody {
  message: string;
  locations?: { line: number; column: number }[];
  path?: (string | number)[];
  extensions: { code: string; index?: number };
}

/**
 * The stable code of a GraphQL error: the engine's code for a BraidError
 * raised in a resolver, graphql_validation_failed for a document or
 * variables that do not validate against the schema, internal_error for
 * anything else thrown during execution.
 */
export function formatGraphQLError(err: GraphQLError): GraphQlErrorBody {
  let original: unknown = err.originalError;
  while (original instanceof GraphQLError && original.originalError) original = original.originalError;
  const extensions: GraphQlErrorBody['extensions'] = { code: 'graphql_validation_failed' };
  if (original instanceof BraidError) {
    extensions.code = original.code;
    if (original.index !== undefined) extensions.index = original.index;
  } else if (typeof err.extensions?.code === 'string') {
    extensions.code = err.extensions.code;
  } else if (original && !(original instanceof GraphQLError)) {
    extensions.code = 'internal_error';
  }
  const body: GraphQlErrorBody = { message: err.message, extensions };
  if (err.locations?.length) body.locations = err.locations.map((l) => ({ line: l.line, column: l.column }));
  if (err.path?.length) body.path = [...err.path];
  return body;
}
