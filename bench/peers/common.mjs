// What every system's child process shares: load the cached corpus, time the
// ingest, tune the approximate index to recall@10 >= 0.95, then run the four
// query kinds sequentially (after a warm-up) and write a result JSON.
//
// A system module calls `run(system)` with
//   name, kinds: which of KINDS it answers,
//   ingest(corpus) -> info (free-form, goes to the result),
//   ladder: [setting, ...] tried in order until both vector kinds reach the
//     target recall (null when the vector path is exact),
//   query(kind, q, setting) -> [record id, ...] (top 10, best first),
//   peakRss?() -> bytes (when the work happens in another process),
//   close?().
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { groundTruth, loadCorpus, recallAt, recordId } from '../corpus.mjs';

export const KINDS = ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'];
export const TOP_K = 10;
export const TARGET_RECALL = 0.95;
/** Candidates each side of a hybrid query contributes to RRF (k = 60) where the system lets us choose. */
export const HYBRID_DEPTH = 100;
export const RRF_K = 60;

export function flag(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

const now = () => performance.now();

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

function log(name, msg) {
  process.stderr.write(`[${name}] ${msg}\n`);
}

async function recallOf(system, corpus, truth, kind, setting) {
  let sum = 0;
  const t = now();
  for (const q of corpus.queries) {
    const ids = await system.query(kind, q, setting);
    sum += recallAt(truth[kind][q.index], ids);
  }
  return { recall: sum / corpus.queries.length, mean_ms: (now() - t) / corpus.queries.length };
}

export async function run(system) {
  const records = Number(flag('records', 100_000));
  const out = flag('out', null);
  const minSamples = Number(flag('min-samples', 400));
  const maxSeconds = Number(flag('max-seconds', 15));
  const result = { system: system.name, records, kinds: {}, notes: system.notes ?? [], loadavg_start: os.loadavg() };
  try {
    const corpus = loadCorpus(records);
    const truth = groundTruth(corpus, TOP_K);

    const t0 = now();
    result.ingest = await system.ingest(corpus);
    result.ingest_ms = now() - t0;
    log(system.name, `ingested ${records} records in ${(result.ingest_ms / 1000).toFixed(1)} s`);

    // tune: the first setting of the ladder whose recall@10 reaches the
    // target on both vector kinds
    let setting = null;
    const vectorKinds = ['vector', 'vector_filter'].filter((k) => system.kinds.includes(k));
    const given = flag('setting', null);
    if (given) {
      // tuned already (by another run of the same engine): reuse its setting
      setting = JSON.parse(given);
      result.setting = setting;
      result.setting_given = true;
    } else if (system.ladder && vectorKinds.length) {
      result.tuning = [];
      for (const candidate of system.ladder) {
        const row = { setting: candidate };
        // warm the path once so the first step is not penalised
        if (result.tuning.length === 0) for (const q of corpus.queries.slice(0, 20)) await system.query(vectorKinds[0], q, candidate);
        let ok = true;
        for (const kind of vectorKinds) {
          const r = await recallOf(system, corpus, truth, kind, candidate);
          row[kind] = r;
          ok &&= r.recall >= TARGET_RECALL;
        }
        result.tuning.push(row);
        log(system.name, `tuning ${JSON.stringify(candidate)}: ${vectorKinds.map((k) => `${k} ${row[k].recall.toFixed(3)} (${row[k].mean_ms.toFixed(2)} ms)`).join(', ')}`);
        setting = candidate;
        if (ok) break;
      }
      result.setting = setting;
      result.setting_reaches_target = result.tuning.at(-1) && vectorKinds.every((k) => result.tuning.at(-1)[k].recall >= TARGET_RECALL);
    } else {
      setting = system.ladder?.[0] ?? null;
      result.setting = setting;
    }

    for (const kind of KINDS) {
      if (!system.kinds.includes(kind)) continue;
      // warm-up: one pass over the first 30 queries
      for (const q of corpus.queries.slice(0, 30)) await system.query(kind, q, setting);
      const latencies = [];
      let recallSum = 0;
      let hitsSum = 0;
      // known-item queries (the real-text corpus): reciprocal rank of the synset the words came from
      let rrSum = 0;
      let known = 0;
      // each known-item query's rank of its target (0-based, -1 beyond the top 10), kept in the results
      // JSON so that two systems' rankings can be compared query by query
      const ranks = [];
      let pass = 0;
      const started = now();
      while (pass === 0 || (latencies.length < minSamples && now() - started < maxSeconds * 1000)) {
        for (const q of corpus.queries) {
          const t = now();
          const ids = await system.query(kind, q, setting);
          latencies.push(now() - t);
          if (pass === 0) {
            hitsSum += ids.length;
            if (truth[kind]) recallSum += recallAt(truth[kind][q.index], ids);
            if (q.target !== undefined) {
              const rank = ids.slice(0, TOP_K).indexOf(recordId(q.target));
              rrSum += rank >= 0 ? 1 / (rank + 1) : 0;
              known++;
              ranks.push(rank);
            }
          }
        }
        pass++;
      }
      const wall = now() - started;
      const sorted = [...latencies].sort((a, b) => a - b);
      result.kinds[kind] = {
        queries: latencies.length,
        p50_ms: percentile(sorted, 50),
        p99_ms: percentile(sorted, 99),
        mean_ms: latencies.reduce((a, b) => a + b, 0) / latencies.length,
        qps: (latencies.length / wall) * 1000,
        mean_hits: hitsSum / corpus.queries.length,
        recall_at_10: truth[kind] ? recallSum / corpus.queries.length : null,
        mrr_at_10: known ? rrSum / known : null,
        ...(known ? { target_ranks: ranks } : {}),
      };
      const k = result.kinds[kind];
      log(system.name, `${kind}: p50 ${k.p50_ms.toFixed(3)} ms, p99 ${k.p99_ms.toFixed(3)} ms, ${k.qps.toFixed(0)} qps${k.recall_at_10 !== null ? `, recall@10 ${k.recall_at_10.toFixed(3)}` : ''}${k.mrr_at_10 !== null ? `, MRR@10 ${k.mrr_at_10.toFixed(3)}` : ''}`);
    }
    if (system.explainSample) result.explain_sample = await system.explainSample(corpus, setting);
    result.peak_rss_mb = (system.peakRss ? await system.peakRss() : process.resourceUsage().maxRSS * 1024) / 2 ** 20;
    result.loadavg_end = os.loadavg();
    result.ok = true;
  } catch (err) {
    result.ok = false;
    result.error = err instanceof Error ? `${err.message}\n${err.stack}` : String(err);
    log(system.name, `failed: ${result.error}`);
  } finally {
    try {
      await system.close?.();
    } catch (err) {
      log(system.name, `close failed: ${err}`);
    }
  }
  const json = JSON.stringify(result, null, 2);
  if (out) writeFileSync(out, json);
  else process.stdout.write(`${json}\n`);
  process.exit(result.ok ? 0 : 1);
}

/** Reciprocal-rank fusion of ranked id lists (k = 60), top `limit`. */
export function rrf(lists, limit = TOP_K, k = RRF_K) {
  const score = new Map();
  for (const list of lists) list.forEach((id, rank) => { score.set(id, (score.get(id) ?? 0) + 1 / (k + rank + 1)); });
  return [...score.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, limit).map(([id]) => id);
}

/** Peak resident set (VmHWM) of another live process, in bytes. */
export async function vmHwm(pid) {
  const { readFileSync } = await import('node:fs');
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : null;
}
