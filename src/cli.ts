/** The `braid` command line. */
import { Command, Option } from 'commander';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { DEFAULTS, fromEnv, type ServerConfig } from './config.js';
import { exitOnSignals, startServer } from './server.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(readFileSync(path.resolve(here, '..', 'package.json'), 'utf8')) as { version: string };

function parseIntOption(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`expected a non-negative integer, got ${value}`);
  return n;
}

export function buildCli(): Command {
  const program = new Command();
  program.name('braid').description('Braid: a self-hosted hybrid record database').version(pkg.version, '-V, --version');

  program
    .command('serve')
    .description('start the engine: HTTP API over a data directory')
    .addOption(new Option('--host <host>', 'address to listen on').env('BRAID_HOST'))
    .addOption(new Option('--port <port>', 'port to listen on (0 picks a free one)').argParser(parseIntOption).env('BRAID_PORT'))
    .addOption(new Option('--data-dir <dir>', 'data directory').env('BRAID_DATA_DIR'))
    .addOption(new Option('--auth-token <token...>', 'require one of these bearer tokens (default: accept any)'))
    .addOption(new Option('--history-epochs <n>', 'epochs of history kept readable (default: all)').argParser(parseIntOption))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug'))
    .action(async (opts: { host?: string; port?: number; dataDir?: string; authToken?: string[]; historyEpochs?: number; logLevel?: string }) => {
      const env = fromEnv(process.env, DEFAULTS);
      const config: ServerConfig = {
        ...env,
        host: opts.host ?? env.host,
        port: opts.port ?? env.port,
        dataDir: opts.dataDir ?? env.dataDir,
        authTokens: opts.authToken ?? env.authTokens,
        historyEpochs: opts.historyEpochs ?? env.historyEpochs,
        logLevel: opts.logLevel ?? env.logLevel,
      };
      const server = await startServer(config);
      exitOnSignals(server);
      console.log(`braid listening on ${server.url} (data: ${path.resolve(config.dataDir)})`);
    });

  program
    .command('version')
    .description('print the version')
    .action(() => console.log(pkg.version));

  return program;
}

export async function main(argv: string[]): Promise<void> {
  await buildCli().parseAsync(argv);
}
