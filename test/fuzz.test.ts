// Property-based fuzzing of the native query language through real HTTP
// (issue 14 item 6): random strings, and valid queries mutated by inserting,
// deleting, duplicating and replacing pieces, sent to POST /v1/nativeql on a
// real engine. Every answer is a 200 or a 4xx with a `code`: never a 5xx, and
// the server keeps answering. fast-check with a fixed seed, so a failure
// reproduces (its counterexample is printed, shrunk).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './helpers.js';

let s: TestServer;

const VALID = [
  "SEARCH docs TENANT 'acme'",
  "SEARCH docs TENANT 'acme' MATCH 'hybrid search' IN title LIMIT 5",
  "SEARCH docs TENANT 'acme' NEAR [0.1, 0.2, 0.3] IN embedding BUDGET 50",
  "SEARCH docs TENANT 'acme' WHERE lang = 'en' AND year = 2024 AND draft = false",
  "SEARCH docs TENANT 'acme' MATCH 'solar' GRAPH FROM 'd1' DEPTH 2",
  "SEARCH docs TENANT 'acme' MATCH 'solar' AS OF 2 FRESHNESS indexed",
  "SEARCH docs TENANT 'acme' MATCH 'solar' NEAR [0.3, 0.1, 0.2] FUSE relative_score WEIGHTS (lexical 0.7, vector 0.3)",
  "SEARCH docs TENANT 'acme' MATCH 'it''s solar' RETURN title, year LIMIT 3",
  "SEARCH docs TENANT 'acme' NEAR [1e308, -1e-308, 3e-2] LIMIT 1000 CURSOR 'eyJ2IjoxfQ'",
];

const PIECES = [
  'SEARCH', 'TENANT', 'MATCH', 'IN', 'NEAR', 'WHERE', 'AND', 'GRAPH', 'FROM', 'DEPTH', 'AS', 'OF', 'FRESHNESS', 'FUSE',
  'WEIGHTS', 'BUDGET', 'LIMIT', 'CURSOR', 'RETURN', 'NONE', "'", "''", '"', '[', ']', '(', ')', ',', ';', '=', '-',
  '1e999', 'NaN', '-0', '0x10', '99999999999999999999', '\u0000', '\u{1F600}', '\\', '\n', ' ', 'true', 'null',
];

/** A valid query with one to four random edits. */
const mutated = fc
  .tuple(
    fc.constantFrom(...VALID),
    fc.array(
      fc.tuple(fc.nat(), fc.nat({ max: 12 }), fc.oneof(fc.constantFrom(...PIECES), fc.string({ maxLength: 8, unit: 'binary' })), fc.nat({ max: 3 })),
      { minLength: 1, maxLength: 4 },
    ),
  )
  .map(([base, edits]) => {
    let q = base;
    for (const [at, len, piece, kind] of edits) {
      const i = at % (q.length + 1);
      if (kind === 0) q = q.slice(0, i) + piece + q.slice(i);
      else if (kind === 1) q = q.slice(0, i) + q.slice(i + len);
      else if (kind === 2) q = q.slice(0, i) + q.slice(i, i + len).repeat(3) + q.slice(i);
      else q = q.slice(0, i) + piece + q.slice(i + len);
    }
    return q;
  });

const queries = fc.oneof(
  { weight: 1, arbitrary: fc.string({ maxLength: 200, unit: 'binary' }) },
  { weight: 1, arbitrary: fc.array(fc.constantFrom(...PIECES), { maxLength: 30 }).map((p) => p.join(' ')) },
  { weight: 4, arbitrary: mutated },
);

beforeAll(async () => {
  s = await startTestServer();
  const records = ['d1', 'd2', 'd3'].map((id, i) => ({
    table: 'docs',
    tenant_id: 'acme',
    id,
    fields: { title: `solar hybrid search ${id}`, lang: 'en', year: 2024, draft: false, embedding: [0.1 * (i + 1), 0.2, 0.3], links: ['d1'] },
  }));
  expect((await s.post('/v1/records/put-batch', { records })).status).toBe(200);
});

afterAll(async () => s.destroy());

describe('native QL fuzzing over HTTP (fast-check)', () => {
  it('every query is answered 200 or 4xx with a code, never 5xx', async () => {
    const seen = { ok: 0, rejected: 0 };
    await fc.assert(
      fc.asyncProperty(queries, async (query) => {
        const res = await s.post('/v1/nativeql', { query });
        if (res.status === 200) {
          seen.ok++;
          return Array.isArray(res.body.results);
        }
        seen.rejected++;
        return res.status >= 400 && res.status < 500 && typeof res.body?.code === 'string' && typeof res.body?.error === 'string';
      }),
      { seed: 20261123, numRuns: 600 },
    );
    // both outcomes were exercised, and the server still answers
    expect(seen.ok).toBeGreaterThan(10);
    expect(seen.rejected).toBeGreaterThan(100);
    expect((await s.get('/v1/ready')).status).toBe(200);
  });

  it('QL text that is not a string, or a body that is not an object, is a 400 with a code', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 3 }), async (value) => {
        const body = typeof value === 'object' && value !== null && !Array.isArray(value) ? { query: value } : value;
        const res = await s.post('/v1/nativeql', JSON.stringify(body));
        return res.status >= 400 && res.status < 500 && typeof res.body?.code === 'string';
      }),
      { seed: 7, numRuns: 200 },
    );
  });
});

// put-batch bodies are read by the engine from their bytes when it can, and by
// JSON.parse and the schema otherwise (crates/engine/src/wire.rs); route 11
// always reads its body the JSON.parse way. The same record sent through both
// must get the same answer and, when written, read back the same, key order
// included.
describe('put-batch read by the engine, against the service reading (fast-check)', () => {
  const name = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,8}$/);
  const anyKey = fc.oneof(name, fc.constantFrom('0', '7', '10', '01', '__proto__', 'constructor', 'prototype', 'a b', ''), fc.string({ maxLength: 4 }));
  const value = fc.letrec<{ value: unknown }>((tie) => ({
    value: fc.oneof(
      { depthSize: 'small' },
      fc.constantFrom(null, true, false, 0, -0, 1, 1.5, -2.25, 2 ** 53, 2 ** 53 + 2, 1e21, 5e-324, Number.MAX_VALUE),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.integer(),
      fc.string({ maxLength: 12, unit: 'grapheme' }),
      fc.array(tie('value'), { maxLength: 4 }),
      fc.dictionary(anyKey, tie('value'), { maxKeys: 4 }),
    ),
  })).value;
  const fields = fc.dictionary(fc.oneof({ weight: 9, arbitrary: name }, { weight: 1, arbitrary: anyKey }), value, { maxKeys: 5 });
  /** A number written the ways JSON allows: the engine and JSON.parse must read them alike. */
  const spelled = (text: string, seed: number) =>
    text.replace(/(?<=[:,[])(-?\d+)(?=[,\]}])/g, (n) => (seed % 3 === 0 ? `${n}.0` : seed % 3 === 1 ? `${n}e0` : n));

  it('answers and stores alike', async () => {
    let n = 0;
    const stored = { written: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(fields, fc.nat(), async (f, seed) => {
        const table = `fz${n++}`;
        const text = spelled(JSON.stringify(f), seed);
        const raw = (id: string) => `{"table":"${table}","tenant_id":"acme","id":"${id}","fields":${text}}`;
        const batch = await s.post('/v1/records/put-batch', `{"records":[${raw('b')}]}`);
        const single = await s.post('/v1/records/put', raw('s'));
        if (batch.status !== single.status || batch.body?.code !== single.body?.code) return false;
        if (batch.status !== 200) {
          stored.refused++;
          return batch.status >= 400 && batch.status < 500 && typeof batch.body?.code === 'string';
        }
        stored.written++;
        const read = async (id: string) => {
          const res = await fetch(`${s.url}/v1/records/get`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ table, tenant_id: 'acme', id }) });
          return JSON.stringify((JSON.parse(await res.text()) as { record: { fields: unknown } }).record.fields);
        };
        return (await read('b')) === (await read('s'));
      }),
      { seed: 20261125, numRuns: 150 },
    );
    expect(stored.written).toBeGreaterThan(50);
    expect(stored.refused).toBeGreaterThan(5);
    expect((await s.get('/v1/ready')).status).toBe(200);
  });
});
