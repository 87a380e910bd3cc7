/**
 * Lexer of Braid's native query language.
 *
 * The lexer never throws: a problem (unterminated string, bad number,
 * unknown character) becomes an `invalid` token that the parser cannot
 * consume, so the parser reports it with the tokens it expected at that
 * point. Lexing stops at the first invalid token because the parser can
 * never get past it.
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

export function tokenize(source: string): Token[] {
  return new Lexer(source).run();
}

class Lexer {
  private pos = 0;

  constructor(private readonly src: string) {}

  run(): Token[] {
    const tokens: Token[] = [];
    for (;;) {
      this.skipTrivia();
      const token = this.next();
      tokens.push(token);
      if (token.kind === 'eof') return tokens;
      if (token.kind === 'invalid') {
        tokens.push(this.eof());
        return tokens;
      }
    }
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

  private next(): Token {
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
    const value = Number(span.text);
    // JSON cannot carry Infinity, so 1e999 would silently become null.
    if (!Number.isFinite(value)) {
      return { kind: 'invalid', description: `number '${preview(span.text)}' out of range`, ...span };
    }
    return { kind: 'number', value, ...span };
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

  private punctuation(): PunctuationToken | undefined {
    const found = PUNCTUATION.find((p) => this.src.startsWith(p, this.pos));
    if (found === undefined) return undefined;
    const start = this.pos;
    this.pos += found.length;
    return { kind: 'punct', value: found, ...this.span(start) };
  }

  private unknownCharacter(): InvalidToken {
    const start = this.pos;
    const char = String.fromCodePoint(this.src.codePointAt(this.pos) ?? 0);
    this.pos += char.length;
    return { kind: 'invalid', description: `unexpected character ${describeChar(char)}`, ...this.span(start) };
  }
}
