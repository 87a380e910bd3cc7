/**
 * The record panel: one record (`POST /v1/records/get`) and its versions,
 * each with the epoch it became visible at, found by versions.ts through
 * GraphQL `record(as_of_epoch)` reads.
 */
import { ApiError, getJson, graphql, postJson } from './api.js';
import { byId, fieldList, h } from './dom.js';
import { findHistory, type History, type Seen } from './versions.js';
import type { PublicMetrics, RecordOutput, Table } from './types.js';

interface Key {
  table: string;
  tenant_id: string;
  id: string;
}

/** Reads the record at each epoch in one GraphQL request (an alias per epoch). */
function probeFor(key: Key) {
  return async (epochs: number[]): Promise<Map<number, Seen>> => {
    const fields = epochs.map((e) => `e${e}: record(table: $table, tenant_id: $tenant, id: $id, as_of_epoch: ${e}) { version_id fields }`);
    const query = `query Versions($table: String!, $tenant: String!, $id: String!) {\n  ${fields.join('\n  ')}\n}`;
    type Row = { version_id: number; fields: Record<string, unknown> } | null;
    const { data, errors } = await graphql<Record<string, Row>>(query, { table: key.table, tenant: key.tenant_id, id: key.id }, true);
    const out = new Map<number, Seen>();
    for (const e of epochs) {
      const row = data[`e${e}`];
      const error = errors.find((x) => x.path?.[0] === `e${e}`);
      if (error?.extensions?.code === 'temporal_before_horizon') out.set(e, { kind: 'horizon' });
      else if (error) throw new ApiError(200, error.extensions?.code ?? 'graphql_error', error.message);
      else out.set(e, row ? { kind: 'version', version_id: row.version_id, fields: row.fields } : { kind: 'absent' });
    }
    return out;
  };
}

function changedKeys(before: Record<string, unknown> | undefined, after: Record<string, unknown>): Set<string> {
  if (!before) return new Set();
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return new Set([...keys].filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k])));
}

function renderHistory(history: History): void {
  const items: HTMLElement[] = [];
  let previous: Record<string, unknown> | undefined;
  for (const span of history.spans) {
    const since = span.exact ? `epoch ${span.from}` : `epoch ${span.from} or earlier`;
    if (span.seen.kind === 'version') {
      const changed = changedKeys(previous, span.seen.fields);
      items.push(h(
        'li',
        { class: 'version', attrs: { 'data-version': String(span.seen.version_id) } },
        h('div', { class: 'version-head' }, h('strong', {}, `version ${span.seen.version_id}`), ' ', h('span', { class: 'muted' }, `visible from ${since}`), changed.size ? h('span', { class: 'muted' }, ` · changed: ${[...changed].join(', ')}`) : null),
        fieldList(span.seen.fields, changed),
      ));
      previous = span.seen.fields;
    } else if (span.seen.kind === 'absent') {
      // before the first version it simply did not exist yet
      if (previous) items.push(h('li', { class: 'version gone' }, h('strong', {}, 'deleted'), ' ', h('span', { class: 'muted' }, `from ${since}`)));
    } else {
      items.push(h('li', { class: 'version gone' }, h('span', { class: 'muted' }, `history before epoch ${history.spans[1]?.from ?? span.from} is no longer kept (--history-epochs)`)));
    }
  }
  if (!history.complete) items.push(h('li', { class: 'muted' }, 'older changes were not all pinned down (probe budget reached)'));
  byId('versions').replaceChildren(...items.reverse());
}

export interface RecordPanel {
  lookup(table: string, id: string): Promise<void>;
  setTables(tables: Table[]): void;
}

export function recordPanel(tenant: () => string): RecordPanel {
  const error = byId('record-error');
  const tableSelect = byId<HTMLSelectElement>('r-table');
  const idInput = byId<HTMLInputElement>('r-id');

  const lookup = async (table: string, id: string) => {
    tableSelect.value = table;
    idInput.value = id;
    error.textContent = '';
    byId('record').replaceChildren();
    byId('versions').replaceChildren();
    if (tenant() === '') {
      error.textContent = 'type a tenant in the top bar';
      return;
    }
    const key = { table, tenant_id: tenant(), id };
    try {
      const { record } = await postJson<{ record: RecordOutput | null }>('/v1/records/get', key);
      byId('record').replaceChildren(
        record
          ? h('div', { class: 'record', attrs: { 'data-record-id': record.id } },
            h('p', {}, h('strong', {}, record.id), ' ', h('span', { class: 'muted' }, `table ${record.table} · tenant ${record.tenant_id} · version ${record.version_id}`)),
            fieldList(record.fields))
          : h('p', { class: 'muted' }, 'no visible version at the latest epoch (never written, or deleted)'),
      );
      const { latest_epoch } = await getJson<PublicMetrics>('/v1/metrics/public-safe');
      renderHistory(await findHistory(latest_epoch, probeFor(key)));
    } catch (err) {
      error.textContent = err instanceof ApiError ? `${err.code}: ${err.message}` : (err as Error).message;
    }
  };

  byId('record-form').addEventListener('submit', (event) => {
    event.preventDefault();
    void lookup(tableSelect.value, idInput.value);
  });

  return {
    lookup,
    setTables(tables: Table[]) {
      const keep = tableSelect.value;
      tableSelect.replaceChildren(...tables.map((t) => h('option', { attrs: { value: t.name } }, t.name)));
      if (tables.some((t) => t.name === keep)) tableSelect.value = keep;
    },
  };
}
