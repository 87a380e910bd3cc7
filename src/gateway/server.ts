/**
 * Runs the gateway: builds it, listens, and on SIGTERM, SIGINT or SIGHUP
 * (src/signals.ts) stops accepting requests, lets in-flight ones finish and
 * closes the engine pools.
 */
import type { FastifyInstance } from 'fastify';
import { buildGateway } from './app.js';
import type { GatewayConfig } from './config.js';
import { listenFailure } from '../settings.js';

export interface RunningGateway {
  app: FastifyInstance;
  url: string;
  config: GatewayConfig;
  close(): Promise<void>;
}

export async function startGateway(config: GatewayConfig): Promise<RunningGateway> {
  const app = await buildGateway({ config, logger: { level: config.logLevel } });
  let url: string;
  try {
    url = await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    await app.close();
    throw listenFailure(err, config.host, config.port);
  }
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= app.close();
    return closing;
  };
  return { app, url, config, close };
}
