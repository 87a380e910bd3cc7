// SQLite through better-sqlite3: FTS5 (bm25) for text and a sqlite-vec vec0
// table for vectors (tenant as a partition key, category as a metadata column
// filtered inside the KNN). sqlite-vec 0.1.x has no ANN index: every KNN is
// an exact scan of the partition, so recall is 1 and there is nothing to tune.
// Hybrid is RRF (k = 60) written in SQL, one CTE per side.
import Database from 'better-sqlite3';
import * as sqliteVec from 'sqlite-vec';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HYBRID_DEPTH, RRF_K, TOP_K, run } from './common.mjs';

const dir = mkdtempSync(path.join(tmpdir(), 'sqlite-bench-'));
let db;
let stmts;
let corpusRef;

// FTS5 query: the words (quoted) OR-ed within the text column, AND the
// tenant (and category) tokens; bm25 weights the filter columns 0
function match(q, withCategory) {
  const words = q.words.map((w) => `"${w}"`).join(' OR ');
  return `text : (${words}) AND tenant : "${q.tenant}"${withCategory ? ` AND category : "${q.category}"` : ''}`;
}
const vecBlob = (v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

await run({
  name: 'sqlite',
  kinds: ['text', 'vector', 'vector_filter', 'hybrid', 'hybrid_filter'],
  ladder: null,
  notes: [
    'better-sqlite3 + sqlite-vec on a file in WAL mode (synchronous=NORMAL), transactions of 5,000 rows',
    'FTS5 unicode61 with tenant and category as extra token columns (bm25 weight 0) so the filter is a posting-list AND',
    'vec0(embedding float[384] cosine, tenant partition key, category metadata): exact KNN, no ANN index exists in sqlite-vec 0.1',
    `hybrid: RRF (k ${RRF_K}) in SQL over the top ${HYBRID_DEPTH} of each side`,
  ],
  ingest(corpus) {
    corpusRef = corpus;
    db = new Database(path.join(dir, 'bench.db'));
    sqliteVec.load(db);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('cache_size = -262144'); // 256 MiB
    db.exec(`CREATE VIRTUAL TABLE fts USING fts5(text, tenant, category, tokenize = 'unicode61')`);
    db.exec(`CREATE VIRTUAL TABLE vec USING vec0(embedding float[${corpus.dim}] distance_metric=cosine, tenant text partition key, category text)`);
    const insFts = db.prepare('INSERT INTO fts(rowid, text, tenant, category) VALUES (?, ?, ?, ?)');
    const insVec = db.prepare('INSERT INTO vec(rowid, embedding, tenant, category) VALUES (?, ?, ?, ?)');
    const chunk = 5_000;
    const insert = db.transaction((start, end) => {
      for (let i = start; i < end; i++) {
        const rowid = BigInt(i + 1);
        insFts.run(rowid, corpus.text(i), corpus.tenant(i), corpus.category(i));
        insVec.run(rowid, vecBlob(corpus.vector(i)), corpus.tenant(i), corpus.category(i));
      }
    });
    for (let s = 0; s < corpus.n; s += chunk) insert(s, Math.min(corpus.n, s + chunk));
    db.exec(`INSERT INTO fts(fts) VALUES ('optimize')`);
    const rank = `rank MATCH 'bm25(1.0, 0.0, 0.0)'`;
    // RRF over each side's top HYBRID_DEPTH; `vectorFilter` narrows the vector side (the text side's
    // filter is in its MATCH expression)
    const hybridSql = (vectorFilter) => `
        WITH t AS (
          SELECT rowid AS id, row_number() OVER (ORDER BY rank) AS r
          FROM fts WHERE fts MATCH :match AND ${rank} ORDER BY rank LIMIT ${HYBRID_DEPTH}
        ),
        v AS (
          SELECT rowid AS id, row_number() OVER (ORDER BY distance) AS r
          FROM vec WHERE embedding MATCH :vec AND k = ${HYBRID_DEPTH} AND tenant = :tenant${vectorFilter}
        )
        SELECT id, SUM(1.0 / (${RRF_K} + r)) AS score
        FROM (SELECT id, r FROM t UNION ALL SELECT id, r FROM v)
        GROUP BY id ORDER BY score DESC, id LIMIT ${TOP_K}`;
    stmts = {
      text: db.prepare(`SELECT rowid AS id FROM fts WHERE fts MATCH ? AND ${rank} ORDER BY rank LIMIT ${TOP_K}`),
      vector: db.prepare(`SELECT rowid AS id FROM vec WHERE embedding MATCH ? AND k = ${TOP_K} AND tenant = ? ORDER BY distance`),
      vector_filter: db.prepare(`SELECT rowid AS id FROM vec WHERE embedding MATCH ? AND k = ${TOP_K} AND tenant = ? AND category = ? ORDER BY distance`),
      hybrid: db.prepare(hybridSql('')),
      hybrid_filter: db.prepare(hybridSql(' AND category = :category')),
    };
    return { chunk, db_bytes: db.prepare('SELECT page_count * page_size AS b FROM pragma_page_count(), pragma_page_size()').get().b };
  },
  query(kind, q) {
    let rows;
    if (kind === 'text') rows = stmts.text.all(match(q, false));
    else if (kind === 'vector') rows = stmts.vector.all(vecBlob(q.vector), q.tenant);
    else if (kind === 'vector_filter') rows = stmts.vector_filter.all(vecBlob(q.vector), q.tenant, q.category);
    else if (kind === 'hybrid') rows = stmts.hybrid.all({ match: match(q, false), vec: vecBlob(q.vector), tenant: q.tenant });
    else rows = stmts.hybrid_filter.all({ match: match(q, true), vec: vecBlob(q.vector), tenant: q.tenant, category: q.category });
    return rows.map((r) => corpusRef.id(Number(r.id) - 1));
  },
  close() {
    db?.close();
    rmSync(dir, { recursive: true, force: true });
  },
});
