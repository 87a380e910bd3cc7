/**
 * Lexer of Braid's native query language.
 *
 * The lexer never throws: a problem (unterminated string, bad number,
 * unknown character) becomes an `invalid` token that the parser cannot
 * consume, so the parser reports it with the tokens it expected at that
 * point. Lexing stops at the first invalid token because the parser can
 * never get past it.
 *
 * Tokens are read as the parser asks for them (`Lexer.next`), so a statement
 * is read no further than its first error: a 15 MB body of `(` after a valid
 * prefix had been split into 15 million tokens on the JavaScript thread (10 s,
 * every other request waiting, 1.6 GB) before the parser refused the first
 * (found by a fuzz review).
 */

export type PunctuationValue = '[' | ']' | '(' | ')' | ',' | '=' | ';' | '<' | '>' | '<=' | '>=' | '<>' | '!=';

interface Span {
  /** UTF-16 index of the first character. */
  offset: number;
  /** UTF-16 index just past the last character. */
  end: number;
  /** The token exactly as written. */
  text: string;
}

/** A bare word: keyword or identifier, decided by the parser from context. */
export interface WordToken extends Span {
  kind: 'word';
  value: string;
}

/** A double-quoted identifier, `"like this"`. */
export interface QuotedIdentToken extends Span {
  kind: 'quoted_ident';
  value: string;
}

export interface StringToken extends Span {
  kind: 'string';
  value: string;
}

export interface NumberToken extends Span {
  kind: 'number';
  value: number;
}

export interface PunctuationToken extends Span {
  kind: 'punct';
  value: PunctuationValue;
  /**
   * On a `[` that opens a list of JSON numbers, the numbers and the offset
   * after its `]`: the lexer read the whole list at once (see `numberList`).
   */
  numbers?: number[];
  close?: number;
}

export interface EofToken extends Span {
  kind: 'eof';
}

/** Something that is not a token; `description` says what, for diagnostics. */
export interface InvalidToken extends Span {
  kind: 'invalid';
  description: string;
  /** Extra advice appended to the diagnostic message. */
  hint?: string;
}

export type Token = WordToken | QuotedIdentToken | StringToken | NumberToken | PunctuationToken | EofToken | InvalidToken;

const WORD_START = /[A-Za-z_]/;
const WORD_PART = /[A-Za-z0-9_]/;
const DIGIT = /[0-9]/;
// A number is scanned greedily over these characters and then validated,
// so `10abc` or `1.2.3` is one bad number rather than a confusing token pair.
const NUMBER_PART = /[A-Za-z0-9_.]/;
const JSON_NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;
const WHITESPACE = /\s/;
// Longest first, so `<=` wins over `<`.
const PUNCTUATION: readonly PunctuationValue[] = ['<=', '>=', '<>', '!=', '[', ']', '(', ')', ',', '=', ';', '<', '>'];
const PREVIEW_CHARS = 24;

/** Shortens text for a diagnostic so a long string does not flood the message. */
export function preview(text: string): string {
  const chars = Array.from(text);
  return chars.length <= PREVIEW_CHARS ? text : `${chars.slice(0, PREVIEW_CHARS).join('')}…`;
}

/** Shows a character readably, spelling out invisible ones as U+XXXX. */
function describeChar(char: string): string {
  const code = char.codePointAt(0) ?? 0;
  if (code < 0x20 || code === 0x7f || WHITESPACE.test(char)) return `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
  return `'${char}'`;
}

export class Lexer {
  private pos = 0;
  private stopped = false;

  constructor(private readonly src: string) {}

  /** The next token; after an invalid token or the end, end of input for good. */
  next(): Token {
    if (this.stopped) return this.eof();
    this.skipTrivia();
    const token = this.read();
    if (token.kind === 'invalid' || token.kind === 'eof') this.stopped = true;
    return token;
  }

  private char(at = this.pos): string {
    return this.src[at] ?? '';
  }

  private skipTrivia(): void {
    for (;;) {
      if (WHITESPACE.test(this.char())) {
        this.pos++;
        continue;
      }
      if (this.src.startsWith('--', this.pos)) {
        this.skipLineComment();
        continue;
      }
      return;
    }
  }

  private skipLineComment(): void {
    while (this.pos < this.src.length && this.char() !== '\n' && this.char() !== '\r') this.pos++;
  }

  private read(): Token {
    if (this.pos >= this.src.length) return this.eof();
    const c = this.char();
    if (c === "'") return this.quoted("'");
    if (c === '"') return this.quoted('"');
    if (WORD_START.test(c)) return this.word();
    if (this.startsNumber()) return this.number();
    return this.punctuation() ?? this.unknownCharacter();
  }

  private eof(): EofToken {
    return { kind: 'eof', offset: this.src.length, end: this.src.length, text: '' };
  }

  private span(start: number): Span {
    return { offset: start, end: this.pos, text: this.src.slice(start, this.pos) };
  }

  private word(): WordToken {
    const start = this.pos;
    while (WORD_PART.test(this.char())) this.pos++;
    const span = this.span(start);
    return { kind: 'word', value: span.text, ...span };
  }

  /** A digit, `-digit`, or a leading `.`/`-.` that we scan only to report it well. */
  private startsNumber(): boolean {
    const c = this.char();
    const n = this.char(this.pos + 1);
    if (DIGIT.test(c)) return true;
    if (c === '-') return DIGIT.test(n) || (n === '.' && DIGIT.test(this.char(this.pos + 2)));
    return c === '.' && DIGIT.test(n);
  }

  private number(): NumberToken | InvalidToken {
    const start = this.pos;
    if (this.char() === '-') this.pos++;
    while (this.pos < this.src.length) {
      const c = this.char();
      const exponentSign = (c === '+' || c === '-') && /[eE]/.test(this.char(this.pos - 1)) && this.pos - 1 > start;
      if (!NUMBER_PART.test(c) && !exponentSign) break;
      this.pos++;
    }
    const span = this.span(start);
    if (!JSON_NUMBER.test(span.text)) {
      return {
        kind: 'invalid',
        description: `invalid number '${preview(span.text)}'`,
        hint: 'numbers are written as in JSON, e.g. 42, -7, 0.5 or 1e-3',
        ...span,
      };
    }
    // a number past the doubles (1e999) is ±Infinity, as JSON.parse reads it
    // in a JSON query: the engine refuses it with the same code either way
    // (vector_not_finite in a vector; docs/errors.md, "One code per failure")
    return { kind: 'number', value: Number(span.text), ...span };
  }

  /** A single- or double-quoted literal, where a doubled quote stands for one quote. */
  private quoted(quote: "'" | '"'): StringToken | QuotedIdentToken | InvalidToken {
    const start = this.pos;
    let value = '';
    let from = start + 1;
    for (;;) {
      const close = this.src.indexOf(quote, from);
      if (close < 0) return this.unterminated(start, quote);
      value += this.src.slice(from, close);
      if (this.char(close + 1) === quote) {
        value += quote;
        from = close + 2;
        continue;
      }
      this.pos = close + 1;
      return this.quotedToken(start, quote, value);
    }
  }

  private quotedToken(start: number, quote: "'" | '"', value: string): StringToken | QuotedIdentToken | InvalidToken {
    const span = this.span(start);
    if (quote === "'") return { kind: 'string', value, ...span };
    // An empty name can never be valid, and saying so here beats an engine error later.
    if (value === '') return { kind: 'invalid', description: 'empty quoted identifier ""', ...span };
    return { kind: 'quoted_ident', value, ...span };
  }

  private unterminated(start: number, quote: "'" | '"'): InvalidToken {
    this.pos = this.src.length;
    const span = this.span(start);
    const what = quote === "'" ? 'string' : 'quoted identifier';
    return {
      kind: 'invalid',
      description: `unterminated ${what} ${preview(span.text)}`,
      hint: `no closing ${quote} before end of input; write ${quote}${quote} for a ${quote} inside`,
      ...span,
    };
  }

  /**
   * A vector literal (`[0.1, -2e-3, ...]`, thousands of numbers) read in one
   * pass without a token, a substring or a regex per number: each number is
   * checked against the JSON grammar by character codes and, when it has at
   * most 15 significant digits and a power of ten within 22, computed
   * exactly (Clinger's fast path: both factors are exact doubles, so one
   * correctly rounded operation gives the nearest double, as `Number()`
   * does). Anything else (a longer number, a comment, a bad token) gives up
   * and the list is lexed token by token, with the usual diagnostics.
   */
  private numberList(): number[] | undefined {
    const src = this.src;
    const out: number[] = [];
    let i = this.pos + 1;
    for (;;) {
      i = skipWhitespace(src, i);
      const end = scanNumber(src, i);
      if (end < 0) return undefined;
      out.push(scanned);
      i = skipWhitespace(src, end);
      const c = src.charCodeAt(i);
      if (c === 0x2c /* , */) {
        i++;
        continue;
      }
      if (c !== 0x5d /* ] */) return undefined;
      this.pos = i + 1;
      return out;
    }
  }

  private punctuation(): PunctuationToken | undefined {
    const found = PUNCTUATION.find((p) => this.src.startsWith(p, this.pos));
    if (found === undefined) return undefined;
    const start = this.pos;
    this.pos += found.length;
    const token: PunctuationToken = { kind: 'punct', value: found, ...this.span(start) };
    if (found === '[') {
      this.pos = start;
      const numbers = this.numberList();
      if (numbers === undefined) this.pos = start + 1;
      else Object.assign(token, { numbers, close: this.pos });
    }
    return token;
  }

  private unknownCharacter(): InvalidToken {
    const start = this.pos;
    const char = String.fromCodePoint(this.src.codePointAt(this.pos) ?? 0);
    this.pos += char.length;
    return { kind: 'invalid', description: `unexpected character ${describeChar(char)}`, ...this.span(start) };
  }
}

const POW10 = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22];
/** The value of the number `scanNumber` read last (a return slot, so nothing is allocated per number). */
let scanned = 0;

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function skipWhitespace(src: string, i: number): number {
  for (;;) {
    const c = src.charCodeAt(i);
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
    else if (c > 0x7f && WHITESPACE.test(src[i] ?? '')) i++;
    else return i;
  }
}

/**
 * Reads a JSON number at `i` into `scanned` and returns the offset after it,
 * or -1 when there is none there, it runs into letters (`10abc`, which the
 * token path reports), or it is beyond the exact fast path.
 */
function scanNumber(src: string, i: number): number {
  let negative = false;
  if (src.charCodeAt(i) === 0x2d /* - */) {
    negative = true;
    i++;
  }
  let mantissa = 0;
  let digits = 0; // significant digits in the mantissa
  let exponent = 0;
  let c = src.charCodeAt(i);
  if (c === 0x30) {
    i++;
  } else if (isDigit(c)) {
    for (c = src.charCodeAt(i); isDigit(c); c = src.charCodeAt(i)) {
      mantissa = mantissa * 10 + (c - 0x30);
      if (mantissa > 0) digits++;
      i++;
    }
  } else {
    return -1;
  }
  if (src.charCodeAt(i) === 0x2e /* . */) {
    i++;
    if (!isDigit(src.charCodeAt(i))) return -1;
    for (c = src.charCodeAt(i); isDigit(c); c = src.charCodeAt(i)) {
      mantissa = mantissa * 10 + (c - 0x30);
      if (mantissa > 0) digits++;
      exponent--;
      i++;
    }
  }
  c = src.charCodeAt(i);
  if (c === 0x65 || c === 0x45 /* e E */) {
    i++;
    let sign = 1;
    c = src.charCodeAt(i);
    if (c === 0x2b || c === 0x2d) {
      if (c === 0x2d) sign = -1;
      i++;
    }
    if (!isDigit(src.charCodeAt(i))) return -1;
    let e = 0;
    for (c = src.charCodeAt(i); isDigit(c); c = src.charCodeAt(i)) {
      if (e < 10_000) e = e * 10 + (c - 0x30);
      i++;
    }
    exponent += sign * e;
  }
  c = src.charCodeAt(i);
  // letters, digits, `_` or `.` right after a number make it a bad token: leave it to the token path
  if ((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x2e) return -1;
  if (digits > 15 || exponent > 22 || exponent < -22) return -1;
  const magnitude = exponent >= 0 ? mantissa * (POW10[exponent] as number) : mantissa / (POW10[-exponent] as number);
  scanned = negative ? -magnitude : magnitude;
  return i;
}
