#!/usr/bin/env node
// Builds the napi addon with cargo when it is missing, older than the Rust
// sources, or of another profile than asked for.
//
//   (default)   release profile into native/: what `npm install` builds and
//               `npm start`, the tests and the package load
//   --dev       dev profile into native/ (quicker to rebuild while working on
//               the engine; the next default build replaces it)
//   --release   release profile into target/bench-native, which benchmarks
//               load through BRAID_NATIVE_DIR
//   --force     rebuild regardless
//
// Skipped where there are no crates (an installed package uses its prebuilt
// platform package).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = new Set(process.argv.slice(2));

/** Where a build goes: native/, or target/bench-native for benchmarks. */
export function nativeOutDir({ bench = false } = {}) {
  return path.join(root, bench ? path.join('target', 'bench-native') : 'native');
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

export function buildNative({ force = false, dev = false, bench = false } = {}) {
  if (!existsSync(path.join(root, 'crates'))) return undefined;
  const profile = dev && !bench ? 'dev' : 'release';
  const outDir = path.relative(root, nativeOutDir({ bench }));
  const addon = path.join(root, outDir, `braid.${process.platform}-${process.arch}-gnu.node`);
  // which profile the addon there was built with, written after each build
  const stamp = path.join(root, outDir, '.profile');
  const sources = Math.max(newestSource(path.join(root, 'crates')), statSync(path.join(root, 'Cargo.toml')).mtimeMs);
  const built = existsSync(addon) ? statSync(addon).mtimeMs : 0;
  const builtProfile = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : 'dev';
  if (!force && built > sources && builtProfile === profile) return path.join(root, outDir);
  const napi = path.join(root, 'node_modules', '@napi-rs', 'cli', 'dist', 'cli.js');
  const cmd = [
    napi, 'build', '--platform',
    '--manifest-path', 'crates/node/Cargo.toml',
    '--output-dir', outDir, '--js', 'index.cjs', '--dts', 'index.d.ts',
    // the engine's figures, events and doctor report, which cross as serde
    // JSON, are typed in this header; everything else is generated
    '--dts-header', readFileSync(path.join(root, 'crates', 'node', 'index-header.d.ts'), 'utf8'),
    ...(profile === 'release' ? ['--release'] : []),
  ];
  console.error(`building the native addon (${profile} profile) into ${outDir} with cargo...`);
  const started = Date.now();
  const res = spawnSync(process.execPath, cmd, { cwd: root, stdio: 'inherit' });
  if (res.status !== 0) throw new Error(`napi build failed with status ${res.status}`);
  writeFileSync(stamp, `${profile}\n`);
  console.error(`built the native addon in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return path.join(root, outDir);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  buildNative({ force: args.has('--force'), dev: args.has('--dev'), bench: args.has('--release') });
}
