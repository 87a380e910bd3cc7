// Braid, embedded (--mode embedded: the addon in this process through
// dist/index.js) or over HTTP (--mode http: `braid serve` in a separate
// process, queries as native QL on POST /v1/nativeql). The parent sets
// BRAID_NATIVE_DIR to the release addon (target/bench-native).
import { spawn } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { HYBRID_DEPTH, flag, run, vmHwm, TOP_K } from './common.mjs';
import { TABLE, columns, f32 } from '../braid-schema.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const mode = flag('mode', 'embedded');
const vec = (v) => Array.from(v, f32);

/** A record; `typed`: the vector as a Float32Array (the embedded API takes it as it is). */
function record(corpus, i, typed = false) {
  return {
    table: TABLE,
    tenant_id: corpus.tenant(i),
    id: corpus.id(i),
    fields: {
      text: corpus.text(i),
      category: corpus.category(i),
      year: corpus.year[i],
      flag: corpus.flag[i] === 1,
      embedding: typed ? corpus.vector(i) : vec(corpus.vector(i)),
    },
  };
}

/** The query; `typed`: the vector as a Float32Array (embedded), else as numbers (JSON, native QL). */
function hybridQuery(kind, q, setting, typed = false) {
  // ids and scores only, as every peer is asked for
  const query = { table: TABLE, tenant_id: q.tenant, top_k: TOP_K, return_fields: [] };
  if (kind === 'text' || kind.startsWith('hybrid')) Object.assign(query, { text: q.text, text_field: 'text' });
  // hybrid: at least HYBRID_DEPTH vector candidates into RRF, as the peers get
  const budget = kind.startsWith('hybrid') ? Math.max(setting.candidate_budget, HYBRID_DEPTH) : setting.candidate_budget;
  if (kind !== 'text') Object.assign(query, { vector: typed ? q.vector : vec(q.vector), vector_field: 'embedding', candidate_budget: budget });
  if (kind === 'vector_filter' || kind === 'hybrid_filter') query.scalar_eq = { category: q.category };
  return query;
}

function nativeQl(query) {
  const s = (x) => `'${String(x).replaceAll("'", "''")}'`;
  let ql = `SEARCH ${query.table} TENANT ${s(query.tenant_id)}`;
  if (query.text) ql += ` MATCH ${s(query.text)} IN ${query.text_field}`;
  if (query.vector) ql += ` NEAR [${query.vector.join(',')}] IN ${query.vector_field}`;
  if (query.scalar_eq) ql += ` WHERE ${Object.entries(query.scalar_eq).map(([k, v]) => `${k} = ${s(v)}`).join(' AND ')}`;
  if (query.candidate_budget) ql += ` BUDGET ${query.candidate_budget}`;
  ql += ` LIMIT ${query.top_k}`;
  if (query.return_fields?.length === 0) ql += ' RETURN NONE';
  return ql;
}

// candidate_budget is the HNSW k; ef = max(budget, 256)
const ladder = [10, 20, 40, 80, 160, 320, 640, 1280].map((candidate_budget) => ({ candidate_budget }));

/**
 * Summarises explain.phase_timings and the paths of a few queries per kind,
 * and times the same queries without EXPLAIN through `plainFn` (which
 * returns the response size in bytes).
 */
async function explainSample(queryFn, corpus, setting, plainFn, typed = false) {
  const out = {};
  for (const kind of ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter']) {
    const phases = {};
    const strategies = {};
    let textCandidates = 0;
    let vectorCandidates = 0;
    let exact = 0;
    const sample = corpus.queries.slice(0, 50);
    for (const q of sample) {
      const res = await queryFn({ ...hybridQuery(kind, q, setting, typed), explain: true });
      const ex = res.explain;
      for (const p of ex.phase_timings) phases[p.phase] = (phases[p.phase] ?? 0) + p.elapsed_ms / sample.length;
      for (const p of ex.access_path_timings ?? []) {
        const key = `path:${p.access_path_id}`;
        // build: row work under the state lock (the exact vector scan, the
        // hot overlay); open: the index search
        phases[key] = (phases[key] ?? 0) + (p.build_ms + p.open_ms) / sample.length;
      }
      strategies[ex.selected_strategy] = (strategies[ex.selected_strategy] ?? 0) + 1;
      textCandidates += ex.text_candidates / sample.length;
      vectorCandidates += ex.vector_candidates / sample.length;
      exact += ex.exact_fallback_triggered ? 1 : 0;
    }
    // the same queries without EXPLAIN, timed as the caller sees them
    let responseBytes = 0;
    let clientMs = 0;
    for (const q of sample) {
      const t = performance.now();
      responseBytes += (await plainFn(hybridQuery(kind, q, setting, typed))) / sample.length;
      clientMs += (performance.now() - t) / sample.length;
    }
    out[kind] = { mean_response_bytes: responseBytes, mean_client_ms: clientMs, mean_phase_ms: phases, strategies, mean_text_candidates: textCandidates, mean_vector_candidates: vectorCandidates, exact_fallback_queries: exact, sampled: sample.length };
  }
  return out;
}

async function embedded() {
  const { Braid } = await import(path.join(root, 'dist', 'index.js'));
  const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-bench-'));
  let db;
  return {
    name: 'braid-embedded',
    kinds: ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'],
    ladder,
    notes: [
      'in-process through the release napi addon (BRAID_NATIVE_DIR=target/bench-native); declared schema (text: text only, category: scalar only); putBatch chunks of 5,000, then waitIndexed; vectors as Float32Array (records and queries), as the embedded API takes them',
      `hybrid: text + vector + scalar_eq, RRF (k 60), candidate_budget max(tuned, ${HYBRID_DEPTH}); each side contributes its best candidate_budget rows (text: top k pruned by MaxScore)`,
    ],
    async ingest(corpus) {
      db = Braid.open({ dataDir });
      await db.declareTable(TABLE, columns(corpus.dim));
      const chunk = 5_000;
      const t = performance.now();
      for (let start = 0; start < corpus.n; start += chunk) {
        const batch = [];
        for (let i = start; i < Math.min(corpus.n, start + chunk); i++) batch.push(record(corpus, i, true));
        await db.putBatch(batch);
      }
      const writes_ms = performance.now() - t;
      const indexed = await db.waitIndexed(1_800_000);
      if (!indexed) throw new Error('waitIndexed timed out');
      return { writes_ms, index_wait_ms: performance.now() - t - writes_ms, chunk };
    },
    async query(kind, q, setting) {
      const res = await db.query(hybridQuery(kind, q, setting, true));
      return res.results.map((r) => r.record_id);
    },
    // the addon hands the response over as one JSON string; its size stands in for the HTTP body
    explainSample: (corpus, setting) =>
      explainSample((query) => db.query(query), corpus, setting, async (query) => Buffer.byteLength(JSON.stringify(await db.query(query))), true),
    close() {
      db?.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function startServer(dataDir) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(root, 'bin', 'braid.js'), 'serve', '--port', '0', '--data-dir', dataDir, '--log-level', 'warn'], {
      cwd: root,
      env: { ...process.env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      const m = /listening on (http:\/\/\S+)/.exec(buf);
      if (m) resolve({ child, url: m[1] });
    });
    child.on('exit', (code) => reject(new Error(`braid serve exited with ${code}: ${buf}`)));
  });
}

async function overHttp() {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-bench-http-'));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let server;
  let base;
  let serverPeak = null;
  function post(route, body, raw = false) {
    const payload = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = http.request(`${base}${route}`, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': payload.length } }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode !== 200) reject(new Error(`${route}: ${res.statusCode} ${text.slice(0, 500)}`));
          else resolve(raw ? text : JSON.parse(text));
        });
      });
      req.on('error', reject);
      req.end(payload);
    });
  }
  const ql = (query) => post('/v1/nativeql', { query: (query.explain ? 'EXPLAIN ' : '') + nativeQl(query) });
  return {
    name: 'braid-http',
    kinds: ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'],
    ladder,
    notes: [
      '`braid serve` in its own process (same release addon), one keep-alive connection, queries as native QL on POST /v1/nativeql',
      'put-batch chunks of 2,500 records (5,000 would exceed the default 16 MiB body limit); readiness polled with POST /v1/explain until pending_feature_count is 0',
      'peak_rss_mb is the server process (VmHWM); the client is not counted',
    ],
    async ingest(corpus) {
      const started = await startServer(dataDir);
      server = started.child;
      base = started.url;
      const gql = await post('/v1/graphql', {
        query: 'mutation($t: String!, $c: JSON!) { declare_table(table: $t, columns: $c) { epoch } }',
        variables: { t: TABLE, c: columns(corpus.dim) },
      });
      if (gql.errors) throw new Error(`declare_table: ${JSON.stringify(gql.errors)}`);
      const chunk = 2_500;
      const t = performance.now();
      for (let start = 0; start < corpus.n; start += chunk) {
        const records = [];
        for (let i = start; i < Math.min(corpus.n, start + chunk); i++) records.push(record(corpus, i));
        await post('/v1/records/put-batch', { records });
      }
      const writes_ms = performance.now() - t;
      const probe = { table: TABLE, tenant_id: 't0', text: corpus.queries[0].text, text_field: 'text', vector: vec(corpus.queries[0].vector), vector_field: 'embedding' };
      for (;;) {
        const ex = await post('/v1/explain', probe);
        if (ex.pending_feature_count === 0) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      return { writes_ms, index_wait_ms: performance.now() - t - writes_ms, chunk };
    },
    async query(kind, q, setting) {
      const res = await ql(hybridQuery(kind, q, setting));
      return res.results.map((r) => r.record_id);
    },
    explainSample: (corpus, setting) =>
      explainSample(ql, corpus, setting, async (query) => Buffer.byteLength(await post('/v1/nativeql', { query: nativeQl(query) }, true))),
    async peakRss() {
      serverPeak = await vmHwm(server.pid);
      return serverPeak;
    },
    async close() {
      agent.destroy();
      if (server && server.exitCode === null) {
        const exited = new Promise((r) => server.once('exit', r));
        server.kill('SIGTERM');
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

await run(mode === 'http' ? await overHttp() : await embedded());
