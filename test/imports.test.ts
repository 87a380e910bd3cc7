// No import circles in src/ (issue 17): every module's imports, type-only and
// lazy `import()` ones included, form a graph without cycles, so a request
// walks route -> service -> typed binding -> engine with no way back.
// (What `npx madge --circular --extensions ts src` checks, without the dependency.)
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './helpers.js';

const SRC = path.join(ROOT, 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sources(full);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** The src/ modules a file imports: static, re-exports, type-only and `import()`. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'";]*?\bfrom\s+['"]([^'"]+)['"]/gms),
    ...text.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specifiers
    .filter((s) => s.startsWith('.'))
    .map((s) => path.resolve(path.dirname(file), s).replace(/\.js$/, '.ts'))
    .filter((target) => target.startsWith(SRC + path.sep));
}

/** Every cycle's modules, relative to src/ (one cycle per strongly connected component). */
function cycles(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter += 1;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(path.relative(SRC, member));
    } while (member !== node);
    const selfImport = (graph.get(node) ?? []).includes(node);
    if (component.length > 1 || selfImport) found.push(component.sort());
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

describe('src/ imports', () => {
  const files = sources(SRC);
  const graph = new Map(files.map((file) => [file, importsOf(file)]));

  it('reads the imports it should', () => {
    expect(files.length).toBeGreaterThan(50);
    const app = graph.get(path.join(SRC, 'app.ts'))!.map((f) => path.relative(SRC, f));
    expect(app).toEqual(expect.arrayContaining(['routes/records.ts', 'errors.ts', 'services/branch.ts']));
    // a type-only import counts too
    expect(graph.get(path.join(SRC, 'ql', 'parser.ts'))!.map((f) => path.relative(SRC, f))).toContain('native/index.ts');
  });

  it('finds a cycle when there is one', () => {
    const a = '/x/a.ts';
    const b = '/x/b.ts';
    expect(cycles(new Map([[a, [b]], [b, [a]]]))).toHaveLength(1);
  });

  it('has no import circles', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('front doors reach the engine only through the services', () => {
    // routes, GraphQL and the CLI never import the typed binding's class to call it
    // (type imports are fine: they name what the services take)
    for (const file of files) {
      const rel = path.relative(SRC, file);
      if (!/^(routes|graphql|cli)\//.test(rel)) continue;
      const text = readFileSync(file, 'utf8');
      expect(text, rel).not.toMatch(/^import\s+\{[^}]*\bEngine\b[^}]*\}\s+from\s+'\.\.\/native\/engine\.js'/m);
      expect(text, rel).not.toMatch(/\bengine\.(put|delete|get|query|snapshot|restore|declareTable|schemas|branches|setBranchArchived)\(/);
    }
  });
});
