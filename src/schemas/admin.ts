/** Schemas of snapshot (10), restore (3) and the branch-state extension. */
import { Type, type Static } from 'typebox';
import { RecordGetRequest, RecordOutput } from './common.js';

export const SnapshotRequest = Type.Object(
  { target: Type.String({ description: 'snapshot name: ^[A-Za-z_][A-Za-z0-9_]{0,63}$' }) },
  { additionalProperties: false },
);

export const SnapshotResponse = Type.Object({
  snapshot: Type.Boolean(),
  target: Type.String(),
  database_id: Type.String(),
  branch_id: Type.String({ description: 'branch the snapshot was taken from' }),
  epoch: Type.Integer({ description: 'the branch epoch the snapshot holds' }),
});

export const RestoreRequest = Type.Object(
  {
    source: Type.String({ description: 'snapshot name' }),
    target: Type.String({ description: 'new branch to create from the snapshot' }),
    verify_record: Type.Optional(
      Type.Union([RecordGetRequest, Type.Null()], { description: 'a record to read back from the new branch; null, as omitted, reads none' }),
    ),
  },
  { additionalProperties: false },
);
export type RestoreRequest = Static<typeof RestoreRequest>;

export const RestoreVerification = Type.Object({
  record: Type.Union([RecordOutput, Type.Null()]),
  record_visible: Type.Boolean(),
  request: RecordGetRequest,
  status: Type.Union([Type.Literal('passed'), Type.Literal('failed')]),
});

export const RestoreResponse = Type.Object({
  restored: Type.Boolean(),
  source: Type.String(),
  target: Type.String(),
  verification: Type.Union([RestoreVerification, Type.Null()]),
  epoch: Type.Integer({ description: 'latest epoch of the restored branch' }),
});

export const BranchStateRequest = Type.Object(
  {
    database_id: Type.Optional(Type.String()),
    branch_id: Type.String(),
    state: Type.Union([Type.Literal('active'), Type.Literal('archived')]),
  },
  { additionalProperties: false },
);
