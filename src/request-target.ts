/**
 * What a request line may name, checked before anything else reads it, by
 * the engine and the gateway alike.
 *
 * Authorisation decides by path, and fastify's router decodes `%xx` and
 * accepts an absolute-form target (`POST http://x/v1/records/put`): a check
 * reading the raw target saw `/v1/records/%70ut` or `http://x/...`, an
 * unknown path that needs only `read`, while the router ran the put. Braid's
 * routes are plain ASCII paths, so a target is taken only as an origin-form
 * path (it starts with `/`) without percent-escapes or a fragment (`#`,
 * where the router also cuts the path); anything else is
 * `400 invalid_request`, whatever the token. A gateway forwarding the target
 * as it is then forwards exactly the path it checked.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { BraidError } from './errors.js';

/** The path of a request target, without its query. */
export function pathOf(url: string): string {
  return url.split('?', 1)[0]!;
}

/**
 * How many lines of header `name` (lower case) a request's raw headers
 * (name, value, name, value, ...) hold: Node joins or drops repeats of a
 * header, so only these tell that one was sent twice.
 */
export function headerLines(rawHeaders: string[], name: string): number {
  let count = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const line = rawHeaders[i]!;
    if (line.length === name.length && line.toLowerCase() === name) count += 1;
  }
  return count;
}

const SINGLE_HEADERS = ['host', 'content-type', 'idempotency-key'] as const;

/** The first of Host, Content-Type and Idempotency-Key that `rawHeaders` holds more than once, in one pass. */
function repeatedSingleHeader(rawHeaders: string[]): (typeof SINGLE_HEADERS)[number] | undefined {
  let seen = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const line = rawHeaders[i]!;
    // every name here is 4, 12 or 15 characters: most lines are not looked at twice
    if (line.length !== 4 && line.length !== 12 && line.length !== 15) continue;
    const at = SINGLE_HEADERS.indexOf(line.toLowerCase() as (typeof SINGLE_HEADERS)[number]);
    if (at < 0) continue;
    if (seen & (1 << at)) return SINGLE_HEADERS[at];
    seen |= 1 << at;
  }
  return undefined;
}

/** Throws `400 invalid_request` for a target that is not a plain path, or an HTTP/1.1 request without exactly one `Host`. */
export function checkRequestTarget(request: { url: string; headers: IncomingHttpHeaders; raw: { httpVersion: string; httpVersionMajor: number; rawHeaders: string[] } }): void {
  const pathname = pathOf(request.url);
  if (!pathname.startsWith('/')) {
    throw new BraidError('invalid_request', `the request target must be a path starting with /, not ${JSON.stringify(request.url.slice(0, 200))}`);
  }
  if (pathname.includes('%')) {
    throw new BraidError('invalid_request', `the request path ${JSON.stringify(pathname.slice(0, 200))} holds a percent-escape; Braid's routes are plain paths (write /v1/records/put, not an encoded form)`);
  }
  // a fragment is the client's own and never sent (RFC 9110 7.1); the router
  // cuts the path at `#`, so `/v1/records/put#x` would run the put
  if (request.url.includes('#')) {
    throw new BraidError('invalid_request', `the request target ${JSON.stringify(request.url.slice(0, 200))} holds a fragment (#); send the path and query only`);
  }
  // Node's parser takes `HTTP/2.0` in a request line, and a line without a
  // version as HTTP/0.9, and fastify answered them as HTTP/1.1 requests
  if (request.raw.httpVersionMajor !== 1) {
    throw new BraidError('http_version_not_supported', `HTTP/${request.raw.httpVersion} is not supported: send HTTP/1.1 (or 1.0) requests`);
  }
  // RFC 9112 3.2: a server answers 400 to an HTTP/1.1 request without Host
  // (Node would, with an empty body; it is told not to, so the answer has a code)
  if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
    throw new BraidError('invalid_request', 'an HTTP/1.1 request must carry a Host header');
  }
  // and to one with more than one Host line: Node keeps the first and drops
  // the others, so which host was meant would be a guess. So with the other
  // headers that hold one value: Node kept the first Content-Type (a body
  // sent as `application/json` and `text/plain` was read as JSON), and joined
  // two Idempotency-Keys into one ("a, b"), which the gateway forwarded and
  // the engine stored as a key neither request meant (black-box reviews)
  const repeated = repeatedSingleHeader(request.raw.rawHeaders);
  if (repeated === 'idempotency-key') throw new BraidError('idempotency_key_invalid', 'Idempotency-Key was sent more than once');
  if (repeated !== undefined) {
    throw new BraidError('invalid_request', `the request carries more than one ${repeated === 'host' ? 'Host' : 'Content-Type'} header; send one`);
  }
  // JSON is UTF-8 (RFC 8259 8.1): a body labelled with another charset was
  // read as UTF-8 all the same (latin1's é became a replacement character)
  const type = request.headers['content-type'];
  // `application/json` alone (16 characters) is most requests' type: no pattern for it
  if (type !== undefined && type.length > 16 && /charset/i.test(type)) {
    const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(type)?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      throw new BraidError('unsupported_media_type', `a JSON body is UTF-8 (RFC 8259): charset=${charset.slice(0, 40)} is not accepted; send it as UTF-8, with charset=utf-8 or no charset`);
    }
  }
  // a body the server cannot read is refused on every route, by the engine
  // and the gateway alike (the gateway routes a put by its body, so a body
  // it could not read would pass unrouted); the gateway had taken a GET it
  // answers itself with `Content-Encoding: gzip` that the engine refused
  const encoding = request.headers['content-encoding'];
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
    throw new BraidError('unsupported_content_encoding', `Content-Encoding ${encoding.slice(0, 200)} is not accepted: send the body uncompressed`);
  }
  // Node decodes only `chunked` and passes any other transfer coding's
  // bytes on as if they were the body (`gzip, chunked` read compressed bytes
  // as JSON); RFC 9112 6.1 lets a server refuse a coding it does not apply
  const transfer = request.headers['transfer-encoding'];
  if (transfer !== undefined && transfer.replace(/\s/g, '').toLowerCase() !== 'chunked') {
    throw new BraidError('unsupported_content_encoding', `Transfer-Encoding ${JSON.stringify(transfer.slice(0, 200))} is not accepted: send the body with Content-Length or as chunked only, uncompressed`);
  }
}
