/**
 * Each request's logger (`request.log`, bound to its `request_id`), made
 * only when something logs through it.
 *
 * fastify gives every request a pino child logger, and pino's `child()`
 * serialises the bindings and builds a logger object at once: a few
 * microseconds of the server's one JavaScript thread per request, spent for
 * nothing at the default level (warn), where a request that succeeds logs no
 * line. This factory hands fastify a stand-in that answers level checks from
 * the parent and makes the real child at the first line written.
 */
import type { FastifyBaseLogger } from 'fastify';

type Bindings = Parameters<FastifyBaseLogger['child']>[0];
type ChildLoggerOptions = NonNullable<Parameters<FastifyBaseLogger['child']>[1]>;
type Level = FastifyBaseLogger['level'];

class LazyRequestLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
  ) {}

  /** The real child logger, made once. */
  private get real(): FastifyBaseLogger {
    this.made ??= this.parent.child(this.bindings);
    return this.made;
  }

  get level(): Level {
    return this.made?.level ?? this.parent.level;
  }

  set level(level: Level) {
    this.real.level = level;
  }

  isLevelEnabled(level: string): boolean {
    const logger = (this.made ?? this.parent) as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean };
    return logger.isLevelEnabled?.(level) ?? true;
  }

  fatal(...args: unknown[]): void {
    this.write('fatal', args);
  }

  error(...args: unknown[]): void {
    this.write('error', args);
  }

  warn(...args: unknown[]): void {
    this.write('warn', args);
  }

  info(...args: unknown[]): void {
    this.write('info', args);
  }

  debug(...args: unknown[]): void {
    this.write('debug', args);
  }

  trace(...args: unknown[]): void {
    this.write('trace', args);
  }

  silent(): void {}

  private write(level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace', args: unknown[]): void {
    const real = this.real;
    (real[level] as (...args: unknown[]) => void).apply(real, args);
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.real.child(bindings, options);
  }
}

/**
 * fastify's `childLoggerFactory`: the stand-in above, or pino's own child
 * when the route asks for options of its own (a route's `logLevel`).
 */
export function lazyRequestLogger(logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  if (Object.keys(options).length > 0) return logger.child(bindings, options);
  return new LazyRequestLogger(logger, bindings) as unknown as FastifyBaseLogger;
}
