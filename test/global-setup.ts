// Builds the addon and dist/ (with the CLI bundle) once per test run, not once per file.
// @ts-expect-error plain ES module without types
import { buildAll } from '../scripts/build.mjs';

export default function setup(): void {
  buildAll();
}
