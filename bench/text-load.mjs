#!/usr/bin/env node
// The text path's cost on a load: 100,000 WordNet glosses (with their
// lexicographer categories, no vectors) written in-process with putBatch of
// 5,000, then waitIndexed; prints the write time, the time until the text
// index has every row, and the process's CPU time. Pin it to one core to
// compare builds (`BRAID_NATIVE_DIR` picks the addon):
//
//   BRAID_BENCH_CORPUS=wordnet taskset -c 0 node bench/text-load.mjs [--records 100000]
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { flag, root } from './service/common.mjs';

process.env.BRAID_BENCH_CORPUS ||= 'wordnet';
const { ensureCorpus, loadCorpus } = await import('./corpus.mjs');
const { Braid } = await import(path.join(root, 'dist', 'index.js'));

const records = Number(flag('records', 100_000));
ensureCorpus(records);
const corpus = loadCorpus(records);
const dir = mkdtempSync(path.join(os.tmpdir(), 'braid-text-load-'));
try {
  const db = Braid.open({ dataDir: dir });
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const since = () => Number(process.hrtime.bigint() - t0) / 1e6;
  const chunk = 5_000;
  for (let start = 0; start < corpus.n; start += chunk) {
    const rows = [];
    for (let i = start; i < Math.min(corpus.n, start + chunk); i++) {
      rows.push({ table: 'docs', tenant_id: corpus.tenant(i), id: `r${i}`, fields: { text: corpus.text(i), category: corpus.category(i) } });
    }
    await db.putBatch(rows);
  }
  const writes = since();
  if (!(await db.waitIndexed(30 * 60_000))) throw new Error('waitIndexed timed out');
  const indexed = since();
  const cpu = process.cpuUsage(cpu0);
  db.close();
  console.log(`${corpus.n} records: writes ${writes.toFixed(0)} ms, indexed after ${indexed.toFixed(0)} ms, process CPU ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
