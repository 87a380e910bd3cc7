/** What the gateway's hooks and route plugins share, decorated on its fastify instance as `gateway`. */
import type { GatewayConfig } from './config.js';
import type { Engines } from './engines.js';

export interface GatewayState {
  config: GatewayConfig;
  engines: Engines;
  /** The per-token rate limiter is on (`rateLimitMax` > 0). */
  limiter: boolean;
  /** Every request the gateway received. */
  requests: number;
  /** Requests with a valid token, counted against that token's rate limit. */
  metered: number;
  /** Set once close() starts: requests still arriving get 503 shutting_down. */
  closing: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    gateway: GatewayState;
  }
}
