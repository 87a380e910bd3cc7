#!/usr/bin/env node
// Where a checkpoint's time goes while records are loaded: the embedded
// engine (release addon in target/bench-native, or BRAID_NATIVE_DIR) takes --records WordNet
// records (the 100,000 of bench/.cache, repeated under new ids past that)
// with 256-d vectors in put-batches of 5,000, with the default checkpoint
// settings (or --checkpoint-bytes), and prints every checkpoint event: its
// trigger, the epoch, the image's bytes, the duration and its phases in ms
// (docs/storage.md, "Where a checkpoint's stall goes"). Writes that arrive
// during a checkpoint wait for all of it.
//
//   node bench/checkpoints.mjs [--records 300000] [--checkpoint-bytes N]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const RECORDS = arg('records', 300_000);
const CHECKPOINT_BYTES = arg('checkpoint-bytes', undefined);

process.env.BRAID_NATIVE_DIR ??= path.join(root, 'target', 'bench-native');
const { ensureCorpus, loadCorpus } = await import('./corpus.mjs');
const { TABLE, columns } = await import('./braid-schema.mjs');
const { Braid } = await import(path.join(root, 'dist', 'index.js'));

ensureCorpus(100_000);
const corpus = loadCorpus(100_000);
const dataDir = mkdtempSync(path.join(tmpdir(), 'braid-checkpoints-'));
const db = Braid.open({ dataDir, ...(CHECKPOINT_BYTES ? { checkpointBytes: CHECKPOINT_BYTES } : {}) });
await db.declareTable(TABLE, columns(corpus.dim));

const round = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Math.round(v)]));
function report() {
  for (const e of db.events().filter((e) => e.event === 'checkpoint')) {
    console.log(JSON.stringify({ trigger: e.trigger, epoch: e.epoch, image_bytes: e.bytes, duration_ms: Math.round(e.duration_ms), phases: round(e.phases) }));
  }
}

for (let start = 0; start < RECORDS; start += 5_000) {
  const batch = [];
  for (let i = start; i < Math.min(RECORDS, start + 5_000); i++) {
    const j = i % corpus.n;
    batch.push({
      table: TABLE,
      tenant_id: 't0',
      id: `r${i}`,
      fields: { text: corpus.text(j), category: corpus.category(j), year: corpus.year[j], flag: corpus.flag[j] === 1, embedding: corpus.vector(j) },
    });
  }
  await db.putBatch(batch);
  report();
}
db.close();
rmSync(dataDir, { recursive: true, force: true });
