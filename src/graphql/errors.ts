/**
 * GraphQL errors in the 200 body of route 7:
 * {message, locations?, path?, extensions: {code, classification, index?}}.
 */
import { GraphQLError } from 'graphql';
import { BraidError, boundedMessage, statusOf } from '../errors.js';

/**
 * Who an error is on, for tools that know nothing of Braid's codes:
 * BAD_REQUEST when the request cannot be served as sent (the code's REST
 * status is 4xx: a bad name or argument, a missing table or snapshot, a
 * conflict, a limit), INTERNAL_ERROR when the server failed (5xx). The two
 * values are those of graphql-java's and Spring for GraphQL's `ErrorType`.
 */
export type GraphQlErrorClassification = 'BAD_REQUEST' | 'INTERNAL_ERROR';

export function classificationOf(code: string): GraphQlErrorClassification {
  return statusOf(code) < 500 ? 'BAD_REQUEST' : 'INTERNAL_ERROR';
}

export interface GraphQlErrorBody {
  message: string;
  locations?: { line: number; column: number }[];
  path?: (string | number)[];
  extensions: { code: string; classification: GraphQlErrorClassification; index?: number };
}

/** A BraidError as a GraphQL error: its code, and the classification of that code. */
export function braidGraphQLError(err: BraidError): GraphQlErrorBody {
  const extensions: GraphQlErrorBody['extensions'] = { code: err.code, classification: classificationOf(err.code) };
  if (err.index !== undefined) extensions.index = err.index;
  return { message: boundedMessage(err.message), extensions };
}

/**
 * The stable code of a GraphQL error: the engine's code for a BraidError
 * raised in a resolver, graphql_validation_failed for a document or
 * variables that do not validate against the schema, internal_error for
 * anything else thrown during execution, including graphql-js's own errors
 * at a field's path (a value the schema cannot represent, a null for a
 * non-null field): the server's answer was wrong, not the request.
 */
export function formatGraphQLError(err: GraphQLError): GraphQlErrorBody {
  let original: unknown = err.originalError;
  while (original instanceof GraphQLError && original.originalError) original = original.originalError;
  let code = 'graphql_validation_failed';
  let index: number | undefined;
  if (original instanceof BraidError) {
    code = original.code;
    index = original.index;
  } else if (typeof err.extensions?.code === 'string') {
    code = err.extensions.code;
  } else if ((original && !(original instanceof GraphQLError)) || err.path?.length) {
    code = 'internal_error';
  }
  const extensions: GraphQlErrorBody['extensions'] = { code, classification: classificationOf(code) };
  if (index !== undefined) extensions.index = index;
  const body: GraphQlErrorBody = { message: boundedMessage(err.message), extensions };
  if (err.locations?.length) body.locations = err.locations.map((l) => ({ line: l.line, column: l.column }));
  if (err.path?.length) body.path = [...err.path];
  return body;
}
