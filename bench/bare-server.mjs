// A bare fastify route doing no work: the HTTP ceiling of this machine, for
// comparison with Braid's routes in bench/http.mjs.
import Fastify from 'fastify';

const app = Fastify({ logger: false });
app.post('/noop', async () => ({ epoch: 1 }));
const url = await app.listen({ host: '127.0.0.1', port: Number(process.argv[2] ?? 0) });
console.log(`bare listening on ${url}`);
