/**
 * Diagnostics of the native query language, as plain data.
 *
 * Every failure to parse a query is a `QlSyntaxError`: a `BraidError` with
 * code `ql_syntax_error` carrying one `QlDiagnostic`, whose error body adds
 * the position and what was expected, so callers can point at the
 * offending token.
 */
import { BraidError, boundedMessage } from '../errors.js';
import { preview, type Token } from './lexer.js';

export interface QlDiagnostic {
  /** 1-based line of the offending token. */
  line: number;
  /** 1-based column of the offending token, in UTF-16 code units. */
  column: number;
  /** 0-based UTF-16 index of the offending token in the query string. */
  offset: number;
  /** What would have been accepted there, e.g. `'TENANT'`, `identifier`, `end of input`. */
  expected: string[];
  /** The offending token as shown in the message, e.g. `'LIMTI'`, `end of input`. */
  found: string;
  /** `line L, column C: expected <a, b or c>, found <token>`, maybe with a hint in parentheses. */
  message: string;
}

export class QlSyntaxError extends BraidError {
  readonly diagnostic: QlDiagnostic;

  constructor(diagnostic: QlDiagnostic) {
    super('ql_syntax_error', diagnostic.message);
    this.name = 'QlSyntaxError';
    this.diagnostic = diagnostic;
  }

  /** `{code, error}` plus `line`, `column` and `expected`. */
  override toBody(): QlErrorBody {
    return formatQlError(this);
  }
}

/** The 400 body of a query that does not parse. */
export interface QlErrorBody {
  code: 'ql_syntax_error';
  error: string;
  line: number;
  column: number;
  expected: string[];
}

export function formatQlError(err: QlSyntaxError): QlErrorBody {
  const { message, line, column, expected } = err.diagnostic;
  // every token is previewed, but a hint or an expected list may quote input too
  return { code: 'ql_syntax_error', error: boundedMessage(message), line, column, expected: [...expected] };
}

/**
 * Maps offsets to 1-based line and column; `\n`, `\r\n` and `\r` each end a
 * line. Only a diagnostic asks, so the text is read up to the offset asked
 * for, then: a statement that parses is never scanned for lines.
 */
export class LineIndex {
  constructor(private readonly source: string) {}

  position(offset: number): { line: number; column: number } {
    const source = this.source;
    let line = 1;
    let start = 0;
    for (let i = 0; i < offset && i < source.length; i++) {
      const c = source[i];
      if (c === '\r' && source[i + 1] === '\n') continue; // the \n ends this line
      if (c === '\n' || c === '\r') {
        line += 1;
        start = i + 1;
      }
    }
    return { line, column: offset - start + 1 };
  }
}

/** `a`, `a or b`, `a, b or c`. */
export function joinAlternatives(items: readonly string[]): string {
  if (items.length === 0) return 'nothing';
  if (items.length === 1) return items[0] ?? '';
  return `${items.slice(0, -1).join(', ')} or ${items[items.length - 1] ?? ''}`;
}

/** How a token is named after "found". */
export function describeToken(token: Token): string {
  switch (token.kind) {
    case 'eof':
      return 'end of input';
    case 'word':
      return `'${preview(token.text)}'`;
    case 'punct':
      return `'${token.text}'`;
    case 'quoted_ident':
      return `identifier ${preview(token.text)}`;
    case 'string':
      return `string ${preview(token.text)}`;
    case 'number':
      return `number ${preview(token.text)}`;
    case 'invalid':
      return token.description;
  }
}

export function makeDiagnostic(lines: LineIndex, token: Token, expected: readonly string[], hint?: string): QlDiagnostic {
  const { line, column } = lines.position(token.offset);
  const found = describeToken(token);
  const unique = [...new Set(expected)];
  const suffix = hint === undefined ? '' : ` (${hint})`;
  return {
    line,
    column,
    offset: token.offset,
    expected: unique,
    found,
    message: `line ${line}, column ${column}: expected ${joinAlternatives(unique)}, found ${found}${suffix}`,
  };
}
