// The floor under Braid's query route (bench/service.mjs, part 2): Node's own
// HTTP server, no framework and none of Braid's service code, handing each
// POST body's bytes to the same engine call the route makes
// (`Engine.queryJson`) and sending the bytes it answers. What remains between
// this server's latency and the in-process figure is the cost of any Node
// HTTP server in front of the engine on the same core.
//
//   node bench/service/engine-floor-server.mjs DATA_DIR   (prints `listening on <url>`)
//
// `POST /v1/explain` answers `pending_feature_count: 0`: the client's
// wait for the indexes, which this server has already waited for before it
// listens.
import http from 'node:http';
import path from 'node:path';
import { root } from './common.mjs';

const { Braid } = await import(path.join(root, 'dist', 'index.js'));
const db = Braid.open({ dataDir: process.argv[2] });
if (!(await db.waitIndexed(30 * 60_000))) throw new Error('waitIndexed timed out');
const { engine } = db;

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', async () => {
    res.setHeader('content-type', 'application/json');
    if (req.url === '/v1/explain') {
      res.end('{"pending_feature_count":0}');
      return;
    }
    try {
      const answer = await engine.queryJson(Buffer.concat(chunks));
      if (answer === null) throw new Error('the engine left this body to the service');
      res.end(answer);
    } catch (err) {
      res.statusCode = 500;
      res.end(JSON.stringify({ code: 'floor_server', error: String(err) }));
    }
  });
});
server.keepAliveTimeout = 60_000;
process.on('SIGTERM', () => {
  server.close(() => {
    db.close();
    process.exit(0);
  });
  server.closeAllConnections();
});
server.listen(0, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${server.address().port}`));
