#!/usr/bin/env node
// `npm run bench`: every benchmark, one after another (they must not share
// the two cores). `npm run bench -- http` runs one: http, gateway, hybrid, scale.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const all = { http: 'bench/http.mjs', gateway: 'bench/gateway.mjs', hybrid: 'bench/hybrid.mjs', scale: 'bench/scale.mjs' };
const chosen = process.argv.slice(2).filter((a) => a in all);
for (const name of chosen.length ? chosen : Object.keys(all)) {
  console.log(`\n## ${name}\n`);
  const res = spawnSync(process.execPath, [path.join(root, all[name])], { cwd: root, stdio: 'inherit' });
  if (res.status !== 0) process.exit(res.status ?? 1);
}
