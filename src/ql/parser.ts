/**
 * Recursive-descent parser of Braid's native query language; the grammar is
 * in docs/ql.md. It turns tokens straight into a `HybridQuery`, setting only
 * the fields the query mentions, and leaves value ranges (LIMIT 0, an unknown
 * FRESHNESS, a negative weight) to the engine, which already validates them
 * with its own stable error codes.
 *
 * Keywords are contextual, not reserved: wherever a name is expected any word
 * is a name, so a column called `limit` needs no quoting.
 */
import type { HybridQuery } from '../native/index.js';
import { LineIndex, QlSyntaxError, makeDiagnostic } from './diagnostics.js';
import { Lexer, type PunctuationValue, type Token } from './lexer.js';

type Weights = NonNullable<HybridQuery['fusion_weights']>;
type WeightName = keyof Weights;
type ClauseLead = 'MATCH' | 'NEAR' | 'WHERE' | 'GRAPH' | 'AS' | 'FRESHNESS' | 'FUSE' | 'BUDGET' | 'LIMIT' | 'CURSOR' | 'RETURN';

interface ClauseSpec {
  /** The first keyword, which identifies the clause. */
  lead: ClauseLead;
  /** How the clause is named in diagnostics. */
  label: string;
  parse(parser: Parser): Partial<HybridQuery>;
}

const WHERE_HINT = 'WHERE supports only = comparisons combined with AND';
/**
 * Comparisons one WHERE may hold: a table's default column limit (each field is
 * compared once). 100,000 of them (1.9 MB) had held the JavaScript thread for
 * 1.2 s (found by a fuzz review).
 */
const MAX_WHERE_COMPARISONS = 1024;
const INTEGER_TEXT = /^-?(?:0|[1-9][0-9]*)$/;
const WEIGHT_NAMES: readonly WeightName[] = ['lexical', 'vector', 'relational'];

// Grammar order; diagnostics list the clauses in this order too.
const CLAUSES: readonly ClauseSpec[] = [
  { lead: 'MATCH', label: "'MATCH'", parse: (p) => p.matchClause() },
  { lead: 'NEAR', label: "'NEAR'", parse: (p) => p.nearClause() },
  { lead: 'WHERE', label: "'WHERE'", parse: (p) => p.whereClause() },
  { lead: 'GRAPH', label: "'GRAPH'", parse: (p) => p.graphClause() },
  { lead: 'AS', label: "'AS OF'", parse: (p) => p.asOfClause() },
  { lead: 'FRESHNESS', label: "'FRESHNESS'", parse: (p) => p.freshnessClause() },
  { lead: 'FUSE', label: "'FUSE'", parse: (p) => p.fuseClause() },
  { lead: 'BUDGET', label: "'BUDGET'", parse: (p) => p.budgetClause() },
  { lead: 'LIMIT', label: "'LIMIT'", parse: (p) => p.limitClause() },
  { lead: 'CURSOR', label: "'CURSOR'", parse: (p) => p.cursorClause() },
  { lead: 'RETURN', label: "'RETURN'", parse: (p) => p.returnClause() },
];

export function parse(source: string): HybridQuery {
  return new Parser(new Lexer(source), new LineIndex(source)).query();
}

/** Sets an own property even for `__proto__`, which plain assignment would swallow. */
function defineOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

class Parser {
  /** The token the parser is at; the lexer reads the next one when it moves on. */
  private current: Token;
  /** What was tried and not found at the current token, for "expected ..." lists. */
  private tried: string[] = [];
  /** The lead token of each clause seen so far, to report duplicates. */
  private readonly seen = new Map<ClauseLead, Token>();

  constructor(
    private readonly lexer: Lexer,
    private readonly lines: LineIndex,
  ) {
    this.current = lexer.next();
  }

  // ---- the query ----------------------------------------------------------

  query(): HybridQuery {
    const explain = this.acceptKeyword('EXPLAIN');
    this.expectKeyword('SEARCH');
    const table = this.identifier();
    this.expectKeyword('TENANT');
    const query: HybridQuery = { table, tenant_id: this.string() };
    if (explain) query.explain = true;
    this.clauses(query);
    this.end();
    return query;
  }

  private clauses(query: HybridQuery): void {
    for (;;) {
      const spec = this.clauseAtToken();
      if (spec === undefined) return;
      const first = this.seen.get(spec.lead);
      if (first !== undefined) this.duplicateClause(spec, first);
      this.seen.set(spec.lead, this.token);
      Object.assign(query, spec.parse(this));
    }
  }

  private clauseAtToken(): ClauseSpec | undefined {
    const token = this.token;
    const word = token.kind === 'word' ? token.value.toUpperCase() : undefined;
    const spec = CLAUSES.find((c) => c.lead === word);
    if (spec === undefined) this.tried.push(...this.unusedClauseLabels());
    return spec;
  }

  private duplicateClause(spec: ClauseSpec, first: Token): never {
    const at = this.lines.position(first.offset);
    const name = spec.label.slice(1, -1);
    this.fail(
      [...this.unusedClauseLabels(), "';'", 'end of input'],
      `duplicate ${name} clause: each clause may appear at most once, the first is at line ${at.line}, column ${at.column}`,
    );
  }

  private unusedClauseLabels(): string[] {
    return CLAUSES.filter((c) => !this.seen.has(c.lead)).map((c) => c.label);
  }

  /** An optional `;`, then nothing. */
  private end(): void {
    this.acceptPunct(';');
    if (this.token.kind !== 'eof') this.fail(['end of input']);
  }

  // ---- clauses (called through CLAUSES) -------------------------------------

  matchClause(): Partial<HybridQuery> {
    this.advance();
    const text = this.string();
    const field = this.optionalField();
    return field === undefined ? { text } : { text, text_field: field };
  }

  nearClause(): Partial<HybridQuery> {
    this.advance();
    const vector = this.vector();
    const field = this.optionalField();
    return field === undefined ? { vector } : { vector, vector_field: field };
  }

  whereClause(): Partial<HybridQuery> {
    this.advance();
    const scalarEq: Record<string, unknown> = {};
    let comparisons = 0;
    do {
      if (++comparisons > MAX_WHERE_COMPARISONS) {
        this.fail([...this.unusedClauseLabels(), "';'", 'end of input'], `a WHERE holds at most ${MAX_WHERE_COMPARISONS} comparisons`);
      }
      this.predicate(scalarEq);
    } while (this.acceptKeyword('AND'));
    // OR would otherwise be reported as an unknown clause; say what is wrong.
    if (this.isKeyword('OR')) this.fail([...this.unusedClauseLabels(), "';'", 'end of input'], WHERE_HINT);
    return { scalar_eq: scalarEq };
  }

  graphClause(): Partial<HybridQuery> {
    this.advance();
    this.expectKeyword('FROM');
    const seed = this.string();
    if (!this.acceptKeyword('DEPTH')) return { graph_seed: seed };
    return { graph_seed: seed, graph_depth: this.integer('DEPTH') };
  }

  asOfClause(): Partial<HybridQuery> {
    this.advance();
    this.expectKeyword('OF');
    return { temporal_as_of: this.integer('AS OF') };
  }

  freshnessClause(): Partial<HybridQuery> {
    this.advance();
    return { freshness: this.modeName() };
  }

  fuseClause(): Partial<HybridQuery> {
    this.advance();
    const fusion = this.modeName();
    if (!this.acceptKeyword('WEIGHTS')) return { fusion };
    return { fusion, fusion_weights: this.weights() };
  }

  budgetClause(): Partial<HybridQuery> {
    this.advance();
    return { candidate_budget: this.integer('BUDGET') };
  }

  limitClause(): Partial<HybridQuery> {
    this.advance();
    return { top_k: this.integer('LIMIT') };
  }

  cursorClause(): Partial<HybridQuery> {
    this.advance();
    return { cursor: this.string() };
  }

  /**
   * `RETURN a, b`: the fields each result carries (`return_fields`);
   * `RETURN NONE` none (a column named none is written `"none"`).
   */
  returnClause(): Partial<HybridQuery> {
    this.advance();
    if (this.acceptKeyword('NONE')) return { return_fields: [] };
    const fields = [this.identifier()];
    while (this.acceptPunct(',')) fields.push(this.identifier());
    return { return_fields: fields };
  }

  // ---- clause parts ---------------------------------------------------------

  private optionalField(): string | undefined {
    return this.acceptKeyword('IN') ? this.identifier() : undefined;
  }

  /** `[n, n, ...]`, at least one number. */
  private vector(): number[] {
    const open = this.token;
    if (open.kind === 'punct' && open.numbers !== undefined) {
      // read whole by the lexer (lexer.ts numberList)
      this.advance();
      return open.numbers;
    }
    this.expectPunct('[');
    const values = [this.number()];
    while (this.acceptPunct(',')) values.push(this.number());
    this.expectPunct(']');
    return values;
  }

  private predicate(scalarEq: Record<string, unknown>): void {
    const fieldToken = this.token;
    const field = this.identifier(WHERE_HINT);
    if (Object.hasOwn(scalarEq, field)) {
      this.failAt(fieldToken, ['a field not compared yet'], `duplicate field ${field}: each field may be compared at most once`);
    }
    this.expectPunct('=', WHERE_HINT);
    defineOwn(scalarEq, field, this.scalar());
  }

  /** A WHERE value: string, number, TRUE or FALSE. */
  private scalar(): string | number | boolean {
    const token = this.token;
    if (token.kind === 'string' || token.kind === 'number') {
      this.advance();
      return token.value;
    }
    if (this.acceptKeyword('TRUE')) return true;
    if (this.acceptKeyword('FALSE')) return false;
    this.failAt(token, ['string', 'number', "'TRUE'", "'FALSE'"], WHERE_HINT);
  }

  /**
   * FRESHNESS and FUSE take a mode: a bare word is a keyword and so
   * case-insensitive (lowercased), a string passes through as written.
   */
  private modeName(): string {
    const token = this.token;
    if (token.kind === 'word') {
      this.advance();
      return token.value.toLowerCase();
    }
    if (token.kind === 'string' || token.kind === 'quoted_ident') {
      this.advance();
      return token.value;
    }
    this.fail(['identifier', 'string']);
  }

  /** `(name number, ...)` with each of lexical, vector, relational at most once. */
  private weights(): Weights {
    this.expectPunct('(');
    const weights: Weights = {};
    do {
      this.weight(weights);
    } while (this.unusedWeights(weights).length > 0 && this.acceptPunct(','));
    this.expectPunct(')');
    return weights;
  }

  private unusedWeights(weights: Weights): WeightName[] {
    return WEIGHT_NAMES.filter((n) => weights[n] === undefined);
  }

  private weight(weights: Weights): void {
    const token = this.token;
    const remaining = this.unusedWeights(weights).map((n) => `'${n}'`);
    const name = WEIGHT_NAMES.find((n) => token.kind === 'word' && token.value.toLowerCase() === n);
    if (name === undefined) this.fail(remaining);
    if (weights[name] !== undefined) this.fail(remaining, `duplicate weight ${name}: each weight may be given at most once`);
    this.advance();
    weights[name] = this.number();
  }

  // ---- terminals ------------------------------------------------------------

  private identifier(hint?: string): string {
    const token = this.token;
    if (token.kind === 'word' || token.kind === 'quoted_ident') {
      this.advance();
      return token.value;
    }
    const quoteHint = token.kind === 'string' ? 'names are bare or double-quoted; single quotes make a string' : undefined;
    this.fail(['identifier'], hint ?? quoteHint);
  }

  private string(): string {
    const token = this.token;
    if (token.kind === 'string') {
      this.advance();
      return token.value;
    }
    const quoteHint = token.kind === 'quoted_ident' ? "strings use single quotes; double quotes make a name" : undefined;
    this.fail(['string'], quoteHint);
  }

  private number(): number {
    const token = this.token;
    if (token.kind !== 'number') this.fail(['number']);
    this.advance();
    return token.value;
  }

  /** A whole number written without fraction or exponent, small enough to be exact. */
  private integer(clause: string): number {
    const token = this.token;
    if (token.kind !== 'number') this.fail(['integer']);
    if (!INTEGER_TEXT.test(token.text)) this.fail(['integer'], `${clause} takes a whole number`);
    if (!Number.isSafeInteger(token.value)) {
      this.fail(['integer'], `${clause} must be between ${Number.MIN_SAFE_INTEGER} and ${Number.MAX_SAFE_INTEGER}`);
    }
    this.advance();
    return token.value;
  }

  // ---- token plumbing -------------------------------------------------------

  private get token(): Token {
    return this.current;
  }

  private advance(): void {
    if (this.current.kind !== 'eof') this.current = this.lexer.next();
    this.tried = [];
  }

  private isKeyword(keyword: string): boolean {
    const token = this.token;
    return token.kind === 'word' && token.value.toUpperCase() === keyword;
  }

  private acceptKeyword(keyword: string): boolean {
    if (this.isKeyword(keyword)) {
      this.advance();
      return true;
    }
    this.tried.push(`'${keyword}'`);
    return false;
  }

  private expectKeyword(keyword: string): void {
    if (!this.acceptKeyword(keyword)) this.fail([]);
  }

  private acceptPunct(value: PunctuationValue): boolean {
    const token = this.token;
    if (token.kind === 'punct' && token.value === value) {
      this.advance();
      return true;
    }
    this.tried.push(`'${value}'`);
    return false;
  }

  private expectPunct(value: PunctuationValue, hint?: string): void {
    if (!this.acceptPunct(value)) this.fail([], hint);
  }

  /** Fails at the current token; everything tried there is also expected. */
  private fail(expected: readonly string[], hint?: string): never {
    this.failAt(this.token, [...this.tried, ...expected], hint);
  }

  private failAt(token: Token, expected: readonly string[], hint?: string): never {
    // A lexical problem is the root cause, so its advice comes first.
    const lexical = token.kind === 'invalid' ? token.hint : undefined;
    const hints = [lexical, hint].filter((h): h is string => h !== undefined);
    throw new QlSyntaxError(makeDiagnostic(this.lines, token, expected, hints.length > 0 ? hints.join('; ') : undefined));
  }
}
