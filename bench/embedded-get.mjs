// Embedded get latency through the binding: 2,000 small records, then
// 100,000 gets one at a time (each awaited before the next) and 100,000 in
// bursts of 2,000 (Promise.all), twice each. A get alone is answered on the
// JS thread when its record's bytes are cached (docs/embedded.md); a burst
// goes through the worker pool.
//
//   node scripts/build-native.mjs --release && npm run build:ts
//   BRAID_NATIVE_DIR=target/bench-native taskset -c 0 node bench/embedded-get.mjs
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadNative } from '../dist/native/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'braid-embedded-get-'));
const engine = loadNative().NativeEngine.open({ dataDir: dir });
await engine.declareTable(null, 'bench', { title: { type: 'string' }, n: { type: 'number' } });
const records = Array.from({ length: 2000 }, (_, i) => ({
  table: 'bench',
  tenant_id: `t${i % 4}`,
  id: `seed-${i}`,
  fields: { title: `record ${i} about solar wind`, n: i % 100 },
}));
await engine.put(null, records);
const keys = records.map(({ table, tenant_id, id }) => ({ table, tenant_id, id }));
const rounds = 50;
const perGet = (started) => (((performance.now() - started) * 1000) / (rounds * keys.length)).toFixed(2);
for (let pass = 1; pass <= 2; pass++) {
  let started = performance.now();
  let found = 0;
  for (let r = 0; r < rounds; r++) for (const key of keys) if (await engine.get(null, key)) found += 1;
  if (found !== rounds * keys.length) throw new Error(`found ${found} records`);
  const alone = perGet(started);
  started = performance.now();
  for (let r = 0; r < rounds; r++) await Promise.all(keys.map((key) => engine.get(null, key)));
  console.log(`pass ${pass}: one at a time ${alone} µs per get; in bursts of ${keys.length} ${perGet(started)} µs per get`);
}
engine.close();
rmSync(dir, { recursive: true, force: true });
