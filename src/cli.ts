/**
 * The `braid` command line: `serve`, `gateway` and `doctor` here; the client
 * commands (snapshot, restore, branches, query, import), which talk to a
 * server or open a data directory in-process, in src/cli/. docs/cli.md.
 */
import { Command, Option } from 'commander';
import { existsSync, lstatSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { resolveServerConfig, type ServerFlags } from './config.js';
import type { GatewayFlags } from './gateway/config.js';
import { doctor, type DoctorReport } from './engine.js';
import { holdsBraidData } from './native/engine.js';
import { BraidError } from './errors.js';
import { run } from './cli/backend.js';
import { addAdminCommands } from './cli/admin.js';
import { addQueryCommand } from './cli/query.js';
import { addImportCommand } from './cli/import.js';
import { PACKAGE_ROOT } from './package-root.js';
import { openServerEngine } from './server-open.js';
import type { RunningServer } from './server.js';
import { LOG_LEVELS, MAX_WINDOW_MS, listenFailure } from './settings.js';
import { exitOnSignals } from './signals.js';
import { print } from './cli/output.js';

export { formatQueryTable } from './cli/format.js';

const pkg = JSON.parse(readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string };

function printDoctorReport(report: DoctorReport): void {
  print(`data directory: ${report.data_dir}`);
  for (const log of report.logs) {
    const { end } = log;
    let state: string;
    if (end.kind === 'clean') state = 'clean';
    else if (end.kind === 'torn_tail') state = `torn tail of ${end.bytes} bytes at offset ${end.offset} (cut at the next start; a write torn by a crash was never acknowledged, unless the file was cut short afterwards)`;
    else state = `CORRUPT: frame ${end.seq} at offset ${end.offset} is damaged; ${end.frames_after} valid frame(s) follow from offset ${end.resumes_at}`;
    print(`${log.owner}: ${log.frames} frames, ${log.bytes} bytes, format ${log.format_version}: ${state}`);
    if (log.action === 'salvaged') {
      print(`  salvaged: cut at offset ${end.kind === 'corrupt' ? end.offset : log.good_end}; the original is kept at ${log.backup}`);
    }
  }
  for (const r of report.recreated) {
    print(`${r.owner}: its log segment was missing; wrote an empty one (${r.path}), so it starts from checkpoint ${r.checkpoint}. The writes acknowledged after that checkpoint were in the missing file and are lost.`);
  }
  for (const problem of report.problems) print(`PROBLEM: ${problem}`);
  if (report.logs.some((l) => l.end.kind === 'corrupt' && l.action !== 'salvaged')) {
    print('corrupt logs refuse to open. `braid doctor --salvage` keeps the frames before the damage and drops the rest (a copy of each file is kept).');
  }
  print(report.healthy ? 'healthy' : 'not healthy');
}

/** The commands that run against a server (--url) or a data directory (--data-dir), by group. */
function addClientCommands(program: Command): void {
  addAdminCommands(program);
  addQueryCommand(program);
  addImportCommand(program);
}

/**
 * Whether `dir` is a data directory Braid wrote (it holds `catalog.json` or
 * `db/`, as `braid doctor` tells one), which opens at once; false for one to
 * make: none there yet, or an empty one (dotfiles and `lost+found` aside, a
 * volume's root). A directory holding anything else is refused (found by a
 * black-box review: a mistyped `--data-dir` was filled with Braid's files,
 * and a file of the user's named `secret` overwritten).
 */
function isDataDir(dir: string): boolean {
  if (!existsSync(dir)) {
    checkMakeable(dir);
    return false;
  }
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch (err) {
    throw new BraidError('invalid_config', `the data directory ${dir} cannot be read as a directory: ${(err as Error).message}`);
  }
  if (holdsBraidData(dir)) return true;
  const others = entries.filter((name) => !name.startsWith('.') && name !== 'lost+found');
  if (others.length > 0) {
    throw new BraidError('invalid_config', `the data directory ${dir} holds other files (${others.slice(0, 3).join(', ')}${others.length > 3 ? ', ...' : ''}) and is not a Braid data directory (no catalog.json, no db/): give an empty or new directory, or one Braid wrote`);
  }
  return false;
}

/**
 * Refuses a data directory that cannot be made because a part of its path is
 * a file (`--data-dir notes.txt/data`, `notes.txt/`, `notes.txt/x/..`) or a
 * symbolic link to nothing, which the engine would report only as the
 * operating system's "File exists".
 */
function checkMakeable(dir: string): void {
  // the nearest part of the path that is there, a link to nothing included
  // (below a file, lstat fails with ENOTDIR rather than finding nothing)
  const there = (p: string) => {
    try {
      return lstatSync(p) !== undefined;
    } catch {
      return false;
    }
  };
  let part = path.resolve(dir);
  while (!there(part) && path.dirname(part) !== part) part = path.dirname(part);
  const target = statSync(part, { throwIfNoEntry: false });
  if (!target) throw new BraidError('invalid_config', `the data directory ${dir} cannot be made: ${part} is a symbolic link to nothing`);
  if (!target.isDirectory()) throw new BraidError('invalid_config', `the data directory ${dir} cannot be made: ${part} is a file, not a directory`);
}

/** Listens on the address and lets it go again: invalid_config, as the server's own listen would be, when it cannot. */
async function probeAddress(host: string, port: number): Promise<void> {
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen({ host, port, exclusive: true }, () => resolve());
    });
  } catch (err) {
    throw listenFailure(err, host, port);
  } finally {
    await new Promise<void>((resolve) => probe.close(() => resolve()));
  }
}

export function buildCli(): Command {
  const program = new Command();
  program.name('braid').description('Braid: a self-hosted hybrid record database').version(pkg.version, '-V, --version');
  // commander's own refusals (an unknown option or command, a missing or
  // invalid argument) in the form of every other failure, before any
  // command is added so that each inherits it
  program.configureOutput({ outputError: (text, write) => write(`braid: invalid_request: ${text.replace(/^error: /, '')}`) });
  // a server's start refuses what it cannot use as invalid_config, an unknown flag too (docs/errors.md)
  const startRefusals = { outputError: (text: string, write: (s: string) => void) => write(`braid: invalid_config: ${text.replace(/^error: /, '')}`) };

  // flags are read as text and checked with the environment's variables by
  // src/settings.ts, so that a bad value of either is `braid: invalid_config:`
  // naming it (commander's own parsing had read BRAID_PORT=0x50 as port 80)
  program
    .command('serve')
    .configureOutput(startRefusals)
    .description('start the engine: HTTP API over a data directory')
    .option('--host <host>', 'address to listen on (env: BRAID_HOST)')
    .option('--port <port>', 'port to listen on, 0 to 65535; 0 picks a free one (env: BRAID_PORT)')
    .option('--data-dir <dir>', 'data directory (env: BRAID_DATA_DIR)')
    .option('--auth-token <token...>', 'require one of these bearer tokens, each `secret` (admin) or `secret:read|write|admin` (env: BRAID_AUTH_TOKENS, comma-separated; default: accept any)')
    .option('--history-epochs <n>', 'epochs of history kept readable (env: BRAID_HISTORY_EPOCHS; default: all)')
    .option('--checkpoint-bytes <n>', 'checkpoint a branch once its WAL segment holds this many bytes (env: BRAID_CHECKPOINT_BYTES; default 64 MiB)')
    .option('--checkpoint-rows <n>', 'checkpoint a branch once its WAL segment holds this many record versions (env: BRAID_CHECKPOINT_ROWS; default 50,000)')
    .option('--log-level <level>', `${LOG_LEVELS.join(', ')} (env: BRAID_LOG_LEVEL; default warn)`)
    .addHelpText('after', '\nEvery variable and its range: docs/operations.md. A bad value stops the start with `braid: invalid_config:`.')
    .action(run(async (opts: ServerFlags) => {
      const config = resolveServerConfig(opts, process.env);
      // files the index libraries create (tantivy, the vector graphs) are owner-only too
      process.umask(0o077);
      // a data directory this start would make is made only once the
      // address is known to be free (found by a black-box review: a port in
      // use left a new data directory behind its invalid_config); one Braid
      // wrote opens at once, overlapping the server's loading (a restart's time)
      if (!isDataDir(config.dataDir)) await probeAddress(config.host, config.port);
      // the data directory opens on a thread of its own while the server's
      // code loads (lazily, so the client commands start fast)
      const engine = openServerEngine(config);
      let server: RunningServer;
      try {
        const { startServer } = await import('./server.js');
        server = await startServer(config, engine);
        exitOnSignals(server);
      } catch (err) {
        engine.close();
        throw err;
      }
      console.log(`braid listening on ${server.url} (data: ${path.resolve(config.dataDir)})`);
    }));

  program
    .command('gateway')
    .configureOutput(startRefusals)
    .description('start the gateway: bearer tokens, per-token rate limits and routing in front of engines')
    .option('--host <host>', 'address to listen on (env: BRAID_GATEWAY_HOST; default 127.0.0.1)')
    .option('--port <port>', 'port to listen on, 0 to 65535; 0 picks a free one (env: BRAID_GATEWAY_PORT; default 8081)')
    .option('--config <file>', 'JSON config file: tokens, rate_limit, databases catalog (env: BRAID_GATEWAY_CONFIG)')
    .option('--engine <url>', 'engine URL: the single-engine catalog default/main (env: BRAID_ENGINE_URL; default http://127.0.0.1:8080)')
    .option('--token <token...>', 'accepted bearer tokens, `secret` (admin) or `secret:read|write|admin`, added to BRAID_GATEWAY_TOKENS (comma-separated) and the config file\'s')
    .option('--rate-limit <n>', 'requests per token per window; 0 turns the limiter off (env: BRAID_RATE_LIMIT; default 100)')
    .option('--rate-window <ms>', `rate-limit window in milliseconds, 1 to ${MAX_WINDOW_MS} (env: BRAID_RATE_WINDOW_MS; default 1000)`)
    .option('--auth-failure-limit <n>', 'failed authentications per address per minute before it is locked out with 429; 0 turns this off (env: BRAID_AUTH_FAILURE_LIMIT; default 20)')
    .option('--log-level <level>', `${LOG_LEVELS.join(', ')} (env: BRAID_LOG_LEVEL; default warn)`)
    .addHelpText('after', '\nEvery setting and its range: docs/gateway.md. A bad value stops the start with `braid: invalid_config:`.')
    .action(run(async (opts: GatewayFlags) => {
      const { resolveGatewayConfig } = await import('./gateway/config.js');
      const { startGateway } = await import('./gateway/server.js');
      const config = resolveGatewayConfig(opts, process.env);
      const gateway = await startGateway(config);
      exitOnSignals(gateway);
      const engines = [...new Set(config.catalog.databases.flatMap((db) => db.branches.map((b) => b.endpoint)))];
      print(`braid gateway listening on ${gateway.url} (engines: ${engines.join(', ')})`);
    }));

  addClientCommands(program);

  program
    .command('doctor')
    .description('check the write-ahead logs of a data directory; --salvage cuts corrupt ones (server stopped)')
    .addOption(new Option('--data-dir <dir>', 'data directory').env('BRAID_DATA_DIR').default('./data'))
    .option('--salvage', 'cut each corrupt log at its first damaged frame, keeping a copy of the original')
    .option('--json', 'print the report as JSON')
    .action(run(async (opts: { dataDir: string; salvage?: boolean; json?: boolean }) => {
      const report = doctor(path.resolve(opts.dataDir), { salvage: opts.salvage ?? false });
      if (opts.json) print(JSON.stringify(report, null, 2));
      else printDoctorReport(report);
      if (!report.healthy) process.exitCode = 1;
    }));

  program
    .command('version')
    .description('print the version')
    .action(() => print(pkg.version));

  return program;
}

export async function main(argv: string[]): Promise<void> {
  await buildCli().parseAsync(argv);
}
