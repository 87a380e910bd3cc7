/** Routes whose request bodies the engine reads from their bytes. */
import type { FastifyInstance, FastifyReply } from 'fastify';

/**
 * Makes `application/json` bodies arrive in `context` as the `Buffer` the
 * client sent, unparsed: the engine reads them (crates/engine/src/wire.rs),
 * and a body it leaves to the service is parsed by the route. Register it in
 * an encapsulated context: every other route keeps the parsing parser.
 */
export function keepBodyBytes(context: FastifyInstance): void {
  context.removeContentTypeParser('application/json');
  context.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    request.rawBody = body as Buffer;
    done(null, body);
  });
}

/** What fastify answers a serialised object with. */
const JSON_TYPE = 'application/json; charset=utf-8';

/** Sends JSON text the engine wrote, as it is: fastify's serializer would only copy it. */
export function sendJson(reply: FastifyReply, json: Buffer): FastifyReply {
  return reply.type(JSON_TYPE).send(json);
}
