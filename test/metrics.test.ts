// GET /metrics (Prometheus text format, issue 15 item 1, engine side):
// scraped through real HTTP from a real engine; names, types and labels are
// checked, and the counters and engine gauges move with what was done.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './helpers.js';

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

    const m = await scrape(s);
    expect(m.status).toBe(200);
    expect(m.type).toMatch(/^text\/plain; version=0\.0\.4/);
    for (const [name, type] of [
      ['braid_http_requests_total', 'counter'],
      ['braid_http_request_duration_seconds', 'histogram'],
      ['braid_http_requests_in_flight', 'gauge'],
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
