/**
 * Hybrid queries for every front door: the JSON query (REST `/v1/query` and
 * `/v1/explain`, the embedded API, the CLI's `--body`), the native query
 * language (`/v1/nativeql`, `nativeQuery`, the CLI) and GraphQL (`search`,
 * `<table>_search`, the bounded route).
 *
 * One rule for what a bad query answers, whichever door it came through: its
 * shape is checked here against the one HybridQuery schema (an unknown member
 * is `unknown_field`, a member of the wrong type `invalid_request`); its
 * values are the engine's to judge, with the engine's codes (`invalid_query`,
 * `top_k_out_of_range`, `vector_not_finite`, `unknown_table`, ...). A door
 * whose language cannot say the query fails in that language first
 * (`ql_syntax_error`, GraphQL validation); docs/errors.md.
 */
import { BraidError } from '../errors.js';
import { parseRequestJson } from '../json.js';
import { parseNativeQuery } from '../ql/index.js';
import { HybridQuery as HybridQuerySchema } from '../schemas/query.js';
import { compile, validationError } from '../validation.js';
import type { BranchRef, Engine, HybridExplain, HybridQuery, QueryResponse, TableSchema } from '../native/engine.js';

// an embedded caller may pass the vector as a typed array, which the binding
// reads without a copy (docs/embedded.md); JSON has none, and its values are
// the engine's to judge like any vector's
const TypedVectorQuerySchema = { ...HybridQuerySchema, properties: { ...HybridQuerySchema.properties, vector: {} } };

/**
 * Compiles the query checks, which checkQuery otherwise does on first use.
 * They take about 35 ms, so importing this module does not (every command
 * and every server start imports it); the server calls this while its data
 * directory opens.
 */
export function prepareQueryChecks(): void {
  compile(HybridQuerySchema);
  compile(TypedVectorQuerySchema);
}

/**
 * The query as the engine takes it, or a 400 naming the first member out of
 * shape, as a member of `dataVar` (`body.vector` over HTTP, `query.vector`
 * for the embedded API, which has no body).
 */
export function checkQuery(query: unknown, dataVar = 'body'): HybridQuery {
  // found by a black-box review: a Date passed the schema as an object, and reached the engine as its text
  const tag = Object.prototype.toString.call(query);
  if (query !== null && typeof query === 'object' && !Array.isArray(query) && tag !== '[object Object]') {
    throw new BraidError('invalid_request', `the query must be an object {table, tenant_id, ...}, got a ${tag.slice(8, -1)}`);
  }
  // as the key is refused inside a query (the engine's invalid_query); the schema saw an unknown member
  if (query !== null && typeof query === 'object' && Object.hasOwn(query, '__proto__')) {
    throw new BraidError('invalid_query', `${dataVar}.__proto__ is a key named __proto__, which a query cannot hold (a JavaScript object read back would take it as its prototype)`);
  }
  // only a vector of floats crosses as a typed array; an Int32Array or a DataView is a member of the wrong type
  const vector = (query as { vector?: unknown } | null)?.vector;
  const typed = vector instanceof Float32Array || vector instanceof Float64Array;
  const valid = compile(typed ? TypedVectorQuerySchema : HybridQuerySchema);
  if (!valid(query)) throw validationError(valid.errors, dataVar);
  // the schema's integer takes an infinity (JSON's 1e999): outside 1..1000 like any other
  // top_k, not the invalid_query of a value that cannot be stored (found by a black-box review)
  const topK = (query as { top_k?: unknown }).top_k;
  if (topK === Infinity || topK === -Infinity) throw new BraidError('top_k_out_of_range', `top_k must be between 1 and 1000, got ${topK}`);
  return query as HybridQuery;
}

/** Runs a hybrid query. */
export function runQuery(engine: Engine, query: HybridQuery, branch?: BranchRef, dataVar?: string): Promise<QueryResponse> {
  // the binding's own promise, without an async layer around it: a refused
  // query still rejects rather than throws
  try {
    checkQuery(query, dataVar);
  } catch (err) {
    return Promise.reject(err);
  }
  return engine.query(query, branch);
}

/**
 * Runs the hybrid query of a JSON request body (`/v1/query`) and answers the
 * response as JSON text. The engine reads the body and writes the answer
 * (docs/api.md, "How a request is served"); a body it leaves to the service
 * is parsed and checked here as every query is, so a refusal keeps its one
 * code and message.
 */
export async function runQueryJson(engine: Engine, body: Buffer, branch?: BranchRef): Promise<Buffer | QueryResponse> {
  return (await engine.queryJson(body, branch)) ?? runQuery(engine, parseRequestJson(body) as HybridQuery, branch);
}

/** As runQueryJson, for `/v1/explain`: the explain alone, as JSON text when the engine read the body. */
export async function explainQueryJson(engine: Engine, body: Buffer, branch?: BranchRef): Promise<Buffer | HybridExplain> {
  return (await engine.explainJson(body, branch)) ?? explainQuery(engine, parseRequestJson(body) as HybridQuery, branch);
}

/** Runs a hybrid query for its explain alone (planner candidates included). */
export async function explainQuery(engine: Engine, query: HybridQuery, branch?: BranchRef, dataVar?: string): Promise<HybridExplain> {
  const checked = checkQuery(query, dataVar);
  return (await engine.query({ ...checked, explain: true }, branch)).explain;
}

/**
 * Runs a native query language statement (docs/ql.md). A statement that does
 * not parse is a `QlSyntaxError` (400 `ql_syntax_error`, with its position).
 */
export async function runNativeQuery(engine: Engine, text: string, branch?: BranchRef): Promise<QueryResponse> {
  // the parser builds queries of the schema's shape: no check needed
  return engine.query(parseNativeQuery(text), branch);
}

/** Runs a native query language statement, answering the response as JSON text (`/v1/nativeql`). */
export async function runNativeQueryJson(engine: Engine, text: string, branch?: BranchRef): Promise<Buffer> {
  return engine.queryToJson(parseNativeQuery(text), branch);
}

/** The tables of a branch and their columns. */
export function tables(engine: Engine, branch?: BranchRef): Promise<TableSchema[]> {
  return engine.schemas(branch);
}

/** The branch's schema epoch: it moves whenever a table or a column is added. */
export function schemaEpoch(engine: Engine, branch?: BranchRef): number {
  return engine.metrics(branch).schema_epoch;
}
