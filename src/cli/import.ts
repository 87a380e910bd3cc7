/** The import client command: NDJSON records in put-batch chunks. docs/cli.md. */
import { accessSync, constants, createReadStream, statSync } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { Option, type Command } from 'commander';
import cliProgress from 'cli-progress';
import type { RecordInput } from '../engine.js';
import { BraidError } from '../errors.js';
import { connectionOptions, integerOption, run, unreadable, withBackend, type Backend, type ConnectionFlags } from './backend.js';
import { constants as osConstants } from 'node:os';
import { STOP_SIGNALS } from '../signals.js';
import { print } from './output.js';

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
  /** The signal that stopped the import, and the last line whose record was written or reported. */
  interrupted?: { signal: NodeJS.Signals; line: number };
}

/** The exit status after a stop signal: 128 + its number (130 for SIGINT). */
const signalStatus = (signal: NodeJS.Signals): number => 128 + osConstants.signals[signal];

const RECORD_KEYS = new Set(['table', 'tenant_id', 'id', 'fields']);

/** Longest line read: longer ones are skipped (a failure each) without being held. */
const MAX_LINE_BYTES = 64 * 1024 * 1024;

/** A line of the input: its text, or why it cannot be read (too long, not UTF-8). */
type Line = { text: string; bytes: number } | { refused: string; bytes: number };

/**
 * The input's lines, read as bytes: a line that is not UTF-8 is refused
 * rather than decoded with U+FFFD in place of its bytes (as the HTTP API
 * refuses such a body), and a line past MAX_LINE_BYTES is refused without
 * being gathered (readline had thrown RangeError past 512 MB).
 */
async function* readLines(input: AsyncIterable<Buffer | string>): AsyncGenerator<Line> {
  let parts: Buffer[] = [];
  let held = 0;
  let tooLong = false;
  const finish = (last: Buffer): Line => {
    const bytes = held + last.length;
    const whole = parts.length === 0 ? last : Buffer.concat([...parts, last]);
    // the CR of a CRLF ending is not part of the line
    const wasTooLong = tooLong || bytes - (whole.length > 0 && whole[whole.length - 1] === 0x0d ? 1 : 0) > MAX_LINE_BYTES;
    parts = [];
    held = 0;
    tooLong = false;
    if (wasTooLong) return { refused: `line longer than ${MAX_LINE_BYTES} bytes`, bytes };
    const line = whole.length > 0 && whole[whole.length - 1] === 0x0d ? whole.subarray(0, whole.length - 1) : whole;
    if (!isUtf8(line)) return { refused: 'not UTF-8 text', bytes };
    return { text: line.toString('utf8'), bytes };
  };
  let first = true;
  for await (const chunk of input) {
    let data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    // a UTF-8 byte order mark (as Windows tools write) is not part of the first line
    if (first && data.length > 0) {
      first = false;
      if (data.length >= 3 && data[0] === 0xef && data[1] === 0xbb && data[2] === 0xbf) data = data.subarray(3);
    }
    for (let nl = data.indexOf(0x0a); nl >= 0; nl = data.indexOf(0x0a)) {
      yield finish(data.subarray(0, nl));
      data = data.subarray(nl + 1);
    }
    if (data.length === 0) continue;
    held += data.length;
    if (held > MAX_LINE_BYTES + 1) {
      tooLong = true;
      parts = [];
    } else {
      parts.push(data);
    }
  }
  if (held > 0) yield finish(Buffer.alloc(0));
}

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

/** The size of the file to import; refused when it cannot be read as one. */
function inputBytes(file: string): number {
  try {
    const stat = statSync(file);
    if (!stat.isFile() && !stat.isFIFO()) throw new Error(`${file} is not a file`);
    // found by a black-box test: a file there but not readable (mode 000) was
    // only found out once the data directory had been created
    accessSync(file, constants.R_OK);
    return stat.size;
  } catch (err) {
    throw unreadable(file, err);
  }
}

/** Failures an import prints on stderr one by one; the rest are counted in its summary. */
const PRINTED_FAILURES = 100;

async function importRecords(backend: Backend, table: string, file: string | undefined, flags: ImportFlags): Promise<ImportSummary> {
  const fromStdin = file === undefined || file === '-';
  if (fromStdin && process.stdin.isTTY) throw new BraidError('invalid_request', 'no input: give a file or pipe NDJSON on stdin');
  if (flags.idField !== undefined && flags.tenant === undefined) throw new BraidError('invalid_request', '--id-field needs --tenant');
  const totalBytes = fromStdin ? 0 : inputBytes(file);
  // errors of the stream (it may still fail to open) reach the loop below
  const input = fromStdin ? process.stdin : createReadStream(file);
  const started = performance.now();
  const summary: ImportSummary = { imported: 0, batches: 0, seconds: 0, failures: 0, firstFailure: null };
  let bar: cliProgress.SingleBar | undefined;
  // each failure is said on stderr as it is found, up to PRINTED_FAILURES (a file of bad lines
  // would otherwise bury the summary): the summary had named only the first (found by a review)
  const fail = (line: number, reason: string) => {
    summary.failures += 1;
    if (summary.firstFailure === null || line < summary.firstFailure.line) summary.firstFailure = { line, reason };
    if (summary.failures <= PRINTED_FAILURES) {
      const more = summary.failures === PRINTED_FAILURES ? ` (further failures are counted, not printed)` : '';
      // over the progress bar's line, which its next update draws again
      process.stderr.write(`${bar ? '\r\x1b[K' : ''}braid import: line ${line}: ${reason}${more}\n`);
    }
  };

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

  /**
   * Sends one chunk; a record the server rejects by index is dropped and the
   * rest is sent again. A refusal that names no record (the server's JSON
   * parser refusing a lone surrogate or a `__proto__` key, a body over the
   * limit) splits the chunk in halves, each sent again, down to the record
   * it is about: one bad record never drops its neighbours.
   */
  const send = async (chunk: { line: number; record: RecordInput }[]): Promise<void> => {
    let rest = chunk;
    while (rest.length > 0) {
      try {
        await backend.putBatch(rest.map((r) => r.record));
        summary.imported += rest.length;
        summary.batches += 1;
        return;
      } catch (err) {
        if (!(err instanceof BraidError) || err.status !== 400 || err.code === 'batch_too_large') throw err;
        const bad = err.index !== undefined ? rest[err.index] : undefined;
        if (bad !== undefined) {
          // the line says which record; the chunk's index (`records[1]: `) would only mislead
          fail(bad.line, `${err.code}: ${err.message.replace(/^records\[\d+\]: /, '')}`);
          rest = rest.filter((r) => r !== bad);
          continue;
        }
        const [only] = rest;
        if (rest.length === 1 && only) {
          fail(only.line, `${err.code}: ${err.message}`);
          return;
        }
        const half = Math.ceil(rest.length / 2);
        await send(rest.slice(0, half));
        await send(rest.slice(half));
        return;
      }
    }
  };
  const flush = async (chunk: { line: number; record: RecordInput }[]) => {
    await send(chunk);
    progress();
  };

  let lineNo = 0;
  let pending: { line: number; record: RecordInput }[] = [];
  // found by a black-box test: Ctrl-C printed nothing, with 95,000 records
  // written, so the user could not tell where to go on from
  let stopSignal: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    // a second signal does not wait for the chunk in hand
    if (stopSignal !== undefined) process.exit(signalStatus(signal));
    stopSignal = signal;
    process.stderr.write(`braid import: ${signal}: stopping at the next line, once the chunk in hand is written; send it again to stop at once\n`);
  };
  // the signals that stop a server stop an import: it finishes the chunk in hand and prints its summary
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
  try {
    for await (const line of readLines(input)) {
      if (stopSignal !== undefined) break;
      lineNo += 1;
      bytesRead += line.bytes + 1;
      if ('refused' in line) {
        fail(lineNo, line.refused);
        continue;
      }
      if (line.text.trim() === '') continue;
      const record = lineToRecord(line.text, table, flags);
      if (typeof record === 'string') fail(lineNo, record);
      else pending.push({ line: lineNo, record });
      if (pending.length >= flags.batch) {
        const chunk = pending;
        pending = [];
        await flush(chunk);
      }
    }
    if (pending.length > 0) await flush(pending);
    if (stopSignal !== undefined) summary.interrupted = { signal: stopSignal, line: lineNo };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    summary.aborted = err instanceof BraidError || typeof e?.code !== 'string' || !e.syscall ? err : unreadable(fromStdin ? 'stdin' : file, e);
  } finally {
    for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
    if ('destroy' in input && input !== process.stdin) input.destroy();
    bar?.stop();
    summary.seconds = (performance.now() - started) / 1000;
  }
  return summary;
}

function printImportSummary(summary: ImportSummary): void {
  const rate = summary.seconds > 0 ? Math.round(summary.imported / summary.seconds) : summary.imported;
  print(`records imported: ${summary.imported}`);
  print(`batches: ${summary.batches}`);
  print(`seconds: ${summary.seconds.toFixed(3)}`);
  print(`records/s: ${rate}`);
  const first = summary.firstFailure;
  print(`failures: ${summary.failures}${first ? ` (first bad record: line ${first.line}: ${first.reason})` : ''}`);
  const stop = summary.interrupted;
  if (stop) print(`interrupted by ${stop.signal} after line ${stop.line}: every line up to it is written or reported; go on from line ${stop.line + 1}`);
}

export function addImportCommand(program: Command): void {
  const importCmd = program
    .command('import')
    .description('import NDJSON records into a table, in put-batch chunks')
    .argument('<table>', 'table to write to')
    .argument('[file]', 'NDJSON file (one JSON object per line); stdin when absent or -')
    .addOption(new Option('--batch <n>', 'records per put-batch').argParser(integerOption(1)).default(1000))
    .option('--tenant <tenant>', 'lines are plain field objects, all written to this tenant')
    .option('--id-field <name>', 'with --tenant: the field holding the record id (default: id)');
  connectionOptions(importCmd, true)
    .addHelpText(
      'after',
      '\nEach line is a record {"tenant_id": ..., "id": ..., "fields": {...}} (the table is the argument), or,\n' +
        'with --tenant, a plain object of fields whose --id-field is the record id. Each chunk of --batch\n' +
        'records is one atomic put-batch; a record the server rejects is reported and the rest of its chunk\n' +
        'is sent again. A bad line is skipped. Each failure is printed on stderr with its line (the first\n' +
        `${PRINTED_FAILURES}), and the summary names the first bad record's line; the exit\n` +
        'status is 1 when any record failed. A progress bar is drawn on stderr when it is a terminal.\n\n' +
        'Examples:\n  braid import articles articles.ndjson\n  cat users.ndjson | braid import users --tenant acme --id-field user_id --batch 5000',
    )
    .action(
      run(async (table: string, file: string | undefined, opts: ImportFlags, command: Command) => {
        // before a --data-dir is opened (and created): a missing file changes nothing
        if (file !== undefined && file !== '-') inputBytes(file);
        const summary = await withBackend(opts, command, (backend) => importRecords(backend, table, file, opts));
        printImportSummary(summary);
        if (summary.aborted !== undefined) throw summary.aborted;
        if (summary.failures > 0) process.exitCode = 1;
        if (summary.interrupted) process.exitCode = signalStatus(summary.interrupted.signal);
      }),
    );
}
