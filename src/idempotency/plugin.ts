/**
 * Marks a plugin function as not encapsulated, so its hooks apply to the
 * routes of the app that registers it (what fastify-plugin does).
 */
import type { FastifyPluginAsync } from 'fastify';

export default function fp<T>(plugin: FastifyPluginAsync<T & object>): FastifyPluginAsync<T & object> {
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}
