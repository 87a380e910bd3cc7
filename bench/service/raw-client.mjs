// A lean HTTP/1.1 client for bench/service/client.mjs's latency task: one
// keep-alive socket with Nagle off, each request's bytes (request line,
// headers and body) built before timing and written in one call, the
// response read as far as its Content-Length. What it leaves out against
// undici (the request object, header validation, the body stream, the
// dispatcher's queue) is the client's own cost, not the server's: on this
// machine's loopback, undici added about 0.25 ms to a round trip to the bare
// route (0.53-0.60 against 0.26-0.33 ms p50, the same server and bodies).
// Neither chunked responses nor pipelining are handled: the servers the
// benchmark times answer with a Content-Length, one request at a time.
import net from 'node:net';

export async function rawClient(url) {
  const { hostname, port, host } = new URL(url);
  const socket = net.connect({ host: hostname, port: Number(port), noDelay: true });
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let waiting = null;
  let buffered = Buffer.alloc(0);
  const fail = (err) => {
    const w = waiting;
    waiting = null;
    w?.reject(err);
  };
  socket.on('error', fail);
  socket.on('close', () => fail(new Error('the server closed the connection')));
  socket.on('data', (chunk) => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    const end = buffered.indexOf('\r\n\r\n');
    if (waiting === null || end < 0) return;
    const head = buffered.toString('latin1', 0, end);
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    if (length === null) return fail(new Error(`a response without Content-Length: ${head.slice(0, 200)}`));
    const bodyEnd = end + 4 + Number(length[1]);
    if (buffered.length < bodyEnd) return;
    const body = buffered.subarray(end + 4, bodyEnd);
    buffered = buffered.subarray(bodyEnd);
    const w = waiting;
    waiting = null;
    w.resolve({ statusCode: Number(head.slice(9, 12)), body });
  });
  return {
    /** The whole request, as bytes, for `send`. */
    request(route, body) {
      const bytes = Buffer.from(body);
      const head = `POST ${route} HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: ${bytes.length}\r\n\r\n`;
      return Buffer.concat([Buffer.from(head, 'latin1'), bytes]);
    },
    /** Writes a request and resolves with its response's status and body bytes. */
    send(request) {
      if (waiting !== null) throw new Error('one request at a time');
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject };
        socket.write(request);
      });
    },
    close() {
      socket.removeAllListeners('close');
      socket.end();
    },
  };
}
