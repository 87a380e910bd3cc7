/**
 * The catalog panel: databases and branches (`GET /v1/branches`), the
 * selected branch's figures (`GET /v1/metrics/public-safe`), its tables and
 * columns (GraphQL `tables`, the one route that lists columns) and, for the
 * tenant typed in the top bar, each table's record count (the
 * `tenant_mask_visible_records` of `POST /v1/explain`: the API counts records
 * per tenant and table, and per branch, but not per table across tenants).
 */
import { getJson, graphql, postJson, target } from './api.js';
import { byId, h } from './dom.js';
import type { BranchSummary, BranchesResponse, HybridExplain, PublicMetrics, Table } from './types.js';

export async function loadBranches(): Promise<BranchesResponse> {
  return getJson<BranchesResponse>('/v1/branches');
}

export async function loadTables(): Promise<Table[]> {
  const { data } = await graphql<{ tables: Table[] }>('{ tables { name columns { name type dim metric text scalar } } }');
  return data.tables;
}

export async function loadOverview(): Promise<PublicMetrics> {
  return getJson<PublicMetrics>('/v1/metrics/public-safe');
}

/** Live records of `tenant` in `table` at the latest epoch. */
export async function countRecords(table: string, tenant: string): Promise<number> {
  const explain = await postJson<HybridExplain>('/v1/explain', { table, tenant_id: tenant, top_k: 1, return_fields: [] });
  return explain.tenant_mask_visible_records;
}

/** Fills the database and branch selects; the current target stays selected. */
export function renderTargets(branches: BranchSummary[]): void {
  const dbSelect = byId<HTMLSelectElement>('database');
  const branchSelect = byId<HTMLSelectElement>('branch');
  const databases = [...new Set(branches.map((b) => b.database_id))];
  if (!databases.includes(target.database)) databases.unshift(target.database);
  dbSelect.replaceChildren(...databases.map((d) => h('option', { attrs: { value: d } }, d)));
  dbSelect.value = target.database;
  const names = branches.filter((b) => b.database_id === target.database).map((b) => b.branch_id);
  if (!names.includes(target.branch)) names.unshift(target.branch);
  branchSelect.replaceChildren(...names.map((b) => h('option', { attrs: { value: b } }, b)));
  branchSelect.value = target.branch;
}

export function renderBranches(branches: BranchSummary[], pick: (database: string, branch: string) => void): void {
  const rows = branches.map((b) => {
    const current = b.database_id === target.database && b.branch_id === target.branch;
    return h(
      'tr',
      { class: current ? 'current' : '', title: current ? 'the branch this page addresses' : 'select this branch', on: { click: () => pick(b.database_id, b.branch_id) } },
      h('td', {}, b.database_id),
      h('td', {}, b.branch_id),
      h('td', {}, b.state),
      h('td', { class: 'num' }, b.latest_epoch),
      h('td', {}, b.parent_branch_id ?? '–'),
    );
  });
  byId('branches').querySelector('tbody')!.replaceChildren(...rows);
}

export function renderOverview(m: PublicMetrics): void {
  const figure = (label: string, value: string | number | undefined) =>
    h('div', { class: 'figure' }, h('span', { class: 'figure-value' }, value ?? '–'), h('span', { class: 'figure-label' }, label));
  byId('overview').replaceChildren(
    figure('latest epoch', m.latest_epoch),
    figure('durable epoch', m.durable_epoch),
    figure('records', m.record_count),
    figure('versions', m.version_count),
    figure('tables', m.schema_count),
    figure('indexes', m.index_count),
    figure('text segments', m.segment_count),
    figure('indexer', m.indexer_state),
    figure('recovery', m.recovery_state),
  );
  byId('service').textContent = m.gateway ? `${m.service} (through the gateway)` : m.service;
}

function columnKind(c: Table['columns'][number]): string {
  const parts = [c.type];
  if (c.dim !== null) parts.push(`dim ${c.dim}`);
  if (c.metric !== null) parts.push(c.metric);
  return parts.join(', ');
}

/** One card per table; `counts` holds the tenant's record count per table when known. */
export function renderTables(tables: Table[], tenant: string, counts: Map<string, number | string>): void {
  byId('tables-note').textContent = tables.length === 0
    ? 'No tables yet: the first write to a table creates it.'
    : tenant === ''
      ? 'Type a tenant in the top bar to count its records per table.'
      : `Record counts are for tenant "${tenant}".`;
  const cards = tables.map((t) => {
    const count = counts.get(t.name);
    const rows = t.columns.map((c) =>
      h('tr', {}, h('td', {}, c.name), h('td', {}, columnKind(c)), h('td', { class: 'flag' }, c.text ? 'text' : ''), h('td', { class: 'flag' }, c.scalar ? 'scalar' : '')),
    );
    return h(
      'article',
      { class: 'card', attrs: { 'data-table': t.name } },
      h('header', {}, h('h4', {}, t.name), h('span', { class: 'count' }, count === undefined ? '' : typeof count === 'number' ? `${count} record${count === 1 ? '' : 's'}` : count)),
      h('table', { class: 'grid compact' }, h('thead', {}, h('tr', {}, h('th', {}, 'column'), h('th', {}, 'type'), h('th', {}, 'BM25'), h('th', {}, 'filter'))), h('tbody', {}, ...rows)),
    );
  });
  byId('tables').replaceChildren(...cards);
}
