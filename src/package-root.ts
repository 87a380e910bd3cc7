/**
 * The directory of Braid's package.json, found from this module's place:
 * `src/` (run from source), `dist/` (the build, or the server bundle
 * `dist/braid.js`) or an installed `node_modules/braid-db/...`. Files the
 * service reads at run time (the native addon's loader, the console's build,
 * package.json itself) are found from here, so no module depends on how deep
 * it sits.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

function findRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'braid-db') return dir;
      } catch {
        // not ours (or unreadable): keep looking
      }
    }
    if (path.dirname(dir) === dir) throw new Error(`braid-db's package.json was not found above ${from}`);
  }
}

export const PACKAGE_ROOT = findRoot(path.dirname(fileURLToPath(import.meta.url)));
