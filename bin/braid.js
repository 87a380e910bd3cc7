#!/usr/bin/env node
// Entry point of the `braid` command; the CLI lives in src/cli.ts.
import { main } from '../dist/cli.js';

main(process.argv).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
