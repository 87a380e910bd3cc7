// GET /metrics (Prometheus text format, issue 15 item 1, engine side):
// scraped through real HTTP from a real engine; names, types and labels are
// checked, and the counters and engine gauges move with what was done,
// including what the engine counts itself (WAL, fsyncs, group commits,
// checkpoints, index lag, vector graphs, memory estimates).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawHttp, startTestServer, waitFor, type TestServer } from './helpers.js';

let s: TestServer;

async function scrape(server: TestServer, headers: Record<string, string> = {}): Promise<{ status: number; type: string; text: string }> {
  const res = await fetch(`${server.url}/metrics`, { headers });
  return { status: res.status, type: res.headers.get('content-type') ?? '', text: await res.text() };
}

/** The value of the sample `name{labels}` (labels in any order), or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
}

beforeAll(async () => {
  s = await startTestServer();
});
afterAll(async () => s.destroy());

describe('GET /metrics', () => {
  it('exposes HTTP, engine and process metrics with their types', async () => {
    const rec = (id: string) => ({ table: 'docs', tenant_id: 'acme', id, fields: { title: `hello ${id}` } });
    expect((await s.post('/v1/records/put', rec('a'))).status).toBe(200);
    expect((await s.post('/v1/records/get', { table: 'docs', tenant_id: 'acme', id: 'missing-table-ok' })).status).toBe(200);
    expect((await s.get('/v1/no-such-route')).status).toBe(404);
    // a served path asked with another method is that path's (found by a black-box test: it was unmatched)
    expect((await s.get('/v1/records/put')).status).toBe(405);

    const m = await scrape(s);
    expect(m.status).toBe(200);
    expect(m.type).toMatch(/^text\/plain; version=0\.0\.4/);
    for (const [name, type] of [
      ['braid_http_requests_total', 'counter'],
      ['braid_http_request_duration_seconds', 'histogram'],
      ['braid_http_requests_in_flight', 'gauge'],
      ['braid_http_connections_dropped_total', 'counter'],
      ['braid_branch_latest_epoch', 'gauge'],
      ['braid_branch_durable_epoch', 'gauge'],
      ['braid_branch_records', 'gauge'],
      ['braid_branch_indexer_state', 'gauge'],
      ['braid_process_resident_memory_bytes', 'gauge'],
    ]) {
      expect(m.text, name).toContain(`# TYPE ${name} ${type}`);
    }
    expect(sample(m.text, 'braid_http_requests_total', { method: 'POST', route: '/v1/records/put', status: '200' })).toBe(1);
    // a path no route has is one bounded label, not the path
    expect(sample(m.text, 'braid_http_requests_total', { route: 'unmatched', status: '404' })).toBe(1);
    expect(m.text).not.toContain('no-such-route');
    expect(sample(m.text, 'braid_http_requests_total', { method: 'GET', route: '/v1/records/put', status: '405' })).toBe(1);
    expect(sample(m.text, 'braid_http_request_duration_seconds_count', { route: '/v1/records/put', status: '200' })).toBe(1);
    expect(sample(m.text, 'braid_http_request_duration_seconds_bucket', { route: '/v1/records/put', status: '200', le: '+Inf' })).toBe(1);

    const engine = (await s.get('/v1/metrics/public-safe')).body;
    const main = { database: 'default', branch: 'main' };
    expect(sample(m.text, 'braid_branch_latest_epoch', main)).toBe(engine.latest_epoch);
    expect(sample(m.text, 'braid_branch_durable_epoch', main)).toBe(engine.durable_epoch);
    expect(sample(m.text, 'braid_branch_records', main)).toBe(1);
    expect(sample(m.text, 'braid_branch_indexer_state', { ...main, state: 'running' })).toBe(1);
    expect(sample(m.text, 'braid_branch_indexer_state', { ...main, state: 'stopped' })).toBe(0);
    expect(sample(m.text, 'braid_process_resident_memory_bytes')).toBeGreaterThan(0);
    // no tenant or record ids as labels
    expect(m.text).not.toContain('acme');
  });

  it('counters and engine gauges move with the work done', async () => {
    const before = await scrape(s);
    const puts = (text: string) => sample(text, 'braid_http_requests_total', { method: 'POST', route: '/v1/records/put', status: '200' }) ?? 0;
    const main = { database: 'default', branch: 'main' };
    for (const id of ['b', 'c', 'd']) {
      expect((await s.post('/v1/records/put', { table: 'docs', tenant_id: 'acme', id, fields: { title: id } })).status).toBe(200);
    }
    expect((await s.post('/v1/admin/snapshot', { target: 'metrics_snap' })).status).toBe(200);
    expect((await s.post('/v1/admin/restore', { source: 'metrics_snap', target: 'metrics_copy' })).status).toBe(200);
    const after = await scrape(s);
    expect(puts(after.text) - puts(before.text)).toBe(3);
    expect(sample(after.text, 'braid_branch_latest_epoch', main)! - sample(before.text, 'braid_branch_latest_epoch', main)!).toBe(3);
    expect(sample(after.text, 'braid_branch_records', main)).toBe(4);
    // every branch has its own series
    expect(sample(after.text, 'braid_branch_records', { database: 'default', branch: 'metrics_copy' })).toBe(4);
  });

  // found by a black-box review: answered before fastify had a request, these were never counted
  it('counts answers written with no request: bytes that are not HTTP, headers past the limit, CONNECT, an Expect it cannot meet', async () => {
    const total = (text: string) => text.split('\n').filter((l) => l.startsWith('braid_http_requests_total{')).reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    const requests = async () => (await s.get('/v1/metrics/public-safe')).body.requests as number;
    const probes: Array<[string, string, string]> = [
      ['HELLO WORLD\r\n\r\n', 'UNKNOWN', '400'],
      [`GET /v1/ready HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 'UNKNOWN', '431'],
      ['CONNECT x:80 HTTP/1.1\r\nHost: x:80\r\n\r\n', 'CONNECT', '400'],
      ['POST /v1/records/get HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 2\r\n\r\n{}', 'POST', '417'],
    ];
    for (const [bytes, method, status] of probes) {
      const before = await scrape(s);
      const seen = await requests();
      expect(await rawHttp(s.url, bytes)).toContain(` ${status} `);
      const after = await scrape(s);
      // the first scrape and the public-safe read are counted too
      expect(total(after.text) - total(before.text), status).toBe(3);
      expect(sample(after.text, 'braid_http_requests_total', { method, route: 'unmatched', status }), status).toBeGreaterThanOrEqual(1);
      expect((await requests()) - seen, status).toBe(3);
    }
  });

  it('needs a token when the engine requires tokens', async () => {
    const secured = await startTestServer({ config: { authTokens: ['ops:read'] } });
    try {
      expect((await scrape(secured)).status).toBe(401);
      const ok = await scrape(secured, { authorization: 'Bearer ops' });
      expect(ok.status).toBe(200);
      // the refused scrape was counted too
      expect(sample(ok.text, 'braid_http_requests_total', { route: '/metrics', status: '401' })).toBe(1);
    } finally {
      await secured.destroy();
    }
  });
});

describe('engine figures in GET /metrics', () => {
  let e: TestServer;
  const main = { database: 'default', branch: 'main' };
  const value = (text: string, name: string, labels: Record<string, string> = {}) => sample(text, name, { ...main, ...labels });

  beforeAll(async () => {
    // the engine option behind `braid serve --checkpoint-bytes 32768`: checkpoints come often
    e = await startTestServer({ engine: { checkpointBytes: 32768 } });
  });
  afterAll(async () => e.destroy());

  it('are exposed with their types, and a fresh branch has no checkpoint age', async () => {
    const m = (await scrape(e)).text;
    for (const [name, type] of [
      ['braid_branch_wal_segment_bytes', 'gauge'],
      ['braid_branch_wal_appended_bytes_total', 'counter'],
      ['braid_branch_wal_fsync_duration_seconds', 'histogram'],
      ['braid_branch_group_commit_writes', 'histogram'],
      ['braid_branch_text_index_lag_rows', 'gauge'],
      ['braid_branch_vector_index_lag_rows', 'gauge'],
      ['braid_branch_vector_graphs', 'gauge'],
      ['braid_branch_vector_graph_points', 'gauge'],
      ['braid_branch_vector_graph_points_max', 'gauge'],
      ['braid_branch_checkpoints_total', 'counter'],
      ['braid_branch_checkpoint_failures_total', 'counter'],
      ['braid_branch_checkpoint_duration_seconds', 'histogram'],
      ['braid_branch_checkpoint_age_seconds', 'gauge'],
      ['braid_branch_last_checkpoint_timestamp_seconds', 'gauge'],
      ['braid_branch_last_checkpoint_bytes', 'gauge'],
      ['braid_branch_memory_bytes', 'gauge'],
    ]) {
      expect(m, name).toContain(`# TYPE ${name} ${type}`);
    }
    expect(value(m, 'braid_branch_checkpoints_total')).toBe(0);
    expect(value(m, 'braid_branch_checkpoint_age_seconds')).toBeUndefined();
    expect(value(m, 'braid_branch_wal_fsync_duration_seconds_count')).toBe(0);
    expect(value(m, 'braid_branch_wal_fsync_duration_seconds_bucket', { le: '0.00005' })).toBe(0);
    for (const structure of ['rows', 'keys', 'vectors', 'vector_graphs', 'receipts', 'text_row_maps']) {
      expect(value(m, 'braid_branch_memory_bytes', { structure }), structure).toBeGreaterThanOrEqual(0);
    }
  });

  it('WAL bytes, the fsync histogram and the group-commit histogram move with writes', async () => {
    const before = (await scrape(e)).text;
    const rec = (id: string) => ({ table: 'notes', tenant_id: 't1', id, fields: { body: `note ${id}` } });
    for (const id of ['w1', 'w2', 'w3']) expect((await e.post('/v1/records/put', rec(id))).status).toBe(200);
    const concurrent = await Promise.all(['c1', 'c2', 'c3', 'c4', 'c5', 'c6'].map((id) => e.post('/v1/records/put', rec(id))));
    expect(concurrent.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect((await e.post('/v1/records/put-batch', { records: [rec('b1'), rec('b2')] })).status).toBe(200);
    const after = (await scrape(e)).text;
    const moved = (name: string, labels: Record<string, string> = {}) => value(after, name, labels)! - value(before, name, labels)!;

    expect(moved('braid_branch_wal_appended_bytes_total')).toBeGreaterThan(0);
    expect(value(after, 'braid_branch_wal_segment_bytes')).toBeGreaterThan(0);
    // ten write requests, each in exactly one group; one fsync per group
    expect(moved('braid_branch_group_commit_writes_sum')).toBe(10);
    const groups = moved('braid_branch_group_commit_writes_count');
    expect(groups).toBeGreaterThanOrEqual(1);
    expect(groups).toBeLessThanOrEqual(10);
    expect(moved('braid_branch_wal_fsync_duration_seconds_count')).toBe(groups);
    expect(value(after, 'braid_branch_wal_fsync_duration_seconds_sum')).toBeGreaterThan(0);
    // buckets are cumulative and +Inf is the count
    for (const name of ['braid_branch_wal_fsync_duration_seconds', 'braid_branch_group_commit_writes']) {
      expect(value(after, `${name}_bucket`, { le: '+Inf' }), name).toBe(value(after, `${name}_count`));
    }
    expect(value(after, 'braid_branch_group_commit_writes_bucket', { le: '1' })).toBeLessThanOrEqual(value(after, 'braid_branch_group_commit_writes_bucket', { le: '2' })!);
    expect(after).not.toContain('t1');
  });

  it('index lag returns to 0 once indexed, and the vector graphs hold every vector', async () => {
    const vectors = Array.from({ length: 20 }, (_, i) => ({ table: 'points', tenant_id: 't1', id: `p${i}`, fields: { label: `point ${i}`, emb: [1, i, 0.5] } }));
    expect((await e.post('/v1/records/put-batch', { records: vectors })).status).toBe(200);
    expect(await e.engine.waitIndexed()).toBe(true);
    const m = (await scrape(e)).text;
    expect(value(m, 'braid_branch_text_index_lag_rows')).toBe(0);
    expect(value(m, 'braid_branch_vector_index_lag_rows')).toBe(0);
    expect(value(m, 'braid_branch_vector_graphs')).toBe(1);
    expect(value(m, 'braid_branch_vector_graph_points')).toBe(20);
    expect(value(m, 'braid_branch_vector_graph_points_max')).toBe(20);
    // the graph holds no vectors: each node has its layer-0 links (a count and 32 ids)
    expect(value(m, 'braid_branch_memory_bytes', { structure: 'vector_graphs' })).toBeGreaterThanOrEqual(20 * 33 * 4);
    expect(value(m, 'braid_branch_memory_bytes', { structure: 'rows' })).toBeGreaterThan(0);
    expect(value(m, 'braid_branch_memory_bytes', { structure: 'keys' })).toBeGreaterThan(0);
  });

  it('a checkpoint moves the checkpoint counter and resets its age', async () => {
    const body = 'x'.repeat(1024);
    for (let round = 0; round < 2; round++) {
      const before = (await scrape(e)).text;
      const count = value(before, 'braid_branch_checkpoints_total')!;
      const since = Date.now();
      // more than --checkpoint-bytes of WAL
      for (let i = 0; i < 40; i++) {
        expect((await e.post('/v1/records/put', { table: 'notes', tenant_id: 't1', id: `big${round}-${i}`, fields: { body } })).status).toBe(200);
      }
      let after = '';
      await waitFor('a checkpoint', async () => {
        after = (await scrape(e)).text;
        return value(after, 'braid_branch_checkpoints_total')! > count;
      });
      const elapsed = (Date.now() - since) / 1000;
      // the newest checkpoint was written after `since`: its age is within the time since
      expect(value(after, 'braid_branch_checkpoint_age_seconds')).toBeLessThanOrEqual(elapsed + 0.001);
      expect(value(after, 'braid_branch_last_checkpoint_timestamp_seconds')).toBeGreaterThanOrEqual(Math.floor(since / 1000));
      expect(value(after, 'braid_branch_last_checkpoint_bytes')).toBeGreaterThan(0);
      expect(value(after, 'braid_branch_checkpoint_duration_seconds_count')).toBe(value(after, 'braid_branch_checkpoints_total'));
      expect(value(after, 'braid_branch_checkpoint_failures_total')).toBe(0);
    }
  });
});
