// The embedded API (src/engine.ts through src/index.ts): the documented example of docs/embedded.md
// really runs, and errors carry stable codes.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BraidError, open, type Braid, type OpenOptions, type RecordInput, type RecordKey } from '../src/index.js';
import { QlSyntaxError } from '../src/ql/index.js';
import { ROOT, tempDir } from './helpers.js';

/** The ```ts blocks of a markdown file. */
function tsBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

describe('docs/embedded.md', () => {
  const markdown = readFileSync(path.join(ROOT, 'docs', 'embedded.md'), 'utf8');
  const examples = tsBlocks(markdown).filter((b) => b.includes('db.close()'));

  it('has exactly one complete example, importing braid-db', () => {
    expect(examples).toHaveLength(1);
    expect(examples[0]).toMatch(/from 'braid-db'/);
    for (const step of ['putBatch', 'scalar_eq', 'nativeQuery', 'next_cursor', 'snapshot(', 'restore(', 'branches()', 'close()']) {
      expect(examples[0], step).toContain(step);
    }
  });

  it('the example runs against the real engine', async () => {
    const source = examples[0]!.replaceAll("'braid-db'", JSON.stringify(path.join(ROOT, 'src', 'index.ts')));
    const file = path.join(ROOT, 'test', `.tmp-embedded-example-${process.pid}.test-helper.ts`);
    writeFileSync(file, source);
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    try {
      await import(file);
      const lines = log.mock.calls.map((args) => args.join(' '));
      expect(lines).toContain('committed at epoch 1');
      expect(lines).toContain('invalid_name 400');
      expect(lines.some((l) => l.startsWith('restored into audit'))).toBe(true);
      // snapshot answers as route 10 does (issue 17): its name is `target`
      expect(lines.some((l) => /^snapshot before_cleanup at epoch \d+$/.test(l))).toBe(true);
    } finally {
      log.mockRestore();
      rmSync(file, { force: true });
    }
  });
});

describe('embedded API errors carry stable codes', () => {
  let dir: string;
  let db: Braid;

  beforeAll(async () => {
    dir = tempDir('braid-embedded-');
    db = open({ dataDir: dir });
    await db.putBatch([
      { table: 'notes', tenant_id: 't', id: 'n1', fields: { title: 'hello world', n: 1, emb: [1, 0] } },
      { table: 'notes', tenant_id: 't', id: 'n2', fields: { title: 'hello again', n: 2, emb: [0, 1] } },
    ]);
  });

  afterAll(() => {
    db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function codeOf(promise: Promise<unknown>): Promise<string> {
    const err = await promise.then(
      () => expect.unreachable('expected a rejection'),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BraidError);
    return (err as BraidError).code;
  }

  it('invalid_name for a bad table name and an empty id', async () => {
    expect(await codeOf(db.put({ table: 'no-dashes', tenant_id: 't', id: 'x' }))).toBe('invalid_name');
    expect(await codeOf(db.put({ table: 'notes', tenant_id: 't', id: '' }))).toBe('invalid_name');
    expect(await codeOf(db.snapshot('bad name'))).toBe('invalid_name');
  });

  it('schema_type_mismatch for a value of another type, with the batch index', async () => {
    const err = await db
      .putBatch([
        { table: 'notes', tenant_id: 't', id: 'ok', fields: { n: 3 } },
        { table: 'notes', tenant_id: 't', id: 'bad', fields: { n: 'three' } },
      ])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BraidError);
    expect((err as BraidError).code).toBe('schema_type_mismatch');
    expect((err as BraidError).status).toBe(400);
    expect((err as BraidError).index).toBe(1);
    // the batch is atomic: nothing was written
    expect(await db.get({ table: 'notes', tenant_id: 't', id: 'ok' })).toBeNull();
  });

  it('vector_dimension_mismatch and top_k_out_of_range from queries', async () => {
    expect(await codeOf(db.query({ table: 'notes', tenant_id: 't', text: 'hello', top_k: 0 }))).toBe('top_k_out_of_range');
    expect(await codeOf(db.query({ table: 'notes', tenant_id: 't', text: 'hello', top_k: 1001 }))).toBe('top_k_out_of_range');
    expect(await codeOf(db.query({ table: 'notes', tenant_id: 't', text: 'hello', top_k: Infinity }))).toBe('top_k_out_of_range');
    expect(await codeOf(db.nativeQuery("SEARCH notes TENANT 't' MATCH 'hello' LIMIT 0"))).toBe('top_k_out_of_range');
    expect(await codeOf(db.query({ table: 'notes', tenant_id: 't', vector: [1, 0, 0] }))).toBe('vector_dimension_mismatch');
  });

  it('nativeQuery runs a statement like query does', async () => {
    const native = await db.nativeQuery("SEARCH notes TENANT 't' MATCH 'hello' WHERE n = 2 LIMIT 5");
    const direct = await db.query({ table: 'notes', tenant_id: 't', text: 'hello', scalar_eq: { n: 2 }, top_k: 5 });
    expect(native.results.map((r) => r.record_id)).toEqual(['n2']);
    expect(direct.results.map((r) => r.record_id)).toEqual(['n2']);
    const other = await db.nativeQuery("SEARCH notes TENANT 't' MATCH 'hello'", { branchId: 'main' });
    expect(other.results).toHaveLength(2);
  });

  it('nativeQuery rejects text that does not parse with QlSyntaxError (ql_syntax_error)', async () => {
    const err = await db.nativeQuery("SEARCH notes TENANT 't' LIMTI 5").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QlSyntaxError);
    const ql = err as QlSyntaxError;
    expect(ql.name).toBe('QlSyntaxError');
    expect(ql.diagnostic.line).toBe(1);
    expect(ql.diagnostic.column).toBe(25);
    expect(ql.diagnostic.found).toBe("'LIMTI'");
    expect(ql.message).toMatch(/^line 1, column 25: expected/);
    // a non-string is invalid_request, as POST /v1/nativeql answers {"query": 42} (a black-box test found
    // ql_syntax_error here), and not a TypeError
    const notText = await db.nativeQuery(42 as unknown as string).catch((e: unknown) => e);
    expect(notText).toBeInstanceOf(BraidError);
    expect(notText).not.toBeInstanceOf(QlSyntaxError);
    expect((notText as BraidError).code).toBe('invalid_request');
  });

  it('snapshot_exists, snapshot_not_found, branch_exists, branch_not_found', async () => {
    await db.snapshot('s1');
    expect(await codeOf(db.snapshot('s1'))).toBe('snapshot_exists');
    expect(await codeOf(db.restore('nope', 'b1'))).toBe('snapshot_not_found');
    await db.restore('s1', 'b1');
    expect(await codeOf(db.restore('s1', 'b1'))).toBe('branch_exists');
    expect(await codeOf(db.get({ table: 'notes', tenant_id: 't', id: 'n1' }, { branchId: 'nope' }))).toBe('branch_not_found');
    expect((await db.get({ table: 'notes', tenant_id: 't', id: 'n1' }, { branchId: 'b1' }))?.fields.title).toBe('hello world');
  });

  it('data_dir_locked when the data directory is already held', () => {
    let err: unknown;
    try {
      open({ dataDir: dir }).close();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BraidError);
    expect((err as BraidError).code).toBe('data_dir_locked');
  });

  // found by a black-box test: JavaScript's own TypeError text, and no index for an oversized put
  it('arguments of the wrong JavaScript type are invalid_request in words of their own', async () => {
    const batch = await db.putBatch('nope' as unknown as RecordInput[]).catch((e: unknown) => e);
    expect(batch).toMatchObject({ code: 'invalid_request', message: 'records must be an array, got string' });
    const get = await db.get(null as unknown as RecordKey).catch((e: unknown) => e);
    expect(get).toMatchObject({ code: 'invalid_request', message: 'the key must be an object {table, tenant_id, id}, got null' });
    expect(() => open(undefined as unknown as OpenOptions)).toThrow(expect.objectContaining({ code: 'invalid_record', message: expect.stringContaining('open options must be an object') }));
    const huge = await db.put(new Array(2 ** 32 - 1) as unknown as RecordInput).catch((e: unknown) => e);
    expect(huge).toMatchObject({ code: 'invalid_record', index: 0 });
  });

  // found by a black-box review: an Int32Array vector, a Date as the query and a top-level
  // __proto__ reached the engine, or were judged by another code than the docs give them
  it('a query of the wrong shape has the code of its kind, whatever JavaScript object carries it', async () => {
    const base = { table: 'notes', tenant_id: 't' };
    for (const vector of [new Int32Array([1, 0]), new DataView(new ArrayBuffer(8))]) {
      expect(await db.query({ ...base, vector } as never).catch((e: unknown) => e)).toMatchObject({ code: 'invalid_request', message: expect.stringMatching(/^query\.vector must be array/) });
    }
    expect(await db.query(new Date() as never).catch((e: unknown) => e)).toMatchObject({ code: 'invalid_request', message: expect.stringMatching(/got a Date$/) });
    const proto = JSON.parse('{"table":"notes","tenant_id":"t","__proto__":{}}');
    expect(await db.query(proto).catch((e: unknown) => e)).toMatchObject({ code: 'invalid_query', message: expect.stringMatching(/^query\.__proto__ is a key named __proto__/) });
    expect(await db.explain(proto).catch((e: unknown) => e)).toMatchObject({ code: 'invalid_query' });
    // the embedded API has no body: a member is named as the query's (it said body.top_k)
    expect(await db.explain({ ...base, top_k: 'ten' } as never).catch((e: unknown) => e)).toMatchObject({ code: 'invalid_request', message: 'query.top_k must be integer' });
    // a whole number past 2^53 is named as such
    const epoch = await db.get({ ...base, id: 'x' }, { epoch: 2 ** 60 }).catch((e: unknown) => e);
    expect(epoch).toMatchObject({ code: 'invalid_query', message: expect.stringMatching(/from 0 to 2\^53 - 1/) });
  });

  // found by a black-box review: options given as a string were read as none (a put meant for a
  // branch went to main), 'false' archived a branch, and open options of the wrong type were a 503
  it('options of the wrong type are refused, not read as none, and write nothing', async () => {
    const before = db.metrics().latest_epoch;
    const rec = { table: 'notes', tenant_id: 't', id: 'opt' };
    const refused: Array<[string, () => Promise<unknown>, RegExp]> = [
      ['put', () => db.put(rec, 'b1' as never), /^options must be an object such as \{branchId: 'main'\}, got string$/],
      ['putBatch', () => db.putBatch([rec], 5 as never), /got number/],
      ['delete', () => db.delete(rec, [] as never), /got an array/],
      ['get', () => db.get(rec, 'b1' as never), /got string/],
      ['get epoch', () => db.get(rec, { epoch: '2' } as never), /^options\.epoch must be a number, got string$/],
      ['query', () => db.query({ table: 'notes', tenant_id: 't' }, 'b1' as never), /got string/],
      ['branchId', () => db.query({ table: 'notes', tenant_id: 't' }, { branchId: 7 } as never), /^options\.branchId must be a string, got number$/],
      ['nativeQuery', () => db.nativeQuery("SEARCH notes TENANT 't'", 'b1' as never), /got string/],
      ['declareTable', () => db.declareTable('opt_t', { x: { type: 'number' } }, 'b1' as never), /got string/],
      ['schemas', () => db.schemas('b1' as never), /got string/],
      ['snapshot', () => db.snapshot('opt_s', 'b1' as never), /got string/],
      ['setBranchArchived', () => db.setBranchArchived('false' as never), /^archived must be true or false, got string$/],
      // found by a black-box review: a misspelt option was ignored (the write went to main), and one
      // inherited from the prototype was followed
      ['misspelt', () => db.put(rec, { brnachId: 'b1' } as never), /^unknown option "brnachId"; the options are databaseId, branchId/],
      ['inherited', () => db.put(rec, Object.create({ branchId: 'b1' })), /^option branchId is inherited from the options' prototype/],
    ];
    for (const [what, run, message] of refused) {
      const err = await run().catch((e: unknown) => e);
      expect(err, what).toBeInstanceOf(BraidError);
      expect(err, what).toMatchObject({ code: 'invalid_request', message: expect.stringMatching(message) });
    }
    expect(() => db.metrics('b1' as never)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
    expect(db.metrics().latest_epoch).toBe(before);
    expect((await db.branches()).find((b) => b.branch_id === 'main')?.state).toBe('active');
    // null is no options, as the binding's types allow
    expect(await db.get(rec, null as never)).toBeNull();
    const dir = tempDir('braid-embedded-open-types-');
    try {
      for (const [options, message] of [
        [{}, /^dataDir must be a string naming a directory, got undefined$/],
        [{ dataDir: 5 }, /got number/],
        [{ dataDir: `${dir}/a\0b` }, /NUL/],
        [{ dataDir: dir, maxBatch: '5' }, /^maxBatch must be a number, got string$/],
        [{ dataDir: dir, deferIndexing: 0 }, /^deferIndexing must be true or false, got number$/],
        [{ dataDir: dir, checkpointRows: 0 }, /checkpointRows must be a whole number from 1 to 2\^53 - 1, not 0$/],
        [{ dataDir: dir, checkpointBytes: 0 }, /from 1 to/],
        [{ dataDir: dir, checkpointIntervalMs: 0 }, /from 1 to/],
        [{ dataDir: dir, bogusOption: 1 }, /^unknown open option "bogusOption"; the options are dataDir/],
      ] as const) {
        expect(() => open(options as unknown as OpenOptions), JSON.stringify(options)).toThrow(expect.objectContaining({ code: 'invalid_record', message: expect.stringMatching(message) }));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('shutting_down after close, for query and nativeQuery alike', async () => {
    const other = open({ dataDir: tempDir('braid-embedded-closed-') });
    const closedDir = other.dataDir;
    other.close();
    try {
      expect(await codeOf(other.query({ table: 'notes', tenant_id: 't' }))).toBe('shutting_down');
      expect(await codeOf(other.nativeQuery("SEARCH notes TENANT 't'"))).toBe('shutting_down');
      // found by a black-box test: startIndexing answered as if open
      expect(() => other.startIndexing()).toThrow(expect.objectContaining({ code: 'shutting_down' }));
      // events stay readable: the close's checkpoint is one
      expect(Array.isArray(other.events())).toBe(true);
      other.close();
    } finally {
      rmSync(closedDir, { recursive: true, force: true });
    }
  });
});
