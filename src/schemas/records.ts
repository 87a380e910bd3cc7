/** Schemas of the record routes: put (11), insert (5), put-batch (9), get (14). */
import { Type, type Static } from 'typebox';
import { RecordGetRequest, RecordInput, RecordOutput } from './common.js';

export const RecordPutRequest = Type.Object(
  {
    record: RecordInput,
    branch_id: Type.Optional(Type.String({ description: 'managed-routing branch identifier' })),
    database_id: Type.Optional(Type.String({ description: 'managed-routing database identifier' })),
  },
  { additionalProperties: false },
);
export type RecordPutRequest = Static<typeof RecordPutRequest>;

/** Route 11 accepts the wrapper or a bare RecordInput. */
export const PutBody = Type.Union([RecordPutRequest, RecordInput]);
export type PutBody = Static<typeof PutBody>;

export const EpochResponse = Type.Object({ epoch: Type.Integer({ description: 'epoch at which the write committed' }) });

export const PutBatchRequest = Type.Object(
  {
    include_write_timing: Type.Optional(Type.Boolean()),
    records: Type.Array(RecordInput),
  },
  { additionalProperties: false },
);
export type PutBatchRequest = Static<typeof PutBatchRequest>;

export const PutBatchResponse = Type.Object({
  epoch: Type.Integer(),
  record_count: Type.Integer(),
  write_timing: Type.Optional(Type.Record(Type.String(), Type.Number(), { description: 'measured durations in ms (docs/api.md)' })),
});

export const GetRequest = RecordGetRequest;
export const GetResponse = Type.Object({ record: Type.Union([RecordOutput, Type.Null()]) });
