/**
 * Request bodies through the gateway, and the one limit on them
 * (`body_limit_bytes`), held on every route by the gateway itself: a
 * declared `Content-Length` over it is refused before the body is read, and
 * a body without one (chunked) is counted as it streams to the engine. Over
 * the limit is `400 body_too_large`, as the engine answers; the engine is
 * never left to refuse a body mid-stream, which had reached the client as a
 * 502 (the engine resets a connection whose body it refused).
 */
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { BraidError } from '../errors.js';

/** Bodies and engine answers up to this size are buffered and sent in one write instead of streamed. */
export const SMALL_BODY_BYTES = 64 * 1024;

function tooLarge(limit: number): BraidError {
  return new BraidError('body_too_large', `request body is larger than the limit of ${limit} bytes`);
}

/** The body length a request declares, or undefined (none, or chunked). */
function declaredLength(headers: IncomingHttpHeaders): number | undefined {
  const length = Number(headers['content-length']);
  return headers['content-length'] !== undefined && Number.isSafeInteger(length) ? length : undefined;
}

/** Refuses a request whose declared body is over `limit` (400 body_too_large), whatever its route. */
export function checkDeclaredLength(headers: IncomingHttpHeaders, limit: number): void {
  const length = declaredLength(headers);
  if (length !== undefined && length > limit) throw tooLarge(limit);
}

/** Whether a request carries a body. */
export function hasBody(headers: IncomingHttpHeaders): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && length !== '0';
}

/**
 * The gateway's one content-type parser: a small body of a known length
 * becomes a Buffer, any other stays a stream. Its length was checked against
 * the limit before (checkDeclaredLength, a preParsing hook), and Node's
 * parser delivers exactly the declared length.
 */
export function bufferSmallBodies(request: FastifyRequest, payload: IncomingMessage, done: (err: Error | null, body?: unknown) => void): void {
  const length = declaredLength(request.headers);
  if (length === undefined || length > SMALL_BODY_BYTES) {
    done(null);
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  payload.on('data', (chunk: Buffer) => {
    size += chunk.length;
    chunks.push(chunk);
  });
  payload.on('end', () => done(null, Buffer.concat(chunks, size)));
  payload.on('error', (err) => done(err));
}

/** Reads a whole request body, up to `limit` bytes (400 body_too_large past it). */
export function readBody(raw: IncomingMessage, limit: number): Promise<Buffer> {
  checkDeclaredLength(raw.headers, limit);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      // the rest is read and dropped (the stream keeps flowing), so the
      // client gets the answer instead of a connection reset under its upload
      raw.off('data', onData).off('end', onEnd).on('data', () => undefined);
      reject(tooLarge(limit));
    };
    const onEnd = () => resolve(Buffer.concat(chunks, size));
    raw.on('data', onData).on('end', onEnd).once('error', reject);
  });
}

/**
 * A streamed request body that fails with 400 body_too_large once more than
 * `limit` bytes have passed; `exceeded` says whether it did, so a failed
 * upstream request is told apart from an engine that could not be reached.
 */
export class LimitedBody extends Transform {
  exceeded = false;
  private size = 0;

  constructor(private readonly source: IncomingMessage, private readonly limit: number) {
    super();
    source.on('error', (err) => this.destroy(err));
    source.pipe(this);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.size += chunk.length;
    if (this.size <= this.limit) {
      callback(null, chunk);
      return;
    }
    this.exceeded = true;
    callback(tooLarge(this.limit));
  }

  // over the limit, failed or abandoned: the client's rest is read and dropped, so it gets the
  // gateway's answer instead of a connection reset under its upload
  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.source.unpipe(this);
    this.source.resume();
    callback(err);
  }

  /** The 400 this body answers with, once it has gone over the limit. */
  get error(): BraidError {
    return tooLarge(this.limit);
  }
}
