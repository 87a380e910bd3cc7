/**
 * Idempotency-Key for the routes marked (idem) in the spec: 2, 3, 5, 7, 9,
 * 10 and 11, and for `POST /v1/query`, the JSON form of route 2.
 *
 * - The key is scoped by method and path, by the client's token (a digest
 *   of it, never the token) and by the branch the request addresses (where
 *   the receipt is stored); the receipt holds a SHA-256 of the raw body.
 * - Same key and same raw body: the first successful response is replayed
 *   (same status and body) with `Idempotent-Replayed: true`, without running
 *   the request again. A different body: 409 `idempotency_key_reused`.
 * - Write routes (5, 9, 11) hand their key to the records service
 *   (src/services/records.ts), whose receipt the engine commits in the same
 *   WAL frame as the records: a crash keeps both or neither. GraphQL's write
 *   mutations do the same per field, snapshot and restore write the key with
 *   what they create. Every route also stores the response's receipt right
 *   after it succeeds, except the write routes, whose receipt is committed.
 * - A second request with a key whose first request is still running waits
 *   for it and then replays (or gets the 409). Within one engine process a
 *   keyed request never executes twice; the engine re-checks receipts inside
 *   its commit, so even a race between two processes cannot double-write.
 * - Failed requests (any non-2xx, and a GraphQL 200 with `errors`) store
 *   nothing and may be retried. A GraphQL 200 with `errors` whose document
 *   committed some mutations (each under a key of its own) stores a mark:
 *   the same body again runs the document again, each committed mutation
 *   answering from its own receipt, and another body is 409
 *   `idempotency_key_reused`, as for any key already used.
 * - Keys are 1-255 printable ASCII characters; others are 400.
 * - A keyed read's response is stored whole up to 1 MiB
 *   ({@link MAX_STORED_RESPONSE_BYTES}), while the branch's receipts hold
 *   less than their memory budget (`BRAID_RECEIPT_MEMORY_BYTES`). Past
 *   either only its SHA-256 is stored: a retry runs the read again and answers it (replayed) when it
 *   hashes the same, else 409 `idempotency_response_too_large` (the data
 *   changed since; send a new key). The digest leaves out `explain` and
 *   `next_cursor` members, which describe a run (measured timings, a fresh
 *   cursor), not its answer.
 */
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from './plugin.js';
import { BraidError } from '../errors.js';
import { parseRequestJson } from '../json.js';
import { headerLines } from '../request-target.js';
import type { BranchRef, Engine, RequestKey } from '../native/engine.js';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAY_HEADER = 'idempotent-replayed';
export const MAX_KEY_LENGTH = 255;
/** The largest response a keyed read stores whole; larger ones are stored as a digest. */
export const MAX_STORED_RESPONSE_BYTES = 1 << 20;
/**
 * A keyed read's answer longer than this is sent to the engine with its
 * digest, which the engine stores instead once the branch's receipts hold
 * their memory budget (`BRAID_RECEIPT_MEMORY_BYTES`); shorter ones are
 * stored whole, as small as a write's receipt.
 */
const DIGEST_ALTERNATIVE_MIN_BYTES = 1024;
/** Marks a receipt body that holds the digest of a response too large to store. */
const DIGEST_MARK = '$braid_response_digest';

interface StoredDigest {
  [DIGEST_MARK]: true;
  sha256: string;
  bytes: number;
}

/**
 * Members that describe a run rather than its answer: the explain (measured
 * timings), a fresh cursor for the same ranked list, and a row's
 * `freshness_penalty` (1 while the row is read from the hot overlay, 0 once
 * the index holds it: informational, never in `final_score`; a retry after
 * the indexer caught up had been refused as a changed answer, found by a
 * black-box review).
 */
const RUN_MEMBERS = new Set(['explain', 'next_cursor', 'freshness_penalty']);

/** SHA-256 of a response's answer: its JSON without the members that describe the run. */
function answerDigest(text: string): string {
  const answer = JSON.stringify(JSON.parse(text), (key, value: unknown) => (RUN_MEMBERS.has(key) ? undefined : value));
  return hashBody(answer);
}

/** Marks the receipt of a GraphQL document that failed after committing some of its mutations. */
const PARTIAL_MARK = '$braid_partly_committed';

function isPartial(body: unknown): boolean {
  return body !== null && typeof body === 'object' && (body as Record<string, unknown>)[PARTIAL_MARK] === true;
}

function storedDigest(body: unknown): StoredDigest | undefined {
  return body !== null && typeof body === 'object' && (body as Record<string, unknown>)[DIGEST_MARK] === true
    ? (body as StoredDigest)
    : undefined;
}

/** The routes that accept Idempotency-Key (method + path). */
export const IDEMPOTENT_ROUTES = new Set([
  'POST /v1/nativeql',
  'POST /v1/query',
  'POST /v1/admin/restore',
  'POST /v1/insert',
  'POST /v1/graphql',
  'POST /v1/records/put-batch',
  'POST /v1/admin/snapshot',
  'POST /v1/records/put',
]);

const GRAPHQL_ROUTE = 'POST /v1/graphql';

/** Whether a GraphQL response reports errors. */
function hasErrors(answer: unknown): boolean {
  const errors = answer !== null && typeof answer === 'object' ? (answer as { errors?: unknown }).errors : undefined;
  return Array.isArray(errors) && errors.length > 0;
}

/** Routes whose engine write carries the receipt atomically. */
const WRITE_ROUTES = new Set(['POST /v1/insert', 'POST /v1/records/put-batch', 'POST /v1/records/put']);

export interface IdempotencyContext {
  scopedKey: string;
  bodyHash: string;
  branch: BranchRef;
  /** Set once the receipt has been committed with the write. */
  committed: boolean;
  /** Set by the GraphQL route when a failed document committed some of its (keyed) mutations. */
  partial?: boolean;
  /** A retry of a read whose response was too large to store: the digest it must match. */
  expect?: StoredDigest;
  /** Called once the request's answer is decided (its onSend hooks ran): frees the key's claim if the client is gone. */
  handled?: () => void;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request body as it came: text, or bytes where a route reads them itself (put-batch). */
    rawBody?: string | Buffer;
    idempotency?: IdempotencyContext;
  }
}

/**
 * SHA-256 of a raw body. Bytes hash as the text they decode to (invalid
 * UTF-8 as its replacement characters), so a body hashes the same whichever
 * way its route read it.
 */
export function hashBody(raw: string | Buffer | undefined): string {
  const text = raw === undefined || typeof raw === 'string' || isUtf8(raw) ? raw ?? '' : raw.toString('utf8');
  return createHash('sha256').update(text).digest('hex');
}

function validKey(key: string): boolean {
  return key.length >= 1 && key.length <= MAX_KEY_LENGTH && /^[\x20-\x7e]+$/.test(key);
}

/**
 * The key of a keyed request, for a service that writes it with its work:
 * the records of a write (committed in the same WAL frame), a snapshot or a
 * restored branch. None for a request without a key.
 */
export function requestKeyOf(request: FastifyRequest): RequestKey | undefined {
  const ctx = request.idempotency;
  return ctx && { key: ctx.scopedKey, body_hash: ctx.bodyHash };
}

/**
 * The key of a keyed write route (5, 9, 11), whose receipt the engine commits
 * with the records: nothing is stored after the response.
 */
export function writeKeyOf(request: FastifyRequest): RequestKey | undefined {
  const ctx = request.idempotency;
  if (!ctx) return undefined;
  ctx.committed = true;
  return { key: ctx.scopedKey, body_hash: ctx.bodyHash };
}

/** Sends a stored response again. */
export function replay(reply: FastifyReply, status: number, body: unknown): FastifyReply {
  return reply
    .status(status)
    .header(REPLAY_HEADER, 'true')
    .type('application/json; charset=utf-8')
    .serializer(JSON.stringify)
    .send(body);
}

export interface IdempotencyOptions {
  engine: Engine;
  /** Where a request's receipts live: the branch its write goes to. */
  branchOf: (request: FastifyRequest) => BranchRef;
}

async function plugin(app: FastifyInstance, options: IdempotencyOptions): Promise<void> {
  const { engine } = options;
  const inFlight = new Map<string, Promise<void>>();

  // Both hooks answer a request without a key at once, and wait (return a
  // promise, which fastify takes in place of the callback) only for one with
  // a key: an async hook costs every request a promise and a microtask turn.
  const claim = async (request: FastifyRequest, reply: FastifyReply, raw: string | string[]): Promise<unknown> => {
    const route = `${request.method} ${request.routeOptions.url}`;
    if (!IDEMPOTENT_ROUTES.has(route)) return;
    const key = Array.isArray(raw) ? raw[0]! : raw;
    // Node joins a header sent twice into one value ("a, b"), which would be a key neither request meant
    if (headerLines(request.raw.rawHeaders, IDEMPOTENCY_HEADER) > 1) {
      throw new BraidError('idempotency_key_invalid', 'Idempotency-Key was sent more than once');
    }
    if (!validKey(key)) {
      throw new BraidError('idempotency_key_invalid', `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} printable ASCII characters`);
    }
    const branch = options.branchOf(request);
    // scoped by route, by who sent it (a digest of the token; see
    // src/app.ts principalOf) and, through where it is stored, by branch
    const scopedKey = request.principal ? `${route}\n${request.principal}\n${key}` : `${route}\n${key}`;
    const flightKey = `${branch.databaseId ?? 'default'}/${branch.branchId ?? 'main'}\n${scopedKey}`;
    const bodyHash = hashBody(request.rawBody);
    // Wait for a running request with the same key, then decide from its
    // receipt. Looking the receipt up yields, so another request may claim
    // the key meanwhile: check again after every await, and claim only with
    // no await between the last check and the claim.
    for (;;) {
      const running = inFlight.get(flightKey);
      if (running) {
        await running;
        continue;
      }
      const receipt = await engine.receipt(scopedKey, branch);
      if (receipt) {
        if (receipt.body_hash !== bodyHash) {
          throw new BraidError('idempotency_key_reused', 'Idempotency-Key was already used with a different request body');
        }
        if (isPartial(receipt.body)) {
          // the document runs again: what it committed answers from the mutations' own receipts
          request.idempotency = { scopedKey, bodyHash, branch, committed: true };
          return;
        }
        const digest = storedDigest(receipt.body);
        if (!digest) return replay(reply, receipt.status, receipt.body);
        // run the read again; onSend compares what it answers with the digest
        request.idempotency = { scopedKey, bodyHash, branch, committed: true, expect: digest };
        return;
      }
      if (!inFlight.has(flightKey)) break;
    }
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    inFlight.set(flightKey, mine);
    // The claim ends when the answer is sent ('finish'), or, for a client
    // that has gone (no 'finish' will come), once the request's work is done
    // and its receipt stored (onSend below): not at the connection's close,
    // which can come while the write still runs, when a retry let in would
    // run it again. The close may also have come already, during the awaits
    // above (a client that timed out while the server was stopped): a
    // listener added after it never ran, and the key stayed claimed, every
    // later request with it waiting forever (found by a black-box review).
    let gone = reply.raw.closed || reply.raw.destroyed;
    let handled = false;
    const done = () => {
      if (inFlight.get(flightKey) === mine) inFlight.delete(flightKey);
      release();
    };
    reply.raw.once('finish', done);
    reply.raw.once('close', () => {
      gone = true;
      if (handled) done();
    });
    const onHandled = () => {
      handled = true;
      if (gone) done();
    };
    request.idempotency = { scopedKey, bodyHash, branch, committed: false, handled: onHandled };
    return undefined;
  };
  app.addHook('preHandler', (request, reply, done) => {
    const raw = request.headers[IDEMPOTENCY_HEADER];
    if (raw === undefined) {
      done();
      return undefined;
    }
    return claim(request, reply, raw).catch((err: unknown) => {
      // Where the engine reads the body's bytes (src/routes/body-bytes.ts),
      // fastify has not parsed them before this hook. A body that is not
      // JSON is refused as invalid_json before anything the key would
      // answer, as on every other route. (A key that proceeds leaves the
      // refusal to the route; a replay's body is one that succeeded.)
      if (Buffer.isBuffer(request.body)) parseRequestJson(request.body);
      throw err;
    });
  });

  // Routes that write no rows store their receipt once they have succeeded.
  const store = async (request: FastifyRequest, reply: FastifyReply, payload: unknown, ctx: IdempotencyContext): Promise<unknown> => {
    const text = typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : JSON.stringify(payload);
    if (ctx.expect) {
      if (answerDigest(text) !== ctx.expect.sha256) {
        reply.status(409).header('content-type', 'application/json; charset=utf-8');
        const err = new BraidError(
          'idempotency_response_too_large',
          `the first response to this Idempotency-Key (${ctx.expect.bytes} bytes) was stored as its digest, not whole ` +
            `(it was over ${MAX_STORED_RESPONSE_BYTES} bytes, or the branch's receipts held their memory budget, ` +
            'BRAID_RECEIPT_MEMORY_BYTES), and the read now answers differently; send a new key',
        );
        return JSON.stringify({ code: err.code, error: err.message });
      }
      reply.header(REPLAY_HEADER, 'true');
      return payload;
    }
    if (ctx.committed) return payload;
    const route = `${request.method} ${request.routeOptions.url}`;
    if (WRITE_ROUTES.has(route)) return payload;
    const bytes = Buffer.byteLength(text);
    // An answer the engine wrote prints some numbers longer than the stored
    // copy will (`1.0` for `1`), so it is measured as stored: whether a retry
    // replays it must not depend on who printed it. No printing is three
    // times longer than JSON.stringify's.
    const parsed: unknown = bytes > 3 * MAX_STORED_RESPONSE_BYTES && route !== GRAPHQL_ROUTE ? undefined : JSON.parse(text);
    const storedBytes = parsed === undefined ? bytes : bytes > MAX_STORED_RESPONSE_BYTES ? Buffer.byteLength(JSON.stringify(parsed)) : bytes;
    const tooLarge = storedBytes > MAX_STORED_RESPONSE_BYTES;
    const answer = tooLarge && route !== GRAPHQL_ROUTE ? undefined : parsed;
    // GraphQL answers a failure with 200 and `errors` (a document that does
    // not validate, a mutation that failed): that stores nothing either, so a
    // retry runs the document again, and each mutation that had succeeded
    // answers from its own receipt without writing again
    const failed = route === GRAPHQL_ROUTE && hasErrors(answer);
    if (failed && !ctx.partial) return payload;
    ctx.committed = true;
    const digest = (): StoredDigest => ({ [DIGEST_MARK]: true, sha256: answerDigest(text), bytes });
    const body: unknown = failed ? { [PARTIAL_MARK]: true } : tooLarge ? digest() : answer;
    // the engine stores the digest instead once the branch's receipts hold their budget
    const alternative = !failed && !tooLarge && storedBytes > DIGEST_ALTERNATIVE_MIN_BYTES ? digest() : undefined;
    try {
      await engine.recordReceipt({ key: ctx.scopedKey, body_hash: ctx.bodyHash, status: reply.statusCode, body, digest: alternative }, ctx.branch);
    } catch (err) {
      // a keyed read of an archived (read-only) branch answers its result;
      // nothing changes there, so a retry reads the same and needs no receipt
      if (!(err instanceof BraidError && err.code === 'branch_archived')) throw err;
    }
    return payload;
  };
  app.addHook('onSend', (request, reply, payload, done) => {
    const ctx = request.idempotency;
    if (!ctx || reply.statusCode < 200 || reply.statusCode >= 300) {
      ctx?.handled?.();
      done(null, payload);
      return undefined;
    }
    return store(request, reply, payload, ctx).finally(() => ctx.handled?.());
  });
}

export const idempotency = fp(plugin);
