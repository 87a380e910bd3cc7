/** The gateway: bearer auth, per-token rate limits and managed routing in front of engines. */
export { buildGateway, type GatewayOptions, type GatewayState } from './app.js';
export { GATEWAY_SERVICE_NAME } from './ops.js';
export { startGateway, type RunningGateway } from './server.js';
/** Drains and exits on SIGTERM, SIGINT or SIGHUP (the same as `braid serve`'s). */
export { exitOnSignals as exitGatewayOnSignals } from '../signals.js';
export {
  GATEWAY_DEFAULTS,
  GatewayConfigError,
  gatewayConfig,
  parseCatalog,
  resolveGatewayConfig,
  singleEngineCatalog,
  type Catalog,
  type CatalogBranch,
  type CatalogDatabase,
  type GatewayConfig,
  type GatewayFlags,
} from './config.js';
export { Router, parsePutBody, type Route } from './routing.js';
export { TokenSet } from '../auth.js';
export { Upstream, isUnreachable, type Readiness } from './upstream.js';
