/** The `braid` command line. */
import { Command, Option } from 'commander';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { DEFAULTS, fromEnv, type ServerConfig } from './config.js';
import { exitOnSignals, startServer } from './server.js';
import { resolveGatewayConfig, type GatewayFlags } from './gateway/config.js';
import { exitGatewayOnSignals, startGateway } from './gateway/server.js';

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
    .command('gateway')
    .description('start the gateway: bearer tokens, per-token rate limits and routing in front of engines')
    .addOption(new Option('--host <host>', 'address to listen on (default 127.0.0.1)').env('BRAID_GATEWAY_HOST'))
    .addOption(new Option('--port <port>', 'port to listen on (default 8081; 0 picks a free one)').argParser(parseIntOption).env('BRAID_GATEWAY_PORT'))
    .addOption(new Option('--config <file>', 'JSON config file: tokens, rate_limit, databases catalog').env('BRAID_GATEWAY_CONFIG'))
    .addOption(new Option('--engine <url>', 'engine URL: the single-engine catalog default/main (default http://127.0.0.1:8080)').env('BRAID_ENGINE_URL'))
    .addOption(new Option('--token <token...>', 'accepted bearer tokens, added to BRAID_GATEWAY_TOKENS (comma-separated) and the config file\'s'))
    .addOption(new Option('--rate-limit <n>', 'requests per token per window; 0 turns the limiter off (default 100)').argParser(parseIntOption).env('BRAID_RATE_LIMIT'))
    .addOption(new Option('--rate-window <ms>', 'rate-limit window in milliseconds (default 1000)').argParser(parseIntOption).env('BRAID_RATE_WINDOW_MS'))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug'))
    .action(async (opts: GatewayFlags) => {
      const config = resolveGatewayConfig(opts, process.env);
      const gateway = await startGateway(config);
      exitGatewayOnSignals(gateway);
      const engines = [...new Set(config.catalog.databases.flatMap((db) => db.branches.map((b) => b.endpoint)))];
      console.log(`braid gateway listening on ${gateway.url} (engines: ${engines.join(', ')})`);
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
