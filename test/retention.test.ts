// Retention that frees space (issue 11), through real HTTP against a real
// engine: with a history setting, the checkpoints the writes trigger remove
// the versions below the horizon; reads at or above it are unchanged, reads
// below it get 400 temporal_before_horizon, the figures show in /metrics,
// and a restart keeps both.
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestServer, tempDir, waitFor, type TestServer } from './helpers.js';

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.destroy();
});

function sample(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes('branch="main"'));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

function recordBytes(dataDir: string): number {
  const dir = path.join(dataDir, 'db', 'default', 'main');
  return readdirSync(dir)
    .filter((f) => f.startsWith('records-'))
    .reduce((sum, f) => sum + statSync(path.join(dir, f)).size, 0);
}

describe('retention (--history-epochs)', () => {
  it('removes versions below the horizon, refuses reads there, and keeps both across a restart', async () => {
    const dataDir = tempDir();
    // a checkpoint every few writes; two epochs of history readable
    const engine = { historyEpochs: 2, checkpointBytes: 8192 };
    let s = await startTestServer({ dataDir, engine });
    const body = (v: number) => `version ${v} of the record, ${'with some padding text '.repeat(10)}`;
    let epoch = 0;
    // a checkpoint removes only versions the text indexer has been handed,
    // so each write waits for the indexes: what the checkpoints remove then
    // does not depend on how busy the machine is (under a loaded CI the
    // indexer fell behind and fewer versions were gone at the check)
    const indexed = async () => ((await s.post('/v1/explain', { table: 'docs', tenant_id: 'acme', text: 'version', freshness: 'indexed' })).body as { pending_feature_count: number }).pending_feature_count === 0;
    for (let v = 0; v < 40; v++) {
      const records = Array.from({ length: 5 }, (_, i) => ({ table: 'docs', tenant_id: 'acme', id: `r${i}`, fields: { body: body(v), v, emb: [1 + i, v % 7, 1] } }));
      const res = await s.post('/v1/records/put-batch', { records });
      expect(res.status).toBe(200);
      epoch = (res.body as { epoch: number }).epoch;
      await waitFor('indexed', indexed);
    }
    const m = await (await fetch(`${s.url}/metrics`)).text();
    expect(sample(m, 'braid_branch_retention_horizon_epoch')).toBeGreaterThan(30);
    // versions 0 .. (horizon - 1) of five records are gone, bar those not yet checkpointed
    expect(sample(m, 'braid_branch_retention_purged_versions')).toBeGreaterThan(5 * 25);
    expect(sample(m, 'braid_branch_retention_reclaimed_bytes_total')).toBeGreaterThan(0);
    expect(sample(m, 'braid_branch_versions')).toBeLessThan(5 * 15);

    const at = (e: number) => s.post('/v1/query', { table: 'docs', tenant_id: 'acme', text: 'version record', top_k: 5, temporal_as_of: e });
    const old = await at(3);
    expect(old.status).toBe(400);
    expect(old.body).toMatchObject({ code: 'temporal_before_horizon' });
    const latest = await at(epoch);
    expect(latest.status).toBe(200);
    const latestIds = (latest.body as { results: { record_id: string; version_id: number }[] }).results.map((r) => [r.record_id, r.version_id]);
    expect(latestIds).toHaveLength(5);
    expect(latestIds.every(([, version]) => version === 40)).toBe(true);
    const oneBack = await at(epoch - 1);
    expect(oneBack.status).toBe(200);
    expect((oneBack.body as { results: { version_id: number }[] }).results.every((r) => r.version_id === 39)).toBe(true);
    // the vector column, mostly removed versions, is rebuilt without them; a
    // vector query at the latest epoch still finds each record's latest version
    await waitFor('vectors compacted', async () => (sample(await (await fetch(`${s.url}/metrics`)).text(), 'braid_branch_retention_compacted_vectors_total') ?? 0) > 0);
    const near = await s.post('/v1/query', { table: 'docs', tenant_id: 'acme', vector: [3, 39 % 7, 1], top_k: 5 });
    expect(near.status).toBe(200);
    const nearest = (near.body as { results: { record_id: string; version_id: number }[] }).results;
    expect(nearest).toHaveLength(5);
    expect(nearest[0]).toMatchObject({ record_id: 'r2', version_id: 40 });
    // the record files hold about what is readable, not the whole history
    expect(recordBytes(dataDir)).toBeLessThan(40 * 5 * 200);

    await s.stop();
    // a restart without the setting keeps the horizon: the history is gone
    s = await startTestServer({ dataDir, engine: {} });
    servers.push(s);
    const again = await at(3);
    expect(again.status).toBe(400);
    expect(again.body).toMatchObject({ code: 'temporal_before_horizon' });
    await waitFor('indexed', async () => ((await at(epoch)).body as { results: unknown[] }).results.length === 5);
    expect(((await at(epoch)).body as { results: { version_id: number }[] }).results.every((r) => r.version_id === 40)).toBe(true);
  });
});
