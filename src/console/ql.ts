/**
 * The query form as native query language text (docs/ql.md). The console
 * sends both of its query modes to `POST /v1/nativeql`, so the form shows the
 * statement it runs and the two modes cannot drift apart. Pure: no DOM, so
 * test/console.test.ts parses what it builds with the server's parser.
 */

export type Scalar = string | number | boolean;

export interface QueryForm {
  table: string;
  tenant: string;
  text?: string;
  textField?: string;
  vector?: number[];
  vectorField?: string;
  where?: Array<{ column: string; value: Scalar }>;
  graphSeed?: string;
  graphDepth?: number;
  asOf?: number;
  freshness?: string;
  fusion?: string;
  weights?: { lexical?: number; vector?: number; relational?: number };
  budget?: number;
  limit?: number;
}

const WORD = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A string literal: single quotes, `''` for a quote inside. */
export function quoteString(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

/** A name: a plain word as is, anything else in double quotes with `""` for a quote inside. */
export function quoteName(name: string): string {
  return WORD.test(name) ? name : `"${name.replaceAll('"', '""')}"`;
}

/** A number as QL writes it (JSON); NaN and infinities have no literal. */
export function numberLiteral(n: number): string {
  if (!Number.isFinite(n)) throw new RangeError(`${n} is not a finite number`);
  return JSON.stringify(n);
}

function integerLiteral(n: number, what: string): string {
  if (!Number.isSafeInteger(n)) throw new RangeError(`${what} must be an integer, got ${n}`);
  return String(n);
}

function scalarLiteral(value: Scalar): string {
  if (typeof value === 'string') return quoteString(value);
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  return numberLiteral(value);
}

/** The statement the form describes, one clause per line. */
export function buildQuery(form: QueryForm): string {
  const lines = [`SEARCH ${quoteName(form.table)} TENANT ${quoteString(form.tenant)}`];
  const into = (field: string | undefined) => (field ? ` IN ${quoteName(field)}` : '');
  if (form.text !== undefined && form.text !== '') lines.push(`MATCH ${quoteString(form.text)}${into(form.textField)}`);
  if (form.vector && form.vector.length > 0) lines.push(`NEAR [${form.vector.map(numberLiteral).join(', ')}]${into(form.vectorField)}`);
  if (form.where && form.where.length > 0) {
    lines.push(`WHERE ${form.where.map((p) => `${quoteName(p.column)} = ${scalarLiteral(p.value)}`).join(' AND ')}`);
  }
  if (form.graphSeed !== undefined && form.graphSeed !== '') {
    const depth = form.graphDepth === undefined ? '' : ` DEPTH ${integerLiteral(form.graphDepth, 'graph depth')}`;
    lines.push(`GRAPH FROM ${quoteString(form.graphSeed)}${depth}`);
  }
  if (form.asOf !== undefined) lines.push(`AS OF ${integerLiteral(form.asOf, 'as of epoch')}`);
  if (form.freshness) lines.push(`FRESHNESS ${quoteName(form.freshness)}`);
  if (form.fusion) {
    const weights = Object.entries(form.weights ?? {}).filter((e): e is [string, number] => e[1] !== undefined);
    const clause = weights.length > 0 ? ` WEIGHTS (${weights.map(([k, v]) => `${k} ${numberLiteral(v)}`).join(', ')})` : '';
    lines.push(`FUSE ${quoteName(form.fusion)}${clause}`);
  }
  if (form.budget !== undefined) lines.push(`BUDGET ${integerLiteral(form.budget, 'budget')}`);
  if (form.limit !== undefined) lines.push(`LIMIT ${integerLiteral(form.limit, 'limit')}`);
  return lines.join('\n');
}

/** Parses a form's vector input: numbers separated by commas or spaces, brackets optional. */
export function parseVector(input: string): number[] | undefined {
  const inner = input.trim().replace(/^\[/, '').replace(/\]$/, '').trim();
  if (inner === '') return undefined;
  return inner.split(/[\s,]+/).filter(Boolean).map((part) => {
    const n = Number(part);
    if (!Number.isFinite(n)) throw new RangeError(`vector: ${JSON.stringify(part)} is not a number`);
    return n;
  });
}

/** A filter value typed by its column: numbers and booleans for those columns, else the text. */
export function typedValue(columnType: string | undefined, input: string): Scalar {
  if (columnType === 'number') {
    const n = Number(input.trim());
    if (input.trim() === '' || !Number.isFinite(n)) throw new RangeError(`${JSON.stringify(input)} is not a number`);
    return n;
  }
  if (columnType === 'bool') {
    const v = input.trim().toLowerCase();
    if (v !== 'true' && v !== 'false') throw new RangeError(`${JSON.stringify(input)} is not true or false`);
    return v === 'true';
  }
  return input;
}
