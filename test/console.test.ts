// The web console (issue 15 items 3 and 4): its pure parts against the
// server's own parser, its files over HTTP from the engine and the gateway
// (no token needed for the page, one needed for the API), and the page itself
// in a real browser: Debian's chromium driven by playwright-core, against a
// real engine and a real gateway. The browser part is skipped, saying so, only
// when no chromium executable can be found (scripts/ready installs one).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import path from 'node:path';
import type { Static } from 'typebox';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { FastifyInstance } from 'fastify';
import { buildGateway, gatewayConfig } from '../src/gateway/index.js';
import { parseNativeQuery } from '../src/ql/index.js';
import { CONSOLE_CSP } from '../src/routes/console.js';
import type { QueryResponse } from '../src/schemas/query.js';
import type { BranchesResponse, MetricsResponse } from '../src/schemas/ops.js';
import type { RecordOutput } from '../src/schemas/common.js';
import type * as View from '../src/console/types.js';
import { buildQuery, parseVector, quoteName, quoteString, typedValue } from '../src/console/ql.js';
import { buckets, parsePrometheus, quantileBetween } from '../src/console/prom.js';
import { findHistory, type Seen } from '../src/console/versions.js';
import { ROOT, startTestServer, type TestServer } from './helpers.js';

// tsc checks that what the routes answer fits the console's view of it (src/console/types.ts),
// in the type arguments of this alias; nothing uses it (the leading _ says so to the linter)
type Fits<V, Served extends V> = Served;
type _ConsoleViewChecked = [
  Fits<View.QueryResponse, Static<typeof QueryResponse>>,
  Fits<View.BranchesResponse, Static<typeof BranchesResponse>>,
  Fits<View.PublicMetrics, Static<typeof MetricsResponse>>,
  Fits<View.RecordOutput, Static<typeof RecordOutput>>,
];

// The browser's globals, for the callbacks that run in the page (page.evaluate,
// waitForFunction): this file is type-checked with Node's types, not the DOM's.
declare const window: Record<string, unknown>;
declare const document: {
  querySelector(selector: string): { textContent: string | null } | null;
  querySelectorAll(selector: string): { length: number };
};
declare const sessionStorage: { getItem(key: string): string | null };

/** A chromium executable: $BRAID_BROWSER, else chromium / chrome on PATH or in /usr/bin. */
function findBrowser(): string | undefined {
  const named = process.env.BRAID_BROWSER;
  if (named) return existsSync(named) ? named : undefined;
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean), '/usr/bin'];
  for (const name of ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable']) {
    for (const dir of dirs) {
      const candidate = path.join(dir, name);
      if (existsSync(candidate)) return candidate;
    }
  }
  return undefined;
}

const BROWSER = findBrowser();
if (!BROWSER) {
  console.warn(
    'console.test.ts: SKIPPING the browser test of the web console: no chromium executable found ' +
      '(install Debian\'s chromium, e.g. `apt-get install chromium`, or set BRAID_BROWSER to a Chromium or Chrome binary)',
  );
}

const TOKEN = 'console-token';
const HOSTILE = '<img src=x onerror=window.__xss=1><b>bold</b>';
// the docs' screenshot is refreshed with BRAID_UPDATE_SCREENSHOT=1; other
// runs take it in memory only, so a test run leaves no file behind
const SCREENSHOT = process.env.BRAID_UPDATE_SCREENSHOT === '1' ? path.join(ROOT, 'docs', 'images', 'console.png') : undefined;

describe('console: the query form as native QL', () => {
  it('builds statements the server parses into the query the form describes', () => {
    const ql = buildQuery({
      table: 'articles',
      tenant: "o'brien",
      text: "it's solar",
      textField: 'title',
      vector: [1, 0, -0.5, 1e-7],
      vectorField: 'embedding',
      where: [{ column: 'topic', value: 'energy' }, { column: 'year', value: 2024 }, { column: 'live', value: true }],
      graphSeed: 'a1',
      graphDepth: 3,
      asOf: 7,
      freshness: 'indexed',
      fusion: 'relative_score',
      weights: { lexical: 0.7, vector: 0.3 },
      budget: 50,
      limit: 5,
    });
    expect(parseNativeQuery(ql)).toEqual({
      table: 'articles',
      tenant_id: "o'brien",
      text: "it's solar",
      text_field: 'title',
      vector: [1, 0, -0.5, 1e-7],
      vector_field: 'embedding',
      scalar_eq: { topic: 'energy', year: 2024, live: true },
      graph_seed: 'a1',
      graph_depth: 3,
      temporal_as_of: 7,
      freshness: 'indexed',
      fusion: 'relative_score',
      fusion_weights: { lexical: 0.7, vector: 0.3 },
      candidate_budget: 50,
      top_k: 5,
    });
    expect(parseNativeQuery(buildQuery({ table: 'docs', tenant: 't' }))).toEqual({ table: 'docs', tenant_id: 't' });
  });

  it('quotes names and strings the grammar way, so no input changes the statement', () => {
    expect(quoteString("a'b")).toBe("'a''b'");
    expect(quoteName('plain_word1')).toBe('plain_word1');
    expect(quoteName('has space "q"')).toBe('"has space ""q"""');
    const sneaky = "x' LIMIT 1000 --";
    const q = parseNativeQuery(buildQuery({ table: 'docs', tenant: 't', text: sneaky, where: [{ column: 'odd "col"', value: sneaky }] }));
    expect(q).toEqual({ table: 'docs', tenant_id: 't', text: sneaky, scalar_eq: { 'odd "col"': sneaky } });
    expect(parseVector('[0.1, 0.2 0.3]')).toEqual([0.1, 0.2, 0.3]);
    expect(parseVector('  ')).toBeUndefined();
    expect(() => parseVector('1, x')).toThrow(/not a number/);
    expect(typedValue('number', '2024')).toBe(2024);
    expect(typedValue('bool', 'TRUE')).toBe(true);
    expect(typedValue('string', ' 2024 ')).toBe(' 2024 ');
    expect(() => typedValue('number', 'abc')).toThrow(/not a number/);
  });
});

describe('console: metrics and versions helpers', () => {
  it('computes a latency quantile from two scrapes of a histogram', () => {
    const scrape = (a: number, b: number, inf: number) =>
      parsePrometheus([
        '# TYPE braid_http_request_duration_seconds histogram',
        `braid_http_request_duration_seconds_bucket{le="0.005",method="GET",route="/v1/ready",status="200"} ${a}`,
        `braid_http_request_duration_seconds_bucket{le="0.01",method="GET",route="/v1/ready",status="200"} ${b}`,
        `braid_http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/v1/ready",status="200"} ${inf}`,
      ].join('\n'));
    const before = buckets(scrape(5, 5, 5).get('braid_http_request_duration_seconds_bucket'));
    const after = buckets(scrape(15, 25, 25).get('braid_http_request_duration_seconds_bucket'));
    expect(quantileBetween(before, after, 0.5)).toBeCloseTo(0.005, 9);
    expect(quantileBetween(before, after, 0.99)).toBeCloseTo(0.005 + 0.005 * (9.8 / 10), 9);
    expect(quantileBetween(after, after, 0.5)).toBeUndefined();
  });

  it('finds every version of a record and the epoch it became visible at by bisection', async () => {
    // writes at epochs 3 (v1), 10 (v2), 11 (v3), 40 (v4: a delete), 50 (v5); history kept from epoch 2
    const writes: Array<[number, Seen]> = [
      [3, { kind: 'version', version_id: 1, fields: { n: 1 } }],
      [10, { kind: 'version', version_id: 2, fields: { n: 2 } }],
      [11, { kind: 'version', version_id: 3, fields: { n: 3 } }],
      [40, { kind: 'absent' }],
      [50, { kind: 'version', version_id: 5, fields: { n: 5 } }],
    ];
    const at = (e: number): Seen => (e < 2 ? { kind: 'horizon' } : [...writes].reverse().find(([w]) => w <= e)?.[1] ?? { kind: 'absent' });
    let requests = 0;
    const history = await findHistory(1000, async (epochs) => {
      requests += 1;
      return new Map(epochs.map((e) => [e, at(e)]));
    });
    expect(history.complete).toBe(true);
    expect(history.spans.map((s) => [s.from, s.seen.kind === 'version' ? s.seen.version_id : s.seen.kind, s.exact])).toEqual([
      [1, 'horizon', true],
      [2, 'absent', true],
      [3, 1, true],
      [10, 2, true],
      [11, 3, true],
      [40, 'absent', true],
      [50, 5, true],
    ]);
    // one request per bisection round, not one per epoch
    expect(requests).toBeLessThanOrEqual(12);
    expect(history.probes).toBeLessThan(200);
  });

  it('finds a record that was deleted again, from the evenly spaced first reads', async () => {
    const at = (e: number): Seen => (e >= 300 && e < 420 ? { kind: 'version', version_id: 1, fields: {} } : { kind: 'absent' });
    const history = await findHistory(5000, async (epochs) => new Map(epochs.map((e) => [e, at(e)])));
    expect(history.spans.map((s) => [s.from, s.seen.kind])).toEqual([[1, 'absent'], [300, 'version'], [420, 'absent']]);
  });
});

/** The status of a GET of `rawPath` sent as is (fetch would resolve its dot segments first). */
function rawStatus(base: string, rawPath: string, headers: Record<string, string> = {}): Promise<number> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ hostname, port, path: rawPath, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('console files over HTTP', () => {
  let open: TestServer;
  let locked: TestServer;
  let gateway: FastifyInstance;
  let gatewayUrl: string;

  beforeAll(async () => {
    open = await startTestServer();
    locked = await startTestServer({ config: { authTokens: ['engine-secret'] } });
    gateway = await buildGateway({ config: gatewayConfig({ engineUrl: open.url, tokens: [`${TOKEN}:read`], rateLimitMax: 2, rateWindowMs: 60_000 }) });
    gatewayUrl = await gateway.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    await gateway?.close();
    await open?.destroy();
    await locked?.destroy();
  });

  it('serves the page and every file it references, with a strict CSP, from the engine', async () => {
    const redirect = await fetch(`${open.url}/console`, { redirect: 'manual' });
    expect(redirect.status).toBe(302);
    expect(redirect.headers.get('location')).toBe('/console/');
    const page = await fetch(`${open.url}/console/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    const html = await page.text();
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!).filter((r) => !r.startsWith('data:'));
    expect(refs.sort()).toEqual(['console.css', 'main.js']);
    for (const ref of refs) {
      const res = await fetch(`${open.url}/console/${ref}`);
      expect(res.status, ref).toBe(200);
      expect(res.headers.get('content-type'), ref).toMatch(ref.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
    }
    // the module graph: every import of every module is served
    const main = await (await fetch(`${open.url}/console/main.js`)).text();
    for (const [, file] of main.matchAll(/from '\.\/([\w-]+\.js)'/g)) {
      expect((await fetch(`${open.url}/console/${file}`)).status, file).toBe(200);
    }
    const missing = await fetch(`${open.url}/console/nope.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { code: string }).code).toBe('route_not_found');
    // a percent-escape in a path is refused before any route (docs/api.md, "Request targets")
    expect((await fetch(`${open.url}/console/..%2Fpackage.json`)).status).toBe(400);
    expect((await fetch(`${open.url}/console/../package.json`)).status).toBe(404);
    // not part of the API document
    const doc = (await open.get('/v1/openapi.json')).body as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/console'))).toEqual([]);
  });

  it('needs no token for the page where the API needs one', async () => {
    expect((await fetch(`${locked.url}/console/`)).status).toBe(200);
    expect((await fetch(`${locked.url}/console/main.js`)).status).toBe(200);
    expect((await locked.get('/v1/branches')).status).toBe(401);
    expect((await locked.get('/v1/branches', { authorization: 'Bearer engine-secret' })).status).toBe(200);
    // only the console's routes go without a token, not every path that starts like them
    for (const raw of ['/console/../v1/branches', '/console/a/b', '/consolex']) {
      expect(await rawStatus(locked.url, raw), raw).toBe(401);
    }
    // and one with a percent-escape is no path at all, token or not
    expect(await rawStatus(locked.url, '/console/%2e%2e/v1/branches')).toBe(400);
  });

  it('is served by the gateway itself, without a token and outside the rate limit', async () => {
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${gatewayUrl}/console/`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
    }
    expect((await fetch(`${gatewayUrl}/console/main.js`)).status).toBe(200);
    const api = await fetch(`${gatewayUrl}/v1/branches`);
    expect(api.status).toBe(401);
    // a path that only looks like the console's is proxied, so it needs a token like any other
    for (const raw of ['/console/../v1/branches', '/console/a/b', '/console/../metrics']) {
      expect(await rawStatus(gatewayUrl, raw), raw).toBe(401);
    }
    const ok = await fetch(`${gatewayUrl}/v1/branches`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(ok.status).toBe(200);
    // the gateway's metrics name the console's requests with one bounded label
    const metrics = await (await fetch(`${gatewayUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    expect(metrics).toMatch(/braid_gateway_http_requests_total\{method="GET",route="\/console",status="200"\} 5/);
  });
});

describe.skipIf(!BROWSER)('console in a real browser (chromium)', () => {
  let server: TestServer;
  let gateway: FastifyInstance;
  let gatewayUrl: string;
  let browser: Browser;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    server = await startTestServer();
    const put = await server.post('/v1/records/put-batch', {
      records: [
        { table: 'articles', tenant_id: 'acme', id: 'a1', fields: { title: 'Solar panels on every roof', topic: 'energy', year: 2024, embedding: [0.9, 0.1, 0], related: ['a2'] } },
        { table: 'articles', tenant_id: 'acme', id: 'a2', fields: { title: 'Wind and solar hybrids', topic: 'energy', year: 2023, embedding: [0.8, 0.2, 0], related: [] } },
        { table: 'articles', tenant_id: 'acme', id: 'a3', fields: { title: 'Sourdough at home', topic: 'food', year: 2024, embedding: [0, 1, 0], related: ['a1'] } },
        { table: 'articles', tenant_id: 'acme', id: 'x1', fields: { title: `${HOSTILE} solar`, topic: HOSTILE, year: 2022, embedding: [0.7, 0.3, 0], related: [] } },
        { table: 'articles', tenant_id: 'globex', id: 'g1', fields: { title: 'Solar for another tenant', topic: 'energy', year: 2024, embedding: [1, 0, 0], related: [] } },
      ],
    });
    expect(put.status).toBe(200);
    // two more versions of a1, at epochs 2 and 3
    for (const year of [2025, 2026]) {
      const res = await server.post('/v1/records/put', { table: 'articles', tenant_id: 'acme', id: 'a1', fields: { title: 'Solar panels on every roof', topic: 'energy', year, embedding: [0.9, 0.1, 0], related: ['a2'] } });
      expect(res.status).toBe(200);
    }
    gateway = await buildGateway({ config: gatewayConfig({ engineUrl: server.url, tokens: [`${TOKEN}:read`] }) });
    gatewayUrl = await gateway.listen({ host: '127.0.0.1', port: 0 });
    browser = await chromium.launch({ executablePath: BROWSER });
  });

  afterAll(async () => {
    await browser?.close();
    await gateway?.close();
    await server?.destroy();
  });

  async function openConsole(base: string): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(`${base}/console`);
    return page;
  }

  async function setTenant(page: Page, tenant: string): Promise<void> {
    await page.fill('#tenant', tenant);
    await page.press('#tenant', 'Tab');
  }

  /** The page shows the hostile value as its characters: no element made from it, nothing run. */
  async function expectInert(page: Page): Promise<void> {
    expect(await page.locator('b').count()).toBe(0);
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.evaluate(() => window.__xss)).toBeUndefined();
  }

  it('lists the catalog, runs a hybrid query, draws the explain, shows versions and metrics', async () => {
    const page = await openConsole(server.url);
    expect(new URL(page.url()).pathname).toBe('/console/');

    // catalog: the branch, the table with its columns; the tenant's record count once a tenant is typed
    await page.waitForSelector('#tables article[data-table="articles"]');
    expect(await page.locator('#branches tbody tr').count()).toBe(1);
    expect(await page.locator('#branches tbody tr').first().innerText()).toMatch(/default\s+main\s+active\s+3/);
    const columns = await page.locator('#tables article[data-table="articles"] tbody tr td:first-child').allInnerTexts();
    expect(columns.sort()).toEqual(['embedding', 'related', 'title', 'topic', 'year']);
    await setTenant(page, 'acme');
    await page.waitForFunction(() => document.querySelector('#tables article[data-table="articles"] .count')?.textContent === '4 records');
    expect(await page.locator('#overview').innerText()).toMatch(/5\s+records/i);

    // a hybrid query from the form: text and vector
    await page.fill('#q-text', 'solar');
    await page.fill('#q-vector', '1, 0, 0');
    expect(await page.locator('#ql-preview').innerText()).toBe("SEARCH articles TENANT 'acme'\nMATCH 'solar'\nNEAR [1, 0, 0]\nLIMIT 10");
    await page.click('#q-run');
    await page.waitForSelector('#results tbody tr');
    const ids = await page.locator('#results tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-record-id')));
    expect(ids.sort()).toEqual(['a1', 'a2', 'a3', 'x1']);
    const first = page.locator('#results tbody tr').first();
    expect(Number(await first.locator('td').nth(3).innerText())).toBeGreaterThan(0);
    expect(Number(await first.locator('td').nth(4).innerText())).toBeGreaterThan(0); // lexical
    expect(Number(await first.locator('td').nth(5).innerText())).toBeGreaterThan(0); // vector

    // the record whose fields hold HTML is shown as text
    const hostile = page.locator('#results tbody tr[data-record-id="x1"]');
    expect(await hostile.innerText()).toContain(`title ${HOSTILE} solar`);
    expect(await hostile.innerText()).toContain(`topic ${HOSTILE}`);
    await expectInert(page);

    // the explain as bars: every phase and path, some of them wide
    const widths = async (selector: string) =>
      page.locator(selector).evaluateAll((bars) => bars.map((b) => b.getBoundingClientRect().width));
    expect((await widths('#explain .bar.phase')).length).toBeGreaterThanOrEqual(4);
    expect(Math.max(...(await widths('#explain .bar.phase')))).toBeGreaterThan(0);
    expect(Math.max(...(await widths('#explain .bar.open')))).toBeGreaterThan(0);
    // three records match 'solar' in the text index, all four are vector candidates
    const candidateRows = (await page.locator('#explain .bar-row:has(.bar.candidates)').allInnerTexts()).map((r) => r.trim().replace(/\s+/g, ' '));
    expect(candidateRows).toContain('text 3');
    expect(candidateRows.some((r) => /^vector_\w+ 4$/.test(r))).toBe(true);
    expect(Math.max(...(await widths('#explain .bar.candidates')))).toBeGreaterThan(0);
    expect(await page.locator('#explain .facts').innerText()).toMatch(/fusion\s+rrf/);

    // native QL: the form's statement carries over; a filter narrows the results; a syntax error is shown
    await page.click('#tab-ql');
    expect(await page.inputValue('#ql-text')).toContain("MATCH 'solar'");
    await page.fill('#ql-text', "SEARCH articles TENANT 'acme' WHERE topic = 'food' LIMIT 5");
    await page.click('#ql-run');
    await page.waitForFunction(() => document.querySelectorAll('#results tbody tr').length === 1);
    expect(await page.locator('#results tbody tr').first().getAttribute('data-record-id')).toBe('a3');
    await page.fill('#ql-text', 'SEARCH articles TENANT');
    await page.click('#ql-run');
    await page.waitForFunction(() => /ql_syntax_error/.test(document.querySelector('#query-error')?.textContent ?? ''));

    // back to the form's results, then a record and its versions from a result's link
    await page.click('#tab-form');
    await page.click('#q-run');
    await page.waitForSelector('#results tbody tr[data-record-id="a1"] button.link');
    await page.click('#results tbody tr[data-record-id="a1"] button.link');
    await page.waitForFunction(() => document.querySelectorAll('#versions li.version[data-version]').length === 3);
    const versions = await page.locator('#versions li.version').allInnerTexts();
    expect(versions[0]).toMatch(/version 3 visible from epoch 3 · changed: year/);
    expect(versions[1]).toMatch(/version 2 visible from epoch 2 · changed: year/);
    expect(versions[2]).toMatch(/version 1 visible from epoch 1/);
    expect(await page.locator('#record').innerText()).toMatch(/a1 table articles · tenant acme · version 3/);

    // the hostile record looked up: text again
    await page.selectOption('#r-table', 'articles');
    await page.fill('#r-id', 'x1');
    await page.click('#r-lookup');
    await page.waitForSelector('#record [data-record-id="x1"]');
    expect(await page.locator('#record').innerText()).toContain(`${HOSTILE} solar`);
    await page.waitForSelector('#versions li.version[data-version="1"]');
    await expectInert(page);
    await page.click('#results tbody tr[data-record-id="a1"] button.link');
    await page.waitForFunction(() => document.querySelectorAll('#versions li.version[data-version]').length === 3);

    // metrics: a rate needs two scrapes (the page polls every 5 s)
    await page.waitForSelector('#charts figure[data-chart="requests"]:not([data-points="0"])', { timeout: 30_000 });
    const lines = await page.locator('#charts figure[data-chart="records"] polyline').count();
    expect(lines).toBe(2);
    expect(await page.locator('#charts figure[data-chart="records"] .legends').innerText()).toMatch(/records 5\s+versions 7/);
    expect(await page.locator('#charts figure[data-chart="latency"] .legends').innerText()).toMatch(/p50 [\d.]+ ms/);

    if (SCREENSHOT) mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
    const shot = await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(shot.length).toBeGreaterThan(10_000);
    expect(pageErrors).toEqual([]);
    await page.context().close();
  }, 120_000);

  it('works through the gateway with a bearer token typed into the page', async () => {
    const page = await openConsole(gatewayUrl);
    const sent: Array<{ path: string; authorization: string | undefined }> = [];
    page.on('request', (req) => {
      const { pathname } = new URL(req.url());
      if (pathname.startsWith('/v1/')) sent.push({ path: pathname, authorization: req.headers().authorization });
    });
    // without a token the page loads and says what it needs
    await page.waitForFunction(() => /unauthorized: .*token/.test(document.querySelector('#status')?.textContent ?? ''));
    expect(await page.locator('#tables article').count()).toBe(0);

    await page.fill('#token', TOKEN);
    await page.click('#token-form button[type="submit"]');
    await page.waitForSelector('#tables article[data-table="articles"]');
    expect(await page.evaluate(() => sessionStorage.getItem('braid.console.token'))).toBe(TOKEN);
    expect(await page.locator('#service').innerText()).toContain('braid-gateway');
    expect(await page.locator('#branches tbody tr').first().innerText()).toMatch(/default\s+main\s+active\s+3/);

    await setTenant(page, 'acme');
    await page.click('#tab-ql');
    await page.fill('#ql-text', "SEARCH articles TENANT 'acme' MATCH 'solar' LIMIT 10");
    await page.click('#ql-run');
    await page.waitForSelector('#results tbody tr[data-record-id="x1"]');
    expect(await page.locator('#results tbody tr[data-record-id="x1"]').innerText()).toContain(HOSTILE);
    expect(Math.max(...(await page.locator('#explain .bar.phase').evaluateAll((bars) => bars.map((b) => b.getBoundingClientRect().width))))).toBeGreaterThan(0);
    await expectInert(page);

    // the calls made after the token was typed carried it; no call carried anything else
    for (const call of sent.filter((c) => c.path === '/v1/nativeql' || c.path === '/v1/explain')) {
      expect(call.authorization, call.path).toBe(`Bearer ${TOKEN}`);
    }
    expect(sent.filter((c) => c.authorization !== undefined && c.authorization !== `Bearer ${TOKEN}`)).toEqual([]);
    expect(pageErrors).toEqual([]);
    await page.context().close();
  }, 120_000);
});
