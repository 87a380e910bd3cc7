/**
 * What the client commands run against: a running server (`--url`, over
 * HTTP with src/client.ts) or a data directory opened in-process
 * (`--data-dir`, the embedded API). Both call the same services on the far
 * side, so a command answers alike either way. Also the options every
 * client command takes, and how a failure is printed.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { BraidClient, DEFAULT_URL, RemoteBraidError, type PutBatchResult, type RestoreResult, type SnapshotResult } from '../client.js';
import { Braid, type BranchRef, type BranchSummary, type HybridQuery, type QueryResponse, type RecordInput, type RecordKey } from '../engine.js';
import { BraidError } from '../errors.js';
import { QlSyntaxError } from '../ql/index.js';
import { checkQuery } from '../services/queries.js';
import { urlSetting } from '../settings.js';
import { sendableToken } from '../auth.js';

/** What the client commands need, from a server or from an embedded engine. */
export interface Backend {
  /** Where the command runs, for messages. */
  readonly target: string;
  putBatch(records: RecordInput[]): Promise<PutBatchResult>;
  nativeQuery(text: string): Promise<QueryResponse>;
  query(query: HybridQuery): Promise<QueryResponse>;
  snapshot(name: string): Promise<SnapshotResult>;
  restore(source: string, target: string, verify?: RecordKey): Promise<RestoreResult>;
  branches(): Promise<BranchSummary[]>;
  close(): void;
}

export interface ConnectionFlags {
  url?: string;
  token?: string;
  timeoutMs?: number;
  dataDir?: string;
  database?: string;
  branch?: string;
}

function httpBackend(client: BraidClient): Backend {
  return {
    target: client.url,
    putBatch: (records) => client.putBatch(records),
    nativeQuery: (text) => client.nativeQuery(text),
    query: (query) => client.query(query),
    snapshot: (name) => client.snapshot(name),
    restore: (source, target, verify) => client.restore(source, target, verify),
    branches: () => client.branches(),
    close: () => {},
  };
}

/** A result without its `replayed` flag, which HTTP carries in a header and the CLI does not print. */
function withoutReplayed<T extends { replayed: boolean }>({ replayed: _replayed, ...rest }: T): Omit<T, 'replayed'> {
  return rest;
}

function openDataDir(dataDir: string): Braid {
  try {
    return Braid.open({ dataDir });
  } catch (err) {
    if (err instanceof BraidError && err.code === 'data_dir_locked') {
      throw new BraidError(
        'data_dir_locked',
        `${err.message}\n(--data-dir opens the directory in this process: it fails while a server holds it; use --url to talk to that server)`,
      );
    }
    throw err;
  }
}

function embeddedBackend(dataDir: string, branch: BranchRef): Backend {
  const db = openDataDir(dataDir);
  return {
    target: dataDir,
    putBatch: async (records) => {
      const result = await db.putBatch(records, branch);
      return { epoch: result.committed?.epoch ?? 0, record_count: result.committed?.record_count ?? records.length };
    },
    nativeQuery: (text) => db.nativeQuery(text, branch),
    // the flag is --body: its members are named as the server names a body's (the embedded API says query.)
    query: async (query) => db.query(checkQuery(query, 'body'), branch),
    snapshot: async (name) => withoutReplayed(await db.snapshot(name, branch)),
    restore: async (source, target, verify) => withoutReplayed(await db.restore(source, target, { verify })),
    branches: () => db.branches(),
    close: () => db.close(),
  };
}

function connect(flags: ConnectionFlags, command: Command): Backend {
  const branch: BranchRef = { databaseId: flags.database, branchId: flags.branch };
  if (flags.dataDir !== undefined) {
    if (command.getOptionValueSource('url') === 'cli') throw new BraidError('invalid_request', 'give either --url or --data-dir, not both');
    const dataDir = path.resolve(flags.dataDir);
    // opening a directory creates it: only import, which writes, may start a new one (a mistyped path
    // given to `braid branches` had become a data directory)
    if (command.name() !== 'import' && !existsSync(dataDir)) {
      throw new BraidError('invalid_request', `--data-dir ${dataDir} does not exist (only \`braid import\` creates a data directory; \`braid serve\` does too)`);
    }
    return embeddedBackend(dataDir, branch);
  }
  const url = flags.url ?? DEFAULT_URL;
  // a URL fetch cannot parse had been reported as an unreachable server
  urlSetting(url, command.getOptionValueSource('url') === 'env' ? 'BRAID_URL' : '--url', 'invalid_request');
  // a token a header cannot carry had been reported as an unreachable server
  if (flags.token !== undefined) sendableToken(flags.token, command.getOptionValueSource('token') === 'env' ? 'BRAID_TOKEN' : '--token', 'invalid_request');
  return httpBackend(new BraidClient({ url, token: flags.token, branch, timeoutMs: flags.timeoutMs }));
}

/** Runs `body` against the backend the flags name, and closes it after. */
export async function withBackend<T>(flags: ConnectionFlags, command: Command, body: (backend: Backend) => Promise<T>): Promise<T> {
  const backend = connect(flags, command);
  try {
    return await body(backend);
  } finally {
    backend.close();
  }
}

/** --url/--token/--data-dir, plus --database/--branch when the command addresses one branch. */
export function connectionOptions(command: Command, addressesBranch: boolean): Command {
  command
    .addOption(new Option('--url <url>', 'URL of a running engine or gateway').env('BRAID_URL').default(DEFAULT_URL))
    .addOption(new Option('--token <token>', 'bearer token for the server').env('BRAID_TOKEN'))
    .addOption(
      new Option('--timeout-ms <ms>', 'longest wait for each answer of the server, then upstream_unreachable')
        .env('BRAID_TIMEOUT_MS')
        .argParser(integerOption(1, 2 ** 31 - 1))
        .default(120_000),
    )
    .addOption(new Option('--data-dir <dir>', 'open this data directory in-process instead (only while no server holds it)'));
  if (addressesBranch) {
    command
      .addOption(new Option('--database <id>', 'database to address (default: default)'))
      .addOption(new Option('--branch <id>', 'branch to address (default: main)'));
  }
  return command.addHelpText(
    'after',
    '\nConnection: by default the command talks to the server at --url (env BRAID_URL, else ' +
      `${DEFAULT_URL}).\nWith --data-dir it opens that directory in this process instead, which works only while no\n` +
      'server holds the directory (a running `braid serve` locks it).',
  );
}

/** A file a command cannot read (missing, a directory, no permission), as the `invalid_request` it prints. */
export function unreadable(file: string, err: unknown): BraidError {
  return new BraidError('invalid_request', `cannot read ${file}: ${err instanceof Error ? err.message : String(err)}`);
}

/** Runs a command: prints `braid: <code>: <message>` and exits 1 on failure. */
export function run<A extends unknown[]>(body: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await body(...args);
    } catch (err) {
      process.exitCode = 1;
      console.error(describeError(err, typeof args[0] === 'string' ? args[0] : undefined));
    }
  };
}

function describeError(err: unknown, query?: string): string {
  if (err instanceof QlSyntaxError) return `braid: ql_syntax_error: ${err.message}${caret(query, err.diagnostic.line, err.diagnostic.column)}`;
  if (err instanceof RemoteBraidError && err.code === 'ql_syntax_error') {
    const { line, column } = err.body as { line?: number; column?: number };
    return `braid: ql_syntax_error: ${err.message}${caret(query, line, column)}`;
  }
  if (err instanceof BraidError) return `braid: ${err.code}: ${err.message}`;
  return `braid: ${err instanceof Error ? err.message : String(err)}`;
}

/** The offending line of a query with a ^ under the column. */
function caret(query: string | undefined, line: number | undefined, column: number | undefined): string {
  if (query === undefined || line === undefined || column === undefined) return '';
  const text = query.split(/\r\n|\r|\n/)[line - 1];
  if (text === undefined) return '';
  return `\n  ${text}\n  ${' '.repeat(Math.max(0, column - 1))}^`;
}

/** An option value that must be an integer of at least `min` (commander reports the error). */
export function integerOption(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`expected ${min === 0 ? 'a non-negative' : 'a positive'} integer, got ${value}`);
    if (n > max) throw new InvalidArgumentError(`expected at most ${max}, got ${value}`);
    return n;
  };
}
