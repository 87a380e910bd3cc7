/**
 * Any failure of an HTTP request as a `BraidError`, so its body is
 * `{code, error}` with a code of the one table (src/errors.ts): fastify's own
 * errors (body parsing, schema validation, limits) are mapped here once, for
 * the engine's app and the gateway alike.
 */
import { type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { deprecationHeaders } from './deprecation.js';
import { BraidError, isErrorCode, parserMessage } from './errors.js';
import { validationError } from './validation.js';

export function httpError(err: unknown): BraidError {
  if (err instanceof BraidError) return err;
  const e = err as (FastifyError & { validation?: unknown[]; validationContext?: string }) | undefined;
  if (e?.validation) return validationError(e.validation as never, e.validationContext ?? 'body');
  switch (e?.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new BraidError('invalid_json', parserMessage(e));
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new BraidError('body_too_large', 'request body is larger than the configured limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new BraidError('unsupported_media_type', 'request body must be application/json');
    default:
      break;
  }
  if (e instanceof SyntaxError) return new BraidError('invalid_json', e.message);
  if (typeof e?.code === 'string' && isErrorCode(e.code)) return new BraidError(e.code, e.message);
  if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return new BraidError('invalid_request', e.message || 'bad request');
  return new BraidError('internal_error', (e as Error | undefined)?.message || 'internal error');
}

/**
 * The level a failed request's own log line is written at: every 5xx at
 * error, except 503 shutting_down, which a draining server answers by design
 * (a restart behind a load balancer would otherwise log errors by the dozen),
 * and 505 http_version_not_supported, the client's mistake.
 */
export function failureLevel(code: string | undefined): 'warn' | 'error' {
  return code === 'shutting_down' || code === 'http_version_not_supported' ? 'warn' : 'error';
}

/**
 * Logs a refused credential (401 unauthorized, 403 forbidden) at warn, with
 * the client's address, the method and the path, never the token: repeated
 * guesses had left no trace at the default level, and no address at any
 * (found by a black-box review; PostgreSQL logs each failed authentication
 * with the client's host). Engine and gateway alike.
 */
export function logRefusedCredential(request: FastifyRequest, code: string): void {
  if (code !== 'unauthorized' && code !== 'forbidden') return;
  const path = request.url.split('?', 1)[0];
  request.log.warn({ code, method: request.method, path, remote_address: request.socket?.remoteAddress }, 'credentials refused');
}

/** The JSON body of an error answer: `code`, `error`, and the failing item's `index` when there is one. */
export function errorBody(err: BraidError): { code: string; error: string; index?: number } {
  return err.index === undefined ? err.toBody() : { ...err.toBody(), index: err.index };
}

/**
 * fastify's `frameworkErrors` option: what fastify answers itself before any
 * route or hook runs (a path that does not decode, FST_ERR_BAD_URL) gets the
 * error body every other failure has, instead of fastify's own without a code.
 */
export function frameworkErrors(err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const braidErr = httpError(err);
  void reply.status(braidErr.status).send(errorBody(braidErr));
}

/**
 * fastify's `clientErrorHandler`: what Node's HTTP server refuses before
 * fastify has a request (a request line or header that does not parse,
 * headers past Node's 16 KiB, a request not received within the request
 * timeout) is answered with the `{code, error}` body every other failure has,
 * and the connection closed.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  // a connection already being refused: the parser reports each later chunk too
  if (err.code === 'ECONNRESET' || socket.destroyed || refusing.has(socket)) return;
  refusing.add(socket);
  const timedOut = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
  const braidErr = timedOut
    ? new BraidError('request_timeout', 'the request was not received in full within the request timeout')
    : err.code === 'HPE_HEADER_OVERFLOW'
      ? new BraidError('headers_too_large', 'the request headers are larger than the server accepts (16 KiB)')
      : new BraidError('invalid_request', `the request is not valid HTTP/1.1 (${err.code ?? 'parse error'})`);
  let answered = false;
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  // a request still arriving on the connection is counted with this status
  // when its response closes unanswered (unansweredStatus); any other
  // refusal is an answer of its own, counted here
  const ownAnswer = !(inFlight && !inFlight.writableFinished && !inFlight.req.complete);
  const answer = () => {
    if (answered) return;
    answered = true;
    refusedSockets.set(socket, braidErr.status);
    if (socket.writable) socket.write(rawAnswer(braidErr));
    if (ownAnswer) answeredRaw((socket as Socket & { server?: object }).server, 'UNKNOWN', braidErr.status);
    socket.destroy(err);
  };
  // bytes that do not parse behind a request still being answered (a put
  // pipelined with garbage): its answer goes first, since HTTP/1.1 answers
  // in order and this refusal sent before it would read as the put's (found
  // by a black-box review: a committed put answered 400). Not when the
  // request in flight is itself incomplete (timed out, or its client closed
  // mid-body): the refusal is about that one, which will never be answered.
  if (!timedOut && inFlight && !inFlight.writableFinished && inFlight.req.complete) {
    inFlight.once('finish', answer).once('close', answer);
    return;
  }
  answer();
}

/** Listeners of each server to the answers written with no request of fastify's (rawAnswer), which its hooks never see. */
const rawAnswerListeners = new WeakMap<object, Array<(method: string, status: number) => void>>();

/**
 * Calls `listener` with each answer `server` writes to a connection with no
 * request of fastify's to count it by: a request that did not parse, headers
 * past the limit, a `CONNECT`, an `Expect` it cannot meet (found by a
 * black-box review: a 431 and a 400 for bytes that were not HTTP were
 * answered and never counted). The method is `UNKNOWN` where the request
 * line did not parse.
 */
export function onRawAnswer(server: object, listener: (method: string, status: number) => void): void {
  const listeners = rawAnswerListeners.get(server) ?? [];
  listeners.push(listener);
  rawAnswerListeners.set(server, listeners);
}

function answeredRaw(server: object | undefined, method: string, status: number): void {
  for (const listener of (server && rawAnswerListeners.get(server)) || []) listener(method, status);
}

/** Whether a request's client closed its connection before the request was answered. */
export function clientGone(request: FastifyRequest): boolean {
  return request.raw.aborted || request.raw.socket?.destroyed === true;
}

/** Connections clientErrorHandler is refusing (some wait for an answer in flight first). */
const refusing = new WeakSet<object>();

/** Connections refused by clientErrorHandler, with the status written to them: what a request on one that never got its own answer is counted as. */
const refusedSockets = new WeakMap<object, number>();

/**
 * The status a request whose response never finished is counted with: the
 * one written to its connection when the server refused it there (408 for
 * the request timeout), else 499, a client that closed its connection first
 * (as nginx logs it).
 */
export function unansweredStatus(socket: object | null | undefined): number {
  return (socket && refusedSockets.get(socket)) || 499;
}

/** An error answer written straight to a socket, which is then closed. */
function rawAnswer(err: BraidError): string {
  const body = JSON.stringify(errorBody(err));
  return `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

/**
 * A `CONNECT` request, which Node hands to the server's `connect` event
 * rather than to fastify, and with no listener there closed the connection
 * without an answer: Braid is not a proxy, so it is `400 invalid_request`
 * with the `{code, error}` body, and the connection closed.
 */
export function refuseConnect(server: Server): void {
  server.on('connect', (_request: IncomingMessage, socket: Duplex) => {
    // a client that resets meanwhile is no error of the server's
    socket.on('error', () => undefined);
    const err = new BraidError('invalid_request', 'CONNECT is not served: Braid is not a proxy (use GET or POST on a /v1 route)');
    const answer = () => {
      socket.end(rawAnswer(err));
      answeredRaw(server, 'CONNECT', err.status);
    };
    // a request pipelined before it is answered first, as HTTP/1.1 answers
    // in order (found by a recheck: a committed put's client read this 400
    // as its answer, and the put was never answered)
    const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (inFlight && !inFlight.writableFinished) {
      let answered = false;
      const once = () => {
        if (answered) return;
        answered = true;
        answer();
      };
      inFlight.once('finish', once).once('close', once);
      return;
    }
    answer();
  });
}

/**
 * A request whose `Expect` header is not `100-continue`, which Node hands to
 * the server's `checkExpectation` event rather than to fastify, and with no
 * listener there answered 417 with an empty body: the same 417, with the
 * `{code, error}` body every other failure has, and the connection closed
 * (the body the client may still send is not read).
 */
export function refuseExpectation(server: Server): void {
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    const err = new BraidError('expectation_failed', `the Expect header ${JSON.stringify(request.headers.expect ?? '')} cannot be met (only 100-continue is)`);
    const body = JSON.stringify(errorBody(err));
    response.writeHead(err.status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
      ...deprecationHeaders(request.url),
    });
    response.end(body);
    answeredRaw(server, request.method ?? 'UNKNOWN', err.status);
  });
}

const expectsContinue = Symbol('braid.expectsContinue');

/**
 * Holds back the `100 Continue` of a request that sent `Expect:
 * 100-continue` until the request has passed the checks that need no body
 * ([`continueIfExpected`], called by each app once they pass): Node writes
 * the 100 as the headers arrive, so a client without a token, or declaring
 * a body over the limit, was invited to upload it before its 401 or 400
 * (RFC 9110 10.1.1: a server that will refuse should answer without the
 * 100; a black-box review). The request is handed on as Node would.
 */
export function deferContinue(server: Server): void {
  server.on('checkContinue', (request: IncomingMessage & { [expectsContinue]?: boolean }, response: ServerResponse) => {
    request[expectsContinue] = true;
    server.emit('request', request, response);
  });
}

/**
 * Sends the held `100 Continue` ([`deferContinue`]) once the request's checks
 * have passed, refusing first a body declared larger than `bodyLimit` (what
 * reading it would refuse). A request that did not ask for it costs one
 * property read.
 */
export function continueIfExpected(request: FastifyRequest, reply: FastifyReply, bodyLimit: number): void {
  const raw = request.raw as IncomingMessage & { [expectsContinue]?: boolean };
  if (!raw[expectsContinue]) return;
  if (Number(request.headers['content-length']) > bodyLimit) {
    throw new BraidError('body_too_large', 'request body is larger than the configured limit');
  }
  raw[expectsContinue] = false;
  reply.raw.writeContinue();
}

/** Whether a request still waits for the `100 Continue` it asked for: its client sends no body until then. */
function awaitsContinue(request: IncomingMessage): boolean {
  return (request as IncomingMessage & { [expectsContinue]?: boolean })[expectsContinue] === true;
}

/**
 * Sends a refusal. When the connection closes after it (the client sent
 * `Connection: close`, or HTTP/1.0) while the client is still sending its
 * body, the rest of the body is read and dropped first: a socket closed
 * with its upload unread is reset, and the reset can reach the client
 * before it has read the answer (Python's urllib saw only a broken pipe
 * under a 400 body_too_large). On a keep-alive connection Node reads and
 * drops the rest after the answer, so nothing waits. A client that stalls
 * is cut off by the request timeout.
 */
export function sendRefusal(request: FastifyRequest, reply: FastifyReply, status: number, body: unknown): FastifyReply | Promise<void> {
  const raw = request.raw;
  const closes = !reply.raw.shouldKeepAlive || /close/i.test(String(reply.getHeader('connection') ?? ''));
  // a client waiting for its 100 Continue sends no body to wait for (Node closes the connection after
  // a final answer sent without the 100)
  if (!closes || raw.complete || raw.destroyed || awaitsContinue(raw)) return reply.status(status).send(body);
  return new Promise<void>((resolve) => {
    const done = () => {
      raw.off('end', done).off('close', done).off('error', done);
      resolve();
    };
    raw.on('end', done).on('close', done).on('error', done);
    raw.resume();
  }).then(() => {
    reply.status(status).send(body);
  });
}

/**
 * Node's server options that make fastify's `requestTimeout` hold: Node only
 * looks for requests past it every `connectionsCheckingInterval` (30 s by
 * default, which would let a 60 s timeout run to 90 s: here a quarter of the
 * timeout, 50 ms to 30 s), and a request timeout shorter than
 * `headersTimeout` (60 s by default) did not fire at all on Node 20.20 (a
 * stalled body was never answered), so the headers get no longer than the
 * whole request.
 */
export function requestTimeoutOptions(requestTimeoutMs: number): { connectionsCheckingInterval: number; headersTimeout: number; requireHostHeader: false } {
  // a request without Host is refused by src/request-target.ts, with a {code, error} body
  const requireHostHeader = false;
  if (requestTimeoutMs <= 0) return { connectionsCheckingInterval: 30_000, headersTimeout: 60_000, requireHostHeader };
  return {
    connectionsCheckingInterval: Math.min(30_000, Math.max(50, Math.floor(requestTimeoutMs / 20))),
    headersTimeout: Math.min(60_000, requestTimeoutMs),
    requireHostHeader,
  };
}

/**
 * Answers the requests of a client that half-closed its connection once it
 * had sent them (`shutdown(SHUT_WR)`, as `nc -N` and some HTTP/1.0 clients
 * do): by default Node ends the socket on the client's FIN, so a put that
 * committed was never answered and its client could not tell whether it
 * had been written (found by a black-box review: 9 of 10 put-batches).
 * With half-open connections allowed, Node answers the requests it has read
 * and then ends the connection (`httpAllowHalfOpen`, read by Node's
 * `socketOnEnd` since Node 0.x though not in its typings).
 */
export function answerHalfClosed(server: Server): void {
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
}

/**
 * Runs the requests a client pipelines on one connection one after another,
 * each once the answer before it is finished, as they were sent. Node hands
 * every pipelined request to the server at once and only keeps the answers
 * in order, so a `get` pipelined behind a `put` of the same record ran
 * beside it and answered `null` (a black-box review: 43 of 50), and a put
 * with a large body (read on a worker) committed after the smaller put of
 * the same record pipelined behind it; RFC 9112
 * (9.3.2) lets a server run pipelined requests in parallel only when all of
 * them are safe methods, and Braid's reads are POSTs.
 *
 * Node gives a response its socket at once when no answer is ahead of it on
 * the connection, and otherwise (`'socket'`) when the one ahead finishes, so
 * a request that is not pipelined costs one property read. A pipelined
 * request whose connection closes before its turn never runs.
 */
export function answerPipelinedInOrder(server: Server): void {
  const handlers = server.listeners('request') as Array<(req: IncomingMessage, res: ServerResponse) => void>;
  const handle = handlers[0];
  if (handle === undefined || handlers.length !== 1) throw new Error(`answerPipelinedInOrder expects the server's one request handler, found ${handlers.length}`);
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (res.socket) handle(req, res);
    else res.once('socket', () => handle(req, res));
  });
}
