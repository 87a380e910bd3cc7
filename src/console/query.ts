/**
 * The query panel: a form (or native QL typed by hand) sent to
 * `POST /v1/nativeql`, the ranked results with every score component, and
 * the explain drawn by explain.ts.
 */
import { ApiError, postJson } from './api.js';
import { byId, fieldText, h, score } from './dom.js';
import { renderExplain } from './explain.js';
import { buildQuery, parseVector, typedValue, type QueryForm } from './ql.js';
import type { QueryResponse, Table } from './types.js';

export interface QueryPanel {
  /** The catalog changed: refill the table and column choices. */
  setTables(tables: Table[]): void;
  /** Something the statement depends on outside the form changed (the tenant). */
  update(): void;
}

const input = (id: string) => byId<HTMLInputElement>(id);
const select = (id: string) => byId<HTMLSelectElement>(id);

function optionalInt(id: string): number | undefined {
  const raw = input(id).value.trim();
  if (raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new RangeError(`${input(id).closest('label')?.firstChild?.textContent?.trim() ?? id}: ${JSON.stringify(raw)} is not an integer`);
  return n;
}

/** "lexical 0.7, vector 0.3" */
function parseWeights(raw: string): QueryForm['weights'] {
  if (raw.trim() === '') return undefined;
  const weights: NonNullable<QueryForm['weights']> = {};
  for (const part of raw.split(',')) {
    const m = /^\s*(lexical|vector|relational)\s*[:=]?\s*(\S+)\s*$/i.exec(part);
    const value = m ? Number(m[2]) : NaN;
    if (!m || !Number.isFinite(value)) throw new RangeError(`weights: write them as "lexical 0.7, vector 0.3", not ${JSON.stringify(part.trim())}`);
    weights[m[1]!.toLowerCase() as 'lexical' | 'vector' | 'relational'] = value;
  }
  return weights;
}

function renderResults(res: QueryResponse, openRecord: (table: string, id: string) => void, table: string | undefined): void {
  const top = Math.max(0, ...res.results.map((r) => r.score.final_score)) || 1;
  const rows = res.results.map((r, i) => {
    const fill = h('div', { class: 'bar final' });
    fill.style.width = `${(r.score.final_score / top) * 100}%`;
    const fields = h('ul', { class: 'row-fields' }, ...Object.entries(r.fields).map(([k, v]) => h('li', {}, h('span', { class: 'key' }, k), ' ', fieldText(v))));
    const id = table
      ? h('button', { class: 'link', title: 'look up this record and its versions', on: { click: () => openRecord(table, r.record_id) } }, r.record_id)
      : h('span', {}, r.record_id);
    return h(
      'tr',
      { attrs: { 'data-record-id': r.record_id } },
      h('td', { class: 'num' }, i + 1),
      h('td', { class: 'record-id' }, id),
      h('td', { class: 'num' }, r.version_id),
      h('td', { class: 'num score' }, score(r.score.final_score), h('div', { class: 'bar-track mini' }, fill)),
      h('td', { class: 'num' }, score(r.score.lexical)),
      h('td', { class: 'num' }, score(r.score.vector)),
      h('td', { class: 'num' }, score(r.score.relational)),
      h('td', { class: 'num' }, score(r.score.freshness_penalty)),
      h('td', {}, fields),
    );
  });
  byId('results').querySelector('tbody')!.replaceChildren(...rows);
  byId('results-note').textContent = `${res.results.length} row${res.results.length === 1 ? '' : 's'}${res.next_cursor ? ', more pages' : ''}`;
}

/** The SEARCH target table of a QL statement, for the record links (best effort). */
function tableOf(ql: string): string | undefined {
  const m = /^\s*(?:--[^\n]*\n\s*)*(?:explain\s+)?search\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)/i.exec(ql);
  if (!m) return undefined;
  const name = m[1]!;
  return name.startsWith('"') ? name.slice(1, -1).replaceAll('""', '"') : name;
}

export function queryPanel(tenant: () => string, openRecord: (table: string, id: string) => void): QueryPanel {
  let tables: Table[] = [];
  let mode: 'form' | 'ql' = 'form';
  let lastBuilt = '';
  const error = byId('query-error');
  const preview = byId('ql-preview');

  const columns = () => tables.find((t) => t.name === select('q-table').value)?.columns ?? [];

  const fillColumnChoices = () => {
    const cols = columns();
    const fill = (id: string, kind: (c: Table['columns'][number]) => boolean, none: string) => {
      const s = select(id);
      const keep = s.value;
      s.replaceChildren(h('option', { attrs: { value: '' } }, none), ...cols.filter(kind).map((c) => h('option', { attrs: { value: c.name } }, c.name)));
      s.value = cols.some((c) => c.name === keep && kind(c)) ? keep : '';
    };
    fill('q-text-field', (c) => c.text, 'every text column');
    fill('q-vector-field', (c) => c.type === 'vector', 'the vector column');
    for (const row of byId('q-where-rows').querySelectorAll<HTMLElement>('.where-row')) fillWhereColumns(row.querySelector('select')!);
  };

  const fillWhereColumns = (s: HTMLSelectElement) => {
    const keep = s.value;
    s.replaceChildren(...columns().filter((c) => c.scalar).map((c) => h('option', { attrs: { value: c.name } }, `${c.name} (${c.type})`)));
    if (keep) s.value = keep;
  };

  const addWhere = () => {
    const column = h('select', { class: 'where-column', on: { change: update } });
    fillWhereColumns(column);
    const value = h('input', { class: 'where-value', attrs: { type: 'text', placeholder: 'value' }, on: { input: update } });
    const row = h('div', { class: 'where-row' }, column, ' = ', value);
    row.append(h('button', { attrs: { type: 'button' }, title: 'remove this filter', on: { click: () => { row.remove(); update(); } } }, '×'));
    byId('q-where-rows').append(row);
    update();
  };

  const formModel = (): QueryForm => {
    const table = select('q-table').value;
    if (table === '') throw new RangeError('pick a table (the catalog has none yet?)');
    if (tenant() === '') throw new RangeError('type a tenant in the top bar');
    const cols = columns();
    const where = [...byId('q-where-rows').querySelectorAll<HTMLElement>('.where-row')].map((row) => {
      const column = row.querySelector<HTMLSelectElement>('select')!.value;
      return { column, value: typedValue(cols.find((c) => c.name === column)?.type, row.querySelector<HTMLInputElement>('input')!.value) };
    }).filter((p) => p.column !== '');
    return {
      table,
      tenant: tenant(),
      text: input('q-text').value,
      textField: select('q-text-field').value || undefined,
      vector: parseVector(input('q-vector').value),
      vectorField: select('q-vector-field').value || undefined,
      where,
      graphSeed: input('q-graph-seed').value,
      graphDepth: optionalInt('q-graph-depth'),
      asOf: optionalInt('q-as-of'),
      freshness: select('q-freshness').value || undefined,
      fusion: select('q-fusion').value || (input('q-weights').value.trim() ? 'rrf' : undefined),
      weights: parseWeights(input('q-weights').value),
      budget: optionalInt('q-budget'),
      limit: optionalInt('q-limit'),
    };
  };

  /** The statement the form describes, shown under it; a form error is shown instead. */
  function update(): void {
    if (mode !== 'form') return;
    try {
      lastBuilt = buildQuery(formModel());
      preview.textContent = lastBuilt;
      preview.classList.remove('invalid');
    } catch (err) {
      preview.textContent = (err as Error).message;
      preview.classList.add('invalid');
    }
  }

  const run = async (ql: string) => {
    error.textContent = '';
    byId('query-panel').classList.add('busy');
    try {
      const res = await postJson<QueryResponse>('/v1/nativeql', { query: ql });
      renderResults(res, openRecord, tableOf(ql));
      renderExplain(byId('explain'), res.explain);
    } catch (err) {
      error.textContent = err instanceof ApiError ? `${err.code}: ${err.message}` : (err as Error).message;
    } finally {
      byId('query-panel').classList.remove('busy');
    }
  };

  const setMode = (next: 'form' | 'ql') => {
    mode = next;
    byId('query-form').hidden = next !== 'form';
    byId('ql-form').hidden = next !== 'ql';
    byId('tab-form').setAttribute('aria-selected', String(next === 'form'));
    byId('tab-ql').setAttribute('aria-selected', String(next === 'ql'));
    preview.hidden = next !== 'form';
    const text = byId<HTMLTextAreaElement>('ql-text');
    // the form's statement carries over, unless the QL was edited since
    if (next === 'ql' && lastBuilt && (text.value === '' || text.dataset.from === 'form')) {
      text.value = lastBuilt;
      text.dataset.from = 'form';
    }
    update();
  };

  byId('tab-form').addEventListener('click', () => setMode('form'));
  byId('tab-ql').addEventListener('click', () => setMode('ql'));
  byId('ql-text').addEventListener('input', () => delete byId('ql-text').dataset.from);
  byId('q-where-add').addEventListener('click', addWhere);
  byId('query-form').addEventListener('input', update);
  byId('query-form').addEventListener('change', (event) => {
    if ((event.target as HTMLElement).id === 'q-table') fillColumnChoices();
    update();
  });
  byId('query-form').addEventListener('submit', (event) => {
    event.preventDefault();
    try {
      void run(buildQuery(formModel()));
    } catch (err) {
      error.textContent = (err as Error).message;
    }
  });
  byId('ql-form').addEventListener('submit', (event) => {
    event.preventDefault();
    void run(byId<HTMLTextAreaElement>('ql-text').value);
  });

  return {
    setTables(next: Table[]) {
      tables = next;
      const s = select('q-table');
      const keep = s.value;
      s.replaceChildren(...tables.map((t) => h('option', { attrs: { value: t.name } }, t.name)));
      if (tables.some((t) => t.name === keep)) s.value = keep;
      fillColumnChoices();
      update();
    },
    update,
  };
}
