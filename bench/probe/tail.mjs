// Which queries make each kind's p99 in the hybrid benchmark's WordNet run: the same 100,000 records and
// queries as `BRAID_BENCH_CORPUS=wordnet node bench/hybrid.mjs` (embedded, release addon), each query timed
// 7 times and the fastest taken (so a slow query is slow every time, not once), then the five slowest of
// each kind listed with their explain (strategy, candidates, phase and access path timings).
//
//   BRAID_NATIVE_DIR=target/bench-native taskset -c 0 node bench/probe/tail.mjs
//   KINDS=hybrid_filter BUDGET=10 ...   (kinds: text, vector, vector_filter, hybrid, hybrid_filter)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

process.env.BRAID_BENCH_CORPUS = 'wordnet';
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { loadCorpus } = await import('../corpus.mjs');
const { TABLE, columns } = await import('../braid-schema.mjs');
const { Braid } = await import(path.join(root, 'dist', 'index.js'));

const corpus = loadCorpus(100_000);
const dir = mkdtempSync(path.join(tmpdir(), 'braid-tail-'));
const db = Braid.open({ dataDir: dir });
await db.declareTable(TABLE, columns(corpus.dim));
for (let start = 0; start < corpus.n; start += 5000) {
  const batch = [];
  for (let i = start; i < Math.min(corpus.n, start + 5000); i++) {
    const fields = { text: corpus.text(i), category: corpus.category(i), year: corpus.year[i], flag: corpus.flag[i] === 1, embedding: corpus.vector(i) };
    batch.push({ table: TABLE, tenant_id: corpus.tenant(i), id: corpus.id(i), fields });
  }
  await db.putBatch(batch);
}
await db.waitIndexed(1_800_000);

// the benchmark's query of each kind (bench/peers/braid.mjs), at the tuned budget
const budget = Number(process.env.BUDGET ?? 10);
const kinds = (process.env.KINDS ?? 'text,vector,vector_filter,hybrid,hybrid_filter').split(',');
function query(kind, q) {
  const out = { table: TABLE, tenant_id: q.tenant, top_k: 10, return_fields: [] };
  if (kind === 'text' || kind.startsWith('hybrid')) Object.assign(out, { text: q.text, text_field: 'text' });
  if (kind !== 'text') Object.assign(out, { vector: q.vector, vector_field: 'embedding', candidate_budget: kind.startsWith('hybrid') ? Math.max(budget, 100) : budget });
  if (kind.endsWith('filter')) out.scalar_eq = { category: q.category };
  return out;
}
const round = (x) => Number(x.toFixed(3));
for (const kind of kinds) {
  const timed = [];
  for (const q of corpus.queries) {
    let best = Number.POSITIVE_INFINITY;
    for (let r = 0; r < 7; r++) {
      const t = performance.now();
      await db.query(query(kind, q));
      best = Math.min(best, performance.now() - t);
    }
    timed.push({ q, best });
  }
  timed.sort((a, b) => a.best - b.best);
  const at = (f) => timed[Math.floor(f * (timed.length - 1))].best.toFixed(3);
  console.log(`\n== ${kind}: ${timed.length} queries, fastest of 7 each: p50 ${at(0.5)} p90 ${at(0.9)} p99 ${at(0.99)} max ${timed.at(-1).best.toFixed(3)} ms`);
  for (const { q, best } of timed.slice(-5).reverse()) {
    const ex = (await db.query({ ...query(kind, q), explain: true })).explain;
    console.log(`${best.toFixed(3)} ms  query ${q.index}  category ${q.category}  "${(q.text ?? '').slice(0, 70)}"`);
    const phases = ex.phase_timings.map((p) => [p.phase, round(p.elapsed_ms)]);
    const paths = (ex.access_path_timings ?? []).map((p) => [p.access_path_id, round(p.build_ms), round(p.open_ms)]);
    console.log(`    ${ex.selected_strategy}; text ${ex.text_candidates}, vector ${ex.vector_candidates}, filter ${ex.scalar_filter_visible_records} rows, documents scored ${ex.lexical_scored_documents}`);
    console.log(`    phases ${JSON.stringify(phases)}; paths (build, open) ${JSON.stringify(paths)}`);
  }
}
db.close();
rmSync(dir, { recursive: true, force: true });
