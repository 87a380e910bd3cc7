/** Request and response schemas of the GraphQL routes: 1 (schema export), 6 (bounded), 7 (native). */
import { Type, type Static } from 'typebox';

export const GraphQlQueryRequest = Type.Object(
  {
    query: Type.String({ description: 'GraphQL document' }),
    variables: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], { description: 'values of the $variables' })),
    operationName: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'operation to run when the document has several' })),
    extensions: Type.Optional(
      Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()], {
        description: 'protocol extensions (GraphQL over HTTP); accepted and ignored: Braid implements none, persisted queries included',
      }),
    ),
  },
  { additionalProperties: false },
);
export type GraphQlQueryRequest = Static<typeof GraphQlQueryRequest>;

export const GraphQlError = Type.Object({
  message: Type.String(),
  locations: Type.Optional(Type.Array(Type.Object({ line: Type.Integer(), column: Type.Integer() }))),
  path: Type.Optional(
    Type.Array(Type.Union([Type.String(), Type.Integer()]), { description: 'response path: field names, and list indexes as integers' }),
  ),
  extensions: Type.Object(
    {
      code: Type.String({ description: 'stable code (docs/errors.md, docs/graphql.md)' }),
      classification: Type.Union([Type.Literal('BAD_REQUEST'), Type.Literal('INTERNAL_ERROR')], {
        description: 'BAD_REQUEST when the request cannot be served as sent (the code is a 4xx on REST), INTERNAL_ERROR when the server failed (5xx)',
      }),
      index: Type.Optional(Type.Integer({ description: 'position of the offending record in put_batch' })),
    },
    { additionalProperties: true },
  ),
});

export const GraphQlResponse = Type.Object({
  data: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  errors: Type.Optional(Type.Array(GraphQlError)),
});

export const GraphQlSchemaResponse = Type.Object({
  adapter: Type.String({ description: 'name/version of the bounded adapter' }),
  execution: Type.String({ description: 'how queries are executed' }),
  schema: Type.String({ description: 'SDL of the bounded schema (route 6)' }),
  tables: Type.Array(Type.String(), { description: 'tables of the addressed branch' }),
});
