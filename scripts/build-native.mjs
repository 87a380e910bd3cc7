#!/usr/bin/env node
// Builds the napi addon (native/braid.<platform>.node) with cargo when it is
// missing or older than the Rust sources. `--release` builds optimised (for
// benchmarks); `--force` rebuilds regardless. Skipped where there are no
// crates (an installed package uses its prebuilt platform package).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = new Set(process.argv.slice(2));

/** Where a build of this profile goes: release builds (benchmarks, packages)
 * have their own directory so they never replace the dev addon tests load. */
export function nativeOutDir({ release = false } = {}) {
  return path.join(root, release ? path.join('target', 'bench-native') : 'native');
}

function newestSource(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'target' || entry.name.startsWith('.')) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(full));
    else if (/\.(rs|toml|d\.ts)$/.test(entry.name)) newest = Math.max(newest, statSync(full).mtimeMs);
  }
  return newest;
}

export function buildNative({ force = false, release = false } = {}) {
  if (!existsSync(path.join(root, 'crates'))) return undefined;
  const outDir = path.relative(root, nativeOutDir({ release }));
  const addon = path.join(root, outDir, `braid.${process.platform}-${process.arch}-gnu.node`);
  const sources = Math.max(newestSource(path.join(root, 'crates')), statSync(path.join(root, 'Cargo.toml')).mtimeMs);
  const built = existsSync(addon) ? statSync(addon).mtimeMs : 0;
  if (!force && built > sources) return path.join(root, outDir);
  const napi = path.join(root, 'node_modules', '@napi-rs', 'cli', 'dist', 'cli.js');
  const cmd = [
    napi, 'build', '--platform',
    '--manifest-path', 'crates/node/Cargo.toml',
    '--output-dir', outDir, '--js', 'index.cjs', '--dts', 'index.d.ts',
    // the engine's figures, events and doctor report, which cross as serde
    // JSON, are typed in this header; everything else is generated
    '--dts-header', readFileSync(path.join(root, 'crates', 'node', 'index-header.d.ts'), 'utf8'),
    ...(release ? ['--release'] : []),
  ];
  console.error(`building the native addon (${release ? 'release' : 'dev'} profile) with cargo...`);
  const res = spawnSync(process.execPath, cmd, { cwd: root, stdio: 'inherit' });
  if (res.status !== 0) throw new Error(`napi build failed with status ${res.status}`);
  return path.join(root, outDir);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  buildNative({ force: args.has('--force'), release: args.has('--release') || process.env.BRAID_RELEASE === '1' });
}
