// SIGTERM drains: in-flight requests finish, the store closes cleanly, the
// process exits 0 and everything acknowledged is there after a restart.
import { afterAll, describe, expect, it } from 'vitest';
import { rmSync } from 'node:fs';
import { request, spawnServer, tempDir, type ChildServer } from './helpers.js';

const dir = tempDir('braid-shutdown-');
const children: ChildServer[] = [];

afterAll(() => {
  for (const c of children) c.child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('SIGTERM', () => {
  it('drains in-flight writes and closes the store cleanly', async () => {
    const server = await spawnServer(['serve', '--port', '0', '--data-dir', dir]);
    children.push(server);
    const records = Array.from({ length: 5000 }, (_, i) => ({
      table: 'drain', tenant_id: 't', id: `r${i}`, fields: { body: `record ${i} with some words to index`, emb: [i % 7, i % 11, 1] },
    }));
    const inFlight = Array.from({ length: 4 }, (_, b) =>
      request(`${server.url}/v1/records/put-batch`, 'POST', { records: records.slice(b * 1250, (b + 1) * 1250) }),
    );
    // ask it to stop once the server holds the four requests (its in-flight
    // gauge counts them, and the scrape itself), or once they are answered
    let settled = 0;
    const count = (): void => void (settled += 1);
    for (const p of inFlight) p.then(count, count);
    for (;;) {
      const scrape = await request(`${server.url}/metrics`, 'GET');
      const inFlightNow = Number(/^braid_http_requests_in_flight (\d+)/m.exec(String(scrape.body))?.[1] ?? 0);
      if (inFlightNow >= 5 || settled === inFlight.length) break;
    }
    server.child.kill('SIGTERM');
    const results = await Promise.allSettled(inFlight);
    const code = await server.exited;
    expect(code).toBe(0);
    const acked = results.filter((r) => r.status === 'fulfilled' && r.value.status === 200).length;
    // every request the server had received when it was told to stop finished
    expect(acked).toBe(inFlight.length);

    const again = await spawnServer(['serve', '--port', '0', '--data-dir', dir]);
    children.push(again);
    const metrics = await request(`${again.url}/v1/metrics/public-safe`, 'GET');
    expect(metrics.body.recovery_state).toBe('healthy');
    expect(metrics.body.latest_epoch).toBeGreaterThanOrEqual(acked);
    const q = await request(`${again.url}/v1/explain`, 'POST', { table: 'drain', tenant_id: 't', top_k: 1000 });
    expect(q.body.tenant_mask_visible_records).toBe(metrics.body.latest_epoch * 1250);
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);
  });
});
