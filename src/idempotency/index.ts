/**
 * Idempotency-Key for the routes marked (idem) in the spec: 2, 3, 5, 7, 9,
 * 10 and 11.
 *
 * - The key is scoped by method and path (and stored in the branch the
 *   request addresses); the receipt holds a SHA-256 of the raw body.
 * - Same key and same raw body: the first successful response is replayed
 *   (same status and body) with `Idempotent-Replayed: true`, without running
 *   the request again. A different body: 409 `idempotency_key_reused`.
 * - Write routes (5, 9, 11) hand the receipt to the engine, which commits it
 *   in the same WAL frame as the records: a crash keeps both or neither.
 *   Other routes store the receipt right after they succeed.
 * - A second request with a key whose first request is still running waits
 *   for it and then replays (or gets the 409). Within one engine process a
 *   keyed request never executes twice; the engine re-checks receipts inside
 *   its commit, so even a race between two processes cannot double-write.
 * - Failed requests (any non-2xx) store nothing and may be retried.
 * - Keys are 1-255 printable ASCII characters; others are 400.
 */
import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from './plugin.js';
import { BraidError } from '../errors.js';
import type { BranchRef, Braid, ReceiptDraft } from '../engine.js';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAY_HEADER = 'idempotent-replayed';
export const MAX_KEY_LENGTH = 255;

/** The routes that accept Idempotency-Key (method + path). */
export const IDEMPOTENT_ROUTES = new Set([
  'POST /v1/nativeql',
  'POST /v1/admin/restore',
  'POST /v1/insert',
  'POST /v1/graphql',
  'POST /v1/records/put-batch',
  'POST /v1/admin/snapshot',
  'POST /v1/records/put',
]);

/** Routes whose engine write carries the receipt atomically. */
const WRITE_ROUTES = new Set(['POST /v1/insert', 'POST /v1/records/put-batch', 'POST /v1/records/put']);

export interface IdempotencyContext {
  scopedKey: string;
  bodyHash: string;
  branch: BranchRef;
  /** Set once the receipt has been committed with the write. */
  committed: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    rawBody?: string;
    idempotency?: IdempotencyContext;
  }
}

export function hashBody(raw: string | undefined): string {
  return createHash('sha256').update(raw ?? '').digest('hex');
}

function validKey(key: string): boolean {
  return key.length >= 1 && key.length <= MAX_KEY_LENGTH && /^[\x20-\x7e]+$/.test(key);
}

/** The receipt draft a write route passes to the engine with its records. */
export function receiptFor(request: FastifyRequest, body: unknown): ReceiptDraft | undefined {
  const ctx = request.idempotency;
  if (!ctx) return undefined;
  ctx.committed = true;
  return { key: ctx.scopedKey, body_hash: ctx.bodyHash, status: 200, body };
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
  engine: Braid;
  /** Where a request's receipts live: the branch its write goes to. */
  branchOf: (request: FastifyRequest) => BranchRef;
}

async function plugin(app: FastifyInstance, options: IdempotencyOptions): Promise<void> {
  const { engine } = options;
  const inFlight = new Map<string, Promise<void>>();

  app.addHook('preHandler', async (request, reply) => {
    const raw = request.headers[IDEMPOTENCY_HEADER];
    if (raw === undefined) return;
    const route = `${request.method} ${request.routeOptions.url}`;
    if (!IDEMPOTENT_ROUTES.has(route)) return;
    const key = Array.isArray(raw) ? raw[0]! : raw;
    if (!validKey(key)) {
      throw new BraidError('idempotency_key_invalid', `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} printable ASCII characters`);
    }
    const branch = options.branchOf(request);
    const scopedKey = `${route}\n${key}`;
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
        return replay(reply, receipt.status, receipt.body);
      }
      if (!inFlight.has(flightKey)) break;
    }
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    inFlight.set(flightKey, mine);
    request.idempotency = { scopedKey, bodyHash, branch, committed: false };
    // runs on 'finish' and again on 'close': only ever removes this request's own claim
    const done = () => {
      if (inFlight.get(flightKey) === mine) inFlight.delete(flightKey);
      release();
    };
    reply.raw.once('close', done);
    reply.raw.once('finish', done);
  });

  // Routes that write no rows store their receipt once they have succeeded.
  app.addHook('onSend', async (request, reply, payload) => {
    const ctx = request.idempotency;
    if (!ctx || ctx.committed || reply.statusCode < 200 || reply.statusCode >= 300) return payload;
    const route = `${request.method} ${request.routeOptions.url}`;
    if (WRITE_ROUTES.has(route)) return payload;
    ctx.committed = true;
    const body = typeof payload === 'string' ? JSON.parse(payload) : payload;
    await engine.recordReceipt({ key: ctx.scopedKey, body_hash: ctx.bodyHash, status: reply.statusCode, body }, ctx.branch);
    return payload;
  });
}

export const idempotency = fp(plugin);
