// The table Braid's benchmarks declare and the form their vectors cross in,
// shared by bench/peers/braid.mjs (the comparison with the peers) and
// bench/service.mjs (HTTP against in-process). No side effects on import.

export const TABLE = 'docs';

/** Columns: the text searched with BM25, two scalar filters, a flag and the vector. */
export const columns = (dim) => ({
  text: { type: 'string', text: true, scalar: false },
  category: { type: 'string', text: false, scalar: true },
  year: { type: 'number', scalar: true },
  flag: { type: 'bool', scalar: true },
  embedding: { type: 'vector', dim, metric: 'cosine' },
});

/** 9 significant digits round-trip a float32 exactly and keep the JSON short. */
export const f32 = (x) => Number(x.toPrecision(9));
