//! Disk faults injected under the WAL, the catalog and the indexes (fail
//! points, src/faults.rs). The rule, as in PostgreSQL after its fsync
//! lessons: a write whose append or fsync failed is never acknowledged and
//! never becomes visible; the branch then refuses writes until a restart, and
//! the restart recovers exactly the acknowledged writes. Reads keep working.
//!
//! Fail points are process-wide, so every test holds a `FailScenario` (which
//! serialises them) and this file is its own test binary.

use std::time::{Duration, Instant};

use braid_engine::faults;
use braid_engine::{Code, Engine, EngineConfig, RecordInput};
use fail::FailScenario;
use serde_json::json;

mod common;
use common::{key, newest_wal, open, open_without_checkpoints, rec};

fn exists(engine: &Engine, id: &str) -> bool {
    engine.get(None, None, &key(id), None).unwrap().is_some()
}

/// A failed write, then: refused writes, working reads, a restart with
/// exactly the acknowledged writes, and writes accepted again.
fn check_write_fault(point: &str, actions: &str) {
    check_write_fault_of(point, actions, &[("failed", "never acknowledged")]);
}

/// [`check_write_fault`] for a write of the records `failed` (id, title).
fn check_write_fault_of(point: &str, actions: &str, failed: &[(&str, &str)]) {
    let written = || failed.iter().map(|(id, title)| rec(id, json!({ "title": title }))).collect::<Vec<_>>();
    let none_exists = |engine: &Engine| !failed.iter().any(|(id, _)| exists(engine, id));
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        engine.put(None, None, vec![rec("before", json!({"title": "acknowledged"}))], None).unwrap();
        let epoch = engine.metrics(None, None).unwrap().latest_epoch;
        faults::configure(point, actions).unwrap();
        let err = engine.put(None, None, written(), None).unwrap_err();
        faults::clear();
        assert_eq!(err.code, Code::StorageFailure, "{point}: {}", err.message);
        assert!(err.message.contains("refuses writes until the engine restarts"), "{}", err.message);
        // never visible, and the epoch did not move
        assert!(none_exists(&engine), "{point}: an unacknowledged write became visible");
        assert_eq!(engine.metrics(None, None).unwrap().latest_epoch, epoch);
        // writes stay refused although the disk is fine again
        let again = engine.put(None, None, vec![rec("later", json!({"title": "x"}))], None).unwrap_err();
        assert_eq!(again.code, Code::StorageFailure);
        assert_eq!(engine.metrics(None, None).unwrap().recovery_state, "failed");
        // reads keep working
        assert!(exists(&engine, "before"));
        // the close takes no checkpoint from a log it cannot trust, and says
        // so (a black-box review saw the close skip it without a word)
        engine.close();
        let events = serde_json::to_value(engine.events()).unwrap().to_string();
        assert!(
            events.contains("\"event\":\"checkpoint_failed\"") && events.contains("\"trigger\":\"close\""),
            "{point}: {events}"
        );
    }
    let engine = open(dir.path());
    assert!(exists(&engine, "before"), "{point}: an acknowledged write was lost");
    assert!(none_exists(&engine), "{point}: an unacknowledged write came back after the restart");
    assert!(!exists(&engine, "later"));
    engine.put(None, None, vec![rec("after", json!({"title": "fine"}))], None).unwrap();
    drop(engine);
    assert!(exists(&open(dir.path()), "after"));
    scenario.teardown();
}

/// A panic in the committer (a bug; here after the fsync) answers its write
/// `internal_panic`, not `shutting_down`, and leaves the branch refusing
/// writes with `storage_failure` until a restart, as a failed fsync does,
/// instead of a committer thread that is gone and a branch that answers
/// every later write as if it were closing. Reads go on; the restart
/// replays the log, which holds the write (it was fsynced).
#[test]
fn a_committer_panic_fails_the_branch_until_a_restart() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        engine.put(None, None, vec![rec("before", json!({"title": "acknowledged"}))], None).unwrap();
        faults::configure("wal::sync", "panic").unwrap();
        let err = engine.put(None, None, vec![rec("panicked", json!({"title": "unknown"}))], None).unwrap_err();
        faults::clear();
        assert_eq!(err.code, Code::InternalPanic, "{}", err.message);
        let again = engine.put(None, None, vec![rec("later", json!({"title": "x"}))], None).unwrap_err();
        assert_eq!(again.code, Code::StorageFailure, "{}", again.message);
        assert_eq!(engine.metrics(None, None).unwrap().recovery_state, "failed");
        assert!(exists(&engine, "before"));
        let events = serde_json::to_value(engine.events()).unwrap().to_string();
        assert!(events.contains("\"stage\":\"panic\""), "{events}");
    }
    let engine = open(dir.path());
    assert!(exists(&engine, "before"));
    assert!(!exists(&engine, "later"));
    engine.put(None, None, vec![rec("after", json!({"title": "fine"}))], None).unwrap();
    assert!(exists(&engine, "after"));
    scenario.teardown();
}

/// No room for the zeros the WAL writes ahead of its end (a nearly full
/// disk): the writes that fit are appended and acknowledged as before, not
/// refused, and the log reads back whole, with preallocation taken up again
/// between them.
#[test]
fn writes_go_on_when_the_wal_cannot_preallocate() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open_without_checkpoints(dir.path());
        for i in 0..40 {
            // every other write with no room ahead of it
            if i % 2 == 0 {
                faults::configure("wal::preallocate", "return(enospc)").unwrap();
            }
            engine.put(None, None, vec![rec(&format!("r{i}"), json!({"title": "x".repeat(4096)}))], None).unwrap();
            faults::clear();
        }
        assert_eq!(engine.metrics(None, None).unwrap().recovery_state, "healthy");
    }
    // no checkpoint: the start replays every frame
    let engine = open_without_checkpoints(dir.path());
    assert!((0..40).all(|i| exists(&engine, &format!("r{i}"))), "an acknowledged write was lost");
    assert_eq!(engine.metrics(None, None).unwrap().recovered_truncated_bytes, 0);
    scenario.teardown();
}

#[test]
fn fsync_error() {
    check_write_fault("wal::sync", "return(eio)");
}

#[test]
fn enospc_on_append() {
    check_write_fault("wal::append", "return(enospc)");
}

#[test]
fn short_write() {
    check_write_fault("wal::append", "return(short)");
}

/// The WAL took the group but the record file did not: the group is cut
/// from the log again, so it is neither acknowledged nor visible, now or
/// after a restart.
#[test]
fn record_file_write_error() {
    check_write_fault("records::write", "return(eio)");
}

/// A group of more than a MiB of fields is written to the record file as it
/// is staged (records.rs, STAGED_BYTES): a write failing after the first
/// part went in refuses the whole group, as one failing at the end does.
#[test]
fn record_file_write_error_after_part_of_a_large_group() {
    let title = "x".repeat(8 << 10);
    let ids: Vec<String> = (0..400).map(|i| format!("failed-{i}")).collect();
    let failed: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), title.as_str())).collect();
    check_write_fault_of("records::write", "1*off->return(eio)", &failed);
}

#[test]
fn a_read_only_data_directory_refuses_to_open_with_a_clear_error() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    open(dir.path()).put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
    let wal = newest_wal(&dir.path().join("db/default/main"));
    let before = std::fs::read(&wal).unwrap();
    faults::configure("wal::open", "return(erofs)").unwrap();
    let err = Engine::open(EngineConfig::new(dir.path())).err().expect("open must fail");
    faults::clear();
    assert_eq!(err.code, Code::StorageFailure);
    assert!(err.message.to_lowercase().contains("read-only"), "{}", err.message);
    assert_eq!(std::fs::read(&wal).unwrap(), before);
    assert!(exists(&open(dir.path()), "a"));
    scenario.teardown();
}

#[test]
fn a_failed_snapshot_copy_or_catalog_write_leaves_no_snapshot() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
    for point in ["wal::copy", "catalog::save"] {
        faults::configure(point, "return(enospc)").unwrap();
        let err = engine.snapshot(None, None, "snap").unwrap_err();
        faults::clear();
        assert_eq!(err.code, Code::StorageFailure, "{point}");
        assert!(engine.snapshots().is_empty(), "{point}");
        // the new catalog's half-done copy is not left beside it
        assert!(!dir.path().join("catalog.json.tmp").exists(), "{point}");
    }
    engine.snapshot(None, None, "snap").unwrap();
    // a failed restore creates no branch, and leaves no directory behind
    let copy_dir = dir.path().join("db").join("default").join("copy");
    faults::configure("catalog::save", "return(eio)").unwrap();
    assert!(engine.restore("snap", "copy").is_err());
    faults::clear();
    assert!(engine.branches("x").iter().all(|b| b.branch_id != "copy"));
    assert!(!copy_dir.exists(), "a failed restore left {}", copy_dir.display());
    engine.restore("snap", "copy").unwrap();
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(engine.snapshots().len(), 1);
    assert!(engine.branches("x").iter().any(|b| b.branch_id == "copy"));
    scenario.teardown();
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Regression (issue 16 item 7): a panic inside the graph dropped the whole
/// batch the indexer was inserting, other tenants' rows included.
#[test]
fn a_graph_panic_costs_one_row_not_the_batch() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let records: Vec<RecordInput> = (0..200)
        .map(|i| {
            let x = i as f64 / 200.0;
            let mut r = rec(&format!("r{i}"), json!({"v": [x, 1.0 - x, 0.5]}));
            r.tenant_id = format!("t{}", i % 4);
            r
        })
        .collect();
    // linking one row into the graph panics (rows are linked in parallel,
    // each under its own catch_unwind)
    faults::configure("vector::insert", "1*panic->off").unwrap();
    engine.put(None, None, records, None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(60)));
    faults::clear();
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.failed_feature_count, 1, "one row failed, the other 199 were inserted");
    assert_eq!(m.indexer_state, "running");
    scenario.teardown();
}

#[test]
fn an_indexer_that_stops_or_keeps_failing_shows_in_its_state() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.branch.text_commit_interval = Duration::from_millis(10);
    let engine = Engine::open(config).unwrap();
    faults::configure("text::commit", "return(eio)").unwrap();
    engine.put(None, None, vec![rec("a", json!({"title": "hello"}))], None).unwrap();
    wait_for("a failing indexer", || engine.metrics(None, None).unwrap().indexer_state == "failing");
    faults::clear();
    wait_for("the indexer to recover", || engine.metrics(None, None).unwrap().indexer_state == "running");
    assert!(engine.wait_indexed(Duration::from_secs(60)), "the documents of the failed commits were kept");

    faults::configure("indexer::round", "panic").unwrap();
    engine.put(None, None, vec![rec("b", json!({"title": "world"}))], None).unwrap();
    wait_for("a stopped indexer", || engine.metrics(None, None).unwrap().indexer_state == "stopped");
    faults::clear();
    // queries still see the new row through the overlay
    let q = braid_engine::query::HybridQuery {
        table: Some("docs".into()),
        tenant_id: Some("acme".into()),
        text: Some("world".into()),
        ..Default::default()
    };
    assert_eq!(engine.query(None, None, &q).unwrap().results.len(), 1);
    scenario.teardown();
}

/// Regression (a black-box concurrency review): when the text index's
/// writer failed (there, no file descriptors left), the rows it was handed
/// were lost while the watermark went past them, and the next commit kept
/// the deletes of the versions they replaced: the branch's text search found
/// nothing, across restarts, with the indexer reported healthy. Now the
/// writers go back to their last commits and the rows are handed again.
#[test]
fn a_failed_text_writer_loses_no_document() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let hello = |engine: &Engine| {
        let q = braid_engine::query::HybridQuery {
            table: Some("docs".into()),
            tenant_id: Some("acme".into()),
            text: Some("hello".into()),
            freshness: Some("indexed".into()),
            ..Default::default()
        };
        let mut ids: Vec<String> =
            engine.query(None, None, &q).unwrap().results.into_iter().map(|r| r.record_id).collect();
        ids.sort();
        ids
    };
    {
        let mut config = EngineConfig::new(dir.path());
        config.branch.text_commit_interval = Duration::from_millis(10);
        let engine = Engine::open(config).unwrap();
        engine
            .put(None, None, vec![rec("a", json!({"title": "hello a"})), rec("b", json!({"title": "hello b"}))], None)
            .unwrap();
        assert!(engine.wait_indexed(Duration::from_secs(60)));
        faults::configure("text::add", "2*return(eio)").unwrap();
        // a rewrite (its old version moves to the history part) and a new record
        engine
            .put(
                None,
                None,
                vec![rec("a", json!({"title": "hello again"})), rec("c", json!({"title": "hello c"}))],
                None,
            )
            .unwrap();
        assert!(engine.wait_indexed(Duration::from_secs(60)), "the rows were handed to the index again");
        faults::clear();
        assert_eq!(hello(&engine), ["a", "b", "c"]);
        assert_eq!(engine.metrics(None, None).unwrap().indexer_state, "running");
    }
    let engine = open(dir.path());
    assert!(engine.wait_indexed(Duration::from_secs(60)));
    assert_eq!(hello(&engine), ["a", "b", "c"], "after a restart");
    scenario.teardown();
}

/// Regression (black-box operations test): closing waited for the indexer
/// to catch up, so a SIGTERM after a crash restart linked 370,000 vectors
/// for four minutes before the process ended. Closing now commits what the
/// text index was handed and stops; the next start links the rest, and
/// queries answer every row meanwhile through the exact overlay.
#[test]
fn closing_does_not_wait_for_the_indexes_to_catch_up() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let rows = 12_000u64;
    {
        let engine = open(dir.path());
        // linking one vector takes 2 ms: catching up would take seconds
        faults::configure("vector::insert", "sleep(2)").unwrap();
        for start in (0..rows).step_by(4_000) {
            let records =
                (start..start + 4_000).map(|i| rec(&format!("r{i}"), json!({"v": [i as f64 + 1.0, 1.0]}))).collect();
            engine.put(None, None, records, None).unwrap();
        }
        engine.close();
        faults::clear();
    }
    let mut config = EngineConfig::new(dir.path());
    config.branch.indexing = braid_engine::storage::IndexingGate::new(false);
    let engine = Engine::open(config).unwrap();
    let linked = engine.metrics(None, None).unwrap().vector_graphs.points;
    assert!(linked < rows, "the close linked every vector ({linked}) before it returned");
    let mut query = braid_engine::query::HybridQuery {
        table: Some("docs".into()),
        tenant_id: Some("acme".into()),
        ..Default::default()
    };
    query.vector = Some(vec![1.0, 1.0]);
    query.top_k = Some(1);
    assert_eq!(engine.query(None, None, &query).unwrap().results[0].record_id, "r0");
    engine.start_indexing();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    assert_eq!(engine.metrics(None, None).unwrap().vector_graphs.points, rows);
    scenario.teardown();
}

/// A graph walk that comes back short while the graph holds more eligible
/// rows is replaced by an exact scan: the query still gets its full page,
/// the same rows an exact scan gives, with and without a filter.
#[test]
fn a_graph_walk_that_comes_back_short_is_replaced_by_an_exact_scan() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    // enough rows that the planner walks the graph rather than scanning
    let records: Vec<RecordInput> = (0..8000)
        .map(|i| {
            let v: Vec<f64> = (0..8).map(|d| (((i * 31 + d * 17) % 97) as f64 / 97.0) - 0.5).collect();
            rec(&format!("r{i}"), json!({"emb": v, "kind": format!("k{}", i % 4)}))
        })
        .collect();
    engine.put(None, None, records, None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    let ask = |filter: bool, fresh: bool| {
        let mut q = json!({"table": "docs", "tenant_id": "acme", "vector": [0.3, -0.2, 0.1, 0.4, -0.1, 0.2, 0.0, 0.3],
                           "top_k": 50, "candidate_budget": 200, "return_fields": []});
        if filter {
            q["scalar_eq"] = json!({"kind": "k1"});
        }
        if fresh {
            // every eligible row scored exactly: the answer to compare with
            q["freshness"] = json!("latest");
            q["candidate_budget"] = json!(8000);
        }
        let q: braid_engine::query::HybridQuery = serde_json::from_value(q).unwrap();
        let res = serde_json::to_value(engine.query(None, None, &q).unwrap()).unwrap();
        let rows = res["results"].as_array().unwrap().iter().map(|r| r["record_id"].as_str().unwrap().to_string());
        (rows.collect::<Vec<_>>(), res["explain"]["selected_strategy"].clone())
    };
    for filter in [false, true] {
        let (exact, _) = ask(filter, true);
        faults::configure("vector::walk", "return").unwrap();
        let (walked, strategy) = ask(filter, false);
        faults::clear();
        assert_eq!(walked.len(), 50, "filter {filter}: a full page");
        assert_eq!(walked, exact, "filter {filter}: the exact rows");
        if !filter {
            assert!(strategy.to_string().contains("vector_hnsw"), "the planner chose the graph: {strategy}");
        }
    }
    scenario.teardown();
}
