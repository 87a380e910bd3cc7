#!/usr/bin/env node
// Builds what a fresh clone needs to run: the native addon (when the crates
// are here and it is stale), the TypeScript in dist/ and the web console in
// dist/console. Runs on `npm install` (the prepare script) and before the
// test suite.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildNative } from './build-native.mjs';
import { bundleCli } from './bundle.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export function buildAll({ force = false } = {}) {
  buildNative({ force });
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  if (existsSync(path.join(root, 'src')) && existsSync(tsc)) {
    // tsc emits even when it reports type errors; those fail `npm run
    // typecheck` (and CI) on their own, so a build for tests goes on.
    const res = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
    if (res.status !== 0) console.error('warning: tsc reported errors (run `npm run typecheck`)');
    bundleCli();
    if (!buildConsole()) console.error('warning: tsc reported errors in src/console (run `npm run typecheck`)');
  }
}

/**
 * The web console (src/console): its TypeScript compiled by tsc to browser
 * ES modules, with its HTML and CSS copied beside them. No bundler: the page
 * loads the modules as they are.
 */
export function buildConsole() {
  const src = path.join(root, 'src', 'console');
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  if (!existsSync(src) || !existsSync(tsc)) return true;
  const out = path.join(root, 'dist', 'console');
  const res = spawnSync(process.execPath, [tsc, '-p', path.join(src, 'tsconfig.json')], { cwd: root, stdio: 'inherit' });
  mkdirSync(out, { recursive: true });
  for (const name of readdirSync(src)) {
    if (/\.(html|css|svg)$/.test(name)) copyFileSync(path.join(src, name), path.join(out, name));
  }
  return res.status === 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  buildAll({ force: process.argv.includes('--force') });
}
