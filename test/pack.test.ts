// The published shape of Braid, checked from `npm pack` output: the main
// package plus the linux-x64-gnu platform package install into an empty
// directory with no Rust toolchain on PATH, `npx braid serve` answers a put
// and a query, the embedded API imports by package name, and without the
// platform package the loader names the package that is missing.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error plain ES module without types
import { packageAll } from '../scripts/package.mjs';
import { request, spawnListening, tempDir, type ChildServer } from './helpers.js';

interface Tarballs {
  main: string;
  platforms: Record<string, string>;
}

let work: string;
let tarballs: Tarballs;
const children: ChildServer[] = [];

/** PATH with node and npm but nothing from a Rust toolchain (no ~/.cargo/bin, no rustup). */
function pathWithoutRust(): string {
  const dirs = (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir && !['cargo', 'rustc', 'rustup'].some((tool) => existsSync(path.join(dir, tool))));
  // the node running this test first, so npx runs on the same Node
  return [path.dirname(process.execPath), ...dirs].join(path.delimiter);
}

function appDir(name: string): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = path.join(work, name);
  mkdirSync(dir);
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: `braid-pack-${name}`, private: true }));
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: pathWithoutRust(), BRAID_LOG_LEVEL: 'error' };
  // nothing from this checkout may leak into the installed package
  delete env.BRAID_NATIVE_DIR;
  delete env.NODE_PATH;
  return { dir, env };
}

function npm(args: string[], cwd: string, env: NodeJS.ProcessEnv): void {
  const res = spawnSync('npm', [...args, '--no-audit', '--no-fund', '--prefer-offline'], { cwd, env, encoding: 'utf8' });
  if (res.status !== 0) throw new Error(`npm ${args.join(' ')} failed (${res.status}):\n${res.stdout}\n${res.stderr}`);
}

beforeAll(() => {
  work = tempDir('braid-pack-');
  // the dev-profile addon and dist/ the global setup built; `npm run package` packs a release build
  tarballs = packageAll({ build: false, out: path.join(work, 'tarballs') }) as Tarballs;
}, 600_000);

afterAll(async () => {
  for (const c of children) {
    if (c.child.exitCode === null && c.child.signalCode === null) process.kill(-c.child.pid!, 'SIGKILL');
    await c.exited;
  }
  rmSync(work, { recursive: true, force: true });
});

describe('npm pack output', () => {
  it('has no native code in the main package and only the addon in the platform package', () => {
    const list = (file: string) => spawnSync('tar', ['tzf', file], { encoding: 'utf8' }).stdout.trim().split('\n');
    const main = list(tarballs.main);
    expect(main).toContain('package/dist/index.js');
    expect(main).toContain('package/dist/index.d.ts');
    expect(main).toContain('package/bin/braid.js');
    expect(main).toContain('package/native/index.cjs');
    for (const file of ['index.html', 'main.js', 'console.css']) expect(main).toContain(`package/dist/console/${file}`);
    expect(main.filter((f) => f.endsWith('.node') || f.startsWith('package/src/') || f.startsWith('package/crates/'))).toEqual([]);

    expect(Object.keys(tarballs.platforms)).toEqual(['linux-x64-gnu']);
    expect(list(tarballs.platforms['linux-x64-gnu']!).sort()).toEqual(
      ['package/README.md', 'package/braid.linux-x64-gnu.node', 'package/package.json'].sort(),
    );
    const pkg = JSON.parse(readFileSync(path.join(import.meta.dirname, '..', 'package.json'), 'utf8'));
    expect(pkg.optionalDependencies).toEqual({ 'braid-db-linux-x64-gnu': pkg.version });
  });
});

describe('installed from the tarballs without a Rust toolchain', () => {
  let app: { dir: string; env: NodeJS.ProcessEnv };

  beforeAll(() => {
    app = appDir('full');
    expect(spawnSync('sh', ['-c', 'command -v cargo'], { env: app.env }).status).not.toBe(0);
    npm(['install', tarballs.main, tarballs.platforms['linux-x64-gnu']!], app.dir, app.env);
  }, 600_000);

  it('npx braid serve answers a put and a query', async () => {
    const server = await spawnListening('npx', ['--no', 'braid', 'serve', '--port', '0', '--data-dir', path.join(app.dir, 'data')], {
      cwd: app.dir,
      env: app.env,
      detached: true,
    });
    children.push(server);
    const put = await request(`${server.url}/v1/records/put`, 'POST', {
      record: { table: 'notes', tenant_id: 't1', id: 'n1', fields: { body: 'prebuilt binaries from the platform package', embedding: [1, 0, 0] } },
    });
    expect(put.status).toBe(200);
    const query = await request(`${server.url}/v1/nativeql`, 'POST', {
      query: "SEARCH notes TENANT 't1' MATCH 'platform package' NEAR [1, 0, 0] LIMIT 5",
    });
    expect(query.status).toBe(200);
    expect((query.body as { results: { record_id: string }[] }).results.map((h) => h.record_id)).toEqual(['n1']);
    // the web console comes with the package
    const page = await fetch(`${server.url}/console/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<script type="module" src="main.js">');
    expect((await fetch(`${server.url}/console/main.js`)).status).toBe(200);

    // npx and the server it started share the process group
    process.kill(-server.child.pid!, 'SIGTERM');
    await server.exited;
  });

  it('the embedded API imports by package name', () => {
    const script = `
      import { open } from 'braid-db';
      const db = await open({ dataDir: 'embedded-data' });
      await db.put({ table: 'notes', tenant_id: 't1', id: 'e1', fields: { body: 'in process' } });
      const res = await db.query({ table: 'notes', tenant_id: 't1', text: 'process', top_k: 3 });
      console.log(JSON.stringify(res.results.map((r) => r.record_id)));
      db.close();
    `;
    const res = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: app.dir, env: app.env, encoding: 'utf8' });
    expect(res.stderr).toBe('');
    expect(res.stdout.trim()).toBe('["e1"]');
  });
});

describe('installed without the platform package', () => {
  it('names the missing platform package instead of starting', () => {
    const app = appDir('bare');
    npm(['install', '--omit=optional', tarballs.main], app.dir, app.env);
    const res = spawnSync('npx', ['--no', 'braid', 'serve', '--port', '0', '--data-dir', path.join(app.dir, 'data')], {
      cwd: app.dir,
      env: app.env,
      encoding: 'utf8',
    });
    expect(res.status).not.toBe(0);
    expect(res.stderr).toContain('braid-db-linux-x64-gnu');
    expect(res.stderr).toContain('npm install braid-db-linux-x64-gnu@0.1.0');
  });
});
