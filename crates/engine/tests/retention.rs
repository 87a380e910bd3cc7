//! Retention that frees space (issue 11): versions below the horizon leave
//! memory, every index and the disk at a checkpoint; reads at or above the
//! horizon see exactly what they saw before, also after a restart; reads
//! below it are refused, also after a restart with a longer setting; a
//! checkpoint failing after the compaction, or a crash before the compacted
//! files are deleted, loses nothing; expired receipts leave the disk.
//!
//! Some tests inject faults, and fail points are process-wide: every test
//! holds a `FailScenario`, which serialises them, so an injected checkpoint
//! failure never lands in another test's checkpoint.

use std::path::{Path, PathBuf};
use std::time::Duration;

use braid_engine::faults;
use braid_engine::query::HybridQuery;
use braid_engine::storage::{ReceiptDraft, WriteResult};
use braid_engine::{Code, Engine, EngineConfig, RecordInput};
use fail::FailScenario;
use serde_json::{json, Value};

mod common;
use common::{config_without_checkpoints, copy_dir, key, rec};

const RECORDS: usize = 60;

fn main_dir(data: &Path) -> PathBuf {
    data.join("db").join("default").join("main")
}

fn record_files(dir: &Path) -> Vec<(String, u64)> {
    files(dir, "records-")
}

fn files(dir: &Path, prefix: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect();
    out.sort();
    out
}

fn doc(i: usize, version: usize) -> RecordInput {
    let v: Vec<f64> = (0..8).map(|d| ((i * 7 + d * 3 + version) % 11) as f64 / 10.0 + 0.05).collect();
    rec(
        &format!("r{i}"),
        json!({
            "body": format!("record {i} version {version} word{} {}", i % 5, "padding ".repeat(20)),
            "kind": format!("k{}", (i + version) % 3),
            "stamp": format!("v{version}-{i}"),
            "links": [format!("r{}", (i + 1) % RECORDS)],
            "emb": v,
        }),
    )
}

fn config(dir: &Path, history_epochs: Option<u64>) -> EngineConfig {
    let mut config = config_without_checkpoints(dir);
    config.branch.history_epochs = history_epochs;
    config
}

fn epoch_of(written: WriteResult) -> u64 {
    match written {
        WriteResult::Committed(o) => o.epoch,
        WriteResult::Replayed(_) => panic!("not a replay"),
    }
}

fn query(engine: &Engine, q: Value) -> Result<Vec<(String, u32)>, Code> {
    let q: HybridQuery = serde_json::from_value(q).unwrap();
    let res = engine.query(None, None, &q).map_err(|e| e.code)?;
    Ok(serde_json::to_value(&res).unwrap()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["record_id"].as_str().unwrap().to_string(), r["version_id"].as_u64().unwrap() as u32))
        .collect())
}

/// Every record and a few queries (text, vector, filtered hybrid, graph) at
/// each epoch.
fn observe(engine: &Engine, epochs: &[u64]) -> Vec<Value> {
    assert!(engine.wait_indexed(Duration::from_secs(60)));
    let v: Vec<f64> = (0..8).map(|d| d as f64 / 8.0 + 0.1).collect();
    let mut out = Vec::new();
    for e in epochs {
        for i in 0..RECORDS {
            let got = engine.get(None, None, &key(&format!("r{i}")), Some(*e)).unwrap();
            out.push(json!([e, i, got.map(|r| Value::Object(r.fields))]));
        }
        for q in [
            json!({"table": "docs", "tenant_id": "acme", "text": "word3 version", "top_k": 10, "temporal_as_of": e}),
            json!({"table": "docs", "tenant_id": "acme", "vector": v, "top_k": 10, "temporal_as_of": e}),
            json!({"table": "docs", "tenant_id": "acme", "text": "record", "vector": v,
                   "scalar_eq": {"kind": "k1"}, "top_k": 10, "temporal_as_of": e}),
            json!({"table": "docs", "tenant_id": "acme", "text": "version", "graph_seed": "r3", "graph_depth": 2,
                   "top_k": 10, "temporal_as_of": e}),
        ] {
            let found = query(engine, q.clone()).unwrap();
            assert!(!found.is_empty(), "{q}");
            out.push(json!(found));
        }
    }
    out
}

/// Writes every record `versions` times, one epoch and one checkpoint per
/// version, so each version's fields are in a sealed record file of their
/// own; returns the epochs.
fn write_versions(engine: &Engine, versions: usize) -> Vec<u64> {
    let mut epochs = Vec::new();
    for version in 0..versions {
        let written = engine.put(None, None, (0..RECORDS).map(|i| doc(i, version)).collect(), None).unwrap();
        epochs.push(epoch_of(written));
        // deleting and rewriting one key keeps a tombstone in the history
        if version == 1 {
            engine.delete(None, None, key("r5"), None).unwrap();
        }
        engine.checkpoint(None, None).unwrap();
    }
    epochs
}

#[test]
fn versions_below_the_horizon_leave_memory_the_indexes_and_the_disk() {
    let _failpoints = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let branch = main_dir(dir.path());
    // no retention while the history is written, to observe it whole
    let engine = Engine::open(config(dir.path(), None)).unwrap();
    let epochs = write_versions(&engine, 6);
    let latest = engine.metrics(None, None).unwrap().latest_epoch;
    let history = 2;
    let horizon = latest - history;
    let kept: Vec<u64> = (horizon..=latest).collect();
    let before = observe(&engine, &kept);
    let versions_before = engine.metrics(None, None).unwrap().version_count;
    let docs_before = engine.branch(None, None).unwrap().text.indexed_documents();
    let bytes_before: u64 = record_files(&branch).iter().map(|(_, n)| n).sum();
    let vector_bytes_before: u64 = files(&branch, "vectors-").iter().map(|(_, n)| n).sum();
    drop(engine);

    let engine = Engine::open(config(dir.path(), Some(history))).unwrap();
    assert_eq!(observe(&engine, &kept), before, "nothing changes before retention runs");
    engine.checkpoint(None, None).unwrap();
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.retention.horizon_epoch, horizon);
    // epochs: versions 0 and 1, the delete of r5, versions 2 to 5; so every
    // version superseded at or before the horizon (epoch 5) is versions 0-2
    // of each record and the tombstone (superseded by r5's version 2)
    assert_eq!(latest, 7);
    assert_eq!(m.retention.purged_versions, 3 * RECORDS as u64 + 1, "{:?}", m.retention);
    assert_eq!(m.version_count, versions_before - m.retention.purged_versions);
    assert!(m.retention.compacted_files >= 3, "{:?}", m.retention);
    // the reads the horizon allows see exactly what they saw
    assert_eq!(observe(&engine, &kept), before);
    // the text documents of removed versions are deleted
    let text = engine.branch(None, None).unwrap().text.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while text.indexed_documents() > docs_before - m.retention.purged_versions && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(text.indexed_documents() <= docs_before - m.retention.purged_versions + 1);
    // half the column's vectors belonged to removed versions: the indexer
    // rebuilds it without them, and reads see the same meanwhile and after
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while engine.metrics(None, None).unwrap().retention.compacted_vectors == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(engine.metrics(None, None).unwrap().retention.compacted_vectors, 3 * RECORDS as u64);
    assert_eq!(observe(&engine, &kept), before);
    // the next checkpoint writes the kept vectors to its file and deletes the
    // files only removed versions' vectors were read from
    engine.checkpoint(None, None).unwrap();
    let vector_bytes: u64 = files(&branch, "vectors-").iter().map(|(_, n)| n).sum();
    assert!(vector_bytes * 10 < vector_bytes_before * 6, "vector files {vector_bytes_before} -> {vector_bytes} bytes");
    // reads below the horizon are refused
    let below = epochs[1];
    assert!(below < horizon);
    assert_eq!(engine.get(None, None, &key("r1"), Some(below)).unwrap_err().code, Code::TemporalBeforeHorizon);
    let old = json!({"table": "docs", "tenant_id": "acme", "text": "record", "top_k": 5, "temporal_as_of": below});
    assert_eq!(query(&engine, old.clone()), Err(Code::TemporalBeforeHorizon));
    drop(engine);

    // the files the compaction emptied are gone and the bytes with them
    let bytes_after: u64 = record_files(&branch).iter().map(|(_, n)| n).sum();
    // half the versions went (3 of 6 per record)
    assert!(bytes_after * 10 < bytes_before * 6, "record files {bytes_before} -> {bytes_after} bytes");

    // a restart with retention off cannot offer the removed history again
    let engine = Engine::open(config(dir.path(), None)).unwrap();
    assert_eq!(engine.metrics(None, None).unwrap().retention.horizon_epoch, horizon);
    assert_eq!(query(&engine, old), Err(Code::TemporalBeforeHorizon));
    assert_eq!(observe(&engine, &kept), before);
    // and the branch goes on: new versions, a checkpoint, a restart
    engine.put(None, None, vec![doc(3, 9)], None).unwrap();
    engine.checkpoint(None, None).unwrap();
    drop(engine);
    let engine = Engine::open(config(dir.path(), None)).unwrap();
    assert_eq!(observe(&engine, &kept), before);
    let r3 = engine.get(None, None, &key("r3"), None).unwrap().unwrap();
    assert_eq!(r3.fields["stamp"], "v9-3");
}

#[test]
fn a_checkpoint_failing_after_compaction_and_a_crash_before_the_deletes_lose_nothing() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let branch = main_dir(dir.path());
    let engine = Engine::open(config(dir.path(), None)).unwrap();
    write_versions(&engine, 5);
    let latest = engine.metrics(None, None).unwrap().latest_epoch;
    let kept: Vec<u64> = (latest - 1..=latest).collect();
    let before = observe(&engine, &kept);
    drop(engine);
    let files_before = record_files(&branch);

    // the compaction runs, then the image cannot be written: the previous
    // image and every file it names stay, and the branch keeps reading
    let engine = Engine::open(config(dir.path(), Some(1))).unwrap();
    faults::configure("checkpoint::write", "return(enospc)").unwrap();
    assert_eq!(engine.checkpoint(None, None).unwrap_err().code, Code::StorageFailure);
    faults::clear();
    assert_eq!(observe(&engine, &kept), before);
    for (name, _) in &files_before {
        assert!(branch.join(name).exists(), "{name} is still named by the last image");
    }
    drop(engine); // without a close checkpoint: as a crash would leave it
    let engine = Engine::open(config(dir.path(), Some(1))).unwrap();
    assert_eq!(observe(&engine, &kept), before);

    // a crash after the image is installed but before the compacted files
    // are deleted (simulated by putting them back): the start removes them
    let saved: Vec<(String, Vec<u8>)> =
        files_before.iter().map(|(name, _)| (name.clone(), std::fs::read(branch.join(name)).unwrap())).collect();
    engine.checkpoint(None, None).unwrap();
    assert!(engine.metrics(None, None).unwrap().retention.compacted_files > 0);
    drop(engine);
    let after: Vec<String> = record_files(&branch).into_iter().map(|(n, _)| n).collect();
    let mut put_back = 0;
    for (name, bytes) in &saved {
        if !branch.join(name).exists() {
            std::fs::write(branch.join(name), bytes).unwrap();
            put_back += 1;
        }
    }
    assert!(put_back > 0, "the compaction deleted files");
    let engine = Engine::open(config(dir.path(), Some(1))).unwrap();
    assert_eq!(record_files(&branch).into_iter().map(|(n, _)| n).collect::<Vec<_>>(), after);
    assert_eq!(observe(&engine, &kept), before);
    scenario.teardown();
}

#[test]
fn expired_receipts_leave_memory_and_disk() {
    let _failpoints = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let mut short = config(dir.path(), None);
    short.branch.receipt_retention_ms = 150;
    let engine = Engine::open(short).unwrap();
    let receipt = |key: &str| ReceiptDraft {
        key: key.to_string(),
        body_hash: "h".to_string(),
        status: 200,
        body: json!({}),
        digest: None,
    };
    engine.put(None, None, vec![doc(1, 0)], Some(receipt("k1"))).unwrap();
    assert_eq!(engine.metrics(None, None).unwrap().receipt_count, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while engine.metrics(None, None).unwrap().receipt_count > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(engine.metrics(None, None).unwrap().receipt_count, 0, "expired in memory");
    engine.checkpoint(None, None).unwrap();
    drop(engine);
    // a start that would keep receipts for a day finds none on disk
    let engine = Engine::open(config(dir.path(), None)).unwrap();
    assert_eq!(engine.metrics(None, None).unwrap().receipt_count, 0, "expired on disk");
    assert!(engine.get(None, None, &key("r1"), None).unwrap().is_some());
}

#[test]
fn pages_of_removed_rows_leave_memory_and_the_checkpoint_image() {
    let _failpoints = FailScenario::setup();
    use braid_engine::storage::state::PAGE_ROWS;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path(), Some(1))).unwrap();
    let n = 2 * PAGE_ROWS + 800;
    for version in 0..3 {
        engine.put(None, None, (0..n).map(|i| doc(i, version)).collect(), None).unwrap();
    }
    let latest = engine.metrics(None, None).unwrap().latest_epoch;
    let kept = [latest - 1, latest];
    let before = observe(&engine, &kept);
    let rows_memory = engine.metrics(None, None).unwrap().memory.rows;
    // version 0 (rows 0 .. n) is superseded at the horizon: the first two
    // pages hold nothing else and are dropped; the third keeps version 1 rows
    engine.checkpoint(None, None).unwrap();
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.retention.purged_versions, n as u64);
    let page_bytes = (PAGE_ROWS * std::mem::size_of::<braid_engine::storage::Row>()) as u64;
    assert_eq!(rows_memory - m.memory.rows, 2 * page_bytes, "two pages of row metadata freed");
    assert_eq!(observe(&engine, &kept), before);
    // a snapshot of the trimmed branch restores with the same records and
    // the same horizon
    engine.snapshot(None, None, "trimmed").unwrap();
    engine.restore("trimmed", "trimmed_copy").unwrap();
    for i in [0, 1, PAGE_ROWS - 1, 2 * PAGE_ROWS, n - 1] {
        let id = key(&format!("r{i}"));
        let restored = engine.get(None, Some("trimmed_copy"), &id, None).unwrap().map(|r| r.fields);
        assert_eq!(restored, engine.get(None, None, &id, None).unwrap().map(|r| r.fields), "r{i}");
    }
    let old: HybridQuery =
        serde_json::from_value(json!({"table": "docs", "tenant_id": "acme", "text": "record", "temporal_as_of": 1}))
            .unwrap();
    assert_eq!(engine.query(None, Some("trimmed_copy"), &old).unwrap_err().code, Code::TemporalBeforeHorizon);
    drop(engine);
    // the image leaves the dropped pages out and a start reads it back
    let engine = Engine::open(config(dir.path(), Some(1))).unwrap();
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.retention.purged_versions, n as u64);
    assert_eq!(m.version_count, 2 * n as u64);
    // the pages a start reads stay packed in the image until a row of them
    // is read: at most what the pages kept take once unpacked (the page
    // list itself may be allocated a little differently)
    assert!(m.memory.rows <= rows_memory - 2 * page_bytes + 64, "{} of {rows_memory}", m.memory.rows);
    assert_eq!(observe(&engine, &kept), before);
    let unpacked = engine.metrics(None, None).unwrap().memory.rows;
    assert!(unpacked <= rows_memory - 2 * page_bytes + 64, "{unpacked} of {rows_memory}");
    // writes go on past the dropped pages
    engine.put(None, None, vec![doc(1, 9)], None).unwrap();
    assert_eq!(engine.get(None, None, &key("r1"), None).unwrap().unwrap().fields["stamp"], "v9-1");
}

/// Regression (black-box operations test): one indexer round took a text
/// document only with its vector, so the text index lagged as far as the
/// graphs, and retention, which removes only rows the text index was
/// handed, could not keep up with writes the graphs lagged: rewriting 1,000
/// keys at 4,500 versions a second kept 468,000 versions for 1,000 records.
/// The text index now runs ahead of the graphs, and retention with it.
#[test]
fn retention_keeps_up_with_writes_the_vector_graphs_lag() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), Some(1));
    // the text index commits as soon as it is handed rows
    config.branch.text_commit_interval = Duration::ZERO;
    // every version is written before the indexer starts, so its first
    // round hands the text index all of them and then links all of them
    config.branch.indexing = braid_engine::storage::IndexingGate::new(false);
    let engine = Engine::open(config).unwrap();
    // linking one vector takes 5 ms: 4,000 take 10 s on two cores, a wide
    // window for the text index to be seen caught up while they link (the
    // fail point is cleared once it was, and the rest links at full speed)
    faults::configure("vector::insert", "sleep(5)").unwrap();
    for round in 0..40 {
        let records = (0..100)
            .map(|k| rec(&format!("k{k}"), json!({"body": format!("round {round}"), "emb": [1.0, k as f64]})))
            .collect();
        engine.put(None, None, records, None).unwrap();
    }
    engine.start_indexing();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while engine.metrics(None, None).unwrap().index_lag.text_rows > 0 {
        assert!(std::time::Instant::now() < deadline, "the text index never caught up");
        std::thread::sleep(Duration::from_millis(5));
    }
    let lagging = engine.metrics(None, None).unwrap().index_lag.vector_rows;
    engine.checkpoint(None, None).unwrap();
    let m = engine.metrics(None, None).unwrap();
    // what a crash leaves now: the graphs far behind, most rows above them removed
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    faults::clear();
    assert!(lagging > 0, "the graphs had caught up with the text index");
    // the horizon is epoch 39: every version but the last two of each key
    assert_eq!(m.version_count, 200, "retention removed what the text index was handed");
    assert_eq!(m.record_count, 100);
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    let hits = query(&engine, json!({"table": "docs", "tenant_id": "acme", "text": "round", "top_k": 1000})).unwrap();
    assert_eq!(hits.len(), 100, "every record's latest version is found, and only it");
    // a start's backlog counts the rows left to index, not the ones retention
    // removed (a soak test's recovery event said 865,799 with 80,000 kept)
    let mut reopened = config_without_checkpoints(crashed.path());
    reopened.branch.history_epochs = Some(1);
    reopened.branch.indexing = braid_engine::storage::IndexingGate::new(false);
    let copy = Engine::open(reopened).unwrap();
    let backlog = copy.events().into_iter().find_map(|e| match e.event.event {
        braid_engine::storage::events::Event::Recovery { index_backlog_rows, .. } => Some(index_backlog_rows),
        _ => None,
    });
    assert!(backlog.is_some_and(|rows| rows > 0 && rows <= m.version_count), "{backlog:?} of {} kept", m.version_count);
    scenario.teardown();
}

/// Retention deletes the text documents of the versions it removes, and only
/// of those that can have any. A delete per removed row of a table of numbers
/// held memory in the text index's delete queue: a black-box test's server
/// grew to 978 MB for 200 records rewritten 570,000 times, and a start after
/// a kill deleted every removed row again (960 MB).
#[test]
fn only_versions_with_text_are_deleted_from_the_text_index() {
    let _failpoints = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path(), Some(0))).unwrap();
    let numbers = |round: u64| -> Vec<RecordInput> {
        (0..20)
            .map(|k| {
                let mut r = rec(&format!("n{k}"), json!({"n": round * 100 + k, "flag": k % 2 == 0}));
                r.table = "numbers".into();
                r
            })
            .collect()
    };
    for round in 0..10 {
        engine.put(None, None, numbers(round), None).unwrap();
        engine.checkpoint(None, None).unwrap();
    }
    let figures = engine.metrics(None, None).unwrap().retention;
    assert!(figures.purged_versions >= 160, "{figures:?}");
    assert_eq!(figures.text_deletes, 0, "a table without text columns has no documents to delete");
    for round in 0..4 {
        engine.put(None, None, (0..RECORDS).map(|i| doc(i, round)).collect(), None).unwrap();
        assert!(engine.wait_indexed(Duration::from_secs(60)));
        engine.checkpoint(None, None).unwrap();
    }
    let figures = engine.metrics(None, None).unwrap().retention;
    assert_eq!(figures.text_deletes, 3 * RECORDS as u64, "every removed version of docs, and nothing else");
    // the deleted documents are gone from the text index: a word only old versions held finds nothing
    let mut old = HybridQuery { table: Some("docs".into()), tenant_id: Some("acme".into()), ..Default::default() };
    old.text = Some("v0".into());
    old.text_field = Some("stamp".into());
    assert!(engine.query(None, None, &old).unwrap().results.is_empty());
}
