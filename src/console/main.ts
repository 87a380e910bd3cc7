/**
 * The Braid web console (docs/operations.md, "Web console"): wires the top
 * bar (token, database, branch, tenant) to the panels. Everything shown comes
 * from the public API of the server that served the page.
 */
import { ApiError, session, target } from './api.js';
import { countRecords, loadBranches, loadOverview, loadTables, renderBranches, renderOverview, renderTables, renderTargets } from './catalog.js';
import { byId } from './dom.js';
import { metricsPanel } from './metrics.js';
import { queryPanel } from './query.js';
import { recordPanel } from './record.js';
import type { BranchSummary, Table } from './types.js';

const TENANT_KEY = 'braid.console.tenant';

const tokenInput = byId<HTMLInputElement>('token');
const tenantInput = byId<HTMLInputElement>('tenant');
const statusLine = byId('status');

const tenant = (): string => tenantInput.value;

function showStatus(message: string, kind: 'error' | 'info' = 'info'): void {
  statusLine.textContent = message;
  statusLine.className = kind;
}

function explainFailure(err: unknown): string {
  if (!(err instanceof ApiError)) return (err as Error).message;
  if (err.status === 401) {
    return session.token() === ''
      ? `${err.code}: this server needs a bearer token; type it in the Token field above`
      : `${err.code}: ${err.message}; check the token`;
  }
  return `${err.code}: ${err.message}`;
}

const record = recordPanel(tenant);
const query = queryPanel(tenant, (table, id) => {
  void record.lookup(table, id);
  byId('record-panel').scrollIntoView({ behavior: 'smooth', block: 'start' });
});
const metrics = metricsPanel();

let tables: Table[] = [];
let branches: BranchSummary[] = [];

/** Record counts of the tenant per table, one explain each (a failure shows in its card). */
async function refreshCounts(): Promise<void> {
  const counts = new Map<string, number | string>();
  const who = tenant();
  if (who !== '') {
    await Promise.all(tables.map(async (t) => {
      try {
        counts.set(t.name, await countRecords(t.name, who));
      } catch (err) {
        counts.set(t.name, err instanceof ApiError ? err.code : 'unavailable');
      }
    }));
  }
  if (who === tenant()) renderTables(tables, who, counts);
}

async function refresh(): Promise<void> {
  showStatus('loading…');
  try {
    const [listed, overview, loaded] = await Promise.all([loadBranches(), loadOverview(), loadTables()]);
    tables = loaded;
    branches = listed.branches;
    renderTargets(branches);
    renderBranches(branches, select);
    renderOverview(overview);
    query.setTables(tables);
    record.setTables(tables);
    await refreshCounts();
    showStatus(`${target.database} / ${target.branch}: ${tables.length} table${tables.length === 1 ? '' : 's'}, epoch ${overview.latest_epoch}`);
  } catch (err) {
    showStatus(explainFailure(err), 'error');
  }
}

function select(database: string, branch: string): void {
  target.database = database;
  target.branch = branch;
  metrics.reset();
  void refresh();
}

tokenInput.value = session.token();
tenantInput.value = sessionStorage.getItem(TENANT_KEY) ?? '';

byId('token-form').addEventListener('submit', (event) => {
  event.preventDefault();
  session.setToken(tokenInput.value.trim());
  metrics.reset();
  void refresh();
});
byId('token-forget').addEventListener('click', () => {
  tokenInput.value = '';
  session.setToken('');
  void refresh();
});
byId<HTMLSelectElement>('database').addEventListener('change', (event) => {
  const database = (event.target as HTMLSelectElement).value;
  const names = branches.filter((b) => b.database_id === database).map((b) => b.branch_id);
  select(database, names.includes('main') || names.length === 0 ? 'main' : names[0]!);
});
byId<HTMLSelectElement>('branch').addEventListener('change', (event) => select(target.database, (event.target as HTMLSelectElement).value));
tenantInput.addEventListener('change', () => {
  sessionStorage.setItem(TENANT_KEY, tenant());
  query.update();
  void refreshCounts();
});
tenantInput.addEventListener('input', () => query.update());
byId('refresh').addEventListener('click', () => void refresh());

void refresh();
