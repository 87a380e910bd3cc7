/**
 * Test helpers: a real engine on a temp data dir behind a real HTTP listener
 * on an ephemeral loopback port, and child-process servers for crash tests.
 */
import { connect } from 'node:net';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildApp } from '../src/app.js';
import { Braid, type OpenOptions } from '../src/engine.js';
import type { ServerConfig } from '../src/config.js';
import type { FastifyInstance } from 'fastify';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const CLI = path.join(ROOT, 'bin', 'braid.js');

export function tempDir(prefix = 'braid-test-'): string {
  return mkdtempSync(path.join(tmpdir(), prefix));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls until `check` returns true (or throws when it never does). */
export async function waitFor(what: string, check: () => Promise<boolean> | boolean, limitMs = 30_000): Promise<void> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    if (await Promise.resolve().then(check).catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

export interface TestServer {
  url: string;
  app: FastifyInstance;
  engine: Braid;
  dataDir: string;
  /** POST JSON; returns status, parsed body and headers. */
  post(route: string, body: unknown, headers?: Record<string, string>): Promise<HttpResult>;
  get(route: string, headers?: Record<string, string>): Promise<HttpResult>;
  /** Closes the listener and the engine (keeps the data dir). */
  stop(): Promise<void>;
  /** Stops and removes the data dir. */
  destroy(): Promise<void>;
}

export interface HttpResult {
  status: number;
  body: any;
  headers: Headers;
}

export async function request(url: string, method: string, body?: unknown, headers: Record<string, string> = {}): Promise<HttpResult> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
  }
  const res = await fetch(url, init);
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // leave as text
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** Starts the engine's HTTP app in this process on a temp dir. */
export async function startTestServer(
  options: { dataDir?: string; config?: Partial<ServerConfig>; engine?: Partial<OpenOptions> } = {},
): Promise<TestServer> {
  const dataDir = options.dataDir ?? tempDir();
  const engine = Braid.open({ dataDir, textCommitIntervalMs: 20, ...options.engine });
  const app = await buildApp({ engine, config: { dataDir, ...options.config } });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await app.close();
    engine.close();
  };
  return {
    url,
    app,
    engine,
    dataDir,
    post: (route, body, headers) => request(url + route, 'POST', body, headers),
    get: (route, headers) => request(url + route, 'GET', undefined, headers),
    stop,
    destroy: async () => {
      await stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface ChildServer {
  url: string;
  child: ChildProcess;
  output: () => string;
  /** Resolves with the exit code once the process ends. */
  exited: Promise<number | null>;
}

/** Spawns `braid serve` (or another subcommand) as a child process on an ephemeral port. */
export function spawnServer(args: string[], env: Record<string, string> = {}): Promise<ChildServer> {
  return spawnListening(process.execPath, [CLI, ...args], { cwd: ROOT, env: { ...process.env, BRAID_LOG_LEVEL: 'error', ...env } });
}

/**
 * Spawns a command that prints `listening on <url>` (a server or gateway) and
 * resolves once it listens. `detached` gives it its own process group, so
 * `process.kill(-child.pid)` also reaches what a wrapper like npx started.
 */
export async function spawnListening(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; detached?: boolean },
): Promise<ChildServer> {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 60_000);
    const onData = () => {
      const m = /listening on (http:\/\/[^\s]+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}: ${out}`));
    });
  });
  return { url, child, output: () => out, exited };
}

/**
 * Sends raw bytes on a new connection; resolves with everything the server
 * wrote before it closed (send `Connection: close`, or a request it closes on).
 */
export function rawHttp(url: string, bytes: string | Buffer): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    let out = '';
    socket.on('data', (d) => (out += d.toString('utf8')));
    socket.on('close', () => resolve(out));
    socket.on('error', reject);
  });
}

/**
 * A POST made as Python's urllib makes one: `Connection: close`, and the
 * whole body sent before a byte of the answer is read. Resolves to the raw
 * answer; rejects when the upload fails (a server that closed the
 * connection with the upload unread resets it: EPIPE, ECONNRESET).
 */
export function uploadThenRead(url: string, route: string, body: Buffer, options: { chunked?: boolean; headers?: string } = {}): Promise<string> {
  const { hostname, port } = new URL(url);
  const framing = options.chunked ? 'Transfer-Encoding: chunked\r\n' : `Content-Length: ${body.length}\r\n`;
  const head = `POST ${route} HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\nContent-Type: application/json\r\n${options.headers ?? ''}${framing}\r\n`;
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    // nothing is read until the upload is done
    socket.pause();
    socket.on('error', reject);
    const write = (bytes: Buffer | string) => new Promise<void>((done, fail) => socket.write(bytes, (err) => (err ? fail(err) : done())));
    socket.on('connect', async () => {
      try {
        await write(head);
        for (let at = 0; at < body.length; at += 64 * 1024) {
          const chunk = body.subarray(at, at + 64 * 1024);
          await write(options.chunked ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]) : chunk);
        }
        if (options.chunked) await write('0\r\n\r\n');
      } catch (err) {
        socket.destroy();
        reject(err);
        return;
      }
      let out = '';
      socket.on('data', (d) => (out += d.toString('utf8')));
      socket.on('close', () => resolve(out));
      socket.resume();
    });
  });
}

/** The status and JSON body of a raw HTTP answer with a Content-Length. */
export function parseRawAnswer(answer: string): { status: number; body: unknown } {
  const [head, body] = answer.split('\r\n\r\n', 2);
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head ?? '')?.[1]), body: JSON.parse(body || 'null') };
}

/**
 * Sends `requests` (raw HTTP/1.1, pipelined) on one connection, half-closes
 * it (FIN after the last byte, as `nc -N` does) and resolves with everything
 * read until the server closes it.
 */
export function sendThenHalfClose(url: string, requests: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true });
    let out = '';
    socket.on('data', (d) => (out += d.toString('utf8')));
    socket.on('error', reject);
    socket.on('close', () => resolve(out));
    socket.end(requests);
  });
}
