// Scale probe (written by a black-box test of the eighth session, bench/JOURNAL.md): WordNet glosses as
// records of several text columns, loaded over HTTP to each size, then every query kind timed.
// node bench/probe/scale.mjs single|multi [sizes=20000,100000,200000]; BRAID_DIR picks another built tree.
// single: one table "docs", one tenant "t0".
// multi: 100 tenants; tenant t0 is fixed at the first 2,000 records, the rest spread over t1..t99.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildRecords, startServer, stopServer, req, measure, rssMB, embed, r2, mulberry32 } from './lib.mjs';

const mode = process.argv[2] || 'single';
const sizes = (process.argv[3] || '20000,100000,200000').split(',').map(Number);
const DATA = path.join(os.tmpdir(), `braid-scale-probe-${mode}-${process.pid}`);
const OUT = fileURLToPath(new URL(`../results/scale-probe-${mode}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url));
fs.rmSync(DATA, { recursive: true, force: true });

const { recs } = buildRecords(sizes[sizes.length - 1]);
const tenantOf = (i) => (mode === 'single' ? 't0' : i < 2000 ? 't0' : `t${1 + (i % 99)}`);
const srv = await startServer(DATA);
console.log('server', srv.url, 'pid', srv.pid);
const results = { mode, stages: [] };
let loaded = 0;
const Q = (body) => req(srv.url, 'POST', '/v1/query', { table: 'docs', ...body });
const epochs = [];

function dirMB(d) {
  let s = 0;
  const walk = (p) => { for (const e of fs.readdirSync(p, { withFileTypes: true })) { const f = `${p}/${e.name}`; if (e.isDirectory()) walk(f); else s += fs.statSync(f).size; } };
  walk(d);
  return Math.round(s / 1048576);
}

async function waitIndexed(tenant) {
  const t0 = performance.now();
  for (;;) {
    const r = await req(srv.url, 'POST', '/v1/explain', { table: 'docs', tenant_id: tenant, text: 'of', vector: embed('of'), freshness: 'indexed', top_k: 1 });
    if (r.json?.pending_feature_count === 0) return performance.now() - t0;
    if (performance.now() - t0 > 600000) return -1;
    await new Promise((r) => setTimeout(r, 250));
  }
}

for (const size of sizes) {
  const tl = performance.now();
  while (loaded < size) {
    const batch = recs.slice(loaded, Math.min(size, loaded + 1000)).map((r, j) => ({ table: 'docs', tenant_id: tenantOf(loaded + j), id: r.id, fields: r.fields }));
    const r = await req(srv.url, 'POST', '/v1/records/put-batch', { records: batch });
    if (r.status !== 200) throw new Error(`load ${r.status} ${JSON.stringify(r.json)}`);
    epochs.push(r.json.epoch);
    loaded += batch.length;
  }
  const loadS = (performance.now() - tl) / 1000;
  const T = 't0';
  const mine = recs.slice(0, size).filter((_, i) => tenantOf(i) === T);
  const ids = new Set(mine.map((r) => r.id));
  // right after the load, before the indexer catches up
  const fresh = await measure(() => Q({ tenant_id: T, text: 'of the', top_k: 10 }), 20, 1);
  const idxMs = await waitIndexed(T);
  const rnd = mulberry32(size);
  const pick = () => mine[Math.floor(rnd() * mine.length)];
  const longGloss = mine.filter((r) => r.fields.body.split(' ').length >= 20);
  const known = Array.from({ length: 60 }, (_, i) => { const g = longGloss[(i * 7919) % longGloss.length].fields.body.split(' '); return g.slice(0, 40).join(' '); });
  const vecs = Array.from({ length: 60 }, () => pick().fields.embedding);
  const seeds = mine.filter((r) => r.fields.related.filter((e) => ids.has(e)).length >= 5).sort((a, b) => b.fields.related.length - a.fields.related.length);
  const seedIds = [...seeds.slice(0, 10), ...seeds.slice(-50)].map((r) => r.id);
  const hi = 7; // bucket 7: 0.1% of records
  const oldEpoch = epochs[Math.floor(epochs.length / 2)];
  const kinds = {
    'text "a"': (_i) => Q({ tenant_id: T, text: 'a' }),
    'text "of the"': (_i) => Q({ tenant_id: T, text: 'of the' }),
    'text "the a of to and in"': (_i) => Q({ tenant_id: T, text: 'the a of to and in' }),
    'text "the a of to and in" text_field=body': (_i) => Q({ tenant_id: T, text: 'the a of to and in', text_field: 'body' }),
    'text known-item 20-40 words': (i) => Q({ tenant_id: T, text: known[i % 60] }),
    'text known-item text_field=body': (i) => Q({ tenant_id: T, text: known[i % 60], text_field: 'body' }),
    vector: (i) => Q({ tenant_id: T, vector: vecs[i % 60] }),
    'hybrid "of the"+vector': (i) => Q({ tenant_id: T, text: 'of the', vector: vecs[i % 60] }),
    'hybrid known-item+vector': (i) => Q({ tenant_id: T, text: known[i % 60], vector: vecs[i % 60] }),
    'text "of the" + pos=n (70%)': (_i) => Q({ tenant_id: T, text: 'of the', scalar_eq: { pos: 'n' } }),
    'text "of the" + bucket=7 (0.1%)': (_i) => Q({ tenant_id: T, text: 'of the', scalar_eq: { bucket: hi } }),
    'vector + pos=n (70%)': (i) => Q({ tenant_id: T, vector: vecs[i % 60], scalar_eq: { pos: 'n' } }),
    'vector + bucket=7 (0.1%)': (i) => Q({ tenant_id: T, vector: vecs[i % 60], scalar_eq: { bucket: hi } }),
    'vector + lex=5 (~5%)': (i) => Q({ tenant_id: T, vector: vecs[i % 60], scalar_eq: { lex: 5 } }),
    'filter-only pos=n top10': (_i) => Q({ tenant_id: T, scalar_eq: { pos: 'n' } }),
    'filter-only bucket=7 top10': (_i) => Q({ tenant_id: T, scalar_eq: { bucket: hi } }),
    'text "of the" top_k=100': (_i) => Q({ tenant_id: T, text: 'of the', top_k: 100 }),
    'text "of the" top_k=1000': (_i) => Q({ tenant_id: T, text: 'of the', top_k: 1000 }),
    'text "of the" top_k=1000 return_fields=[]': (_i) => Q({ tenant_id: T, text: 'of the', top_k: 1000, return_fields: [] }),
    'vector top_k=100': (i) => Q({ tenant_id: T, vector: vecs[i % 60], top_k: 100 }),
    'vector top_k=1000': (i) => Q({ tenant_id: T, vector: vecs[i % 60], top_k: 1000 }),
    'hybrid top_k=1000': (i) => Q({ tenant_id: T, text: 'of the', vector: vecs[i % 60], top_k: 1000 }),
    'text "of the" as_of mid-load epoch': (_i) => Q({ tenant_id: T, text: 'of the', temporal_as_of: oldEpoch }),
    'vector as_of mid-load epoch': (i) => Q({ tenant_id: T, vector: vecs[i % 60], temporal_as_of: oldEpoch }),
  };
  for (let d = 1; d <= 4; d++) kinds[`graph depth ${d} (hub seeds+random)`] = (i) => Q({ tenant_id: T, graph_seed: seedIds[i % seedIds.length], graph_depth: d, top_k: 10 });
  kinds['graph depth 4 top_k=1000'] = (i) => Q({ tenant_id: T, graph_seed: seedIds[i % seedIds.length], graph_depth: 4, top_k: 1000 });
  kinds['graph depth 8 hub seed'] = (i) => Q({ tenant_id: T, graph_seed: seedIds[i % 10], graph_depth: 8, top_k: 10 });
  const stage = { size, tenant_rows: mine.length, load_s: r2(loadS), load_rec_per_s: Math.round((size - (results.stages.at(-1)?.size ?? 0)) / loadS), index_wait_ms: Math.round(idxMs), fresh_text_of_the: { p50: fresh.p50, p99: fresh.p99, srv_p50: fresh.srv_p50 }, kinds: {} };
  for (const [name, fn] of Object.entries(kinds)) {
    const m = await measure(fn);
    const ex = m.sample.json?.explain;
    stage.kinds[name] = { p50: m.p50, p99: m.p99, srv_p50: m.srv_p50, status: m.status, bytes: m.sample.bytes, strategy: ex?.selected_strategy, scored: ex?.lexical_scored_documents, returned: ex?.returned_count, exact: ex?.exact_fallback_triggered };
    console.log(size, name.padEnd(46), m.p50, m.p99, 'srv', m.srv_p50, JSON.stringify(m.status), ex?.selected_strategy, ex?.lexical_scored_documents);
  }
  // deep paging: walk to page 20, time each page
  for (const [pname, body] of [
    ['page20 text "of the" top10', { tenant_id: T, text: 'of the', top_k: 10 }],
    ['page20 filter-only pos=n top10', { tenant_id: T, scalar_eq: { pos: 'n' }, top_k: 10 }],
    ['page20 vector budget 1000 top10', { tenant_id: T, vector: vecs[0], top_k: 10, candidate_budget: 1000 }],
    ['page20 text "of the" top100', { tenant_id: T, text: 'of the', top_k: 100 }],
  ]) {
    const p20 = [], walk = [], p2 = [];
    let pages = 0;
    for (let it = 0; it < 53; it++) {
      const t0 = performance.now();
      let cur = null; pages = 0;
      for (let p = 1; p <= 20; p++) {
        const r = await Q({ ...body, ...(cur ? { cursor: cur } : {}) });
        if (r.status !== 200) { console.log('page err', r.status, JSON.stringify(r.json).slice(0, 200)); break; }
        pages = p;
        if (p === 2 && it >= 3) p2.push(r.ms);
        if (p === 20 && it >= 3) p20.push(r.ms);
        cur = r.json.next_cursor;
        if (!cur) break;
      }
      if (it >= 3) walk.push(performance.now() - t0);
    }
    const { pct } = await import('./lib.mjs');
    stage.kinds[pname] = { pages_reached: pages, page2_p50: p2.length ? r2(pct(p2, 50)) : null, page20_p50: p20.length ? r2(pct(p20, 50)) : null, page20_p99: p20.length ? r2(pct(p20, 99)) : null, walk20_p50: r2(pct(walk, 50)), walk20_p99: r2(pct(walk, 99)) };
    console.log(size, pname, JSON.stringify(stage.kinds[pname]));
  }
  stage.rss = rssMB(srv.pid);
  stage.disk_mb = dirMB(DATA);
  console.log('stage', size, 'rss', stage.rss, 'disk', stage.disk_mb, 'load', stage.load_s, 's idxwait', stage.index_wait_ms);
  results.stages.push(stage);
  fs.writeFileSync(OUT, JSON.stringify(results, null, 1));
}
const st = await stopServer(srv);
console.log('stop ms', Math.round(st));
fs.rmSync(DATA, { recursive: true, force: true });
