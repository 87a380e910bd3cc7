/** Routes whose request bodies the engine reads from their bytes. */
import type { Readable } from 'node:stream';
import { errorCodes, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { loadNative } from '../native/index.js';

/**
 * Bodies at least this long are read into one buffer of their declared
 * length, which the route frees as soon as it is done with it
 * ({@link withBody}); shorter ones are left to V8's collector, as every
 * other allocation is.
 */
const OWNED_BODY_MIN_BYTES = 64 * 1024;

/** A body read into a buffer of its own, and whether a route is still reading it. */
interface OwnedBody {
  bytes: Buffer;
  reading: boolean;
}

const owned = new WeakMap<FastifyRequest, OwnedBody>();

/**
 * Makes `application/json` bodies arrive in `context` as the `Buffer` the
 * client sent, unparsed: the engine reads them (crates/engine/src/wire.rs),
 * and a body it leaves to the service is parsed by the route. Register it in
 * an encapsulated context: every other route keeps the parsing parser.
 *
 * Why not fastify's `parseAs: 'buffer'`: a put-batch body is megabytes (8.7
 * MB for 2,500 records of 256-d vectors), read as 64 KiB chunks and then
 * concatenated, and both the chunks and the whole are external memory that
 * V8 frees only when its collector next runs. Its heuristics let that garbage
 * reach 55-65 MB while a server loads (bench/JOURNAL.md, "Server memory
 * while loading"). Here a body with a declared length is copied, chunk by
 * chunk as it arrives, into one buffer of that length, and the route frees
 * that buffer when it is done ({@link withBody}); each chunk is freed as soon
 * as it is copied.
 */
export function keepBodyBytes(context: FastifyInstance): void {
  context.removeContentTypeParser('application/json');
  context.addContentTypeParser('application/json', (request, payload, done) => {
    readBody(request, payload, (err, body) => {
      if (body) request.rawBody = body;
      done(err, body);
    });
  });
  // a body no handler read (a refusal or a replay answered before it) is
  // freed once its answer is sent
  context.addHook('onResponse', (request, _reply, next) => {
    const body = owned.get(request);
    if (body && !body.reading) release(request, body);
    next();
  });
}

/**
 * Runs a route's handler and frees the body it read once the handler is
 * done with it: after this, `request.body` and `request.rawBody` are empty.
 * The engine holds a body only until the call that reads it settles, so
 * once `handle` has settled nothing reads the body any more.
 */
export async function withBody<T>(request: FastifyRequest, handle: () => Promise<T>): Promise<T> {
  const body = owned.get(request);
  if (!body) return handle();
  body.reading = true;
  try {
    return await handle();
  } finally {
    release(request, body);
  }
}

/**
 * Whether the request's body is a buffer of its own, that the engine may
 * free as soon as it has read it (a put-batch's records, before their
 * commit): the route must not read the body after such a call, unless the
 * engine left the body to the service's own reading.
 */
export function ownsBody(request: FastifyRequest): boolean {
  return owned.has(request);
}

/** Frees an owned body's memory now. */
function release(request: FastifyRequest, body: OwnedBody): void {
  owned.delete(request);
  free(body.bytes);
}

/**
 * Frees a buffer that is the whole of its ArrayBuffer (one of
 * Buffer.allocUnsafeSlow, or a chunk of Node's HTTP parser) now: napi
 * detaches the ArrayBuffer, and V8 frees its memory at once.
 */
function free(bytes: Buffer): void {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) loadNative().releaseBuffer(bytes.buffer as ArrayBuffer);
}

type BodyDone = (err: Error | null, body?: Buffer) => void;

/**
 * Reads a request's body as fastify's own reader does (the route's body
 * limit, the declared length checked against what came, the same errors),
 * into one buffer of the declared length when that is large, else into the
 * chunks concatenated.
 */
function readBody(request: FastifyRequest, payload: Readable, done: BodyDone): void {
  const limit = request.routeOptions.bodyLimit;
  const declared = Number(request.headers['content-length']);
  if (declared > limit) {
    done(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
    return;
  }
  const whole = Number.isSafeInteger(declared) && declared >= OWNED_BODY_MIN_BYTES ? Buffer.allocUnsafeSlow(declared) : undefined;
  const chunks: Buffer[] = [];
  let received = 0;
  let finished = false;
  // the request's own stream (not a hook's transform of it) read by this listener alone
  const ownChunks = whole !== undefined && payload === request.raw && payload.listenerCount('data') === 0;

  const finish = (err: Error | null, body?: Buffer) => {
    finished = true;
    payload.removeListener('data', onData);
    payload.removeListener('end', onEnd);
    payload.removeListener('error', onEnd);
    if (whole) {
      if (body === whole) owned.set(request, { bytes: whole, reading: false });
      else free(whole);
    }
    done(err, body);
  };
  function onData(data: Buffer | string) {
    if (finished) return;
    const chunk = typeof data === 'string' ? Buffer.from(data) : data;
    const at = received;
    received += chunk.length;
    if (received > limit) {
      finish(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
      return;
    }
    if (!whole) {
      chunks.push(chunk);
      return;
    }
    // more than declared is refused at the end; nothing past the buffer is kept
    if (received <= whole.length) chunk.copy(whole, at);
    // Node's HTTP parser gives each chunk an ArrayBuffer of its own, which
    // nothing but this listener sees: freed now, not by a later collection
    if (chunk === data && ownChunks) free(chunk);
  }
  function onEnd(err?: Error | null) {
    if (finished) return;
    if (err != null) {
      const status = (err as { statusCode?: unknown }).statusCode;
      if (!(typeof status === 'number' && status >= 400)) (err as { statusCode?: number }).statusCode = 400;
      finish(err);
      return;
    }
    if (!Number.isNaN(declared) && received !== declared) {
      finish(new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH());
      return;
    }
    finish(null, whole ?? Buffer.concat(chunks, received));
  }
  payload.on('data', onData);
  payload.on('end', onEnd);
  payload.on('error', onEnd);
  payload.resume();
}

/** What fastify answers a serialised object with. */
const JSON_TYPE = 'application/json; charset=utf-8';

/** Sends JSON text the engine wrote, as it is: fastify's serializer would only copy it. */
export function sendJson(reply: FastifyReply, json: Buffer): FastifyReply {
  return reply.type(JSON_TYPE).send(json);
}
