/**
 * The gateway (`braid gateway`) as real processes in front of a real engine
 * process: bearer auth, per-token rate limits, proxying, managed routing,
 * engine crash and restart. A small in-process HTTP server stands in for an
 * engine where the test needs to see exactly what the engine receives.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Braid } from '../src/engine.js';
import { GatewayConfigError, gatewayConfig, parsePutBody, resolveGatewayConfig, Router, startGateway, TokenSet } from '../src/gateway/index.js';
import { parseRawAnswer, rawHttp, request, sendThenHalfClose, spawnServer, startTestServer, tempDir, uploadThenRead, waitFor, type ChildServer, type HttpResult } from './helpers.js';

const GOOD = { authorization: 'Bearer good' };
const OTHER = { authorization: 'Bearer other' };
const JSON_HEADERS = { 'content-type': 'application/json' };

const children: ChildServer[] = [];
const dirs: string[] = [];

async function spawn(args: string[], env: Record<string, string> = {}): Promise<ChildServer> {
  const child = await spawnServer(args, env);
  children.push(child);
  return child;
}

async function stopChild(child: ChildServer, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.child.exitCode === null && child.child.signalCode === null) child.child.kill(signal);
  await child.exited;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const get = (base: string, route: string, headers: Record<string, string> = {}) => request(base + route, 'GET', undefined, headers);
const post = (base: string, route: string, body: unknown, headers: Record<string, string> = {}) =>
  request(base + route, 'POST', body, { ...JSON_HEADERS, ...headers });

const record = (id: string, fields: Record<string, unknown> = {}) => ({ table: 'notes', tenant_id: 't1', id, fields });
const key = (id: string) => ({ table: 'notes', tenant_id: 't1', id });

afterAll(async () => {
  await Promise.all(children.map((c) => stopChild(c, 'SIGKILL')));
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('gateway configuration (pure)', () => {
  it('takes tokens from the config file, the environment and flags together', () => {
    const dir = tempDir('braid-gw-conf-');
    dirs.push(dir);
    const file = path.join(dir, 'gateway.json');
    writeFileSync(file, JSON.stringify({ tokens: ['from-file'], rate_limit: { max: 7, window_ms: 250 }, engine_url: 'http://127.0.0.1:9/' }));
    const config = resolveGatewayConfig({ config: file, token: ['from-flag'] }, { BRAID_GATEWAY_TOKENS: 'env-a, env-b' });
    expect(config.tokens.map((t) => t.token).sort()).toEqual(['env-a', 'env-b', 'from-file', 'from-flag']);
    expect(config.tokens.every((t) => t.scope === 'admin')).toBe(true);
    expect(config.rateLimitMax).toBe(7);
    expect(config.rateWindowMs).toBe(250);
    expect(config.engineUrl).toBe('http://127.0.0.1:9');
    expect(config.catalog).toEqual({ databases: [{ database_id: 'default', branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:9' }] }] });
    // flags beat the environment, which beats the file
    const flagged = resolveGatewayConfig({ config: file, rateLimit: 3 }, { BRAID_RATE_LIMIT: '5', BRAID_RATE_WINDOW_MS: '2000' });
    expect(flagged.rateLimitMax).toBe(3);
    expect(flagged.rateWindowMs).toBe(2000);
    // a file saved with a byte order mark reads the same
    writeFileSync(file, `\uFEFF${JSON.stringify({ tokens: ['from-file'], rate_limit: { max: 7 } })}`);
    expect(resolveGatewayConfig({ config: file }, {}).rateLimitMax).toBe(7);
  });

  it('refuses to start without tokens, with an unknown key or a bad catalog', () => {
    expect(() => resolveGatewayConfig({}, {})).toThrow(GatewayConfigError);
    const dir = tempDir('braid-gw-conf-');
    dirs.push(dir);
    const write = (name: string, value: unknown) => {
      const file = path.join(dir, name);
      writeFileSync(file, JSON.stringify(value));
      return file;
    };
    expect(() => resolveGatewayConfig({ config: write('a.json', { tokens: ['x'], tokns: [] }) }, {})).toThrow(/unknown key/);
    expect(() => resolveGatewayConfig({ config: write('b.json', { tokens: ['x'], databases: [] }) }, {})).toThrow(/must not be empty/);
    expect(() => resolveGatewayConfig({ config: write('c.json', {
      tokens: ['x'],
      databases: [{ database_id: 'd', branches: [{ branch_id: 'main', endpoint: 'ftp://x' }] }],
    }) }, {})).toThrow(/http/);
    // tokens a bearer header could never carry, or a scope without a secret
    for (const token of ['a b', 'ünï', ':read']) {
      expect(() => resolveGatewayConfig({ token: [token] }, {}), token).toThrow(GatewayConfigError);
    }
    expect(() => resolveGatewayConfig({ config: write('d.json', { tokens: [{ token: 'has space', scope: 'read' }] }) }, {})).toThrow(/visible ASCII/);
    // a misspelt scope key would leave the default, admin
    expect(() => resolveGatewayConfig({ config: write('e.json', { tokens: [{ token: 'ro', scop: 'read' }] }) }, {})).toThrow(/unknown key "scop"/);
    expect(resolveGatewayConfig({ token: ['ok-Token_1.~+/=:read'] }, {}).tokens).toEqual([{ token: 'ok-Token_1.~+/=', scope: 'read' }]);
  });

  // found by a black-box test: a misspelt scope had made an admin token, an empty BRAID_RATE_LIMIT had
  // turned the limiter off, and a window of 1e20 ms had been taken (its 429 said "retry in -1126158515 years")
  it('refuses a misspelt scope, a variable that names no token, and numbers that are not plain digits in range', () => {
    const dir = tempDir('braid-gw-conf-');
    dirs.push(dir);
    for (const spec of ['app:wirte', 'x:superuser', 'ro:READ', 'trailing:']) {
      expect(() => resolveGatewayConfig({ token: [spec] }, {}), spec).toThrow(GatewayConfigError);
      expect(() => resolveGatewayConfig({ token: [spec] }, {}), spec).toThrow(/^--token\[0\] ends in ":" and a scope that is not one of read, write, admin/);
    }
    expect(() => resolveGatewayConfig({}, { BRAID_GATEWAY_TOKENS: 'good,app:wirte' })).toThrow(/^BRAID_GATEWAY_TOKENS\[1\] ends in ":" and a scope that is not one/);
    // a secret that holds a colon takes its scope after it
    expect(resolveGatewayConfig({ token: ['a:b:admin', 'c:d:read'] }, {}).tokens).toEqual([{ token: 'a:b', scope: 'admin' }, { token: 'c:d', scope: 'read' }]);
    expect(() => resolveGatewayConfig({ token: ['good'] }, { BRAID_GATEWAY_TOKENS: ' , ' })).toThrow(/^BRAID_GATEWAY_TOKENS is set but names no token/);
    expect(() => resolveGatewayConfig({ token: ['good'] }, { BRAID_RATE_LIMIT: '' })).toThrow(/^BRAID_RATE_LIMIT is set but empty/);
    for (const bad of ['0', '1e20', '86400001', '-1', '0x10', ' 5', '1.5']) {
      expect(() => resolveGatewayConfig({ token: ['good'], rateWindow: bad }, {}), bad).toThrow(
        `--rate-window must be a whole number from 1 to 86400000 in decimal digits, got ${JSON.stringify(bad)}`,
      );
    }
    expect(resolveGatewayConfig({ token: ['good'], rateWindow: '86400000' }, {}).rateWindowMs).toBe(86_400_000);
    // a bad variable is refused even where a flag overrides it
    expect(() => resolveGatewayConfig({ token: ['good'], rateLimit: '5' }, { BRAID_RATE_LIMIT: '5x' })).toThrow(/^BRAID_RATE_LIMIT must be a whole number/);
    expect(() => resolveGatewayConfig({ token: ['good'] }, { BRAID_ENGINE_URL: 'notaurl' })).toThrow('BRAID_ENGINE_URL must be an absolute http(s) URL, got "notaurl"');
    expect(() => resolveGatewayConfig({ token: ['good'] }, { BRAID_LOG_LEVEL: 'loud' })).toThrow(/^BRAID_LOG_LEVEL must be one of silent, fatal, error, warn, info, debug, trace, got "loud"/);
    // a file's 0 had silently meant the default
    const file = path.join(dir, 'zero.json');
    writeFileSync(file, JSON.stringify({ tokens: ['good'], ready_interval_ms: 0 }));
    expect(() => resolveGatewayConfig({ config: file }, {})).toThrow(/^ready_interval_ms must be a whole number from 1 to 2147483647/);
    writeFileSync(file, JSON.stringify({ tokens: [] }));
    expect(() => resolveGatewayConfig({ config: file, token: ['good'] }, {})).toThrow(/^tokens is set but names no token/);
    // found by a black-box test: a token listed with two scopes had kept the wider one, so adding
    // `dup:read` to narrow an admin token left it admin; now refused, naming places, never the secret
    const twice: Array<[{ token: string[] }, Record<string, string>, string]> = [
      [{ token: ['dup:admin', 'dup:read'] }, {}, '--token is invalid: one token is given two scopes (--token[0] admin, --token[1] read)'],
      [{ token: ['dup:read'] }, { BRAID_GATEWAY_TOKENS: 'other,dup:admin' }, 'gateway tokens are invalid: one token is given two scopes (BRAID_GATEWAY_TOKENS[1] admin, --token[0] read)'],
    ];
    for (const [flags, env, message] of twice) {
      expect(() => resolveGatewayConfig(flags, env)).toThrow(GatewayConfigError);
      expect(() => resolveGatewayConfig(flags, env)).toThrow(message);
      expect(() => resolveGatewayConfig(flags, env)).not.toThrow(/dup/);
    }
    // and where tokens are given in code (an embedded server's authTokens, a gateway's)
    expect(() => new TokenSet(['a:read', 'a:admin'])).toThrow('tokens are invalid: one token is given two scopes (tokens[0] read, tokens[1] admin)');
    expect(() => gatewayConfig({ tokens: ['a:write', 'a:read'] })).toThrow(/^gateway tokens are invalid/);
    // the same token with the same scope in two sources is one token
    expect(resolveGatewayConfig({ token: ['same:read'] }, { BRAID_GATEWAY_TOKENS: 'same:read' }).tokens).toEqual([{ token: 'same', scope: 'read' }]);
  });

  // found by a black-box test: nested misspelt keys, numbers as strings, null, names the engine refuses, both
  // catalog and databases, and an engine token no header can carry had all been taken
  it('refuses an unknown key at any depth, a number given as a string, null, a catalog name that is not a name, both catalog forms, and an unsendable engine token', () => {
    const dir = tempDir('braid-gw-conf-');
    dirs.push(dir);
    const file = path.join(dir, 'gateway.json');
    const refuse = (config: unknown, message: string | RegExp) => {
      writeFileSync(file, JSON.stringify({ tokens: ['good'], ...(config as object) }));
      const attempt = () => resolveGatewayConfig({ config: file }, {});
      expect(attempt, JSON.stringify(config)).toThrow(GatewayConfigError);
      expect(attempt, JSON.stringify(config)).toThrow(message);
    };
    const branches = [{ branch_id: 'main', endpoint: 'http://127.0.0.1:9' }];
    refuse({ rate_limit: { max: 5, windw_ms: 10 } }, `unknown key "rate_limit.windw_ms" in gateway config ${file}`);
    refuse({ auth_failures: { maxx: 1 } }, /^unknown key "auth_failures\.maxx"/);
    refuse({ discover_branch: false }, /^unknown key "discover_branch"/);
    refuse({ databases: [{ database_id: 'd', discover_branch: false, branches }] }, /^unknown key "databases\[0\]\.discover_branch"/);
    refuse({ databases: [{ database_id: 'd', branches: [{ branch_id: 'main', endpont: 'http://x' }] }] }, /^unknown key "databases\[0\]\.branches\[0\]\.endpont"/);
    refuse({ catalog: { databases: [{ database_id: 'd', branches }], extra: 1 } }, /^unknown key "catalog\.extra"/);
    refuse({ rate_limit: { max: '2' } }, /^rate_limit\.max must be a JSON number, got "2"/);
    refuse({ port: '0' }, /^port must be a JSON number, got "0"/);
    refuse({ body_limit_bytes: '2000' }, /^body_limit_bytes must be a JSON number/);
    refuse({ port: null }, /^port is null; leave the key out/);
    refuse({ rate_limit: { max: null } }, /^rate_limit\.max is null/);
    refuse({ databases: [{ database_id: 'd', default_branch: null, branches }] }, /^databases\[0\]\.default_branch is null/);
    refuse({ databases: [{ database_id: 'd', discover_branches: 'no', branches }] }, /^databases\[0\]\.discover_branches must be a JSON boolean/);
    refuse({ databases: [{ database_id: 'a b', branches }] }, /^databases\[0\]\.database_id "a b" must be a name matching/);
    refuse({ databases: [{ database_id: 'd', branches: [{ branch_id: 'main', upstream_database_id: 'x y' }] }] }, /^databases\[0\]\.branches\[0\]\.upstream_database_id "x y" must be a name/);
    refuse({ databases: [{ database_id: 'd', branches: [{ branch_id: 'main', upstream_branch_id: '-' }] }] }, /upstream_branch_id "-" must be a name/);
    refuse({ catalog: { databases: [{ database_id: 'd', branches: [{ branch_id: 'ma in' }] }] } }, /^catalog\.databases\[0\]\.branches\[0\]\.branch_id "ma in" must be a name/);
    refuse({ catalog: { databases: [{ database_id: 'a', branches }] }, databases: [{ database_id: 'b', branches }] }, /gives both "catalog" and "databases"/);
    refuse({ engine_token: 'has space' }, /^engine_token must be visible ASCII characters without spaces/);
    refuse({ engine_token: 'tab\there' }, /^engine_token must be visible ASCII/);
    expect(() => resolveGatewayConfig({ token: ['good'] }, { BRAID_ENGINE_TOKEN: 'bell\u0007' })).toThrow(/^BRAID_ENGINE_TOKEN must be visible ASCII/);
    // what is right still starts
    writeFileSync(file, JSON.stringify({ tokens: ['good'], port: 0, rate_limit: { max: 2 }, engine_token: 'e-tok:en', catalog: { databases: [{ database_id: 'd', discover_branches: false, branches }] } }));
    const config = resolveGatewayConfig({ config: file }, {});
    expect(config).toMatchObject({ port: 0, rateLimitMax: 2, engineToken: 'e-tok:en', defaultDatabase: 'd' });
  });

  it('a window at its longest (24 h) answers 429 with Retry-After and x-ratelimit-reset as whole seconds within it', async () => {
    // no engine behind it: the limiter answers before any proxying
    const gateway = await startGateway(
      resolveGatewayConfig({ engine: 'http://127.0.0.1:9', token: ['good'], rateLimit: 1, rateWindow: '86400000', authFailureLimit: 0, port: 0, logLevel: 'silent' }, {}),
    );
    try {
      const first = await get(gateway.url, '/v1/metrics/public-safe', GOOD);
      const second = await get(gateway.url, '/v1/metrics/public-safe', GOOD);
      expect(second.status).toBe(429);
      expect(second.body.code).toBe('rate_limited');
      for (const value of [first.headers.get('x-ratelimit-reset'), second.headers.get('x-ratelimit-reset'), second.headers.get('retry-after')]) {
        expect(value).toMatch(/^[0-9]+$/);
        expect(Number(value)).toBeGreaterThan(0);
        expect(Number(value)).toBeLessThanOrEqual(86_400);
      }
      expect(second.body.error).toMatch(/retry in (1 day|24 hours)$/);
    } finally {
      await gateway.close();
    }
  });

  it('routes by catalog names and wraps a bare put body', () => {
    const router = new Router({
      databases: [
        { database_id: 'default', branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:1' }] },
        { database_id: 'alias', branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:2', upstream_database_id: 'default', upstream_branch_id: 'dev' }] },
      ],
    }, 'default');
    expect(router.resolve(undefined, undefined).endpoint).toBe('http://127.0.0.1:1');
    const alias = router.resolve('alias', undefined);
    expect([alias.upstreamDatabaseId, alias.upstreamBranchId]).toEqual(['default', 'dev']);
    expect(() => router.resolve('nope', undefined)).toThrow(expect.objectContaining({ code: 'branch_not_found' }));
    expect(() => router.resolve('default', 'nope')).toThrow(expect.objectContaining({ code: 'branch_not_found' }));

    // engine-reported branches: under the database that is the engine's own, unless it is pinned
    const learning = new Router({
      databases: [
        { database_id: 'default', branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:1' }] },
        { database_id: 'pinned', discover_branches: false, branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:1' }] },
        { database_id: 'alias', branches: [{ branch_id: 'main', endpoint: 'http://127.0.0.1:1', upstream_database_id: 'default' }] },
      ],
    }, 'default');
    learning.learn('http://127.0.0.1:1', [
      { database_id: 'default', branch_id: 'main' },
      { database_id: 'default', branch_id: 'restored' },
      { database_id: 'pinned', branch_id: 'extra' },
    ]);
    expect(learning.resolve('default', 'restored')).toMatchObject({ upstreamDatabaseId: 'default', upstreamBranchId: 'restored', endpoint: 'http://127.0.0.1:1' });
    expect(() => learning.resolve('pinned', 'extra')).toThrow(expect.objectContaining({ code: 'branch_not_found' }));
    expect(() => learning.resolve('alias', 'restored')).toThrow(expect.objectContaining({ code: 'branch_not_found' }));
    expect(learning.all().map((r) => `${r.database_id}/${r.branch_id}`)).toEqual(['default/main', 'pinned/main', 'alias/main', 'default/restored']);
    // what an engine no longer reports is forgotten
    learning.learn('http://127.0.0.1:1', [{ database_id: 'default', branch_id: 'main' }]);
    expect(() => learning.resolve('default', 'restored')).toThrow(expect.objectContaining({ code: 'branch_not_found' }));

    // found by a black-box review: a name two engines of one database report went to whichever answered
    // last, so a write landed on one engine and a later read on the other; it is ambiguous now
    const two = new Router({
      databases: [{
        database_id: 'default',
        branches: [
          { branch_id: 'main', endpoint: 'http://127.0.0.1:1' },
          { branch_id: 'remote', endpoint: 'http://127.0.0.1:2', upstream_branch_id: 'main' },
        ],
      }],
    }, 'default');
    two.learn('http://127.0.0.1:1', [{ database_id: 'default', branch_id: 'dev' }]);
    expect(two.resolve('default', 'dev').endpoint).toBe('http://127.0.0.1:1');
    expect(two.reportedElsewhere('default', 'dev', 'http://127.0.0.1:2')).toEqual(['http://127.0.0.1:1']);
    expect(two.reportedElsewhere('default', 'dev', 'http://127.0.0.1:1')).toEqual([]);
    two.learn('http://127.0.0.1:2', [{ database_id: 'default', branch_id: 'main' }, { database_id: 'default', branch_id: 'dev' }]);
    expect(() => two.resolve('default', 'dev')).toThrow(expect.objectContaining({ code: 'branch_ambiguous', message: expect.stringContaining('http://127.0.0.1:1, http://127.0.0.1:2') }));
    expect(two.all().filter((r) => r.branch_id === 'dev').map((r) => r.endpoint)).toEqual(['http://127.0.0.1:1', 'http://127.0.0.1:2']);
    // whichever engine answers last, the same answer; once one no longer reports it, the other's
    two.learn('http://127.0.0.1:1', [{ database_id: 'default', branch_id: 'main' }, { database_id: 'default', branch_id: 'dev' }]);
    expect(() => two.resolve('default', 'dev')).toThrow(expect.objectContaining({ code: 'branch_ambiguous' }));
    two.learn('http://127.0.0.1:1', [{ database_id: 'default', branch_id: 'main' }]);
    expect(two.resolve('default', 'dev').endpoint).toBe('http://127.0.0.1:2');

    // the client's bytes go on as they are; only a wrapper naming an alias gets the engine's names
    const bareBytes = Buffer.from(JSON.stringify(record('a')));
    expect(parsePutBody(bareBytes)!.forRoute(alias)).toBe(bareBytes);
    const wrapped = parsePutBody(Buffer.from(JSON.stringify({ record: record('a'), branch_id: 'x' })))!;
    expect(wrapped.branchId).toBe('x');
    const named = parsePutBody(Buffer.from(JSON.stringify({ record: record('a'), database_id: 'alias', branch_id: 'main' })))!;
    expect(JSON.parse(named.forRoute(alias).toString())).toEqual({ record: record('a'), database_id: 'default', branch_id: 'dev' });
    const own = Buffer.from(JSON.stringify({ record: record('a'), database_id: 'default' }));
    expect(parsePutBody(own)!.forRoute(alias)).toBe(own);
    expect(parsePutBody(Buffer.from('{"id":'))).toBeUndefined();
    expect(parsePutBody(Buffer.from(JSON.stringify({ record: record('a'), database_id: 5 })))).toBeUndefined();

    const tokens = new TokenSet(['good', 'reader:read', 'writer:write']);
    expect(tokens.check('Bearer good')).toEqual({ token: 'good', scope: 'admin' });
    expect(tokens.check('Bearer reader')).toEqual({ token: 'reader', scope: 'read' });
    expect(tokens.check('bearer   writer')).toEqual({ token: 'writer', scope: 'write' });
    expect(() => tokens.check('Bearer reader:read')).toThrow(expect.objectContaining({ code: 'unauthorized' }));
    expect(() => tokens.check('Bearer bad')).toThrow(expect.objectContaining({ code: 'unauthorized' }));
    expect(() => tokens.check(undefined)).toThrow(expect.objectContaining({ code: 'unauthorized' }));
  });
});

describe('gateway in front of a real engine', () => {
  let dataDir: string;
  let engine: ChildServer;
  let engineUrl: string;
  let enginePort: string;
  let gateway: ChildServer;
  let managed: ChildServer;

  beforeAll(async () => {
    dataDir = tempDir('braid-gw-engine-');
    dirs.push(dataDir);
    // a second branch "dev" (child of main) for managed routing, made before the engine process opens the directory
    const db = Braid.open({ dataDir });
    await db.snapshot('seed');
    await db.restore('seed', 'dev');
    db.close();

    engine = await spawn(['serve', '--port', '0', '--data-dir', dataDir]);
    engineUrl = engine.url;
    enginePort = new URL(engineUrl).port;
    gateway = await spawn(['gateway', '--port', '0', '--engine', engineUrl, '--token', 'good', 'other', '--rate-limit', '20', '--rate-window', '1000', '--auth-failure-limit', '0']);

    const configFile = path.join(dataDir, '..', `${path.basename(dataDir)}-gateway.json`);
    dirs.push(configFile);
    writeFileSync(configFile, JSON.stringify({
      tokens: ['managed'],
      rate_limit: { max: 1000, window_ms: 1000 },
      databases: [
        { database_id: 'default', branches: [{ branch_id: 'main', endpoint: engineUrl }, { branch_id: 'dev', endpoint: engineUrl }, { branch_id: 'later', endpoint: engineUrl, upstream_branch_id: 'later_up' }] },
        { database_id: 'analytics', branches: [{ branch_id: 'main', endpoint: engineUrl, upstream_database_id: 'default', upstream_branch_id: 'dev' }] },
        { database_id: 'ghost', branches: [{ branch_id: 'main' }] },
      ],
    }));
    managed = await spawn(['gateway', '--port', '0', '--config', configFile, '--engine', engineUrl]);
  });

  it('answers 401 without a token or with an unknown one', async () => {
    for (const route of ['/v1/records/get', '/v1/ready', '/v1/metrics/public-safe', '/v1/branches', '/v1/nope']) {
      const none = route === '/v1/records/get' ? await post(gateway.url, route, key('a')) : await get(gateway.url, route);
      expect(none.status).toBe(401);
      expect(none.body).toMatchObject({ code: 'unauthorized', error: expect.any(String) });
      const bad = await get(gateway.url, route, { authorization: 'Bearer nope' });
      expect(bad.status).toBe(401);
      expect(bad.body.code).toBe('unauthorized');
    }
    const basic = await get(gateway.url, '/v1/ready', { authorization: 'Basic Z29vZDo=' });
    expect(basic.status).toBe(401);
    // found by a black-box test: a header that is there but not one bearer token was called missing
    expect((await get(gateway.url, '/v1/ready')).body.error).toBe('missing Authorization: Bearer <token> header');
    for (const header of ['Basic Z29vZDo=', 'Bearer good extra', 'Bearer']) {
      const res = await get(gateway.url, '/v1/ready', { authorization: header });
      expect(res.body, header).toEqual({ code: 'unauthorized', error: 'the Authorization header is not "Bearer <token>" (the Bearer scheme and one token without spaces)' });
    }
    // two headers are refused, not judged by the first (found by a black-box review)
    const twice = await rawHttp(gateway.url, 'GET /v1/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer good\r\nAuthorization: Bearer nope\r\n\r\n');
    expect(parseRawAnswer(twice)).toEqual({ status: 401, body: { code: 'unauthorized', error: 'the request has 2 Authorization headers; send one' } });
  });

  it('answers a path that does not decode 400 invalid_request, in the error body every failure has', async () => {
    for (const route of ['/v1/%zz', '/v1/records/get%E0%A4%A']) {
      const res = await get(gateway.url, route, GOOD);
      expect(res.status, route).toBe(400);
      expect(res.body, route).toEqual({ code: 'invalid_request', error: expect.stringContaining('not a valid url component') });
    }
  });

  // found by a black-box review: the gateway read the body as JSON first and answered invalid_json
  it('answers a GraphQL body that is not JSON content with the engine\'s own code', async () => {
    for (const type of ['application/graphql', 'text/plain']) {
      const direct = await request(`${engineUrl}/v1/graphql`, 'POST', '{ tables { name } }', { 'content-type': type });
      const through = await request(`${managed.url}/v1/graphql`, 'POST', '{ tables { name } }', { authorization: 'Bearer managed', 'content-type': type });
      expect(direct.body.code, type).toBe('unsupported_media_type');
      expect({ status: through.status, code: through.body.code }, type).toEqual({ status: direct.status, code: direct.body.code });
    }
  });

  it('proxies put and get with a good token', async () => {
    const put = await post(gateway.url, '/v1/records/put', record('a', { title: 'through the gateway' }), GOOD);
    expect(put.status).toBe(200);
    expect(put.body.epoch).toBeGreaterThan(0);
    const got = await post(gateway.url, '/v1/records/get', key('a'), GOOD);
    expect(got.status).toBe(200);
    expect(got.body.record).toMatchObject({ id: 'a', fields: { title: 'through the gateway' }, version_id: expect.any(Number) });
    // the engine has it too
    const direct = await post(engineUrl, '/v1/records/get', key('a'));
    expect(direct.body.record.fields.title).toBe('through the gateway');
    // rate-limit headers on every answer
    expect(got.headers.get('x-ratelimit-limit')).toBe('20');
    expect(got.headers.get('x-ratelimit-remaining')).toMatch(/^\d+$/);

    // wrapper body, batch, deprecated insert (with its headers), validation errors and unknown routes pass through
    const wrapped = await post(gateway.url, '/v1/records/put', { record: record('b') }, GOOD);
    expect(wrapped.status).toBe(200);
    const batch = await post(gateway.url, '/v1/records/put-batch', { records: [record('c'), record('d')] }, GOOD);
    expect(batch.status).toBe(200);
    expect(batch.body.record_count).toBe(2);
    const insert = await post(gateway.url, '/v1/insert', record('e'), GOOD);
    expect(insert.status).toBe(200);
    expect(insert.headers.get('deprecation')).toBe('true');
    expect(insert.headers.get('link')).toContain('/v1/records/put');
    // and a keyed insert's replay (found by a black-box test: it had lost both), through the
    // managed gateway, whose budget the tests after this one do not count on
    for (let i = 0; i < 2; i++) {
      const keyed = await post(managed.url, '/v1/insert', record('e2'), { authorization: 'Bearer managed', 'idempotency-key': 'insert-replay' });
      expect(keyed.headers.get('idempotent-replayed')).toBe(i === 0 ? null : 'true');
      expect(keyed.headers.get('deprecation')).toBe('true');
      expect(keyed.headers.get('link')).toContain('/v1/records/put');
    }
    const invalid = await post(gateway.url, '/v1/records/put', '{"id":', GOOD);
    expect(invalid.status).toBe(400);
    expect(invalid.body.code).toBe('invalid_json');
    // a put larger than the gateway's in-memory fast path is still routed
    const long = await post(gateway.url, '/v1/records/put', record('long', { text: 'z'.repeat(100_000) }), GOOD);
    expect(long.status).toBe(200);
    expect((await post(engineUrl, '/v1/records/get', key('long'))).body.record.fields.text).toHaveLength(100_000);
    const unknown = await get(gateway.url, '/v1/nope', GOOD);
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('route_not_found');
  });

  // found by a black-box review: the gateway's own answers on the deprecated path (405, 401) lacked them
  it('names the successor of /v1/insert on its own refusals too', async () => {
    // the managed gateway: the other gateway's rate budgets and request counts are other tests'
    const answers = [
      await request(`${managed.url}/v1/insert`, 'GET', undefined, { authorization: 'Bearer managed' }),
      await post(managed.url, '/v1/insert', record('dep')),
    ];
    expect(answers.map((r) => r.status)).toEqual([405, 401]);
    for (const r of answers) {
      expect(r.headers.get('deprecation')).toBe('true');
      expect(r.headers.get('link')).toBe('</v1/records/put>; rel="successor-version"');
    }
  });

  // found by a black-box review: the gateway dropped such answers too, even GET /v1/ready's
  it('answers a client that half-closes after sending, a write committed through it included', async () => {
    const body = JSON.stringify({ records: [record('half-gw', { title: 'half-closed' })] });
    const get = JSON.stringify({ table: 'notes', tenant_id: 't1', id: 'half-gw' });
    // the managed gateway: its limit leaves the other tests' budgets alone
    const answer = await sendThenHalfClose(
      managed.url,
      `POST /v1/records/put-batch HTTP/1.1\r\nHost: braid\r\nAuthorization: Bearer managed\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}` +
        'GET /v1/ready HTTP/1.1\r\nHost: braid\r\nAuthorization: Bearer managed\r\n\r\n' +
        `POST /v1/records/get HTTP/1.1\r\nHost: braid\r\nAuthorization: Bearer managed\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(get)}\r\n\r\n${get}`,
    );
    expect([...answer.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), answer).toEqual([200, 200, 200]);
    expect(answer).toContain('"record_count":1');
    // pipelined requests run in order, so the get sees the put-batch before it
    expect(answer).toContain('"title":"half-closed"');
  });

  it('cannot be bypassed: compressed bodies are 415, a body naming another branch than the headers is 400 (issue 16 item 5)', async () => {
    // the old bypass: any Content-Encoding skipped the rewrite and the engine took the body's branch
    const before = (await post(engineUrl, '/v1/records/get', key('sneaky'), { 'x-braid-branch': 'dev' })).body.record;
    expect(before).toBeNull();
    const sneaky = await post(gateway.url, '/v1/records/put', { record: record('sneaky'), branch_id: 'dev' }, { ...GOOD, 'content-encoding': 'gzip' });
    expect(sneaky.status).toBe(415);
    expect(sneaky.body.code).toBe('unsupported_content_encoding');
    // a branch neither the catalog nor the engine has is not reachable at all
    const named = await post(gateway.url, '/v1/records/put', { record: record('sneaky'), branch_id: 'nowhere' }, GOOD);
    expect(named.status).toBe(404);
    const mismatch = await post(gateway.url, '/v1/records/put', { record: record('sneaky'), branch_id: 'main' }, { ...GOOD, 'x-braid-branch': 'other' });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.code).toBe('branch_mismatch');
    expect((await post(engineUrl, '/v1/records/get', key('sneaky'), { 'x-braid-branch': 'dev' })).body.record).toBeNull();
    // the engine itself refuses a body that disagrees with the headers, and compressed bodies
    const direct = await post(engineUrl, '/v1/records/put', { record: record('sneaky'), branch_id: 'dev' }, { 'x-braid-branch': 'main' });
    expect(direct.status).toBe(400);
    expect(direct.body.code).toBe('branch_mismatch');
    // found by a black-box review: an empty name was a branch_mismatch through the gateway (which
    // sets the headers) and invalid_name directly; it is invalid_name at both
    // (a gateway of its own: the shared one's rate-limit budget is counted on by the tests after this)
    const unlimited = await startGateway(gatewayConfig({ engineUrl, tokens: ['good'], port: 0, logLevel: 'silent' }));
    try {
      for (const url of [unlimited.url, engineUrl]) {
        const empty = await post(url, '/v1/records/put', { record: record('sneaky'), database_id: '' }, GOOD);
        expect(empty.status, url).toBe(400);
        expect(empty.body.code, url).toBe('invalid_name');
      }
    } finally {
      await unlimited.close();
    }
    const gz = await post(engineUrl, '/v1/records/put', { record: record('sneaky') }, { 'content-encoding': 'deflate' });
    expect(gz.status).toBe(415);
    expect((await post(engineUrl, '/v1/records/get', key('sneaky'), { 'x-braid-branch': 'dev' })).body.record).toBeNull();
    // agreeing body and headers are fine
    const agree = await post(engineUrl, '/v1/records/put', { record: record('fine'), branch_id: 'dev' }, { 'x-braid-branch': 'dev' });
    expect(agree.status).toBe(200);
  });

  it('forwards Idempotency-Key: a retry replays the first answer with its replay header', async () => {
    const headers = { ...GOOD, 'idempotency-key': 'gw-key-1' };
    const first = await post(gateway.url, '/v1/records/put', record('idem'), headers);
    expect(first.status).toBe(200);
    const again = await post(gateway.url, '/v1/records/put', record('idem'), headers);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('content-type')).toContain('application/json');
    const reused = await post(gateway.url, '/v1/records/put', record('idem', { changed: true }), headers);
    expect(reused.status).toBe(409);
    expect(reused.body.code).toBe('idempotency_key_reused');
  });

  it('serves metrics, branches and readiness with gateway: true', async () => {
    const metrics = await get(gateway.url, '/v1/metrics/public-safe', GOOD);
    expect(metrics.status).toBe(200);
    expect(metrics.body).toMatchObject({ gateway: true, rate_limit_enabled: true, rate_limit_requests: 20, recovery_state: 'healthy' });
    expect(metrics.body.requests).toBeGreaterThan(0);
    const engineMetrics = await get(engineUrl, '/v1/metrics/public-safe');
    expect(metrics.body.latest_epoch).toBe(engineMetrics.body.latest_epoch);
    expect(engineMetrics.body.gateway).toBe(false);

    const branches = await get(gateway.url, '/v1/branches', GOOD);
    expect(branches.status).toBe(200);
    expect(branches.body.gateway).toBe(true);
    // the catalog's default/main, and the engine's dev (an engine-reported branch)
    expect(branches.body.branches).toEqual([{
      branch_id: 'main', database_id: 'default', endpoint: engineUrl,
      latest_epoch: engineMetrics.body.latest_epoch, parent_branch_id: null, state: 'active',
    }, expect.objectContaining({ branch_id: 'dev', database_id: 'default', endpoint: engineUrl, parent_branch_id: 'main', state: 'active' })]);

    const ready = await get(gateway.url, '/v1/ready', GOOD);
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({
      ok: true, ready: true, engine_url: engineUrl, engine_health_checked: true, engine_status_code: 200,
      catalog_databases: 1, error: '', service: 'braid-gateway',
    });
    expect(ready.body.metered_requests).toBeGreaterThan(0);
    expect(ready.body.code).toBeUndefined();

    // found by a black-box test: a branch nobody has was a bare 404; the engine answers 503 with its readiness body
    const engineMissing = await get(engineUrl, '/v1/ready', { 'x-braid-branch': 'nosuch' });
    for (const headers of [{ 'x-braid-branch': 'nosuch' }, { 'x-braid-database': 'nosuch' }] as Record<string, string>[]) {
      const missing = await get(gateway.url, '/v1/ready', { ...GOOD, ...headers });
      expect(missing.status).toBe(engineMissing.status);
      expect(missing.body.code).toBe(engineMissing.body.code);
      expect(missing.body).toEqual({
        catalog_databases: 1, durable_epoch: 0, engine_health_checked: false, engine_status_code: 0, engine_url: '',
        error: expect.stringContaining('nosuch'), latest_epoch: 0, metered_requests: expect.any(Number), ok: false, ready: false,
        recovery_state: 'unknown', service: 'braid-gateway', code: 'branch_not_found',
      });
    }
  });

  it('limits each token: a burst gets 429 with Retry-After, other tokens pass, and the next window passes', async () => {
    const burst = await Promise.all(Array.from({ length: 60 }, () => post(gateway.url, '/v1/records/get', key('a'), OTHER)));
    const limited = burst.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThan(0);
    expect(burst.every((r) => r.status === 200 || r.status === 429)).toBe(true);
    const first = limited[0]!;
    expect(first.body).toMatchObject({ code: 'rate_limited', error: expect.any(String) });
    const retryAfter = Number(first.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(first.headers.get('x-ratelimit-limit')).toBe('20');
    expect(first.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(first.headers.get('x-ratelimit-reset')).toMatch(/^\d+$/);

    // another token has its own budget
    const good = await post(gateway.url, '/v1/records/get', key('a'), GOOD);
    expect(good.status).toBe(200);
    // unknown tokens are rejected before the limiter: 401, never 429
    const unknown = await Promise.all(Array.from({ length: 30 }, () => get(gateway.url, '/v1/ready', { authorization: 'Bearer nope' })));
    expect(unknown.every((r) => r.status === 401)).toBe(true);

    await sleep(retryAfter * 1000 + 100);
    const later = await post(gateway.url, '/v1/records/get', key('a'), OTHER);
    expect(later.status).toBe(200);
  });

  // found by a black-box review: a client that left mid-body stayed in flight for good, and its
  // abort was counted and logged as the engine's failure
  it('a client that leaves mid-body leaves the in-flight gauge, and is no failure of the engine', async () => {
    // a gateway of its own: the shared one's rate-limit budget is counted on by the tests after this
    const gateway = await startGateway(gatewayConfig({ engineUrl, tokens: ['good'], port: 0, logLevel: 'silent' }));
    const errorsOf = (text: string) => [...text.matchAll(/^braid_gateway_upstream_errors_total\{[^}]*\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);
    const before = errorsOf(await (await fetch(`${gateway.url}/metrics`, { headers: GOOD })).text());
    const left = connect(Number(new URL(gateway.url).port), '127.0.0.1');
    await new Promise<void>((resolve) => left.on('connect', resolve));
    // streamed to the engine: past the size the gateway buffers
    left.write('POST /v1/records/put-batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n');
    left.write(`{"records":[${' '.repeat(100_000)}`);
    await sleep(100);
    left.destroy();
    let text = '';
    for (let tries = 0; tries < 100; tries++) {
      await sleep(20);
      text = await (await fetch(`${gateway.url}/metrics`, { headers: GOOD })).text();
      if (/^braid_gateway_http_requests_in_flight 1$/m.test(text)) break;
    }
    // the scrape itself is the one request in flight
    expect(text).toMatch(/^braid_gateway_http_requests_in_flight 1$/m);
    expect(errorsOf(text)).toBe(before);
    await gateway.close();
  });

  it('serves its own Prometheus metrics: requests by status (401s and 429s included), upstream latency and errors per engine', async () => {
    expect((await get(gateway.url, '/metrics')).status).toBe(401);
    expect((await post(gateway.url, '/v1/records/get', key('a'), GOOD)).status).toBe(200);
    expect((await get(gateway.url, '/v1/not-a-braid-path', GOOD)).status).toBe(404);
    const res = await fetch(`${gateway.url}/metrics`, { headers: GOOD });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
    expect(text).toContain('# TYPE braid_gateway_http_requests_total counter');
    expect(text).toContain('# TYPE braid_gateway_upstream_request_duration_seconds histogram');
    expect(text).toContain('# TYPE braid_gateway_upstream_errors_total counter');
    expect(value(/braid_gateway_http_requests_total\{method="GET",route="\/metrics",status="401"\} (\d+)/)).toBeGreaterThanOrEqual(1);
    expect(value(/braid_gateway_http_requests_total\{method="POST",route="\/v1\/records\/get",status="200"\} (\d+)/)).toBeGreaterThanOrEqual(1);
    // the burst of the rate-limit test above
    expect(value(/braid_gateway_http_requests_total\{method="POST",route="\/v1\/records\/get",status="429"\} (\d+)/)).toBeGreaterThanOrEqual(1);
    // unknown paths are one label, not the path
    expect(text).not.toContain('not-a-braid-path');
    expect(value(/braid_gateway_http_requests_total\{method="GET",route="other",status="404"\} (\d+)/)).toBeGreaterThanOrEqual(1);
    const engineLabel = engineUrl.replace(/\//g, '\\/').replace(/\./g, '\\.');
    expect(value(new RegExp(`braid_gateway_upstream_request_duration_seconds_count\\{engine="${engineLabel}",status="200"\\} (\\d+)`))).toBeGreaterThanOrEqual(1);
    expect(value(new RegExp(`braid_gateway_engine_ready\\{engine="${engineLabel}"\\} (\\d+)`))).toBe(1);
  });

  it('carries one request id through the gateway to the engine and back', async () => {
    const traced = await post(gateway.url, '/v1/records/get', key('a'), { ...GOOD, 'x-request-id': 'gw-trace-1' });
    expect(traced.status).toBe(200);
    expect(traced.headers.get('x-request-id')).toBe('gw-trace-1');
    const fresh = await post(gateway.url, '/v1/records/get', key('a'), GOOD);
    expect(fresh.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    // refused by the gateway itself: still an id
    expect((await get(gateway.url, '/v1/ready')).headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('routes by x-braid-database / x-braid-branch and injects the branch toward the engine', async () => {
    const M = { authorization: 'Bearer managed' };
    // bare RecordInput to default/dev
    const toDev = await post(managed.url, '/v1/records/put', record('routed', { where: 'dev' }), { ...M, 'x-braid-branch': 'dev' });
    expect(toDev.status).toBe(200);
    const onDev = await post(engineUrl, '/v1/records/get', key('routed'), { 'x-braid-branch': 'dev' });
    expect(onDev.body.record).toMatchObject({ id: 'routed', fields: { where: 'dev' } });
    const onMain = await post(engineUrl, '/v1/records/get', key('routed'), { 'x-braid-branch': 'main' });
    expect(onMain.status).toBe(200);
    expect(onMain.body.record).toBeNull();
    // reads through the gateway follow the same headers
    const viaDev = await post(managed.url, '/v1/records/get', key('routed'), { ...M, 'x-braid-branch': 'dev' });
    expect(viaDev.body.record.fields.where).toBe('dev');
    const viaMain = await post(managed.url, '/v1/records/get', key('routed'), M);
    expect(viaMain.body.record).toBeNull();

    // the put wrapper's branch_id routes too (body wins over the headers, as on the engine)
    const wrapped = await post(managed.url, '/v1/records/put', { record: record('wrapped'), branch_id: 'dev' }, M);
    expect(wrapped.status).toBe(200);
    expect((await post(engineUrl, '/v1/records/get', key('wrapped'), { 'x-braid-branch': 'dev' })).body.record).not.toBeNull();
    expect((await post(engineUrl, '/v1/records/get', key('wrapped'))).body.record).toBeNull();

    // a catalog alias: analytics/main is the engine's default/dev
    const alias = await post(managed.url, '/v1/records/put', record('aliased'), { ...M, 'x-braid-database': 'analytics' });
    expect(alias.status).toBe(200);
    expect((await post(engineUrl, '/v1/records/get', key('aliased'), { 'x-braid-branch': 'dev' })).body.record).not.toBeNull();

    // not in the catalog: the gateway answers 404; in the catalog but not on the engine: the engine does
    const misses: Array<Record<string, string>> = [{ 'x-braid-database': 'nope' }, { 'x-braid-branch': 'nope' }, { 'x-braid-database': 'ghost' }];
    for (const headers of misses) {
      const res = await post(managed.url, '/v1/records/put', record('x'), { ...M, ...headers });
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('branch_not_found');
    }

    const branches = await get(managed.url, '/v1/branches', M);
    expect(branches.status).toBe(200);
    const engineBranches = (await get(engineUrl, '/v1/branches')).body.branches as Array<{ branch_id: string; latest_epoch: number }>;
    const devEpoch = engineBranches.find((b) => b.branch_id === 'dev')!.latest_epoch;
    expect(devEpoch).toBeGreaterThan(0);
    expect(branches.body).toEqual({
      gateway: true,
      branches: [
        { database_id: 'default', branch_id: 'main', endpoint: engineUrl, latest_epoch: expect.any(Number), parent_branch_id: null, state: 'active' },
        { database_id: 'default', branch_id: 'dev', endpoint: engineUrl, latest_epoch: devEpoch, parent_branch_id: 'main', state: 'active' },
        { database_id: 'default', branch_id: 'later', endpoint: engineUrl, latest_epoch: 0, parent_branch_id: null, state: 'missing' },
        { database_id: 'analytics', branch_id: 'main', endpoint: engineUrl, latest_epoch: devEpoch, parent_branch_id: 'main', state: 'active' },
        { database_id: 'ghost', branch_id: 'main', endpoint: engineUrl, latest_epoch: 0, parent_branch_id: null, state: 'missing' },
      ],
    });
    const ready = await get(managed.url, '/v1/ready', { ...M, 'x-braid-branch': 'dev' });
    expect(ready.status).toBe(200);
    expect(ready.body.catalog_databases).toBe(3);
    const metrics = await get(managed.url, '/v1/metrics/public-safe', { ...M, 'x-braid-branch': 'dev' });
    expect(metrics.body).toMatchObject({ gateway: true, rate_limit_requests: 1000, latest_epoch: devEpoch });
  });

  it('proxies POST /v1/query as it does /v1/nativeql: the answer of the engine, token and limiter first, keyed retries, the branch injected', async () => {
    const M = { authorization: 'Bearer managed' };
    const rows = ['solar kettle', 'wind vane', 'solar lamp', 'rain gauge', 'solar fence'].map((title, i) => record(`gq${i}`, { title }));
    expect((await post(managed.url, '/v1/records/put-batch', { records: rows }, M)).status).toBe(200);
    const body = { table: 'notes', tenant_id: 't1', text: 'solar', top_k: 2 };
    // scored by the index, so that a freshness_penalty cannot change between the requests compared
    await waitFor('notes indexed', async () => (await post(engineUrl, '/v1/explain', { ...body, freshness: 'indexed' })).body.pending_feature_count === 0);
    const ids = (r: HttpResult) => r.body.results.map((x: { record_id: string }) => x.record_id);

    const via = await post(managed.url, '/v1/query', body, M);
    expect(via.status).toBe(200);
    expect(via.headers.get('x-ratelimit-limit')).toBe('1000');
    const direct = await post(engineUrl, '/v1/query', body);
    const ql = await post(managed.url, '/v1/nativeql', { query: "SEARCH notes TENANT 't1' MATCH 'solar' LIMIT 2" }, M);
    expect(ql.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(via.body.results).toEqual(direct.body.results);
    expect(via.body.results).toEqual(ql.body.results);
    expect(ids(via)).toHaveLength(2);
    expect(via.body.explain.read_epoch).toBe(direct.body.explain.read_epoch);
    // the next page through the gateway, with the cursor it relayed
    const page2 = await post(managed.url, '/v1/query', { ...body, cursor: via.body.next_cursor }, M);
    expect(page2.status).toBe(200);
    expect([...ids(via), ...ids(page2)].sort()).toEqual(['gq0', 'gq2', 'gq4']);

    // the gateway's own answers come first: no token, a wrong method, a malformed branch header
    const noToken = await post(managed.url, '/v1/query', body);
    expect(noToken.status).toBe(401);
    expect(noToken.body.code).toBe('unauthorized');
    const wrongMethod = await get(managed.url, '/v1/query', M);
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
    expect((await post(managed.url, '/v1/query', body, { ...M, 'x-braid-branch': '' })).body.code).toBe('invalid_name');
    // the engine's refusals pass through as they are
    const refused = await post(managed.url, '/v1/query', { ...body, bogus: 1 }, M);
    expect(refused.status).toBe(400);
    expect(refused.body).toEqual((await post(engineUrl, '/v1/query', { ...body, bogus: 1 })).body);

    // Idempotency-Key reaches the engine: a retry is a replay, another body 409
    const keyed = { ...M, 'idempotency-key': 'gw-query-1' };
    const first = await post(managed.url, '/v1/query', body, keyed);
    const again = await post(managed.url, '/v1/query', body, keyed);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(JSON.stringify(again.body)).toBe(JSON.stringify(first.body));
    const reused = await post(managed.url, '/v1/query', { ...body, top_k: 3 }, keyed);
    expect(reused.status).toBe(409);
    expect(reused.body.code).toBe('idempotency_key_reused');

    // managed routing: analytics/main is the engine's default/dev
    const everything = { table: 'notes', tenant_id: 't1', top_k: 100 };
    const viaAlias = await post(managed.url, '/v1/query', everything, { ...M, 'x-braid-database': 'analytics' });
    const onDev = await post(engineUrl, '/v1/query', everything, { 'x-braid-branch': 'dev' });
    expect(viaAlias.status).toBe(200);
    expect(ids(viaAlias).sort()).toEqual(ids(onDev).sort());
    expect(ids(viaAlias)).toContain('aliased');
    expect(ids(viaAlias)).not.toContain('gq0');
    const missing = await post(managed.url, '/v1/query', everything, { ...M, 'x-braid-database': 'nope' });
    expect(missing.status).toBe(404);
    expect(missing.body.code).toBe('branch_not_found');
    // a snapshot through the alias answers the catalog's names, as GET /v1/branches lists the branch
    const snap = await post(managed.url, '/v1/admin/snapshot', { target: 'via_alias' }, { ...M, 'x-braid-database': 'analytics' });
    expect(snap.status).toBe(200);
    expect(snap.body).toMatchObject({ snapshot: true, target: 'via_alias', database_id: 'analytics', branch_id: 'main' });
    expect(Number(snap.headers.get('content-length'))).toBe(Buffer.byteLength(JSON.stringify(snap.body)));
  });

  it('routes to and lists branches the engine reports, such as a restored one (issue 14 item 4)', async () => {
    const M = { authorization: 'Bearer managed' };
    expect((await post(managed.url, '/v1/records/put', record('before-snap', { n: 1 }), M)).status).toBe(200);
    expect((await post(managed.url, '/v1/admin/snapshot', { target: 'gw_snap' }, M)).status).toBe(200);
    const restored = await post(managed.url, '/v1/admin/restore', { source: 'gw_snap', target: 'gw_restored' }, M);
    expect(restored.status).toBe(200);

    // at once, without a config change: the gateway asks the engine about a branch it does not know
    const R = { ...M, 'x-braid-branch': 'gw_restored' };
    const got = await post(managed.url, '/v1/records/get', key('before-snap'), R);
    expect(got.status).toBe(200);
    expect(got.body.record.fields.n).toBe(1);
    expect((await post(managed.url, '/v1/records/put', record('on-restored'), R)).status).toBe(200);
    expect((await post(engineUrl, '/v1/records/get', key('on-restored'), { 'x-braid-branch': 'gw_restored' })).body.record).not.toBeNull();
    expect((await post(engineUrl, '/v1/records/get', key('on-restored'))).body.record).toBeNull();
    expect((await get(managed.url, '/v1/ready', R)).status).toBe(200);

    const listed = (await get(managed.url, '/v1/branches', M)).body.branches as Array<Record<string, unknown>>;
    expect(listed).toContainEqual(expect.objectContaining({ database_id: 'default', branch_id: 'gw_restored', endpoint: engineUrl, state: 'active' }));
    // only under the database that is the engine's own, not under an alias of it
    expect(listed.some((b) => b.database_id === 'analytics' && b.branch_id === 'gw_restored')).toBe(false);
    const viaAlias = await post(managed.url, '/v1/records/get', key('before-snap'), { ...M, 'x-braid-database': 'analytics', 'x-braid-branch': 'gw_restored' });
    expect(viaAlias.status).toBe(404);
    // a branch nobody has is still 404 from the gateway
    const none = await post(managed.url, '/v1/records/get', key('before-snap'), { ...M, 'x-braid-branch': 'gw_nowhere' });
    expect(none.status).toBe(404);
    expect(none.body.code).toBe('branch_not_found');
  });

  // found by a black-box review: the engine made a branch of the alias's own name, which no client could
  // reach, and its verification passed on that branch
  it('a restore into a catalog alias makes the branch the alias names, answered in the catalog name', async () => {
    const M = { authorization: 'Bearer managed' };
    expect((await post(managed.url, '/v1/records/put', record('for-alias', { n: 2 }), M)).status).toBe(200);
    expect((await post(managed.url, '/v1/admin/snapshot', { target: 'gw_alias_snap' }, M)).status).toBe(200);
    const body = { source: 'gw_alias_snap', target: 'later', verify_record: key('for-alias') };
    const keyed = { ...M, 'idempotency-key': 'alias-restore' };
    const restored = await post(managed.url, '/v1/admin/restore', body, keyed);
    expect(restored.status).toBe(200);
    expect(restored.body).toMatchObject({ restored: true, target: 'later', verification: { status: 'passed' } });
    expect(Number(restored.headers.get('content-length'))).toBe(Buffer.byteLength(JSON.stringify(restored.body)));
    const again = await post(managed.url, '/v1/admin/restore', body, keyed);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(restored.body);
    const got = await post(managed.url, '/v1/records/get', key('for-alias'), { ...M, 'x-braid-branch': 'later' });
    expect(got.status).toBe(200);
    expect(got.body.record.fields).toEqual({ n: 2 });
    const onEngine = ((await get(engineUrl, '/v1/branches')).body.branches as Array<{ branch_id: string }>).map((b) => b.branch_id);
    expect(onEngine).toContain('later_up');
    expect(onEngine).not.toContain('later');
    const twice = await post(managed.url, '/v1/admin/restore', { source: 'gw_alias_snap', target: 'later' }, M);
    expect(twice.status).toBe(409);
    expect(twice.body.code).toBe('branch_exists');
    // a body with a BOM is read as the engine reads it, and an alias into another database is refused (found by a recheck)
    const bom = await request(`${managed.url}/v1/admin/restore`, 'POST', `\uFEFF${JSON.stringify({ source: 'gw_alias_snap', target: 'later' })}`, { ...M, 'content-type': 'application/json' });
    expect(bom.status).toBe(409);
    const otherDb = await post(managed.url, '/v1/admin/restore', { source: 'gw_alias_snap', target: 'main' }, { ...M, 'x-braid-database': 'analytics' });
    expect(otherDb.status).toBe(409);
    expect(otherDb.body.code).toBe('branch_exists');
    // found by a black-box review: a new name restored through a database that aliases another was made in
    // the other one, 200, and every read of it by that name was 404
    const unreachable = await post(managed.url, '/v1/admin/restore', { source: 'gw_alias_snap', target: 'newb' }, { ...M, 'x-braid-database': 'analytics' });
    expect(unreachable.status).toBe(400);
    expect(unreachable.body).toMatchObject({ code: 'invalid_request', error: expect.stringContaining('aliases default on its engine') });
    expect(((await get(engineUrl, '/v1/branches')).body.branches as Array<{ branch_id: string }>).map((b) => b.branch_id)).not.toContain('newb');
  });

  // found by a black-box test: passed on to the engine, GraphQL `branches` listed every branch the engine
  // holds by its own names and address, those a `discover_branches: false` catalog hides included
  it('answers GraphQL branches from its catalog, as GET /v1/branches', async () => {
    const M = { authorization: 'Bearer managed' };
    const gql = (url: string, query: string, headers: Record<string, string>) => post(url, '/v1/graphql', { query }, headers);
    const fields = 'database_id branch_id endpoint state parent_branch_id';
    const rest = (await get(managed.url, '/v1/branches', M)).body.branches as Array<Record<string, unknown>>;
    const viaGraphql = await gql(managed.url, `{ branches { ${fields} } }`, M);
    expect(viaGraphql.status).toBe(200);
    expect(viaGraphql.body.data.branches).toEqual(rest.map(({ database_id, branch_id, endpoint, state, parent_branch_id }) => ({ database_id, branch_id, endpoint, state, parent_branch_id })));
    expect(viaGraphql.body.data.branches).toContainEqual(expect.objectContaining({ database_id: 'analytics', branch_id: 'main' }));
    // through fragments and aliases, with __typename
    const spread = await gql(managed.url, 'query Q { ...F } fragment F on Query { all: branches { branch_id } __typename }', M);
    expect(spread.body.data.all).toHaveLength(rest.length);
    expect(spread.body.data.__typename).toBe('Query');
    // a document that also asks the engine for something runs there, with its branches answered here
    const mixed = await gql(managed.url, '{ tables { name } mine: branches { ...B } } fragment B on Branch { database_id branch_id }', M);
    expect(mixed.status).toBe(200);
    expect(mixed.body.data.tables).toContainEqual(expect.objectContaining({ name: 'notes' }));
    expect(mixed.body.data.mine).toEqual(rest.map(({ database_id, branch_id }) => ({ database_id, branch_id })));
    expect(Object.keys(mixed.body.data)).toEqual(['tables', 'mine']);
    // but not through a fragment at the root beside other fields: it cannot be split from them
    const spreadMixed = await gql(managed.url, '{ tables { name } ...R } fragment R on Query { branches { branch_id } }', M);
    expect(spreadMixed.status).toBe(400);
    expect(spreadMixed.body.code).toBe('graphql_not_allowed');
    const invalid = await gql(managed.url, '{ branches { no_such_field } }', M);
    expect(invalid.status).toBe(200);
    expect(invalid.body.errors[0].extensions.code).toBe('graphql_validation_failed');
    // everything else still runs at the engine
    expect((await gql(managed.url, '{ tables { name } }', M)).body.data.tables).toContainEqual(expect.objectContaining({ name: 'notes' }));

    // a catalog that hides the engine's other branches: GraphQL hides them too
    const configFile = path.join(dataDir, '..', `${path.basename(dataDir)}-pinned.json`);
    dirs.push(configFile);
    writeFileSync(configFile, JSON.stringify({
      tokens: ['pinned:read'],
      databases: [{ database_id: 'default', discover_branches: false, branches: [{ branch_id: 'main', endpoint: engineUrl }] }],
    }));
    const pinned = await spawn(['gateway', '--port', '0', '--config', configFile, '--engine', engineUrl]);
    try {
      const P = { authorization: 'Bearer pinned' };
      expect((await gql(engineUrl, '{ branches { branch_id } }', {})).body.data.branches.length).toBeGreaterThan(1);
      const hidden = await gql(pinned.url, '{ branches { database_id branch_id endpoint } }', P);
      expect(hidden.body).toEqual({ data: { branches: [{ database_id: 'default', branch_id: 'main', endpoint: engineUrl }] } });
      // mixed with another field, too
      const mixedHidden = await gql(pinned.url, '{ tables { name } branches { branch_id } }', P);
      expect(mixedHidden.body.data.branches).toEqual([{ branch_id: 'main' }]);
    } finally {
      await stopChild(pinned);
    }
  });

  it('answers 502 and not ready while the engine is down, and recovers when it restarts on the same port', async () => {
    const listedUp = (await get(gateway.url, '/v1/branches', GOOD)).body.branches as Array<Record<string, unknown>>;
    expect(listedUp).toContainEqual(expect.objectContaining({ branch_id: 'dev', parent_branch_id: 'main', state: 'active' }));
    await stopChild(engine, 'SIGKILL');
    const down = await post(gateway.url, '/v1/records/get', key('a'), GOOD);
    expect(down.status).toBe(502);
    expect(down.body).toMatchObject({ code: 'upstream_unreachable', error: expect.any(String) });
    const putDown = await post(gateway.url, '/v1/records/put', record('while-down'), GOOD);
    expect(putDown.status).toBe(502);
    const metricsDown = await get(gateway.url, '/v1/metrics/public-safe', GOOD);
    expect(metricsDown.status).toBe(502);
    const ready = await get(gateway.url, '/v1/ready', GOOD);
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ ok: false, ready: false, engine_health_checked: true, engine_status_code: 0, code: 'not_ready' });
    expect(ready.body.error).not.toBe('');
    const branches = await get(gateway.url, '/v1/branches', GOOD);
    expect(branches.status).toBe(200);
    expect(branches.body.branches[0].state).toBe('unreachable');
    // each with the parent its engine last listed, not as a root (found by a black-box review)
    expect(branches.body.branches).toEqual(listedUp.map((b) => ({ ...b, latest_epoch: 0, state: 'unreachable' })));

    engine = await spawn(['serve', '--port', enginePort, '--data-dir', dataDir]);
    expect(engine.url).toBe(engineUrl);
    await waitFor('the gateway to see the engine ready', async () => (await get(gateway.url, '/v1/ready', GOOD)).status === 200);
    const got = await post(gateway.url, '/v1/records/get', key('a'), GOOD);
    expect(got.status).toBe(200);
    expect(got.body.record.fields.title).toBe('through the gateway');
    const put = await post(gateway.url, '/v1/records/put', record('after-restart'), GOOD);
    expect(put.status).toBe(200);

    // receipts survive the engine restart: the earlier keyed put replays through the gateway
    const OTHER = { authorization: 'Bearer other' };
    const replayed = await post(gateway.url, '/v1/records/put', record('idem'), { ...GOOD, 'idempotency-key': 'gw-key-1' });
    expect(replayed.status).toBe(200);
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    // keys are scoped by token: another client's same key is its own request
    const otherClient = await post(gateway.url, '/v1/records/put', record('idem'), { ...OTHER, 'idempotency-key': 'gw-key-1' });
    expect(otherClient.status).toBe(200);
    expect(otherClient.headers.get('idempotent-replayed')).toBeNull();
    // concurrent requests with one key through the gateway execute once: one epoch
    const before = (await get(gateway.url, '/v1/metrics/public-safe', OTHER)).body.latest_epoch;
    const burst = await Promise.all(
      Array.from({ length: 6 }, () => post(gateway.url, '/v1/records/put', record('gw-race'), { ...OTHER, 'idempotency-key': 'gw-race' })),
    );
    expect(burst.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(new Set(burst.map((r) => r.body.epoch)).size).toBe(1);
    expect((await get(gateway.url, '/v1/metrics/public-safe', OTHER)).body.latest_epoch).toBe(before + 1);
  });
});

describe('gateway against a scripted engine', () => {
  let upstream: Server;
  let upstreamUrl: string;
  let gateway: ChildServer;
  let notReady = false;
  // the code the scripted engine's readiness answers with while not ready
  let notReadyCode = 'shutting_down';
  let shapelessMetrics = false;
  const seen: Array<{ method: string; url: string; headers: IncomingHttpHeaders; body: string }> = [];

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        if (req.url === '/v1/ready') {
          res.writeHead(notReady ? 503 : 200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(notReady
            ? { ready: false, ok: false, error: 'recovering', code: notReadyCode, recovery_state: 'failed' }
            : { ready: true, ok: true, error: '', durable_epoch: 4, latest_epoch: 5, recovery_state: 'healthy' }));
          return;
        }
        seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
        if (req.url === '/hop') {
          res.writeHead(200, { 'content-type': 'application/json', connection: 'x-upstream-hop', 'x-upstream-hop': 'secret', 'x-kept': 'yes' });
          res.end('{}');
          return;
        }
        if (req.url === '/v1/metrics/public-safe' && shapelessMetrics) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ some: 'thing' }));
          return;
        }
        if (req.url === '/big') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ big: 'y'.repeat(200_000) }));
          return;
        }
        res.writeHead(201, {
          'content-type': 'application/json',
          'idempotent-replayed': 'true',
          'idempotency-replayed': 'true',
          deprecation: 'true',
          link: '</v1/records/put>; rel="successor-version"',
          'x-custom': 'kept',
        });
        res.end(JSON.stringify({ echoed: true }));
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const address = upstream.address() as { port: number };
    upstreamUrl = `http://127.0.0.1:${address.port}`;
    gateway = await spawn(['gateway', '--port', '0', '--engine', upstreamUrl, '--token', 'good', '--rate-limit', '0'], {
      BRAID_GATEWAY_TOKENS: 'env-token',
    });
  });

  afterAll(async () => {
    await stopChild(gateway);
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  });

  it('forwards Idempotency-Key, the route headers and the put body as sent, and relays response headers', async () => {
    seen.length = 0;
    const res: HttpResult = await post(gateway.url, '/v1/records/put?x=1', record('k'), {
      ...GOOD,
      'idempotency-key': 'key-123',
      'x-braid-database': 'default',
    });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ echoed: true });
    for (const name of ['idempotent-replayed', 'idempotency-replayed', 'deprecation', 'link', 'x-custom']) {
      expect(res.headers.get(name)).not.toBeNull();
    }
    expect(res.headers.get('x-ratelimit-limit')).toBeNull();
    const sent = seen[0]!;
    expect(sent.method).toBe('POST');
    expect(sent.url).toBe('/v1/records/put?x=1');
    expect(sent.headers['idempotency-key']).toBe('key-123');
    expect(sent.headers['x-braid-database']).toBe('default');
    expect(sent.headers['x-braid-branch']).toBe('main');
    expect(sent.headers.authorization).toBe('Bearer good');
    expect(sent.headers['content-type']).toBe('application/json');
    // the client's bytes, routed by the headers (the engine takes every body the gateway takes)
    expect(sent.body).toBe(JSON.stringify(record('k')));
    expect(Number(sent.headers['content-length'])).toBe(Buffer.byteLength(sent.body));

    // other routes stream the body unchanged; the env token works too
    seen.length = 0;
    const raw = '{"query": "FROM notes" }';
    const other = await post(gateway.url, '/v1/nativeql', raw, { authorization: 'Bearer env-token', 'idempotency-key': 'k2' });
    expect(other.status).toBe(201);
    expect(seen[0]!.body).toBe(raw);
    expect(seen[0]!.headers['idempotency-key']).toBe('k2');
    expect(seen[0]!.headers['x-braid-branch']).toBe('main');
    // as does the JSON query
    seen.length = 0;
    const json = '{"table": "notes",  "tenant_id": "t1"}';
    const query = await post(gateway.url, '/v1/query', json, { ...GOOD, 'idempotency-key': 'k3' });
    expect(query.status).toBe(201);
    expect(seen[0]!).toMatchObject({ method: 'POST', url: '/v1/query', body: json });
    expect(seen[0]!.headers['idempotency-key']).toBe('k3');
  });

  it('strips hop-by-hop headers, including those a Connection header names, both ways (issue 16 item 5)', async () => {
    seen.length = 0;
    const { connect } = await import('node:net');
    const url = new URL(gateway.url);
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () => {
        socket.write(
          'GET /hop HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nConnection: close, x-client-hop\r\n' +
            'X-Client-Hop: private\r\nKeep-Alive: timeout=5\r\nX-Forwarded-Host: kept\r\n\r\n',
        );
      });
      let data = '';
      socket.on('data', (d) => (data += d));
      socket.on('end', () => resolve(data));
      socket.on('error', reject);
    });
    const sent = seen.find((s) => s.url === '/hop')!;
    expect(sent.headers['x-client-hop']).toBeUndefined();
    expect(sent.headers['keep-alive']).toBeUndefined();
    expect(sent.headers['x-forwarded-host']).toBe('kept');
    const head = raw.split('\r\n\r\n')[0]!.toLowerCase();
    expect(head).toMatch(/^http\/1\.1 200/);
    expect(head).not.toContain('x-upstream-hop');
    expect(head).toContain('x-kept: yes');
  });

  it('streams large bodies both ways, with or without a content-length', async () => {
    seen.length = 0;
    const large = JSON.stringify({ query: 'x'.repeat(150_000) });
    const sized = await post(gateway.url, '/v1/nativeql', large, GOOD);
    expect(sized.status).toBe(201);
    expect(seen[0]!.body).toBe(large);
    // chunked request body (no content-length)
    const chunked = await fetch(`${gateway.url}/v1/nativeql`, {
      method: 'POST',
      headers: { ...GOOD, ...JSON_HEADERS },
      body: new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(large.slice(0, 1000)));
          controller.enqueue(new TextEncoder().encode(large.slice(1000)));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(201);
    await chunked.text();
    expect(seen[1]!.body).toBe(large);
    const big = await get(gateway.url, '/big', GOOD);
    expect(big.status).toBe(200);
    expect(big.body.big).toHaveLength(200_000);
  });

  it('answers 503 not_ready while the engine says it is not ready, and proxies again once it is', async () => {
    notReady = true;
    await waitFor('the gateway to see the engine not ready', async () => (await get(gateway.url, '/v1/nope', GOOD)).status === 503);
    const gated = await post(gateway.url, '/v1/records/get', key('a'), GOOD);
    expect(gated.status).toBe(503);
    expect(gated.body).toMatchObject({ code: 'not_ready', error: expect.stringContaining('recovering') });
    const ready = await get(gateway.url, '/v1/ready', GOOD);
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ ready: false, engine_status_code: 503, code: 'shutting_down', recovery_state: 'failed' });

    notReady = false;
    await waitFor('the gateway to see the engine ready', async () => (await get(gateway.url, '/v1/nope', GOOD)).status === 201);
    const readyAgain = await get(gateway.url, '/v1/ready', GOOD);
    expect(readyAgain.status).toBe(200);
    expect(readyAgain.body).toMatchObject({ ready: true, durable_epoch: 4, latest_epoch: 5, engine_url: upstreamUrl });
    const metrics = await get(gateway.url, '/v1/metrics/public-safe', GOOD);
    // the scripted engine's answer is not a metrics body: relayed as is
    expect(metrics.status).toBe(201);
    // found by a black-box review: a 200 out of shape was the gateway's 500 (its serializer's)
    shapelessMetrics = true;
    const shapeless = await get(gateway.url, '/v1/metrics/public-safe', GOOD);
    shapelessMetrics = false;
    expect(shapeless.status).toBe(502);
    expect(shapeless.body).toEqual({ code: 'upstream_error', error: expect.stringMatching(/answered its metrics out of shape/) });
  });

  // found by a black-box review: a probe branch whose storage failed closed every branch of the engine,
  // reads included, and a readiness check of a healthy branch opened them all again until the next probe
  it('does not gate an engine whose probed branch alone is not ready (storage failed, indexer failing)', async () => {
    for (const code of ['storage_failure', 'indexer_failed']) {
      notReadyCode = code;
      notReady = true;
      try {
        await waitFor(`the gateway to probe the engine (${code})`, async () => (await get(gateway.url, '/v1/ready', GOOD)).status === 503);
        // past two of the background checks (every 500 ms), which store the answer
        await new Promise((resolve) => setTimeout(resolve, 1200));
        // the engine answers each request for its own branch: it is proxied
        seen.length = 0;
        const proxied = await get(gateway.url, '/v1/nope', GOOD);
        expect(proxied.status).toBe(201);
        expect(seen.map((s) => s.url)).toEqual(['/v1/nope']);
        const ready = await get(gateway.url, '/v1/ready', GOOD);
        expect(ready.status).toBe(503);
        expect(ready.body).toMatchObject({ ready: false, code });
      } finally {
        notReady = false;
        notReadyCode = 'shutting_down';
      }
    }
  });
});

describe('gateway token scopes and failed authentications (issue 16 item 6)', () => {
  let dataDir: string;
  let engine: ChildServer;
  let gateway: ChildServer;

  beforeAll(async () => {
    dataDir = tempDir('braid-gw-scopes-');
    dirs.push(dataDir);
    engine = await spawn(['serve', '--port', '0', '--data-dir', dataDir]);
    const configFile = path.join(dataDir, '..', `${path.basename(dataDir)}-scopes.json`);
    dirs.push(configFile);
    writeFileSync(configFile, JSON.stringify({
      tokens: ['boss', { token: 'writer', scope: 'write' }, 'reader:read'],
      rate_limit: { max: 1000, window_ms: 1000 },
      auth_failures: { max: 3, window_ms: 60_000 },
    }));
    gateway = await spawn(['gateway', '--port', '0', '--config', configFile, '--engine', engine.url]);
  });

  afterAll(async () => {
    await stopChild(gateway);
    await stopChild(engine);
  });

  const as = (token: string) => ({ authorization: `Bearer ${token}` });

  it('reads need read, writes need write, admin routes and admin mutations need admin', async () => {
    const put = (token: string, id: string) => post(gateway.url, '/v1/records/put', record(id), as(token));
    expect((await put('reader', 'r1')).status).toBe(403);
    expect((await put('reader', 'r1')).body.code).toBe('forbidden');
    expect((await put('writer', 'w1')).status).toBe(200);
    expect((await put('boss', 'b1')).status).toBe(200);
    expect((await post(gateway.url, '/v1/records/get', key('w1'), as('reader'))).body.record.id).toBe('w1');
    const query = await post(gateway.url, '/v1/query', { table: 'notes', tenant_id: 't1', top_k: 5 }, as('reader'));
    expect(query.status).toBe(200);
    expect(query.body.results.map((x: { record_id: string }) => x.record_id).sort()).toEqual(['b1', 'w1']);
    for (const token of ['reader', 'writer']) {
      const snap = await post(gateway.url, '/v1/admin/snapshot', { target: `s_${token}` }, as(token));
      expect(snap.status).toBe(403);
      const archive = await post(gateway.url, '/v1/admin/branch-state', { branch_id: 'main', state: 'archived' }, as(token));
      expect(archive.status).toBe(403);
    }
    expect((await post(gateway.url, '/v1/admin/snapshot', { target: 's_boss' }, as('boss'))).status).toBe(200);
    // GraphQL: scoped by what the document runs
    const gqlPut = { query: 'mutation { put(record: {table: "docs", tenant_id: "t", id: "g1", fields: {title: "x"}}) { epoch } }' };
    expect((await post(gateway.url, '/v1/graphql', gqlPut, as('reader'))).status).toBe(403);
    expect((await post(gateway.url, '/v1/graphql', gqlPut, as('writer'))).body.data.put.epoch).toBeGreaterThan(0);
    const gqlDeclare = { query: 'mutation { declare_table(table: "t2", columns: {a: {type: "string"}}) { epoch } }' };
    expect((await post(gateway.url, '/v1/graphql', gqlDeclare, as('writer'))).status).toBe(403);
    expect((await post(gateway.url, '/v1/graphql', { query: '{ tables { name } }' }, as('reader'))).status).toBe(200);
    expect((await get(gateway.url, '/v1/ready', as('reader'))).status).toBe(200);
  });

  // found by a black-box test: a write token's put inside a fragment was refused as needing admin
  it('GraphQL scopes see through fragments, inline and named, nested; one that cannot be resolved needs admin', async () => {
    const put = (id: string) => `put(record: {table: "docs", tenant_id: "t", id: "${id}", fields: {title: "x"}}) { epoch }`;
    const writes = [
      `mutation { ... on Mutation { ${put('f1')} } }`,
      `mutation { ...P } fragment P on Mutation { ${put('f2')} }`,
      `mutation { ... on Mutation { ...P } } fragment P on Mutation { ... on Mutation { ...Q } } fragment Q on Mutation { ${put('f3')} }`,
      `mutation W { ...P } fragment P on Mutation { ${put('f4')} } mutation S { snapshot(target: "never") { snapshot } }`,
    ];
    for (const query of writes) {
      const body = query.includes('mutation W') ? { query, operationName: 'W' } : { query };
      const res = await post(gateway.url, '/v1/graphql', body, as('writer'));
      expect(res.status, query).toBe(200);
      expect(res.body.errors, query).toBeUndefined();
      expect((await post(gateway.url, '/v1/graphql', body, as('reader'))).status, query).toBe(403);
    }
    const admins = [
      'mutation { ...S } fragment S on Mutation { snapshot(target: "frag_snap") { snapshot } }',
      'mutation { ... on Mutation { ... on Mutation { declare_table(table: "t3", columns: {a: {type: "string"}}) { epoch } } } }',
      `mutation { ${put('f5')} ...S } fragment S on Mutation { restore(source: "s_boss", target: "frag_restored") { restored } }`,
      // undefined or cyclic: cannot be resolved, needs the strictest scope (and then fails validation)
      'mutation { ...Nowhere }',
      'mutation { ...A } fragment A on Mutation { ...B } fragment B on Mutation { ...A }',
    ];
    for (const query of admins) {
      const res = await post(gateway.url, '/v1/graphql', { query }, as('writer'));
      expect(res.status, query).toBe(403);
      expect(res.body.code, query).toBe('forbidden');
    }
    expect((await post(gateway.url, '/v1/graphql', { query: 'mutation { ...Nowhere }' }, as('boss'))).body.errors[0].message).toMatch(/Unknown fragment/);
  });

  it('rate-limits failed authentications per address', async () => {
    for (let i = 0; i < 3; i++) expect((await get(gateway.url, '/v1/branches', as(`guess-${i}`))).status).toBe(401);
    const blocked = await get(gateway.url, '/v1/branches', as('guess-3'));
    expect(blocked.status).toBe(429);
    expect(blocked.body.code).toBe('rate_limited');
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});

describe('gateway readiness with a catalog branch the engine lacks (found by a black-box test)', () => {
  it('keeps proxying the engine\'s other branches while the first catalog branch does not exist yet', async () => {
    const { startTestServer } = await import('./helpers.js');
    const { startGateway } = await import('../src/gateway/index.js');
    const engine = await startTestServer();
    const dir = tempDir('braid-gw-later-');
    dirs.push(dir);
    const configFile = path.join(dir, 'gateway.json');
    writeFileSync(configFile, JSON.stringify({
      tokens: ['good'],
      databases: [{ database_id: 'default', branches: [{ branch_id: 'later', endpoint: engine.url }, { branch_id: 'main', endpoint: engine.url }] }],
    }));
    const gateway = await startGateway(resolveGatewayConfig({ config: configFile, port: 0, logLevel: 'error' }, {}));
    try {
      for (let i = 0; i < 3; i++) {
        const put = await post(gateway.url, '/v1/records/put', { record: record(`m${i}`) }, { ...GOOD, 'x-braid-branch': 'main' });
        expect(put.status, JSON.stringify(put.body)).toBe(200);
        // each readiness check of the engine probes the missing branch again
        await gateway.app.gateway.engines.upstreamOf({ endpoint: engine.url } as never).check();
      }
      expect((await get(gateway.url, '/v1/ready', { ...GOOD, 'x-braid-branch': 'main' })).status).toBe(200);
      // the missing branch itself is the engine's own answer
      const later = await post(gateway.url, '/v1/records/get', key('m0'), { ...GOOD, 'x-braid-branch': 'later' });
      expect(later.body.code).toBe('branch_not_found');
    } finally {
      await gateway.close();
      await engine.destroy();
    }
  });
});

// found by a black-box review: a branch name two engines of one database report was routed to whichever
// answered last (a write went to one engine, a later read to the other), and a restore through the gateway
// made such a name
describe('gateway over two engines of one database', () => {
  it('refuses a restore into a name another engine holds, and an ambiguous name', async () => {
    const { startTestServer } = await import('./helpers.js');
    const { startGateway } = await import('../src/gateway/index.js');
    const [e1, e2] = [await startTestServer(), await startTestServer()];
    const gateway = await startGateway(gatewayConfig({
      tokens: ['good'],
      port: 0,
      logLevel: 'silent',
      catalog: {
        databases: [{
          database_id: 'default',
          branches: [{ branch_id: 'main', endpoint: e1.url }, { branch_id: 'remote', endpoint: e2.url, upstream_branch_id: 'main' }],
        }],
      },
    }));
    const REMOTE = { ...GOOD, 'x-braid-branch': 'remote' };
    try {
      expect((await post(gateway.url, '/v1/records/put', { record: record('n1', { where: 'e1' }) }, GOOD)).status).toBe(200);
      expect((await post(gateway.url, '/v1/records/put', { record: record('n1', { where: 'e2' }) }, REMOTE)).status).toBe(200);
      expect((await post(gateway.url, '/v1/admin/snapshot', { target: 's1' }, GOOD)).status).toBe(200);
      expect((await post(gateway.url, '/v1/admin/restore', { source: 's1', target: 'dev' }, GOOD)).status).toBe(200);
      const dev = { ...GOOD, 'x-braid-branch': 'dev' };
      expect((await post(gateway.url, '/v1/records/get', key('n1'), dev)).body.record.fields).toEqual({ where: 'e1' });
      // the same name restored on the other engine through the gateway: refused, nothing made there
      expect((await post(gateway.url, '/v1/admin/snapshot', { target: 'r1' }, REMOTE)).status).toBe(200);
      const again = await post(gateway.url, '/v1/admin/restore', { source: 'r1', target: 'dev' }, REMOTE);
      expect(again.status, JSON.stringify(again.body)).toBe(409);
      expect(again.body).toMatchObject({ code: 'branch_exists', error: expect.stringContaining('another engine of the database') });
      expect(((await get(e2.url, '/v1/branches')).body.branches as Array<{ branch_id: string }>).map((b) => b.branch_id)).not.toContain('dev');
      // made on the engine directly, the name is ambiguous through the gateway, for reads and writes alike
      expect((await post(e2.url, '/v1/admin/restore', { source: 'r1', target: 'dev' })).status).toBe(200);
      await get(gateway.url, '/v1/branches', GOOD);
      for (const [route, body] of [['/v1/records/get', key('n1')], ['/v1/records/put', { record: record('n2') }]] as const) {
        const res = await post(gateway.url, route, body, dev);
        expect(res.status, route).toBe(409);
        expect(res.body, route).toMatchObject({ code: 'branch_ambiguous' });
      }
      expect((await post(e1.url, '/v1/records/get', key('n2'), { 'x-braid-branch': 'dev' })).body.record).toBeNull();
      expect((await post(e2.url, '/v1/records/get', key('n2'), { 'x-braid-branch': 'dev' })).body.record).toBeNull();
    } finally {
      await gateway.close();
      await e1.destroy();
      await e2.destroy();
    }
  });

  // found by a black-box review: with one engine stalled, a look-up of a branch the catalog does not name
  // waited the whole upstream timeout (60 s) for that engine's branch list; it waits as long as a
  // readiness check does (5 s), so a request answers well inside this test's limit under a 10-minute one
  it('a stalled engine does not hold the look-up of an unknown branch for the upstream timeout', async () => {
    const { startTestServer } = await import('./helpers.js');
    const { startGateway } = await import('../src/gateway/index.js');
    const e1 = await startTestServer();
    const held: ServerResponse[] = [];
    const stalled = createServer((req, res) => {
      if (req.url === '/v1/ready') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ready: true, ok: true }));
        return;
      }
      held.push(res);
    });
    await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', resolve));
    const stalledUrl = `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`;
    const gateway = await startGateway({
      ...gatewayConfig({
        tokens: ['good'],
        port: 0,
        logLevel: 'silent',
        catalog: { databases: [{ database_id: 'default', branches: [{ branch_id: 'main', endpoint: e1.url }, { branch_id: 'remote', endpoint: stalledUrl, upstream_branch_id: 'main' }] }] },
      }),
      upstreamTimeoutMs: 600_000,
    });
    try {
      const res = await post(gateway.url, '/v1/records/get', key('n1'), { ...GOOD, 'x-braid-branch': 'typo' });
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('branch_not_found');
      // the branch list answers too, the stalled engine's branch listed as unreachable
      const listed = await get(gateway.url, '/v1/branches', GOOD);
      expect(listed.body.branches.find((b: { branch_id: string }) => b.branch_id === 'remote')?.state).toBe('unreachable');
    } finally {
      for (const res of held) res.destroy();
      stalled.closeAllConnections();
      await new Promise((resolve) => stalled.close(resolve));
      await gateway.close();
      await e1.destroy();
    }
  });
});

/**
 * POSTs `body` with Node's client, which reports the answer as soon as it
 * arrives even while the body is still being sent (a server may refuse a
 * body before reading it all); `chunked` sends it without a Content-Length.
 */
function upload(base: string, route: string, body: Buffer, options: { chunked?: boolean; headers?: Record<string, string> } = {}): Promise<{ status: number; body: any }> {
  const url = new URL(base + route);
  const headers: Record<string, string> = { ...JSON_HEADERS, ...options.headers };
  if (!options.chunked) headers['content-length'] = String(body.length);
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
      answered = true;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : null }));
      res.on('error', reject);
    });
    // a server that answered early may close before the upload ends; the answer is what counts
    req.on('error', () => undefined);
    req.on('close', () => {
      if (!answered) reject(new Error(`${route}: the connection closed without an answer`));
    });
    if (options.chunked) {
      for (let at = 0; at < body.length; at += 256 * 1024) req.write(body.subarray(at, at + 256 * 1024));
      req.end();
    } else {
      req.end(body);
    }
  });
}

/** A JSON body of exactly `size` bytes: `template` with its "PAD" string grown to fit. */
function bodyOfSize(template: unknown, size: number): Buffer {
  const text = JSON.stringify(template);
  const pad = size - Buffer.byteLength(text) + 'PAD'.length;
  expect(pad).toBeGreaterThan(0);
  const out = Buffer.from(text.replace('PAD', 'p'.repeat(pad)));
  expect(out.length).toBe(size);
  return out;
}

describe('gateway body limits (found by a black-box test)', () => {
  const putBody = (size: number) => bodyOfSize({ ...record('sized'), fields: { text: 'PAD' } }, size);
  const batchBody = (size: number) => bodyOfSize({ records: [{ ...record('batched'), fields: { text: 'PAD' } }] }, size);
  const queryBody = (size: number) => bodyOfSize({ query: 'FROM notes TENANT "t1" WHERE text MATCHES "PAD" LIMIT 1' }, size);

  // bug: a body the engine refused mid-stream reached the client as 502 upstream_unreachable (write EPIPE)
  it('a body over the engine\'s limit gets the engine\'s 400 body_too_large, with a Content-Length or chunked', async () => {
    const engine = await startTestServer({ config: { bodyLimitBytes: 100_000 } });
    const gateway = await startGateway(gatewayConfig({ engineUrl: engine.url, tokens: ['good'], port: 0, logLevel: 'silent' }));
    try {
      for (const [route, body] of [['/v1/records/put-batch', batchBody], ['/v1/nativeql', queryBody], ['/v1/records/put', putBody]] as const) {
        for (const chunked of [false, true]) {
          const res = await upload(gateway.url, route, body(3_000_000), { chunked, headers: GOOD });
          expect(res, `${route} chunked ${chunked}`).toEqual({ status: 400, body: { code: 'body_too_large', error: expect.any(String) } });
        }
      }
      // and the gateway and engine go on serving
      expect((await post(gateway.url, '/v1/records/put', record('after'), GOOD)).status).toBe(200);
    } finally {
      await gateway.close();
      await engine.destroy();
    }
  });

  // bug: the gateway buffered a put of up to 64 KiB without checking body_limit_bytes, and streamed other bodies unchecked
  it('the gateway holds body_limit_bytes on every route: Content-Length up front, chunked bodies counted', async () => {
    const engine = await startTestServer();
    const gateway = await startGateway(gatewayConfig({ engineUrl: engine.url, tokens: ['good'], port: 0, bodyLimitBytes: 2000, logLevel: 'silent' }));
    try {
      for (const size of [2001, 5000, 65_536, 300_000]) {
        for (const [route, body] of [['/v1/records/put', putBody], ['/v1/records/put-batch', batchBody], ['/v1/nativeql', queryBody]] as const) {
          for (const chunked of [false, true]) {
            const res = await upload(gateway.url, route, body(size), { chunked, headers: GOOD });
            expect(res, `${route} ${size} chunked ${chunked}`).toEqual({ status: 400, body: { code: 'body_too_large', error: 'request body is larger than the limit of 2000 bytes' } });
          }
        }
      }
      expect((await post(engine.url, '/v1/records/get', key('sized'))).body.record).toBeNull();
      // at the limit, it passes
      for (const chunked of [false, true]) {
        expect((await upload(gateway.url, '/v1/records/put', putBody(2000), { chunked, headers: GOOD })).status).toBe(200);
        expect((await upload(gateway.url, '/v1/records/put-batch', batchBody(2000), { chunked, headers: GOOD })).status).toBe(200);
      }
      // refused before the body is read, whatever the route
      const unknown = await upload(gateway.url, '/v1/nope', Buffer.alloc(5000, 0x20), { headers: GOOD });
      expect(unknown.body.code).toBe('body_too_large');
      // the token comes first
      expect((await upload(gateway.url, '/v1/records/put', putBody(5000))).status).toBe(401);
    } finally {
      await gateway.close();
      await engine.destroy();
    }
  });

  // found by a black-box review (at the engine): a refusal sent with the upload unread, on a
  // connection that then closes, reached urllib as a reset under its upload instead of an answer
  it('a client that closes after its request and reads only once its upload is sent gets its refusal, not a reset', async () => {
    const engine = await startTestServer();
    const gateway = await startGateway(gatewayConfig({ engineUrl: engine.url, tokens: ['good'], port: 0, bodyLimitBytes: 2000, logLevel: 'silent' }));
    try {
      const body = Buffer.alloc(24_000_000, 0x20);
      for (const chunked of [false, true]) {
        const tooLarge = parseRawAnswer(await uploadThenRead(gateway.url, '/v1/records/put', body, { chunked, headers: 'Authorization: Bearer good\r\n' }));
        expect(tooLarge, `chunked ${chunked}`).toEqual({ status: 400, body: { code: 'body_too_large', error: expect.any(String) } });
        const noToken = parseRawAnswer(await uploadThenRead(gateway.url, '/v1/records/put', body, { chunked }));
        expect(noToken, `chunked ${chunked}`).toEqual({ status: 401, body: { code: 'unauthorized', error: expect.any(String) } });
      }
    } finally {
      await gateway.close();
      await engine.destroy();
    }
  });

  // bug: the gateway re-wrapped a put in {record, database_id, branch_id}, ~53 bytes more: a body at the limit got 502
  it('forwards a put body as the client sent it, so the engine takes every body the gateway takes', async () => {
    const engine = await startTestServer({ config: { bodyLimitBytes: 50_000 } });
    const gateway = await startGateway(gatewayConfig({ engineUrl: engine.url, tokens: ['good'], port: 0, bodyLimitBytes: 50_000, logLevel: 'silent' }));
    try {
      const bare = putBody(50_000);
      expect(await upload(gateway.url, '/v1/records/put', bare, { headers: GOOD })).toEqual({ status: 200, body: { epoch: expect.any(Number) } });
      const wrapper = bodyOfSize({ record: { ...record('wrapped'), fields: { text: 'PAD' } }, database_id: 'default', branch_id: 'main' }, 50_000);
      expect((await upload(gateway.url, '/v1/records/put', wrapper, { headers: GOOD })).status).toBe(200);
      expect((await post(engine.url, '/v1/records/get', key('sized'))).body.record.fields.text).toHaveLength(JSON.parse(bare.toString()).fields.text.length);
      // an Idempotency-Key hashes the client's own bytes, as at the engine: other whitespace is another body
      const keyed = { ...GOOD, 'idempotency-key': 'raw-bytes' };
      expect((await post(gateway.url, '/v1/records/put', JSON.stringify(record('k')), keyed)).status).toBe(200);
      const replayed = await post(gateway.url, '/v1/records/put', JSON.stringify(record('k')), keyed);
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect((await post(gateway.url, '/v1/records/put', JSON.stringify(record('k'), null, 1), keyed)).body.code).toBe('idempotency_key_reused');
    } finally {
      await gateway.close();
      await engine.destroy();
    }
  });
});
