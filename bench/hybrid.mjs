#!/usr/bin/env node
// Side-by-side benchmark of Braid's hybrid query engine against its peers
// (LanceDB, SQLite FTS5 + sqlite-vec, hnswlib-node, Orama) on one
// deterministic corpus (bench/corpus.mjs).
//
//   node bench/hybrid.mjs [--records 100000] [--systems braid-embedded,braid-http,lancedb,sqlite,hnswlib,orama]
//                         [--orama-records N] [--min-samples 400] [--max-seconds 15] [--skip-build]
//                         [--timeout-minutes 20] [--no-readme] [--reuse bench/results/hybrid-<time>.json]
//
// It builds the release addon (scripts/build-native.mjs --release, into
// target/bench-native) and dist/, installs bench/'s own dependencies when they
// are missing, then runs every system in its own child process, one after the
// other: ingest (including index builds), tune each approximate index to
// recall@10 >= 0.95 on the vector kinds, then four query kinds, sequentially
// after a warm-up. Results go to bench/results/hybrid-<time>.json, a table to
// stdout, and the table into bench/README.md under "## Hybrid queries vs peers"
// (between the generated-section markers; the text around them is kept).
//
// BRAID_BENCH_CORPUS=wordnet (or wordnet-short) runs the same on real
// English text, WordNet 3.1 glosses (bench/wordnet.mjs), into its own README
// section "## Real text (WordNet) vs peers".
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CORPUS, CORPUS_KIND, ensureCorpus, groundTruth, loadCorpus } from './corpus.mjs';

const bench = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(bench, '..');
const argv = process.argv.slice(2);
const has = (name) => argv.includes(`--${name}`);
function flag(name, fallback) {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && argv[i + 1] !== undefined ? argv[i + 1] : fallback;
}

const SYSTEMS = {
  'braid-embedded': { file: 'braid.mjs', args: ['--mode', 'embedded'], label: 'Braid (embedded)' },
  'braid-http': { file: 'braid.mjs', args: ['--mode', 'http'], label: 'Braid (HTTP, native QL)' },
  lancedb: { file: 'lancedb.mjs', args: [], label: 'LanceDB' },
  sqlite: { file: 'sqlite.mjs', args: [], label: 'SQLite FTS5 + sqlite-vec' },
  hnswlib: { file: 'hnswlib.mjs', args: [], label: 'hnswlib-node' },
  orama: { file: 'orama.mjs', args: [], label: 'Orama', nodeArgs: ['--max-old-space-size=12288'] },
};
const KINDS = ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'];
const KIND_LABEL = {
  text: 'text (BM25, tenant)',
  vector: 'vector (tenant)',
  vector_filter: 'vector + filter',
  hybrid: 'hybrid (RRF)',
  hybrid_filter: 'hybrid + filter',
};

const records = Number(flag('records', 100_000));
// Orama's text queries slow down steeply with corpus size (measured at 100k
// records: text p50 36 ms but p99 8.8 s, 1 QPS), so by default it runs on the
// first 20,000 records of the same corpus; --orama-records changes that
const oramaRecords = Number(flag('orama-records', Math.min(records, 20_000)));
const systems = flag('systems', Object.keys(SYSTEMS).join(',')).split(',').filter(Boolean);
const minSamples = flag('min-samples', '400');
const maxSeconds = flag('max-seconds', '15');
const timeoutMin = Number(flag('timeout-minutes', 20));
for (const s of systems) if (!SYSTEMS[s]) throw new Error(`unknown system ${s}; known: ${Object.keys(SYSTEMS).join(', ')}`);

function step(cmd, args, opts = {}) {
  console.error(`$ ${[cmd, ...args].join(' ')}`);
  const res = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', ...opts });
  if (res.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed with status ${res.status}`);
}

// -- build and install
const nativeDir = path.join(root, 'target', 'bench-native');
if (!has('skip-build')) {
  step(process.execPath, ['scripts/build-native.mjs', '--release']);
  // the TypeScript half of scripts/build.mjs: the harness loads the release
  // addon, so it does not need (or rebuild) the dev one
  step(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json']);
}
const benchPkg = JSON.parse(readFileSync(path.join(bench, 'package.json'), 'utf8'));
if (Object.keys(benchPkg.dependencies).some((d) => !existsSync(path.join(bench, 'node_modules', d, 'package.json')))) {
  step('npm', ['install', '--prefix', 'bench', '--no-audit', '--no-fund']);
}

// -- corpus and exact ground truth, built once before the children start
const t0 = performance.now();
for (const n of new Set([records, oramaRecords])) groundTruth(loadCorpus(n));
console.error(`corpus ready (${((performance.now() - t0) / 1000).toFixed(1)} s): ${ensureCorpus(records)}`);

// -- run each system in its own process
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const resultsDir = path.join(bench, 'results');
mkdirSync(resultsDir, { recursive: true });

function runChild(name, extra = []) {
  const sys = SYSTEMS[name];
  const n = name === 'orama' ? oramaRecords : records;
  const out = path.join(os.tmpdir(), `braid-hybrid-${process.pid}-${name}.json`);
  rmSync(out, { force: true });
  const args = [...(sys.nodeArgs ?? []), path.join(bench, 'peers', sys.file), ...sys.args, '--records', String(n), '--out', out, '--min-samples', minSamples, '--max-seconds', maxSeconds, ...extra];
  console.error(`\n== ${name}: node ${args.join(' ')}`);
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      cwd: root,
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, BRAID_NATIVE_DIR: nativeDir, RUST_LOG: process.env.RUST_LOG ?? 'error' },
    });
    const timer = setTimeout(() => {
      console.error(`[${name}] timed out after ${timeoutMin} min; killing ${child.pid}`);
      child.kill('SIGKILL');
    }, timeoutMin * 60_000);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      let result;
      try {
        result = JSON.parse(readFileSync(out, 'utf8'));
      } catch {
        result = { system: name, records: n, ok: false, error: `child exited with ${signal ?? code} and wrote no result` };
      }
      rmSync(out, { force: true });
      result.wall_s = (performance.now() - started) / 1000;
      resolve(result);
    });
  });
}

const results = {};
// --reuse FILE: systems not run now are reported from an earlier results file
// of the same corpus size (marked as such)
const reuse = flag('reuse', null);
if (reuse) {
  const prev = JSON.parse(readFileSync(reuse, 'utf8'));
  if (prev.corpus.records !== records) throw new Error(`--reuse ${reuse} is for ${prev.corpus.records} records, not ${records}`);
  for (const [name, r] of Object.entries(prev.results)) {
    if (!systems.includes(name) && SYSTEMS[name]) results[name] = { ...r, reused_from: path.basename(reuse) };
  }
}
for (const name of systems) {
  // Braid over HTTP is the same engine: it reuses the embedded run's tuned setting
  const tuned = results['braid-embedded']?.ok ? results['braid-embedded'].setting : null;
  results[name] = await runChild(name, name === 'braid-http' && tuned ? ['--setting', JSON.stringify(tuned)] : []);
}

// -- report: every system with a result, in the order of SYSTEMS
const reported = Object.keys(SYSTEMS).filter((n) => results[n]);
const cpuModel = (/model name\s*:\s*(.*)/.exec(readFileSync('/proc/cpuinfo', 'utf8')) ?? [])[1] ?? 'unknown';
const machine = {
  nproc: Number(spawnSync('nproc', [], { encoding: 'utf8' }).stdout.trim()) || os.cpus().length,
  cpu_model: cpuModel,
  memory_gb: Math.round(os.totalmem() / 2 ** 30),
  node: process.version,
  kernel: os.release(),
};
const command = `node bench/hybrid.mjs ${argv.join(' ')}`.trim();
const git = (...args) => spawnSync('git', args, { cwd: root, encoding: 'utf8' }).stdout.trim();
const addonFile = path.join(nativeDir, `braid.${process.platform}-${process.arch}-gnu.node`);
const build = {
  commit: git('rev-parse', '--short', 'HEAD'),
  crates_dirty: git('status', '--porcelain', '--', 'crates', 'Cargo.toml', 'Cargo.lock') !== '',
  addon_built: existsSync(addonFile) ? statSync(addonFile).mtime.toISOString().slice(0, 16).replace('T', ' ') : null,
};
const fmt = (x, d = 2) => (x === null || x === undefined || Number.isNaN(x) ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(d));
const label = (name) => SYSTEMS[name].label + ((results[name]?.records ?? records) !== records ? ` (${results[name].records.toLocaleString('en-US')} records)` : '');
function settingText(r) {
  if (!r.setting) return 'exact (no ANN index)';
  return Object.entries(r.setting).map(([k, v]) => `${k} ${v}`).join(', ') + (r.setting_reaches_target === false ? ' (target recall NOT reached)' : '');
}

function tuningText(r) {
  if (!r.tuning?.length) return '';
  const steps = r.tuning.map((t) => `${Object.values(t.setting).join('/')} -> ${['vector', 'vector_filter'].map((k) => fmt(t[k]?.recall, 3)).join('/')}`);
  return ` Tuning (${Object.keys(r.tuning[0].setting).join('/')} -> recall@10 vector/vector+filter): ${steps.join('; ')}.`;
}

function mainTable() {
  const lines = [];
  lines.push(`| system | ingest s | peak RSS MB | ${KINDS.map((k) => `${KIND_LABEL[k]} p50 / p99 ms, QPS`).join(' | ')} | recall@10 vector / vector+filter | setting |`);
  lines.push(`|---|---:|---:|${KINDS.map(() => '---:|').join('')}---:|---|`);
  for (const name of reported) {
    const r = results[name];
    if (!r.ok) {
      lines.push(`| ${label(name)} | failed: ${String(r.error).split('\n')[0].replaceAll('|', '/')} |`);
      continue;
    }
    const cells = KINDS.map((k) => {
      const m = r.kinds[k];
      return m ? `${fmt(m.p50_ms)} / ${fmt(m.p99_ms)}, ${fmt(m.qps, 0)}` : 'n/a';
    });
    const rec = ['vector', 'vector_filter'].map((k) => fmt(r.kinds[k]?.recall_at_10, 3)).join(' / ');
    lines.push(`| ${label(name)} | ${fmt(r.ingest_ms / 1000, 1)} | ${fmt(r.peak_rss_mb, 0)} | ${cells.join(' | ')} | ${rec} | ${settingText(r)} |`);
  }
  return lines.join('\n');
}

function ratioTable(base) {
  const b = results[base];
  if (!b?.ok) return `(${base} did not complete; no ratios)`;
  const lines = [];
  lines.push(`| peer | ${KINDS.map((k) => `${KIND_LABEL[k]}: p50 ratio, QPS ratio`).join(' | ')} |`);
  lines.push(`|---|${KINDS.map(() => '---:|').join('')}`);
  for (const name of reported) {
    if (name === base || name.startsWith('braid')) continue;
    const r = results[name];
    if (!r.ok) continue;
    const cells = KINDS.map((k) => {
      const x = b.kinds[k];
      const y = r.kinds[k];
      if (!x || !y) return 'n/a';
      return `${fmt(x.p50_ms / y.p50_ms)}x, ${fmt(x.qps / y.qps)}x`;
    });
    lines.push(`| ${label(name)} | ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

function braidBreakdown(name) {
  const r = results[name];
  if (!r?.ok || !r.explain_sample) return '';
  const sampled = Object.values(r.explain_sample)[0]?.sampled ?? 0;
  const lines = [`| kind | strategy (of ${sampled} sampled queries) | mean explain phases (ms) | text / vector candidates |`, '|---|---|---|---:|'];
  for (const k of KINDS) {
    const s = r.explain_sample[k];
    if (!s) continue;
    const phases = Object.entries(s.mean_phase_ms)
      .filter(([, v]) => v >= 0.005)
      .map(([p, v]) => `${p} ${v.toFixed(2)}`)
      .join(', ');
    const strategies = Object.entries(s.strategies).map(([st, c]) => `${st} ${c}`).join(', ');
    lines.push(`| ${KIND_LABEL[k]} | ${strategies} | ${phases} | ${fmt(s.mean_text_candidates, 0)} / ${fmt(s.mean_vector_candidates, 0)} |`);
  }
  return lines.join('\n');
}

function overhead() {
  const rows = [];
  for (const name of ['braid-embedded', 'braid-http']) {
    const r = results[name];
    if (!r?.ok || !r.explain_sample) continue;
    for (const k of KINDS) {
      const s = r.explain_sample[k];
      if (!s) continue;
      const client = s.mean_client_ms;
      const engine = s.mean_phase_ms.total;
      rows.push(`| ${SYSTEMS[name].label} | ${KIND_LABEL[k]} | ${fmt(engine)} | ${fmt(client)} | ${client ? fmt(client - engine) : '-'} | ${s.mean_response_bytes ? Math.round(s.mean_response_bytes).toLocaleString('en-US') : '-'} |`);
    }
  }
  if (!rows.length) return '';
  return ['| system | kind | engine total (explain, mean ms) | caller sees (mean ms, same queries) | difference ms | response bytes (mean) |', '|---|---|---:|---:|---:|---:|', ...rows].join('\n');
}

/** Plain facts for the "not ahead" paragraph, computed from this run. */
function findings() {
  const b = results['braid-embedded'];
  if (!b?.ok) return [];
  const out = [];
  for (const k of KINDS) {
    const losses = [];
    for (const name of reported) {
      if (name.startsWith('braid') || !results[name].ok || !results[name].kinds[k]) continue;
      const p = results[name].kinds[k];
      if (p.p50_ms < b.kinds[k].p50_ms) losses.push(`${label(name)} ${fmt(b.kinds[k].p50_ms / p.p50_ms)}x faster at p50 (${fmt(p.p50_ms)} vs ${fmt(b.kinds[k].p50_ms)} ms)`);
    }
    if (losses.length) out.push(`- ${KIND_LABEL[k]}: Braid is behind ${losses.join('; ')}.`);
  }
  const ingestFaster = reported.filter((n) => !n.startsWith('braid') && results[n].ok && results[n].records === records && results[n].ingest_ms < b.ingest_ms);
  if (ingestFaster.length) out.push(`- ingest: ${ingestFaster.map((n) => `${label(n)} ${fmt(results[n].ingest_ms / 1000, 1)} s`).join(', ')} vs Braid ${fmt(b.ingest_ms / 1000, 1)} s (writes ${fmt(b.ingest.writes_ms / 1000, 1)} s + waiting for the indexes ${fmt(b.ingest.index_wait_ms / 1000, 1)} s).`);
  const leaner = reported.filter((n) => !n.startsWith('braid') && results[n].ok && results[n].records === records && results[n].peak_rss_mb < b.peak_rss_mb);
  if (leaner.length) out.push(`- memory: ${leaner.map((n) => `${label(n)} ${fmt(results[n].peak_rss_mb, 0)} MB`).join(', ')} vs Braid ${fmt(b.peak_rss_mb, 0)} MB peak RSS.`);
  return out;
}

const wordnetMeta = CORPUS_KIND === 'zipf' ? null : loadCorpus(records).meta;
const corpusLine = wordnetMeta
  ? `${wordnetMeta.records.toLocaleString('en-US')} records of real English text: WordNet 3.1 glosses (${wordnetMeta.source}; ${wordnetMeta.tokens.toLocaleString('en-US')} tokens, ${wordnetMeta.vocab.toLocaleString('en-US')} distinct words), ${wordnetMeta.tenants === 1 ? 'one tenant' : `${wordnetMeta.tenants} tenants (each query asks its gloss's)`}, 45 lexicographer-file categories, ${wordnetMeta.queries} queries: ${CORPUS_KIND === 'wordnet' ? `known-item, ${wordnetMeta.longWords} consecutive words of a gloss, filter = that synset's category` : 'one to three words of a gloss'}; ${wordnetMeta.dim}-d vectors derived from the words (tf x self-information through a seeded Gaussian projection, normalised)`
  : `${records.toLocaleString('en-US')} records (4 tenants, 12 skewed categories), ${CORPUS.queries} queries; text from a ${CORPUS.vocab.toLocaleString('en-US')}-word Zipf vocabulary (s ${CORPUS.zipfS}, ${CORPUS.minWords}-${CORPUS.maxWords} words, ${Math.round(CORPUS.topicShare * 100)}% from a per-category topic), ${CORPUS.dim}-d vectors derived from the text (tf x self-information through a seeded Gaussian projection, normalised)`;

/** MRR@10 per system of the kinds that have it (known-item queries), or '' when none do. */
function mrrTable() {
  const kinds = ['text', 'hybrid', 'hybrid_filter'];
  const rows = Object.keys(SYSTEMS).filter((n) => results[n]?.ok && kinds.some((k) => results[n].kinds[k]?.mrr_at_10 != null));
  if (!rows.length) return '';
  return [
    `| system | ${kinds.map((k) => KIND_LABEL[k]).join(' | ')} |`,
    `|---|${kinds.map(() => '---:').join('|')}|`,
    ...rows.map((n) => `| ${label(n)} | ${kinds.map((k) => (results[n].kinds[k]?.mrr_at_10 != null ? results[n].kinds[k].mrr_at_10.toFixed(3) : 'n/a')).join(' | ')} |`),
  ].join('\n');
}

const generated = [
  `Run ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC with \`${command}\` on ${machine.nproc} cores (${machine.cpu_model}), ${machine.memory_gb} GB RAM, Node ${machine.node}; release addon built ${build.addon_built} UTC, tree at ${build.commit}${build.crates_dirty ? ' (crates/ had uncommitted changes when the report was written)' : ''}.`,
  '',
  `Corpus: ${corpusLine}.`,
  '',
  mainTable(),
  '',
  'Ratios Braid (embedded) / peer: a p50 ratio below 1 and a QPS ratio above 1 mean Braid is ahead.',
  '',
  ratioTable('braid-embedded'),
  '',
  ...(mrrTable() ? ['Quality of the known-item queries: MRR@10 of the synset each query was taken from (1 = always first):', '', mrrTable(), ''] : []),
  ...(results['braid-embedded']?.ok ? ['Where Braid (embedded) spends the time (`explain.phase_timings` and `access_path_timings`, mean over the first 50 queries of each kind):', '', braidBreakdown('braid-embedded'), ''] : []),
  ...(overhead() ? ['What the engine spends against what the caller sees, on the same 50 queries per kind (the difference is building and parsing the JSON response of ids and scores (`return_fields: []`) through the addon; over HTTP also QL parsing of the query vector, fastify and the socket):', '', overhead(), ''] : []),
  ...(findings().length ? ['Measured in this run:', '', ...findings(), ''] : []),
  'Settings and notes per system:',
  '',
  ...reported.map((n) => `- ${label(n)}: ${results[n].ok ? `${settingText(results[n])}${results[n].setting_given ? ' (taken from the embedded run)' : ''}` : `FAILED: ${String(results[n].error).split('\n')[0]}`}. ${(results[n].notes ?? []).join('; ')}.${tuningText(results[n])} Load average (1 min) at start / end: ${fmt(results[n].loadavg_start?.[0])} / ${fmt(results[n].loadavg_end?.[0])}.${results[n].reused_from ? ` Reused from ${results[n].reused_from} (--reuse).` : ''}`),
].join('\n');

console.log(`\n${generated}\n`);
const file = path.join(resultsDir, `hybrid-${CORPUS_KIND === 'zipf' ? '' : `${CORPUS_KIND}-`}${stamp}.json`);
writeFileSync(file, JSON.stringify({ command, machine, build, corpus: wordnetMeta ? { ...wordnetMeta, kind: CORPUS_KIND } : { ...CORPUS, records, orama_records: oramaRecords }, results }, null, 2));
console.error(`results: ${path.relative(root, file)}`);

// -- README: replace the generated block of the section, keep the rest
if (!has('no-readme')) {
  const readme = path.join(bench, 'README.md');
  const tag = CORPUS_KIND === 'zipf' ? 'hybrid-bench' : `hybrid-bench-${CORPUS_KIND}`;
  const BEGIN = `<!-- ${tag}:begin (generated by bench/hybrid.mjs) -->`;
  const END = `<!-- ${tag}:end -->`;
  const SECTION = CORPUS_KIND === 'zipf' ? '## Hybrid queries vs peers' : `## Real text (WordNet${CORPUS_KIND === 'wordnet-short' ? ', short queries' : ', known-item queries'}) vs peers`;
  const block = `${BEGIN}\n${generated}\n${END}`;
  let text = existsSync(readme) ? readFileSync(readme, 'utf8') : '# Benchmarks\n';
  if (text.includes(BEGIN) && text.includes(END)) {
    text = text.slice(0, text.indexOf(BEGIN)) + block + text.slice(text.indexOf(END) + END.length);
  } else if (text.includes(SECTION)) {
    const at = text.indexOf(SECTION);
    const next = text.indexOf('\n## ', at + 5);
    const insertAt = next < 0 ? text.length : next;
    text = `${text.slice(0, insertAt).trimEnd()}\n\n${block}\n${text.slice(insertAt)}`;
  } else {
    text = `${text.trimEnd()}\n\n${SECTION}\n\n${block}\n`;
  }
  writeFileSync(readme, text);
  console.error(`updated ${path.relative(root, readme)}`);
}
