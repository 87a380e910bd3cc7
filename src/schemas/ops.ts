/** Schemas of metrics (12), readiness (13) and branches (8). */
import { Type } from 'typebox';

export const MetricsResponse = Type.Object({
  durable_epoch: Type.Integer(),
  gateway: Type.Boolean(),
  index_count: Type.Integer(),
  latest_epoch: Type.Integer(),
  module_count: Type.Integer(),
  rate_limit_enabled: Type.Boolean(),
  rate_limit_requests: Type.Integer(),
  recovery_state: Type.String(),
  requests: Type.Integer(),
  schema_count: Type.Integer(),
  segment_count: Type.Integer(),
  service: Type.String(),
  schema_epoch: Type.Optional(Type.Integer()),
  record_count: Type.Optional(Type.Integer()),
  version_count: Type.Optional(Type.Integer()),
  branch_count: Type.Optional(Type.Integer()),
  indexer_state: Type.Optional(Type.String()),
  failed_feature_count: Type.Optional(Type.Integer()),
  receipt_count: Type.Optional(Type.Integer()),
});

export const ReadyResponse = Type.Object({
  catalog_databases: Type.Integer(),
  durable_epoch: Type.Integer(),
  engine_health_checked: Type.Boolean(),
  engine_status_code: Type.Integer(),
  engine_url: Type.String(),
  error: Type.String(),
  latest_epoch: Type.Integer(),
  metered_requests: Type.Integer(),
  ok: Type.Boolean(),
  ready: Type.Boolean(),
  recovery_state: Type.String(),
  service: Type.String(),
  code: Type.Optional(Type.String()),
  indexer_state: Type.Optional(Type.String()),
});

export const BranchSummary = Type.Object({
  branch_id: Type.String(),
  database_id: Type.String(),
  endpoint: Type.String(),
  latest_epoch: Type.Integer(),
  parent_branch_id: Type.Union([Type.String(), Type.Null()]),
  state: Type.String(),
});

export const BranchesResponse = Type.Object({
  branches: Type.Array(BranchSummary),
  gateway: Type.Boolean(),
});
