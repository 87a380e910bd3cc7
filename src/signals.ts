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
        // one line, as every other failure of the CLI says it (`braid: <code>: <message>`);
        // a failure without a code (a bug) keeps its stack
        const { code, message } = err as { code?: unknown; message?: unknown };
        if (typeof code === 'string' && typeof message === 'string') console.error(`braid: ${code}: ${message}`);
        else console.error('braid: shutdown failed:', err);
        process.exit(1);
      },
    );
  };
  for (const signal of STOP_SIGNALS) process.once(signal, () => stop(signal));
}
