/** The admin client commands: snapshot, restore (with --verify) and branches. docs/cli.md. */
import type { Command } from 'commander';
import type { RecordKey } from '../engine.js';
import { BraidError } from '../errors.js';
import { connectionOptions, run, withBackend, type ConnectionFlags } from './backend.js';
import { renderTable } from './format.js';
import { print } from './output.js';

type JsonFlag = { json?: boolean };

/** `table/tenant/id`: the id is everything after the second slash. */
function parseRecordKey(value: string): RecordKey {
  const first = value.indexOf('/');
  const second = first < 0 ? -1 : value.indexOf('/', first + 1);
  if (first <= 0 || second <= first + 1 || second === value.length - 1) {
    throw new BraidError('invalid_request', `--verify expects table/tenant/id, got ${JSON.stringify(value)}`);
  }
  return { table: value.slice(0, first), tenant_id: value.slice(first + 1, second), id: value.slice(second + 1) };
}

function addSnapshotCommand(program: Command): void {
  const snapshot = program
    .command('snapshot')
    .description('take a snapshot of a branch at its latest epoch')
    .argument('<name>', 'snapshot name (^[A-Za-z_][A-Za-z0-9_]{0,63}$)')
    .option('--json', 'print the raw response');
  connectionOptions(snapshot, true)
    .addHelpText('after', '\nExample:\n  braid snapshot before_cleanup\n  braid snapshot nightly --branch audit --data-dir ./data')
    .action(
      run(async (name: string, opts: ConnectionFlags & JsonFlag, command: Command) => {
        const info = await withBackend(opts, command, (backend) => backend.snapshot(name));
        print(opts.json ? JSON.stringify(info) : `snapshot ${info.target} of ${info.database_id}/${info.branch_id} at epoch ${info.epoch}`);
      }),
    );
}

function addRestoreCommand(program: Command): void {
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
      run(async (source: string, target: string, opts: ConnectionFlags & JsonFlag & { verify?: string }, command: Command) => {
        const verify = opts.verify === undefined ? undefined : parseRecordKey(opts.verify);
        const result = await withBackend(opts, command, (backend) => backend.restore(source, target, verify));
        if (opts.json) print(JSON.stringify(result));
        else {
          print(`restored snapshot ${result.source} into branch ${result.target} at epoch ${result.epoch}`);
          const v = result.verification;
          if (v) {
            const version = v.record ? ` (version ${v.record.version_id})` : ' (record not found)';
            print(`verify ${v.request.table}/${v.request.tenant_id}/${v.request.id}: ${v.status}${version}`);
          }
        }
        if (result.verification?.status === 'failed') process.exitCode = 1;
      }),
    );
}

function addBranchesCommand(program: Command): void {
  const branches = program
    .command('branches')
    .description('list every branch with its latest epoch, parent and state')
    .option('--json', 'print the raw list');
  connectionOptions(branches, false)
    .addHelpText('after', '\nExample:\n  braid branches --url http://127.0.0.1:8080')
    .action(
      run(async (opts: ConnectionFlags & JsonFlag, command: Command) => {
        const list = await withBackend(opts, command, (backend) => backend.branches());
        if (opts.json) {
          print(JSON.stringify(list));
          return;
        }
        const rows = list.map((b) => [b.database_id, b.branch_id, b.parent_branch_id ?? '-', b.state, String(b.latest_epoch), b.endpoint]);
        print(renderTable(['database', 'branch', 'parent', 'state', 'latest_epoch', 'endpoint'], rows, [false, false, false, false, true, false]));
      }),
    );
}

/** snapshot, restore, branches. */
export function addAdminCommands(program: Command): void {
  addSnapshotCommand(program);
  addRestoreCommand(program);
  addBranchesCommand(program);
}
