// One HybridQuery (issue 17): the binding's generated declaration
// (native/index.d.ts, from crates/node/src/types.rs) names the fields; the
// typebox schema (src/schemas/query.ts) is written once against it, and the
// GraphQL search arguments and the QL docs test are built from that schema.
// A new query field goes into the Rust type, the schema and the QL grammar.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Static } from 'typebox';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { boundedSchema } from '../src/graphql/bounded.js';
import { buildNativeSchema } from '../src/graphql/schema.js';
import type { Native } from '../src/native/index.js';
import { HYBRID_QUERY_FIELDS, HybridQuery, REQUIRED_QUERY_FIELDS } from '../src/schemas/query.js';
import { ROOT } from './helpers.js';

/** The members of `interface HybridQuery` in the generated declarations. */
function bindingFields(): string[] {
  const dts = readFileSync(path.join(ROOT, 'native', 'index.d.ts'), 'utf8');
  const body = /export interface HybridQuery \{([\s\S]*?)\n\}/.exec(dts)?.[1];
  expect(body, 'interface HybridQuery in native/index.d.ts').toBeDefined();
  return [...body!.matchAll(/^\s+([a-z_]+)\??:/gm)].map((m) => m[1]!);
}

describe('HybridQuery is defined once', () => {
  it('the schema has exactly the fields of the binding type', () => {
    const fields = bindingFields();
    expect(fields.length).toBeGreaterThan(15);
    expect([...HYBRID_QUERY_FIELDS].sort()).toEqual([...fields].sort());
    expect(Object.keys(HybridQuery.properties).sort()).toEqual([...fields].sort());
  });

  it('the schema type is one the binding takes, field by field', () => {
    type FromSchema = Static<typeof HybridQuery>;
    expectTypeOf<FromSchema>().toExtend<Native.HybridQuery>();
    expectTypeOf<keyof FromSchema>().toEqualTypeOf<keyof Native.HybridQuery>();
    expectTypeOf<FromSchema['vector']>().toExtend<Native.HybridQuery['vector']>();
    expectTypeOf<FromSchema['fusion_weights']>().toExtend<Native.HybridQuery['fusion_weights']>();
  });

  it('GraphQL search takes every field as an argument, in the schema order', () => {
    const bounded = boundedSchema.getQueryType()!.getFields().search!.args;
    expect(bounded.map((a) => a.name)).toEqual(HYBRID_QUERY_FIELDS);
    const native = buildNativeSchema([{ name: 'docs', columns: { title: { type: 'string', text: true, scalar: true } } }]).getQueryType()!.getFields();
    expect(native.search!.args.map((a) => a.name)).toEqual(HYBRID_QUERY_FIELDS);
    // the per-table search has no table argument, and a typed scalar_eq
    expect(native.docs_search!.args.map((a) => a.name)).toEqual(HYBRID_QUERY_FIELDS.filter((f) => f !== 'table'));
    expect(String(native.docs_search!.args.find((a) => a.name === 'scalar_eq')!.type)).toBe('docs_ScalarEq');
  });

  it('GraphQL argument types follow the schema', () => {
    const types = Object.fromEntries(boundedSchema.getQueryType()!.getFields().search!.args.map((a) => [a.name, String(a.type)]));
    expect(types).toEqual({
      table: 'String!',
      tenant_id: 'String!',
      text: 'String',
      text_field: 'String',
      vector: '[Float!]',
      vector_field: 'String',
      scalar_eq: 'JSON',
      graph_seed: 'String',
      temporal_as_of: 'Int',
      freshness: 'String',
      top_k: 'Int',
      cursor: 'String',
      explain: 'Boolean',
      fusion: 'String',
      fusion_weights: 'FusionWeightsInput',
      candidate_budget: 'Int',
      graph_depth: 'Int',
      return_fields: '[String!]',
    });
    for (const field of REQUIRED_QUERY_FIELDS) expect(types[field]).toMatch(/!$/);
  });
});
