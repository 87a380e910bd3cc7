/**
 * Engine events in the service log. The engine records them per branch
 * (crates/engine/src/storage/events.rs): recovery at open, checkpoints, the
 * indexer catching up or failing, storage faults. The server drains them
 * when it is ready, every second, and when it closes, and writes one line
 * per event at the event's level: `msg` and `event` are the event's name,
 * beside `database`, `branch`, `at_ms` and its fields (counts, sizes,
 * durations, error messages; never record contents). docs/operations.md,
 * "Engine events", lists them.
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Engine, EngineEvent } from './native/engine.js';

export const EVENT_POLL_MS = 1000;

export function logEngineEvents(log: FastifyBaseLogger, events: EngineEvent[]): void {
  for (const { level, database_id, branch_id, ...fields } of events) {
    log[level]({ database: database_id, branch: branch_id, ...fields }, fields.event);
  }
}

/** Logs `engine`'s events while `app` runs. */
export function pollEngineEvents(app: FastifyInstance, engine: Engine, intervalMs = EVENT_POLL_MS): void {
  const drain = (): void => {
    try {
      logEngineEvents(app.log, engine.events());
    } catch (err) {
      app.log.error({ err }, 'engine events could not be read');
    }
  };
  let timer: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    // the app boots while the data directory opens (src/server.ts), and
    // reading events waits for the open: wait for it here without holding
    // the thread; when the open failed there are no events to read and the
    // server reports the open's error
    try {
      await engine.ready();
    } catch {
      return;
    }
    drain();
    timer = setInterval(drain, intervalMs);
    timer.unref();
  });
  app.addHook('onClose', async () => {
    clearInterval(timer);
    drain();
  });
}
