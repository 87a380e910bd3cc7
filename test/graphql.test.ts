/**
 * GraphQL: the native route (7) through graphql-request against a real
 * server, the bounded adapter (6) against engine.query and /v1/nativeql, and
 * the schema export (1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClientError, GraphQLClient, gql } from 'graphql-request';
import { GraphQLError, buildClientSchema, buildSchema, getIntrospectionQuery, isObjectType, type IntrospectionQuery } from 'graphql';
import { formatGraphQLError } from '../src/graphql/errors.js';
import { MAX_TYPED_COLUMNS, buildNativeSchema } from '../src/graphql/schema.js';
import { oneAtATime } from '../src/graphql/types.js';
import { GraphQLSafeInt } from '../src/graphql/scalars.js';
import { startTestServer, type TestServer } from './helpers.js';

let server: TestServer;
let client: GraphQLClient;
/** Same endpoint, but returns `errors` next to `data` instead of throwing. */
let lenient: GraphQLClient;

const DOCS = [
  { table: 'docs', tenant_id: 't1', id: 'd1', fields: { title: 'hello world', lang: 'en', year: 2024, emb: [1, 0, 0], links: ['d2'] } },
  { table: 'docs', tenant_id: 't1', id: 'd2', fields: { title: 'hello again', lang: 'fr', year: 2023, emb: [0, 1, 0], links: ['d3'] } },
  { table: 'docs', tenant_id: 't1', id: 'd3', fields: { title: 'goodbye world', lang: 'en', year: 2022, emb: [0, 0, 1], links: [] } },
  { table: 'docs', tenant_id: 't2', id: 'd1', fields: { title: 'hello other tenant', lang: 'en', year: 2024, emb: [1, 0, 0] } },
];

const PUT_BATCH = gql`
  mutation Seed($records: [RecordInput!]!) {
    put_batch(records: $records) { epoch record_count }
  }
`;

const SEARCH = gql`
  query Search($text: String, $vector: [Float!], $scalar_eq: JSON, $top_k: Int) {
    search(table: "docs", tenant_id: "t1", text: $text, vector: $vector, scalar_eq: $scalar_eq, top_k: $top_k) {
      results { record_id tenant_id version_id fields score { final_score lexical vector relational freshness_penalty } }
      next_cursor
      explain
    }
  }
`;

type SearchData = {
  search: {
    results: { record_id: string; tenant_id: string; version_id: number; fields: Record<string, unknown>; score: Record<string, number | null> }[];
    next_cursor: string | null;
    explain: Record<string, unknown>;
  };
};

async function expectGraphQLHttpError(promise: Promise<unknown>, status: number, code: string): Promise<ClientError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ClientError);
  const clientErr = err as ClientError;
  expect(clientErr.response.status).toBe(status);
  const body = JSON.parse(clientErr.response.body as string) as { code: string; error: string };
  expect(body.code).toBe(code);
  return clientErr;
}

beforeAll(async () => {
  server = await startTestServer();
  client = new GraphQLClient(`${server.url}/v1/graphql`);
  lenient = new GraphQLClient(`${server.url}/v1/graphql`, { errorPolicy: 'all' });
  const seeded = await client.request<{ put_batch: { epoch: number; record_count: number } }>(PUT_BATCH, { records: DOCS });
  expect(seeded.put_batch.record_count).toBe(4);
  expect(seeded.put_batch.epoch).toBeGreaterThan(0);
});

afterAll(async () => {
  await server?.destroy();
});

describe('POST /v1/graphql: records', () => {
  it('put then record returns the written version', async () => {
    const put = await client.request<{ put: { epoch: number; record_count: number } }>(gql`
      mutation { put(record: { table: "notes", tenant_id: "t1", id: "n1", fields: { body: "first note", n: 1 } }) { epoch record_count } }
    `);
    expect(put.put.record_count).toBe(1);
    const got = await client.request<{ record: { id: string; table: string; tenant_id: string; version_id: number; fields: unknown } }>(
      gql`query($id: String!) { record(table: "notes", tenant_id: "t1", id: $id) { id table tenant_id version_id fields } }`,
      { id: 'n1' },
    );
    expect(got.record).toEqual({ id: 'n1', table: 'notes', tenant_id: 't1', version_id: 1, fields: { body: 'first note', n: 1 } });
  });

  it('put_batch writes every record at one epoch', async () => {
    const out = await client.request<{ put_batch: { epoch: number; record_count: number } }>(PUT_BATCH, {
      records: [
        { table: 'notes', tenant_id: 't1', id: 'b1', fields: { body: 'one' } },
        { table: 'notes', tenant_id: 't1', id: 'b2', fields: { body: 'two' } },
      ],
    });
    expect(out.put_batch.record_count).toBe(2);
    const got = await client.request<{ a: { fields: unknown }; b: { fields: unknown }; before: null }>(
      gql`query($before: Int) {
        a: record(table: "notes", tenant_id: "t1", id: "b1") { fields }
        b: record(table: "notes", tenant_id: "t1", id: "b2") { fields }
        before: record(table: "notes", tenant_id: "t1", id: "b2", as_of_epoch: $before) { fields }
      }`,
      { before: out.put_batch.epoch - 1 },
    );
    expect(got).toEqual({ a: { fields: { body: 'one' } }, b: { fields: { body: 'two' } }, before: null });
  });

  it('delete writes a tombstone: get returns null, search no longer sees it, an earlier epoch still does', async () => {
    const put = await client.request<{ put: { epoch: number } }>(gql`
      mutation { put(record: { table: "docs", tenant_id: "t3", id: "gone", fields: { title: "ephemeral zebra" } }) { epoch } }
    `);
    const del = await client.request<{ delete: { epoch: number; record_count: number } }>(gql`
      mutation { delete(table: "docs", tenant_id: "t3", id: "gone") { epoch record_count } }
    `);
    expect(del.delete.epoch).toBeGreaterThan(put.put.epoch);
    const after = await client.request<{ now: unknown; before: { id: string } | null; search: { results: unknown[] } }>(
      gql`query($before: Int) {
        now: record(table: "docs", tenant_id: "t3", id: "gone") { id }
        before: record(table: "docs", tenant_id: "t3", id: "gone", as_of_epoch: $before) { id }
        search(table: "docs", tenant_id: "t3", text: "zebra") { results { record_id } }
      }`,
      { before: put.put.epoch },
    );
    expect(after.now).toBeNull();
    expect(after.before).toEqual({ id: 'gone' });
    expect(after.search.results).toEqual([]);
  });

  it('Idempotency-Key replays a mutation instead of running it again', async () => {
    const body = { query: 'mutation { put(record: { table: "notes", tenant_id: "t1", id: "idem", fields: { body: "once" } }) { epoch } }' };
    const first = await server.post('/v1/graphql', body, { 'idempotency-key': 'gql-put-1' });
    const again = await server.post('/v1/graphql', body, { 'idempotency-key': 'gql-put-1' });
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const other = await server.post('/v1/graphql', { query: body.query.replace('once', 'twice') }, { 'idempotency-key': 'gql-put-1' });
    expect(other.status).toBe(409);
  });

  // Regression (black-box model test): a document with a failed field is run
  // again on a retry, and its written fields answer from their receipts; a
  // delete that had happened answered changed: false, telling a client
  // retrying after a crash that its delete had no effect.
  it('a retried document answers each written field with its first result, changed included', async () => {
    await server.post('/v1/records/put', { table: 'notes', tenant_id: 't1', id: 'retry-del', fields: { body: 'x' } });
    const query = `mutation {
      a: delete(table: "notes", tenant_id: "t1", id: "retry-del") { epoch changed }
      b: put(record: { table: "notes", tenant_id: "t1", id: "retry-bad", fields: { body: 1 } }) { epoch }
    }`;
    const first = await server.post('/v1/graphql', { query }, { 'idempotency-key': 'gql-retry-del' });
    const again = await server.post('/v1/graphql', { query }, { 'idempotency-key': 'gql-retry-del' });
    const firstBody = first.body as { data: { a: { epoch: number; changed: boolean } }; errors?: unknown[] };
    expect(firstBody.errors?.length).toBe(1);
    expect(firstBody.data.a.changed).toBe(true);
    expect((again.body as { data: unknown }).data).toEqual(firstBody.data);
  });

  // Regression (black-box regression test): a keyed delete of a record that
  // is not there said changed: true (unkeyed, false), and its retry false.
  it('a keyed delete of a missing record says changed: false, and so does its retry', async () => {
    const query = `mutation {
      f: delete(table: "notes", tenant_id: "t1", id: "never-there") { epoch record_count changed }
      b: put(record: { table: "notes", tenant_id: "t1", id: "retry-bad-2", fields: { body: 1 } }) { epoch }
    }`;
    const first = await server.post('/v1/graphql', { query }, { 'idempotency-key': 'gql-noop-del' });
    const again = await server.post('/v1/graphql', { query }, { 'idempotency-key': 'gql-noop-del' });
    const firstBody = first.body as { data: { f: { record_count: number; changed: boolean } } };
    expect(firstBody.data.f).toMatchObject({ record_count: 0, changed: false });
    expect((again.body as { data: unknown }).data).toEqual(firstBody.data);
  });
});

describe('POST /v1/graphql: search', () => {
  it('text search ranks matching rows of the tenant', async () => {
    const data = await client.request<SearchData>(SEARCH, { text: 'hello' });
    const ids = data.search.results.map((r) => r.record_id).sort();
    expect(ids).toEqual(['d1', 'd2']);
    for (const row of data.search.results) {
      expect(row.tenant_id).toBe('t1');
      expect(row.score.lexical).toBeGreaterThan(0);
      expect(typeof row.score.final_score).toBe('number');
    }
    expect(data.search.explain).toHaveProperty('read_epoch');
    expect(data.search.explain).toHaveProperty('selected_strategy');
  });

  it('vector search puts the nearest row first', async () => {
    const data = await client.request<SearchData>(SEARCH, { vector: [0, 1, 0], top_k: 3 });
    expect(data.search.results[0]!.record_id).toBe('d2');
    expect(data.search.results[0]!.score.vector).not.toBeNull();
  });

  it('scalar_eq filters (JSON literal and variable)', async () => {
    const viaVariable = await client.request<SearchData>(SEARCH, { text: 'hello', scalar_eq: { lang: 'en' } });
    expect(viaVariable.search.results.map((r) => r.record_id)).toEqual(['d1']);
    const viaLiteral = await client.request<{ search: { results: { record_id: string }[] } }>(gql`{
      search(table: "docs", tenant_id: "t1", scalar_eq: { lang: "en", year: 2022 }) { results { record_id } }
    }`);
    expect(viaLiteral.search.results.map((r) => r.record_id)).toEqual(['d3']);
  });

  // found by a black-box review: graphql-js's Float refused a variable's 1e400 as a validation failure
  it('a number past f64 is the same code as a literal or a variable, on route 7 and route 6, as on /v1/query', async () => {
    const viaQuery = await server.post('/v1/query', '{"table":"docs","tenant_id":"t1","vector":[1e400,0,0]}');
    expect(viaQuery.body.code).toBe('vector_not_finite');
    const literal = '{"query":"{ search(table: \\"docs\\", tenant_id: \\"t1\\", vector: [1e400, 0, 0]) { next_cursor } }"}';
    const variable = '{"query":"query($v: [Float!]) { search(table: \\"docs\\", tenant_id: \\"t1\\", vector: $v) { next_cursor } }","variables":{"v":[1e400,0,0]}}';
    for (const body of [literal, variable]) {
      const seven = await server.post('/v1/graphql', body);
      expect(seven.status, body).toBe(200);
      expect(seven.body.errors[0].extensions.code, body).toBe('vector_not_finite');
      const six = await server.post('/v1/graphql/bounded', body);
      expect(six.status, body).toBe(400);
      expect(six.body.code, body).toBe('vector_not_finite');
    }
    // a variable that is not a number is still the validation failure it was
    const text = await server.post('/v1/graphql', { query: 'query($v: [Float!]) { search(table: "docs", tenant_id: "t1", vector: $v) { next_cursor } }', variables: { v: ['x'] } });
    expect(text.body.errors[0].extensions.code).toBe('graphql_validation_failed');
  });

  it('pages with top_k and next_cursor', async () => {
    const first = await client.request<SearchData>(SEARCH, { text: 'hello', top_k: 1 });
    expect(first.search.results).toHaveLength(1);
    expect(first.search.next_cursor).toBeTypeOf('string');
    const second = await client.request<{ search: { results: { record_id: string }[]; next_cursor: string | null } }>(
      gql`query($cursor: String) { search(table: "docs", tenant_id: "t1", text: "hello", top_k: 1, cursor: $cursor) { results { record_id } next_cursor } }`,
      { cursor: first.search.next_cursor },
    );
    expect(second.search.results).toHaveLength(1);
    expect(second.search.results[0]!.record_id).not.toBe(first.search.results[0]!.record_id);
  });

  // found by a black-box review: the typed field writes scalar_eq in the table's column order, and no cursor of
  // another order paged it
  it('a cursor pages the same query written with its filters in another order, on every route', async () => {
    const row = (id: string, emb: number[]) => ({ table: 'docs', tenant_id: 't9', id, fields: { title: 'paged', lang: 'de', year: 2030, emb } });
    expect((await server.post('/v1/records/put-batch', { records: [row('p1', [1, 0, 0]), row('p2', [0, 1, 0]), row('p3', [0, 0, 1])] })).status).toBe(200);
    const first = await server.post('/v1/query', { table: 'docs', tenant_id: 't9', top_k: 1, scalar_eq: { year: 2030, lang: 'de' }, vector: [1, 0, 0] });
    expect(first.status).toBe(200);
    const cursor = first.body.next_cursor;
    expect(cursor).toBeTypeOf('string');
    const typed = await server.post('/v1/graphql', {
      query: 'query($c: String) { docs_search(tenant_id: "t9", top_k: 1, scalar_eq: { lang: "de", year: 2030 }, vector: [1, 0, 0], cursor: $c) { next_cursor } }',
      variables: { c: cursor },
    });
    expect(typed.body.errors).toBeUndefined();
    const ql = await server.post('/v1/nativeql', { query: `SEARCH docs TENANT 't9' NEAR [1, 0, 0] IN emb WHERE lang = 'de' AND year = 2030 LIMIT 1 CURSOR '${cursor}'` });
    expect(ql.status).toBe(200);
    const json = await server.post('/v1/query', { table: 'docs', tenant_id: 't9', top_k: 1, scalar_eq: { lang: 'de', year: 2030 }, vector_field: 'emb', vector: [1, 0, 0], cursor });
    expect(json.status).toBe(200);
    expect(ql.body.results).toEqual(json.body.results);
    expect(json.body.results.map((r: { record_id: string }) => r.record_id)).toEqual(['p2']);
  });

  it('a query argument of the wrong shape is named as the field\'s argument, not a body member', async () => {
    const res = await server.post('/v1/graphql', { query: '{ found: search(table: "docs", tenant_id: "t1", scalar_eq: 5) { next_cursor } }' });
    expect(res.body.errors[0].extensions.code).toBe('invalid_request');
    expect(res.body.errors[0].message).toMatch(/^search\.scalar_eq /);
  });

  // found by a black-box review: GraphQL could not represent the [] and the read failed with internal_error
  it('a typed column reads an [] written before the column had a type as null', async () => {
    const put = (id: string, fields: Record<string, unknown>) => server.post('/v1/records/put', { record: { table: 'late', tenant_id: 't1', id, fields } });
    expect((await put('a', { s: [], n: [], b: [], v: [] })).status).toBe(200);
    expect((await put('b', { s: 'str', n: 5, b: true, v: [1, 2] })).status).toBe(200);
    const res = await server.post('/v1/graphql', { query: '{ late_record(tenant_id: "t1", id: "a") { fields { s n b v } } late_search(tenant_id: "t1") { results { record_id fields { s n b v } } } }' });
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.late_record.fields).toEqual({ s: null, n: null, b: null, v: [] });
    expect(res.body.data.late_search.results).toContainEqual({ record_id: 'a', fields: { s: null, n: null, b: null, v: [] } });
    const untyped = await server.post('/v1/graphql', { query: '{ record(table: "late", tenant_id: "t1", id: "a") { fields } }' });
    expect(untyped.body.data.record.fields).toEqual({ s: [], n: [], b: [], v: [] });
  });

  it('per-table fields expose typed columns and typed scalar_eq', async () => {
    const data = await client.request<{
      docs_search: { results: { record_id: string; fields: { title: string; lang: string; year: number; emb: number[]; links: string[] } }[] };
      docs_record: { fields: { title: string; year: number } };
    }>(gql`{
      docs_search(tenant_id: "t1", text: "hello", scalar_eq: { lang: "en" }) {
        results { record_id fields { title lang year emb links } }
      }
      docs_record(tenant_id: "t1", id: "d2") { fields { title year } }
    }`);
    expect(data.docs_search.results).toEqual([
      { record_id: 'd1', fields: { title: 'hello world', lang: 'en', year: 2024, emb: [1, 0, 0], links: ['d2'] } },
    ]);
    expect(data.docs_record.fields).toEqual({ title: 'hello again', year: 2023 });
  });

  it('tables lists the columns and branches the branches', async () => {
    const data = await client.request<{
      tables: { name: string; columns: { name: string; type: string; dim: number | null; text: boolean; scalar: boolean }[] }[];
      branches: { branch_id: string; database_id: string; state: string }[];
    }>(gql`{ tables { name columns { name type dim text scalar } } branches { branch_id database_id state } }`);
    const docs = data.tables.find((t) => t.name === 'docs')!;
    expect(docs.columns).toContainEqual({ name: 'emb', type: 'vector', dim: 3, text: false, scalar: false });
    expect(docs.columns).toContainEqual({ name: 'title', type: 'string', dim: null, text: true, scalar: true });
    expect(data.branches).toContainEqual({ branch_id: 'main', database_id: 'default', state: 'active' });
  });
});

describe('the reads of one GraphQL request run one at a time', () => {
  // graphql-js starts every root field at once; 32 aliased heavy searches held every call worker of the engine
  // (found by a black-box test), so a request's searches and record reads queue behind each other instead
  it('starts each call once the one before has settled, a failure included', async () => {
    const read = oneAtATime();
    const log: string[] = [];
    let release!: () => void;
    const first = read(async () => {
      log.push('first starts');
      await new Promise<void>((r) => (release = r));
      log.push('first ends');
      throw new Error('first fails');
    });
    const second = read(async () => {
      log.push('second starts');
      return 2;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(log).toEqual(['first starts']);
    release();
    await expect(first).rejects.toThrow('first fails');
    expect(await second).toBe(2);
    expect(log).toEqual(['first starts', 'first ends', 'second starts']);
  });
});

describe('epochs, version ids and counts are SafeInt in answers (found by a black-box test)', () => {
  // GraphQL's Int is 32 bits: a branch past 2^31 - 1 epochs (about 1.5 days of single puts) could not answer `epoch`
  it('holds what a JSON number holds exactly, and refuses what it cannot', () => {
    expect(GraphQLSafeInt.serialize(2 ** 31)).toBe(2 ** 31);
    expect(GraphQLSafeInt.serialize(Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
    for (const bad of [2 ** 53, 1.5, '7', null]) expect(() => GraphQLSafeInt.serialize(bad), String(bad)).toThrow(/SafeInt/);
  });
});

describe('POST /v1/graphql: admin', () => {
  it('declare_table adds a table; tables and the regenerated schema show it', async () => {
    const out = await client.request<{ declare_table: { epoch: number; table: { name: string; columns: { name: string; type: string }[] } } }>(
      gql`mutation($columns: JSON!) { declare_table(table: "people", columns: $columns) { epoch table { name columns { name type } } } }`,
      { columns: { name: { type: 'string', text: true, scalar: true }, age: { type: 'number', scalar: true }, face: { type: 'vector', dim: 2, metric: 'l2' } } },
    );
    expect(out.declare_table.table.columns).toEqual(
      expect.arrayContaining([
        { name: 'name', type: 'string' },
        { name: 'age', type: 'number' },
        { name: 'face', type: 'vector' },
      ]),
    );
    const tables = await client.request<{ tables: { name: string; columns: { name: string; dim: number | null; metric: string | null }[] }[] }>(
      gql`{ tables { name columns { name dim metric } } }`,
    );
    const people = tables.tables.find((t) => t.name === 'people');
    expect(people?.columns).toContainEqual({ name: 'face', dim: 2, metric: 'l2' });
    // the schema was regenerated for the new schema_epoch: people_search exists now
    await client.request(gql`mutation { put(record: { table: "people", tenant_id: "t1", id: "p1", fields: { name: "Ada", age: 36, face: [1, 2] } }) { epoch } }`);
    const typed = await client.request<{ people_search: { results: { fields: { name: string; age: number; face: number[] } }[] } }>(
      gql`{ people_search(tenant_id: "t1", scalar_eq: { age: 36 }) { results { fields { name age face } } } }`,
    );
    expect(typed.people_search.results).toEqual([{ fields: { name: 'Ada', age: 36, face: [1, 2] } }]);
  });

  it('declare_table with a bad column type is an error with the engine code', async () => {
    const res = await lenient.rawRequest(gql`mutation { declare_table(table: "bad", columns: { x: { type: "nope" } }) { epoch } }`);
    expect(res.data).toEqual({ declare_table: null });
    expect(res.errors?.[0]).toMatchObject({ path: ['declare_table'], extensions: { code: 'invalid_record' } });
    // an option of another type is refused, not dropped (found by a black-box test)
    for (const column of ['{ type: "number", dim: 3 }', '{ type: "string", metric: "l2" }']) {
      const lax = await lenient.rawRequest(gql`mutation { declare_table(table: "lax", columns: { x: ${column} }) { epoch } }`);
      expect(lax.errors?.[0], column).toMatchObject({ path: ['declare_table'], extensions: { code: 'invalid_record' } });
      expect(lax.errors?.[0]?.message, column).toMatch(/only a vector column takes (dim|metric)/);
    }
  });

  it('snapshot then restore with verification passed and failed', async () => {
    const snap = await client.request<{ snapshot: { snapshot: boolean; target: string; epoch: number } }>(
      gql`mutation { snapshot(target: "gql_snap") { snapshot target database_id branch_id epoch } }`,
    );
    expect(snap.snapshot).toMatchObject({ snapshot: true, target: 'gql_snap', database_id: 'default', branch_id: 'main' });
    expect(snap.snapshot.epoch).toBe(server.engine.metrics().latest_epoch);

    type Restore = {
      restore: {
        restored: boolean;
        source: string;
        target: string;
        verification: { status: string; record: { id: string; fields: Record<string, unknown> } | null; record_visible: boolean; request: unknown } | null;
      };
    };
    const RESTORE = gql`
      mutation($target: String!, $key: RecordKeyInput) {
        restore(source: "gql_snap", target: $target, verify_record: $key) {
          restored source target
          verification { status record_visible request { table tenant_id id } record { id fields } }
        }
      }
    `;
    const passed = await client.request<Restore>(RESTORE, { target: 'gql_restored', key: { table: 'docs', tenant_id: 't1', id: 'd1' } });
    expect(passed.restore).toMatchObject({ restored: true, source: 'gql_snap', target: 'gql_restored' });
    expect(passed.restore.verification).toMatchObject({
      status: 'passed',
      record_visible: true,
      request: { table: 'docs', tenant_id: 't1', id: 'd1' },
      record: { id: 'd1', fields: { title: 'hello world' } },
    });

    const failed = await client.request<Restore>(RESTORE, { target: 'gql_restored2', key: { table: 'docs', tenant_id: 't1', id: 'missing' } });
    expect(failed.restore.verification).toMatchObject({ status: 'failed', record_visible: false, record: null });

    const none = await client.request<Restore>(RESTORE, { target: 'gql_restored3' });
    expect(none.restore.verification).toBeNull();

    // the restored branch is addressable through the branch header
    const onBranch = new GraphQLClient(`${server.url}/v1/graphql`, { headers: { 'x-braid-branch': 'gql_restored' } });
    const got = await onBranch.request<{ record: { id: string } | null }>(gql`{ record(table: "docs", tenant_id: "t1", id: "d2") { id } }`);
    expect(got.record).toEqual({ id: 'd2' });
  });

  it('restoring a missing snapshot is an error with snapshot_not_found', async () => {
    const res = await lenient.rawRequest(gql`mutation { restore(source: "no_such_snap", target: "x") { restored } }`);
    expect(res.errors?.[0]).toMatchObject({ path: ['restore'], extensions: { code: 'snapshot_not_found' } });
  });
});

describe('POST /v1/graphql: introspection', () => {
  it('loads with buildClientSchema and has every root field', async () => {
    const data = await client.request<IntrospectionQuery>(getIntrospectionQuery());
    const schema = buildClientSchema(data);
    const query = schema.getQueryType()!.getFields();
    for (const f of ['record', 'search', 'tables', 'branches', 'docs_search', 'docs_record']) expect(query).toHaveProperty(f);
    const searchArgs = query.search!.args.map((a) => a.name);
    expect(searchArgs).toEqual(
      expect.arrayContaining([
        'table', 'tenant_id', 'text', 'text_field', 'vector', 'vector_field', 'scalar_eq', 'graph_seed', 'temporal_as_of',
        'freshness', 'top_k', 'cursor', 'explain', 'fusion', 'fusion_weights', 'candidate_budget', 'graph_depth',
      ]),
    );
    const mutation = schema.getMutationType()!.getFields();
    for (const f of ['put', 'put_batch', 'delete', 'snapshot', 'restore', 'declare_table']) expect(mutation).toHaveProperty(f);
    const row = schema.getType('docs_Fields');
    expect(isObjectType(row) && Object.keys(row.getFields()).sort()).toEqual(['emb', 'lang', 'links', 'title', 'year']);
    expect(String(isObjectType(row) && row.getFields().emb!.type)).toBe('[Float!]');
  });
});

describe('POST /v1/graphql: errors', () => {
  it('an engine error is in the 200 body with path and extensions.code', async () => {
    const res = await lenient.rawRequest<{ search: unknown; tables: unknown[] }>(gql`{
      search(table: "nope", tenant_id: "t1", text: "x") { next_cursor }
      tables { name }
    }`);
    expect(res.status).toBe(200);
    expect(res.data.search).toBeNull();
    expect(res.data.tables.length).toBeGreaterThan(0);
    expect(res.errors).toHaveLength(1);
    expect(res.errors![0]).toMatchObject({ path: ['search'], extensions: { code: 'unknown_table' } });
    expect(res.errors![0]!.message).toContain('nope');
  });

  it('graphql-request surfaces the code through ClientError', async () => {
    const err = await client.request(gql`{ search(table: "docs", tenant_id: "t1", top_k: 5000) { next_cursor } }`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ClientError);
    expect((err as ClientError).response.errors?.[0]?.extensions).toEqual({ code: 'top_k_out_of_range', classification: 'BAD_REQUEST' });
  });

  it('a put_batch error names the failing record in extensions.index', async () => {
    const res = await lenient.rawRequest(PUT_BATCH, {
      records: [
        { table: 'docs', tenant_id: 't1', id: 'ok' },
        { table: 'docs', tenant_id: 't1', id: '' },
      ],
    });
    expect(res.errors?.[0]).toMatchObject({ path: ['put_batch'], extensions: { code: 'invalid_name', index: 1 } });
    // fields that are not an object, null included (it had been stored as no fields), name theirs too (found by a black-box review)
    for (const fields of [5, null]) {
      const bad = await lenient.rawRequest(PUT_BATCH, { records: [{ table: 'docs', tenant_id: 't1', id: 'ok' }, { table: 'docs', tenant_id: 't1', id: 'nf', fields }] });
      expect(bad.errors?.[0], String(fields)).toMatchObject({ path: ['put_batch'], extensions: { code: 'invalid_record', index: 1 } });
    }
    const single = await server.post('/v1/graphql', { query: 'mutation { put(record: { table: "docs", tenant_id: "t1", id: "nf", fields: null }) { epoch } }' });
    expect(single.body.errors[0].extensions).toMatchObject({ code: 'invalid_record', index: 0 });
    expect((await server.post('/v1/records/get', { table: 'docs', tenant_id: 't1', id: 'nf' })).body.record).toBeNull();
  });

  it('validation errors are graphql_validation_failed with locations, in a 200 body', async () => {
    const raw = await server.post('/v1/graphql', { query: '{ search(table: "docs", tenant_id: "t1") { nope } }' });
    expect(raw.status).toBe(200);
    expect(raw.body.data).toBeUndefined();
    expect(raw.body.errors[0]).toMatchObject({ extensions: { code: 'graphql_validation_failed' }, locations: [{ line: 1, column: 44 }] });
    const wrongVar = await server.post('/v1/graphql', { query: 'query($k: Int) { search(table: "docs", tenant_id: "t1", top_k: $k) { next_cursor } }', variables: { k: 'ten' } });
    expect(wrongVar.status).toBe(200);
    expect(wrongVar.body.errors[0].extensions.code).toBe('graphql_validation_failed');
  });

  // found by a black-box review: a missing variable inside a JSON literal was left out (the filter dropped, the
  // field not written), and an unquoted word was read as a string where the typed fields refuse it
  it('a JSON literal with an unprovided variable or an unquoted word is graphql_validation_failed, and runs nothing', async () => {
    const before = (await server.get('/v1/metrics/public-safe')).body.latest_epoch;
    const cases: Array<[string, Record<string, unknown> | undefined, string]> = [
      ['query($t: String) { search(table: "docs", tenant_id: "t1", scalar_eq: {lang: $t}) { next_cursor } }', undefined, '$t'],
      ['query($t: String) { search(table: "docs", tenant_id: "t1", scalar_eq: {lang: $t}) { next_cursor } }', { other: 1 }, '$t'],
      ['mutation($t: String) { put(record: {table: "docs", tenant_id: "t1", id: "jsonvar", fields: {title: $t, n: 1}}) { epoch } }', undefined, '$t'],
      ['mutation($t: String) { put(record: {table: "docs", tenant_id: "t1", id: "jsonvar", fields: {tags: [1, $t]}}) { epoch } }', undefined, '$t'],
      ['{ search(table: "docs", tenant_id: "t1", scalar_eq: {lang: en}) { next_cursor } }', undefined, 'quote it'],
      ['mutation { put(record: {table: "docs", tenant_id: "t1", id: "jsonvar", fields: {flag: TRUE}}) { epoch } }', undefined, 'quote it'],
    ];
    for (const [query, variables, says] of cases) {
      const res = await server.post('/v1/graphql', variables ? { query, variables } : { query });
      expect(res.status, query).toBe(200);
      expect(res.body.errors?.[0]?.extensions?.code, JSON.stringify(res.body)).toBe('graphql_validation_failed');
      expect(res.body.errors[0].message, query).toContain(says);
    }
    expect((await server.post('/v1/graphql/bounded', { query: cases[0]![0] })).body.code).toBe('graphql_validation_failed');
    expect((await server.get('/v1/metrics/public-safe')).body.latest_epoch).toBe(before);
    // given, as a value or as null, the variable is read as before
    const en = await server.post('/v1/graphql', { query: cases[0]![0], variables: { t: 'en' } });
    expect(en.body.errors).toBeUndefined();
    const quoted = await server.post('/v1/graphql', { query: '{ search(table: "docs", tenant_id: "t1", scalar_eq: {lang: "en"}) { results { record_id } } }' });
    expect(quoted.body.data.search.results.map((r: { record_id: string }) => r.record_id).sort()).toEqual(['d1', 'd3']);
    const nulled = await server.post('/v1/graphql', { query: cases[0]![0], variables: { t: null } });
    expect(nulled.body.errors?.[0]?.extensions?.code).toBe('invalid_query');
  });

  it('a body that is not a GraphQL request is 400 graphql_bad_request; a document that does not parse is a GraphQL error', async () => {
    const persisted = { extensions: { persistedQuery: { version: 1, sha256Hash: 'ab'.repeat(32) } } };
    for (const body of [{}, { query: 5 }, { query: '{ tables { name } }', extra: 1 }, [{ query: '{ tables { name } }' }], persisted, { query: '{ tables { name } }', extensions: 5 }]) {
      const res = await server.post('/v1/graphql', body);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('graphql_bad_request');
    }
    // GraphQL over HTTP's `extensions` member is accepted and ignored (a black-box review: Apollo clients send it)
    for (const extensions of [{ persistedQuery: { version: 1, sha256Hash: 'ab'.repeat(32) } }, null]) {
      const res = await server.post('/v1/graphql', { query: '{ tables { name } }', extensions });
      expect(res.status).toBe(200);
      expect(res.body.errors).toBeUndefined();
      expect(Array.isArray(res.body.data.tables)).toBe(true);
    }
    // a document that does not parse is a GraphQL error in the 200 body (spec 4.3.3) ...
    const parse = await server.post('/v1/graphql', { query: '{ tables { name }' });
    expect(parse.status).toBe(200);
    expect(parse.body.errors[0]).toMatchObject({ extensions: { code: 'graphql_bad_request' } });
    expect(parse.body.errors[0].message).toMatch(/Syntax Error.*line 1, column 18/);
    // ... and a 400 for a client that accepts application/graphql-response+json (GraphQL over HTTP)
    await expectGraphQLHttpError(client.request('query {'), 400, 'graphql_bad_request');
  });

  // found by a black-box test: these never executed, yet answered 200 to a GraphQL-over-HTTP client
  it('a document that does not validate, or whose variables do not coerce, is a 400 for a client that accepts application/graphql-response+json', async () => {
    const accept = { accept: 'application/graphql-response+json' };
    for (const [query, variables] of [
      ['{ nosuch }', undefined],
      ['query($t: String!) { search(table: $t, tenant_id: "acme") { next_cursor } }', { t: 5 }],
      ['{ ...Nope }', undefined],
      ['subscription { tables { name } }', undefined],
    ] as const) {
      const plain = await server.post('/v1/graphql', { query, variables });
      expect(plain.status, query).toBe(200);
      expect(plain.body.errors[0].extensions.code, query).toBe('graphql_validation_failed');
      expect('data' in plain.body, `${query}: nothing executed, so no data`).toBe(false);
      const over = await server.post('/v1/graphql', { query, variables }, accept);
      expect(over.status, query).toBe(400);
      expect(over.body).toMatchObject({ code: 'graphql_validation_failed', error: expect.any(String) });
    }
    // an answer is of the type the client accepts
    const ok = await server.post('/v1/graphql', { query: '{ tables { name } }' }, accept);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toBe('application/graphql-response+json; charset=utf-8');
    expect(ok.body.data.tables).toEqual(expect.any(Array));
    expect((await server.post('/v1/graphql', { query: '{ tables { name } }' })).headers.get('content-type')).toMatch(/^application\/json/);
    // an idempotent replay too (found by a black-box test: it came back as application/json)
    const keyed = { ...accept, 'idempotency-key': 'graphql-over-http-replay' };
    const first = await server.post('/v1/graphql', { query: '{ tables { name } }' }, keyed);
    const again = await server.post('/v1/graphql', { query: '{ tables { name } }' }, keyed);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    for (const res of [first, again]) expect(res.headers.get('content-type')).toBe('application/graphql-response+json; charset=utf-8');
  });

  it('operationName picks the operation; a missing one is an error', async () => {
    const doc = 'query A { tables { name } } query B { branches { branch_id } }';
    const b = await server.post('/v1/graphql', { query: doc, operationName: 'B' });
    expect(b.status).toBe(200);
    expect(b.body.data.branches.length).toBeGreaterThan(0);
    const none = await server.post('/v1/graphql', { query: doc });
    expect(none.status).toBe(200);
    expect(none.body.errors[0].extensions.code).toBe('graphql_validation_failed');
  });
});

describe('typed access is bounded (found by a black-box test: 10,000 tables made every schema rebuild take seconds)', () => {
  it('tables in name order get typed fields until their columns would pass 10,000; the rest are reached through search', () => {
    const table = (name: string, n: number) => ({
      name,
      columns: Object.fromEntries(Array.from({ length: n }, (_, i) => [`c${i}`, { type: 'number', text: false, scalar: true }])),
    });
    // a table given no typed access (its name starts with __) costs nothing of the budget
    const tables = [table('__skipped', 3), table('a', 6000), table('b', 4000), table('c', 1)];
    const schema = buildNativeSchema(tables as never);
    const fields = schema.getQueryType()?.getFields() ?? {};
    expect(Object.keys(fields)).toEqual(expect.arrayContaining(['a_search', 'b_search', 'search', 'record']));
    expect(fields.c_search).toBeUndefined();
    expect(fields.___skipped_search).toBeUndefined();
    expect(MAX_TYPED_COLUMNS).toBe(10_000);
  });
});

describe('GraphQL error codes', () => {
  it('an error graphql-js raises at a field path (a value the schema cannot represent) is internal_error, not the client\'s', () => {
    const atField = formatGraphQLError(
      new GraphQLError('Float cannot represent non numeric value: Infinity', { path: ['search', 'results', 0, 'score', 'vector'] }),
    );
    expect(atField.extensions).toEqual({ code: 'internal_error', classification: 'INTERNAL_ERROR' });
    expect(atField.path).toEqual(['search', 'results', 0, 'score', 'vector']);
    // a document that does not validate has no path and stays the client's error
    const invalid = formatGraphQLError(new GraphQLError('Cannot query field "nope" on type "Query".'));
    expect(invalid.extensions).toEqual({ code: 'graphql_validation_failed', classification: 'BAD_REQUEST' });
  });
});

describe('POST /v1/graphql: limits', () => {
  it('rejects a query deeper than 8 with graphql_too_deep before execution', async () => {
    const deep = '{ a { b { c { d { e { f { g { h { i } } } } } } } } }';
    const err = await expectGraphQLHttpError(client.request(deep), 400, 'graphql_too_deep');
    expect(err.response.body).toMatch(/limit of 8/);
  });

  it('bounds introspection depth and list nesting separately', async () => {
    let ofType = 'name';
    for (let i = 0; i < 20; i++) ofType = `ofType { ${ofType} }`;
    const deep = await server.post('/v1/graphql', { query: `{ __type(name: "Query") { ${ofType} } }` });
    expect(deep.status).toBe(200);
    expect(deep.body.errors[0].extensions.code).toBe('graphql_too_deep');
    expect(deep.body.errors[0].message).toMatch(/introspection depth exceeds the limit of 20/);
    const fanout = await server.post('/v1/graphql', { query: '{ __schema { types { fields { type { fields { type { fields { name } } } } } } } }' });
    expect(fanout.status).toBe(200);
    expect(fanout.body.errors[0].extensions.code).toBe('graphql_too_costly');
  });

  it('rejects a query costing more than 5000 with graphql_too_costly', async () => {
    const costly = gql`{
      search(table: "docs", tenant_id: "t1", top_k: 1000) {
        results { record_id tenant_id version_id fields score { final_score lexical vector relational freshness_penalty } }
      }
    }`;
    const err = await expectGraphQLHttpError(client.request(costly), 400, 'graphql_too_costly');
    expect(err.response.body).toMatch(/limit of 5000/);
    // the same selection at top_k 100 is within the limit
    const ok = await client.request<SearchData>(costly.replace('1000', '100'));
    expect(ok.search.results.length).toBeGreaterThan(0);
    // top_k from a variable counts too
    const viaVar = await server.post('/v1/graphql', {
      query: 'query($k: Int) { search(table: "docs", tenant_id: "t1", top_k: $k) { results { record_id tenant_id version_id fields score { final_score lexical vector relational freshness_penalty } } } }',
      variables: { k: 1000 },
    });
    expect(viaVar.status).toBe(200);
    expect(viaVar.body.errors[0].extensions.code).toBe('graphql_too_costly');
    // a variable's default counts when the variable is left out; sent as null
    // it overrides the default and top_k runs as omitted (10): found by a
    // black-box review, which had the cheap query refused
    const defaulted = 'query($k: Int = 1000) { search(table: "docs", tenant_id: "t1", top_k: $k) { results { record_id tenant_id version_id fields score { final_score lexical vector relational freshness_penalty } } } }';
    const leftOut = await server.post('/v1/graphql', { query: defaulted });
    expect(leftOut.body.errors[0].extensions.code).toBe('graphql_too_costly');
    const sentNull = await server.post('/v1/graphql', { query: defaulted, variables: { k: null } });
    expect(sentNull.body.errors).toBeUndefined();
    expect(sentNull.body.data.search.results.length).toBeGreaterThan(0);
    expect(sentNull.body.data.search.results.length).toBeLessThanOrEqual(10);
  });

  // found by a fuzz review: a variable of a million numbers held the JavaScript thread for a second while it was coerced
  it('refuses a list variable longer than a batch or a vector before coercing it, on both routes', async () => {
    const search = 'query($v: [Float!]) { search(table: "docs", tenant_id: "t1", vector: $v) { next_cursor } }';
    const long = Array.from({ length: 10_001 }, () => 0.5);
    const res = await server.post('/v1/graphql', { query: search, variables: { v: long } });
    expect(res.status).toBe(200);
    expect(res.body.data).toBeUndefined();
    expect(res.body.errors[0].extensions.code).toBe('graphql_too_costly');
    expect(res.body.errors[0].message).toContain('variable $v holds 10001 values; a list variable holds at most 10000');
    const bounded = await server.post('/v1/graphql/bounded', { query: search, variables: { v: long } });
    expect(bounded.status).toBe(400);
    expect(bounded.body.code).toBe('graphql_too_costly');
    // at the limit it is coerced and judged by the engine as any vector is
    const judged = await server.post('/v1/graphql', { query: search, variables: { v: long.slice(1) } });
    expect(judged.body.errors[0].extensions.code).not.toBe('graphql_too_costly');
  });

  it('counts fragments and aliases', async () => {
    const fields = Array.from({ length: 60 }, (_, i) => `t${i}: tables { name columns { name type } }`).join(' ');
    const res = await server.post('/v1/graphql', { query: `query { ...F } fragment F on Query { ${fields} }` });
    expect(res.status).toBe(200);
    expect(res.body.errors[0].extensions.code).toBe('graphql_too_costly');
    expect(res.body.data).toBeUndefined();
  });
});

describe('POST /v1/graphql/bounded', () => {
  const BOUNDED = `query($text: String, $k: Int) {
    search(table: "docs", tenant_id: "t1", text: $text, top_k: $k) {
      results { record_id score { final_score } }
      next_cursor
    }
  }`;

  // every row scored by the index: the tests here compare two requests, and the indexer catching up
  // between them would change a freshness_penalty
  beforeAll(async () => {
    expect(await server.engine.waitIndexed(30_000)).toBe(true);
  });

  it('returns the full QueryResponse, the same rows as engine.query and /v1/nativeql', async () => {
    const res = await server.post('/v1/graphql/bounded', { query: BOUNDED, variables: { text: 'hello', k: 5 } });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['explain', 'next_cursor', 'results']);
    // every row field is there, whatever the selection
    expect(Object.keys(res.body.results[0]).sort()).toEqual(['fields', 'record_id', 'score', 'tenant_id', 'version_id']);
    expect(res.body.explain).toHaveProperty('read_epoch');

    const direct = await server.engine.query({ table: 'docs', tenant_id: 't1', text: 'hello', top_k: 5 });
    expect(res.body.results).toEqual(direct.results);
    expect(res.body.next_cursor).toEqual(direct.next_cursor);

    const native = await server.post('/v1/nativeql', { query: "SEARCH docs TENANT 't1' MATCH 'hello' LIMIT 5" });
    expect(native.status).toBe(200);
    expect(res.body.results).toEqual(native.body.results);
    expect(res.body.next_cursor).toEqual(native.body.next_cursor);
  });

  it('takes literal arguments, vectors and scalar_eq', async () => {
    const res = await server.post('/v1/graphql/bounded', {
      query: '{ search(table: "docs", tenant_id: "t1", vector: [0, 1, 0], scalar_eq: { lang: "fr" }, top_k: 3) { results { record_id } } }',
    });
    expect(res.status).toBe(200);
    expect(res.body.results.map((r: { record_id: string }) => r.record_id)).toEqual(['d2']);
    const direct = await server.engine.query({ table: 'docs', tenant_id: 't1', vector: [0, 1, 0], scalar_eq: { lang: 'fr' }, top_k: 3 });
    expect(res.body.results).toEqual(direct.results);
  });

  it('allows fragments on the bounded types', async () => {
    const res = await server.post('/v1/graphql/bounded', {
      query: 'query { search(table: "docs", tenant_id: "t1", text: "hello") { ...R } } fragment R on SearchResult { results { ... on HybridRow { record_id } } }',
    });
    expect(res.status).toBe(200);
    expect(res.body.results.length).toBe(2);
  });

  it.each([
    ['a mutation', 'mutation { put(record: { table: "docs", tenant_id: "t1", id: "x" }) { epoch } }', /mutation operations are not allowed/],
    ['another root field', '{ tables { name } }', /field "tables" is not allowed on Query/],
    ['an extra root field', '{ search(table: "docs", tenant_id: "t1") { next_cursor } search2: search(table: "docs", tenant_id: "t1") { next_cursor } }', /aliases are not allowed/],
    ['two searches', '{ search(table: "docs", tenant_id: "t1") { next_cursor } ... on Query { search(table: "docs", tenant_id: "t2") { next_cursor } } }', /exactly one top-level field/],
    ['an extra field', '{ search(table: "docs", tenant_id: "t1") { results { record_id secret } } }', /field "secret" is not allowed on HybridRow/],
    ['introspection', '{ __schema { types { name } } }', /field "__schema" is not allowed/],
    ['__typename', '{ search(table: "docs", tenant_id: "t1") { __typename } }', /field "__typename" is not allowed/],
    ['a fragment on another type', '{ search(table: "docs", tenant_id: "t1") { ... on HybridRow { record_id } } }', /fragments on type HybridRow are not allowed/],
    ['a directive', '{ search(table: "docs", tenant_id: "t1") @include(if: true) { next_cursor } }', /directives are not allowed/],
    ['two operations', 'query A { search(table: "docs", tenant_id: "t1") { next_cursor } } query B { search(table: "docs", tenant_id: "t1") { next_cursor } }', /exactly one operation/],
  ])('rejects %s with graphql_not_allowed', async (_name, query, message) => {
    const res = await server.post('/v1/graphql/bounded', { query });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('graphql_not_allowed');
    expect(res.body.error).toMatch(message);
  });

  // found by a black-box review: the answer is the whole QueryResponse whatever is selected, yet a search
  // selecting row fields was refused where the same one selecting next_cursor alone, with the same answer, passed
  it('costs a selection by its size, not by top_k: its answer is the whole response, as /v1/nativeql answers', async () => {
    const full = 'results { record_id tenant_id version_id fields score { final_score lexical vector relational freshness_penalty } }';
    const res = await server.post('/v1/graphql/bounded', { query: `{ search(table: "docs", tenant_id: "t1", text: "hello", top_k: 1000) { ${full} next_cursor } }` });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const cursorOnly = await server.post('/v1/graphql/bounded', { query: '{ search(table: "docs", tenant_id: "t1", text: "hello", top_k: 1000) { next_cursor } }' });
    expect(cursorOnly.body.results).toEqual(res.body.results);
    // a selection that expands past 2000 fields is still refused
    const frags = ['fragment S0 on ScoreComponents { final_score lexical }'];
    for (let i = 1; i <= 12; i++) frags.push(`fragment S${i} on ScoreComponents { ...S${i - 1} ...S${i - 1} }`);
    const costly = await server.post('/v1/graphql/bounded', { query: `{ search(table: "docs", tenant_id: "t1") { results { score { ...S12 } } } } ${frags.join(' ')}` });
    expect(costly.status).toBe(400);
    expect(costly.body.code).toBe('graphql_too_costly');
    expect(costly.body.error).toMatch(/limit of 2000/);
  });

  it('reports invalid arguments, engine errors and bad bodies with their codes', async () => {
    const badArg = await server.post('/v1/graphql/bounded', { query: '{ search(table: "docs", tenant_id: "t1", top_k: "x") { next_cursor } }' });
    expect(badArg.status).toBe(400);
    expect(badArg.body.code).toBe('graphql_validation_failed');
    const missingVar = await server.post('/v1/graphql/bounded', { query: 'query($t: String!) { search(table: $t, tenant_id: "t1") { next_cursor } }' });
    expect(missingVar.status).toBe(400);
    expect(missingVar.body.code).toBe('graphql_validation_failed');
    const engineErr = await server.post('/v1/graphql/bounded', { query: '{ search(table: "nope", tenant_id: "t1") { next_cursor } }' });
    expect(engineErr.status).toBe(400);
    expect(engineErr.body.code).toBe('unknown_table');
    const parse = await server.post('/v1/graphql/bounded', { query: '{ search(' });
    expect(parse.status).toBe(400);
    expect(parse.body.code).toBe('graphql_bad_request');
    const body = await server.post('/v1/graphql/bounded', { q: '{}' });
    expect(body.status).toBe(400);
    expect(body.body.code).toBe('graphql_bad_request');
  });
});

describe('GET /v1/graphql/schema', () => {
  it('exports the bounded SDL, the adapter and the tables of the branch', async () => {
    const res = await server.get('/v1/graphql/schema');
    expect(res.status).toBe(200);
    expect(res.body.adapter).toBe('braid-bounded-graphql/1');
    expect(res.body.execution).toMatch(/^graphql-js\/16\.\d+\.\d+ in-process against braid-engine$/);
    expect(res.body.tables).toEqual(expect.arrayContaining(['docs', 'notes', 'people']));
    const schema = buildSchema(res.body.schema);
    expect(Object.keys(schema.getQueryType()!.getFields())).toEqual(['search']);
    expect(schema.getMutationType()).toBeUndefined();
    expect(Object.keys((schema.getType('SearchResult') as never as { getFields(): object }).getFields()).sort()).toEqual(['explain', 'next_cursor', 'results']);
  });

  it('lists the tables of the addressed branch', async () => {
    const res = await server.get('/v1/graphql/schema', { 'x-braid-branch': 'gql_restored' });
    expect(res.status).toBe(200);
    expect(res.body.tables).toContain('docs');
    expect(res.body.tables).toEqual((await server.engine.schemas({ branchId: 'gql_restored' })).map((t) => t.name));
    const missing = await server.get('/v1/graphql/schema', { 'x-braid-branch': 'no_such_branch' });
    expect(missing.status).toBe(404);
    expect(missing.body.code).toBe('branch_not_found');
  });

  // the names are cached per schema epoch (a black-box review timed 0.5-0.7 s a call at 300,000 columns)
  it('lists a table made after the last call', async () => {
    const before = (await server.get('/v1/graphql/schema', { 'x-braid-branch': 'gql_restored' })).body.tables as string[];
    expect(before).not.toContain('made_later');
    const put = await server.post('/v1/records/put', { record: { table: 'made_later', tenant_id: 't1', id: '1', fields: { n: 1 } } }, { 'x-braid-branch': 'gql_restored' });
    expect(put.status).toBe(200);
    const after = (await server.get('/v1/graphql/schema', { 'x-braid-branch': 'gql_restored' })).body.tables as string[];
    expect(after).toEqual(expect.arrayContaining([...before, 'made_later']));
    expect(after).toEqual((await server.engine.schemas({ branchId: 'gql_restored' })).map((t) => t.name));
  });
});

describe('fragment explosion (issue 16 item 1)', () => {
  // 41 fragments, each spreading the previous one twice: 2^40 expansions
  // from a few hundred tokens, which used to stop the event loop
  function explosive(root: string, leaf: string): string {
    const defs = [`fragment F0 on ${root} { ${leaf} }`];
    for (let i = 1; i <= 40; i++) defs.push(`fragment F${i} on ${root} { ...F${i - 1} ...F${i - 1} }`);
    return `query { ...F40 } ${defs.join(' ')}`;
  }

  it('route 7 rejects it by cost without expanding it, while /v1/ready keeps answering', async () => {
    const doc = explosive('Query', 'tables { name }');
    const [res, ready] = await Promise.all([
      server.post('/v1/graphql', { query: doc }),
      server.get('/v1/ready'),
    ]);
    expect(ready.status).toBe(200);
    expect(res.status).toBe(200);
    expect(res.body.errors[0].extensions.code).toBe('graphql_too_costly');
    await expectGraphQLHttpError(client.request(doc), 400, 'graphql_too_costly');
  });

  it('unknown and cyclic fragments are rejected before the limits walk', async () => {
    const unknown = await server.post('/v1/graphql', { query: 'query { ...Nope }' });
    expect(unknown.body.errors[0]).toMatchObject({ extensions: { code: 'graphql_validation_failed' } });
    expect(unknown.body.errors[0].message).toMatch(/Unknown fragment "Nope"/);
    const cycle = await server.post('/v1/graphql', { query: 'query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }' });
    expect(cycle.body.errors[0].message).toMatch(/Cannot spread fragment "A" within itself/);
    // the exploit: a cycle costs nothing in the limits walk, so 2^40 spreads of
    // it used to run on the event loop; now the cycle is refused first
    const [exploit, ready] = await Promise.all([
      server.post('/v1/graphql', { query: explosive('Query', '...F40') }),
      server.get('/v1/ready'),
    ]);
    expect(ready.status).toBe(200);
    expect(exploit.body.errors[0].extensions.code).toBe('graphql_validation_failed');
    const bounded = await server.post('/v1/graphql/bounded', { query: explosive('Query', '...F40') });
    expect(bounded.status).toBe(400);
  });

  it('the bounded route rejects it with a 400 at once', async () => {
    const res = await server.post('/v1/graphql/bounded', { query: explosive('Query', 'search(table: "docs", tenant_id: "t1") { next_cursor }') });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('graphql_not_allowed');
    // fragments on a nested type add no top-level field: the cost limit stops them
    const nested = ['fragment R0 on SearchResult { next_cursor }'];
    for (let i = 1; i <= 40; i++) nested.push(`fragment R${i} on SearchResult { ...R${i - 1} ...R${i - 1} }`);
    const deep = await server.post('/v1/graphql/bounded', { query: `query { search(table: "docs", tenant_id: "t1") { ...R40 } } ${nested.join(' ')}` });
    expect(deep.status, JSON.stringify(deep.body)).toBe(400);
    expect(deep.body.code).toBe('graphql_too_costly');
    expect((await server.get('/v1/ready')).status).toBe(200);
  });
});
