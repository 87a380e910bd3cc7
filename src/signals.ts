/**
 * Drains and exits on SIGTERM / SIGINT, for `braid serve` and `braid gateway`
 * alike: stops accepting requests, lets in-flight ones finish, then exits
 * 0, or 1 when the close failed.
 */
import type { FastifyInstance } from 'fastify';

export function exitOnSignals(running: { app: FastifyInstance; close(): Promise<void> }): void {
  const stop = (signal: string) => {
    running.app.log.info({ signal }, 'draining');
    running.close().then(
      () => process.exit(0),
      (err) => {
        console.error('shutdown failed:', err);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}
