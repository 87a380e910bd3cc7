/** The `braid` command line. */
import { Command, Option } from 'commander';
import { createReadStream, readFileSync, statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import cliProgress from 'cli-progress';
import { DEFAULTS, fromEnv, type ServerConfig } from './config.js';
import type { GatewayFlags } from './gateway/config.js';
import { BraidClient, DEFAULT_URL, RemoteBraidError, type PutBatchResult, type RestoreResult, type SnapshotResult } from './client.js';
import { Braid, doctor, type BranchRef, type DoctorReport, type BranchSummary, type HybridQuery, type QueryResponse, type RecordInput, type RecordKey } from './engine.js';
import { BraidError } from './errors.js';
import { QlSyntaxError } from './ql/index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(readFileSync(path.resolve(here, '..', 'package.json'), 'utf8')) as { version: string };

function parseIntOption(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`expected a non-negative integer, got ${value}`);
  return n;
}

// ---------------------------------------------------------------------------
// Client commands: each talks to a running server (--url) or opens a data
// directory in-process (--data-dir). docs/cli.md describes them.

/** What the client commands need, from a server or from an embedded engine. */
interface Backend {
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

interface ConnectionFlags {
  url?: string;
  token?: string;
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

function embeddedBackend(dataDir: string, branch: BranchRef): Backend {
  let engine: Braid;
  try {
    engine = Braid.open({ dataDir });
  } catch (err) {
    if (err instanceof BraidError && err.code === 'data_dir_locked') {
      throw new BraidError(
        'data_dir_locked',
        `${err.message}\n(--data-dir opens the directory in this process: it fails while a server holds it; use --url to talk to that server)`,
      );
    }
    throw err;
  }
  return {
    target: dataDir,
    putBatch: async (records) => {
      const result = await engine.putBatch(records, branch);
      return { epoch: result.committed?.epoch ?? 0, record_count: result.committed?.record_count ?? records.length };
    },
    nativeQuery: (text) => engine.nativeQuery(text, branch),
    query: async (query) => {
      // checked as POST /v1/query checks its body, so the codes are the server's (unknown_field, invalid_request)
      const [{ check }, { HybridQuery: schema }] = await Promise.all([import('./validation.js'), import('./schemas/query.js')]);
      return engine.query(check<HybridQuery>(schema, query), branch);
    },
    snapshot: async (name) => {
      const info = await engine.snapshot(name, branch);
      return { snapshot: true, target: info.name, database_id: info.database_id, branch_id: info.branch_id, epoch: info.epoch };
    },
    restore: async (source, target, verify) => {
      const { restoreWithVerification } = await import('./routes/admin.js');
      const { replayed: _replayed, ...result } = await restoreWithVerification(engine, { source, target, verify_record: verify });
      return result;
    },
    branches: () => engine.branches(),
    close: () => engine.close(),
  };
}

function connect(flags: ConnectionFlags, command: Command): Backend {
  const branch: BranchRef = { databaseId: flags.database, branchId: flags.branch };
  if (flags.dataDir !== undefined) {
    if (command.getOptionValueSource('url') === 'cli') throw new BraidError('invalid_request', 'give either --url or --data-dir, not both');
    return embeddedBackend(path.resolve(flags.dataDir), branch);
  }
  return httpBackend(new BraidClient({ url: flags.url ?? DEFAULT_URL, token: flags.token, branch }));
}

/** --url/--token/--data-dir, plus --database/--branch when the command addresses one branch. */
function connectionOptions(command: Command, addressesBranch: boolean): Command {
  command
    .addOption(new Option('--url <url>', 'URL of a running engine or gateway').env('BRAID_URL').default(DEFAULT_URL))
    .addOption(new Option('--token <token>', 'bearer token for the server').env('BRAID_TOKEN'))
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

/** Runs a client command: prints `braid: <code>: <message>` and exits 1 on failure. */
function run<A extends unknown[]>(body: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
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

/** `table/tenant/id`: the id is everything after the second slash. */
function parseRecordKey(value: string): RecordKey {
  const first = value.indexOf('/');
  const second = first < 0 ? -1 : value.indexOf('/', first + 1);
  if (first <= 0 || second <= first + 1 || second === value.length - 1) {
    throw new BraidError('invalid_request', `--verify expects table/tenant/id, got ${JSON.stringify(value)}`);
  }
  return { table: value.slice(0, first), tenant_id: value.slice(first + 1, second), id: value.slice(second + 1) };
}

interface QuerySource {
  body?: string;
  bodyFile?: string;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** The JSON hybrid query of `--body`, or of `--body-file` (a path, or - for stdin). */
async function readQueryBody(source: QuerySource): Promise<HybridQuery> {
  let text: string;
  let where: string;
  if (source.body !== undefined) {
    text = source.body;
    where = '--body';
  } else {
    const file = source.bodyFile!;
    if (file === '-' && process.stdin.isTTY) throw new BraidError('invalid_request', 'no input: give --body-file a file or pipe the JSON query on stdin');
    text = file === '-' ? await readStdin() : readFileSync(file, 'utf8');
    where = file === '-' ? 'stdin' : file;
  }
  try {
    // an object or not, the query's shape is checked where it runs, with the server's codes
    return JSON.parse(text) as HybridQuery;
  } catch (err) {
    throw new BraidError('invalid_json', `${where} is not valid json: ${(err as Error).message.toLowerCase()}`);
  }
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`expected a positive integer, got ${value}`);
  return n;
}

/** Left-aligned text columns, right-aligned numbers. */
function renderTable(header: string[], rows: string[][], numeric: boolean[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

function score(value: number | null): string {
  return value === null ? '-' : value.toFixed(4);
}

function truncate(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

/** The query table: scores and the first text field of the rows. */
export function formatQueryTable(response: QueryResponse, width = 48): string {
  const textField = response.results
    .map((row) => Object.keys(row.fields).find((k) => typeof row.fields[k] === 'string'))
    .find((k) => k !== undefined);
  const header = ['record_id', 'final_score', 'lexical', 'vector', 'relational'];
  if (textField) header.push(textField);
  const rows = response.results.map((row) => {
    const cells = [row.record_id, score(row.score.final_score), score(row.score.lexical), score(row.score.vector), score(row.score.relational)];
    if (textField) {
      const value = row.fields[textField];
      cells.push(typeof value === 'string' ? truncate(value, width) : '');
    }
    return cells;
  });
  const lines = [renderTable(header, rows, [false, true, true, true, true, false])];
  lines.push(`(${response.results.length} ${response.results.length === 1 ? 'row' : 'rows'}, read epoch ${response.explain.read_epoch})`);
  if (response.next_cursor) lines.push(`next_cursor: ${response.next_cursor}`);
  return lines.join('\n');
}

interface ImportFlags extends ConnectionFlags {
  batch: number;
  tenant?: string;
  idField?: string;
}

interface ImportSummary {
  imported: number;
  batches: number;
  seconds: number;
  failures: number;
  firstFailure: { line: number; reason: string } | null;
  /** What stopped the import early (a network or server failure), after the summary so far. */
  aborted?: unknown;
}

const RECORD_KEYS = new Set(['table', 'tenant_id', 'id', 'fields']);

/** One NDJSON line as a record, or the reason it is not one. */
function lineToRecord(line: string, table: string, flags: ImportFlags): RecordInput | string {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (err) {
    return `not valid JSON: ${(err as Error).message}`;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'expected a JSON object';
  const obj = value as Record<string, unknown>;
  if (flags.tenant !== undefined) {
    const idField = flags.idField ?? 'id';
    const id = obj[idField];
    if (typeof id === 'string' && id !== '') return { table, tenant_id: flags.tenant, id, fields: obj };
    if (typeof id === 'number' && Number.isFinite(id)) return { table, tenant_id: flags.tenant, id: String(id), fields: obj };
    return `field "${idField}" (--id-field) is missing or not a string or number`;
  }
  const unknown = Object.keys(obj).find((k) => !RECORD_KEYS.has(k));
  if (unknown !== undefined) return `unknown key "${unknown}": expected {tenant_id, id, fields} (use --tenant for plain field objects)`;
  if (typeof obj.tenant_id !== 'string') return 'expected {tenant_id, id, fields}: tenant_id is missing or not a string';
  if (typeof obj.id !== 'string') return 'expected {tenant_id, id, fields}: id is missing or not a string';
  if (obj.table !== undefined && obj.table !== table) return `table ${JSON.stringify(obj.table)} differs from the argument ${JSON.stringify(table)}`;
  if (obj.fields !== undefined && (typeof obj.fields !== 'object' || obj.fields === null || Array.isArray(obj.fields))) return 'fields is not an object';
  return { table, tenant_id: obj.tenant_id, id: obj.id, fields: (obj.fields as Record<string, unknown> | undefined) ?? {} };
}

async function importRecords(backend: Backend, table: string, file: string | undefined, flags: ImportFlags): Promise<ImportSummary> {
  const fromStdin = file === undefined || file === '-';
  if (fromStdin && process.stdin.isTTY) throw new BraidError('invalid_request', 'no input: give a file or pipe NDJSON on stdin');
  if (flags.idField !== undefined && flags.tenant === undefined) throw new BraidError('invalid_request', '--id-field needs --tenant');
  const input = fromStdin ? process.stdin : createReadStream(file);
  const totalBytes = fromStdin ? 0 : statSync(file).size;
  const started = performance.now();
  const summary: ImportSummary = { imported: 0, batches: 0, seconds: 0, failures: 0, firstFailure: null };
  const fail = (line: number, reason: string) => {
    summary.failures += 1;
    if (summary.firstFailure === null || line < summary.firstFailure.line) summary.firstFailure = { line, reason };
  };

  let bar: cliProgress.SingleBar | undefined;
  if (process.stderr.isTTY) {
    bar = new cliProgress.SingleBar(
      {
        stream: process.stderr,
        format: totalBytes > 0 ? 'import [{bar}] {percentage}% | {records} records | {failed} failed' : 'import {records} records | {failed} failed',
        hideCursor: true,
        clearOnComplete: true,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(Math.max(totalBytes, 1), 0, { records: 0, failed: 0 });
  }
  let bytesRead = 0;
  const progress = () => bar?.update(Math.min(bytesRead, Math.max(totalBytes, 1)), { records: summary.imported, failed: summary.failures });

  /** Sends one chunk; a record the server rejects by index is dropped and the rest is sent again. */
  const flush = async (chunk: { line: number; record: RecordInput }[]) => {
    let rest = chunk;
    while (rest.length > 0) {
      try {
        await backend.putBatch(rest.map((r) => r.record));
        summary.imported += rest.length;
        summary.batches += 1;
        break;
      } catch (err) {
        if (!(err instanceof BraidError) || err.status !== 400 || err.code === 'batch_too_large') throw err;
        const bad = err.index !== undefined ? rest[err.index] : undefined;
        if (bad === undefined) {
          for (const r of rest) fail(r.line, `${err.code}: ${err.message}`);
          break;
        }
        fail(bad.line, `${err.code}: ${err.message}`);
        rest = rest.filter((r) => r !== bad);
      }
    }
    progress();
  };

  const lines = createInterface({ input, crlfDelay: Infinity });
  let lineNo = 0;
  let pending: { line: number; record: RecordInput }[] = [];
  try {
    for await (const line of lines) {
      lineNo += 1;
      bytesRead += Buffer.byteLength(line) + 1;
      if (line.trim() === '') continue;
      const record = lineToRecord(line, table, flags);
      if (typeof record === 'string') fail(lineNo, record);
      else pending.push({ line: lineNo, record });
      if (pending.length >= flags.batch) {
        const chunk = pending;
        pending = [];
        await flush(chunk);
      }
    }
    if (pending.length > 0) await flush(pending);
  } catch (err) {
    summary.aborted = err;
  } finally {
    lines.close();
    bar?.stop();
    summary.seconds = (performance.now() - started) / 1000;
  }
  return summary;
}

function printImportSummary(summary: ImportSummary): void {
  const rate = summary.seconds > 0 ? Math.round(summary.imported / summary.seconds) : summary.imported;
  console.log(`records imported: ${summary.imported}`);
  console.log(`batches: ${summary.batches}`);
  console.log(`seconds: ${summary.seconds.toFixed(3)}`);
  console.log(`records/s: ${rate}`);
  const first = summary.firstFailure;
  console.log(`failures: ${summary.failures}${first ? ` (first bad record: line ${first.line}: ${first.reason})` : ''}`);
}

function printDoctorReport(report: DoctorReport): void {
  console.log(`data directory: ${report.data_dir}`);
  for (const log of report.logs) {
    const { end } = log;
    let state: string;
    if (end.kind === 'clean') state = 'clean';
    else if (end.kind === 'torn_tail') state = `torn tail of ${end.bytes} bytes at offset ${end.offset} (cut at the next start; nothing acknowledged is lost)`;
    else state = `CORRUPT: frame ${end.seq} at offset ${end.offset} is damaged; ${end.frames_after} valid frame(s) follow from offset ${end.resumes_at}`;
    console.log(`${log.owner}: ${log.frames} frames, ${log.bytes} bytes, format ${log.format_version}: ${state}`);
    if (log.action === 'salvaged') {
      console.log(`  salvaged: cut at offset ${end.kind === 'corrupt' ? end.offset : log.good_end}; the original is kept at ${log.backup}`);
    }
  }
  if (report.logs.some((l) => l.end.kind === 'corrupt' && l.action !== 'salvaged')) {
    console.log('corrupt logs refuse to open. `braid doctor --salvage` keeps the frames before the damage and drops the rest (a copy of each file is kept).');
  }
  console.log(report.healthy ? 'healthy' : 'not healthy');
}

function addClientCommands(program: Command): void {
  const snapshot = program
    .command('snapshot')
    .description('take a snapshot of a branch at its latest epoch')
    .argument('<name>', 'snapshot name (^[A-Za-z_][A-Za-z0-9_]{0,63}$)')
    .option('--json', 'print the raw response');
  connectionOptions(snapshot, true)
    .addHelpText('after', '\nExample:\n  braid snapshot before_cleanup\n  braid snapshot nightly --branch audit --data-dir ./data')
    .action(
      run(async (name: string, opts: ConnectionFlags & { json?: boolean }, command: Command) => {
        const backend = connect(opts, command);
        try {
          const info = await backend.snapshot(name);
          console.log(opts.json ? JSON.stringify(info) : `snapshot ${info.target} of ${info.database_id}/${info.branch_id} at epoch ${info.epoch}`);
        } finally {
          backend.close();
        }
      }),
    );

  const restore = program
    .command('restore')
    .description('restore a snapshot into a new branch, optionally reading a record back from it')
    .argument('<snapshot>', 'snapshot to restore')
    .argument('<branch>', 'new branch to create (must not exist)')
    .option('--verify <table/tenant/id>', 'read this record from the new branch; exit 1 when it is not there')
    .option('--json', 'print the raw response');
  connectionOptions(restore, false)
    .addHelpText('after', '\nExample:\n  braid restore before_cleanup audit --verify articles/acme/a1\n\nIn --verify the id is everything after the second slash.')
    .action(
      run(async (source: string, target: string, opts: ConnectionFlags & { verify?: string; json?: boolean }, command: Command) => {
        const verify = opts.verify === undefined ? undefined : parseRecordKey(opts.verify);
        const backend = connect(opts, command);
        try {
          const result = await backend.restore(source, target, verify);
          if (opts.json) console.log(JSON.stringify(result));
          else {
            console.log(`restored snapshot ${result.source} into branch ${result.target} at epoch ${result.epoch}`);
            if (result.verification && verify) {
              const v = result.verification;
              const version = v.record ? ` (version ${v.record.version_id})` : ' (record not found)';
              console.log(`verify ${verify.table}/${verify.tenant_id}/${verify.id}: ${v.status}${version}`);
            }
          }
          if (result.verification?.status === 'failed') process.exitCode = 1;
        } finally {
          backend.close();
        }
      }),
    );

  const branches = program
    .command('branches')
    .description('list every branch with its latest epoch, parent and state')
    .option('--json', 'print the raw list');
  connectionOptions(branches, false)
    .addHelpText('after', '\nExample:\n  braid branches --url http://127.0.0.1:8080')
    .action(
      run(async (opts: ConnectionFlags & { json?: boolean }, command: Command) => {
        const backend = connect(opts, command);
        try {
          const list = await backend.branches();
          if (opts.json) {
            console.log(JSON.stringify(list));
            return;
          }
          const rows = list.map((b) => [b.database_id, b.branch_id, b.parent_branch_id ?? '-', b.state, String(b.latest_epoch), b.endpoint]);
          console.log(renderTable(['database', 'branch', 'parent', 'state', 'latest_epoch', 'endpoint'], rows, [false, false, false, false, true, false]));
        } finally {
          backend.close();
        }
      }),
    );

  const query = program
    .command('query')
    .description('run a hybrid query, as a native query language statement (docs/ql.md) or as JSON, and print the ranked rows')
    .argument('[native-ql]', "e.g. \"SEARCH articles TENANT 'acme' MATCH 'solar' LIMIT 5\"")
    .option('--body <json>', 'the query as a JSON HybridQuery (POST /v1/query, docs/query.md) instead of native QL')
    .option('--body-file <file>', 'like --body, read from a file (- for stdin)')
    .option('--json', 'print the raw response (results, next_cursor, explain)')
    .option('--width <n>', 'truncate the text column to n characters', positiveInt, 48);
  connectionOptions(query, true)
    .addHelpText(
      'after',
      "\nPrints record_id, final_score, lexical, vector, relational and the first text field of the rows.\n" +
        "Give the query as native QL, or as JSON with --body or --body-file (one of the three). Page with\n" +
        "CURSOR '<next_cursor>' in the statement, or \"cursor\": \"<next_cursor>\" in the JSON.\n\nExamples:\n" +
        "  braid query \"SEARCH articles TENANT 'acme' MATCH 'solar' NEAR [1, 0, 0] WHERE topic = 'energy' LIMIT 5\"\n" +
        '  braid query --body \'{"table": "articles", "tenant_id": "acme", "text": "solar", "top_k": 5}\'\n' +
        '  braid query --body-file query.json --json',
    )
    .action(
      run(async (text: string | undefined, opts: ConnectionFlags & QuerySource & { json?: boolean; width: number }, command: Command) => {
        const given = [text, opts.body, opts.bodyFile].filter((v) => v !== undefined).length;
        if (given !== 1) throw new BraidError('invalid_request', 'give the query once: as a native QL argument, with --body <json> or with --body-file <file>');
        const body = text === undefined ? await readQueryBody(opts) : undefined;
        const backend = connect(opts, command);
        try {
          const response = text !== undefined ? await backend.nativeQuery(text) : await backend.query(body!);
          console.log(opts.json ? JSON.stringify(response) : formatQueryTable(response, opts.width));
        } finally {
          backend.close();
        }
      }),
    );

  const importCmd = program
    .command('import')
    .description('import NDJSON records into a table, in put-batch chunks')
    .argument('<table>', 'table to write to')
    .argument('[file]', 'NDJSON file (one JSON object per line); stdin when absent or -')
    .addOption(new Option('--batch <n>', 'records per put-batch').argParser(positiveInt).default(1000))
    .option('--tenant <tenant>', 'lines are plain field objects, all written to this tenant')
    .option('--id-field <name>', 'with --tenant: the field holding the record id (default: id)');
  connectionOptions(importCmd, true)
    .addHelpText(
      'after',
      '\nEach line is a record {"tenant_id": ..., "id": ..., "fields": {...}} (the table is the argument), or,\n' +
        'with --tenant, a plain object of fields whose --id-field is the record id. Each chunk of --batch\n' +
        'records is one atomic put-batch; a record the server rejects is reported and the rest of its chunk\n' +
        'is sent again. A bad line is skipped. The summary names the line of the first bad record; the exit\n' +
        'status is 1 when any record failed. A progress bar is drawn on stderr when it is a terminal.\n\n' +
        'Examples:\n  braid import articles articles.ndjson\n  cat users.ndjson | braid import users --tenant acme --id-field user_id --batch 5000',
    )
    .action(
      run(async (table: string, file: string | undefined, opts: ImportFlags, command: Command) => {
        const backend = connect(opts, command);
        try {
          const summary = await importRecords(backend, table, file, opts);
          printImportSummary(summary);
          if (summary.aborted !== undefined) throw summary.aborted;
          if (summary.failures > 0) process.exitCode = 1;
        } finally {
          backend.close();
        }
      }),
    );
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
    .addOption(new Option('--auth-token <token...>', 'require one of these bearer tokens, each `secret` (admin) or `secret:read|write|admin` (default: accept any)'))
    .addOption(new Option('--history-epochs <n>', 'epochs of history kept readable (default: all)').argParser(parseIntOption))
    .addOption(new Option('--checkpoint-bytes <n>', 'checkpoint a branch once its WAL segment holds this many bytes (default 64 MiB)').argParser(parseIntOption))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug'))
    .action(run(async (opts: { host?: string; port?: number; dataDir?: string; authToken?: string[]; historyEpochs?: number; checkpointBytes?: number; logLevel?: string }) => {
      const env = fromEnv(process.env, DEFAULTS);
      const config: ServerConfig = {
        ...env,
        host: opts.host ?? env.host,
        port: opts.port ?? env.port,
        dataDir: opts.dataDir ?? env.dataDir,
        authTokens: opts.authToken ?? env.authTokens,
        historyEpochs: opts.historyEpochs ?? env.historyEpochs,
        checkpointBytes: opts.checkpointBytes ?? env.checkpointBytes,
        logLevel: opts.logLevel ?? env.logLevel,
      };
      // files the index libraries create (tantivy, the vector graphs) are owner-only too
      process.umask(0o077);
      // the server and gateway load lazily, so the client commands start fast
      const { exitOnSignals, startServer } = await import('./server.js');
      const server = await startServer(config);
      exitOnSignals(server);
      console.log(`braid listening on ${server.url} (data: ${path.resolve(config.dataDir)})`);
    }));

  program
    .command('gateway')
    .description('start the gateway: bearer tokens, per-token rate limits and routing in front of engines')
    .addOption(new Option('--host <host>', 'address to listen on (default 127.0.0.1)').env('BRAID_GATEWAY_HOST'))
    .addOption(new Option('--port <port>', 'port to listen on (default 8081; 0 picks a free one)').argParser(parseIntOption).env('BRAID_GATEWAY_PORT'))
    .addOption(new Option('--config <file>', 'JSON config file: tokens, rate_limit, databases catalog').env('BRAID_GATEWAY_CONFIG'))
    .addOption(new Option('--engine <url>', 'engine URL: the single-engine catalog default/main (default http://127.0.0.1:8080)').env('BRAID_ENGINE_URL'))
    .addOption(new Option('--token <token...>', 'accepted bearer tokens, `secret` (admin) or `secret:read|write|admin`, added to BRAID_GATEWAY_TOKENS (comma-separated) and the config file\'s'))
    .addOption(new Option('--rate-limit <n>', 'requests per token per window; 0 turns the limiter off (default 100)').argParser(parseIntOption).env('BRAID_RATE_LIMIT'))
    .addOption(new Option('--rate-window <ms>', 'rate-limit window in milliseconds (default 1000)').argParser(parseIntOption).env('BRAID_RATE_WINDOW_MS'))
    .addOption(new Option('--auth-failure-limit <n>', 'failed authentications per address per minute before it is locked out with 429; 0 turns this off (default 20)').argParser(parseIntOption).env('BRAID_AUTH_FAILURE_LIMIT'))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug'))
    .action(async (opts: GatewayFlags) => {
      const { resolveGatewayConfig } = await import('./gateway/config.js');
      const { exitGatewayOnSignals, startGateway } = await import('./gateway/server.js');
      const config = resolveGatewayConfig(opts, process.env);
      const gateway = await startGateway(config);
      exitGatewayOnSignals(gateway);
      const engines = [...new Set(config.catalog.databases.flatMap((db) => db.branches.map((b) => b.endpoint)))];
      console.log(`braid gateway listening on ${gateway.url} (engines: ${engines.join(', ')})`);
    });

  addClientCommands(program);

  program
    .command('doctor')
    .description('check the write-ahead logs of a data directory; --salvage cuts corrupt ones (server stopped)')
    .addOption(new Option('--data-dir <dir>', 'data directory').env('BRAID_DATA_DIR').default('./data'))
    .option('--salvage', 'cut each corrupt log at its first damaged frame, keeping a copy of the original')
    .option('--json', 'print the report as JSON')
    .action(run(async (opts: { dataDir: string; salvage?: boolean; json?: boolean }) => {
      const report = doctor(path.resolve(opts.dataDir), { salvage: opts.salvage ?? false });
      if (opts.json) console.log(JSON.stringify(report, null, 2));
      else printDoctorReport(report);
      if (!report.healthy) process.exitCode = 1;
    }));

  program
    .command('version')
    .description('print the version')
    .action(() => console.log(pkg.version));

  return program;
}

export async function main(argv: string[]): Promise<void> {
  await buildCli().parseAsync(argv);
}
