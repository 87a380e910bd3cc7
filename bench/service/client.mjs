// The HTTP side of bench/service.mjs: one client (undici, one keep-alive
// connection) in its own process, which the harness pins to the client core.
// The same work as bench/service/embedded.mjs, sent to a running server:
//
//   --task latency --url U --records N --warmup W --passes P [--route /noop] [--client undici|raw]
//                                                              POST /v1/query, one at a time (--route: the same
//                                                              bodies to the bare route, for the round trip's floor;
//                                                              --client raw: service/raw-client.mjs, each request's
//                                                              bytes built before timing)
//   --task batches --url U --records N --batch-size S --batches B --warmup-batches W
//                                                              POST /v1/records/put-batch, one at a time
//
// Bodies are serialised before any timing; a timed request ends when its
// response is read and parsed. Writes its result as JSON to --out.
import { writeFileSync } from 'node:fs';
import { Client } from 'undici';
import { KINDS, batch, engineMs, flag, log, msSince, query, summarise } from './common.mjs';
import { rawClient } from './raw-client.mjs';

const { loadCorpus } = await import('../corpus.mjs');

const task = flag('task', '');
const url = flag('url', '');
const records = Number(flag('records', 100_000));
const out = flag('out', '');
const client = new Client(url, { pipelining: 1, keepAliveTimeout: 60_000 });

/** A response's JSON, or the error its status says it is. */
function answered(route, statusCode, json) {
  if (statusCode !== 200) throw new Error(`${route}: ${statusCode} ${JSON.stringify(json).slice(0, 500)}`);
  return json;
}

async function post(route, body) {
  const res = await client.request({ method: 'POST', path: route, headers: { 'content-type': 'application/json' }, body });
  return answered(route, res.statusCode, await res.body.json());
}

/** A server that has just opened a data directory may still be catching its indexes up. */
async function waitIndexed(probe) {
  const t0 = process.hrtime.bigint();
  while ((await post('/v1/explain', probe)).pending_feature_count > 0) await new Promise((r) => setTimeout(r, 50));
  return msSince(t0);
}

/**
 * How the latency task sends its queries: `prepare` turns a body into what
 * `send` takes (for the raw client, the request's bytes), before timing.
 */
async function sender(route, kind) {
  if (kind === 'undici') return { prepare: (body) => body, send: (body) => post(route, body), close() {} };
  if (kind !== 'raw') throw new Error(`--client ${kind}: undici or raw`);
  const raw = await rawClient(url);
  return {
    prepare: (body) => raw.request(route, body),
    async send(request) {
      const res = await raw.send(request);
      return answered(route, res.statusCode, JSON.parse(res.body));
    },
    close: () => raw.close(),
  };
}

async function latency(corpus) {
  const warmup = Number(flag('warmup', 30));
  const passes = Number(flag('passes', 3));
  const route = flag('route', '/v1/query');
  const clientKind = flag('client', 'undici');
  const braid = route === '/v1/query';
  const index_wait_ms = braid ? await waitIndexed(JSON.stringify(query('hybrid', corpus.queries[0], true))) : 0;
  const { prepare, send, close } = await sender(route, clientKind);
  const jsonOf = (kind) => corpus.queries.map((q) => JSON.stringify(query(kind, q, true)));
  const bodiesOf = (kind) => jsonOf(kind).map(prepare);
  const warm = async (bodies) => {
    for (const body of bodies.slice(0, warmup)) await send(body);
  };
  // as embedded.mjs: every kind warms once, then each kind warms again before it is timed
  for (const kind of KINDS) await warm(bodiesOf(kind));
  const kinds = {};
  const ids = {};
  for (const kind of KINDS) {
    const json = jsonOf(kind);
    const bodies = json.map(prepare);
    await warm(bodies);
    const samples = [];
    const outside = [];
    let bytes = 0;
    ids[kind] = [];
    for (let pass = 0; pass < passes; pass++) {
      for (const [i, body] of bodies.entries()) {
        const t = process.hrtime.bigint();
        const res = await send(body);
        const ms = msSince(t);
        samples.push(ms);
        if (braid) outside.push(ms - engineMs(res));
        if (pass === 0) {
          if (braid) ids[kind].push(res.results.map((r) => r.record_id));
          bytes += Buffer.byteLength(json[i]);
        }
      }
    }
    kinds[kind] = { ...summarise(samples), ...(braid ? { outside: summarise(outside) } : {}), mean_request_bytes: bytes / bodies.length };
    log(`[http ${route}, ${clientKind}] ${kind}: p50 ${kinds[kind].p50_ms.toFixed(3)} ms over ${samples.length} queries`);
  }
  close();
  return { client: clientKind, index_wait_ms, warmup, passes, kinds, ids };
}

async function batches(corpus) {
  const size = Number(flag('batch-size', 1_000));
  const count = Number(flag('batches', 10));
  const warmup = Number(flag('warmup-batches', 2));
  // the bodies' bytes, encoded before any timing (as embedded.mjs builds its records): a string would be
  // encoded again by the client for every request, on the client's core, inside the timed send
  const bodies = Array.from({ length: warmup + count }, (_, b) => Buffer.from(JSON.stringify({ records: batch(corpus, b, size, true) })));
  const samples = [];
  for (const [b, body] of bodies.entries()) {
    const t = process.hrtime.bigint();
    const res = await post('/v1/records/put-batch', body);
    const ms = msSince(t);
    if (res.record_count !== size) throw new Error(`batch ${b}: ${JSON.stringify(res)}`);
    if (b >= warmup) samples.push(ms);
  }
  return { batch_size: size, batches: count, warmup_batches: warmup, batch_ms: samples, mean_body_bytes: bodies.reduce((a, s) => a + s.length, 0) / bodies.length };
}

const TASKS = { latency, batches };
if (!TASKS[task] || !url || !out) throw new Error(`usage: client.mjs --task ${Object.keys(TASKS).join('|')} --url U --out F`);
const corpus = loadCorpus(records);
try {
  writeFileSync(out, JSON.stringify(await TASKS[task](corpus)));
} finally {
  await client.close();
}
