/**
 * The web console's static files at `/console` (docs/operations.md, "Web
 * console"). The engine and the gateway both serve them with this plugin.
 *
 * The files are the browser build of `src/console` (scripts/build.mjs writes
 * it to `dist/console`). They hold no data: the page asks the public API for
 * everything it shows, with the token typed into the page. So they are served
 * without a token, also where every `/v1` route needs one, because a browser
 * cannot put a bearer token on the request that loads a page.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BraidError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';

export const CONSOLE_PATH = '/console';

/** The console's build (`npm run build`: src/console compiled to dist/console). */
export const CONSOLE_DIR = path.join(PACKAGE_ROOT, 'dist', 'console');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

/**
 * Scripts and styles from this origin only, no inline script, no framing,
 * and API calls to this origin only: a value that slipped past the page's
 * escaping still could not run or send anything elsewhere.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const ROUTES = new Set([CONSOLE_PATH, `${CONSOLE_PATH}/`, `${CONSOLE_PATH}/:file`]);

/**
 * True when the request was routed to one of this plugin's routes: those need
 * no token. Decided by the matched route, not by a path prefix, so a path like
 * `/console/../v1/branches` or `/console/a/b` (no console route) still needs a
 * token, on the engine and on the gateway, which would proxy it.
 */
export function isConsoleRequest(request: FastifyRequest): boolean {
  const url = request.routeOptions.url;
  return url !== undefined && ROUTES.has(url);
}

interface Asset {
  type: string;
  body: Buffer;
}

/** The files of a console build, by name; empty when it was not built. */
export function loadConsoleAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  if (!existsSync(path.join(dir, 'index.html'))) return assets;
  for (const name of readdirSync(dir)) {
    const type = TYPES[path.extname(name)];
    if (type) assets.set(name, { type, body: readFileSync(path.join(dir, name)) });
  }
  return assets;
}

export interface ConsoleOptions {
  /** Directory of the console build (default: CONSOLE_DIR). */
  dir?: string;
  /** Route config for each console route (the gateway turns its rate limiter off for them). */
  routeConfig?: Record<string, unknown>;
}

export async function consoleRoutes(app: FastifyInstance, options: ConsoleOptions = {}): Promise<void> {
  // read once: a handful of small files; a new build needs a restart, as new code does
  const assets = loadConsoleAssets(options.dir ?? CONSOLE_DIR);
  const config = options.routeConfig ?? {};

  const send = (reply: FastifyReply, name: string) => {
    const asset = assets.get(name);
    if (!asset) {
      const why = assets.size === 0 ? 'the console is not built (npm install builds it into dist/console)' : `no console file ${name}`;
      throw new BraidError('route_not_found', why);
    }
    return reply
      .header('content-type', asset.type)
      .header('cache-control', 'no-cache')
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('content-security-policy', CONSOLE_CSP)
      .send(asset.body);
  };

  // the page's relative URLs (main.js, console.css) need the trailing slash
  app.get(CONSOLE_PATH, { schema: { hide: true }, config }, async (_request, reply) => reply.redirect(`${CONSOLE_PATH}/`, 302));
  app.get(`${CONSOLE_PATH}/`, { schema: { hide: true }, config }, async (_request, reply) => send(reply, 'index.html'));
  app.get<{ Params: { file: string } }>(`${CONSOLE_PATH}/:file`, { schema: { hide: true }, config }, async (request, reply) =>
    send(reply, request.params.file),
  );
}
