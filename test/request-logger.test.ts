import { Writable } from 'node:stream';
import Fastify from 'fastify';
import { describe, expect, it, vi } from 'vitest';
import type { FastifyBaseLogger } from 'fastify';
import { lazyRequestLogger } from '../src/request-logger.js';

function logger(level: string) {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
      done();
    },
  });
  return { parent: Fastify({ logger: { level, stream } }).log, lines };
}

describe('a request logger', () => {
  it('makes its pino child only when a line is written, and the line carries the request id', () => {
    const { parent, lines } = logger('warn');
    const child = vi.spyOn(parent, 'child');
    const log = lazyRequestLogger(parent, { request_id: 'r-1' }, {}) as FastifyBaseLogger & { isLevelEnabled(level: string): boolean };
    expect(log.level).toBe('warn');
    expect(log.isLevelEnabled('info')).toBe(false);
    expect(log.isLevelEnabled('error')).toBe(true);
    log.info({ a: 1 }, 'not written');
    log.debug('not written either');
    // below the level nothing is logged; the child exists from the first call on
    expect(lines).toHaveLength(0);
    log.warn({ code: 'x' }, 'written');
    log.error(new Error('boom'));
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines).toMatchObject([
      { level: 40, request_id: 'r-1', code: 'x', msg: 'written' },
      { level: 50, request_id: 'r-1', err: { message: 'boom' } },
    ]);
    const nested = log.child({ part: 'graphql' });
    nested.warn('nested');
    expect(lines.at(-1)).toMatchObject({ request_id: 'r-1', part: 'graphql', msg: 'nested' });
  });

  it('makes no child at all for a request that logs nothing', () => {
    const { parent } = logger('warn');
    const child = vi.spyOn(parent, 'child');
    const log = lazyRequestLogger(parent, { request_id: 'r-2' }, {});
    expect(log.level).toBe('warn');
    expect(child).not.toHaveBeenCalled();
  });

  it('gives a route with options of its own (a logLevel) pino\'s child at once', () => {
    const { parent, lines } = logger('warn');
    const log = lazyRequestLogger(parent, { request_id: 'r-3' }, { level: 'info' });
    log.info('route level');
    expect(lines).toMatchObject([{ level: 30, request_id: 'r-3', msg: 'route level' }]);
  });
});
