//! BM25 text index over tantivy.
//!
//! One tantivy document per row (record version) with text: `row` (u64 fast
//! field, the branch-local row id), `scope` (table, tenant and column, once
//! for each text column the row has) and one text field per column. A
//! table's text columns each have a slot ([`Slots`]), given the first time
//! the index sees the column and never changed, and a column's text goes in
//! the text field of its slot (`text0` to `text15`), so each column keeps its
//! own length (BM25's field norm) while a row stays one document. A table
//! with more than [`SLOTS`] text columns puts the 17th to 32nd in a
//! second document of the row, and so on. Every version is indexed so reads
//! at an older epoch find the text they had; visibility is applied by the
//! collector from a bitmap of eligible rows, before any row is opened.
//!
//! Each token is indexed with its scope and column in front (`table 0x1F
//! tenant 0x1F column 0x1F token`, see [`term_text`]), so a tenant's query
//! is a plain union of term queries that reads only that tenant's postings,
//! and the pruning (MaxScore over windows of blocks, [`max_score_union`])
//! can skip the blocks that cannot reach the current top k ([`TextIndex::search`] with a depth), over one column or
//! several: a row's score is the sum over its columns, and its columns are
//! one document. Analyzer tokens are alphanumeric, so the last separator
//! ends the prefix.
//!
//! BM25 statistics are per (table, tenant[, column]) and come from
//! [`TextStats`], kept by the store over the versions visible at the latest
//! epoch, so one tenant's documents never change another tenant's scores.
//!
//! Indexing lags writes: rows are added by the branch's indexer thread and
//! become searchable at the next commit, whose payload records the watermark
//! (every row below it is searchable). Rows above the watermark are scored by
//! the query's hot overlay with [`bm25`], the same formula tantivy uses.

use std::collections::{BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use roaring::RoaringBitmap;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::{Column, ColumnIndex};
use tantivy::directory::MmapDirectory;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::index::SegmentId;
use tantivy::indexer::IndexWriterOptions;
use tantivy::postings::BlockSegmentPostings;
use tantivy::query::{
    Bm25StatisticsProvider, Bm25Weight, BooleanQuery, EnableScoring, Occur, Query, TermQuery, TermSetQuery, Weight,
};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STRING};
use tantivy::tokenizer::{
    BoxTokenStream, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer, Token, TokenStream, Tokenizer,
};
use tantivy::{
    DocId, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, Score, SegmentReader, TantivyDocument, Term,
    TERMINATED,
};

use crate::error::{Error, Result};

pub const TOKENIZER: &str = "braid";
/// Most merge threads of a branch's text index writer.
const MERGE_THREADS: usize = 2;
/// Rows deleted by one set query ([`TextIndex::delete_rows`]).
pub const DELETE_CHUNK: usize = 65_536;
/// Rows up to which a delete goes as one term query each ([`Part::delete`]).
const DELETE_BY_TERM: usize = 64;

/// Tokens of this many bytes of UTF-8 or more are dropped (tantivy's
/// `RemoveLongFilter` counts bytes). It was 40, which dropped ordinary words
/// of non-Latin scripts (`достопримечательности` is 21 characters, 42
/// bytes) and every Thai or CJK run of 14 characters or more, so such
/// documents could not be found at all; Elasticsearch's standard analyzer
/// keeps tokens of up to 255 characters.
pub const MAX_TOKEN_BYTES: usize = 256;

/// The analyzer used both by tantivy and by the store's statistics and the
/// hot overlay, so all three agree on what a token is.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .build()
}

/// The distinct tokens of `text`, sorted; `Err(n)` as soon as there are
/// more than `max` (n of them found by then). A query's text is read this
/// way: its terms count once however often they are written, so a text of
/// one word repeated seven million times (14 MB) holds one token, where the
/// list of every token had held 240 MB (found by a fuzz review).
pub fn distinct_tokens(analyzer: &mut TextAnalyzer, text: &str, max: usize) -> std::result::Result<Vec<String>, usize> {
    let mut out = std::collections::BTreeSet::new();
    let mut stream = analyzer.token_stream(text);
    while let Some(token) = stream.next() {
        if !out.contains(token.text.as_str()) {
            out.insert(token.text.clone());
            if out.len() > max {
                return Err(out.len());
            }
        }
    }
    Ok(out.into_iter().collect())
}

pub fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while let Some(token) = stream.next() {
        out.push(token.text.clone());
    }
    out
}

/// The tokens of one text, kept in one buffer that is reused from text to
/// text: counting a document into the BM25 statistics (every write, and
/// every row of a replay) then allocates nothing per token.
#[derive(Debug, Default)]
pub struct Tokens {
    text: String,
    ends: Vec<usize>,
}

impl Tokens {
    /// Replaces the tokens with those of `text`.
    pub fn read(&mut self, analyzer: &mut TextAnalyzer, text: &str) -> &Tokens {
        self.text.clear();
        self.ends.clear();
        let mut stream = analyzer.token_stream(text);
        while let Some(token) = stream.next() {
            self.text.push_str(&token.text);
            self.ends.push(self.text.len());
        }
        self
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| &self.text[start..end])
    }
}

/// What tantivy is handed for one column of one row: the text behind its
/// scope (`table`, `tenant`, `column`), read back by [`ScopedTokenizer`].
/// `<scope's length in bytes>:<scope><text>`, so any text and any scope
/// name may follow.
fn scoped_text(scope: &str, text: &str) -> String {
    let mut out = String::with_capacity(scope.len() + text.len() + 8);
    let _ = write!(out, "{}:{scope}{text}", scope.len());
    out
}

/// The analyzer of [`analyzer`] under the scope [`scoped_text`] put in
/// front of a text: each token is indexed as its [`term_text`].
///
/// It replaces pre-tokenized documents: tantivy keeps a pre-tokenized
/// string in a document as JSON, written by the indexer and parsed again by
/// tantivy's indexing thread, which had taken a third of both threads' time
/// under a stream of single-record writes (bench/JOURNAL.md, "The
/// twenty-third session").
#[derive(Clone)]
pub struct ScopedTokenizer {
    analyzer: TextAnalyzer,
}

impl ScopedTokenizer {
    pub fn new() -> ScopedTokenizer {
        ScopedTokenizer { analyzer: analyzer() }
    }
}

impl Default for ScopedTokenizer {
    fn default() -> Self {
        Self::new()
    }
}

/// The scope and text of a [`scoped_text`]; a text without a scope (no
/// index writes one) is tokenized unscoped.
fn split_scoped(text: &str) -> (&str, &str) {
    let Some((len, rest)) = text.split_once(':') else { return ("", text) };
    match len.parse::<usize>() {
        Ok(len) if rest.is_char_boundary(len) => rest.split_at(len),
        _ => ("", text),
    }
}

impl Tokenizer for ScopedTokenizer {
    type TokenStream<'a> = ScopedTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> ScopedTokenStream<'a> {
        let (scope, text) = split_scoped(text);
        ScopedTokenStream { scope, inner: self.analyzer.token_stream(text), token: Token::default() }
    }
}

pub struct ScopedTokenStream<'a> {
    scope: &'a str,
    inner: BoxTokenStream<'a>,
    token: Token,
}

impl TokenStream for ScopedTokenStream<'_> {
    fn advance(&mut self) -> bool {
        if !self.inner.advance() {
            return false;
        }
        let inner = self.inner.token();
        self.token.offset_from = inner.offset_from;
        self.token.offset_to = inner.offset_to;
        self.token.position = inner.position;
        self.token.position_length = inner.position_length;
        self.token.text.clear();
        if !self.scope.is_empty() {
            self.token.text.push_str(self.scope);
            self.token.text.push('\u{1f}');
        }
        self.token.text.push_str(&inner.text);
        true
    }

    fn token(&self) -> &Token {
        &self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.token
    }
}

/// The indexed text of `token` in one table, tenant and column.
pub fn term_text(table: &str, tenant: &str, column: &str, token: &str) -> String {
    format!("{table}\u{1f}{tenant}\u{1f}{column}\u{1f}{token}")
}

/// The token of an indexed term text (what follows its last separator).
fn token_of(term_text: &str) -> &str {
    term_text.rsplit('\u{1f}').next().unwrap_or(term_text)
}

/// Version of the index layout, stored with the watermark in each commit's
/// payload (`3:<watermark>:<purge horizon>:<slots>`); an index in another
/// layout is rebuilt. Layout 2 had one document per (row, text column), so a
/// query over several columns had to score every match to sum a row's
/// documents.
const FORMAT: &str = "3";

/// Text fields of a document: a row's first [`SLOTS`] text columns share its
/// one document, each in the field of its slot. Every string field is a
/// text column unless declared otherwise, so a table of many string fields
/// (a product's name, description, brand, colour, status, URL...) is
/// common; past this many its queries over every column sum a row's
/// documents and score every match. Each slot costs a byte of field norms
/// per document.
pub const SLOTS: usize = 16;

/// Each table's text columns in the order the index first took text of
/// them: a column's place is its slot, which never changes (a table's
/// columns are never removed or redeclared). Kept in every commit's payload,
/// so the slots of the committed documents are known after a restart; an
/// index rebuilt from nothing gives them again as it goes.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Slots(HashMap<String, Vec<String>>);

impl Slots {
    fn get(&self, table: &str, column: &str) -> Option<usize> {
        self.0.get(table)?.iter().position(|c| c == column)
    }

    fn assign(&mut self, table: &str, column: &str) -> usize {
        if let Some(slot) = self.get(table, column) {
            return slot;
        }
        let columns = self.0.entry(table.to_string()).or_default();
        columns.push(column.to_string());
        columns.len() - 1
    }

    fn columns(&self, table: &str) -> &[String] {
        self.0.get(table).map_or(&[], Vec::as_slice)
    }
}

/// The `scope` value of a column's text in a document: one per (row,
/// column), so a scope's documents in the sense of the statistics (row x
/// column) can be counted.
fn scope_column_key(table: &str, tenant: &str, column: &str) -> String {
    format!("{table}\u{1f}{tenant}\u{1f}{column}")
}

/// A token as a statistics key: held inline up to 24 bytes (most tokens), so
/// counting a new one allocates nothing; a longer one (up to
/// [`MAX_TOKEN_BYTES`]) allocates its text.
pub type TokenKey = compact_str::CompactString;

/// Document count, token count and document frequencies of one scope.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct ScopeStats {
    pub docs: u64,
    pub tokens: u64,
    pub df: crate::FastMap<TokenKey, u64>,
}

impl ScopeStats {
    /// Adds or removes one document of `tokens` tokens, `unique` its
    /// distinct ones.
    fn apply(&mut self, unique: &[&str], tokens: usize, sign: i64) {
        let add = |x: &mut u64, by: u64| {
            *x = if sign > 0 { *x + by } else { x.saturating_sub(by) };
        };
        add(&mut self.docs, 1);
        add(&mut self.tokens, tokens as u64);
        for &t in unique {
            match self.df.get_mut(t) {
                Some(count) => {
                    add(count, 1);
                    if *count == 0 {
                        self.df.remove(t);
                    }
                }
                None if sign > 0 => {
                    self.df.insert(TokenKey::from(t), 1);
                }
                None => {}
            }
        }
    }
}

/// BM25 statistics per (tenant, text column). A query over all of a
/// tenant's text columns sums its columns' statistics (a document is one
/// row's text in one column, so the sums are exactly the tenant's), instead
/// of the store keeping a second copy of every frequency for the tenant.
/// Looked up by borrowed names, so counting a document allocates nothing but
/// its new terms.
#[derive(Debug, Default)]
pub struct TextStats {
    tenants: crate::FastMap<Arc<str>, crate::FastMap<String, ScopeStats>>,
}

/// One scope of [`TextStats`] as a checkpoint stores it: `S` is
/// [`PackedScope`] from image format 6 on, [`ScopeStats`] before. Images
/// before format 5 also hold a tenant-wide scope (no column), which is
/// dropped as it loads.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ScopeImage<S = PackedScope> {
    pub tenant: String,
    pub column: Option<String>,
    pub stats: S,
}

/// A scope's statistics with its frequencies packed in one byte string
/// ([`pack_df`]): decoding an image then copies them in one piece, and a
/// start builds the map on a core of its own, sized once, beside the other
/// indexes (decoding them as a map had been a third of a start whose
/// records each held a distinct word).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct PackedScope {
    pub docs: u64,
    pub tokens: u64,
    pub df: serde_bytes::ByteBuf,
}

/// Statistics of a scope as an image stores them.
pub trait StoredScope {
    /// `None` when the stored bytes do not decode.
    fn stats(self) -> Option<ScopeStats>;
}

impl StoredScope for ScopeStats {
    fn stats(self) -> Option<ScopeStats> {
        Some(self)
    }
}

impl StoredScope for PackedScope {
    fn stats(self) -> Option<ScopeStats> {
        Some(ScopeStats { docs: self.docs, tokens: self.tokens, df: unpack_df(&self.df)? })
    }
}

/// Frequencies as (token count, then per token: byte length, bytes, count),
/// the numbers as LEB128 varints: the record codec's encoding, written here
/// because `storage::codec` is a layer above the indexes
/// (crates/engine/tests/layers.rs).
pub fn pack_df(df: &crate::FastMap<TokenKey, u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(df.len() * 10);
    put_varint(&mut out, df.len() as u64);
    for (token, count) in df {
        put_varint(&mut out, token.len() as u64);
        out.extend_from_slice(token.as_bytes());
        put_varint(&mut out, *count);
    }
    out
}

pub fn unpack_df(mut bytes: &[u8]) -> Option<crate::FastMap<TokenKey, u64>> {
    let len = take_varint(&mut bytes)?;
    // every entry takes at least 2 bytes, so a damaged count cannot reserve more than the bytes hold
    let mut df = crate::FastMap::with_capacity_and_hasher(len.min(bytes.len() as u64 / 2) as usize, Default::default());
    for _ in 0..len {
        let n = usize::try_from(take_varint(&mut bytes)?).ok()?;
        let token = std::str::from_utf8(bytes.get(..n)?).ok()?;
        bytes = &bytes[n..];
        df.insert(TokenKey::from(token), take_varint(&mut bytes)?);
    }
    bytes.is_empty().then_some(df)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl TextStats {
    pub fn export(&self) -> Vec<ScopeImage> {
        let mut out = Vec::new();
        for (tenant, columns) in &self.tenants {
            out.extend(columns.iter().map(|(column, stats)| ScopeImage {
                tenant: tenant.to_string(),
                column: Some(column.clone()),
                stats: PackedScope {
                    docs: stats.docs,
                    tokens: stats.tokens,
                    df: serde_bytes::ByteBuf::from(pack_df(&stats.df)),
                },
            }));
        }
        out
    }

    /// The statistics of an image's scopes, a scope per task; `None` when a
    /// scope does not decode.
    pub fn import<S: StoredScope + Send>(scopes: Vec<ScopeImage<S>>) -> Option<TextStats> {
        use rayon::prelude::*;
        let scopes: Vec<(String, String, ScopeStats)> = scopes
            .into_par_iter()
            .filter_map(|s| Some((s.tenant, s.column?, s.stats)))
            .map(|(tenant, column, stats)| Some((tenant, column, stats.stats()?)))
            .collect::<Option<_>>()?;
        let mut out = TextStats::default();
        for (tenant, column, stats) in scopes {
            out.tenants.entry(Arc::from(tenant)).or_default().insert(column, stats);
        }
        Some(out)
    }

    /// Adds (sign = 1) or removes (sign = -1) one (row, column) document.
    pub fn apply(&mut self, tenant: &Arc<str>, column: &str, toks: &Tokens, sign: i64) {
        self.apply_with(tenant, || tenant.clone(), column, toks, sign)
    }

    /// [`TextStats::apply`] for a tenant named by a plain string.
    pub fn apply_str(&mut self, tenant: &str, column: &str, toks: &Tokens, sign: i64) {
        self.apply_with(tenant, || Arc::from(tenant), column, toks, sign)
    }

    fn apply_with(&mut self, tenant: &str, owned: impl FnOnce() -> Arc<str>, column: &str, toks: &Tokens, sign: i64) {
        if toks.is_empty() {
            return;
        }
        let mut unique: Vec<&str> = toks.iter().collect();
        unique.sort_unstable();
        unique.dedup();
        let columns = match self.tenants.get_mut(tenant) {
            Some(columns) => columns,
            None => self.tenants.entry(owned()).or_default(),
        };
        match columns.get_mut(column) {
            Some(stats) => stats.apply(&unique, toks.len(), sign),
            None => columns.entry(column.to_string()).or_default().apply(&unique, toks.len(), sign),
        }
    }

    /// The statistics a query needs, copied out so the store lock is not held
    /// while tantivy searches: one column's, or (no column) the sum of the
    /// tenant's columns.
    pub fn snapshot(&self, tenant: &str, column: Option<&str>, terms: &[String]) -> QueryStats {
        let columns = self.tenants.get(tenant);
        let scopes: Vec<&ScopeStats> = match (columns, column) {
            (None, _) => Vec::new(),
            (Some(columns), Some(column)) => columns.get(column).into_iter().collect(),
            (Some(columns), None) => columns.values().collect(),
        };
        QueryStats {
            docs: scopes.iter().map(|s| s.docs).sum(),
            tokens: scopes.iter().map(|s| s.tokens).sum(),
            df: terms
                .iter()
                .map(|t| (t.clone(), scopes.iter().filter_map(|s| s.df.get(t.as_str()).copied()).sum()))
                .collect(),
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
    /// Each query term's BM25 weight as the index's term scorers weigh it
    /// (`tantivy::query::Bm25Weight` over these statistics: the
    /// [`Bm25StatisticsProvider`] below), so that a row the hot overlay
    /// scores gets the same score, to the bit, that the index gives it once
    /// it has the row. Computed once a query: each holds its 256 length
    /// factors.
    pub fn weights(&self, terms: &[String]) -> Vec<Bm25Weight> {
        let docs = self.docs.max(1);
        let avg = self.tokens.max(1) as Score / docs as Score;
        terms
            .iter()
            .map(|t| {
                let df = self.df.get(t).copied().unwrap_or(0).min(docs);
                Bm25Weight::for_one_term_without_explain(df, docs, avg)
            })
            .collect()
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
        Ok(self.df.get(token_of(text)).copied().unwrap_or(0))
    }
}

/// BM25 of one document with the given tokens for the query's terms, each
/// weighed by its `weights` entry ([`QueryStats::weights`]).
pub fn bm25(weights: &[Bm25Weight], query_terms: &[String], doc_tokens: &[String]) -> f32 {
    let mut counts = TermCounts::new(query_terms);
    for token in doc_tokens {
        counts.count(token);
    }
    counts.score(weights)
}

/// BM25 of `text` for the query's terms, tokenized as the index tokenizes
/// it, in one pass: each token is looked up among the query's distinct
/// terms and nothing is kept of it. The hot overlay scores rows the text
/// index has not taken yet this way, so its cost is the rows' text, not the
/// text times the query's terms (a 1,024-term query over one unindexed
/// 15 MB text had compared every term with all 1.8 million tokens, 5.3 s,
/// and held each token as a string, 350 MB). The score is the index's, bit
/// for bit: the length quantised as the index keeps it (one of 256
/// buckets), each term scored by tantivy's own weight, and the terms summed
/// in query order from zero, as the index's collector sums them.
pub fn bm25_text(weights: &[Bm25Weight], query_terms: &[String], analyzer: &mut TextAnalyzer, text: &str) -> f32 {
    let mut counts = TermCounts::new(query_terms);
    let mut stream = analyzer.token_stream(text);
    while let Some(token) = stream.next() {
        counts.count(&token.text);
    }
    counts.score(weights)
}

/// A document's frequencies of a query's terms, counted token by token.
struct TermCounts<'q> {
    /// Each distinct term's place in `tf`.
    place: HashMap<&'q str, usize>,
    /// Each query term's place in `tf` (a term given twice counts twice, as
    /// the index scores it).
    of_term: Vec<usize>,
    tf: Vec<u32>,
    len: u64,
}

impl<'q> TermCounts<'q> {
    fn new(terms: &'q [String]) -> TermCounts<'q> {
        let mut place = HashMap::with_capacity(terms.len());
        let of_term = terms
            .iter()
            .map(|t| {
                let next = place.len();
                *place.entry(t.as_str()).or_insert(next)
            })
            .collect();
        let tf = vec![0; place.len()];
        TermCounts { place, of_term, tf, len: 0 }
    }

    fn count(&mut self, token: &str) {
        self.len += 1;
        if let Some(&at) = self.place.get(token) {
            self.tf[at] += 1;
        }
    }

    fn score(&self, weights: &[Bm25Weight]) -> f32 {
        if self.len == 0 {
            return 0.0;
        }
        let length = FieldNormReader::fieldnorm_to_id(u32::try_from(self.len).unwrap_or(u32::MAX));
        let mut score = 0.0f32;
        for (weight, &at) in weights.iter().zip(&self.of_term) {
            if self.tf[at] > 0 {
                score += weight.score(length, self.tf[at]);
            }
        }
        score
    }
}

struct Fields {
    row: Field,
    scope: Field,
    /// One per slot.
    text: Vec<Field>,
}

/// One tantivy index of a branch's text ([`TextIndex`] has two).
struct Part {
    reader: IndexReader,
    /// `None` once closed, which releases the directory lock; the history's
    /// is opened at its first write.
    writer: Mutex<Option<IndexWriter>>,
    index: Index,
    /// The index's meta file, and what [`Part::refresh`] last saw of it.
    meta: PathBuf,
    meta_seen: Mutex<Option<MetaStamp>>,
}

/// What tells one write of a meta file from another: tantivy writes it to a
/// new file renamed over the old one, so each write is a new inode.
#[derive(PartialEq, Eq, Clone, Copy)]
struct MetaStamp {
    inode: u64,
    modified_ns: i64,
    len: u64,
}

impl MetaStamp {
    fn of(path: &Path) -> Option<MetaStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(MetaStamp { inode: m.ino(), modified_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(), len: m.len() })
    }
}

impl Part {
    fn new(index: Index, writer: Option<IndexWriter>, dir: &Path) -> std::result::Result<Part, OpenError> {
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(open_err)?;
        let meta = dir.join("meta.json");
        Ok(Part { reader, writer: Mutex::new(writer), index, meta, meta_seen: Mutex::new(None) })
    }

    fn documents(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Commits what its writer was handed, with `payload`, and makes it searchable.
    fn commit(&self, payload: &str) -> Result<()> {
        {
            let mut writer = self.writer.lock();
            let Some(writer) = writer.as_mut() else { return Err(Error::storage("text index is closed")) };
            crate::faults::check("text::commit")?;
            let mut prepared = writer.prepare_commit().map_err(tantivy_err)?;
            prepared.set_payload(payload);
            prepared.commit().map_err(tantivy_err)?;
        }
        self.reader.reload().map_err(tantivy_err)
    }

    /// Reloads the reader when the committed segments are not the ones it
    /// reads (a merge ended since). A reload opens every segment again and
    /// starts a new reader generation (dropping the per-generation caches):
    /// done on every round of the indexer, reloads had taken a fifth of its
    /// time under a stream of single-record writes. So the meta file is
    /// looked at (a `stat`), read only when it was written again, and the
    /// reader reloaded only when its segments differ from the file's.
    fn refresh(&self) {
        let stamp = MetaStamp::of(&self.meta);
        {
            let mut seen = self.meta_seen.lock();
            if stamp.is_some() && *seen == stamp {
                return;
            }
            *seen = stamp;
        }
        let Ok(metas) = self.index.searchable_segment_metas() else { return };
        let searcher = self.reader.searcher();
        let readers = searcher.segment_readers();
        let same = metas.len() == readers.len()
            && metas.iter().all(|meta| {
                readers.iter().any(|r| r.segment_id() == meta.id() && r.num_deleted_docs() == meta.num_deleted_docs())
            });
        if !same {
            let _ = self.reader.reload();
        }
    }

    /// Deletes the documents of `rows`: a few as a term each, more as one
    /// set query per [`DELETE_CHUNK`]. A set query's weight builds an FST of
    /// its terms, whose builder zeroes about a megabyte each time: done for
    /// the one or two rows an update moves, it had taken two thirds of the
    /// indexer's time under a stream of single-record updates.
    fn delete(&self, writer: &mut IndexWriter, row_field: Field, rows: &[u32]) -> Result<()> {
        if rows.len() <= DELETE_BY_TERM {
            for row in rows {
                writer.delete_term(Term::from_field_u64(row_field, u64::from(*row)));
            }
            return Ok(());
        }
        for chunk in rows.chunks(DELETE_CHUNK) {
            let terms = chunk.iter().map(|row| Term::from_field_u64(row_field, u64::from(*row)));
            writer.delete_query(Box::new(TermSetQuery::new(terms))).map_err(tantivy_err)?;
        }
        Ok(())
    }
}

/// The share of a current segment's documents that may be deleted (moved
/// to the history) before a merge rewrites it without them.
const DELETED_BEFORE_MERGE: f32 = 0.3;

/// Where the history part lives, inside the index's directory.
const HISTORY_DIR: &str = "history";

/// The branch's text index, in two parts. `current` holds each version from
/// when it is indexed until a newer version of its record (or a delete) is;
/// then the indexer moves it to `history` ([`TextIndex::supersede`]). A read
/// at the latest epoch searches only `current`, which holds one version of
/// each record, so rewriting records does not make its text queries slower
/// (with every version in one index, 20 rewrites of each record had made
/// them about 9 times slower: the superseded versions' postings, as good as
/// the live ones', were scored before the visibility filter dropped them).
/// A read at an older epoch searches both. SQL Server's system-versioned
/// tables keep a current table and a history table the same way.
pub struct TextIndex {
    current: Part,
    history: Part,
    /// Something was handed to the history's writer since it last committed.
    history_dirty: AtomicBool,
    closed: AtomicBool,
    fields: Fields,
    slots: Mutex<Slots>,
    /// [`Self::scope_documents`]' answers for the readers' generations: in a
    /// segment with deletes it counts a scope's postings, which a query of a
    /// large tenant would otherwise pay each time.
    documents_cache: Mutex<([u64; 2], HashMap<String, u64>)>,
    /// Which segments hold their documents in row order ([`RowOrder`]).
    row_order: Arc<RowOrder>,
    /// Every row below this id is searchable (and, once superseded by a row
    /// below it, in the history part).
    watermark: AtomicU32,
    /// Rows added to the writer but not yet committed: (last row + 1).
    pending_upto: AtomicU32,
    /// The retention horizon whose removed versions the last commit deleted
    /// (in its payload), and the one whose deletes are queued in the writer.
    purged: AtomicU64,
    purge_pending: AtomicU64,
    /// A writer failed since the last [`TextIndex::recover`]: what the
    /// writers hold since their last commits cannot be trusted.
    failed: AtomicBool,
}

fn schema() -> Schema {
    let mut builder = Schema::builder();
    builder.add_u64_field("row", INDEXED | FAST);
    builder.add_text_field("scope", STRING);
    let indexing = TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqs);
    for slot in 0..SLOTS {
        builder.add_text_field(&text_field(slot), TextOptions::default().set_indexing_options(indexing.clone()));
    }
    builder.build()
}

fn text_field(slot: usize) -> String {
    format!("text{slot}")
}

/// One indexing thread, an indexing budget of `budget` bytes, and at most
/// `merge_threads` merge threads (tantivy's default is four), no more than
/// the cores that could run them.
fn writer_options(budget: usize, merge_threads: usize) -> IndexWriterOptions {
    let merge_threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, merge_threads);
    IndexWriterOptions::builder()
        .num_worker_threads(1)
        .memory_budget_per_thread(budget)
        .num_merge_threads(merge_threads)
        .build()
}

fn tantivy_err(err: tantivy::TantivyError) -> Error {
    Error::storage(format!("text index: {err}"))
}

/// The current part's writer: each branch has writers of its own (a
/// black-box test counted 8 threads a branch, 534 for 64 branches:
/// [`writer_options`]).
fn current_writer(index: &Index) -> tantivy::Result<IndexWriter> {
    let writer: IndexWriter = index.writer_with_options(writer_options(48_000_000, MERGE_THREADS))?;
    set_current_policy(&writer);
    Ok(writer)
}

/// A version moved to the history stays in its segment of the current
/// part, deleted, and the pruning still reads its postings, until a merge
/// drops it: a segment a third deleted is merged (Lucene's tiered policy
/// allows a third by default; tantivy's, every document deleted).
fn set_current_policy(writer: &IndexWriter) {
    let mut policy = tantivy::indexer::LogMergePolicy::default();
    policy.set_del_docs_ratio_before_merge(DELETED_BEFORE_MERGE);
    writer.set_merge_policy(Box::new(policy));
}

/// The history part's writer, opened when something moves there: tantivy's
/// least budget and one merge thread, as the history takes what rewrites
/// move, far less than the current part.
fn history_writer(index: &Index) -> tantivy::Result<IndexWriter> {
    index.writer_with_options(writer_options(15_000_000, 1))
}

/// Why an index could not be opened: its files are damaged (it can be
/// rebuilt from the store), or anything else (a full disk, no descriptors
/// left, a lock), which rebuilding would not mend.
enum OpenError {
    Damaged(String),
    Other(Error),
}

impl From<std::io::Error> for OpenError {
    fn from(e: std::io::Error) -> OpenError {
        OpenError::Other(e.into())
    }
}

fn open_err(err: tantivy::TantivyError) -> OpenError {
    use std::io::ErrorKind::{InvalidData, UnexpectedEof};
    use tantivy::directory::error::OpenReadError;
    use tantivy::TantivyError::{DataCorruption, IncompatibleIndex, OpenReadError as Read};
    let damaged = match &err {
        DataCorruption(_) | IncompatibleIndex(_) => true,
        Read(OpenReadError::FileDoesNotExist(_) | OpenReadError::IncompatibleIndex(_)) => true,
        // a file cut or overwritten: its footer does not read back
        Read(OpenReadError::IoError { io_error, .. }) => matches!(io_error.kind(), InvalidData | UnexpectedEof),
        _ => false,
    };
    if damaged {
        OpenError::Damaged(err.to_string())
    } else {
        OpenError::Other(tantivy_err(err))
    }
}

impl TextIndex {
    /// Opens (or creates) the index in `dir`. The watermark comes from the
    /// last commit's payload, so a restart resumes indexing where it stopped.
    /// An index written in an older layout, or whose files are damaged, is
    /// removed and rebuilt from the store by the indexer (it is derived
    /// data); the second value says why, when it was. A damaged file had made
    /// every start refuse the branch (`storage_failure`, "text index: Data
    /// corrupted"; found by a black-box test).
    pub fn open(dir: &Path) -> Result<(TextIndex, Option<String>)> {
        match Self::try_open(dir) {
            Ok(opened) => Ok(opened),
            Err(OpenError::Damaged(why)) => {
                std::fs::remove_dir_all(dir)?;
                match Self::try_open(dir) {
                    Ok((index, _)) => Ok((index, Some(why))),
                    Err(OpenError::Damaged(e)) => Err(Error::storage(format!("text index: {e}"))),
                    Err(OpenError::Other(e)) => Err(e),
                }
            }
            Err(OpenError::Other(e)) => Err(e),
        }
    }

    fn try_open(dir: &Path) -> std::result::Result<(TextIndex, Option<String>), OpenError> {
        // a history part without its current part: start both again
        if !dir.join("meta.json").exists() && dir.join(HISTORY_DIR).exists() {
            std::fs::remove_dir_all(dir)?;
        }
        let ((index, watermark, purged, slots), rebuilt) = match Self::open_index(dir)? {
            Ok(found) => (found, None),
            Err(older) => {
                std::fs::remove_dir_all(dir)?;
                let found = Self::open_index(dir)?.expect("a new index has the current layout");
                (found, Some(older))
            }
        };
        // the history part: a current part that has indexed rows and no
        // history (deleted, or written before there was one) cannot say
        // which versions it moved
        let history_dir = dir.join(HISTORY_DIR);
        if watermark > 0 && !history_dir.join("meta.json").exists() {
            return Err(OpenError::Damaged("the text index has no history part".into()));
        }
        let (history, history_purged) = match Self::open_index(&history_dir)? {
            Ok((index, _, purged, _)) => (index, purged),
            Err(older) => return Err(OpenError::Damaged(older)),
        };
        let writer = current_writer(&index).map_err(open_err)?;
        let s = index.schema();
        let field = |name: &str| s.get_field(name).expect("field defined by schema()");
        let fields = Fields {
            row: field("row"),
            scope: field("scope"),
            text: (0..SLOTS).map(|slot| field(&text_field(slot))).collect(),
        };
        let current = Part::new(index, Some(writer), dir)?;
        let history = Part::new(history, None, &history_dir)?;
        // every field's postings of every segment open: a segment whose
        // positions file is gone opens, and failed each text query after
        // (found by a black-box test: a 503 on every start)
        for part in [&current, &history] {
            for segment in part.reader.searcher().segment_readers() {
                for field in [fields.row, fields.scope].iter().chain(&fields.text) {
                    segment.inverted_index(*field).map_err(open_err)?;
                }
            }
        }
        // the history's deletes of removed versions are only needed once it holds some
        let purged = if history.documents() > 0 { purged.min(history_purged) } else { purged };
        let index = TextIndex {
            current,
            history,
            history_dirty: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            fields,
            slots: Mutex::new(slots),
            documents_cache: Mutex::new(([u64::MAX; 2], HashMap::new())),
            row_order: Arc::default(),
            watermark: AtomicU32::new(watermark),
            pending_upto: AtomicU32::new(watermark),
            purged: AtomicU64::new(purged),
            purge_pending: AtomicU64::new(purged),
            failed: AtomicBool::new(false),
        };
        Ok((index, rebuilt))
    }

    /// The index in `dir`, its watermark, purge horizon and slots, or (the
    /// inner `Err`) which other layout it was written in. The payload is
    /// `<format>:<watermark>:<purge horizon>:<slots as JSON>`.
    #[allow(clippy::type_complexity)]
    fn open_index(dir: &Path) -> std::result::Result<std::result::Result<(Index, u32, u64, Slots), String>, OpenError> {
        std::fs::create_dir_all(dir)?;
        let directory = MmapDirectory::open(dir).map_err(|e| OpenError::Other(Error::storage(e.to_string())))?;
        let exists = Index::exists(&directory).map_err(|e| open_err(e.into()))?;
        let index = match exists {
            true => Index::open(directory).map_err(open_err)?,
            false => Index::create(directory, schema(), Default::default()).map_err(open_err)?,
        };
        index.tokenizers().register(TOKENIZER, ScopedTokenizer::new());
        let metas = index.load_metas().map_err(open_err)?;
        let bad = |p: &str| OpenError::Damaged(format!("text index payload {p:?}"));
        let (watermark, purged, slots) = match metas.payload.as_deref() {
            None if metas.segments.is_empty() => (0, 0, Slots::default()),
            None => {
                return Ok(Err(format!("the text index was written in layout 1; this build writes layout {FORMAT}")))
            }
            Some(p) => match p.split_once(':') {
                Some((FORMAT, rest)) => {
                    let mut parts = rest.splitn(3, ':');
                    let (Some(upto), Some(purged), Some(slots)) = (parts.next(), parts.next(), parts.next()) else {
                        return Err(bad(p));
                    };
                    (
                        upto.parse::<u32>().map_err(|_| bad(p))?,
                        purged.parse::<u64>().map_err(|_| bad(p))?,
                        serde_json::from_str(slots).map_err(|_| bad(p))?,
                    )
                }
                _ => {
                    let layout = p.split(':').next().unwrap_or_default();
                    return Ok(Err(format!(
                        "the text index was written in layout {layout}; this build writes layout {FORMAT}"
                    )));
                }
            },
        };
        // the layout's own schema, or its files were not written by it
        if index.schema() != schema() {
            return Err(OpenError::Damaged("the text index's schema is not its layout's".into()));
        }
        Ok(Ok((index, watermark, purged, slots)))
    }

    pub fn watermark(&self) -> u32 {
        self.watermark.load(Ordering::Acquire)
    }

    pub fn pending_upto(&self) -> u32 {
        self.pending_upto.load(Ordering::Acquire)
    }

    /// Adds the text of one row to the current part: `columns` holds
    /// (column, text) of its text columns, in table `table` and tenant
    /// `tenant`. Rows must arrive in ascending order, each once.
    pub fn add_row(&self, row: u32, table: &str, tenant: &str, columns: &[(&str, &str)]) -> Result<()> {
        let docs = self.documents(row, table, tenant, columns);
        let mut writer = self.current.writer.lock();
        let Some(writer) = writer.as_mut() else { return self.noting(Err(self.no_writer())) };
        self.noting(crate::faults::check("text::add").map_err(Error::from))?;
        for doc in docs {
            self.noting(writer.add_document(doc).map_err(tantivy_err))?;
        }
        Ok(())
    }

    /// Why a part has no writer: closed, or not put back after a failure.
    fn no_writer(&self) -> Error {
        match self.closed.load(Ordering::Acquire) {
            true => Error::storage("text index is closed"),
            false => Error::storage("text index writer failed and is not open again yet"),
        }
    }

    /// Notes a writer's failure for [`Self::recover`] and passes it on.
    fn noting<T>(&self, done: Result<T>) -> Result<T> {
        if done.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        done
    }

    /// Whether a writer failed since the last [`Self::recover`].
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Puts both parts' writers back at their last commits after one of
    /// them failed, so that what was handed to them since is handed again
    /// from the watermark. tantivy drops the documents of an indexing
    /// thread that failed (a full disk, no descriptors left), and its next
    /// commit goes on without them but with the deletes queued before: a
    /// black-box review's branch had every document of its current part
    /// deleted and none added back, committed with the watermark past them,
    /// and its text search found nothing, across restarts. Each writer is
    /// dropped (which discards what it held, as tantivy's rollback does)
    /// and the current part's opened again over its last commit; one that
    /// cannot be opened (no descriptors left) is tried again at the next
    /// call, with every row from the watermark on still covered by the hot
    /// overlay. The indexer calls it; it alone hands rows to the writers.
    pub fn recover(&self) -> Result<()> {
        if !self.failed() || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        drop(self.history.writer.lock().take());
        self.history_dirty.store(false, Ordering::Release);
        {
            let mut writer = self.current.writer.lock();
            drop(writer.take());
            *writer = Some(current_writer(&self.current.index).map_err(tantivy_err)?);
        }
        self.pending_upto.store(self.watermark(), Ordering::Release);
        // removed versions' deletes that were queued are done again by the
        // next start, as after a crash (the committed horizon says which)
        self.purge_pending.store(self.purged(), Ordering::Release);
        self.failed.store(false, Ordering::Release);
        Ok(())
    }

    /// Moves `rows`, versions superseded by newer ones (or deleted), out of
    /// the current part: their documents there are deleted, and so are any
    /// the history part already has of them (a move done again after a
    /// crash), before [`Self::add_superseded`] adds them to the history.
    /// A version superseded before it was indexed is given here too: the
    /// delete finds nothing in the current part.
    pub fn supersede(&self, rows: &[u32]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.delete_from_both(rows, true)
    }

    /// Deletes the documents of `rows` from the current part and from the
    /// history part: always with `open_history`, else only once the history
    /// holds (or was handed) documents.
    fn delete_from_both(&self, rows: &[u32], open_history: bool) -> Result<()> {
        {
            let mut writer = self.current.writer.lock();
            let Some(writer) = writer.as_mut() else { return self.noting(Err(self.no_writer())) };
            self.noting(self.current.delete(writer, self.fields.row, rows))?;
        }
        let opened = self.history.writer.lock().is_some();
        if open_history || opened || self.history.documents() > 0 {
            let mut writer = self.noting(self.history_writer())?;
            self.noting(self.history.delete(writer.as_mut().expect("history_writer opens it"), self.fields.row, rows))?;
            self.history_dirty.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Adds the text of a superseded version to the history part (after
    /// [`Self::supersede`] of it).
    pub fn add_superseded(&self, row: u32, table: &str, tenant: &str, columns: &[(&str, &str)]) -> Result<()> {
        let docs = self.documents(row, table, tenant, columns);
        let mut writer = self.noting(self.history_writer())?;
        let writer = writer.as_mut().expect("history_writer opens it");
        for doc in docs {
            self.noting(writer.add_document(doc).map_err(tantivy_err))?;
        }
        self.history_dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// The history part's writer, opened at its first use (a branch whose
    /// records are never rewritten keeps no second writer's threads).
    fn history_writer(&self) -> Result<parking_lot::MutexGuard<'_, Option<IndexWriter>>> {
        let mut writer = self.history.writer.lock();
        if writer.is_none() {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::storage("text index is closed"));
            }
            *writer = Some(history_writer(&self.history.index).map_err(tantivy_err)?);
        }
        Ok(writer)
    }

    /// The documents of one row's text: one, unless its table has more
    /// than [`SLOTS`] text columns.
    fn documents(&self, row: u32, table: &str, tenant: &str, columns: &[(&str, &str)]) -> Vec<TantivyDocument> {
        let slots: Vec<usize> = {
            let mut slots = self.slots.lock();
            columns.iter().map(|(column, _)| slots.assign(table, column)).collect()
        };
        // (slot group, its document)
        let mut docs: Vec<(usize, TantivyDocument)> = Vec::with_capacity(1);
        for ((column, text), slot) in columns.iter().zip(slots) {
            let group = slot / SLOTS;
            let at = match docs.iter().position(|(g, _)| *g == group) {
                Some(at) => at,
                None => {
                    let mut doc = TantivyDocument::default();
                    doc.add_u64(self.fields.row, u64::from(row));
                    docs.push((group, doc));
                    docs.len() - 1
                }
            };
            let scope = scope_column_key(table, tenant, column);
            let doc = &mut docs[at].1;
            doc.add_text(self.fields.text[slot % SLOTS], scoped_text(&scope, text));
            doc.add_text(self.fields.scope, scope);
        }
        docs.into_iter().map(|(_, doc)| doc).collect()
    }

    /// Deletes the documents of `rows` (versions retention removed up to
    /// `horizon`); the next commit makes it so and records the horizon.
    /// Only rows already handed to the writer (below [`Self::pending_upto`])
    /// may be given: a delete does not reach documents added after it.
    ///
    /// The rows go as one set query per [`DELETE_CHUNK`] of them, not one
    /// term query each: tantivy keeps each delete operation (with its query's
    /// weight) until a commit applies it, and a start that deleted 1.2
    /// million removed rows again after a crash held about 800 MB that way.
    pub fn delete_rows(&self, rows: &[u32], horizon: u64) -> Result<()> {
        self.delete_from_both(rows, false)?;
        self.purge_pending.fetch_max(horizon, Ordering::AcqRel);
        Ok(())
    }

    /// The horizon whose removed versions are deleted in the committed index.
    pub fn purged(&self) -> u64 {
        self.purged.load(Ordering::Acquire)
    }

    /// True when something was handed to the writer and not yet committed.
    pub fn has_uncommitted(&self) -> bool {
        self.pending_upto() > self.watermark()
            || self.purge_pending.load(Ordering::Acquire) > self.purged()
            || self.history_dirty.load(Ordering::Acquire)
    }

    /// Marks every row below `upto` as handed to the writer.
    pub fn mark_pending(&self, upto: u32) {
        self.pending_upto.store(upto, Ordering::Release);
    }

    /// Commits what was added and makes it searchable; the watermark is stored
    /// in the commit payload. The history part commits first: a version
    /// moved there is never in neither committed part (a crash between the
    /// two leaves it in both for a while, which a search counts once, and
    /// the move is done again from the watermark).
    pub fn commit(&self) -> Result<()> {
        if self.failed() {
            // what the writers hold since their last commits may be half a
            // batch: nothing of it is committed ([`Self::recover`])
            return Err(Error::storage("the text index's writer failed; it goes back to its last commit first"));
        }
        let upto = self.pending_upto();
        let purged = self.purge_pending.load(Ordering::Acquire);
        let history = self.history_dirty.swap(false, Ordering::AcqRel);
        if upto == self.watermark() && purged == self.purged() && !history {
            return Ok(());
        }
        let slots = serde_json::to_string(&*self.slots.lock()).map_err(Error::internal)?;
        let payload = format!("{FORMAT}:{upto}:{purged}:{slots}");
        if history {
            if let Err(e) = self.noting(self.history.commit(&payload)) {
                self.history_dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        self.noting(self.current.commit(&payload))?;
        self.watermark.store(upto, Ordering::Release);
        self.purged.store(purged, Ordering::Release);
        Ok(())
    }

    /// Makes segments that merges have rewritten since the last commit
    /// searchable (the readers reload only when asked): a merge that drops
    /// versions moved to the history finishes after the commit that started
    /// it, and until a reload every search still read them (found by a
    /// black-box test: an idle branch kept scoring 4 times the live rows).
    pub fn refresh(&self) {
        for part in [&self.current, &self.history] {
            part.refresh();
        }
    }

    /// Commits what is pending and releases the writers (and their locks).
    pub fn close(&self) -> Result<()> {
        let committed = self.commit();
        self.closed.store(true, Ordering::Release);
        for part in [&self.current, &self.history] {
            if let Some(writer) = part.writer.lock().take() {
                writer.wait_merging_threads().map_err(tantivy_err)?;
            }
        }
        committed
    }

    pub fn segment_count(&self) -> usize {
        [&self.current, &self.history].iter().map(|p| p.reader.searcher().segment_readers().len()).sum()
    }

    pub fn indexed_documents(&self) -> u64 {
        self.current.documents() + self.history.documents()
    }

    /// (row, text column) pairs, every version, of one table and tenant in
    /// the committed index: the corpus a text query of that tenant reads.
    pub fn scope_documents(&self, table: &str, tenant: &str) -> u64 {
        let searchers = [self.current.reader.searcher(), self.history.reader.searcher()];
        let generations = searchers.each_ref().map(|s| s.generation().generation_id());
        let scope = scope_column_key(table, tenant, "");
        {
            let mut cache = self.documents_cache.lock();
            if cache.0 != generations {
                *cache = (generations, HashMap::new());
            }
            if let Some(documents) = cache.1.get(&scope) {
                return *documents;
            }
        }
        let slots = self.slots.lock();
        let mut documents = 0;
        for column in slots.columns(table) {
            let term = Term::from_field_text(self.fields.scope, &scope_column_key(table, tenant, column));
            documents += searchers.iter().map(|s| alive_documents(s, &term)).sum::<u64>();
        }
        drop(slots);
        let mut cache = self.documents_cache.lock();
        if cache.0 == generations {
            cache.1.insert(scope, documents);
        }
        documents
    }

    /// Bytes of the (row, document) pairs kept for segments out of row order
    /// ([`RowOrder`]).
    pub fn row_map_bytes(&self) -> u64 {
        self.row_order.heap_bytes()
    }

    /// Searches one tenant's rows below `req.upto` that are in
    /// `req.eligible`; returns (row, score) with a row's score summed over
    /// the searched columns.
    ///
    /// With a depth, only the best `depth` rows are collected (best score
    /// first, then lowest row), pruned over the tenant's own postings
    /// ([`max_score_union`]): the rows scored grow with the
    /// depth, not with the number of matching rows. That holds for one column and for several, as long as
    /// they are in one document of a row (the table's first [`SLOTS`] text
    /// columns); columns searched across a row's documents need every match,
    /// summed by row, and then the best `depth` are kept.
    pub fn search(&self, req: &TextSearch<'_>) -> Result<TextHits> {
        let upto = req.upto.min(self.watermark());
        // (column's place in req.columns, term query), in query order; a
        // column without a slot has no document yet
        let mut groups = Vec::new();
        let mut term_queries = Vec::new();
        let mut column_of = Vec::new();
        {
            let slots = self.slots.lock();
            for (place, column) in req.columns.iter().enumerate() {
                let Some(slot) = slots.get(req.table, column) else { continue };
                if !groups.contains(&(slot / SLOTS)) {
                    groups.push(slot / SLOTS);
                }
                for t in req.terms {
                    let term = Term::from_field_text(
                        self.fields.text[slot % SLOTS],
                        &term_text(req.table, req.tenant, column, t),
                    );
                    term_queries.push(TermQuery::new(term, IndexRecordOption::WithFreqs));
                    column_of.push(place);
                }
            }
        }
        let mut searchers = vec![self.current.reader.searcher()];
        if req.history {
            searchers.push(self.history.reader.searcher());
        }
        let mut hits =
            TextHits { rows: Vec::new(), scored_documents: 0, segments: 0, watermark: upto, truncated: false };
        if term_queries.is_empty() {
            return Ok(hits);
        }
        // the searched columns in one document of a row: the best documents are the best rows
        let one_document = groups.len() == 1;
        let keep = req.depth.filter(|_| one_document).map(|depth| depth + 1);
        // each part's rows; a row in both (moved to the history, its
        // removal from the current part not committed yet) counts once
        let mut rows: HashMap<u32, f32> = HashMap::new();
        for (part, searcher) in searchers.iter().enumerate().filter(|(_, s)| s.num_docs() > 0) {
            let scoring = EnableScoring::enabled_from_statistics_provider(req.stats, searcher);
            let terms = term_queries
                .iter()
                .map(|q| q.weight(scoring))
                .collect::<tantivy::Result<Vec<_>>>()
                .map_err(tantivy_err)?;
            // the weights TermQuery::weight computes
            let clauses = term_queries
                .iter()
                .map(|q| Ok((q.term().clone(), Bm25Weight::for_terms(req.stats, std::slice::from_ref(q.term()))?)))
                .collect::<tantivy::Result<Vec<_>>>()
                .map_err(tantivy_err)?;
            let query = BooleanQuery::new(
                term_queries.iter().map(|q| (Occur::Should, Box::new(q.clone()) as Box<dyn Query>)).collect(),
            );
            let column_of = column_of.clone();
            let collector = RowHits {
                eligible: req.eligible.clone(),
                upto,
                keep,
                // the current part's (the first): see RowOrder
                lead: (req.lead && part == 0).then(|| {
                    (self.row_order.clone(), searcher.segment_readers().iter().map(SegmentReader::segment_id).collect())
                }),
                terms,
                column_of,
                clauses,
                // as Bm25Weight::for_terms computes it from the statistics
                average: req.stats.tokens.max(1) as Score / req.stats.docs.max(1) as Score,
                kept: Mutex::default(),
                segments_read: AtomicU64::new(0),
            };
            let (found, scored) =
                searcher.search_with_statistics_provider(&query, &collector, req.stats).map_err(tantivy_err)?;
            hits.scored_documents += scored;
            hits.segments += collector.segments_read.load(Ordering::Relaxed);
            // a row's columns in the order searched, summed from zero
            let mut found = found;
            found.sort_unstable_by_key(|h| (h.row, h.place));
            for same_row in found.chunk_by(|a, b| a.row == b.row) {
                let score = same_row.iter().fold(0.0f32, |sum, h| sum + h.score);
                rows.entry(same_row[0].row).or_insert(score);
            }
        }
        let mut rows: Vec<(u32, f32)> = rows.into_iter().collect();
        if let Some(depth) = req.depth {
            if rows.len() > depth {
                rows.select_nth_unstable_by(depth, best_first);
                rows.truncate(depth);
                hits.truncated = true;
            }
        }
        rows.sort_unstable_by(best_first);
        hits.rows = rows;
        Ok(hits)
    }
}

/// Documents with `term` that are not deleted: its document frequency in a
/// segment without deletes, its postings counted in one with some (a
/// version moved to the history part stays in its segment of the current
/// part, deleted, until a merge drops it).
fn alive_documents(searcher: &tantivy::Searcher, term: &Term) -> u64 {
    let mut documents = 0;
    for segment in searcher.segment_readers() {
        let Ok(index) = segment.inverted_index(term.field()) else { continue };
        let Some(alive) = segment.alive_bitset() else {
            documents += u64::from(index.doc_freq(term).unwrap_or(0));
            continue;
        };
        let Ok(Some(mut postings)) = index.read_postings(term, IndexRecordOption::Basic) else { continue };
        let mut doc = postings.doc();
        while doc != TERMINATED {
            documents += u64::from(alive.is_alive(doc));
            doc = postings.advance();
        }
    }
    documents
}

/// Best score first, then the lowest row: a total, repeatable order.
pub fn best_first(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

pub struct TextSearch<'a> {
    /// Also the versions superseded since they were indexed (a read at an
    /// older epoch).
    pub history: bool,
    pub table: &'a str,
    pub tenant: &'a str,
    /// The text columns searched (one, or the table's text columns).
    pub columns: &'a [String],
    pub terms: &'a [String],
    pub stats: &'a QueryStats,
    pub eligible: Arc<RoaringBitmap>,
    /// Only rows below this are read (the hot overlay scores the others).
    pub upto: u32,
    /// How many of the best rows to return; `None`: every match.
    pub depth: Option<usize>,
    /// Let the filter lead: find each eligible row's document and seek the
    /// terms' postings to it, instead of walking the postings and dropping
    /// the documents the filter refuses (cheaper when few rows are eligible
    /// next to the postings of the query's terms). The rows and scores are
    /// the same either way.
    pub lead: bool,
}

pub struct TextHits {
    /// Best first (score, then row).
    pub rows: Vec<(u32, f32)>,
    /// (row, column) documents scored: each column of a row the collector
    /// was handed that matched (the pruning skips the other rows).
    pub scored_documents: u64,
    pub segments: u64,
    pub watermark: u32,
    /// More rows matched than the depth returned.
    pub truncated: bool,
}

/// Collects (row, score) of the eligible documents below `upto` that match,
/// reading the row id from the fast field so no document is loaded: all of
/// them (through `Weight::for_each_pruning` at no threshold), or with `keep`
/// only the best `keep`, through [`max_score_union`], which hands over only
/// documents that may beat the current threshold.
///
/// Scores are summed again over the terms in query order, each column's
/// terms from zero and then the columns in the query's order, as the hot
/// overlay sums a row it scores: the pruning adds a document's term scores
/// in an order that depends on what it skipped before, so the same document
/// could score an ulp apart in two searches of different depth, and a cursor
/// could then see two ties in another order.
/// The threshold handed back is a little below the kept minimum for the same
/// reason (a tie with a lower row must still come through).
///
/// With `keep`, one heap serves every segment, so a segment starts pruning
/// at the best `keep` rows of the segments before it instead of from
/// nothing: an index of many segments (a million rows make a dozen) would
/// otherwise score each segment's first matches until its own heap filled,
/// and the rows scored would grow with the segments, not with `keep`.
struct RowHits {
    eligible: Arc<RoaringBitmap>,
    upto: u32,
    keep: Option<usize>,
    /// The filter leads ([`TextSearch::lead`]): how the part's segments
    /// (these, the searcher's) find a row's documents.
    lead: Option<(Arc<RowOrder>, Vec<SegmentId>)>,
    /// One weight per (column, term), in query order.
    terms: Vec<Box<dyn Weight>>,
    /// The column (its place among the searched ones) of each of `terms`.
    column_of: Vec<usize>,
    /// Each of `terms` as its term and BM25 weight, for [`max_score_union`].
    clauses: Vec<(Term, Bm25Weight)>,
    /// The average length the clauses' weights were made with.
    average: Score,
    /// The best `keep` rows so far, across segments (searched one at a time).
    kept: Mutex<BinaryHeap<Kept>>,
    /// Segments searched: those with a row that may be eligible.
    segments_read: AtomicU64,
}

/// A heap entry; worse rows are greater, so the worst kept row is on top.
#[derive(PartialEq)]
struct Kept(f32, u32);

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        best_first(&(self.1, self.0), &(other.1, other.0))
    }
}

/// Relative slack of the pruning threshold: far above the rounding of a sum
/// of up to `MAX_QUERY_TERMS` f32 terms, far below any real score gap.
const THRESHOLD_SLACK: f32 = 1e-4;

/// What a search collects: with a depth, a row and its score (`place` 0);
/// without, each matched column of a row (its place among the searched
/// columns) and that column's score, which [`TextIndex::search`] sums by
/// row in column order, as the hot overlay does (a row of more than
/// [`SLOTS`] text columns is several documents).
#[derive(Clone, Copy)]
struct Hit {
    row: u32,
    place: u32,
    score: f32,
}

impl Collector for RowHits {
    type Fruit = (Vec<Hit>, u64);
    type Child = NoSegmentCollector;

    fn for_segment(&self, _ord: u32, _segment: &SegmentReader) -> tantivy::Result<NoSegmentCollector> {
        Ok(NoSegmentCollector)
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<(Vec<Hit>, u64)>) -> tantivy::Result<(Vec<Hit>, u64)> {
        let scored = fruits.iter().map(|f| f.1).sum();
        let mut hits: Vec<Hit> = fruits.into_iter().flat_map(|f| f.0).collect();
        // the shared heap holds the best `keep` of every segment
        let kept = std::mem::take(&mut *self.kept.lock());
        hits.extend(kept.into_iter().map(|Kept(score, row)| Hit { row, place: 0, score }));
        Ok((hits, scored))
    }

    fn collect_segment(
        &self,
        weight: &dyn Weight,
        _segment_ord: u32,
        reader: &SegmentReader,
    ) -> tantivy::Result<(Vec<Hit>, u64)> {
        let rows = reader.fast_fields().u64("row")?;
        // a segment none of whose rows can be eligible is not read: a read
        // at an older epoch skips the segments of rows written after it, and
        // of versions superseded in other rounds (the history part's)
        let span = (rows.values.num_vals() > 0).then(|| (rows.values.min_value(), rows.values.max_value()));
        let reachable = span.is_some_and(|(low, high)| {
            let high = high.min(u64::from(self.upto).saturating_sub(1));
            low <= high && self.eligible.range_cardinality(low as u32..=high as u32) > 0
        });
        if !reachable {
            return Ok((Vec::new(), 0));
        }
        self.segments_read.fetch_add(1, Ordering::Relaxed);
        let alive = reader.alive_bitset();
        let mut scorers = self.terms.iter().map(|w| w.scorer(reader, 1.0)).collect::<tantivy::Result<Vec<_>>>()?;
        let keep = self.keep.unwrap_or(usize::MAX);
        // the segments are searched one after another (the index's executor
        // is single-threaded), so this lock is never waited for
        let mut kept = self.kept.lock();
        let heap: &mut BinaryHeap<Kept> = &mut kept;
        let mut all: Vec<Hit> = Vec::new();
        let mut scored = 0u64;
        let threshold = |heap: &BinaryHeap<Kept>| match heap.peek() {
            Some(worst) if heap.len() >= keep => worst.0 - worst.0.abs() * THRESHOLD_SLACK,
            _ => Score::MIN,
        };
        let start = threshold(heap);
        let mut collect = |doc: DocId, _score: Score| {
            // a document handed over and passed by counts once; one taken,
            // once for each of its columns that matched
            let Some(row) = rows.first(doc).filter(|_| !alive.is_some_and(|a| a.is_deleted(doc))) else {
                scored += 1;
                return threshold(heap);
            };
            let row = row as u32;
            if row >= self.upto || !self.eligible.contains(row) {
                scored += 1;
                return threshold(heap);
            }
            // documents come in ascending order, so each term's postings are
            // read forward once; each matched column's score is its terms'
            // in query order from zero (what the hot overlay computes)
            let mut score = 0.0f32;
            let mut matched = false;
            let mut column: Option<(usize, f32)> = None;
            let mut close = |column: Option<(usize, f32)>, score: &mut f32| {
                if let Some((place, partial)) = column {
                    scored += 1;
                    matched = true;
                    *score += partial;
                    if self.keep.is_none() {
                        all.push(Hit { row, place: place as u32, score: partial });
                    }
                }
            };
            for (scorer, &place) in scorers.iter_mut().zip(&self.column_of) {
                if column.is_some_and(|(p, _)| p != place) {
                    close(column.take(), &mut score);
                }
                let at = if scorer.doc() < doc { scorer.seek(doc) } else { scorer.doc() };
                if at == doc {
                    column.get_or_insert((place, 0.0)).1 += scorer.score();
                }
            }
            close(column, &mut score);
            // a document the filter led to may hold none of the terms
            if self.keep.is_none() || !matched {
                return threshold(heap);
            }
            let entry = Kept(score, row);
            if heap.len() < keep {
                heap.push(entry);
            } else if heap.peek().is_some_and(|worst| entry < *worst) {
                heap.pop();
                heap.push(entry);
            }
            threshold(heap)
        };
        if let Some((order, live)) = &self.lead {
            for doc in order.documents(live, reader, &rows, &self.eligible, self.upto) {
                collect(doc, 0.0);
            }
        } else if self.keep.is_some() {
            let mut clauses = Vec::with_capacity(self.clauses.len());
            for (term, weight) in &self.clauses {
                clauses.extend(Clause::open(reader, term, weight, self.average)?);
            }
            max_score_union(clauses, start, &mut collect);
        } else {
            weight.for_each_pruning(start, reader, &mut collect)?;
        }
        // kept rows stay in the shared heap until merge_fruits
        Ok((all, scored))
    }
}

/// How each segment of the current part finds an eligible row's documents,
/// for a search the filter leads ([`TextSearch::lead`]). A segment the
/// indexer wrote holds its documents in row order (one indexing thread adds
/// rows in order), so a search of its `row` fast field finds them; a merge
/// concatenates its segments in the merge policy's order, which is not row
/// order (tantivy's policy orders them by size), and such a segment gets its
/// (row, document) pairs sorted by row, 8 bytes a document, made at the first
/// search that needs them. Kept by segment id (segments never change) for the
/// segments of the searcher that last asked, so a merged-away segment's pairs
/// go with it. The history part (read at older epochs) is walked instead: its
/// documents are in the order versions were superseded, and pairs of every
/// one would grow with the history.
#[derive(Default)]
pub(crate) struct RowOrder(Mutex<HashMap<SegmentId, Arc<SegmentRows>>>);

enum SegmentRows {
    /// The `row` field never falls from one document to the next.
    InOrder,
    /// Each document as `row << 32 | document`, ascending.
    Sorted(Vec<u64>),
}

impl RowOrder {
    fn heap_bytes(&self) -> u64 {
        let segments = self.0.lock();
        let pairs = |rows: &SegmentRows| match rows {
            SegmentRows::InOrder => 0,
            SegmentRows::Sorted(pairs) => pairs.capacity() * std::mem::size_of::<u64>(),
        };
        segments.values().map(|rows| pairs(rows) as u64).sum()
    }

    fn rows_of(&self, live: &[SegmentId], segment: &SegmentReader, rows: &Column<u64>) -> Arc<SegmentRows> {
        let id = segment.segment_id();
        if let Some(known) = self.0.lock().get(&id) {
            return known.clone();
        }
        // every document has its row (the field is set on each)
        let values = &*rows.values;
        let in_order = matches!(rows.index, ColumnIndex::Full) && {
            let mut last = 0;
            values.iter().all(|row| std::mem::replace(&mut last, row) <= row)
        };
        let known = Arc::new(if in_order {
            SegmentRows::InOrder
        } else {
            let mut pairs: Vec<u64> = (0..segment.max_doc())
                .filter_map(|doc| rows.first(doc).map(|row| (row << 32) | u64::from(doc)))
                .collect();
            pairs.sort_unstable();
            SegmentRows::Sorted(pairs)
        });
        let mut segments = self.0.lock();
        segments.retain(|id, _| live.contains(id));
        segments.insert(id, known.clone());
        known
    }

    /// The segment's documents of the rows in `eligible` below `upto`, in
    /// document order: each row found by a galloping search forward from the
    /// last one's place, so the cost is about the eligible rows in the
    /// segment's span, not its documents.
    fn documents(
        &self,
        live: &[SegmentId],
        segment: &SegmentReader,
        rows: &Column<u64>,
        eligible: &RoaringBitmap,
        upto: u32,
    ) -> Vec<DocId> {
        let known = self.rows_of(live, segment, rows);
        let mut documents = Vec::new();
        match &*known {
            SegmentRows::InOrder => {
                let values = &*rows.values;
                gallop(values.num_vals(), |doc| values.get_val(doc), eligible, upto, |doc, _| documents.push(doc));
            }
            SegmentRows::Sorted(pairs) => {
                gallop(
                    pairs.len() as u32,
                    |at| pairs[at as usize] >> 32,
                    eligible,
                    upto,
                    |at, _| {
                        documents.push(pairs[at as usize] as u32);
                    },
                );
                documents.sort_unstable();
            }
        }
        documents
    }
}

/// Calls `found(place, row)` for each place in `0..end` whose row (`row_at`,
/// which never falls as the place grows) is one of the rows in `eligible`
/// below `upto`, finding each by a galloping search forward from the last.
fn gallop(end: u32, row_at: impl Fn(u32) -> u64, eligible: &RoaringBitmap, upto: u32, mut found: impl FnMut(u32, u64)) {
    if end == 0 {
        return;
    }
    let (first, last) = (row_at(0), row_at(end - 1).min(u64::from(upto).saturating_sub(1)));
    if first > last {
        return;
    }
    let mut at: u32 = 0;
    for row in eligible.range(first as u32..=last as u32) {
        let row = u64::from(row);
        // the first place at or after `at` whose row is not below `row`
        if row_at(at) < row {
            let mut step = 1;
            let mut low = at;
            while low + step < end && row_at(low + step) < row {
                low += step;
                step *= 2;
            }
            let mut high = (low + step).min(end);
            while high - low > 1 {
                let middle = low + (high - low) / 2;
                if row_at(middle) < row {
                    low = middle;
                } else {
                    high = middle;
                }
            }
            at = high;
        }
        // a row of more than SLOTS text columns is several documents, one after another
        while at < end && row_at(at) == row {
            found(at, row);
            at += 1;
        }
        if at >= end {
            break;
        }
    }
}

/// Calls `callback` with every document of the union of `clauses` whose
/// score (the sum of its clauses' scores) may be above `threshold`, in
/// ascending order, taking the threshold it returns for the documents
/// after: `Weight::for_each_pruning`'s contract, by MaxScore (Turtle and
/// Flood, 1995) over windows of blocks, as Lucene's `MaxScoreBulkScorer`.
///
/// The documents are taken a window at a time: from the lowest current
/// document of any clause to the first end of a clause's current postings
/// block, so that in the window each clause adds at most its block's maximum
/// score. The clauses are ordered by that bound; the longest run of the
/// lowest ones whose bounds add up to no more than the threshold is
/// "non-essential": a document none of the others contains cannot beat the
/// threshold. Only the other ("essential") clauses' postings are walked, and
/// a non-essential clause is read only at a document the essential ones
/// found, from the highest bound down, and only while what it and the lower
/// ones could add still lifts the document over the threshold. A window no
/// clause can lift over the threshold is skipped whole.
///
/// Block-max WAND (tantivy's pruning of a union) keeps its clauses ordered by
/// their current document and moves a pivot through them one block boundary
/// at a time; with the many common words of a long query (a 20-40-word
/// known-item query, or stopwords) that order is re-sorted at nearly every
/// step; summing a window's essential postings into an array instead is
/// about twice as fast or more there. For a word or two over several columns
/// block-max WAND measured 0.1-0.4 ms faster (it moves through blocks by
/// their skip entries without decoding them, which tantivy keeps to itself),
/// but its block maxima are tantivy's, too low for a column few rows have
/// ([`Clause::block_max`]), so every pruned search comes here. Reading the
/// postings of common words still grows with the corpus.
fn max_score_union(mut clauses: Vec<Clause>, mut threshold: Score, callback: &mut dyn FnMut(DocId, Score) -> Score) {
    clauses.retain(|c| c.doc() != TERMINATED);
    // (bound in the window, clause), lowest bound first
    let mut order: Vec<(Score, usize)> = Vec::with_capacity(clauses.len());
    let mut bound: Vec<Score> = Vec::with_capacity(clauses.len());
    // the essential clauses' scores summed per document of the window, and
    // which documents they found
    let mut sums = vec![0.0f32; MAX_SCORE_WINDOW as usize];
    let mut found = vec![0u64; MAX_SCORE_WINDOW as usize / 64];
    loop {
        let start = clauses.iter().map(Clause::doc).min().unwrap_or(TERMINATED);
        if start == TERMINATED {
            return;
        }
        // the window: from `start` to the first end of a clause's current
        // block; in it each clause adds at most its block's maximum
        let end = clauses.iter().map(Clause::last_doc_in_block).min().unwrap_or(TERMINATED);
        let end = end.min(start + (MAX_SCORE_WINDOW - 1));
        order.clear();
        for (i, c) in clauses.iter_mut().enumerate() {
            if c.doc() <= end {
                order.push((c.block_max(), i));
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        bound.clear();
        let mut sum = 0.0f32;
        for &(max, _) in &order {
            sum += max;
            bound.push(sum);
        }
        // clauses below `essential` are read only where the others matched
        let essential = bound.partition_point(|&b| b <= threshold);
        if essential < order.len() {
            for &(_, i) in &order[essential..] {
                let c = &mut clauses[i];
                while c.doc() <= end {
                    let at = (c.doc() - start) as usize;
                    sums[at] += c.score();
                    found[at / 64] |= 1 << (at % 64);
                    c.advance();
                }
            }
            let words = (end - start) as usize / 64 + 1;
            for (word, slot) in found.iter_mut().enumerate().take(words) {
                let mut bits = std::mem::take(slot);
                while bits != 0 {
                    let at = word * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let doc = start + at as DocId;
                    let mut score = std::mem::take(&mut sums[at]);
                    let mut possible = true;
                    for k in (0..essential).rev() {
                        if score + bound[k] <= threshold {
                            possible = false;
                            break;
                        }
                        let c = &mut clauses[order[k].1];
                        c.seek(doc);
                        if c.doc() == doc {
                            score += c.score();
                        }
                    }
                    if possible && score > threshold {
                        threshold = callback(doc, score);
                    }
                }
            }
        }
        // past the window: every clause, essential or not
        if end == TERMINATED {
            return;
        }
        for c in clauses.iter_mut() {
            c.seek(end + 1);
        }
        clauses.retain(|c| c.doc() != TERMINATED);
    }
}

/// The most documents [`max_score_union`] takes in one window.
const MAX_SCORE_WINDOW: DocId = 4096;

/// Documents per block of tantivy's postings (its `COMPRESSION_BLOCK_SIZE`).
const POSTINGS_BLOCK: usize = 128;

/// One term's postings in a segment, read a block at a time as tantivy's
/// `SegmentPostings` reads them, with the block's maximum score (which
/// `SegmentPostings` does not expose) and the term's BM25 weight.
struct Clause {
    block: BlockSegmentPostings,
    /// Place of the current document in the block.
    cur: usize,
    fieldnorms: FieldNormReader,
    weight: Bm25Weight,
    /// The term weighed at the segment's own average length of the field
    /// (only its length factors are read: see [`Clause::block_max`]).
    segment_weight: Bm25Weight,
    /// min(1, the segment's average length of the field / `weight`'s).
    ratio: Score,
}

impl Clause {
    /// `None` when the segment has no posting of `term`. `average` is the
    /// average length `weight` was made with.
    fn open(
        reader: &SegmentReader,
        term: &Term,
        weight: &Bm25Weight,
        average: Score,
    ) -> tantivy::Result<Option<Clause>> {
        let index = reader.inverted_index(term.field())?;
        let Some(info) = index.get_term_info(term)? else { return Ok(None) };
        let block = index.read_block_postings_from_terminfo(&info, IndexRecordOption::WithFreqs)?;
        // as tantivy's TermWeight: a field without norms scores every document as of length 1
        let fieldnorms = match reader.fieldnorms_readers().get_field(term.field())? {
            Some(norms) => norms,
            None => FieldNormReader::constant(reader.max_doc(), 1),
        };
        // as tantivy's postings serializer computes it
        let segment_average = index.total_num_tokens() as Score / reader.max_doc().max(1) as Score;
        let ratio = if average > 0.0 { (segment_average / average).min(1.0) } else { 1.0 };
        // any positive idf: only the length factor is read
        let segment_weight = Bm25Weight::for_one_term_without_explain(1, 2, segment_average);
        Ok(Some(Clause { block, cur: 0, fieldnorms, weight: weight.clone(), segment_weight, ratio }))
    }

    /// The current document; `TERMINATED` past the last (the last block is
    /// padded with it).
    fn doc(&self) -> DocId {
        self.block.doc(self.cur)
    }

    fn advance(&mut self) {
        if self.cur == POSTINGS_BLOCK - 1 {
            self.cur = 0;
            self.block.advance();
        } else {
            self.cur += 1;
        }
    }

    /// Moves to the first document at or after `target`.
    fn seek(&mut self, target: DocId) {
        if self.doc() >= target {
            return;
        }
        self.cur = (self.cur + 1).min(POSTINGS_BLOCK - 1);
        if self.doc() < target {
            self.cur = self.block.seek(target);
        }
    }

    fn score(&self) -> Score {
        let doc = self.doc();
        self.weight.score(self.fieldnorms.fieldnorm_id(doc), self.block.freq(self.cur))
    }

    /// The most a document of the current block scores.
    ///
    /// tantivy keeps, for each full block, the (length, frequency) pair
    /// whose score is highest at the segment's own average length of the
    /// field: every document of the segment counted, those without the
    /// column as empty. BM25 here uses the average over the rows that have
    /// the column (or over the tenant's columns), which for a column few rows
    /// have is several times higher, and at a higher average a longer
    /// document with the word more often can outscore that pair: scoring the
    /// pair alone (as tantivy's `block_max_score` with this weight does) came
    /// out up to about 7% low, and rows that belonged in the top k were
    /// skipped. So the pair's length factor `m` at the segment's average
    /// bounds every document's frequency in the block (`tf <= m L / (1 - m)`
    /// for its length term `L`), and with `r` the least ratio of the two
    /// averages' length terms (at least min(1, segment average / average)),
    /// no document's factor at this average exceeds `m / (m + r (1 - m))`.
    ///
    /// `m` and the bound are fractions of the term's ceiling ([`ceiling`]),
    /// not of tantivy's `max_score`, which is the score of the longest
    /// document a field can hold and so moves with the average length: taken
    /// as the ceiling at two averages it put the bound below the block's
    /// best score (0.25% below for a one-word query on short texts), and a
    /// block of rows tied with the kept ones was skipped, so a page held
    /// later rows of the tie than the order promises and the next page
    /// repeated some (found by a black-box review).
    fn block_max(&mut self) -> Score {
        let at_segment = self.block.block_max_score(&self.fieldnorms, &self.segment_weight);
        let m = (at_segment / ceiling(&self.segment_weight)).clamp(0.0, 1.0);
        let factor = if m >= 1.0 || self.ratio <= 0.0 { 1.0 } else { m / (m + self.ratio * (1.0 - m)) };
        // a little above, for the rounding of the two divisions
        ceiling(&self.weight) * (factor * (1.0 + 1e-5)).min(1.0)
    }

    fn last_doc_in_block(&self) -> DocId {
        self.block.docs().last().copied().unwrap_or(TERMINATED)
    }
}

/// The most any document can score for a term of weight `w`: its idf x
/// (k1 + 1), the limit of BM25 as the term's frequency grows. An empty
/// document's length term is k1 (1 - b) at any average, and at tantivy's
/// largest frequency the factor is 1 in f32, so this is that product
/// exactly as tantivy computes it.
fn ceiling(w: &Bm25Weight) -> Score {
    w.score(0, 2_013_265_944)
}

/// Unused: [`RowHits`] collects a segment at once in `collect_segment`.
struct NoSegmentCollector;

impl SegmentCollector for NoSegmentCollector {
    type Fruit = (Vec<Hit>, u64);

    fn collect(&mut self, _doc: DocId, _score: Score) {}

    fn harvest(self) -> (Vec<Hit>, u64) {
        (Vec::new(), 0)
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
        let w = |q: &[String]| stats.weights(q);
        assert!(bm25(&w(&q_rare), &q_rare, &doc) > bm25(&w(&q_common), &q_common, &doc));
        let long: Vec<String> = std::iter::repeat_n("x".to_string(), 20).chain(["rare".to_string()]).collect();
        assert!(bm25(&w(&q_rare), &q_rare, &doc) > bm25(&w(&q_rare), &q_rare, &long));
    }

    #[test]
    fn bm25_of_a_text_in_one_pass_equals_bm25_of_its_tokens() {
        let stats = QueryStats {
            docs: 10,
            tokens: 80,
            df: [("fox".to_string(), 2), ("dog".to_string(), 5), ("the".to_string(), 9)].into_iter().collect(),
        };
        let mut analyzer = analyzer();
        let text = "The quick brown fox jumps over the lazy dog; the fox again.";
        let toks = tokens(&mut analyzer, text);
        for query in [vec!["fox"], vec!["fox", "dog", "cat"], vec!["fox", "fox", "the"], vec![], vec!["cat"]] {
            let query: Vec<String> = query.into_iter().map(String::from).collect();
            let weights = stats.weights(&query);
            let one_pass = bm25_text(&weights, &query, &mut analyzer, text);
            assert_eq!(one_pass.to_bits(), bm25(&weights, &query, &toks).to_bits(), "{query:?}");
        }
        // a term given twice counts twice
        let (fox, fox_fox) = (["fox".to_string()], ["fox".to_string(), "fox".to_string()]);
        let once = bm25_text(&stats.weights(&fox), &fox, &mut analyzer, text);
        let twice = bm25_text(&stats.weights(&fox_fox), &fox_fox, &mut analyzer, text);
        assert!((twice - 2.0 * once).abs() < 1e-6 && once > 0.0);
        assert_eq!(bm25_text(&stats.weights(&fox), &fox, &mut analyzer, ""), 0.0);
    }

    #[test]
    fn a_scoped_text_is_tokenized_into_the_terms_of_its_scope() {
        let mut tokenizer = ScopedTokenizer::new();
        let mut terms = |text: &str| {
            let mut stream = tokenizer.token_stream(text);
            let mut out = Vec::new();
            while stream.advance() {
                out.push(stream.token().text.clone());
            }
            out
        };
        // names and texts with the separator, colons, digits and non-Latin letters
        for (table, tenant, column, text) in [
            ("docs", "acme", "body", "The quick brown FOX: 42 jumps"),
            ("t", "12:34", "c", "1:x колонна 東京タワー"),
            ("weird\u{1f}table", "", "title", "x\u{1f}y"),
            ("docs", "acme", "body", ""),
        ] {
            let scope = scope_column_key(table, tenant, column);
            let expected: Vec<String> =
                tokens(&mut analyzer(), text).iter().map(|t| term_text(table, tenant, column, t)).collect();
            assert_eq!(terms(&scoped_text(&scope, text)), expected, "{table:?} {tenant:?} {column:?} {text:?}");
        }
        // a text without a scope (none is written so) is tokenized as it is
        assert_eq!(terms("plain words"), vec!["plain".to_string(), "words".to_string()]);
        assert_eq!(terms("99:short"), vec!["99".to_string(), "short".to_string()]);
    }

    #[test]
    fn a_tenant_wide_scope_is_the_sum_of_its_columns() {
        let mut analyzer = analyzer();
        let mut toks = Tokens::default();
        let mut stats = TextStats::default();
        let acme: Arc<str> = Arc::from("acme");
        stats.apply(&acme, "title", toks.read(&mut analyzer, "Solar wind"), 1);
        stats.apply(&acme, "body", toks.read(&mut analyzer, "the solar wind blows, solar"), 1);
        stats.apply(&acme, "body", toks.read(&mut analyzer, "calm sea"), 1);
        stats.apply(&Arc::from("other"), "body", toks.read(&mut analyzer, "solar solar"), 1);
        let terms = ["solar", "calm", "absent"].map(String::from);
        let summary = |q: QueryStats| (q.docs, q.tokens, terms.iter().map(|t| q.df[t]).collect::<Vec<_>>());

        assert_eq!(summary(stats.snapshot("acme", None, &terms)), (3, 9, vec![2, 1, 0]));
        assert_eq!(summary(stats.snapshot("acme", Some("body"), &terms)), (2, 7, vec![1, 1, 0]));
        assert_eq!(summary(stats.snapshot("other", None, &terms)), (1, 2, vec![1, 0, 0]));
        assert_eq!(summary(stats.snapshot("nobody", None, &terms)), (0, 0, vec![0, 0, 0]));

        stats.apply(&acme, "title", toks.read(&mut analyzer, "Solar wind"), -1);
        let expected = (2, 7, vec![1, 1, 0]);
        assert_eq!(summary(stats.snapshot("acme", None, &terms)), expected);

        let loaded = TextStats::import(stats.export()).expect("packed scopes decode");
        assert_eq!(summary(loaded.snapshot("acme", None, &terms)), expected);
        assert_eq!(summary(loaded.snapshot("other", Some("body"), &terms)), (1, 2, vec![1, 0, 0]));

        // an image before format 5 also holds a tenant-wide scope: dropped
        let mut image: Vec<ScopeImage<ScopeStats>> = stats
            .export()
            .into_iter()
            .map(|s| ScopeImage { tenant: s.tenant, column: s.column, stats: s.stats.stats().unwrap() })
            .collect();
        image.push(ScopeImage {
            tenant: "acme".into(),
            column: None,
            stats: ScopeStats { docs: 99, ..Default::default() },
        });
        let loaded = TextStats::import(image).expect("scopes decode");
        assert_eq!(summary(loaded.snapshot("acme", None, &terms)), expected);
        assert_eq!(summary(loaded.snapshot("other", Some("body"), &terms)), (1, 2, vec![1, 0, 0]));
    }

    #[test]
    fn packed_frequencies_round_trip_and_damage_is_refused() {
        let long = "x".repeat(39);
        let mut df = crate::FastMap::default();
        for (token, count) in [("a", 1), ("solar", 127), ("ünïcode", 128), (long.as_str(), 300), ("", u64::MAX)] {
            df.insert(TokenKey::from(token), count);
        }
        let packed = pack_df(&df);
        assert_eq!(unpack_df(&packed), Some(df));
        for cut in 0..packed.len() {
            assert_eq!(unpack_df(&packed[..cut]), None, "cut at {cut}");
        }
        let mut longer = packed.clone();
        longer.push(0);
        assert_eq!(unpack_df(&longer), None);
        // a count far beyond the bytes reserves no more than they could hold
        assert_eq!(unpack_df(&[0xff, 0xff, 0xff, 0xff, 0x0f]), None);
        // a token that is not UTF-8
        assert_eq!(unpack_df(&[1, 1, 0xff, 1]), None);
    }

    #[test]
    fn distinct_tokens_are_sorted_once_each_and_stop_past_the_limit() {
        let mut analyzer = analyzer();
        let text = "b A a c b B ".repeat(10_000);
        assert_eq!(distinct_tokens(&mut analyzer, &text, 3).unwrap(), vec!["a", "b", "c"]);
        let mut expected = tokens(&mut analyzer, &text);
        expected.sort();
        expected.dedup();
        assert_eq!(distinct_tokens(&mut analyzer, &text, 1_024).unwrap(), expected);
        // the fourth distinct term ends the read: nothing past it is kept
        assert_eq!(distinct_tokens(&mut analyzer, "w x y z v u", 3), Err(4));
    }

    #[test]
    fn reused_tokens_are_the_analyzer_tokens() {
        let mut analyzer = analyzer();
        let mut scratch = Tokens::default();
        for text in [
            "The Solar WIND, the solar wind!",
            "",
            "   ",
            "one",
            "é Ünïcode wörds and a verylongtokenthatisfarlongerthanfortycharacters x",
        ] {
            let expected = tokens(&mut analyzer, text);
            let read = scratch.read(&mut analyzer, text);
            assert_eq!(read.iter().collect::<Vec<_>>(), expected, "{text:?}");
            assert_eq!(read.len(), expected.len());
            assert_eq!(read.is_empty(), expected.is_empty());
        }
    }
    /// The best score of a document in `clause`'s current block.
    fn best_in_block(clause: &Clause, weight: &Bm25Weight) -> Score {
        let docs = clause.block.docs().iter().zip(clause.block.freqs()).filter(|(&doc, _)| doc != TERMINATED);
        docs.map(|(&doc, &tf)| weight.score(clause.fieldnorms.fieldnorm_id(doc), tf)).fold(0.0, f32::max)
    }

    /// A block's bound is never below the best score of a document in it,
    /// also for a column few rows have, whose average length over its rows
    /// is several times the segment's over every document (where scoring
    /// tantivy's stored best pair alone comes out too low).
    #[test]
    fn a_block_bound_is_never_below_its_best_score() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = TextIndex::open(dir.path()).unwrap();
        let words = ["the", "of", "a", "to", "in", "water", "stone", "river"];
        let mut seed = 17u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut stats = QueryStats::default();
        let mut analyzer = analyzer();
        for row in 0..20_000u32 {
            let body = (0..3 + next(10)).map(|_| words[next(8).min(next(8)) as usize]).collect::<Vec<_>>().join(" ");
            let mut texts = vec![("body", body)];
            // one row in ten has a note of 1 to 60 words
            if row % 10 == 0 {
                let note =
                    (0..1 + next(60)).map(|_| words[next(8).min(next(8)) as usize]).collect::<Vec<_>>().join(" ");
                let toks = tokens(&mut analyzer, &note);
                stats.docs += 1;
                stats.tokens += toks.len() as u64;
                for t in toks.into_iter().collect::<std::collections::HashSet<_>>() {
                    *stats.df.entry(t).or_default() += 1;
                }
                texts.push(("note", note));
            }
            let texts: Vec<(&str, &str)> = texts.iter().map(|(c, t)| (*c, t.as_str())).collect();
            index.add_row(row, "docs", "t", &texts).unwrap();
            if row % 7_000 == 6_999 {
                index.mark_pending(row + 1);
                index.commit().unwrap();
            }
        }
        index.mark_pending(20_000);
        index.commit().unwrap();
        let slot = index.slots.lock().get("docs", "note").unwrap();
        let average = stats.tokens as Score / stats.docs as Score;
        let searcher = index.current.reader.searcher();
        let (mut blocks, mut pair_too_low) = (0, 0);
        for word in words {
            let term = Term::from_field_text(index.fields.text[slot % SLOTS], &term_text("docs", "t", "note", word));
            let weight = Bm25Weight::for_terms(&stats, std::slice::from_ref(&term)).unwrap();
            for segment in searcher.segment_readers() {
                let Some(mut clause) = Clause::open(segment, &term, &weight, average).unwrap() else { continue };
                while clause.doc() != TERMINATED {
                    let best = best_in_block(&clause, &weight);
                    // tantivy's stored pair scored with this weight (a copy:
                    // the cursor keeps the first maximum it computed)
                    let pair = clause.block.clone().block_max_score(&clause.fieldnorms, &weight);
                    let bound = clause.block_max();
                    assert!(bound >= best, "{word}: block bound {bound} below its best score {best}");
                    blocks += 1;
                    pair_too_low += usize::from(pair < best);
                    clause.seek(clause.last_doc_in_block() + 1);
                }
            }
        }
        assert!(blocks > 20, "only {blocks} blocks");
        // the case the bound is for happens here
        assert!(pair_too_low > 0, "tantivy's stored pair was never too low in {blocks} blocks");

        // and at any average the weight is made with, below the segment's as
        // well as above it, in both columns: with tantivy's `max_score` (the
        // longest document's score, which moves with the average) taken for
        // the ceiling, a one-word query on short texts bounded blocks 0.25%
        // below their best score when the query's average was the lower
        let mut checked = 0;
        for column in ["body", "note"] {
            let slot = index.slots.lock().get("docs", column).unwrap();
            for word in words {
                let term =
                    Term::from_field_text(index.fields.text[slot % SLOTS], &term_text("docs", "t", column, word));
                for average in [0.5, 1.0, 2.0, 4.0, 9.0, 30.0] {
                    let weight = Bm25Weight::for_one_term_without_explain(500, 20_000, average);
                    for segment in searcher.segment_readers() {
                        let Some(mut clause) = Clause::open(segment, &term, &weight, average).unwrap() else {
                            continue;
                        };
                        while clause.doc() != TERMINATED {
                            let best = best_in_block(&clause, &weight);
                            let bound = clause.block_max();
                            assert!(bound >= best, "{column} {word} at average {average}: bound {bound} below {best}");
                            checked += 1;
                            clause.seek(clause.last_doc_in_block() + 1);
                        }
                    }
                }
            }
        }
        assert!(checked > 1_000, "only {checked} blocks");
    }

    /// The indexer refreshes the readers every round: a refresh reloads
    /// only when the committed segments changed (a merge ended), so a
    /// branch under a stream of small writes does not open every segment
    /// again each round, and a merge is still seen.
    #[test]
    fn a_refresh_reloads_only_when_a_merge_changed_the_segments() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = TextIndex::open(dir.path()).unwrap();
        let generation = |index: &TextIndex| index.current.reader.searcher().generation().generation_id();
        for row in 0..3u32 {
            index.add_row(row, "docs", "t", &[("body", "solar wind")]).unwrap();
            index.mark_pending(row + 1);
            index.commit().unwrap();
        }
        let committed = generation(&index);
        for _ in 0..3 {
            index.refresh();
        }
        assert_eq!(generation(&index), committed, "nothing changed, nothing reloaded");
        // a merge of the three segments, as the merge policy starts them
        let ids = index.current.index.searchable_segment_ids().unwrap();
        assert_eq!(ids.len(), 3);
        index.current.writer.lock().as_mut().unwrap().merge(&ids).wait().unwrap();
        index.refresh();
        assert_ne!(generation(&index), committed, "the merge is seen");
        assert_eq!(index.current.reader.searcher().segment_readers().len(), 1);
        let merged = generation(&index);
        index.refresh();
        assert_eq!(generation(&index), merged);
        assert_eq!(index.scope_documents("docs", "t"), 3);
    }

    /// A search the filter leads finds the rows, with their scores to the
    /// bit, that a walk of the postings finds: over segments the indexer
    /// wrote, one merged from them out of row order (found through its rows
    /// sorted),
    /// versions moved to the history part, rows of two columns, and filters
    /// from a few rows to all of them.
    #[test]
    fn a_search_the_filter_leads_finds_what_the_walk_finds() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = TextIndex::open(dir.path()).unwrap();
        let words = ["the", "of", "a", "solar", "wind", "rain", "storm", "quiet", "river", "stone"];
        let mut seed = 7u64;
        let mut next = move |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize % n
        };
        let rows = 900u32;
        let mut df: HashMap<String, u64> = HashMap::new();
        let mut tokens = 0u64;
        for row in 0..rows {
            // the first words in most texts, as in real ones
            let body: Vec<&str> = (0..1 + next(14)).map(|_| words[next(words.len()).min(next(words.len()))]).collect();
            let title = words[next(words.len())];
            tokens += body.len() as u64 + 1;
            let mut seen: Vec<&str> = body.iter().copied().chain([title]).collect();
            seen.sort_unstable();
            seen.dedup();
            for word in seen {
                *df.entry(word.to_string()).or_default() += 1;
            }
            index.add_row(row, "docs", "t", &[("body", &body.join(" ")), ("title", title)]).unwrap();
            if row % 150 == 149 {
                index.mark_pending(row + 1);
                index.commit().unwrap();
            }
        }
        let moved: Vec<u32> = (0..rows).step_by(9).collect();
        index.supersede(&moved).unwrap();
        for &row in &moved {
            index.add_superseded(row, "docs", "t", &[("body", "the river of stone"), ("title", "quiet")]).unwrap();
        }
        index.commit().unwrap();
        // three segments merged last rows first: out of row order
        let searcher = index.current.reader.searcher();
        let mut segments: Vec<(u64, SegmentId)> = searcher
            .segment_readers()
            .iter()
            .map(|s| (s.fast_fields().u64("row").unwrap().values.min_value(), s.segment_id()))
            .collect();
        assert!(segments.len() >= 4, "{} segments", segments.len());
        segments.sort_unstable_by(|a, b| b.cmp(a));
        let ids: Vec<SegmentId> = segments.iter().take(3).map(|&(_, id)| id).collect();
        index.current.writer.lock().as_mut().unwrap().merge(&ids).wait().unwrap();
        index.refresh();
        let stats = QueryStats { docs: u64::from(rows), tokens, df };
        let queries: [&[&str]; 4] =
            [&["the"], &["solar", "wind"], &["the", "of", "a", "river"], &["stone", "the", "quiet"]];
        let searched = [vec!["body".to_string()], vec!["body".to_string(), "title".to_string()]];
        for (q, terms) in queries.iter().enumerate() {
            let terms: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
            for every in [1u32, 2, 7, 40, 300] {
                let eligible: RoaringBitmap = (0..rows).filter(|r| (r * 31 + q as u32).is_multiple_of(every)).collect();
                for (columns, depth, history) in
                    [(0, Some(10), false), (1, Some(10), true), (1, Some(500), false), (0, None, true)]
                {
                    let search = |lead| {
                        index
                            .search(&TextSearch {
                                history,
                                table: "docs",
                                tenant: "t",
                                columns: &searched[columns],
                                terms: &terms,
                                stats: &stats,
                                eligible: Arc::new(eligible.clone()),
                                upto: rows,
                                depth,
                                lead,
                            })
                            .unwrap()
                    };
                    let (walked, led) = (search(false), search(true));
                    let bits = |hits: &TextHits| {
                        hits.rows.iter().map(|&(row, score)| (row, score.to_bits())).collect::<Vec<_>>()
                    };
                    let case = format!("{terms:?} every {every} columns {columns} depth {depth:?} history {history}");
                    assert_eq!(bits(&led), bits(&walked), "{case}");
                    assert_eq!(led.truncated, walked.truncated, "{case}");
                    assert!(!walked.rows.is_empty(), "{case}");
                }
            }
        }
        // the merged segment is out of row order (its rows sorted), the others in it
        let searcher = index.current.reader.searcher();
        let live: Vec<SegmentId> = searcher.segment_readers().iter().map(SegmentReader::segment_id).collect();
        let order: Vec<bool> = searcher
            .segment_readers()
            .iter()
            .map(|segment| {
                let rows = index.row_order.rows_of(&live, segment, &segment.fast_fields().u64("row").unwrap());
                matches!(*rows, SegmentRows::InOrder)
            })
            .collect();
        assert!(order.contains(&false) && order.contains(&true), "{order:?}");
        // the merged segment's pairs, 8 bytes a document, are what the memory estimate counts
        let merged: u64 = searcher.segment_readers().iter().map(|s| u64::from(s.max_doc())).max().unwrap();
        assert!(index.row_map_bytes() >= 8 * merged, "{} bytes", index.row_map_bytes());
    }

    /// A segment none of whose rows is eligible is not read (a read at an
    /// older epoch, whose rows are all below the later segments'), and
    /// explain's segment count says so.
    #[test]
    fn segments_without_an_eligible_row_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = TextIndex::open(dir.path()).unwrap();
        for row in 0..300u32 {
            index.add_row(row, "docs", "t", &[("body", "the water of the river")]).unwrap();
            if row % 100 == 99 {
                index.mark_pending(row + 1);
                index.commit().unwrap();
            }
        }
        let stats = QueryStats { docs: 300, tokens: 1500, df: [("water".to_string(), 300)].into_iter().collect() };
        let terms = vec!["water".to_string()];
        let columns = vec!["body".to_string()];
        let search = |eligible: RoaringBitmap| {
            index
                .search(&TextSearch {
                    history: false,
                    table: "docs",
                    tenant: "t",
                    columns: &columns,
                    terms: &terms,
                    stats: &stats,
                    eligible: Arc::new(eligible),
                    upto: 300,
                    depth: Some(10),
                    lead: false,
                })
                .unwrap()
        };
        let all = search((0..300).collect());
        assert_eq!(all.segments, index.current.reader.searcher().segment_readers().len() as u64);
        let early = search((0..100).step_by(3).collect());
        assert_eq!(early.segments, 1, "only the first segment holds eligible rows");
        assert_eq!(early.rows.len(), 10);
        assert!(early.rows.iter().all(|&(row, _)| row < 100 && row % 3 == 0));
        assert!(early.scored_documents <= 100);
        assert_eq!(search(RoaringBitmap::new()).segments, 0);
    }

    /// Deletes of a few rows go as a term each and of more as set queries:
    /// both remove exactly their rows' documents.
    #[test]
    fn few_and_many_deleted_rows_leave_exactly_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = TextIndex::open(dir.path()).unwrap();
        let rows = 300u32;
        for row in 0..rows {
            index.add_row(row, "docs", "t", &[("body", "solar wind")]).unwrap();
        }
        index.mark_pending(rows);
        index.commit().unwrap();
        let few: Vec<u32> = (0..DELETE_BY_TERM as u32).step_by(7).collect();
        let many: Vec<u32> = (100..100 + 2 * DELETE_BY_TERM as u32).collect();
        index.supersede(&few).unwrap();
        index.delete_rows(&many, 1).unwrap();
        index.commit().unwrap();
        let searcher = index.current.reader.searcher();
        let mut alive = Vec::new();
        for segment in searcher.segment_readers() {
            let column = segment.fast_fields().u64("row").unwrap();
            alive.extend(segment.doc_ids_alive().map(|doc| column.first(doc).unwrap() as u32));
        }
        alive.sort_unstable();
        let expected: Vec<u32> = (0..rows).filter(|r| !few.contains(r) && !many.contains(r)).collect();
        assert_eq!(alive, expected);
    }

    /// An index of layout 2 (one document per row and column: fields
    /// `row`, `scope`, `col`, `text`) is removed on open and rebuilt from row
    /// 0, and the open says why; one of this layout with a schema that is
    /// not its own is rebuilt as damaged.
    #[test]
    fn an_index_of_an_older_layout_or_another_schema_is_rebuilt() {
        let old_schema = {
            let mut builder = Schema::builder();
            builder.add_u64_field("row", INDEXED | FAST);
            builder.add_text_field("scope", STRING);
            builder.add_text_field("col", STRING);
            builder.add_text_field("text", tantivy::schema::TEXT);
            builder.build()
        };
        let write = |dir: &Path, schema: Schema, payload: &str| {
            let index = Index::create_in_dir(dir, schema.clone()).unwrap();
            let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
            let mut doc = TantivyDocument::default();
            doc.add_u64(schema.get_field("row").unwrap(), 3);
            writer.add_document(doc).unwrap();
            let mut prepared = writer.prepare_commit().unwrap();
            prepared.set_payload(payload);
            prepared.commit().unwrap();
        };
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), old_schema.clone(), "2:10:0");
        let (index, why) = TextIndex::open(dir.path()).unwrap();
        assert_eq!(index.watermark(), 0);
        assert_eq!(index.indexed_documents(), 0);
        assert!(why.as_deref().is_some_and(|w| w.contains("layout 2") && w.contains("layout 3")), "{why:?}");
        index.add_row(0, "docs", "t", &[("body", "solar wind")]).unwrap();
        index.mark_pending(1);
        index.commit().unwrap();
        drop(index);
        let (index, why) = TextIndex::open(dir.path()).unwrap();
        assert_eq!((index.watermark(), why), (1, None));
        assert_eq!(index.scope_documents("docs", "t"), 1);
        drop(index);

        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), old_schema, "3:10:0:{}");
        let (index, why) = TextIndex::open(dir.path()).unwrap();
        assert_eq!(index.watermark(), 0);
        assert!(why.is_some_and(|w| w.contains("schema")));
    }
}
