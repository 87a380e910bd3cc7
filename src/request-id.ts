/**
 * Request ids, shared by the engine and the gateway: the client's
 * `X-Request-Id` when it is a plain token (so one id follows a request
 * through the gateway to the engine), else a new UUID. Echoed in the response
 * header and logged as `request_id` with every line of the request.
 */
import { randomUUID } from 'node:crypto';

export const REQUEST_ID_HEADER = 'x-request-id';

export function requestId(raw: { headers: Record<string, string | string[] | undefined> }): string {
  const given = raw.headers[REQUEST_ID_HEADER];
  return typeof given === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(given) ? given : randomUUID();
}
