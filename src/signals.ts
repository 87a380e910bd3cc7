/**
 * Drains and exits on SIGTERM, SIGINT or SIGHUP, for `braid serve` and
 * `braid gateway` alike: stops accepting requests, lets in-flight ones
 * finish, then exits 0, or 1 when the close failed.
 */
import type { FastifyInstance } from 'fastify';

/**
 * The signals that stop a server. SIGHUP is among them: a closed terminal
 * or a supervisor's hang-up had killed the process at once (status 129),
 * with no drain and no close checkpoint.
 */
export const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

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
  for (const signal of STOP_SIGNALS) process.once(signal, () => stop(signal));
}
