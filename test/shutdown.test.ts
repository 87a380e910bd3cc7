// SIGTERM drains: every write the server received before the signal is
// answered 200, the store closes cleanly, the process exits 0, and every
// record of those writes reads back after a restart.
import { afterAll, describe, expect, it } from 'vitest';
import { rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { ROOT, request, spawnListening, spawnServer, tempDir, waitFor, type ChildServer, type HttpResult } from './helpers.js';

const dir = tempDir('braid-shutdown-');
const children: ChildServer[] = [];

afterAll(() => {
  for (const c of children) c.child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

interface WrittenRecord {
  table: string;
  tenant_id: string;
  id: string;
  fields: { body: string; emb: number[] };
}

const record = (batch: number, i: number): WrittenRecord => ({
  table: 'drain', tenant_id: 't', id: `b${batch}-r${i}`, fields: { body: `record ${i} of batch ${batch} with some words to index`, emb: [i % 7, i % 11, 1] },
});

/**
 * A put-batch whose body is sent but for its last byte: the server has the
 * request (its onRequest hooks ran) and cannot answer it until `finish()`.
 */
function heldWrite(url: string, records: WrittenRecord[]): { finish(): void; response: Promise<HttpResult> } {
  const body = Buffer.from(JSON.stringify({ records }));
  const req = http.request(`${url}/v1/records/put-batch`, {
    method: 'POST',
    // a connection of its own: the server must not count it idle and close it
    agent: false,
    headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
  });
  const response = new Promise<HttpResult>((resolve, reject) => {
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          // not JSON: the assertion shows the text
        }
        resolve({ status: res.statusCode ?? 0, body: parsed, headers: new Headers() });
      });
      res.on('error', reject);
    });
  });
  // settled by the caller; marked handled so a failure is reported there, not as unhandled
  response.catch(() => undefined);
  req.write(body.subarray(0, body.length - 1));
  return { finish: () => req.end(body.subarray(body.length - 1)), response };
}

/** True once nothing listens on the server's port: close() has begun and no new connection is taken. */
function refused(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port) });
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

const inFlightOf = (scrape: HttpResult): number => Number(/^braid_http_requests_in_flight (\d+)/m.exec(String(scrape.body))?.[1] ?? 0);

describe('SIGTERM', () => {
  it('answers 200 to every write received before it, and every record of them reads back after a restart', async () => {
    const server = await spawnServer(['serve', '--port', '0', '--data-dir', dir]);
    children.push(server);
    // four large batches the engine is busy with, and four whose bodies the
    // server is still waiting for when the signal arrives
    const busy = Array.from({ length: 4 }, (_, b) => Array.from({ length: 1250 }, (_, i) => record(b, i)));
    const held = Array.from({ length: 4 }, (_, h) => Array.from({ length: 100 }, (_, i) => record(4 + h, i)));
    const busyWrites = busy.map((records) => request(`${server.url}/v1/records/put-batch`, 'POST', { records }));
    const heldWrites = held.map((records) => heldWrite(server.url, records));
    let settled = 0;
    const count = (): void => {
      settled += 1;
    };
    for (const p of busyWrites) p.then(count, count);

    // signal once the server holds every write not yet answered (its
    // in-flight gauge counts them, and the scrape itself)
    await waitFor('the server to hold every write', async () => {
      const scrape = await request(`${server.url}/metrics`, 'GET');
      return inFlightOf(scrape) >= busyWrites.length - settled + heldWrites.length + 1;
    });
    server.child.kill('SIGTERM');
    // the held bodies complete only once the server has stopped listening, and
    // after several of the drain's idle-connection sweeps (every 100 ms,
    // src/server.ts): a sweep must not take a connection with a request on it
    await waitFor('the server to stop listening', () => refused(server.url), 10_000);
    await new Promise((resolve) => setTimeout(resolve, 500));
    for (const w of heldWrites) w.finish();

    const results = await Promise.allSettled([...busyWrites, ...heldWrites.map((w) => w.response)]);
    expect(await server.exited).toBe(0);
    const written = [...busy, ...held];
    results.forEach((r, i) => {
      const what = `write ${i} (${written[i]!.length} records)`;
      expect(r.status, `${what}: ${r.status === 'rejected' ? String(r.reason) : ''}`).toBe('fulfilled');
      const res = (r as PromiseFulfilledResult<HttpResult>).value;
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(200);
      expect(res.body.record_count, what).toBe(written[i]!.length);
    });

    const again = await spawnServer(['serve', '--port', '0', '--data-dir', dir]);
    children.push(again);
    const metrics = await request(`${again.url}/v1/metrics/public-safe`, 'GET');
    expect(metrics.body.recovery_state).toBe('healthy');
    // one epoch per batch, no more and no fewer
    expect(metrics.body.latest_epoch).toBe(written.length);
    const records = written.flat();
    const q = await request(`${again.url}/v1/explain`, 'POST', { table: 'drain', tenant_id: 't', top_k: 1000 });
    expect(q.body.tenant_mask_visible_records).toBe(records.length);
    // each record, as it was written
    for (let at = 0; at < records.length; at += 100) {
      const chunk = records.slice(at, at + 100);
      const got = await Promise.all(chunk.map((r) => request(`${again.url}/v1/records/get`, 'POST', { table: r.table, tenant_id: r.tenant_id, id: r.id })));
      got.forEach((res, i) => {
        expect(res.status, chunk[i]!.id).toBe(200);
        expect(res.body.record, chunk[i]!.id).toMatchObject({ id: chunk[i]!.id, fields: chunk[i]!.fields });
      });
    }
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);
  });
});

/** Writes one record to `server`, sends it `signal`, and expects a drained exit 0 that logged the signal. */
async function writeThenStop(server: ChildServer, signal: NodeJS.Signals, table: string): Promise<void> {
  const put = await request(`${server.url}/v1/records/put`, 'POST', { table, tenant_id: 't', id: 'a', fields: { body: 'kept' } });
  expect(put.status).toBe(200);
  server.child.kill(signal);
  expect(await server.exited).toBe(0);
  expect(server.output()).toContain(`"signal":"${signal}"`);
}

/** `braid serve` started again on `dir` (logging at info), having read back what writeThenStop wrote. */
async function restartedWithTheWrite(dir: string, table: string): Promise<ChildServer> {
  const again = await spawnServer(['serve', '--port', '0', '--data-dir', dir], { BRAID_LOG_LEVEL: 'info' });
  children.push(again);
  const got = await request(`${again.url}/v1/records/get`, 'POST', { table, tenant_id: 't', id: 'a' });
  expect(got.body.record).toMatchObject({ fields: { body: 'kept' } });
  return again;
}

// found by a black-box review: `npm start` ran the server under `sh -c`,
// which (dash) does not pass a signal on, so SIGTERM to npm left the server
// running, holding its port and the data directory's lock
describe('npm start', () => {
  it('passes SIGTERM on: the server drains and exits with npm, and the data directory is free again', async () => {
    const npmDir = tempDir('braid-npm-start-');
    try {
      const server = await spawnListening('npm', ['start', '--silent', '--', '--port', '0', '--data-dir', npmDir], {
        cwd: ROOT,
        env: { ...process.env, BRAID_LOG_LEVEL: 'info' },
        detached: true,
      });
      children.push(server);
      await writeThenStop(server, 'SIGTERM', 'npm');
      expect(await refused(server.url)).toBe(true);
      const again = await restartedWithTheWrite(npmDir, 'npm');
      again.child.kill('SIGTERM');
      expect(await again.exited).toBe(0);
    } finally {
      rmSync(npmDir, { recursive: true, force: true });
    }
  });
});

// found by a black-box test: SIGHUP (a closed terminal, a supervisor's
// hang-up) killed the process at once, status 129, with no drain and no
// close checkpoint
describe('SIGHUP', () => {
  it('drains braid serve like SIGTERM: exit 0 after the close checkpoint', async () => {
    const hupDir = tempDir('braid-sighup-');
    try {
      const server = await spawnServer(['serve', '--port', '0', '--data-dir', hupDir], { BRAID_LOG_LEVEL: 'info' });
      children.push(server);
      await writeThenStop(server, 'SIGHUP', 'hup');
      expect(server.output()).toMatch(/"event":"checkpoint"[^\n]*"trigger":"close"/);

      // the close checkpoint holds the write: nothing is replayed from the log
      const again = await restartedWithTheWrite(hupDir, 'hup');
      await waitFor('the recovery event', () => /"event":"recovery"/.test(again.output()));
      expect(again.output()).toMatch(/"event":"recovery"[^\n]*"commits_replayed":0/);
      again.child.kill('SIGTERM');
      expect(await again.exited).toBe(0);
    } finally {
      rmSync(hupDir, { recursive: true, force: true });
    }
  });

  it('drains braid gateway like SIGTERM: exit 0', async () => {
    // no engine behind it: the gateway starts and stops without one
    const gateway = await spawnServer(['gateway', '--port', '0', '--engine', 'http://127.0.0.1:9', '--token', 'good'], { BRAID_LOG_LEVEL: 'info' });
    children.push(gateway);
    // a refused token is a warning with the client's address, never the token (found by a black-box review)
    const guess = await request(`${gateway.url}/v1/branches`, 'GET', undefined, { authorization: 'Bearer guessed-token' });
    expect(guess.status).toBe(401);
    await waitFor('the warning', () => gateway.output().includes('credentials refused'));
    expect(gateway.output()).toMatch(/"level":40[^\n]*"code":"unauthorized"[^\n]*"remote_address":"127\.0\.0\.1"[^\n]*"msg":"credentials refused"/);
    expect(gateway.output()).not.toContain('guessed-token');
    gateway.child.kill('SIGHUP');
    expect(await gateway.exited).toBe(0);
    expect(gateway.output()).toContain('"signal":"SIGHUP"');
  });
});
