/** How the client commands print tables: ranked query rows, branches. */
import type { QueryResponse } from '../engine.js';

/** Left-aligned text columns, right-aligned numbers. */
export function renderTable(header: string[], rows: string[][], numeric: boolean[]): string {
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
