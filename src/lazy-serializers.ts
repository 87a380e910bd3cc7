/**
 * Response serializers compiled when a route first answers, not as the app
 * boots. fastify compiles every route's response schemas with
 * fast-json-stringify while it boots: 140-160 ms of one core for this
 * service's routes (node --cpu-prof of `braid serve`), which a restart spent
 * before it could listen. Built lazily, each is compiled by the first
 * response that needs it, or by `warm()`, which the server runs once it
 * listens: one serializer per turn of the event loop, so requests go
 * between them. A serializer is the one fastify's default factory builds,
 * with the same options.
 */
import SerializerSelector from '@fastify/fast-json-stringify-compiler';

type Serialize = SerializerSelector.Serializer;
type Compile = () => Serialize;

export class LazySerializers {
  /** Serializers no response has needed yet. */
  private readonly pending = new Set<Compile>();

  /** For fastify's `schemaController.compilersFactory.buildSerializer`. */
  readonly factory: SerializerSelector.SerializerFactory = (externalSchemas, options) => {
    const build = SerializerSelector()(externalSchemas, options);
    return (route) => {
      let serialize: Serialize | undefined;
      const compile: Compile = () => {
        if (!serialize) {
          // a schema fast-json-stringify refuses is never kept: each
          // response that needs it fails (where it had failed the boot)
          serialize = build(route);
          this.pending.delete(compile);
        }
        return serialize;
      };
      this.pending.add(compile);
      return (doc) => compile()(doc);
    };
  };

  /** How many serializers are still to compile. */
  get waiting(): number {
    return this.pending.size;
  }

  /** Compiles the rest, one per turn of the event loop. */
  warm(): void {
    const next = this.pending.values().next();
    if (next.done) return;
    try {
      next.value();
    } catch {
      // not tried again here: the responses that need it fail (above)
      this.pending.delete(next.value);
    }
    setImmediate(() => this.warm()).unref();
  }
}
