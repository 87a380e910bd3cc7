#!/usr/bin/env node
// Entry point of the `braid` command; the CLI lives in src/cli.ts, bundled
// with its dependencies into dist/braid.js (scripts/bundle.mjs).
import { main } from '../dist/braid.js';

main(process.argv).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
