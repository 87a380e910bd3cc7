#!/usr/bin/env node
// Latest-epoch vector queries as records are rewritten. The vector graph
// holds every kept version (a temporal_as_of read finds the vectors it had),
// so a read at the latest epoch filters the superseded ones out inside its
// walk: this measures what that costs as the history grows. Embedded API on
// the addon in native/ (or BRAID_NATIVE_DIR), one tenant, --records records
// with --dim random vectors written in put-batches of 1,000, then rewritten
// --rounds times; after each pass it waits for the indexes and times 200
// top-10 ids-only queries (fixed random vectors), one at a time, and prints
// p50 / p90 and the access path the planner chose.
//
// With --restart the database is closed and opened again after each pass's
// writes (before its queries), as a server restarted between them.
//
//   taskset -c 0 node bench/rewrites.mjs [--records 20000] [--rounds 4] [--dim 64] [--history-epochs N] [--restart]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { open } from '../dist/index.js';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const records = arg('records', 20_000);
const rounds = arg('rounds', 4);
const dim = arg('dim', 64);
const historyEpochs = arg('history-epochs', undefined);
const restart = process.argv.includes('--restart');

let seed = 7;
const random = () => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff - 0.5;
};
const vector = () => Float32Array.from({ length: dim }, random);
const queries = Array.from({ length: 200 }, vector);

const dir = mkdtempSync(path.join(tmpdir(), 'braid-rewrites-'));
const options = { dataDir: dir, ...(historyEpochs === undefined ? {} : { historyEpochs }) };
let db = open(options);
const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

console.log(`${records} records, ${dim}-d, ${rounds} rewrites${historyEpochs === undefined ? ', all history kept' : `, --history-epochs ${historyEpochs}`}${restart ? ', restarted after each pass' : ''}`);
console.log('versions written | p50 ms | p90 ms | paths (of 200)');
try {
  for (let round = 0; round <= rounds; round++) {
    for (let i = 0; i < records; i += 1000) {
      const n = Math.min(1000, records - i);
      await db.putBatch(Array.from({ length: n }, (_, j) => ({ table: 'v', tenant_id: 't', id: `r${i + j}`, fields: { e: vector() } })));
    }
    await db.waitIndexed(600_000);
    if (restart) {
      await db.close();
      db = open(options);
      await db.waitIndexed(600_000);
    }
    const times = [];
    const paths = {};
    for (const q of queries) {
      const started = process.hrtime.bigint();
      const r = await db.query({ table: 'v', tenant_id: 't', vector: q, top_k: 10, return_fields: [], explain: true });
      times.push(Number(process.hrtime.bigint() - started) / 1e6);
      const path = r.explain.exact_fallback_triggered ? 'exact' : 'graph';
      paths[path] = (paths[path] ?? 0) + 1;
    }
    times.sort((a, b) => a - b);
    const shown = Object.entries(paths).map(([k, v]) => `${k} ${v}`).join(', ');
    console.log(`${((round + 1) * records).toLocaleString('en')} | ${percentile(times, 0.5).toFixed(3)} | ${percentile(times, 0.9).toFixed(3)} | ${shown}`);
  }
} finally {
  await db.close();
  rmSync(dir, { recursive: true, force: true });
}
