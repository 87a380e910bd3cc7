#!/usr/bin/env node
// Bundles the command line (dist/cli.js, what `braid serve` and every other
// command runs) with its dependencies into one file, dist/braid.js.
//
// Why: Node 20 loads ES modules one file at a time, and the server imports
// about 1,300 of them (typebox alone is 709); resolving and reading them took
// about 0.4 s of the 0.55 s before a server could open its data directory
// (node --cpu-prof; bench/JOURNAL.md, "Restart time"). One file loads in a
// fraction of that, and every restart and CLI command starts sooner.
//
// Whitespace and comments are left out (names are kept; the source map maps
// stack traces back): V8 keeps a script's source as one string for as long as
// the process runs, and the bundle's comments had 42 characters outside
// Latin-1, which made it a two-byte string: 9.4 MB of the server's heap for a
// 4.7 MB file. Without them it is 3.1 MB of one-byte text (bench/JOURNAL.md,
// "The fifteenth session").
//
// The library entry (dist/index.js, `import 'braid-db'`) stays unbundled: an
// embedding application shares its own copies of fastify and the rest.
// The native addon is never bundled: src/native/index.ts requires its loader
// at run time from the package root.
import { buildSync } from 'esbuild';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export function bundleCli() {
  const entry = path.join(root, 'dist', 'cli.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run tsc first (npm run build:ts)`);
  buildSync({
    entryPoints: [entry],
    outfile: path.join(root, 'dist', 'braid.js'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'linked',
    minifyWhitespace: true,
    logLevel: 'warning',
    // CommonJS dependencies call require(); an ES module has none of its own
    banner: { js: "import { createRequire as __braidRequire } from 'node:module'; const require = __braidRequire(import.meta.url);" },
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  bundleCli();
}
