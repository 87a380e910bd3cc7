//! Explain is honest (issue 14 item 3): every field that can be measured or
//! counted is, and each test here tells a measured value from a constant.

use std::time::Duration;

use braid_engine::query::{HybridQuery, QueryResponse};
use braid_engine::{Engine, EngineConfig, RecordInput};
use serde_json::json;

mod common;
use common::record as rec;

fn q(tenant: &str) -> HybridQuery {
    HybridQuery { table: Some("docs".into()), tenant_id: Some(tenant.into()), ..Default::default() }
}

fn timing(resp: &QueryResponse, path: &str) -> Option<(f64, f64)> {
    resp.explain.access_path_timings.iter().find(|t| t.access_path_id == path).map(|t| (t.build_ms, t.open_ms))
}

fn opened(resp: &QueryResponse, path: &str) -> Option<bool> {
    resp.explain.access_paths.iter().find(|p| p.access_path_id == path).map(|p| p.opened)
}

/// A small corpus in two tenants with text, a vector, a scalar and edges.
fn corpus(engine: &Engine) {
    let mut records = Vec::new();
    for i in 0..60 {
        let tenant = if i < 20 { "small" } else { "big" };
        let x = i as f64 / 60.0;
        records.push(rec(
            tenant,
            &format!("d{i}"),
            json!({
                "body": format!("searchable words number {i} and more text"),
                "v": [x, 1.0 - x, 0.3],
                "kind": if i % 2 == 0 { "even" } else { "odd" },
                "links": [format!("d{}", (i + 1) % 60)],
            }),
        ));
    }
    engine.put(None, None, records, None).unwrap();
}

#[test]
fn every_path_that_ran_reports_measured_time_and_skipped_paths_are_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    corpus(&engine);
    let epoch = engine.metrics(None, None).unwrap().latest_epoch;
    engine.put(None, None, vec![rec("big", "late", json!({"body": "later words"}))], None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(60)));

    let mut full = q("big");
    full.text = Some("searchable words".into());
    full.vector = Some(vec![0.5, 0.5, 0.3]);
    full.scalar_eq = Some(json!({"kind": "even"}).as_object().unwrap().clone());
    full.graph_seed = Some("d30".into());
    full.temporal_as_of = Some(epoch as i64);
    let resp = engine.query(None, None, &full).unwrap();
    for path in ["tenant_mask", "scalar", "temporal", "text", "vector_exact", "graph"] {
        let (build, open) = timing(&resp, path).unwrap_or_else(|| panic!("{path} has no timing"));
        assert!(build + open > 0.0, "{path}: {build} + {open} is not a measured time");
        assert_eq!(opened(&resp, path), Some(true), "{path}");
    }
    assert!(timing(&resp, "graph").unwrap().1 > 0.0, "the walk is measured");
    assert!(resp.explain.phase_timings.iter().all(|p| p.elapsed_ms > 0.0));

    let mut text_only = q("big");
    text_only.text = Some("searchable".into());
    let resp = engine.query(None, None, &text_only).unwrap();
    for path in ["scalar", "vector", "graph"] {
        assert_eq!(opened(&resp, path), Some(false), "{path} was not asked for");
        assert!(timing(&resp, path).is_none(), "{path} did not run");
    }
    assert!(resp.explain.skipped_access_paths.iter().any(|s| s.starts_with("vector:")));
    // a text of stop-words-only is not a search
    let mut empty = q("big");
    empty.text = Some("   ".into());
    let resp = engine.query(None, None, &empty).unwrap();
    assert_eq!(opened(&resp, "text"), Some(false));
}

#[test]
fn no_vector_exact_timing_when_hnsw_ran() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // enough rows that the planner walks the graph (docs/query.md: exact
    // below 2,048 eligible rows or eligible^2 < 24 x ef x graph, and ef is
    // at least 256: every row eligible, so more than 24 x 256 rows)
    let records: Vec<RecordInput> = (0..8000)
        .map(|i| {
            let a = i as f64 * 0.013;
            rec("t", &format!("v{i}"), json!({"v": [a.sin(), a.cos(), (a * 0.7).sin(), (a * 1.3).cos()]}))
        })
        .collect();
    engine.put(None, None, records, None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    let mut vq = q("t");
    vq.vector = Some(vec![0.1, 0.9, 0.2, 0.4]);
    let resp = engine.query(None, None, &vq).unwrap();
    assert!(!resp.explain.exact_fallback_triggered);
    assert!(timing(&resp, "vector_exact").is_none(), "{:?}", resp.explain.access_path_timings);
    let (_, open) = timing(&resp, "vector_hnsw").unwrap();
    assert!(open > 0.0);
}

#[test]
fn overlay_pending_and_indexed_counts_belong_to_the_queried_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    // the text index commits once an hour: everything stays pending
    config.branch.text_commit_interval = Duration::from_secs(3600);
    let engine = Engine::open(config).unwrap();
    corpus(&engine);
    let mut small = q("small");
    small.text = Some("searchable".into());
    let resp = engine.query(None, None, &small).unwrap();
    assert!(resp.explain.hot_overlay_searched, "the overlay scored the uncommitted rows");
    assert_eq!(resp.explain.pending_feature_count, 20, "the 40 rows of tenant big are not counted");
    assert_eq!(resp.explain.lexical_indexed_documents, 0);
    drop(engine);

    // reopened with the default interval: everything gets committed
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(60)));
    let resp = engine.query(None, None, &small).unwrap();
    assert!(!resp.explain.hot_overlay_searched, "nothing left for the overlay");
    assert_eq!(resp.explain.pending_feature_count, 0);
    // two text columns (body, kind): two documents per row of the tenant
    assert_eq!(resp.explain.lexical_indexed_documents, 40);
    let mut big = q("big");
    big.text = Some("searchable".into());
    assert_eq!(engine.query(None, None, &big).unwrap().explain.lexical_indexed_documents, 80);
    // a figure of the index, not of the query: a query without text reports it too (found by a black-box
    // test, which read 0 here)
    let untexted = q("big");
    let resp = engine.query(None, None, &untexted).unwrap();
    assert_eq!(resp.explain.lexical_indexed_documents, 80);
    // and `return_fields: []` reads no record file, so nothing is materialized
    assert!(!resp.results.is_empty());
    assert_eq!(resp.explain.materialized_count, resp.results.len() as u64);
    let mut bare = q("big");
    bare.return_fields = Some(vec![]);
    let resp = engine.query(None, None, &bare).unwrap();
    assert_eq!(resp.explain.returned_count, resp.results.len() as u64);
    assert!(resp.explain.returned_count > 0);
    assert_eq!(resp.explain.materialized_count, 0);
}

/// Polls the main branch until its text index has committed every row, without a query or
/// `wait_indexed` (either would end the branch's idleness); false at the deadline.
fn text_committed_unsearched(engine: &Engine, timeout: Duration) -> bool {
    let branch = engine.branch(None, None).unwrap();
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if branch.text.watermark() as usize >= branch.state.read().rows.len() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn a_branch_no_query_reads_commits_its_text_once_its_writes_pause() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    // idle from the start (never searched), and while writes go on it would wait an hour
    config.branch.text_commit_interval = Duration::from_millis(50);
    config.branch.idle_commit_interval = Duration::from_secs(3600);
    let engine = Engine::open(config).unwrap();
    for i in 0..30 {
        engine
            .put(None, None, vec![rec("t", &format!("d{i}"), json!({"body": format!("quiet words {i}")}))], None)
            .unwrap();
    }
    assert!(text_committed_unsearched(&engine, Duration::from_secs(60)), "the writes paused: committed");
    let mut tq = q("t");
    tq.text = Some("quiet".into());
    let resp = engine.query(None, None, &tq).unwrap();
    assert_eq!(resp.results.len(), 10);
    assert!(!resp.explain.hot_overlay_searched);
    assert_eq!(resp.explain.lexical_indexed_documents, 30);
}

#[test]
fn a_query_makes_an_idle_branch_commit_while_its_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.branch.text_commit_interval = Duration::from_millis(50);
    config.branch.idle_commit_interval = Duration::from_secs(3600);
    config.branch.search_idle_after = Duration::from_secs(3600);
    let engine = std::sync::Arc::new(Engine::open(config).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = rec("t", &format!("d{i}"), json!({"body": format!("busy words {i}")}));
                engine.put(None, None, vec![r], None).unwrap();
                i += 1;
            }
            i
        })
    };
    let branch = engine.branch(None, None).unwrap();
    while branch.state.read().rows.len() < 200 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // every row written so far is found, through the overlay where the index lacks it
    let mut tq = q("t");
    tq.text = Some("busy".into());
    tq.top_k = Some(1000);
    let seen = branch.state.read().rows.len();
    let resp = engine.query(None, None, &tq).unwrap();
    assert!(resp.results.len() >= seen, "{} of {seen}", resp.results.len());
    // searched now: the index commits at its interval though the writes go on
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while (branch.text.watermark() as usize) < seen && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(branch.text.watermark() as usize >= seen, "committed {} of {seen}", branch.text.watermark());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > seen, "the writes went on meanwhile");
}

#[test]
fn a_later_page_reports_its_own_timings() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    corpus(&engine);
    assert!(engine.wait_indexed(Duration::from_secs(60)));
    let mut first = q("big");
    first.text = Some("searchable words".into());
    first.top_k = Some(5);
    let page1 = engine.query(None, None, &first).unwrap();
    let next_of = |page: &QueryResponse| {
        let mut next = first.clone();
        next.cursor = page.next_cursor.clone();
        next
    };
    // the first page keeps no list (most queries are never paged); the
    // second ranks again at the pinned epoch and keeps it for the third
    let page2 = engine.query(None, None, &next_of(&page1)).unwrap();
    let page3 = engine.query(None, None, &next_of(&page2)).unwrap();
    assert_eq!(page2.explain.lexical_cache_hits, 0);
    assert_eq!(page3.explain.lexical_cache_hits, 1);
    let phases = |r: &QueryResponse| r.explain.phase_timings.iter().map(|p| p.phase.clone()).collect::<Vec<_>>();
    assert!(phases(&page1).contains(&"fuse_and_rank".to_string()));
    assert!(phases(&page2).contains(&"fuse_and_rank".to_string()));
    assert!(!phases(&page3).contains(&"fuse_and_rank".to_string()), "{:?}", phases(&page3));
    assert!(phases(&page3).contains(&"cursor_cache_lookup".to_string()));
    assert!(page3.explain.access_path_timings.is_empty());
    assert_eq!(opened(&page3, "text"), Some(false));
    assert_eq!(page3.explain.lexical_scored_documents, 0);
    // the candidate counts still describe the list being paged (page 2's:
    // a text-only list is ranked twice as deep as the page it was ranked for needs)
    assert_eq!(page3.explain.text_candidates, page2.explain.text_candidates);
    assert_eq!(page1.explain.text_candidates, 12);
    // and the three pages are the unpaged ranking, in order
    let mut all = first.clone();
    all.top_k = Some(15);
    let ids = |pages: &[&QueryResponse]| -> Vec<String> {
        pages.iter().flat_map(|p| p.results.iter().map(|r| r.record_id.clone())).collect()
    };
    assert_eq!(ids(&[&page1, &page2, &page3]), ids(&[&engine.query(None, None, &all).unwrap()]));
}
