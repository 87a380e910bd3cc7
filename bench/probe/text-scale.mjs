// Text query cost as the corpus grows: the scale probe's WordNet records (title, body, pos, three text
// columns; bench/probe/lib.mjs) loaded over HTTP into one data directory per size, kept under --dir so
// another build can be timed on the same data, then text queries timed one at a time: short term
// queries, stopword queries and 20-40-word known-item queries, over every column and over `body` alone.
//
//   node bench/probe/text-scale.mjs [--sizes 50000,200000] [--dir /tmp/braid-text-scale] [--runs 60]
//
// Queries ask for no fields (`return_fields: []`), so the client p50 is not the transfer of vectors.
// Prints per size and query the client p50, the server's p50 (the explain's total phase) and the
// documents scored (lexical_scored_documents); writes bench/results/text-scale-<time>.json.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildRecords, measure, req, startServer, stopServer } from './lib.mjs';

const flag = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const sizes = flag('sizes', '50000,200000').split(',').map(Number);
const root = flag('dir', '/tmp/braid-text-scale');
const runs = Number(flag('runs', 60));
const OUT = fileURLToPath(new URL(`../results/text-scale-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url));

const { recs } = buildRecords(Math.max(...sizes));
const results = [];
for (const size of sizes) {
  const dir = path.join(root, String(size));
  const fresh = !fs.existsSync(path.join(dir, 'loaded'));
  if (fresh) fs.rmSync(dir, { recursive: true, force: true });
  const srv = await startServer(dir);
  try {
    const Q = (body) => req(srv.url, 'POST', '/v1/query', { table: 'docs', tenant_id: 't0', return_fields: [], ...body });
    if (fresh) {
      for (let at = 0; at < size; at += 1000) {
        const records = recs.slice(at, Math.min(size, at + 1000)).map((r) => ({ table: 'docs', tenant_id: 't0', id: r.id, fields: r.fields }));
        const r = await req(srv.url, 'POST', '/v1/records/put-batch', { records });
        if (r.status !== 200) throw new Error(`load ${r.status} ${JSON.stringify(r.json)}`);
      }
    }
    for (;;) {
      const r = await req(srv.url, 'POST', '/v1/explain', { table: 'docs', tenant_id: 't0', text: 'of', freshness: 'indexed', top_k: 1 });
      if (r.json?.pending_feature_count === 0) break;
      await new Promise((res) => setTimeout(res, 250));
    }
    if (fresh) fs.writeFileSync(path.join(dir, 'loaded'), String(size));
    const mine = recs.slice(0, size);
    const longGloss = mine.filter((r) => r.fields.body.split(' ').length >= 20);
    const known = Array.from({ length: 60 }, (_, i) => longGloss[(i * 7919) % longGloss.length].fields.body.split(' ').slice(0, 40).join(' '));
    const short = Array.from({ length: 60 }, (_, i) => mine[(i * 104729) % size].fields.body.split(' ').slice(0, 3).join(' '));
    const kinds = {
      'text "a"': () => Q({ text: 'a' }),
      'text "a", body': () => Q({ text: 'a', text_field: 'body' }),
      'text "of the"': () => Q({ text: 'of the' }),
      'text "of the", body': () => Q({ text: 'of the', text_field: 'body' }),
      'text 3 words': (i) => Q({ text: short[i % 60] }),
      'text 3 words, body': (i) => Q({ text: short[i % 60], text_field: 'body' }),
      'text "the a of to and in"': () => Q({ text: 'the a of to and in' }),
      'text "the a of to and in", body': () => Q({ text: 'the a of to and in', text_field: 'body' }),
      'text known-item 20-40 words': (i) => Q({ text: known[i % 60] }),
      'text known-item, body': (i) => Q({ text: known[i % 60], text_field: 'body' }),
      'text known-item, body, top_k 100': (i) => Q({ text: known[i % 60], text_field: 'body', top_k: 100 }),
    };
    const stage = { size, kinds: {} };
    for (const [name, fn] of Object.entries(kinds)) {
      const m = await measure(fn, runs, 10);
      const ex = m.sample.json?.explain;
      stage.kinds[name] = { p50: m.p50, p99: m.p99, srv_p50: m.srv_p50, scored: ex?.lexical_scored_documents, status: m.status };
      console.log(size, name.padEnd(36), 'p50', m.p50, 'srv', m.srv_p50, 'scored', ex?.lexical_scored_documents, JSON.stringify(m.status));
    }
    results.push(stage);
  } finally {
    await stopServer(srv);
  }
}
fs.mkdirSync(path.dirname(OUT), { recursive: true });
fs.writeFileSync(OUT, JSON.stringify(results, null, 1));
console.log('wrote', OUT);
