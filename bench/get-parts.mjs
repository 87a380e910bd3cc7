// Where a get's time goes over HTTP: a fastify server on the server core
// answering POST /noop, with parts of Braid's get path added one at a time
// (the body kept as bytes, seven no-op hooks, the engine's getJson over napi),
// then Braid's own /v1/records/get, each under 32 connections from the
// client core (bench/service/load.mjs: wrk when installed). Prints req/s and
// the time per request of each, for each of --rounds rounds.
//
//   node bench/get-parts.mjs [--seconds 5] [--rounds 2]
//
// Uses the addon in target/bench-native (`node scripts/build-native.mjs --release`).
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const self = fileURLToPath(import.meta.url);
const argv = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : fallback;
};
const SEEDS = 10_000;
const seedRecords = () => Array.from({ length: SEEDS }, (_, i) => ({ table: 'bench', tenant_id: `t${i % 4}`, id: `seed-${i}`, fields: { title: `seed ${i}`, n: i } }));

if (flag('serve', null) !== null) await serve(new Set(flag('serve', '').split(',').filter(Boolean)));
else await measure();

/** One server: fastify with the named parts of the get path. */
async function serve(parts) {
  const { default: Fastify } = await import('fastify');
  const app = Fastify({ logger: false });
  if (parts.has('bytes')) {
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  }
  if (parts.has('hooks')) {
    for (const hook of ['onRequest', 'onRequest', 'preHandler', 'onSend', 'onSend', 'onResponse', 'onResponse']) {
      if (hook === 'onSend') app.addHook(hook, (_request, _reply, payload, done) => done(null, payload));
      else app.addHook(hook, (_request, _reply, done) => done());
    }
  }
  let engine;
  if (parts.has('napi')) {
    const native = createRequire(import.meta.url)(path.join(process.env.BRAID_NATIVE_DIR, 'index.cjs'));
    engine = native.NativeEngine.open({ dataDir: flag('data-dir', '') });
    await engine.putBatchJson(null, Buffer.from(JSON.stringify({ records: seedRecords() })));
  }
  app.post('/noop', async (request, reply) => {
    if (!engine) return { epoch: 1 };
    const body = Buffer.isBuffer(request.body) ? request.body : Buffer.from(JSON.stringify(request.body));
    return reply.type('application/json; charset=utf-8').send(await engine.getJson(null, body));
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  console.log(`bare listening on ${url}`);
}

async function measure() {
  const { childEnv, pin, runChild, startBraid, startServer, stopServer } = await import('./service/common.mjs');
  const seconds = Number(flag('seconds', 5));
  const work = mkdtempSync(path.join(tmpdir(), 'braid-get-parts-'));
  const spec = path.join(work, 'spec.json');
  const body = '{"table":"bench","tenant_id":"t{rand%4}","id":"seed-{rand}"}';
  const cases = [
    ['bare fastify, JSON body parsed', ''],
    ['the body kept as bytes', 'bytes'],
    ["seven no-op hooks (Braid's count)", 'hooks'],
    ["bytes + hooks + the engine's getJson over napi", 'bytes,hooks,napi'],
    ["Braid's /v1/records/get", 'braid'],
  ];
  try {
    for (let round = 1; round <= Number(flag('rounds', 2)); round++) {
      for (const [name, parts] of cases) {
        const dataDir = path.join(work, `data-${round}-${parts}`);
        const server = parts === 'braid'
          ? await startBraid(dataDir)
          : await startServer(pin(0, [process.execPath, self, '--serve', parts, '--data-dir', dataDir]), childEnv, name);
        try {
          if (parts === 'braid') {
            const res = await fetch(`${server.url}/v1/records/put-batch`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ records: seedRecords() }) });
            if (res.status !== 200) throw new Error(`seeding: ${res.status}`);
          }
          writeFileSync(spec, JSON.stringify({ path: parts === 'braid' ? '/v1/records/get' : '/noop', body, range: SEEDS }));
          const load = (s) => runChild('service/load.mjs', ['--url', server.url, '--spec', spec, '--connections', '32', '--seconds', String(s), '--server-pid', String(server.child.pid)], 1);
          await load(1);
          const r = await load(seconds);
          console.log(`round ${round}, ${name}: ${Math.round(r.rps)} req/s, ${(1e6 / r.rps).toFixed(1)} us a request (server ${Math.round(r.server_cpu * 100)}% of core 0)`);
        } finally {
          await stopServer(server);
        }
      }
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
