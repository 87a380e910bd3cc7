import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it, expect } from 'vitest';
import type { HybridQuery } from '../src/engine.js';
import { HYBRID_QUERY_FIELDS } from '../src/schemas/query.js';
import { QlSyntaxError, formatQlError, parseNativeQuery, tryParseNativeQuery, type QlDiagnostic } from '../src/ql/index.js';

const DOCS = join(dirname(fileURLToPath(import.meta.url)), '..', 'docs', 'ql.md');
const BASE = "SEARCH docs TENANT 'acme'";

/** Parses `BASE + rest`. */
function q(rest = ''): HybridQuery {
  return parseNativeQuery(`${BASE} ${rest}`);
}

/** The diagnostic of a query that must fail. */
function diag(source: string): QlDiagnostic {
  try {
    parseNativeQuery(source);
  } catch (err) {
    expect(err).toBeInstanceOf(QlSyntaxError);
    return (err as QlSyntaxError).diagnostic;
  }
  throw new Error(`expected a syntax error for: ${source}`);
}

/** A tiny deterministic PRNG (mulberry32), so failures reproduce. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pick<T>(random: () => number, items: readonly T[]): T {
  const item = items[Math.floor(random() * items.length)];
  if (item === undefined) throw new Error('pick from empty list');
  return item;
}

describe('native QL: SEARCH and TENANT', () => {
  it('parses the minimal query into table and tenant only', () => {
    const out = parseNativeQuery("SEARCH docs TENANT 'acme'");
    expect(out).toEqual({ table: 'docs', tenant_id: 'acme' });
    expect(Object.keys(out).sort()).toEqual(['table', 'tenant_id']);
  });

  it('treats keywords case-insensitively', () => {
    expect(parseNativeQuery("search docs Tenant 'acme' limit 3")).toEqual({ table: 'docs', tenant_id: 'acme', top_k: 3 });
  });

  it('accepts double-quoted names with "" escapes', () => {
    expect(parseNativeQuery(`SEARCH "my ""odd"" table" TENANT 'a'`).table).toBe('my "odd" table');
  });

  it('keeps identifier case as written', () => {
    expect(parseNativeQuery("SEARCH Docs_2 TENANT 'a'").table).toBe('Docs_2');
  });

  it("unescapes '' inside strings and allows newlines in them", () => {
    expect(parseNativeQuery("SEARCH docs TENANT 'o''brien\nltd'").tenant_id).toBe("o'brien\nltd");
    expect(parseNativeQuery("SEARCH docs TENANT ''''").tenant_id).toBe("'");
  });

  it('allows an empty string literal (the engine validates tenant ids)', () => {
    expect(parseNativeQuery("SEARCH docs TENANT ''").tenant_id).toBe('');
  });

  it('does not reserve keywords: they work as names', () => {
    const out = parseNativeQuery("SEARCH limit TENANT 'a' MATCH 'x' IN match WHERE limit = 1 AND tenant = 'y' AND and = 2");
    expect(out).toEqual({ table: 'limit', tenant_id: 'a', text: 'x', text_field: 'match', scalar_eq: { limit: 1, tenant: 'y', and: 2 } });
  });

  it('allows whitespace, newlines, comments and a trailing semicolon anywhere', () => {
    const source = [
      '-- leading comment',
      '  SEARCH   -- the verb',
      '\tdocs\r\n TENANT',
      "'acme'--no space before the comment",
      '  LIMIT--x',
      '  5 ;  -- done',
      '',
    ].join('\n');
    expect(parseNativeQuery(source)).toEqual({ table: 'docs', tenant_id: 'acme', top_k: 5 });
  });

  it('does not treat -- inside a string as a comment', () => {
    expect(q("MATCH 'a -- b'").text).toBe('a -- b');
  });
});

describe('native QL: clauses', () => {
  it('EXPLAIN sets explain: true, and only when present', () => {
    expect(parseNativeQuery(`EXPLAIN ${BASE}`)).toEqual({ table: 'docs', tenant_id: 'acme', explain: true });
    expect('explain' in q()).toBe(false);
  });

  it('MATCH sets text, IN sets text_field', () => {
    expect(q("MATCH 'hello world'")).toEqual({ table: 'docs', tenant_id: 'acme', text: 'hello world' });
    expect(q("MATCH 'hello' IN title")).toMatchObject({ text: 'hello', text_field: 'title' });
    expect(q("MATCH 'hello' in \"Title X\"").text_field).toBe('Title X');
  });

  it('NEAR sets vector, IN sets vector_field', () => {
    expect(q('NEAR [0.1, -0.2, 3e-2, 1E+2, 0, -0.5e1]')).toEqual({
      table: 'docs',
      tenant_id: 'acme',
      vector: [0.1, -0.2, 0.03, 100, 0, -5],
    });
    expect(q('NEAR [1] IN embedding')).toMatchObject({ vector: [1], vector_field: 'embedding' });
  });

  it('WHERE sets scalar_eq with string, number and boolean values', () => {
    expect(q("WHERE category = 'news' AND year = 2024 AND published = true AND draft = FALSE AND score = -1.5e0").scalar_eq).toEqual({
      category: 'news',
      year: 2024,
      published: true,
      draft: false,
      score: -1.5,
    });
  });

  it('WHERE with one predicate and quoted field names', () => {
    expect(q(`WHERE "first name" = 'Ada'`).scalar_eq).toEqual({ 'first name': 'Ada' });
  });

  it('WHERE keeps a __proto__ field as an own property', () => {
    const eq = q("WHERE __proto__ = 'x' AND constructor = 1").scalar_eq ?? {};
    expect(Object.hasOwn(eq, '__proto__')).toBe(true);
    expect(JSON.parse(JSON.stringify(eq))).toEqual(JSON.parse('{"__proto__":"x","constructor":1}'));
    expect(Object.getPrototypeOf(eq)).toBe(Object.prototype);
  });

  it('GRAPH FROM sets graph_seed, DEPTH sets graph_depth', () => {
    expect(q("GRAPH FROM 'doc-1'")).toEqual({ table: 'docs', tenant_id: 'acme', graph_seed: 'doc-1' });
    expect(q("GRAPH FROM 'doc-1' DEPTH 3")).toMatchObject({ graph_seed: 'doc-1', graph_depth: 3 });
  });

  it('AS OF sets temporal_as_of', () => {
    expect(q('AS OF 42')).toEqual({ table: 'docs', tenant_id: 'acme', temporal_as_of: 42 });
    expect(q('as of 0').temporal_as_of).toBe(0);
  });

  it('FRESHNESS lowercases a word and passes a string through', () => {
    expect(q('FRESHNESS indexed').freshness).toBe('indexed');
    expect(q('FRESHNESS LATEST').freshness).toBe('latest');
    expect(q("FRESHNESS 'Whatever'").freshness).toBe('Whatever');
    expect(q('FRESHNESS soon').freshness).toBe('soon'); // the engine rejects it, not the parser
  });

  it('FUSE sets fusion, WEIGHTS sets fusion_weights', () => {
    expect(q('FUSE rrf')).toEqual({ table: 'docs', tenant_id: 'acme', fusion: 'rrf' });
    expect(q('FUSE RELATIVE_SCORE').fusion).toBe('relative_score');
    expect(q('FUSE relative_score WEIGHTS (lexical 0.7, VECTOR 0.3)')).toMatchObject({
      fusion: 'relative_score',
      fusion_weights: { lexical: 0.7, vector: 0.3 },
    });
    expect(q('FUSE relative_score WEIGHTS (relational 1, lexical 0, vector 2e-1)').fusion_weights).toEqual({
      relational: 1,
      lexical: 0,
      vector: 0.2,
    });
  });

  it('BUDGET sets candidate_budget, LIMIT sets top_k, CURSOR sets cursor', () => {
    expect(q("BUDGET 500 LIMIT 10 CURSOR 'abc=='")).toEqual({
      table: 'docs',
      tenant_id: 'acme',
      candidate_budget: 500,
      top_k: 10,
      cursor: 'abc==',
    });
  });

  it('RETURN sets return_fields; RETURN NONE is none; a quoted "none" is a column', () => {
    expect(q('RETURN title, "my field"')).toMatchObject({ return_fields: ['title', 'my field'] });
    expect(q('return none')).toMatchObject({ return_fields: [] });
    expect(q('RETURN "none", x')).toMatchObject({ return_fields: ['none', 'x'] });
    expect(() => q('RETURN')).toThrow(QlSyntaxError);
    expect(() => q('RETURN a,')).toThrow(QlSyntaxError);
    expect(() => q('RETURN NONE, a')).toThrow(QlSyntaxError);
  });

  it('passes out-of-range integers through for the engine to judge', () => {
    expect(q('LIMIT 0 AS OF -1 BUDGET 9007199254740991')).toMatchObject({ top_k: 0, temporal_as_of: -1, candidate_budget: 9007199254740991 });
  });

  it('parses every field at once, in any clause order', () => {
    const expected: HybridQuery = {
      table: 'docs',
      tenant_id: 'acme',
      explain: true,
      text: 'hello world',
      text_field: 'title',
      vector: [0.1, 0.2, 0.3],
      vector_field: 'embedding',
      scalar_eq: { category: 'news', year: 2024, published: true },
      graph_seed: 'doc-1',
      graph_depth: 2,
      temporal_as_of: 42,
      freshness: 'indexed',
      fusion: 'relative_score',
      fusion_weights: { lexical: 0.7, vector: 0.3 },
      candidate_budget: 500,
      top_k: 10,
      cursor: 'opaque',
    };
    const clauses = [
      "MATCH 'hello world' IN title",
      'NEAR [0.1, 0.2, 0.3] IN embedding',
      "WHERE category = 'news' AND year = 2024 AND published = true",
      "GRAPH FROM 'doc-1' DEPTH 2",
      'AS OF 42',
      'FRESHNESS indexed',
      'FUSE relative_score WEIGHTS (lexical 0.7, vector 0.3)',
      'BUDGET 500',
      'LIMIT 10',
      "CURSOR 'opaque'",
    ];
    expect(parseNativeQuery(`EXPLAIN ${BASE} ${clauses.join('\n')};`)).toEqual(expected);
    expect(parseNativeQuery(`EXPLAIN ${BASE} ${[...clauses].reverse().join(' ')}`)).toEqual(expected);
  });

  it('sets no undefined keys', () => {
    const out = q("MATCH 'x' NEAR [1] GRAPH FROM 's' FUSE rrf");
    expect(Object.values(out).every((v) => v !== undefined)).toBe(true);
    expect(Object.keys(out).sort()).toEqual(['fusion', 'graph_seed', 'table', 'tenant_id', 'text', 'vector']);
  });
});

describe('native QL: diagnostics', () => {
  it('empty input', () => {
    for (const source of ['', '   \n\t', '-- only a comment']) {
      const d = diag(source);
      expect(d.expected).toEqual(["'EXPLAIN'", "'SEARCH'"]);
      expect(d.found).toBe('end of input');
    }
    expect(diag('').message).toBe("line 1, column 1: expected 'EXPLAIN' or 'SEARCH', found end of input");
    expect(diag('\n\n  ')).toMatchObject({ line: 3, column: 3, offset: 4 });
  });

  it('missing TENANT, with the exact message format', () => {
    const d = diag('SEARCH docs');
    expect(d).toEqual({
      line: 1,
      column: 12,
      offset: 11,
      expected: ["'TENANT'"],
      found: 'end of input',
      message: "line 1, column 12: expected 'TENANT', found end of input",
    });
  });

  it('wrong first word, missing table, missing tenant value', () => {
    expect(diag('SELECT * FROM docs').message).toBe("line 1, column 1: expected 'EXPLAIN' or 'SEARCH', found 'SELECT'");
    expect(diag('EXPLAIN docs').message).toBe("line 1, column 9: expected 'SEARCH', found 'docs'");
    expect(diag("SEARCH TENANT 'a'").message).toBe("line 1, column 15: expected 'TENANT', found string 'a'");
    expect(diag('SEARCH docs TENANT acme').message).toBe("line 1, column 20: expected string, found 'acme'");
    expect(diag('SEARCH 42 TENANT').expected).toEqual(['identifier']);
  });

  it('suggests the right quotes', () => {
    expect(diag('SEARCH docs TENANT "acme"').message).toBe(
      `line 1, column 20: expected string, found identifier "acme" (strings use single quotes; double quotes make a name)`,
    );
    expect(diag("SEARCH 'docs' TENANT 'a'").message).toBe(
      "line 1, column 8: expected identifier, found string 'docs' (names are bare or double-quoted; single quotes make a string)",
    );
  });

  it('reports 1-based lines and columns across \\n, \\r\\n and \\r', () => {
    expect(diag("SEARCH docs\nTENANT 'a'\n  LIMIT x")).toMatchObject({ line: 3, column: 9, found: "'x'" });
    expect(diag("SEARCH docs\r\nTENANT 'a'\r\n  LIMIT x")).toMatchObject({ line: 3, column: 9 });
    expect(diag("SEARCH docs\rTENANT 'a'\r  LIMIT x")).toMatchObject({ line: 3, column: 9 });
    expect(diag("SEARCH docs TENANT 'a\nb' LIMIT x")).toMatchObject({ line: 2, column: 10 });
  });

  it('unterminated string', () => {
    const d = diag("SEARCH docs TENANT 'acme");
    expect(d).toMatchObject({ line: 1, column: 20, offset: 19, expected: ['string'], found: "unterminated string 'acme" });
    expect(d.message).toBe(
      "line 1, column 20: expected string, found unterminated string 'acme (no closing ' before end of input; write '' for a ' inside)",
    );
    expect(diag(`${BASE} MATCH 'it''s`).found).toBe("unterminated string 'it''s");
    expect(diag(`${BASE} MATCH '${'x'.repeat(100)}`).found).toBe(`unterminated string '${'x'.repeat(23)}…`);
  });

  it('unterminated and empty quoted identifiers', () => {
    expect(diag(`SEARCH "docs TENANT 'a'`)).toMatchObject({ column: 8, found: `unterminated quoted identifier "docs TENANT 'a'` });
    expect(diag(`SEARCH "" TENANT 'a'`)).toMatchObject({ column: 8, expected: ['identifier'], found: 'empty quoted identifier ""' });
  });

  it('bad numbers', () => {
    for (const bad of ['01', '1.', '.5', '-.5', '1e', '1e+', '10abc', '1.2.3', '0x1f', '1_000']) {
      const d = diag(`${BASE} NEAR [${bad}]`);
      expect(d.found, bad).toBe(`invalid number '${bad}'`);
      expect(d.column, bad).toBe(BASE.length + 8);
      expect(d.message, bad).toContain('numbers are written as in JSON');
    }
    // past the doubles is not a syntax error: it reads as JSON.parse reads it, and the
    // engine refuses it as it refuses the JSON query's (vector_not_finite; test/error-codes.test.ts)
    expect(q(`NEAR [1e999]`)).toMatchObject({ vector: [Infinity] });
    expect(q(`NEAR [-1e400]`)).toMatchObject({ vector: [-Infinity] });
  });

  it('unknown characters', () => {
    expect(diag(`${BASE} @`).found).toBe("unexpected character '@'");
    expect(diag(`${BASE} WHERE a = #1`).message).toBe(
      "line 1, column 37: expected string, number, 'TRUE' or 'FALSE', found unexpected character '#' (WHERE supports only = comparisons combined with AND)",
    );
    expect(diag('SEARCH docs\u0007').found).toBe('unexpected character U+0007');
    expect(diag('SEARCH dócs').found).toBe("unexpected character 'ó'");
    expect(diag('SEARCH 🦀').found).toBe("unexpected character '🦀'");
    expect(diag(`${BASE} - 1`).found).toBe("unexpected character '-'");
    expect(diag('SEARCH docs TENANT { }').column).toBe(20);
  });

  it('trailing garbage', () => {
    const d = diag(`${BASE} LIMIT 5 garbage`);
    expect(d.found).toBe("'garbage'");
    expect(d.expected).toEqual(["'MATCH'", "'NEAR'", "'WHERE'", "'GRAPH'", "'AS OF'", "'FRESHNESS'", "'FUSE'", "'BUDGET'", "'CURSOR'", "'RETURN'", "';'", 'end of input']);
    expect(diag(`${BASE};;`)).toMatchObject({ column: BASE.length + 2, expected: ['end of input'], found: "';'" });
    expect(diag(`${BASE}; LIMIT 5`)).toMatchObject({ expected: ['end of input'], found: "'LIMIT'" });
    expect(diag(`${BASE} 'extra'`).found).toBe("string 'extra'");
  });

  it('lists the optional continuations that were possible', () => {
    expect(diag(`${BASE} MATCH 'x' garbage`).expected.slice(0, 2)).toEqual(["'IN'", "'NEAR'"]);
    expect(diag(`${BASE} GRAPH FROM 's' garbage`).expected[0]).toBe("'DEPTH'");
    expect(diag(`${BASE} FUSE rrf garbage`).expected[0]).toBe("'WEIGHTS'");
    expect(diag(`${BASE} WHERE a = 1 garbage`).expected.slice(0, 2)).toEqual(["'AND'", "'MATCH'"]);
  });

  it('a repeated clause is an error naming it', () => {
    const repeats: Array<[string, string]> = [
      ["MATCH 'a' MATCH 'b'", 'MATCH'],
      ['NEAR [1] NEAR [2]', 'NEAR'],
      ['WHERE a = 1 WHERE b = 2', 'WHERE'],
      ["GRAPH FROM 'a' GRAPH FROM 'b'", 'GRAPH'],
      ['AS OF 1 AS OF 2', 'AS OF'],
      ['FRESHNESS latest FRESHNESS indexed', 'FRESHNESS'],
      ['FUSE rrf FUSE rrf', 'FUSE'],
      ['BUDGET 1 BUDGET 2', 'BUDGET'],
      ['LIMIT 1 LIMIT 2', 'LIMIT'],
      ["CURSOR 'a' CURSOR 'b'", 'CURSOR'],
    ];
    for (const [rest, name] of repeats) {
      const d = diag(`${BASE} ${rest}`);
      expect(d.message, rest).toContain(`duplicate ${name} clause`);
      expect(d.message, rest).toContain(`the first is at line 1, column ${BASE.length + 2}`);
      expect(d.expected, rest).not.toContain(`'${name}'`);
    }
    expect(diag(`${BASE} LIMIT 5\n  limit 10`)).toMatchObject({ line: 2, column: 3, found: "'limit'" });
  });

  it('WHERE accepts only = and AND', () => {
    for (const op of ['>', '<', '>=', '<=', '<>', '!=']) {
      const d = diag(`${BASE} WHERE year ${op} 2020`);
      expect(d.found, op).toBe(`'${op}'`);
      expect(d.expected, op).toEqual(["'='"]);
      expect(d.message, op).toContain('WHERE supports only = comparisons combined with AND');
    }
    const or = diag(`${BASE} WHERE a = 1 OR b = 2`);
    expect(or).toMatchObject({ found: "'OR'", column: BASE.length + 14 });
    expect(or.expected[0]).toBe("'AND'");
    expect(or.message).toContain('WHERE supports only = comparisons combined with AND');
    expect(diag(`${BASE} WHERE a IN (1, 2)`).message).toContain('only = comparisons');
    expect(diag(`${BASE} WHERE (a = 1)`).message).toContain('only = comparisons');
    expect(diag(`${BASE} WHERE a = 1 AND`).message).toContain('only = comparisons');
    expect(diag(`${BASE} WHERE a = null`).expected).toEqual(['string', 'number', "'TRUE'", "'FALSE'"]);
  });

  it('a field compared twice in WHERE is an error', () => {
    const d = diag(`${BASE} WHERE a = 1 AND b = 2 AND a = 3`);
    expect(d).toMatchObject({ column: BASE.length + 28, found: "'a'", expected: ['a field not compared yet'] });
    expect(d.message).toContain('duplicate field a');
  });

  it('a WHERE holds at most 1,024 comparisons', () => {
    const where = (n: number) => Array.from({ length: n }, (_, i) => `c${i} = ${i}`).join(' AND ');
    expect(Object.keys(q(`WHERE ${where(1024)}`).scalar_eq ?? {})).toHaveLength(1024);
    const d = diag(`${BASE} WHERE ${where(1025)}`);
    expect(d.found).toBe("'c1024'");
    expect(d.message).toContain('a WHERE holds at most 1024 comparisons');
  });

  // found by a fuzz review: the whole text was split into tokens before the first was parsed
  it('a statement is read no further than its first error, however long the rest', () => {
    const rest = '('.repeat(15 * 1024 * 1024);
    const d = diag(`${BASE} FUSE rrf WEIGHTS ${rest}`);
    expect(d).toMatchObject({ line: 1, column: BASE.length + 20, found: "'('" });
    // and the position of an error far into a long statement is still counted over every line before it
    const far = diag(`${BASE}\r\n${'-- comment\n'.repeat(100_000)}LIMIT x`);
    expect(far).toMatchObject({ line: 100_002, column: 7 });
  });

  it('LIMIT, AS OF, DEPTH and BUDGET need integers', () => {
    const cases: Array<[string, string]> = [
      ['LIMIT 2.5', 'LIMIT'],
      ['AS OF 1e3', 'AS OF'],
      ["GRAPH FROM 's' DEPTH 1.0", 'DEPTH'],
      ['BUDGET 5E2', 'BUDGET'],
    ];
    for (const [rest, clause] of cases) {
      const d = diag(`${BASE} ${rest}`);
      expect(d.expected, rest).toEqual(['integer']);
      expect(d.message, rest).toContain(`(${clause} takes a whole number)`);
    }
    expect(diag(`${BASE} LIMIT 2.5`).message).toBe(`line 1, column ${BASE.length + 8}: expected integer, found number 2.5 (LIMIT takes a whole number)`);
    expect(diag(`${BASE} LIMIT 9007199254740992`).message).toContain('LIMIT must be between -9007199254740991 and 9007199254740991');
    expect(diag(`${BASE} LIMIT ten`).found).toBe("'ten'");
    expect(diag(`${BASE} LIMIT`).found).toBe('end of input');
    expect(diag(`${BASE} AS 5`).expected).toEqual(["'OF'"]);
  });

  it('vectors need one or more comma-separated numbers', () => {
    expect(diag(`${BASE} NEAR []`)).toMatchObject({ expected: ['number'], found: "']'" });
    expect(diag(`${BASE} NEAR [1, ]`)).toMatchObject({ expected: ['number'], found: "']'" });
    expect(diag(`${BASE} NEAR [1 2]`)).toMatchObject({ expected: ["','", "']'"], found: 'number 2' });
    expect(diag(`${BASE} NEAR [1`)).toMatchObject({ expected: ["','", "']'"], found: 'end of input' });
    expect(diag(`${BASE} NEAR 1`)).toMatchObject({ expected: ["'['"], found: 'number 1' });
    expect(diag(`${BASE} NEAR ['a']`)).toMatchObject({ expected: ['number'] });
  });

  it('clause-specific syntax errors', () => {
    expect(diag(`${BASE} MATCH title`).expected).toEqual(['string']);
    expect(diag(`${BASE} MATCH 'x' IN`).expected).toEqual(['identifier']);
    expect(diag(`${BASE} GRAPH 'doc-1'`).expected).toEqual(["'FROM'"]);
    expect(diag(`${BASE} GRAPH FROM doc`).expected).toEqual(['string']);
    expect(diag(`${BASE} FRESHNESS`).expected).toEqual(['identifier', 'string']);
    expect(diag(`${BASE} FUSE 1`).expected).toEqual(['identifier', 'string']);
    expect(diag(`${BASE} CURSOR 12`).expected).toEqual(['string']);
  });

  it('fusion weights', () => {
    expect(diag(`${BASE} FUSE rrf WEIGHTS lexical 1`).expected).toEqual(["'('"]);
    expect(diag(`${BASE} FUSE rrf WEIGHTS ()`).expected).toEqual(["'lexical'", "'vector'", "'relational'"]);
    expect(diag(`${BASE} FUSE rrf WEIGHTS (text 1)`)).toMatchObject({ found: "'text'", expected: ["'lexical'", "'vector'", "'relational'"] });
    const dup = diag(`${BASE} FUSE rrf WEIGHTS (lexical 1, vector 2, LEXICAL 3)`);
    expect(dup).toMatchObject({ found: "'LEXICAL'", expected: ["'relational'"] });
    expect(dup.message).toContain('duplicate weight lexical');
    expect(diag(`${BASE} FUSE rrf WEIGHTS (lexical)`).expected).toEqual(['number']);
    expect(diag(`${BASE} FUSE rrf WEIGHTS (lexical 1`).expected).toEqual(["','", "')'"]);
    expect(diag(`${BASE} FUSE rrf WEIGHTS (lexical = 1)`).expected).toEqual(['number']);
    // Once all three weights are given, only the closing parenthesis can follow.
    expect(diag(`${BASE} FUSE rrf WEIGHTS (lexical 1, vector 2, relational 3, lexical 4)`)).toMatchObject({
      expected: ["')'"],
      found: "','",
      column: BASE.length + 53,
    });
  });

  it('QlSyntaxError is an Error with the diagnostic message', () => {
    try {
      parseNativeQuery('SEARCH docs');
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(Error);
      expect(err).toBeInstanceOf(QlSyntaxError);
      expect((err as QlSyntaxError).name).toBe('QlSyntaxError');
      expect((err as QlSyntaxError).message).toBe((err as QlSyntaxError).diagnostic.message);
    }
  });

  it('formatQlError builds the 400 body', () => {
    try {
      parseNativeQuery('SEARCH docs\nTENANT');
      expect.unreachable();
    } catch (err) {
      expect(formatQlError(err as QlSyntaxError)).toEqual({
        code: 'ql_syntax_error',
        error: 'line 2, column 7: expected string, found end of input',
        line: 2,
        column: 7,
        expected: ['string'],
      });
    }
  });

  it('tryParseNativeQuery returns diagnostics as data', () => {
    expect(tryParseNativeQuery(BASE)).toEqual({ ok: true, query: { table: 'docs', tenant_id: 'acme' } });
    const failed = tryParseNativeQuery('SEARCH');
    expect(failed.ok).toBe(false);
    if (!failed.ok) expect(failed.diagnostic).toMatchObject({ line: 1, column: 7, expected: ['identifier'] });
  });

  it('a non-string input fails with a diagnostic, not a TypeError', () => {
    for (const bad of [undefined, null, 42, {}, ['SEARCH']]) {
      expect(() => parseNativeQuery(bad as unknown as string)).toThrow(QlSyntaxError);
    }
  });
});

describe('native QL: docs/ql.md', () => {
  const markdown = readFileSync(DOCS, 'utf8');
  const blocks = (lang: string): string[] =>
    [...markdown.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, 'gm'))].map((m) => m[1] ?? '');

  it('has sql examples, and every one of them parses', () => {
    const examples = blocks('sql');
    expect(examples.length).toBeGreaterThanOrEqual(20);
    for (const example of examples) {
      expect(() => parseNativeQuery(example), example).not.toThrow();
    }
  });

  it('has an sql example using every HybridQuery field', () => {
    const fields = new Set(blocks('sql').flatMap((example) => Object.keys(parseNativeQuery(example))));
    // every field of the one definition (src/schemas/query.ts, checked against the binding's type)
    expect([...fields].sort()).toEqual([...HYBRID_QUERY_FIELDS].sort());
  });

  it('every documented error example fails with the documented message', () => {
    // A failing example is query lines followed by `-- line L, column C: ...`,
    // whose wrapped continuation lines start with `--   `.
    let checked = 0;
    for (const block of blocks('text')) {
      const lines = block.split('\n');
      let query: string[] = [];
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i] ?? '';
        if (!line.startsWith('-- line ')) {
          if (line.trim() === '') query = [];
          else query.push(line);
          continue;
        }
        let message = line.slice(3);
        while ((lines[i + 1] ?? '').startsWith('--   ')) message += ` ${(lines[++i] ?? '').slice(5)}`;
        expect(diag(query.join('\n')).message, query.join('\n')).toBe(message);
        query = [];
        checked++;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(9);
  });
});

describe('native QL: properties', () => {
  /** Renders a query back to text, choosing keyword case and clause order at random. */
  function render(query: HybridQuery, random: () => number): string {
    const kw = (word: string): string => (random() < 0.5 ? word : word.toLowerCase());
    const str = (s: string): string => `'${s.replaceAll("'", "''")}'`;
    const name = (s: string): string => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s) && random() < 0.7 ? s : `"${s.replaceAll('"', '""')}"`);
    const clauses: string[] = [];
    if (query.text != null) clauses.push(`${kw('MATCH')} ${str(query.text)}${query.text_field != null ? ` ${kw('IN')} ${name(query.text_field)}` : ''}`);
    if (query.vector != null) clauses.push(`${kw('NEAR')} [${Array.from(query.vector, String).join(', ')}]${query.vector_field != null ? ` IN ${name(query.vector_field)}` : ''}`);
    if (query.scalar_eq) {
      const preds = Object.entries(query.scalar_eq).map(([k, v]) => `${name(k)} = ${typeof v === 'string' ? str(v) : String(v)}`);
      clauses.push(`${kw('WHERE')} ${preds.join(` ${kw('AND')} `)}`);
    }
    if (query.graph_seed != null) clauses.push(`GRAPH FROM ${str(query.graph_seed)}${query.graph_depth !== undefined ? ` DEPTH ${query.graph_depth}` : ''}`);
    if (query.temporal_as_of != null) clauses.push(`${kw('AS')} ${kw('OF')} ${query.temporal_as_of}`);
    if (query.freshness !== undefined) clauses.push(`FRESHNESS ${str(query.freshness)}`);
    if (query.fusion !== undefined) {
      const weights = Object.entries(query.fusion_weights ?? {}).map(([k, v]) => `${k} ${v}`);
      clauses.push(`FUSE ${query.fusion}${weights.length > 0 ? ` WEIGHTS (${weights.join(', ')})` : ''}`);
    }
    if (query.candidate_budget !== undefined) clauses.push(`BUDGET ${query.candidate_budget}`);
    if (query.top_k !== undefined) clauses.push(`${kw('LIMIT')} ${query.top_k}`);
    if (query.cursor != null) clauses.push(`CURSOR ${str(query.cursor)}`);
    clauses.sort(() => random() - 0.5);
    const head = `${query.explain ? 'EXPLAIN ' : ''}SEARCH ${name(query.table ?? '')} TENANT ${str(query.tenant_id ?? '')}`;
    return [head, ...clauses].join(random() < 0.5 ? ' ' : '\n  -- comment\n  ');
  }

  /** A random query; every optional field appears with probability 1/2. */
  function randomQuery(random: () => number): HybridQuery {
    const text = (): string => pick(random, ['hello', "it's", 'x -- y', 'multi\nline', '', 'ünïcødé 🦀', '"quoted"']);
    const ident = (): string => pick(random, ['title', 'body', 'limit', 'first name', 'a"b', 'x_1', 'AND']);
    const num = (): number => pick(random, [0, 1, -1, 0.5, -2.25, 1e-7, 123456789, 1234.5678]);
    const int = (): number => pick(random, [0, 1, 2, 10, 500, -3]);
    const maybe = (): boolean => random() < 0.5;
    const out: HybridQuery = { table: pick(random, ['docs', 'Docs', 'my table']), tenant_id: text() };
    if (maybe()) out.explain = true;
    if (maybe()) out.text = text();
    if (out.text !== undefined && maybe()) out.text_field = ident();
    if (maybe()) out.vector = Array.from({ length: 1 + Math.floor(random() * 4) }, num);
    if (out.vector !== undefined && maybe()) out.vector_field = ident();
    if (maybe()) {
      const eq: Record<string, unknown> = {};
      for (let i = 0; i < 1 + Math.floor(random() * 3); i++) eq[ident()] = pick(random, [text(), num(), true, false]);
      out.scalar_eq = eq;
    }
    if (maybe()) out.graph_seed = text();
    if (out.graph_seed !== undefined && maybe()) out.graph_depth = int();
    if (maybe()) out.temporal_as_of = int();
    if (maybe()) out.freshness = pick(random, ['latest', 'indexed']);
    if (maybe()) out.fusion = pick(random, ['rrf', 'relative_score']);
    if (out.fusion !== undefined && maybe()) out.fusion_weights = { lexical: num(), relational: Math.abs(num()) };
    if (maybe()) out.candidate_budget = int();
    if (maybe()) out.top_k = int();
    if (maybe()) out.cursor = text();
    return out;
  }

  it('rendering any query and parsing it back gives the same query', () => {
    const random = rng(7);
    for (let i = 0; i < 1000; i++) {
      const query = randomQuery(random);
      const source = render(query, random);
      expect(parseNativeQuery(source), source).toStrictEqual(query);
    }
  });

  it('fuzz: any string either parses or throws QlSyntaxError with a sane position', () => {
    const random = rng(2024);
    const pieces = [
      'SEARCH', 'search', 'EXPLAIN', 'docs', 'TENANT', "'acme'", 'MATCH', 'NEAR', 'WHERE', 'AND', 'OR', 'GRAPH', 'FROM',
      'DEPTH', 'AS', 'OF', 'FRESHNESS', 'FUSE', 'WEIGHTS', 'lexical', 'vector', 'relational', 'BUDGET', 'LIMIT', 'CURSOR',
      'RETURN', 'IN', 'true', 'false', '=', '>', '<=', '!=', ',', '[', ']', '(', ')', ';', '1', '-2', '0.5', '1e3', '01', '1e999',
      '.5', "'", '"', '""', "''", '"x"', '--', '\n', '\r\n', '\t', ' ', '  ', '__proto__', '-', '@', '\u0000', '\ud800', '🦀',
    ];
    const head = "SEARCH docs TENANT 'acme' ";
    let parsed = 0;
    let failed = 0;
    for (let i = 0; i < 5000; i++) {
      const parts: string[] = [];
      const length = Math.floor(random() * 14);
      for (let j = 0; j < length; j++) {
        const r = random();
        if (r < 0.7) parts.push(pick(random, pieces));
        else if (r < 0.85) parts.push(String.fromCharCode(Math.floor(random() * 128)));
        else parts.push(String.fromCharCode(Math.floor(random() * 0x10000)));
      }
      const joiner = random() < 0.8 ? ' ' : '';
      const source = (random() < 0.5 ? head : '') + parts.join(joiner);
      try {
        const query = parseNativeQuery(source);
        expect(JSON.parse(JSON.stringify(query))).toBeTypeOf('object');
        expect(Object.values(query).every((v) => v !== undefined)).toBe(true);
        parsed++;
      } catch (err) {
        if (!(err instanceof QlSyntaxError)) throw new Error(`non-QlSyntaxError for ${JSON.stringify(source)}: ${String(err)}`);
        const d = err.diagnostic;
        expect(d.offset).toBeGreaterThanOrEqual(0);
        expect(d.offset).toBeLessThanOrEqual(source.length);
        expect(d.line).toBeGreaterThanOrEqual(1);
        expect(d.column).toBeGreaterThanOrEqual(1);
        expect(d.expected.length).toBeGreaterThan(0);
        expect(d.message.startsWith(`line ${d.line}, column ${d.column}: expected `)).toBe(true);
        failed++;
      }
    }
    // Both outcomes must actually be exercised for the fuzz to mean anything.
    expect(parsed).toBeGreaterThan(50);
    expect(failed).toBeGreaterThan(1000);
  });
});

describe('native QL: vector literals', () => {
  const near = (list: string): number[] => Array.from(parseNativeQuery(`SEARCH docs TENANT 't' NEAR ${list}`).vector ?? []);

  it('reads a 4,096-number vector to the same values JSON.parse gives', () => {
    let seed = 7;
    const random = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return (seed / 2 ** 31) * 2 - 1;
    };
    const values = Array.from({ length: 4096 }, (_, i) => (i % 7 === 0 ? Math.round(random() * 1000) : random() * 10 ** ((i % 9) - 4)));
    const list = `[${values.map((v, i) => (i % 5 === 0 ? v.toExponential() : String(v))).join(', ')}]`;
    expect(near(list)).toEqual(JSON.parse(list));
  });

  it('agrees with Number() on every form the grammar allows, fast path or not', () => {
    const forms = ['0', '-0', '7', '-12', '0.5', '-0.000123', '1e3', '1E-3', '2.5e+10', '123456789012345', '1234567890123456789', '0.1234567890123456789', '1e22', '1e23', '4.9e-324', '1.7976931348623157e308', '9007199254740993'];
    for (const form of forms) expect(near(`[${form}]`)).toEqual([Number(form)]);
    expect(Object.is(near('[-0]')[0], -0)).toBe(true);
  });

  it('keeps the token path, and its diagnostics, for anything else in a list', () => {
    expect(near('[1, 2 -- a comment\n, 3]')).toEqual([1, 2, 3]);
    expect(() => near('[1, 10abc]')).toThrow(/invalid number '10abc'/);
    expect(near('[1, 1e999, 1e400000000000000000]')).toEqual([1, Infinity, Infinity]);
    expect(() => near("[1, 'x']")).toThrow(QlSyntaxError);
    expect(() => near('[1, 2')).toThrow(QlSyntaxError);
  });
});
