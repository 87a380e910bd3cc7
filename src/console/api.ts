/**
 * Calls to the public API of the server that served the page (the engine, or
 * the gateway in front of it). Each call carries the token typed into the
 * page (kept in sessionStorage: gone when the tab closes) as
 * `Authorization: Bearer`, and the selected database and branch as the
 * `x-braid-database` / `x-braid-branch` headers every route takes.
 */
import type { ErrorBody } from './types.js';

const TOKEN_KEY = 'braid.console.token';

export const session = {
  token(): string {
    return sessionStorage.getItem(TOKEN_KEY) ?? '';
  },
  setToken(token: string): void {
    if (token === '') sessionStorage.removeItem(TOKEN_KEY);
    else sessionStorage.setItem(TOKEN_KEY, token);
  },
};

/** The branch every call addresses. */
export const target = { database: 'default', branch: 'main' };

/** A non-2xx answer (or a GraphQL error), with the API's stable code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function headers(body: boolean): Headers {
  const h = new Headers({ accept: 'application/json', 'x-braid-database': target.database, 'x-braid-branch': target.branch });
  if (body) h.set('content-type', 'application/json');
  const token = session.token();
  if (token !== '') h.set('authorization', `Bearer ${token}`);
  return h;
}

async function send(method: 'GET' | 'POST', path: string, body?: unknown): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, 'network_error', `the server did not answer: ${(err as Error).message}`);
  }
  if (res.ok) return res;
  let error: Partial<ErrorBody> = {};
  try {
    error = (await res.json()) as Partial<ErrorBody>;
  } catch {
    // not JSON: the status says enough
  }
  throw new ApiError(res.status, error.code ?? `http_${res.status}`, error.error ?? res.statusText);
}

export async function getJson<T>(path: string): Promise<T> {
  return (await (await send('GET', path)).json()) as T;
}

export async function getText(path: string): Promise<string> {
  return (await send('GET', path)).text();
}

export async function postJson<T>(path: string, body: unknown): Promise<T> {
  return (await (await send('POST', path, body)).json()) as T;
}

export interface GraphQlError {
  message: string;
  path?: Array<string | number>;
  extensions?: { code?: string };
}

/**
 * Runs a GraphQL query on route 7. Errors come back in a 200 body there;
 * `partial` returns them with the data instead of throwing the first one.
 */
export async function graphql<T>(query: string, variables: Record<string, unknown> = {}, partial = false): Promise<{ data: T; errors: GraphQlError[] }> {
  const body = await postJson<{ data?: T | null; errors?: GraphQlError[] }>('/v1/graphql', { query, variables });
  const errors = body.errors ?? [];
  const first = errors[0];
  if (first && (!partial || !body.data)) throw new ApiError(200, first.extensions?.code ?? 'graphql_error', first.message);
  return { data: body.data as T, errors };
}
