/** Shared schemas: the error body and the error responses every route has. */
import { Type, type Static } from 'typebox';

export const ErrorBody = Type.Object(
  {
    code: Type.String({ description: 'stable machine-readable code (docs/errors.md)' }),
    error: Type.String({ description: 'human-readable message' }),
  },
  { additionalProperties: true, $id: 'ErrorBody' },
);
export type ErrorBody = Static<typeof ErrorBody>;

const err = (description: string) => Type.Object({ code: Type.String(), error: Type.String() }, { description, additionalProperties: true });

/** Error statuses shared by every route (spec section 7). */
export const errorResponses = {
  400: err('bad request or validation failure'),
  401: err('missing or wrong bearer token'),
  403: err('the bearer token lacks the scope the request needs'),
  404: err('route or resource not found'),
  415: err('a Content-Encoding other than identity'),
  429: err('rate limit exceeded'),
  500: err('engine failure'),
  502: err('gateway upstream failure'),
  503: err('service unavailable'),
} as const;

/** Error statuses of the routes that take Idempotency-Key. */
export const idemErrorResponses = {
  ...errorResponses,
  409: err('idempotency key reused with a different body, or a conflicting resource'),
} as const;

export const Fields = Type.Record(Type.String(), Type.Unknown(), { description: 'record field map' });

export const RecordInput = Type.Object(
  {
    fields: Type.Optional(Fields),
    id: Type.String({ description: 'record id: 1-256 bytes, no control characters' }),
    table: Type.String({ description: 'table name: ^[A-Za-z_][A-Za-z0-9_]{0,63}$' }),
    tenant_id: Type.String({ description: 'tenant scope: 1-256 bytes, no control characters' }),
  },
  { additionalProperties: false },
);
export type RecordInput = Static<typeof RecordInput>;

export const RecordOutput = Type.Object({
  fields: Fields,
  id: Type.String(),
  table: Type.String(),
  tenant_id: Type.String(),
  version_id: Type.Integer(),
});

export const RecordGetRequest = Type.Object(
  { id: Type.String(), table: Type.String(), tenant_id: Type.String() },
  { additionalProperties: false },
);
export type RecordGetRequest = Static<typeof RecordGetRequest>;
