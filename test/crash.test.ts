// Crash safety: a real server process under concurrent puts and put-batches
// is killed with SIGKILL at a random moment, restarted on the same data dir,
// and every acknowledged write must be there while no batch is half-applied.
import { afterAll, describe, expect, it } from 'vitest';
import { readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { request, spawnServer, tempDir, type ChildServer } from './helpers.js';

const children: ChildServer[] = [];
const dir = tempDir('braid-crash-');
const checkpointing = tempDir('braid-crash-ckpt-');

afterAll(() => {
  for (const c of children) c.child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  rmSync(checkpointing, { recursive: true, force: true });
});

interface Attempt {
  kind: 'put' | 'batch';
  ids: string[];
  acked: boolean;
}

async function load(url: string, worker: number, round: number, attempts: Attempt[], stop: () => boolean): Promise<void> {
  for (let i = 0; !stop(); i++) {
    const base = `r${round}-w${worker}-${i}`;
    const isBatch = i % 3 === 0;
    const ids = isBatch ? Array.from({ length: 8 }, (_, j) => `${base}-b${j}`) : [base];
    const attempt: Attempt = { kind: isBatch ? 'batch' : 'put', ids, acked: false };
    attempts.push(attempt);
    const records = ids.map((id) => ({ table: 'crash', tenant_id: `w${worker}`, id, fields: { round, worker, seq: i, body: `text ${id}` } }));
    try {
      const res = isBatch
        ? await request(`${url}/v1/records/put-batch`, 'POST', { records })
        : await request(`${url}/v1/records/put`, 'POST', { record: records[0] });
      if (res.status === 200) attempt.acked = true;
    } catch {
      return; // the server is gone
    }
  }
}

async function present(url: string, worker: string, id: string): Promise<boolean> {
  const res = await request(`${url}/v1/records/get`, 'POST', { table: 'crash', tenant_id: worker, id });
  expect(res.status).toBe(200);
  return res.body.record !== null;
}

/** Three rounds of writers killed with SIGKILL, each followed by a restart that checks every attempt so far. */
async function crashRounds(dataDir: string, flags: string[]): Promise<void> {
  const all: Attempt[] = [];
  for (let round = 0; round < 3; round++) {
    const server = await spawnServer(['serve', '--port', '0', '--data-dir', dataDir, ...flags]);
    children.push(server);
    const attempts: Attempt[] = [];
    let killed = false;
    const workers = Array.from({ length: 6 }, (_, w) => load(server.url, w, round, attempts, () => killed));
    // let some writes land, then kill at a random moment
    await new Promise((r) => setTimeout(r, 300 + Math.random() * 700));
    server.child.kill('SIGKILL');
    killed = true;
    await server.exited;
    await Promise.all(workers);
    all.push(...attempts);
    expect(attempts.filter((a) => a.acked).length).toBeGreaterThan(0);

    const restarted = await spawnServer(['serve', '--port', '0', '--data-dir', dataDir, ...flags]);
    children.push(restarted);
    try {
      for (const attempt of all) {
        const worker = attempt.ids[0]!.split('-')[1]!;
        const seen = await Promise.all(attempt.ids.map((id) => present(restarted.url, worker, id)));
        if (attempt.acked) expect(seen.every(Boolean), `acknowledged ${attempt.kind} ${attempt.ids[0]} lost`).toBe(true);
        // all or nothing, acknowledged or not
        expect(new Set(seen).size, `half-applied batch ${attempt.ids[0]}`).toBe(1);
      }
      const ready = await request(`${restarted.url}/v1/ready`, 'GET');
      expect(ready.body.ready).toBe(true);
    } finally {
      restarted.child.kill('SIGTERM');
      await restarted.exited;
    }
  }
}

describe('crash test', () => {
  it('keeps every acknowledged write across SIGKILL, three times over', async () => {
    await crashRounds(dir, []);
  });

  it('keeps every acknowledged write when SIGKILL lands during frequent checkpoints', async () => {
    // a checkpoint every 32 KiB of log: several per round, so kills land
    // before, during and after them
    await crashRounds(checkpointing, ['--checkpoint-bytes', '32768']);
    const branch = path.join(checkpointing, 'db', 'default', 'main');
    const files = readdirSync(branch);
    expect(files.some((f) => f.startsWith('checkpoint-'))).toBe(true);
    // the segments checkpoints cover are gone: the log does not keep history
    expect(files.filter((f) => f.startsWith('wal-')).length).toBeLessThanOrEqual(2);
  });
});
