/**
 * Runs the engine's HTTP service: opens the data directory, listens, and on
 * SIGTERM or SIGINT stops accepting requests, lets in-flight ones finish and
 * closes the store cleanly.
 */
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { Braid } from './engine.js';
import { logEngineEvents } from './engine-events.js';
import type { ServerConfig } from './config.js';

export interface RunningServer {
  app: FastifyInstance;
  engine: Braid;
  url: string;
  close(): Promise<void>;
}

export async function startServer(config: ServerConfig): Promise<RunningServer> {
  // the data directory opens (checkpoint load, WAL replay) on a thread of
  // its own while the routes are built
  const engine = Braid.openInBackground({
    dataDir: config.dataDir,
    maxBatch: config.maxBatch,
    maxVectorDim: config.maxVectorDim,
    receiptRetentionMs: config.receiptRetentionMs,
    historyEpochs: config.historyEpochs,
    checkpointBytes: config.checkpointBytes,
    checkpointRows: config.checkpointRows,
    checkpointIntervalMs: config.checkpointIntervalMs,
    // after a crash the indexers catch up on every core; they start once the
    // server listens, so that a restart is not slowed by them (docs/operations.md)
    deferIndexing: true,
  });
  let app: FastifyInstance;
  let url: string;
  try {
    app = await buildApp({ engine, config, logger: { level: config.logLevel } });
    await engine.ready();
    url = await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    engine.close();
    throw err;
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
      logEngineEvents(app.log, engine.events());
    })();
    return closing;
  };
  return { app, engine, url, close };
}

/** Drains and exits on SIGTERM / SIGINT. */
export function exitOnSignals(server: RunningServer): void {
  const stop = (signal: string) => {
    server.app.log.info({ signal }, 'draining');
    server.close().then(
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
