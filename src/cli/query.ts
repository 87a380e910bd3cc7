/** The query client command: native QL, or a JSON HybridQuery from --body or --body-file. docs/cli.md. */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { HybridQuery } from '../engine.js';
import { BraidError, parserMessage } from '../errors.js';
import { connectionOptions, integerOption, run, unreadable, withBackend, type ConnectionFlags } from './backend.js';
import { formatQueryTable } from './format.js';
import { print } from './output.js';

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
    where = file === '-' ? 'stdin' : file;
    try {
      text = file === '-' ? await readStdin() : readFileSync(file, 'utf8');
    } catch (err) {
      throw unreadable(where, err);
    }
  }
  try {
    // an object or not, the query service checks its shape, on the server and in-process alike
    return JSON.parse(text) as HybridQuery;
  } catch (err) {
    throw new BraidError('invalid_json', `${where} is not valid json: ${parserMessage(err)}`);
  }
}

export function addQueryCommand(program: Command): void {
  const query = program
    .command('query')
    .description('run a hybrid query, as a native query language statement (docs/ql.md) or as JSON, and print the ranked rows')
    .argument('[native-ql]', "e.g. \"SEARCH articles TENANT 'acme' MATCH 'solar' LIMIT 5\"")
    .option('--body <json>', 'the query as a JSON HybridQuery (POST /v1/query, docs/query.md) instead of native QL')
    .option('--body-file <file>', 'like --body, read from a file (- for stdin)')
    .option('--json', 'print the raw response (results, next_cursor, explain)')
    .option('--width <n>', 'truncate the text column to n characters', integerOption(1), 48);
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
        const response = await withBackend(opts, command, (backend) => (text !== undefined ? backend.nativeQuery(text) : backend.query(body!)));
        print(opts.json ? JSON.stringify(response) : formatQueryTable(response, opts.width));
      }),
    );
}
