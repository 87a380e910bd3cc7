// Response serializers built on first use (src/lazy-serializers.ts): none is
// compiled as routes are added, each on its first response or by warm(), and
// each writes what fastify's default serializer writes.
import SerializerSelector from '@fastify/fast-json-stringify-compiler';
import { describe, expect, it } from 'vitest';
import { LazySerializers } from '../src/lazy-serializers.js';

const SCHEMA = { type: 'object', properties: { id: { type: 'string' }, n: { type: 'integer' } } };
const route = (url: string, schema: object = SCHEMA) => ({ method: 'POST', url, httpStatus: '200', schema });
const turns = (n: number) => Array.from({ length: n }).reduce<Promise<void>>((p) => p.then(() => new Promise((r) => setImmediate(r))), Promise.resolve());

describe('LazySerializers', () => {
  it('compiles a serializer on its first response, and it writes what the default one writes', () => {
    const lazy = new LazySerializers();
    const compile = lazy.factory(undefined, {});
    const a = compile(route('/a'));
    compile(route('/b'));
    expect(lazy.waiting).toBe(2);
    const doc = { id: 'x', n: 3, extra: 'dropped as the schema says' };
    const eager = SerializerSelector()(undefined, {})(route('/a'));
    expect(a(doc)).toBe(eager(doc));
    expect(JSON.parse(a(doc))).toEqual({ id: 'x', n: 3 });
    expect(lazy.waiting).toBe(1);
  });

  it('warm() compiles the rest, one per turn of the event loop', async () => {
    const lazy = new LazySerializers();
    const compile = lazy.factory(undefined, {});
    for (const url of ['/a', '/b', '/c']) compile(route(url));
    lazy.warm();
    expect(lazy.waiting).toBe(2);
    await turns(4);
    expect(lazy.waiting).toBe(0);
  });

  it('a schema fast-json-stringify refuses fails each response that needs it, as it would have at boot', async () => {
    const lazy = new LazySerializers();
    const compile = lazy.factory(undefined, {});
    const broken = compile(route('/broken', { type: 'object', properties: { a: { $ref: '#/definitions/missing' } } }));
    lazy.warm();
    await turns(2);
    expect(lazy.waiting).toBe(0);
    expect(() => broken({ a: 1 })).toThrow();
    expect(() => broken({ a: 1 })).toThrow();
  });
});
