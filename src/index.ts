/** Braid's public module: the embedded API, the HTTP app and the server. */
export { Braid } from './engine.js';
export type * from './engine.js';
export { BraidError, ERROR_STATUS, statusOf, type ErrorCode } from './errors.js';
export { buildApp, type AppOptions } from './app.js';
export { startServer, type RunningServer } from './server.js';
export { DEFAULTS, fromEnv, type ServerConfig } from './config.js';

import { Braid, type OpenOptions } from './engine.js';

/** Opens a data directory in-process: `const db = open({ dataDir: './data' })`. */
export function open(options: OpenOptions): Braid {
  return Braid.open(options);
}
