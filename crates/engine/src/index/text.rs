//! BM25 text index over tantivy.
//!
//! One tantivy document per (row, text column): `row` (u64 fast field, the
//! branch-local row id of a record version), `scope` (table and tenant),
//! `col` (column name) and `text`. Every version is indexed so reads at an
//! older epoch find the text they had; visibility is applied by the collector
//! from a bitmap of eligible rows, before any row is opened.
//!
//! BM25 statistics are per (table, tenant[, column]) and come from
//! [`TextStats`], kept by the store over the versions visible at the latest
//! epoch, so one tenant's documents never change another tenant's scores.
//!
//! Indexing lags writes: rows are added by the branch's indexer thread and
//! become searchable at the next commit, whose payload records the watermark
//! (every row below it is searchable). Rows above the watermark are scored by
//! the query's hot overlay with [`bm25`], the same formula tantivy uses.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use roaring::RoaringBitmap;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::directory::MmapDirectory;
use tantivy::query::{Bm25StatisticsProvider, BooleanQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STRING};
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer};
use tantivy::{DocId, Index, IndexReader, IndexWriter, ReloadPolicy, Score, SegmentReader, TantivyDocument, Term};

use crate::error::{Error, Result};

pub const TOKENIZER: &str = "braid";
pub const K1: f32 = 1.2;
pub const B: f32 = 0.75;

/// The analyzer used both by tantivy and by the store's statistics and the
/// hot overlay, so all three agree on what a token is.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default()).filter(RemoveLongFilter::limit(40)).filter(LowerCaser).build()
}

pub fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while let Some(token) = stream.next() {
        out.push(token.text.clone());
    }
    out
}

pub fn scope_key(table: &str, tenant: &str) -> String {
    format!("{table}\u{1f}{tenant}")
}

/// Document count, token count and document frequencies of one scope.
#[derive(Debug, Default, Clone)]
pub struct ScopeStats {
    pub docs: u64,
    pub tokens: u64,
    pub df: HashMap<String, u64>,
}

impl ScopeStats {
    fn apply(&mut self, toks: &[String], sign: i64) {
        let add = |x: &mut u64, by: u64| {
            *x = if sign > 0 { *x + by } else { x.saturating_sub(by) };
        };
        add(&mut self.docs, 1);
        add(&mut self.tokens, toks.len() as u64);
        let mut seen: Vec<&String> = toks.iter().collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            let entry = self.df.entry(t.clone()).or_insert(0);
            add(entry, 1);
            if *entry == 0 {
                self.df.remove(t);
            }
        }
    }
}

/// BM25 statistics per scope: key (tenant, Some(column)) for one column and
/// (tenant, None) for all text columns together.
#[derive(Debug, Default)]
pub struct TextStats {
    scopes: HashMap<(Arc<str>, Option<String>), ScopeStats>,
}

impl TextStats {
    /// Adds (sign = 1) or removes (sign = -1) one (row, column) document.
    pub fn apply(&mut self, tenant: &Arc<str>, column: &str, toks: &[String], sign: i64) {
        if toks.is_empty() {
            return;
        }
        self.scopes.entry((tenant.clone(), Some(column.to_string()))).or_default().apply(toks, sign);
        self.scopes.entry((tenant.clone(), None)).or_default().apply(toks, sign);
    }

    /// The statistics a query needs, copied out so the store lock is not held
    /// while tantivy searches.
    pub fn snapshot(&self, tenant: &str, column: Option<&str>, terms: &[String]) -> QueryStats {
        let key = (Arc::<str>::from(tenant), column.map(str::to_string));
        let scope = self.scopes.get(&key);
        QueryStats {
            docs: scope.map_or(0, |s| s.docs),
            tokens: scope.map_or(0, |s| s.tokens),
            df: terms.iter().map(|t| (t.clone(), scope.and_then(|s| s.df.get(t).copied()).unwrap_or(0))).collect(),
        }
    }
}

/// Per-query BM25 statistics for one tenant scope.
#[derive(Debug, Clone, Default)]
pub struct QueryStats {
    pub docs: u64,
    pub tokens: u64,
    pub df: HashMap<String, u64>,
}

impl QueryStats {
    pub fn idf(&self, term: &str) -> f32 {
        let n = self.docs.max(1) as f32;
        let df = self.df.get(term).copied().unwrap_or(0) as f32;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    pub fn avg_len(&self) -> f32 {
        if self.docs == 0 {
            1.0
        } else {
            (self.tokens as f32 / self.docs as f32).max(1.0)
        }
    }
}

impl Bm25StatisticsProvider for QueryStats {
    fn total_num_tokens(&self, _field: Field) -> tantivy::Result<u64> {
        Ok(self.tokens.max(1))
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.docs.max(1))
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let value = term.value();
        let text = value.as_str().unwrap_or_default();
        Ok(self.df.get(text).copied().unwrap_or(0))
    }
}

/// BM25 of one document with the given tokens, as tantivy computes it
/// (without tantivy's field-norm quantisation).
pub fn bm25(stats: &QueryStats, query_terms: &[String], doc_tokens: &[String]) -> f32 {
    if doc_tokens.is_empty() {
        return 0.0;
    }
    let len = doc_tokens.len() as f32;
    let norm = K1 * (1.0 - B + B * len / stats.avg_len());
    query_terms
        .iter()
        .map(|term| {
            let tf = doc_tokens.iter().filter(|t| *t == term).count() as f32;
            if tf == 0.0 {
                0.0
            } else {
                stats.idf(term) * (1.0 + K1) * tf / (tf + norm)
            }
        })
        .sum()
}

struct Fields {
    row: Field,
    scope: Field,
    col: Field,
    text: Field,
}

pub struct TextIndex {
    reader: IndexReader,
    /// `None` once closed, which releases the directory lock.
    writer: Mutex<Option<IndexWriter>>,
    fields: Fields,
    /// Every row below this id is searchable through `reader`.
    watermark: AtomicU32,
    /// Rows added to the writer but not yet committed: (last row + 1).
    pending_upto: AtomicU32,
}

fn schema() -> Schema {
    let mut builder = Schema::builder();
    builder.add_u64_field("row", INDEXED | FAST);
    builder.add_text_field("scope", STRING);
    builder.add_text_field("col", STRING);
    let indexing = TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqs);
    builder.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    builder.build()
}

fn tantivy_err(err: tantivy::TantivyError) -> Error {
    Error::storage(format!("text index: {err}"))
}

impl TextIndex {
    /// Opens (or creates) the index in `dir`. The watermark comes from the
    /// last commit's payload, so a restart resumes indexing where it stopped.
    pub fn open(dir: &Path) -> Result<TextIndex> {
        std::fs::create_dir_all(dir)?;
        let directory = MmapDirectory::open(dir).map_err(|e| Error::storage(e.to_string()))?;
        let index = Index::open_or_create(directory, schema()).map_err(tantivy_err)?;
        index.tokenizers().register(TOKENIZER, analyzer());
        let watermark =
            index.load_metas().map_err(tantivy_err)?.payload.and_then(|p| p.parse::<u32>().ok()).unwrap_or(0);
        let writer = index.writer_with_num_threads(1, 48_000_000).map_err(tantivy_err)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(tantivy_err)?;
        let s = index.schema();
        let field = |name: &str| s.get_field(name).expect("field defined by schema()");
        let fields = Fields { row: field("row"), scope: field("scope"), col: field("col"), text: field("text") };
        Ok(TextIndex {
            reader,
            writer: Mutex::new(Some(writer)),
            fields,
            watermark: AtomicU32::new(watermark),
            pending_upto: AtomicU32::new(watermark),
        })
    }

    pub fn watermark(&self) -> u32 {
        self.watermark.load(Ordering::Acquire)
    }

    pub fn pending_upto(&self) -> u32 {
        self.pending_upto.load(Ordering::Acquire)
    }

    /// Adds one (row, column) document. Rows must arrive in ascending order.
    pub fn add(&self, row: u32, table: &str, tenant: &str, column: &str, text: &str) -> Result<()> {
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.fields.row, row as u64);
        doc.add_text(self.fields.scope, scope_key(table, tenant));
        doc.add_text(self.fields.col, column);
        doc.add_text(self.fields.text, text);
        let mut writer = self.writer.lock();
        let Some(writer) = writer.as_mut() else { return Err(Error::storage("text index is closed")) };
        writer.add_document(doc).map_err(tantivy_err)?;
        Ok(())
    }

    /// Marks every row below `upto` as handed to the writer.
    pub fn mark_pending(&self, upto: u32) {
        self.pending_upto.store(upto, Ordering::Release);
    }

    /// Commits what was added and makes it searchable; the watermark is stored
    /// in the commit payload.
    pub fn commit(&self) -> Result<()> {
        let upto = self.pending_upto();
        if upto == self.watermark() {
            return Ok(());
        }
        {
            let mut writer = self.writer.lock();
            let Some(writer) = writer.as_mut() else { return Err(Error::storage("text index is closed")) };
            crate::storage::faults::check("text::commit")?;
            let mut prepared = writer.prepare_commit().map_err(tantivy_err)?;
            prepared.set_payload(&upto.to_string());
            prepared.commit().map_err(tantivy_err)?;
        }
        self.reader.reload().map_err(tantivy_err)?;
        self.watermark.store(upto, Ordering::Release);
        Ok(())
    }

    /// Commits what is pending and releases the writer (and its lock).
    pub fn close(&self) -> Result<()> {
        let committed = self.commit();
        if let Some(writer) = self.writer.lock().take() {
            writer.wait_merging_threads().map_err(tantivy_err)?;
        }
        committed
    }

    pub fn segment_count(&self) -> usize {
        self.reader.searcher().segment_readers().len()
    }

    pub fn indexed_documents(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Documents (row x text column, every version) of one table and tenant
    /// in the committed index: the corpus a text query of that tenant reads.
    pub fn scope_documents(&self, table: &str, tenant: &str) -> u64 {
        let term = Term::from_field_text(self.fields.scope, &scope_key(table, tenant));
        self.reader.searcher().doc_freq(&term).unwrap_or(0)
    }

    /// Searches one tenant scope; returns (row, summed score over columns) for
    /// eligible rows below the watermark.
    pub fn search(&self, req: &TextSearch<'_>) -> Result<TextHits> {
        let searcher = self.reader.searcher();
        let watermark = self.watermark();
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(
            Occur::Must,
            Box::new(ConstScoreQuery::new(
                Box::new(TermQuery::new(
                    Term::from_field_text(self.fields.scope, &scope_key(req.table, req.tenant)),
                    IndexRecordOption::Basic,
                )),
                0.0,
            )),
        )];
        if let Some(column) = req.column {
            clauses.push((
                Occur::Must,
                Box::new(ConstScoreQuery::new(
                    Box::new(TermQuery::new(Term::from_field_text(self.fields.col, column), IndexRecordOption::Basic)),
                    0.0,
                )),
            ));
        }
        let terms: Vec<(Occur, Box<dyn Query>)> = req
            .terms
            .iter()
            .map(|t| {
                let q: Box<dyn Query> =
                    Box::new(TermQuery::new(Term::from_field_text(self.fields.text, t), IndexRecordOption::WithFreqs));
                (Occur::Should, q)
            })
            .collect();
        clauses.push((Occur::Must, Box::new(BooleanQuery::new(terms))));
        let query = BooleanQuery::new(clauses);
        let collector = RowCollector { eligible: req.eligible.clone(), watermark };
        let hits = searcher.search_with_statistics_provider(&query, &collector, req.stats).map_err(tantivy_err)?;
        let mut by_row: HashMap<u32, f32> = HashMap::with_capacity(hits.len());
        for (row, score) in &hits {
            *by_row.entry(*row).or_insert(0.0) += *score;
        }
        Ok(TextHits {
            rows: by_row.into_iter().collect(),
            scored_documents: hits.len() as u64,
            segments: searcher.segment_readers().len() as u64,
            watermark,
        })
    }
}

pub struct TextSearch<'a> {
    pub table: &'a str,
    pub tenant: &'a str,
    pub column: Option<&'a str>,
    pub terms: &'a [String],
    pub stats: &'a QueryStats,
    pub eligible: Arc<RoaringBitmap>,
}

pub struct TextHits {
    pub rows: Vec<(u32, f32)>,
    pub scored_documents: u64,
    pub segments: u64,
    pub watermark: u32,
}

/// Collects (row, score) of matching documents whose row is eligible, reading
/// the row id from the fast field so no document is loaded.
struct RowCollector {
    eligible: Arc<RoaringBitmap>,
    watermark: u32,
}

struct RowSegmentCollector {
    rows: tantivy::columnar::Column<u64>,
    eligible: Arc<RoaringBitmap>,
    watermark: u32,
    hits: Vec<(u32, f32)>,
}

impl Collector for RowCollector {
    type Fruit = Vec<(u32, f32)>;
    type Child = RowSegmentCollector;

    fn for_segment(&self, _ord: u32, segment: &SegmentReader) -> tantivy::Result<RowSegmentCollector> {
        Ok(RowSegmentCollector {
            rows: segment.fast_fields().u64("row")?,
            eligible: self.eligible.clone(),
            watermark: self.watermark,
            hits: Vec::new(),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(u32, f32)>>) -> tantivy::Result<Vec<(u32, f32)>> {
        Ok(fruits.into_iter().flatten().collect())
    }
}

impl SegmentCollector for RowSegmentCollector {
    type Fruit = Vec<(u32, f32)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        if let Some(row) = self.rows.first(doc) {
            let row = row as u32;
            if row < self.watermark && self.eligible.contains(row) {
                self.hits.push((row, score));
            }
        }
    }

    fn harvest(self) -> Vec<(u32, f32)> {
        self.hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_prefers_rarer_terms_and_shorter_docs() {
        let stats = QueryStats {
            docs: 10,
            tokens: 50,
            df: [("rare".to_string(), 1), ("common".to_string(), 9)].into_iter().collect(),
        };
        let q_rare = vec!["rare".to_string()];
        let q_common = vec!["common".to_string()];
        let doc = vec!["rare".to_string(), "common".to_string()];
        assert!(bm25(&stats, &q_rare, &doc) > bm25(&stats, &q_common, &doc));
        let long: Vec<String> = std::iter::repeat_n("x".to_string(), 20).chain(["rare".to_string()]).collect();
        assert!(bm25(&stats, &q_rare, &doc) > bm25(&stats, &q_rare, &long));
    }
}
