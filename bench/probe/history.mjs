// History probe: does rewriting records make their text queries slower? WordNet glosses as records
// (bench/probe/lib.mjs: title, body, pos, lex, bucket, a 128-d vector, edges), loaded over HTTP, then
// every record written again R times with its text unchanged and one number changed (a counter, as
// an update that touches one field does), timing the same text queries at the latest epoch after
// each round, and at the epoch of the first load (a read of history).
//
//   node bench/probe/history.mjs [records=20000] [rounds=0,5,10,20]
//
// BRAID_DIR runs another built tree; BRAID_NATIVE_DIR another addon.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildRecords, measure, req, rssMB, startServer, stopServer } from './lib.mjs';

const records = Number(process.argv[2] || 20000);
const rounds = (process.argv[3] || '0,5,10,20').split(',').map(Number);
const DATA = path.join(os.tmpdir(), `braid-history-probe-${process.pid}`);
const OUT = fileURLToPath(new URL(`../results/history-probe-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url));
fs.rmSync(DATA, { recursive: true, force: true });

const { recs } = buildRecords(records);
const srv = await startServer(DATA);
console.log('server', srv.url, 'pid', srv.pid);
const Q = (body) => req(srv.url, 'POST', '/v1/query', { table: 'docs', tenant_id: 't0', return_fields: [], ...body });

async function writeAll(round) {
  let epoch = 0;
  for (let i = 0; i < recs.length; i += 1000) {
    const batch = recs.slice(i, i + 1000).map((r) => ({ table: 'docs', tenant_id: 't0', id: r.id, fields: { ...r.fields, views: round } }));
    const res = await req(srv.url, 'POST', '/v1/records/put-batch', { records: batch });
    if (res.status !== 200) throw new Error(`put-batch ${res.status} ${JSON.stringify(res.json)}`);
    epoch = res.json.epoch;
  }
  return epoch;
}

async function waitIndexed() {
  for (;;) {
    const r = await req(srv.url, 'POST', '/v1/explain', { table: 'docs', tenant_id: 't0', text: 'of', freshness: 'indexed', top_k: 1 });
    if (r.json?.pending_feature_count === 0) return;
    await new Promise((res) => setTimeout(res, 250));
  }
}

const long = recs.filter((r) => r.fields.body.split(' ').length >= 20);
const known = Array.from({ length: 60 }, (_, i) => long[(i * 7919) % long.length].fields.body.split(' ').slice(0, 30).join(' '));
const results = { records, stages: [] };
let written = 0;
let firstEpoch = 0;
for (const target of rounds) {
  while (written <= target) {
    // each round: its writes, then the indexes catching up with them
    const t0 = performance.now();
    const epoch = await writeAll(written);
    const t1 = performance.now();
    await waitIndexed();
    const t2 = performance.now();
    console.log(`round ${written}: writes ${((t1 - t0) / 1000).toFixed(2)} s, indexes ${((t2 - t1) / 1000).toFixed(2)} s more`);
    if (written === 0) firstEpoch = epoch;
    written++;
  }
  const kinds = {
    'text "of the"': () => Q({ text: 'of the' }),
    'text known-item, body': (i) => Q({ text: known[i % 60], text_field: 'body' }),
    'text known-item, every column': (i) => Q({ text: known[i % 60] }),
    'text "of the" at the first epoch': () => Q({ text: 'of the', temporal_as_of: firstEpoch }),
  };
  const stage = { rewrites: target, versions: target + 1, kinds: {} };
  for (const [name, fn] of Object.entries(kinds)) {
    const m = await measure(fn);
    const ex = m.sample.json?.explain;
    stage.kinds[name] = { p50: m.p50, p99: m.p99, srv_p50: m.srv_p50, scored: ex?.lexical_scored_documents, indexed: ex?.lexical_indexed_documents };
    console.log(`${target} rewrites`, name.padEnd(36), 'p50', m.p50, 'p99', m.p99, 'srv', m.srv_p50, 'scored', ex?.lexical_scored_documents, 'indexed', ex?.lexical_indexed_documents, JSON.stringify(m.status));
  }
  stage.rss = rssMB(srv.pid);
  results.stages.push(stage);
  fs.writeFileSync(OUT, JSON.stringify(results, null, 1));
}
await stopServer(srv);
fs.rmSync(DATA, { recursive: true, force: true });
