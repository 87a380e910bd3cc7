#!/usr/bin/env node
// Builds the npm packages the napi-rs way: the main package (TypeScript,
// loader, CLI; no native code) and one platform package per target under
// npm/<triple>/ (made by `napi create-npm-dirs`) holding the addon. The main
// package lists the platform packages as optionalDependencies, so npm
// installs only the one matching the machine.
//
//   node scripts/package.mjs [--release] [--out <dir>]
//
// The addon packed is native/'s, the release build `npm install` makes
// (`--release` is kept for old scripts and changes nothing). Prints the
// tarball paths as JSON.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildNative, nativeOutDir } from './build-native.mjs';
import { buildConsole } from './build.mjs';
import { bundleCli } from './bundle.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function run(cmd, args, cwd) {
  const res = spawnSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
  if (res.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed with status ${res.status}`);
  return res.stdout;
}

/** Tarball file name npm pack gives a package. */
function tarballName(pkg) {
  return `${pkg.name.replace(/^@/, '').replace('/', '-')}-${pkg.version}.tgz`;
}

/**
 * `build: false` packs what is already built (the test suite builds the
 * addon and dist/ once in its global setup; rebuilding dist/ here would race
 * with tests running bin/braid.js).
 */
export function packageAll({ build = true, out = path.join(root, 'target', 'npm-pack') } = {}) {
  mkdirSync(out, { recursive: true });
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));

  // 1. the addon, and dist/ (tsc, the CLI bundle), the web console included
  if (build) {
    buildNative();
    const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    run(process.execPath, [tsc, '-p', 'tsconfig.build.json'], root);
    bundleCli();
    if (!buildConsole()) throw new Error('tsc failed on src/console');
  }

  // 2. the platform packages: napi creates npm/<triple>/package.json from
  // the napi config in package.json (the result is kept in the repo), and
  // the addon is copied in. Not `napi artifacts`: it also copies the addon
  // to the package root and rewrites the root entry, which is not this
  // layout (the loader lives in native/).
  const napi = path.join(root, 'node_modules', '@napi-rs', 'cli', 'dist', 'cli.js');
  run(process.execPath, [napi, 'create-npm-dirs', '--npm-dir', 'npm'], root);

  const tarballs = { main: '', platforms: {} };
  for (const target of pkg.napi.targets) {
    const triple = tripleOf(target);
    const dir = path.join(root, 'npm', triple);
    const platformPkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
    const built = path.join(nativeOutDir(), platformPkg.main);
    if (existsSync(built)) copyFileSync(built, path.join(dir, platformPkg.main));
    else {
      // a target this machine did not build is left out, not packed empty
      console.error(`skipping ${platformPkg.name}: no ${platformPkg.main} (build it on ${triple})`);
      continue;
    }
    if (pkg.optionalDependencies?.[platformPkg.name] !== platformPkg.version) {
      throw new Error(`package.json optionalDependencies must list ${platformPkg.name}@${platformPkg.version}`);
    }
    run('npm', ['pack', '--silent', '--pack-destination', out], dir);
    tarballs.platforms[triple] = path.join(out, tarballName(platformPkg));
  }

  // 3. the main package (`files` in package.json says what goes in; the
  // `prepare` script does not run for an installed tarball)
  run('npm', ['pack', '--silent', '--ignore-scripts', '--pack-destination', out], root);
  tarballs.main = path.join(out, tarballName(pkg));
  for (const file of [tarballs.main, ...Object.values(tarballs.platforms)]) {
    if (!existsSync(file)) throw new Error(`npm pack did not write ${file}`);
  }
  return tarballs;
}

/** x86_64-unknown-linux-gnu -> linux-x64-gnu, the napi platform naming. */
function tripleOf(target) {
  const known = {
    'x86_64-unknown-linux-gnu': 'linux-x64-gnu',
    'aarch64-unknown-linux-gnu': 'linux-arm64-gnu',
    'x86_64-unknown-linux-musl': 'linux-x64-musl',
    'aarch64-apple-darwin': 'darwin-arm64',
    'x86_64-apple-darwin': 'darwin-x64',
    'x86_64-pc-windows-msvc': 'win32-x64-msvc',
  };
  if (!known[target]) throw new Error(`unknown napi target ${target}`);
  return known[target];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const outAt = args.indexOf('--out');
  const tarballs = packageAll(outAt >= 0 ? { out: path.resolve(args[outAt + 1]) } : {});
  console.log(JSON.stringify(tarballs, null, 2));
}
