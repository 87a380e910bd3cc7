/**
 * What the server enforces, written into the OpenAPI document (documentation
 * only: the validation of the same schemas, by fastify or by the query
 * service, is unchanged, so every error keeps the engine's own code). The engine checks names, ranges and
 * enums itself (crates/engine/src/names.rs, schema.rs, query/plan.rs) and
 * the JSON parser refuses prototype keys (src/app.ts); this states them
 * where clients and fuzzers read the interface, so that a request the
 * document calls valid is refused only for what no schema can know (a
 * table that does not exist yet, a column typed by an earlier write,
 * query-language grammar; docs/api.md, "OpenAPI").
 */
import { NAME_PATTERN } from './names.js';

type Node = Record<string, unknown>;

/** Record ids, tenants and graph seeds: 1-256 bytes without control characters (256 characters is the bound a schema can state). */
const KEY = { minLength: 1, maxLength: 256, pattern: '^[^\\u0000-\\u001f\\u007f-\\u009f]+$' };
/**
 * A JSON number is a finite 32-bit float when its magnitude is below
 * 2^128 - 2^103, halfway between f32::MAX and the next power of two: from
 * there on it rounds to infinity.
 */
const F32_LIMIT = 2 ** 128 - 2 ** 103;
const FINITE_F32 = { type: 'number', exclusiveMinimum: -F32_LIMIT, exclusiveMaximum: F32_LIMIT, description: 'finite as a 32-bit float' };
/** The largest integer a JSON number keeps exactly through the service (2^53 - 1). */
const MAX_EXACT_INTEGER = Number.MAX_SAFE_INTEGER;

const NAMES = new Set(['table', 'text_field', 'vector_field', 'database_id', 'branch_id', 'source', 'target']);
const KEYS = new Set(['tenant_id', 'id', 'graph_seed']);
const RANGES: Record<string, { minimum: number; maximum: number }> = {
  top_k: { minimum: 1, maximum: 1000 },
  candidate_budget: { minimum: 1, maximum: 10_000 },
  graph_depth: { minimum: 1, maximum: 8 },
  temporal_as_of: { minimum: 0, maximum: MAX_EXACT_INTEGER },
};
const ENUMS: Record<string, string[]> = {
  freshness: ['latest', 'indexed'],
  fusion: ['rrf', 'relative_score'],
  state: ['active', 'archived'],
};

const JSON_VALUE_REF = { $ref: '#/components/schemas/JsonValue' };
const JSON_OBJECT_REF = { $ref: '#/components/schemas/JsonObject' };
/** The parser refuses `{"constructor": {"prototype": ...}}` at any depth (secure-json-parse). */
const NO_PROTOTYPE = { not: { type: 'object', required: ['prototype'] } };
/** No `__proto__` key (secure-json-parse). */
const NO_PROTO_KEY = { not: { const: '__proto__' } };

/**
 * Free JSON values in request bodies (record fields, GraphQL variables):
 * any JSON, except that no object has a `__proto__` key or a `constructor`
 * object with a `prototype` key, which the parser refuses as invalid_json.
 */
export const JSON_SCHEMAS = {
  JsonValue: {
    description: 'any JSON value; no object in it has a __proto__ key or a constructor object with a prototype key (400 invalid_json)',
    anyOf: [{ type: ['null', 'boolean', 'number', 'string'] }, { type: 'array', items: JSON_VALUE_REF }, JSON_OBJECT_REF],
  },
  JsonObject: {
    type: 'object',
    propertyNames: NO_PROTO_KEY,
    // (a $ref takes no sibling keywords in the generated document: allOf)
    properties: { constructor: { allOf: [JSON_VALUE_REF], ...NO_PROTOTYPE } },
    additionalProperties: JSON_VALUE_REF,
  },
};

/** A fresh copy of a constant schema: the document generator rewrites the objects it is given. */
const fresh = <T>(schema: T): T => structuredClone(schema);

export interface Limits {
  /** Longest vector a record may carry (BRAID_MAX_VECTOR_DIM). */
  maxVectorDim: number;
  /** Most records in one put-batch (BRAID_MAX_BATCH). */
  maxBatch: number;
}

/**
 * A record field: a key is a column name, and a non-empty array of numbers
 * is a vector (at most maxVectorDim finite f32 values); other values are
 * free JSON. Whether the value fits the column's type fixed by an earlier
 * write (schema_type_mismatch, vector_dimension_mismatch) is data.
 */
function fieldMap(limits: Limits, description: unknown): Node {
  const value = {
    anyOf: [
      { type: ['null', 'boolean', 'number', 'string'] },
      { type: 'array', items: FINITE_F32, maxItems: limits.maxVectorDim, description: 'a vector' },
      { type: 'array', contains: { not: { type: 'number' } }, items: JSON_VALUE_REF, description: 'edges (strings) or json' },
      JSON_OBJECT_REF,
    ],
  };
  return fresh({
    type: 'object',
    description,
    propertyNames: { pattern: NAME_PATTERN, ...NO_PROTO_KEY },
    properties: { constructor: { ...value, ...NO_PROTOTYPE } },
    additionalProperties: value,
  });
}

/** A map node (a typebox Record: patternProperties) whose values are `values`. */
function openMap(node: Node, values: Node): Node {
  delete node.patternProperties;
  node.additionalProperties = values;
  return node;
}

/** The members of a node of one type, the node itself or in a union with null. */
function members(node: Node, type: string): Node[] {
  if (node.type === type) return [node];
  for (const key of ['anyOf', 'oneOf'] as const) {
    const list = node[key];
    if (Array.isArray(list)) return (list as Node[]).filter((m) => m && m.type === type);
  }
  return [];
}

function patch(node: unknown, limits: Limits): void {
  if (!node || typeof node !== 'object') return;
  if (Array.isArray(node)) {
    for (const item of node) patch(item, limits);
    return;
  }
  const n = node as Node;
  const props = n.properties as Record<string, Node> | undefined;
  if (props) {
    // the engine names no record, query or tenant without both
    if (props.table && props.tenant_id) n.required = [...new Set([...((n.required as string[]) ?? []), 'table', 'tenant_id'])];
    for (const [name, prop] of Object.entries(props)) {
      if (NAMES.has(name)) for (const m of members(prop, 'string')) m.pattern = NAME_PATTERN;
      if (KEYS.has(name)) for (const m of members(prop, 'string')) Object.assign(m, KEY);
      if (RANGES[name]) for (const m of members(prop, 'integer')) Object.assign(m, RANGES[name]);
      if (ENUMS[name]) for (const m of members(prop, 'string')) m.enum = ENUMS[name];
      if (name === 'records') for (const arr of members(prop, 'array')) Object.assign(arr, { minItems: 1, maxItems: limits.maxBatch });
      if (name === 'vector') {
        for (const arr of members(prop, 'array')) Object.assign(arr, { minItems: 1, maxItems: limits.maxVectorDim, items: { ...(arr.items as Node), ...fresh(FINITE_F32) } });
      }
      // the engine's limit (invalid_query), and an empty name is no column (unknown_column)
      if (name === 'return_fields') {
        for (const arr of members(prop, 'array')) Object.assign(arr, { maxItems: 1000, items: { ...(arr.items as Node), minLength: 1 } });
      }
      if (name === 'fields') {
        props[name] = fieldMap(limits, prop.description);
        continue;
      }
      // equality filters compare a column with a string, number or bool
      if (name === 'scalar_eq') for (const m of members(prop, 'object')) openMap(m, { type: ['string', 'number', 'boolean'] });
      if (name === 'fusion_weights') for (const w of Object.values((prop.properties ?? {}) as Record<string, Node>)) w.minimum = 0;
      if (name === 'variables') for (const m of members(prop, 'object')) Object.assign(openMap(m, {}), fresh(JSON_SCHEMAS.JsonObject));
    }
  }
  for (const value of Object.values(n)) patch(value, limits);
}

/** A copy of a route's body schema with the enforced constraints written in. */
export function documentedBody<T>(body: T, limits: Limits): T {
  if (body === undefined) return body;
  const copy = JSON.parse(JSON.stringify(body)) as T;
  patch(copy, limits);
  return copy;
}

export const HEADER_CONSTRAINTS = {
  name: { type: 'string', pattern: NAME_PATTERN },
  idempotencyKey: { type: 'string', pattern: '^[\\x20-\\x7e]{1,255}$' },
};
