//! The committer's counters and the engine events (issue 15): WAL bytes, the
//! fsync and group-commit histograms, checkpoints, index lag, vector graph
//! sizes and memory estimates move with the work done; recovery, checkpoints,
//! index catch-up and storage faults are recorded as events.
//!
//! One test injects faults, and fail points are process-wide, so every test
//! here holds a `FailScenario` (which serialises them).
//!
//! Some tests inject faults, and fail points are process-wide: every test
//! holds a `FailScenario`, which serialises them, so an injected checkpoint
//! failure never lands in another test's checkpoint.

use std::time::Duration;

use braid_engine::faults;
use braid_engine::storage::events::{CheckpointTrigger, Event, FaultStage, Level};
use braid_engine::storage::state::KeyEntry;
use braid_engine::storage::Row;
use braid_engine::{BranchEvent, Engine, EngineConfig};
use fail::FailScenario;
use serde_json::json;

mod common;
use common::{config_without_checkpoints, newest_wal, open, rec};

fn events(engine: &Engine) -> Vec<Event> {
    engine.events().into_iter().map(|e: BranchEvent| e.event.event).collect()
}

#[test]
fn wal_bytes_fsyncs_and_group_sizes_move_with_writes() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(open(dir.path()));
    let before = engine.metrics(None, None).unwrap().wal;
    assert_eq!((before.appended_bytes, before.fsync_seconds.count, before.group_commit_writes.count), (0, 0, 0));

    engine.put(None, None, vec![rec("a", json!({"title": "one"}))], None).unwrap();
    let one = engine.metrics(None, None).unwrap().wal;
    assert!(one.appended_bytes > 0);
    assert_eq!(
        one.segment_bytes,
        one.appended_bytes + before.segment_bytes,
        "the segment holds its header and the frame"
    );
    assert_eq!(one.fsync_seconds.count, 1);
    assert_eq!((one.group_commit_writes.count, one.group_commit_writes.sum), (1, 1.0));

    // concurrent writers: every write is counted once, in groups that share fsyncs
    let writers: Vec<_> = (0..8)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    engine.put(None, None, vec![rec(&format!("t{t}-{i}"), json!({"n": i}))], None).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let after = engine.metrics(None, None).unwrap().wal;
    assert_eq!(after.group_commit_writes.sum, 81.0, "every write in exactly one group");
    assert_eq!(after.fsync_seconds.count, after.group_commit_writes.count, "one fsync per group");
    assert!(after.group_commit_writes.count <= 81);
    assert!(after.appended_bytes > one.appended_bytes);
    // cumulative buckets never fall, and +Inf is the count
    let b = &after.group_commit_writes.cumulative;
    assert!(b.windows(2).all(|w| w[0] <= w[1]) && *b.last().unwrap() <= after.group_commit_writes.count);
    scenario.teardown();
}

#[test]
fn checkpoints_are_counted_aged_and_recorded_as_events() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let mut config = config_without_checkpoints(dir.path());
    config.branch.checkpoint_wal_bytes = 8 * 1024;
    let engine = Engine::open(config.clone()).unwrap();
    let fresh = engine.metrics(None, None).unwrap().checkpoints;
    assert_eq!((fresh.count, fresh.age_seconds), (0, None), "no checkpoint, no age");
    let opened = events(&engine);
    assert!(
        matches!(opened[..], [Event::Recovery { checkpoint_generation: None, commits_replayed: 0, .. }]),
        "{opened:?}"
    );

    let body = "x".repeat(512);
    for i in 0..40 {
        engine.put(None, None, vec![rec(&format!("r{i}"), json!({ "body": body }))], None).unwrap();
    }
    // the committer takes a checkpoint due by size before its next request,
    // so once this one is answered every due one has been taken
    let info = engine.checkpoint(None, None).unwrap();
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.checkpoints.duration_seconds.count, m.checkpoints.count);
    assert!(m.checkpoints.age_seconds.is_some());
    assert_eq!(m.checkpoints.last_bytes, info.bytes);
    assert_eq!(m.wal.segment_bytes, 16, "a checkpoint starts a new segment (its header only)");
    let taken = events(&engine);
    let by_size = taken.iter().filter(|e| matches!(e, Event::Checkpoint { trigger: CheckpointTrigger::WalBytes, .. }));
    assert!(by_size.count() >= 2, "{taken:?}");
    assert_eq!(taken.len() as u64, m.checkpoints.count, "one event per checkpoint: {taken:?}");
    assert!(
        matches!(taken.last(), Some(Event::Checkpoint { trigger: CheckpointTrigger::Request, generation, bytes, .. })
            if *generation == info.gen && *bytes == info.bytes),
        "{taken:?}"
    );
    drop(engine);

    // the next start loads that checkpoint and knows its age
    let engine = Engine::open(config).unwrap();
    let reopened = events(&engine);
    assert!(
        matches!(reopened[..], [Event::Recovery { checkpoint_generation: Some(g), commits_replayed: 0, .. }] if g == info.gen),
        "{reopened:?}"
    );
    let loaded = engine.metrics(None, None).unwrap().checkpoints;
    assert_eq!(loaded.count, 0, "counted since open");
    assert!(loaded.last_unix_seconds.is_some() && loaded.age_seconds.is_some());
    scenario.teardown();
}

#[test]
fn a_torn_tail_is_a_recovery_warning_and_replayed_commits_are_counted() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(config_without_checkpoints(dir.path())).unwrap();
        for i in 0..3 {
            engine.put(None, None, vec![rec(&format!("r{i}"), json!({"n": i}))], None).unwrap();
        }
    }
    let wal = newest_wal(&dir.path().join("db/default/main"));
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes.extend_from_slice(&[0xAB; 40]);
    std::fs::write(&wal, bytes).unwrap();

    let engine = Engine::open(config_without_checkpoints(dir.path())).unwrap();
    let recorded = engine.events();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!((recorded[0].database_id.as_str(), recorded[0].branch_id.as_str()), ("default", "main"));
    assert_eq!(recorded[0].event.level, Level::Warn);
    match &recorded[0].event.event {
        Event::Recovery { truncated_bytes, commits_replayed, segments_replayed, latest_epoch, .. } => {
            assert_eq!((*truncated_bytes, *commits_replayed, *segments_replayed, *latest_epoch), (40, 3, 1, 3));
        }
        other => panic!("{other:?}"),
    }
    scenario.teardown();
}

#[test]
fn index_lag_returns_to_zero_and_a_backlog_ends_with_a_catch_up_event() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    // more rows at once than one indexer round takes
    let rows: Vec<_> = (0..5000)
        .map(|i| rec(&format!("r{i}"), json!({"title": format!("doc {i}"), "emb": [1.0, i as f64, 0.5]})))
        .collect();
    engine.put(None, None, rows, None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(120)));
    let m = engine.metrics(None, None).unwrap();
    assert_eq!((m.index_lag.text_rows, m.index_lag.vector_rows), (0, 0));
    assert_eq!((m.vector_graphs.graphs, m.vector_graphs.points, m.vector_graphs.max_points), (1, 5000, 5000));
    // each node holds its layer-0 links (a count and 32 ids), no vector
    assert!(m.memory.vector_graphs >= 5000 * 33 * 4, "{:?}", m.memory);
    assert!(m.memory.rows >= 5000 * std::mem::size_of::<Row>() as u64, "{:?}", m.memory);
    assert!(m.memory.keys >= 5000 * std::mem::size_of::<KeyEntry>() as u64, "{:?}", m.memory);
    assert!(m.memory.vectors >= 5000 * 3 * 4, "vectors since the last checkpoint are on the heap");
    // the event follows the catch-up within an indexer wait
    let mut caught_up = None;
    for _ in 0..200 {
        caught_up = events(&engine).into_iter().find(|e| matches!(e, Event::IndexCaughtUp { .. }));
        if caught_up.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(matches!(caught_up, Some(Event::IndexCaughtUp { backlog_rows: 5000, .. })), "{caught_up:?}");
    scenario.teardown();
}

#[test]
fn storage_faults_and_failed_checkpoints_are_error_events() {
    let scenario = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    engine.put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
    engine.events();

    faults::configure("checkpoint::write", "return(enospc)").unwrap();
    assert!(engine.checkpoint(None, None).is_err());
    faults::clear();
    let failed = engine.events();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].event.level, Level::Error);
    assert!(
        matches!(&failed[0].event.event, Event::CheckpointFailed { trigger: CheckpointTrigger::Request, error } if !error.is_empty())
    );
    assert_eq!(engine.metrics(None, None).unwrap().checkpoints.failures, 1);

    faults::configure("wal::sync", "return(eio)").unwrap();
    assert!(engine.put(None, None, vec![rec("b", json!({"n": 2}))], None).is_err());
    faults::clear();
    let fault = engine.events();
    assert_eq!(fault.len(), 1);
    assert_eq!(fault[0].event.level, Level::Error);
    assert!(
        matches!(&fault[0].event.event, Event::StorageFailed { stage: FaultStage::Wal, error } if error.contains("injected"))
    );
    // nothing of the record's contents in the events
    assert!(!serde_json::to_string(&fault).unwrap().contains("\"n\""));
    scenario.teardown();
}

/// Short records reach the row bound long before the byte bound, and the
/// rows a start replays from the open segment count toward it: what a start
/// replays stays bounded whatever the records' size.
#[test]
fn checkpoints_come_by_rows_counting_the_replayed_tail() {
    let _failpoints = FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let mut config = config_without_checkpoints(dir.path());
    config.branch.checkpoint_rows = 50;
    let by_rows = |engine: &Engine| {
        events(engine)
            .iter()
            .filter(|e| matches!(e, Event::Checkpoint { trigger: CheckpointTrigger::WalRows, .. }))
            .count()
    };
    {
        let engine = Engine::open(config.clone()).unwrap();
        for i in 0..30 {
            engine.put(None, None, vec![rec(&format!("r{i}"), json!({ "n": i }))], None).unwrap();
        }
        assert_eq!(by_rows(&engine), 0);
    }
    // 30 rows replayed; 19 more stay below the bound
    let engine = Engine::open(config.clone()).unwrap();
    for i in 30..49 {
        engine.put(None, None, vec![rec(&format!("r{i}"), json!({ "n": i }))], None).unwrap();
    }
    assert_eq!(by_rows(&engine), 0);
    // the 50th row makes one due; the committer takes it before the next write
    let batch = (49..52).map(|i| rec(&format!("r{i}"), json!({ "n": i }))).collect();
    engine.put(None, None, batch, None).unwrap();
    engine.put(None, None, vec![rec("last", json!({ "n": 0 }))], None).unwrap();
    assert_eq!(by_rows(&engine), 1);
    assert_eq!(engine.metrics(None, None).unwrap().checkpoints.count, 1);
    drop(engine);
    let engine = Engine::open(config).unwrap();
    let replayed = events(&engine).iter().find_map(|e| match e {
        Event::Recovery { commits_replayed, .. } => Some(*commits_replayed),
        _ => None,
    });
    assert_eq!(replayed, Some(1), "only the write after the checkpoint is replayed");
    assert_eq!(engine.get(None, None, &common::key("r0"), None).unwrap().unwrap().fields["n"], json!(0));
}

/// Found by a black-box test: the service reads metrics on its JS thread,
/// and a commit applying a huge record held the branch's state for up to a
/// second, stalling every request behind one readiness probe. While the
/// state is held, metrics answer the branch's last figures (here the state
/// is held by this very thread, where waiting for it would never end).
#[test]
fn metrics_answer_the_last_figures_while_a_commit_holds_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"title": "one"}))], None).unwrap();
    let before = engine.metrics(None, None).unwrap();
    let branch = engine.branch(None, None).unwrap();
    let held = branch.state.write();
    let during = engine.metrics(None, None).unwrap();
    drop(held);
    assert_eq!((during.latest_epoch, during.record_count), (before.latest_epoch, before.record_count));
    engine.put(None, None, vec![rec("b", json!({"title": "two"}))], None).unwrap();
    let after = engine.metrics(None, None).unwrap();
    assert_eq!(after.record_count, 2);
    assert!(after.latest_epoch > before.latest_epoch);
}
