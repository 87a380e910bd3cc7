/**
 * Runs the engine's HTTP service: opens the data directory, listens, and on
 * SIGTERM, SIGINT or SIGHUP (src/signals.ts) stops accepting requests, lets
 * in-flight ones finish and closes the store cleanly.
 */
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Braid } from './engine.js';
import { openServerEngine } from './server-open.js';
import { prepareQueryChecks } from './services/queries.js';
import { logEngineEvents } from './engine-events.js';
import { BraidError } from './errors.js';
import type { ServerConfig } from './config.js';
import { listenFailure } from './settings.js';

export interface RunningServer {
  app: FastifyInstance;
  engine: Braid;
  url: string;
  close(): Promise<void>;
}

/**
 * Starts the service over `engine`, by default the data directory of
 * `config` opened the server's way (src/server-open.ts). The server owns the
 * engine from here: it closes it when it stops, or when it fails to start.
 */
export async function startServer(config: ServerConfig, engine: Braid = openServerEngine(config)): Promise<RunningServer> {
  let app: FastifyInstance;
  let url: string;
  try {
    // compiled while the data directory opens, not on the first query
    prepareQueryChecks();
    app = await buildApp({ engine, config, logger: { level: config.logLevel } });
    // fastify compiles the routes' validators as it boots: done while the
    // data directory opens (booted by listen, it had waited for the open and
    // compiled after it, about 0.5 s of a 1,000,000-record restart)
    await app.ready();
    await engine.ready();
    url = await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    engine.close();
    throw listenFailure(err, config.host, config.port);
  }
  engine.startIndexing();
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      // connections that go idle while draining are closed as they do
      const reaper = setInterval(() => app.server.closeIdleConnections(), 100);
      try {
        await app.close();
      } finally {
        clearInterval(reaper);
      }
      engine.close();
      // the close's own checkpoint, after the app stopped reading events
      const last = engine.events();
      logEngineEvents(app.log, last);
      // nothing is lost (the WAL replays at the next start), but the close
      // did not do its work: the process exits 1 (src/signals.ts), as
      // docs/operations.md says (found by a black-box review: a full disk's
      // failed close checkpoint had exited 0)
      const failed = last.filter((e) => e.event === 'checkpoint_failed' && e.trigger === 'close');
      if (failed.length > 0) {
        const where = failed.map((e) => `${e.database_id}/${e.branch_id}`).join(', ');
        throw new BraidError('storage_failure', `the close checkpoint failed for ${where}; the next start replays the WAL`);
      }
    })();
    return closing;
  };
  return { app, engine, url, close };
}
