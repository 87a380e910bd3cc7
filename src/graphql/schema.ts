/**
 * The native GraphQL schema (route 7), generated from a branch's catalog:
 * generic queries (record, search, tables, branches), per-table typed access
 * (`<table>_search`, `<table>_record`), mutations (put, put_batch, delete)
 * and admin mutations (snapshot, restore, declare_table). Cached per branch
 * and regenerated when the branch's schema_epoch changes.
 */
import {
  GraphQLBoolean,
  GraphQLEnumType,
  GraphQLInputObjectType,
  GraphQLInt,
  GraphQLList,
  GraphQLNonNull,
  GraphQLObjectType,
  GraphQLSchema,
  GraphQLString,
  type GraphQLFieldConfig,
  type GraphQLFieldConfigMap,
  type GraphQLInputFieldConfigMap,
  type GraphQLOutputType,
  type GraphQLInputType,
  type GraphQLResolveInfo,
} from 'graphql';
import type { BranchRef, ColumnDeclaration, Committed, Engine, RecordKey, RequestKey, TableSchema, WriteResult } from '../native/engine.js';
import { declareTable, restoreSnapshot, takeSnapshot } from '../services/admin.js';
import { listBranches } from '../services/ops.js';
import { runQuery, schemaEpoch, tables } from '../services/queries.js';
import { deleteRecord, getRecord, putRecords, type WriteOptions } from '../services/records.js';
import { BraidError } from '../errors.js';
import { GraphQLFloat, GraphQLJSON, GraphQLSafeInt } from './scalars.js';
import { HybridRow, ScoreComponents, SearchResult, searchArgs, toHybridQuery, type GraphQLContext } from './types.js';

type Args = Record<string, unknown>;
type Field = GraphQLFieldConfig<unknown, GraphQLContext>;

const nn = <T extends GraphQLOutputType | GraphQLInputType>(t: T) => new GraphQLNonNull(t);
const list = <T extends GraphQLOutputType | GraphQLInputType>(t: T) => new GraphQLList(new GraphQLNonNull(t));

// ---------------------------------------------------------------- shared types

const RecordType = new GraphQLObjectType({
  name: 'Record',
  description: 'The visible version of a record (RecordOutput).',
  fields: {
    id: { type: nn(GraphQLString) },
    table: { type: nn(GraphQLString) },
    tenant_id: { type: nn(GraphQLString) },
    version_id: { type: nn(GraphQLSafeInt) },
    fields: { type: nn(GraphQLJSON) },
  },
});

const RecordKeyType = new GraphQLObjectType({
  name: 'RecordKey',
  fields: { table: { type: nn(GraphQLString) }, tenant_id: { type: nn(GraphQLString) }, id: { type: nn(GraphQLString) } },
});

const RecordInputType = new GraphQLInputObjectType({
  name: 'RecordInput',
  description: 'A record to write: a full replacement of the record with this (table, tenant_id, id).',
  fields: {
    table: { type: nn(GraphQLString) },
    tenant_id: { type: nn(GraphQLString) },
    id: { type: nn(GraphQLString) },
    fields: { type: GraphQLJSON, description: 'the field map; columns are inferred on first write' },
  },
});

const RecordKeyInput = new GraphQLInputObjectType({
  name: 'RecordKeyInput',
  fields: { table: { type: nn(GraphQLString) }, tenant_id: { type: nn(GraphQLString) }, id: { type: nn(GraphQLString) } },
});

const WriteResultType = new GraphQLObjectType({
  name: 'WriteResult',
  description: 'A durable write: the epoch it committed at and how many records it wrote.',
  fields: {
    epoch: { type: nn(GraphQLSafeInt) },
    record_count: { type: nn(GraphQLSafeInt) },
    changed: { type: nn(GraphQLBoolean), description: 'false when the write was identical to the visible state' },
  },
});

const ColumnType = new GraphQLObjectType({
  name: 'Column',
  fields: {
    name: { type: nn(GraphQLString) },
    type: { type: nn(GraphQLString), description: 'string, number, bool, vector, edges or json' },
    dim: { type: GraphQLInt, description: 'vector dimension' },
    metric: { type: GraphQLString, description: 'vector metric: cosine, dot or l2' },
    text: { type: nn(GraphQLBoolean), description: 'BM25 text-indexed' },
    scalar: { type: nn(GraphQLBoolean), description: 'usable in scalar_eq' },
  },
});

const TableType = new GraphQLObjectType({
  name: 'Table',
  fields: { name: { type: nn(GraphQLString) }, columns: { type: nn(list(ColumnType)) } },
});

export const BranchType = new GraphQLObjectType({
  name: 'Branch',
  description: 'BranchSummary, as GET /v1/branches returns it.',
  fields: {
    branch_id: { type: nn(GraphQLString) },
    database_id: { type: nn(GraphQLString) },
    endpoint: { type: nn(GraphQLString) },
    latest_epoch: { type: nn(GraphQLSafeInt) },
    parent_branch_id: { type: GraphQLString },
    state: { type: nn(GraphQLString) },
  },
});

const SnapshotResultType = new GraphQLObjectType({
  name: 'SnapshotResult',
  description: 'As POST /v1/admin/snapshot returns it.',
  fields: {
    snapshot: { type: nn(GraphQLBoolean) },
    target: { type: nn(GraphQLString) },
    database_id: { type: nn(GraphQLString) },
    branch_id: { type: nn(GraphQLString), description: 'branch the snapshot was taken from' },
    epoch: { type: nn(GraphQLSafeInt), description: 'the branch epoch the snapshot holds' },
  },
});

const RestoreStatus = new GraphQLEnumType({ name: 'RestoreStatus', values: { passed: {}, failed: {} } });

const RestoreVerificationType = new GraphQLObjectType({
  name: 'RestoreVerification',
  fields: {
    status: { type: nn(RestoreStatus), description: 'passed when the record is visible in the restored target' },
    record: { type: RecordType },
    record_visible: { type: nn(GraphQLBoolean) },
    request: { type: nn(RecordKeyType) },
    error: {
      type: GraphQLString,
      description: 'always null',
      deprecationReason: 'never set: the verification read cannot fail once the branch exists; a bad verify_record fails the whole restore before it (docs/graphql.md)',
    },
  },
});

const RestoreResultType = new GraphQLObjectType({
  name: 'RestoreResult',
  description: 'As POST /v1/admin/restore returns it, plus the epoch of the restored branch.',
  fields: {
    restored: { type: nn(GraphQLBoolean) },
    source: { type: nn(GraphQLString) },
    target: { type: nn(GraphQLString) },
    epoch: { type: nn(GraphQLSafeInt) },
    verification: { type: RestoreVerificationType, description: 'present when verify_record was given' },
  },
});

const DeclareTableResultType = new GraphQLObjectType({
  name: 'DeclareTableResult',
  fields: { epoch: { type: nn(GraphQLSafeInt) }, table: { type: nn(TableType) } },
});

// ---------------------------------------------------------------- helpers

function committed(result: WriteResult): { epoch: number; record_count: number; changed: boolean } {
  if (result.committed) {
    const c: Committed = result.committed;
    return { epoch: c.epoch, record_count: c.record_count, changed: c.changed };
  }
  // the receipt holds what the commit filled in, `changed` included: a retry
  // answers the first result (receipts written before it was kept say false)
  const body = result.replayed.body as { epoch?: number; record_count?: number; changed?: boolean };
  return { epoch: body.epoch ?? 0, record_count: body.record_count ?? 0, changed: body.changed ?? false };
}

/**
 * The request key of one mutation field of a keyed request: the request's
 * key plus the field's response name (unique among the top-level fields).
 */
function fieldKey(ctx: GraphQLContext, info: GraphQLResolveInfo): RequestKey | undefined {
  if (!ctx.requestKey) return undefined;
  return { key: `${ctx.requestKey.key}\n#${info.path.key}`, body_hash: ctx.requestKey.body_hash };
}

/**
 * How a mutation field writes: on the request's branch, and for a keyed
 * request with its own key, so its receipt commits with its write and a
 * retry answers the WriteResult it committed (src/services/records.ts).
 */
function writeOptions(ctx: GraphQLContext, info: GraphQLResolveInfo): WriteOptions {
  return { branch: ctx.branch, requestKey: fieldKey(ctx, info) };
}

/** Notes that a mutation committed (under its key, for a keyed request), then passes its result on. */
function wrote<T>(ctx: GraphQLContext, result: T): T {
  ctx.committed = true;
  return result;
}

function tableOut(t: TableSchema) {
  return { name: t.name, columns: Object.entries(t.columns).map(([name, c]) => ({ name, ...c })) };
}

/**
 * A record's `fields` argument: absent is none, as over REST, and anything
 * but an object (`null` included, which REST refuses too; it had been
 * stored as no fields) is refused naming the record by its index in the
 * batch (a single put's is 0), as the engine's refusals of its values are.
 */
function asFields(value: unknown, what: string, index: number): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new BraidError('invalid_record', `${what} must be an object`, index);
  return value as Record<string, unknown>;
}

function recordInput(value: Args, what: string, index: number) {
  const fields = asFields(value.fields, `${what}.fields`, index);
  return { table: value.table as string, tenant_id: value.tenant_id as string, id: value.id as string, ...(fields ? { fields } : {}) };
}

// ---------------------------------------------------------------- per-table types

/** GraphQL names must not start with "__"; identifiers are otherwise valid names. */
const usable = (name: string) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !name.startsWith('__');

/**
 * Whether a table gets typed access: every name generated for it starts with
 * `<table>_`, which for the table `_` is `__`, as reserved as a table name
 * starting with `__`.
 */
const usableTable = (name: string) => usable(`${name}_`);

function columnType(c: TableSchema['columns'][string]): GraphQLOutputType {
  switch (c.type) {
    case 'string':
    case 'text':
      return GraphQLString;
    case 'number':
      return GraphQLFloat;
    case 'bool':
      return GraphQLBoolean;
    case 'vector':
      return new GraphQLList(nn(GraphQLFloat));
    case 'edges':
      return new GraphQLList(nn(GraphQLString));
    default:
      return GraphQLJSON;
  }
}

/**
 * A typed column's value in a record. `[]`, like `null`, types nothing: a
 * record written before its column had a type may hold it in what is now a
 * string, number or bool column, which reads it as no value (null), as the
 * column's description says of one a record does not carry (found by a
 * black-box review: GraphQL could not represent it, and the read failed with
 * internal_error). REST and the untyped fields answer it as written.
 */
function columnValue(name: string, c: TableSchema['columns'][string]): (fields: Record<string, unknown>) => unknown {
  const single = c.type === 'string' || c.type === 'text' || c.type === 'number' || c.type === 'bool';
  return (fields) => {
    const value = fields[name] ?? null;
    return single && Array.isArray(value) && value.length === 0 ? null : value;
  };
}

function scalarInputType(c: TableSchema['columns'][string]): GraphQLInputType | undefined {
  if (!c.scalar) return undefined;
  if (c.type === 'string' || c.type === 'text') return GraphQLString;
  if (c.type === 'number') return GraphQLFloat;
  if (c.type === 'bool') return GraphQLBoolean;
  return undefined;
}

/** `<t>_search`, `<t>_record` for one table, or nothing when it has no usable column. */
function tableFields(t: TableSchema): GraphQLFieldConfigMap<unknown, GraphQLContext> {
  if (!usableTable(t.name)) return {};
  const columns = Object.entries(t.columns).filter(([name]) => usable(name));
  if (columns.length === 0) return {};
  const fieldsType = new GraphQLObjectType({
    name: `${t.name}_Fields`,
    description: `The columns of table ${t.name}; a column a record does not carry is null.`,
    fields: Object.fromEntries(
      columns.map(([name, c]) => [
        name,
        {
          type: columnType(c),
          description: `${c.type}${c.dim ? `(${c.dim}, ${c.metric})` : ''}${c.text ? ', text-indexed' : ''}${c.scalar ? ', scalar' : ''}`,
          resolve: columnValue(name, c),
        },
      ]),
    ),
  });
  const rowType = new GraphQLObjectType({
    name: `${t.name}_Row`,
    description: `A hybrid result row of table ${t.name} with typed fields.`,
    fields: {
      record_id: { type: nn(GraphQLString) },
      tenant_id: { type: nn(GraphQLString) },
      version_id: { type: nn(GraphQLSafeInt) },
      fields: { type: nn(fieldsType) },
      score: { type: nn(ScoreComponents) },
    },
  });
  const resultType = new GraphQLObjectType({
    name: `${t.name}_SearchResult`,
    fields: {
      results: { type: nn(list(rowType)) },
      next_cursor: { type: GraphQLString },
      explain: { type: nn(GraphQLJSON) },
    },
  });
  const recordType = new GraphQLObjectType({
    name: `${t.name}_Record`,
    fields: {
      id: { type: nn(GraphQLString) },
      table: { type: nn(GraphQLString) },
      tenant_id: { type: nn(GraphQLString) },
      version_id: { type: nn(GraphQLSafeInt) },
      fields: { type: nn(fieldsType) },
    },
  });
  const scalarFields: GraphQLInputFieldConfigMap = {};
  for (const [name, c] of columns) {
    const type = scalarInputType(c);
    if (type) scalarFields[name] = { type };
  }
  const scalarEq = Object.keys(scalarFields).length
    ? new GraphQLInputObjectType({ name: `${t.name}_ScalarEq`, description: `Equality predicates on the scalar columns of ${t.name}.`, fields: scalarFields })
    : undefined;
  return {
    [`${t.name}_search`]: {
      type: resultType,
      description: `Hybrid search over table ${t.name}, rows with typed fields.`,
      args: searchArgs({ withTable: false, scalarEq }),
      // a refusal names the field's argument (`docs_search.scalar_eq`), not a body member
      resolve: (_src, args: Args, ctx, info) => ctx.read(() => runQuery(ctx.engine, toHybridQuery(args, t.name), ctx.branch, info.fieldName)),
    },
    [`${t.name}_record`]: {
      type: recordType,
      description: `Exact get of a record of table ${t.name}.`,
      args: { tenant_id: { type: nn(GraphQLString) }, id: { type: nn(GraphQLString) }, as_of_epoch: { type: GraphQLInt } },
      resolve: (_src, args: Args, ctx) =>
        ctx.read(() => getRecord(ctx.engine, { table: t.name, tenant_id: args.tenant_id as string, id: args.id as string }, ctx.branch, (args.as_of_epoch as number | null) ?? undefined)),
    },
  };
}

// ---------------------------------------------------------------- root fields

const queryFields: Record<string, Field> = {
  record: {
    type: RecordType,
    description: 'Exact get of the visible version of a record; null when it does not exist (or is deleted).',
    args: {
      table: { type: nn(GraphQLString) },
      tenant_id: { type: nn(GraphQLString) },
      id: { type: nn(GraphQLString) },
      as_of_epoch: { type: GraphQLInt, description: 'read the version visible at this epoch' },
    },
    resolve: (_src, args: Args, ctx) =>
      ctx.read(() => getRecord(ctx.engine, { table: args.table as string, tenant_id: args.tenant_id as string, id: args.id as string }, ctx.branch, (args.as_of_epoch as number | null) ?? undefined)),
  },
  search: {
    type: SearchResult,
    description: 'Hybrid query: text, vector, scalar equality, graph seed and time in one ranked page.',
    args: searchArgs({ withTable: true }),
    resolve: (_src, args: Args, ctx, info) => ctx.read(() => runQuery(ctx.engine, toHybridQuery(args), ctx.branch, info.fieldName)),
  },
  tables: {
    type: nn(list(TableType)),
    description: 'The tables of the branch and their columns.',
    resolve: async (_src, _args, ctx) => (await tables(ctx.engine, ctx.branch)).map(tableOut),
  },
  branches: {
    type: nn(list(BranchType)),
    resolve: (_src, _args, ctx) => listBranches(ctx.engine, ctx.endpoint()),
  },
};

const mutationFields: Record<string, Field> = {
  put: {
    type: WriteResultType,
    description: 'Full replacement write of one record; resolves once it is durable.',
    args: { record: { type: nn(RecordInputType) } },
    resolve: async (_src, args: Args, ctx, info) =>
      committed(wrote(ctx, await putRecords(ctx.engine, [recordInput(args.record as Args, 'record', 0)], writeOptions(ctx, info)))),
  },
  put_batch: {
    type: WriteResultType,
    description: 'Atomic write of many records at one epoch.',
    args: { records: { type: nn(list(RecordInputType)) } },
    resolve: async (_src, args: Args, ctx, info) => {
      const records = (args.records as Args[]).map((r, i) => recordInput(r, `records[${i}]`, i));
      return committed(wrote(ctx, await putRecords(ctx.engine, records, writeOptions(ctx, info))));
    },
  },
  delete: {
    type: WriteResultType,
    description: 'Writes a tombstone: later gets and searches no longer see the record; temporal reads before it still do.',
    args: { table: { type: nn(GraphQLString) }, tenant_id: { type: nn(GraphQLString) }, id: { type: nn(GraphQLString) } },
    resolve: async (_src, args: Args, ctx, info) =>
      committed(wrote(ctx, await deleteRecord(ctx.engine, args as unknown as RecordKey, writeOptions(ctx, info)))),
  },
  snapshot: {
    type: SnapshotResultType,
    description: 'Admin: takes snapshot `target` of the branch at its latest epoch.',
    args: { target: { type: nn(GraphQLString) } },
    resolve: async (_src, args: Args, ctx, info) => wrote(ctx, await takeSnapshot(ctx.engine, args.target as string, ctx.branch, fieldKey(ctx, info))),
  },
  restore: {
    type: RestoreResultType,
    description: 'Admin: restores snapshot `source` into a new branch `target`, then optionally checks that verify_record is visible there.',
    args: { source: { type: nn(GraphQLString) }, target: { type: nn(GraphQLString) }, verify_record: { type: RecordKeyInput } },
    resolve: async (_src, args: Args, ctx, info) => {
      const verify = (args.verify_record as RecordKey | null | undefined) ?? undefined;
      return wrote(ctx, await restoreSnapshot(ctx.engine, { source: args.source as string, target: args.target as string, verify_record: verify }, fieldKey(ctx, info)));
    },
  },
  declare_table: {
    type: DeclareTableResultType,
    description: 'Admin: declares a table or adds columns to it. columns maps a name to {type, dim, metric, text, scalar}.',
    args: {
      table: { type: nn(GraphQLString) },
      columns: { type: nn(GraphQLJSON), description: 'e.g. {title: {type: "string", text: true}, emb: {type: "vector", dim: 384}}' },
    },
    resolve: async (_src, args: Args, ctx) => {
      const table = args.table as string;
      const columns = args.columns;
      if (typeof columns !== 'object' || columns === null || Array.isArray(columns)) {
        throw new BraidError('invalid_record', 'columns must be an object mapping a column name to {type, dim, metric, text, scalar}');
      }
      const declared = await declareTable(ctx.engine, table, columns as Record<string, ColumnDeclaration>, ctx.branch);
      return { epoch: committed(declared.result).epoch, table: tableOut(declared.table) };
    },
  },
};

/**
 * Most columns, over all of a branch's tables, that get typed access: the
 * schema is built again whenever a write changes the branch's schema, on
 * the JS thread, in time that grows with the columns (10,000 tables of 20
 * columns, one 4 MB put-batch, held every client for 3.3 s per rebuild).
 */
export const MAX_TYPED_COLUMNS = 10_000;

/** The native schema of a branch whose catalog holds `tables`. */
export function buildNativeSchema(tables: TableSchema[]): GraphQLSchema {
  const perTable: GraphQLFieldConfigMap<unknown, GraphQLContext> = {};
  // typed access for the tables in name order until their columns would pass MAX_TYPED_COLUMNS
  // (a table given none, a name starting with __, costs nothing)
  let typed = 0;
  for (const t of [...tables].sort((a, b) => a.name.localeCompare(b.name))) {
    const fields = tableFields(t);
    if (Object.keys(fields).length === 0) continue;
    typed += Object.keys(t.columns).length;
    if (typed > MAX_TYPED_COLUMNS) break;
    Object.assign(perTable, fields);
  }
  return new GraphQLSchema({
    query: new GraphQLObjectType({ name: 'Query', fields: { ...queryFields, ...perTable } }),
    mutation: new GraphQLObjectType({ name: 'Mutation', fields: mutationFields }),
    types: [HybridRow],
  });
}

/**
 * Native schemas and table names cached per branch, read again when the
 * branch's schema_epoch moves. Listing a branch's tables converts every
 * column to JavaScript on the JS thread: with 300 tables of 1,000 columns,
 * 0.5-0.7 s for each `GET /v1/graphql/schema` (found by a black-box review).
 */
export class SchemaCache {
  private readonly entries = new Map<string, { epoch: number; names?: string[]; schema?: GraphQLSchema }>();

  constructor(
    private readonly engine: Engine,
    private readonly maxEntries = 256,
  ) {}

  /** The branch's entry at its schema epoch: the cached one, or a new empty one. */
  private entry(branch: BranchRef) {
    const key = `${branch.databaseId ?? ''}\u0000${branch.branchId ?? ''}`;
    const epoch = schemaEpoch(this.engine, branch);
    const hit = this.entries.get(key);
    if (hit && hit.epoch === epoch) return hit;
    const entry: { epoch: number; names?: string[]; schema?: GraphQLSchema } = { epoch };
    this.entries.delete(key);
    this.entries.set(key, entry);
    if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
    return entry;
  }

  async get(branch: BranchRef): Promise<GraphQLSchema> {
    const entry = this.entry(branch);
    if (!entry.schema) {
      const listed = await tables(this.engine, branch);
      entry.names ??= listed.map((t) => t.name);
      entry.schema = buildNativeSchema(listed);
    }
    return entry.schema;
  }

  /** The names of the branch's tables. */
  async tableNames(branch: BranchRef): Promise<string[]> {
    const entry = this.entry(branch);
    entry.names ??= (await tables(this.engine, branch)).map((t) => t.name);
    return entry.names;
  }
}
