//! Top-k text search (issue 12): the pruned text path returns exactly the
//! best rows of the full ranking, paging past its depth widens it without a
//! duplicate or a gap (also after the cursor cache is gone and after a
//! restart), and filters hold.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use braid_engine::index::text::{best_first, QueryStats, TextHits, TextIndex, TextSearch};
use braid_engine::query::{HybridQuery, QueryResponse};
use braid_engine::{Engine, EngineConfig, RecordInput};
use roaring::RoaringBitmap;
use serde_json::{json, Value};

mod common;

/// A small deterministic generator (no dev-dependency needed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const VOCAB: [&str; 24] = [
    "the", "of", "a", "to", "in", "water", "light", "stone", "river", "cold", "green", "small", "house", "north",
    "iron", "music", "salt", "glass", "wind", "seed", "bridge", "lamp", "wolf", "honey",
];

/// Words with a skewed distribution, as real text has: the first ones in
/// most documents (the text of a query matches much of the corpus).
fn sentence(rng: &mut Lcg) -> String {
    let len = 3 + rng.below(12);
    (0..len)
        .map(|_| {
            let a = rng.below(VOCAB.len() as u64);
            let b = rng.below(VOCAB.len() as u64);
            VOCAB[a.min(b) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn tokens(text: &str) -> Vec<String> {
    braid_engine::index::text::tokens(&mut braid_engine::index::text::analyzer(), text)
}

/// Counts one indexed document of `text` into the BM25 statistics.
fn count(stats: &mut QueryStats, text: &str) {
    let toks = tokens(text);
    stats.docs += 1;
    stats.tokens += toks.len() as u64;
    for t in toks.into_iter().collect::<HashSet<String>>() {
        *stats.df.entry(t).or_default() += 1;
    }
}

/// A search of table "docs", tenant "t", over `columns`, rows below `upto`:
/// with the filter leading and walking the postings, which must find the
/// same rows with the same scores, to the bit.
fn search_docs(
    index: &TextIndex,
    columns: &[String],
    terms: &[String],
    stats: &QueryStats,
    eligible: &Arc<RoaringBitmap>,
    upto: u32,
    depth: Option<usize>,
) -> TextHits {
    let search = |lead| {
        let req = TextSearch {
            history: false,
            table: "docs",
            tenant: "t",
            columns,
            terms,
            stats,
            eligible: eligible.clone(),
            upto,
            depth,
            lead,
        };
        index.search(&req).unwrap()
    };
    let (walked, led) = (search(false), search(true));
    let bits = |hits: &TextHits| hits.rows.iter().map(|&(row, score)| (row, score.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&led), bits(&walked), "{terms:?} over {} eligible rows", eligible.len());
    assert_eq!(led.truncated, walked.truncated);
    walked
}

#[test]
fn pruned_top_k_equals_the_full_ranking_for_random_queries_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let index = TextIndex::open(dir.path()).unwrap().0;
    let mut rng = Lcg(7);
    let mut stats = QueryStats::default();
    let rows = 4000u32;
    for row in 0..rows {
        // two tenants interleaved; the other tenant's postings must not count
        let tenant = if row % 3 == 0 { "other" } else { "t" };
        let text = sentence(&mut rng);
        index.add_row(row, "docs", tenant, &[("body", &text)]).unwrap();
        if tenant == "t" {
            count(&mut stats, &text);
        }
        // several segments, as a live index has
        if row % 1000 == 999 {
            index.mark_pending(row + 1);
            index.commit().unwrap();
        }
    }
    assert!(index.watermark() == rows);

    let mut pruned = 0;
    let mut large = 0;
    for round in 0..60 {
        let n_terms = 1 + rng.below(6) as usize;
        let terms: Vec<String> = {
            let mut t: Vec<String> =
                (0..n_terms).map(|_| VOCAB[rng.below(VOCAB.len() as u64) as usize].to_string()).collect();
            t.sort();
            t.dedup();
            t
        };
        // a filter keeping a random share of rows, or everything
        let keep = [100, 50, 10, 1][round % 4];
        let eligible: RoaringBitmap = (0..rows).filter(|_| rng.below(100) < keep).collect();
        let eligible = Arc::new(eligible);
        let columns = vec!["body".to_string()];
        let search = |depth: Option<usize>| search_docs(&index, &columns, &terms, &stats, &eligible, rows, depth);
        let mut full = search(None).rows;
        full.sort_by(best_first);
        for row in full.iter().map(|h| h.0) {
            assert!(row % 3 != 0, "another tenant's row {row} matched");
            assert!(eligible.contains(row), "row {row} is not eligible");
        }
        for k in [1, 10, 100] {
            let top = search(Some(k));
            let want: Vec<(u32, f32)> = full.iter().copied().take(k).collect();
            assert_eq!(top.rows, want, "round {round}, terms {terms:?}, keep {keep}%, k {k}");
            assert_eq!(top.truncated, full.len() > k);
            if k == 10 && keep == 100 && full.len() > 1000 {
                large += 1;
                pruned += (top.scored_documents * 2 < full.len() as u64) as usize;
            }
        }
    }
    // the words match much of the corpus, and the pruning hands over fewer
    // than half of the matches for a top 10
    assert!(large >= 5, "only {large} queries matched over 1000 rows");
    assert!(pruned * 10 >= large * 8, "pruning skipped half of the matches in only {pruned} of {large} queries");
}

/// Rows tied on score are ranked by row, also when the index holds them out
/// of row order (a merge concatenates segments in any order) and the
/// query's average length (its tenant's) is below the segment's (every
/// tenant's): the pruning's block bounds were taken against tantivy's
/// `max_score`, which moves with the average, and came out 0.25% below the
/// blocks' best scores, so a block of lower rows tied with the kept ones was
/// skipped and a top k held higher rows of the tie (found by a black-box
/// review: a page repeated rows of the one before and skipped others).
#[test]
fn tied_rows_rank_by_row_when_the_index_holds_them_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let index = TextIndex::open(dir.path()).unwrap().0;
    // another tenant's long texts raise the field's average in the segment
    let long = vec!["word"; 30].join(" ");
    for row in 0..300u32 {
        index.add_row(row, "docs", "other", &[("body", &long)]).unwrap();
    }
    // this tenant's rows, one text each, newest row first: the lowest rows
    // come last in the segment
    let mut stats = QueryStats::default();
    for row in (300..1500u32).rev() {
        let text = if row % 3 == 0 { "tie break" } else { "tie" };
        index.add_row(row, "docs", "t", &[("body", text)]).unwrap();
        count(&mut stats, text);
    }
    index.mark_pending(1500);
    index.commit().unwrap();
    let columns = vec!["body".to_string()];
    let terms = vec!["tie".to_string()];
    let eligible = Arc::new((0..1500u32).collect::<RoaringBitmap>());
    let mut full = search_docs(&index, &columns, &terms, &stats, &eligible, 1500, None).rows;
    full.sort_by(best_first);
    assert_eq!(full.len(), 1200);
    for k in [1, 3, 10, 100] {
        let top = search_docs(&index, &columns, &terms, &stats, &eligible, 1500, Some(k));
        assert_eq!(top.rows, full[..k].to_vec(), "top {k}");
    }
    // the best are the one-word texts, lowest row first
    assert_eq!(full[0].0, 301);
}

/// An index of `rows` rows of table "docs", tenant "t", in three text
/// columns of different lengths, one of which some rows lack: `body` a
/// sentence, `note` a sentence in one row of every `note_every`, `title` the
/// first `title_words` words of a sentence; a segment every `segment_rows`
/// rows. Returns the index (and its directory), its statistics and the
/// columns.
fn three_columns(
    rng: &mut Lcg,
    rows: u32,
    note_every: u32,
    title_words: usize,
    segment_rows: u32,
) -> (tempfile::TempDir, TextIndex, QueryStats, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let index = TextIndex::open(dir.path()).unwrap().0;
    let mut stats = QueryStats::default();
    let columns = vec!["body".to_string(), "note".to_string(), "title".to_string()];
    for row in 0..rows {
        let mut texts = Vec::new();
        for (c, column) in columns.iter().enumerate() {
            if c == 1 && row % note_every != 0 {
                continue;
            }
            let text = match c {
                2 => sentence(rng).split(' ').take(title_words).collect::<Vec<_>>().join(" "),
                _ => sentence(rng),
            };
            count(&mut stats, &text);
            texts.push((column.as_str(), text));
        }
        let texts: Vec<(&str, &str)> = texts.iter().map(|(c, t)| (*c, t.as_str())).collect();
        index.add_row(row, "docs", "t", &texts).unwrap();
        if row % segment_rows == segment_rows - 1 {
            index.mark_pending(row + 1);
            index.commit().unwrap();
        }
    }
    (dir, index, stats, columns)
}

/// Over several columns a row's score is the sum of its columns'
/// documents: the top k is exactly the full ranking's, score bits included,
/// with a column some rows lack and columns of different lengths. (A
/// threshold rule that found it from each column's best documents was
/// tried against this test and measured: on WordNet glosses in three text
/// columns at 100,000 records it was 4 times slower for common words, and
/// was not kept; bench/JOURNAL.md, "The eighth session".)
#[test]
fn top_k_over_several_columns_equals_the_full_ranking() {
    let mut rng = Lcg(11);
    let rows = 6000u32;
    let (_dir, index, stats, columns) = three_columns(&mut rng, rows, 4, 3, 1500);
    let (mut large, mut pruned) = (0, 0);
    for round in 0..40 {
        let n_terms = 1 + rng.below(5) as usize;
        let mut terms: Vec<String> =
            (0..n_terms).map(|_| VOCAB[rng.below(VOCAB.len() as u64) as usize].to_string()).collect();
        terms.dedup();
        let keep = [100, 30, 2][round % 3];
        let eligible = Arc::new((0..rows).filter(|_| rng.below(100) < keep).collect::<RoaringBitmap>());
        let search = |depth: Option<usize>| search_docs(&index, &columns, &terms, &stats, &eligible, rows, depth);
        let mut full = search(None).rows;
        full.sort_by(best_first);
        let scored_in_full = search(None).scored_documents;
        for k in [1, 10, 100, 2000] {
            let top = search(Some(k));
            let want: Vec<(u32, f32)> = full.iter().copied().take(k).collect();
            let bits = |r: &[(u32, f32)]| r.iter().map(|(row, s)| (*row, s.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(&top.rows), bits(&want), "round {round}, terms {terms:?}, keep {keep}%, k {k}");
            assert_eq!(top.truncated, full.len() > k, "round {round}, k {k}");
            if k == 10 && keep == 100 && full.len() > 1000 {
                large += 1;
                pruned += (top.scored_documents * 2 < scored_in_full) as usize;
            }
        }
    }
    // a row's columns are one document, so the pruning works over several
    // columns too (it scored every match when each column was a document of
    // its own)
    assert!(large >= 5, "only {large} queries matched over 1000 rows");
    assert!(pruned * 10 >= large * 8, "pruning skipped half of the matches in only {pruned} of {large} queries");
}

/// Queries of many words (a known-item query, or a run of stopwords), which
/// block-max WAND pruned slowly, are pruned by MaxScore over windows of blocks
/// (index/text.rs, `max_score_union`): over one column and over three, with
/// filters, their top k is the full ranking's to the bit, and they still
/// hand over far fewer documents than match.
#[test]
fn long_queries_rank_exactly_and_prune() {
    let mut rng = Lcg(23);
    let rows = 8000u32;
    let (_dir, index, stats, columns) = three_columns(&mut rng, rows, 3, 2, 2000);
    let (mut large, mut pruned) = (0, 0);
    for round in 0..48 {
        // 4 to 20 distinct words, the commonest ones among them often
        let n_terms = 4 + rng.below(17) as usize;
        let mut terms: Vec<String> = Vec::new();
        while terms.len() < n_terms {
            let a = rng.below(VOCAB.len() as u64);
            let word = VOCAB[if round % 2 == 0 { a.min(rng.below(VOCAB.len() as u64)) } else { a } as usize];
            if !terms.iter().any(|t| t == word) {
                terms.push(word.to_string());
            }
        }
        let searched = if round % 3 == 0 { &columns[..1] } else { &columns[..] };
        let keep = [100, 100, 40, 5][round % 4];
        let eligible = Arc::new((0..rows).filter(|_| rng.below(100) < keep).collect::<RoaringBitmap>());
        let search = |depth: Option<usize>| search_docs(&index, searched, &terms, &stats, &eligible, rows, depth);
        let everything = search(None);
        let mut full = everything.rows;
        full.sort_by(best_first);
        for k in [1, 10, 100] {
            let top = search(Some(k));
            let want: Vec<(u32, f32)> = full.iter().copied().take(k).collect();
            let bits = |r: &[(u32, f32)]| r.iter().map(|(row, s)| (*row, s.to_bits())).collect::<Vec<_>>();
            assert_eq!(
                bits(&top.rows),
                bits(&want),
                "round {round}, terms {terms:?}, columns {searched:?}, keep {keep}%, k {k}"
            );
            assert_eq!(top.truncated, full.len() > k, "round {round}, k {k}");
            if k == 10 && keep == 100 {
                large += 1;
                pruned += (top.scored_documents * 2 < everything.scored_documents) as usize;
            }
        }
    }
    assert!(large >= 20, "only {large} unfiltered queries");
    assert!(pruned * 10 >= large * 8, "pruning skipped half of the matches in only {pruned} of {large} queries");
}

/// A column few rows have, of very different lengths: tantivy keeps each
/// postings block's best (length, frequency) pair as scored at the
/// segment's own average length of the field (every document counted),
/// far below the average BM25 uses (the rows that have it), and a block's
/// maximum read from that pair alone was too low: a black-box test saw rows
/// left out of the top k on WordNet glosses in a column 30% of rows have.
/// The bound itself is checked block by block in index/text.rs
/// (`a_block_bound_is_never_below_its_best_score`); here queries over such a
/// column, of one to six common words, equal the full ranking.
#[test]
fn a_column_few_rows_have_ranks_exactly() {
    let mut rng = Lcg(31);
    let rows = 12000u32;
    let dir = tempfile::tempdir().unwrap();
    let index = TextIndex::open(dir.path()).unwrap().0;
    let mut stats = QueryStats::default();
    let columns = ["body".to_string(), "note".to_string()];
    for row in 0..rows {
        let body = sentence(&mut rng);
        count(&mut stats, &body);
        // `note` in one row of every ten, of 1 to 60 words: lengths and
        // frequencies that rank differently at the two averages
        let note = (row % 10 == 0).then(|| {
            let len = 1 + rng.below(60);
            (0..len)
                .map(|_| VOCAB[rng.below(VOCAB.len() as u64).min(rng.below(VOCAB.len() as u64)) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        });
        let mut texts = vec![("body", body.as_str())];
        if let Some(note) = &note {
            count(&mut stats, note);
            texts.push(("note", note.as_str()));
        }
        index.add_row(row, "docs", "t", &texts).unwrap();
        if row % 3000 == 2999 {
            index.mark_pending(row + 1);
            index.commit().unwrap();
        }
    }
    let eligible = Arc::new((0..rows).collect::<RoaringBitmap>());
    for round in 0..36 {
        let n_terms = 1 + round % 6;
        let mut terms: Vec<String> = Vec::new();
        while terms.len() < n_terms {
            let word = VOCAB[rng.below(8) as usize];
            if !terms.iter().any(|t| t == word) {
                terms.push(word.to_string());
            }
        }
        let searched: &[String] = if round % 3 == 2 { &columns[..] } else { &columns[1..] };
        let search = |depth: Option<usize>| search_docs(&index, searched, &terms, &stats, &eligible, rows, depth);
        let mut full = search(None).rows;
        full.sort_by(best_first);
        for k in [1, 10, 100] {
            let top = search(Some(k));
            let want: Vec<(u32, f32)> = full.iter().copied().take(k).collect();
            let bits = |r: &[(u32, f32)]| r.iter().map(|(row, s)| (*row, s.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(&top.rows), bits(&want), "round {round}, terms {terms:?}, columns {searched:?}, k {k}");
        }
    }
}

/// A table with more text columns than a document has slots: a row's
/// columns past the 16th are a second document, and a search over all of
/// them (summed by row) or over some in either document still gives every
/// row the score the hot overlay computes from its text, to the bit, and
/// its top k is the full ranking's. The slots a column was given survive a
/// reopen (the first rows see the columns in another order than the rest).
#[test]
fn more_text_columns_than_slots_rank_exactly_and_keep_their_slots() {
    use braid_engine::index::text::{analyzer, bm25_text, SLOTS};
    let dir = tempfile::tempdir().unwrap();
    let columns: Vec<String> = (0..SLOTS + 3).map(|c| format!("c{c:02}")).collect();
    let mut rng = Lcg(5);
    let mut stats = QueryStats::default();
    let rows = 3000u32;
    // each row's (column, text)
    let mut written: Vec<Vec<(String, String)>> = Vec::new();
    let mut add = |index: &TextIndex, rng: &mut Lcg, to: u32, cols: &[String]| {
        for row in written.len() as u32..to {
            let mut texts: Vec<(String, String)> = Vec::new();
            for c in cols {
                if rng.below(3) != 0 {
                    texts.push((c.clone(), sentence(rng)));
                }
            }
            for (_, text) in &texts {
                count(&mut stats, text);
            }
            let refs: Vec<(&str, &str)> = texts.iter().map(|(c, t)| (c.as_str(), t.as_str())).collect();
            index.add_row(row, "docs", "t", &refs).unwrap();
            written.push(texts);
        }
        index.mark_pending(to);
        index.commit().unwrap();
    };
    {
        let index = TextIndex::open(dir.path()).unwrap().0;
        let reversed: Vec<String> = columns.iter().rev().cloned().collect();
        add(&index, &mut rng, rows / 2, &reversed);
    }
    let index = TextIndex::open(dir.path()).unwrap().0;
    add(&index, &mut rng, rows, &columns);
    let everything = Arc::new((0..rows).collect::<RoaringBitmap>());
    let mut analyzer = analyzer();
    // the last SLOTS columns (seen first) share the first document of a
    // row, c02..c00 the second
    let subsets = [
        (columns.clone(), false),
        (columns[3..].to_vec(), true),
        (columns[..3].to_vec(), true),
        (vec![columns[0].clone(), columns[SLOTS + 2].clone()], false),
    ];
    for (searched, one_document) in subsets {
        for round in 0..6 {
            let terms: Vec<String> =
                (0..3).map(|_| VOCAB[rng.below(VOCAB.len() as u64) as usize].to_string()).collect();
            // the overlay's score of each row: its columns in the searched order, each from zero
            let weights = stats.weights(&terms);
            let mut model: Vec<(u32, f32)> = written
                .iter()
                .enumerate()
                .map(|(row, texts)| {
                    let mut score = 0.0f32;
                    for column in &searched {
                        if let Some((_, text)) = texts.iter().find(|(c, _)| c == column) {
                            score += bm25_text(&weights, &terms, &mut analyzer, text);
                        }
                    }
                    (row as u32, score)
                })
                .filter(|(_, score)| *score > 0.0)
                .collect();
            model.sort_by(best_first);
            let search = |depth| search_docs(&index, &searched, &terms, &stats, &everything, rows, depth);
            let mut full = search(None).rows;
            full.sort_by(best_first);
            let bits = |r: &[(u32, f32)]| r.iter().map(|(row, s)| (*row, s.to_bits())).collect::<Vec<_>>();
            // summed in the overlay's order, to the bit, whether a row's
            // searched columns are one document or two (found by a black-box
            // test: two documents were summed in another order)
            assert_eq!(
                bits(&full),
                bits(&model),
                "columns {searched:?} ({one_document}), round {round}, terms {terms:?}"
            );
            for k in [1, 10, 100] {
                let top = search(Some(k));
                let want: Vec<(u32, f32)> = full.iter().copied().take(k).collect();
                assert_eq!(top.rows, want, "columns {searched:?}, round {round}, terms {terms:?}, k {k}");
            }
        }
    }
}

fn rec(id: &str, fields: Value) -> RecordInput {
    common::record("t", id, fields)
}

fn text_query(text: &str, top_k: i64) -> HybridQuery {
    HybridQuery {
        table: Some("docs".into()),
        tenant_id: Some("t".into()),
        text: Some(text.into()),
        top_k: Some(top_k),
        return_fields: Some(vec![]),
        ..Default::default()
    }
}

fn ids(resp: &QueryResponse) -> Vec<String> {
    resp.results.iter().map(|r| r.record_id.clone()).collect()
}

fn page_through(
    engine: &Engine,
    q: &HybridQuery,
    first: Option<String>,
    restart: &mut dyn FnMut(usize),
) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = first;
    let mut page = 0;
    loop {
        restart(page);
        let resp = engine.query(None, None, &HybridQuery { cursor: cursor.clone(), ..q.clone() }).unwrap();
        out.extend(ids(&resp));
        page += 1;
        match resp.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out
}

#[test]
fn paging_past_the_text_depth_returns_the_unpaged_ranking_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Lcg(11);
    {
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let records: Vec<RecordInput> = (0..1500)
            .map(|i| {
                rec(
                    &format!("r{i:05}"),
                    json!({"body": sentence(&mut rng), "kind": if i % 4 == 0 { "a" } else { "b" }}),
                )
            })
            .collect();
        engine.put(None, None, records, None).unwrap();
        assert!(engine.wait_indexed(Duration::from_secs(120)));

        // the whole ranking in one page (depth 10,000 > every match)
        let whole = HybridQuery { candidate_budget: Some(10_000), ..text_query("water light stone", 1000) };
        let whole = engine.query(None, None, &whole).unwrap();
        let want = ids(&whole);
        assert!(want.len() > 600, "the query should match much of the corpus, matched {}", want.len());
        assert!(whole.next_cursor.is_some() || want.len() < 1000);

        // pages of 7 with the default depth of 100: the list is widened as pages pass it
        let q = text_query("water light stone", 7);
        let first = engine.query(None, None, &q).unwrap();
        assert_eq!(first.explain.early_stop_reason.as_deref(), Some("page_depth"));
        assert!(first.explain.text_candidates <= 100, "first page ranked {} rows", first.explain.text_candidates);
        let paged = page_through(&engine, &q, None, &mut |_| {});
        let got: Vec<String> = paged.iter().take(want.len()).cloned().collect();
        assert_eq!(got, want[..got.len()].to_vec());
        let distinct: HashSet<&String> = paged.iter().collect();
        assert_eq!(distinct.len(), paged.len(), "a row was repeated");

        // a filtered text query returns only rows that pass, in the unfiltered order
        let kind_a = HybridQuery {
            scalar_eq: Some(json!({"kind": "a"}).as_object().unwrap().clone()),
            return_fields: None,
            ..text_query("water light stone", 50)
        };
        let filtered = engine.query(None, None, &kind_a).unwrap();
        assert!(!filtered.results.is_empty());
        assert!(filtered.results.iter().all(|r| r.fields["kind"] == "a"));
        let a_ids: HashSet<String> = ids(&filtered).into_iter().collect();
        let expected: Vec<&String> = want.iter().filter(|id| a_ids.contains(*id)).collect();
        assert_eq!(expected.len(), a_ids.len(), "every filtered row is in the full ranking");
    }

    // after a restart (no cursor cache), a cursor from page 30 continues the same ranking
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    let whole = HybridQuery { candidate_budget: Some(10_000), ..text_query("water light stone", 1000) };
    let want = ids(&engine.query(None, None, &whole).unwrap());
    let q = text_query("water light stone", 7);
    let mut cursor = None;
    let mut before = Vec::new();
    for _ in 0..30 {
        let resp = engine.query(None, None, &HybridQuery { cursor: cursor.clone(), ..q.clone() }).unwrap();
        before.extend(ids(&resp));
        cursor = resp.next_cursor;
    }
    drop(engine);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let rest = page_through(&engine, &q, cursor, &mut |_| {});
    let all: Vec<String> = before.into_iter().chain(rest).collect();
    assert_eq!(all[..want.len().min(all.len())].to_vec(), want[..want.len().min(all.len())].to_vec());
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
}

/// `(id, lexical score)` of each query's results, for every query of a small
/// set over two tenants: over all text columns and over one, and with an
/// equality filter on a number, a short string and a long one.
fn text_scores(engine: &Engine, long: &str) -> Vec<Vec<(String, Option<f64>)>> {
    let mut out = Vec::new();
    let filters = [None, Some(json!({"n": 3})), Some(json!({"kind": "b"})), Some(json!({"note": long}))];
    for tenant in ["acme", "globex"] {
        for text in ["water", "river stone", "the of a", "wolf honey lamp glass", "cold"] {
            for field in [None, Some("title")] {
                for filter in &filters {
                    let q = HybridQuery {
                        table: Some("docs".into()),
                        tenant_id: Some(tenant.into()),
                        text: Some(text.into()),
                        text_field: field.map(str::to_string),
                        scalar_eq: filter.as_ref().map(|f| f.as_object().unwrap().clone()),
                        top_k: Some(50),
                        ..Default::default()
                    };
                    let resp = engine.query(None, None, &q).unwrap();
                    out.push(resp.results.iter().map(|r| (r.record_id.clone(), r.score.lexical)).collect());
                }
            }
        }
    }
    out
}

/// A group of many rows counts its text into the BM25 statistics on a thread
/// of its own while the rest of it is applied (storage/state.rs,
/// `apply_group`); a replay does so a chunk of the log at a time. Every
/// score and every filtered result must be those of the same writes applied
/// one at a time: rewrites of a key inside one group, deletes, two tenants,
/// two text columns, and number, short and long string filters.
#[test]
fn text_and_scalar_indexes_of_a_large_group_or_a_replay_equal_one_write_at_a_time() {
    let mut rng = Lcg(11);
    // three rounds of 300 puts over 250 ids (rewrites inside a round), then 10 deletes
    let mut rounds: Vec<(Vec<RecordInput>, Vec<String>)> = Vec::new();
    for _ in 0..3 {
        let mut puts = Vec::new();
        for _ in 0..300 {
            let tenant = if rng.below(3) == 0 { "globex" } else { "acme" };
            let long = format!("{} {}", LONG_NOTE, rng.below(2));
            let kind = ["a", "b", "c"][rng.below(3) as usize];
            let mut fields = json!({ "body": sentence(&mut rng), "n": rng.below(5), "kind": kind, "note": long });
            if rng.below(2) == 0 {
                fields["title"] = json!(sentence(&mut rng));
            }
            puts.push(common::record(tenant, &format!("d{}", rng.below(250)), fields));
        }
        let deletes = (0..10).map(|_| format!("d{}", rng.below(250))).collect();
        rounds.push((puts, deletes));
    }
    let delete = |engine: &Engine, id: &str| {
        for tenant in ["acme", "globex"] {
            let key = braid_engine::RecordKey { table: "docs".into(), tenant_id: tenant.into(), id: id.into() };
            engine.delete(None, None, key, None).unwrap();
        }
    };

    let one_dir = tempfile::tempdir().unwrap();
    let one_at_a_time = common::open(one_dir.path());
    let grouped_dir = tempfile::tempdir().unwrap();
    // no checkpoint: the restart below replays every write
    let grouped = common::open_without_checkpoints(grouped_dir.path());
    for (puts, deletes) in &rounds {
        for record in puts {
            one_at_a_time.put(None, None, vec![record.clone()], None).unwrap();
        }
        grouped.put(None, None, puts.clone(), None).unwrap();
        for id in deletes {
            delete(&one_at_a_time, id);
            delete(&grouped, id);
        }
    }

    assert!(one_at_a_time.wait_indexed(Duration::from_secs(60)));
    assert!(grouped.wait_indexed(Duration::from_secs(60)));
    let long = format!("{LONG_NOTE} 1");
    let expected = text_scores(&one_at_a_time, &long);
    assert!(expected.iter().filter(|r| !r.is_empty()).count() > 40, "most of the 80 queries find rows");
    assert_eq!(text_scores(&grouped, &long), expected);

    // replayed from the log (no checkpoint was taken), a chunk at a time
    drop(grouped);
    let replayed = common::open_without_checkpoints(grouped_dir.path());
    assert!(replayed.wait_indexed(Duration::from_secs(60)));
    assert_eq!(text_scores(&replayed, &long), expected);
}

/// A string longer than the scalar index keeps inline (keyed by digest).
const LONG_NOTE: &str = "a note long enough that the equality index keys it by its digest, not by itself";

/// A filter that leaves few rows next to the postings of the query's words
/// leads the text search: each of its rows is sought in the index instead of
/// walking every posting (explain: the documents scored are the filter's
/// rows' matching columns, not every match of the words), with the walk's
/// scores to the bit, so the filtered ranking is the unfiltered one
/// restricted to the filter's rows, over one column and over several.
#[test]
fn a_selective_filter_leads_the_text_search_and_scores_as_the_walk_does() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let mut rng = Lcg(23);
    // two text columns, and (found by a black-box test) more than a
    // document's slots: a row's columns past them are a second document,
    // summed in the same order
    let records: Vec<RecordInput> = (0..1000)
        .map(|i| {
            let mut fields = json!({"body": sentence(&mut rng), "title": sentence(&mut rng), "bucket": i % 250});
            if i % 2 == 0 {
                for c in 0..braid_engine::index::text::SLOTS {
                    fields[format!("extra{c}")] = json!(sentence(&mut rng));
                }
            }
            rec(&format!("r{i:05}"), fields)
        })
        .collect();
    engine.put(None, None, records, None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    let mut nonempty = 0;
    for text_field in [None, Some("body".to_string())] {
        for text in ["the of a", "water", "river stone wolf"] {
            let q = |filter: Option<Value>| HybridQuery {
                text_field: text_field.clone(),
                scalar_eq: filter.map(|f| f.as_object().unwrap().clone()),
                candidate_budget: Some(5000),
                ..text_query(text, 1000)
            };
            let all = engine.query(None, None, &q(None)).unwrap();
            assert!(all.explain.segments_scanned > 0, "the unfiltered query searches the index");
            let filtered = engine.query(None, None, &q(Some(json!({"bucket": 8})))).unwrap();
            // 4 rows of up to 2 + SLOTS text columns each
            let columns = 2 + braid_engine::index::text::SLOTS as u64;
            assert!(
                filtered.explain.lexical_scored_documents <= 4 * columns,
                "{text}: {} documents scored for 4 rows",
                filtered.explain.lexical_scored_documents
            );
            assert!(filtered.explain.segments_scanned > 0);
            assert!(!filtered.explain.hot_overlay_searched);
            let mine: HashSet<String> = (0..1000).filter(|i| i % 250 == 8).map(|i| format!("r{i:05}")).collect();
            let want: Vec<(String, Option<u64>)> = all
                .results
                .iter()
                .filter(|r| mine.contains(&r.record_id))
                .map(|r| (r.record_id.clone(), r.score.lexical.map(f64::to_bits)))
                .collect();
            let got: Vec<(String, Option<u64>)> =
                filtered.results.iter().map(|r| (r.record_id.clone(), r.score.lexical.map(f64::to_bits))).collect();
            nonempty += usize::from(!got.is_empty());
            assert_eq!(got, want, "{text}, {text_field:?}");
        }
    }
    assert!(nonempty >= 4, "only {nonempty} of 6 filtered queries found something");
}

/// Records rewritten many times: a read at the latest epoch searches only
/// the current versions (the text index moves superseded ones to its
/// history part), so it scores no more documents than before the rewrites;
/// a read at an older epoch still finds exactly the versions visible then,
/// also after a restart.
#[test]
fn rewrites_do_not_slow_latest_reads_and_older_reads_find_their_versions() {
    let dir = tempfile::tempdir().unwrap();
    let n = 400;
    // version v of record i: a word of its own, the version's word, and common words
    let text = |i: usize, v: usize| format!("item{i} version{v} the water of the river stone");
    let query = |text: &str, as_of: Option<i64>| HybridQuery {
        temporal_as_of: as_of,
        candidate_budget: Some(1000),
        ..text_query(text, 1000)
    };
    let mut epochs = Vec::new();
    {
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for v in 0..6 {
            let records: Vec<RecordInput> =
                (0..n).map(|i| rec(&format!("r{i:04}"), json!({"body": text(i, v)}))).collect();
            let braid_engine::storage::WriteResult::Committed(written) = engine.put(None, None, records, None).unwrap()
            else {
                panic!("a put without a receipt commits")
            };
            epochs.push(written.epoch as i64);
            if v == 0 {
                assert!(engine.wait_indexed(Duration::from_secs(120)));
            }
        }
        assert!(engine.wait_indexed(Duration::from_secs(120)));
        // the moved versions leave the current part's segments as merges
        // finish, with no further write (found by a black-box test: an idle
        // branch kept scoring them until its next write)
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while engine.query(None, None, &query("water river", None)).unwrap().explain.lexical_scored_documents
            > (n + n / 2) as u64
        {
            assert!(std::time::Instant::now() < deadline, "the superseded versions are still scored");
            std::thread::sleep(Duration::from_millis(50));
        }
        check_versions(&engine, &epochs, n, &query);
    }
    // a restart keeps both parts
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    check_versions(&engine, &epochs, n, &query);
}

/// Every version of every record is indexed (the superseded ones in the
/// history part); the latest read is handed about the current versions only
/// (400 rows, not 2,400: a segment may keep up to a third of its documents
/// deleted before a merge drops them); each version is found at its epoch.
fn check_versions(engine: &Engine, epochs: &[i64], n: usize, query: &dyn Fn(&str, Option<i64>) -> HybridQuery) {
    let latest = engine.query(None, None, &query("water river", None)).unwrap();
    assert_eq!(latest.explain.lexical_indexed_documents, 6 * n as u64);
    assert_eq!(latest.results.len(), n);
    let scored = latest.explain.lexical_scored_documents;
    assert!(scored <= (n + n / 2) as u64, "scored {scored} documents for {n} live rows");
    assert!(engine.query(None, None, &query("version0", None)).unwrap().results.is_empty());
    for (v, epoch) in epochs.iter().enumerate() {
        let old = engine.query(None, None, &query(&format!("version{v}"), Some(*epoch))).unwrap();
        assert_eq!(old.results.len(), n, "version {v} at epoch {epoch}");
        let got: HashSet<String> = ids(&old).into_iter().collect();
        assert_eq!(got.len(), n);
        // a word of one record's version finds that record at that epoch only
        let one = engine.query(None, None, &query(&format!("item7 version{v}"), Some(*epoch))).unwrap();
        assert_eq!(one.results[0].record_id, "r0007");
        assert_eq!(one.results[0].version_id as usize, v + 1);
    }
}
