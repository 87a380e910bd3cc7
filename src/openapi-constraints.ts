/**
 * What the engine enforces, written into the OpenAPI document (documentation
 * only: fastify's validation of the same schemas is unchanged, so every
 * error keeps the engine's own code). The engine checks names, ranges and
 * enums itself (crates/engine/src/names.rs, query/plan.rs); this states them
 * where clients and fuzzers read the interface.
 */

/** Identifiers: tables, columns, databases, branches, snapshots. */
export const NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,63}$';
/** Record ids, tenants and graph seeds: 1-256 bytes without control characters. */
const KEY = { minLength: 1, maxLength: 256, pattern: '^[^\\u0000-\\u001f\\u007f-\\u009f]+$' };
const F32_MAX = 3.4028234663852886e38;

const NAMES = new Set(['table', 'text_field', 'vector_field', 'database_id', 'branch_id', 'source', 'target']);
const KEYS = new Set(['tenant_id', 'id', 'graph_seed']);
const RANGES: Record<string, { minimum: number; maximum: number }> = {
  top_k: { minimum: 1, maximum: 1000 },
  candidate_budget: { minimum: 1, maximum: 10_000 },
  graph_depth: { minimum: 1, maximum: 8 },
};
const ENUMS: Record<string, string[]> = {
  freshness: ['latest', 'indexed'],
  fusion: ['rrf', 'relative_score'],
  state: ['active', 'archived'],
};

type Node = Record<string, unknown>;

/** The string (or integer) members of a node that may be a union with null. */
function members(node: Node, type: string): Node[] {
  if (node.type === type) return [node];
  for (const key of ['anyOf', 'oneOf'] as const) {
    const list = node[key];
    if (Array.isArray(list)) return (list as Node[]).filter((m) => m && m.type === type);
  }
  return [];
}

function patch(node: unknown): void {
  if (!node || typeof node !== 'object') return;
  if (Array.isArray(node)) {
    node.forEach(patch);
    return;
  }
  const n = node as Node;
  const props = n.properties as Record<string, Node> | undefined;
  if (props) {
    for (const [name, prop] of Object.entries(props)) {
      if (NAMES.has(name)) for (const m of members(prop, 'string')) m.pattern = NAME_PATTERN;
      if (KEYS.has(name)) for (const m of members(prop, 'string')) Object.assign(m, KEY);
      if (RANGES[name]) for (const m of members(prop, 'integer')) Object.assign(m, RANGES[name]);
      if (ENUMS[name]) for (const m of members(prop, 'string')) m.enum = ENUMS[name];
      if (name === 'records') for (const arr of members(prop, 'array')) arr.minItems = 1;
      if (name === 'vector') {
        for (const arr of members(prop, 'array')) {
          arr.minItems = 1;
          arr.items = { ...(arr.items as Node), minimum: -F32_MAX, maximum: F32_MAX, description: 'finite as a 32-bit float' };
        }
      }
    }
  }
  for (const value of Object.values(n)) patch(value);
}

/** A copy of a route's body schema with the enforced constraints written in. */
export function documentedBody<T>(body: T): T {
  if (body === undefined) return body;
  const copy = JSON.parse(JSON.stringify(body)) as T;
  patch(copy);
  return copy;
}

export const HEADER_CONSTRAINTS = {
  name: { type: 'string', pattern: NAME_PATTERN },
  idempotencyKey: { type: 'string', pattern: '^[\\x20-\\x7e]{1,255}$' },
};
