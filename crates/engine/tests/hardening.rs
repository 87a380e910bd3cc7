//! Regression tests of issue 16 (hardening): the data directory lock, WAL
//! corruption against torn tails, zero-filled frames, the doctor, non-finite
//! vectors, receipts leaving memory, the term cap, catalog durability and
//! file modes. Each pins a bug the engine had.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use braid_engine::query::HybridQuery;
use braid_engine::storage::wal::{self, ScanEnd};
use braid_engine::storage::ReceiptDraft;
use braid_engine::{Code, Engine, EngineConfig, RecordInput, RecordKey};
use serde_json::json;

mod common;
use common::{config_without_checkpoints, key, newest_wal, open_without_checkpoints as open, rec};

/// Appends raw bytes to the main branch's log (a torn or zero-filled tail).
fn append_to_wal(dir: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().append(true).open(main_wal(dir)).unwrap();
    f.write_all(bytes).unwrap();
}

fn main_wal(dir: &Path) -> std::path::PathBuf {
    newest_wal(&dir.join("db").join("default").join("main"))
}

/// Offsets at which each frame of a clean log starts.
fn frame_starts(path: &Path) -> Vec<u64> {
    let found = wal::inspect(path).unwrap();
    assert_eq!(found.end, ScanEnd::Clean);
    let bytes = std::fs::read(path).unwrap();
    let scan = wal::scan(&bytes);
    let mut starts = vec![wal::HEADER_LEN];
    starts.extend(scan.frames.iter().map(|(_, end)| *end));
    starts.pop();
    starts
}

fn write_five(dir: &Path) {
    let engine = open(dir);
    for i in 1..=5 {
        engine.put(None, None, vec![rec(&format!("r{i}"), json!({"title": format!("record {i}")}))], None).unwrap();
    }
}

/// Regression: nothing locked the directory, so a second server truncated the
/// first one's log during its recovery.
#[test]
fn a_second_engine_on_a_live_directory_fails_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path());
    first.put(None, None, vec![rec("a", json!({"title": "kept"}))], None).unwrap();
    // a torn tail the second process would have cut
    append_to_wal(dir.path(), &[9, 9, 9]);
    let before = std::fs::read(main_wal(dir.path())).unwrap();
    let err = Engine::open(config_without_checkpoints(dir.path())).err().expect("second open must fail");
    assert_eq!(err.code, Code::DataDirLocked, "{}", err.message);
    assert_eq!(std::fs::read(main_wal(dir.path())).unwrap(), before, "the log is untouched");
    first.close();
    drop(first);
    let again = open(dir.path());
    assert!(again.get(None, None, &key("a"), None).unwrap().is_some());
}

/// Regression: a damaged frame in the middle of the log was cut like a torn
/// tail, deleting every later acknowledged commit without a word.
#[test]
fn a_corrupt_middle_frame_refuses_to_open_and_doctor_salvages_on_request() {
    let dir = tempfile::tempdir().unwrap();
    write_five(dir.path());
    let path = main_wal(dir.path());
    let starts = frame_starts(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let damaged = starts[2] as usize;
    bytes[damaged + wal::FRAME_HEADER + 3] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();

    let err = Engine::open(config_without_checkpoints(dir.path())).err().expect("corrupt log must be refused");
    assert_eq!(err.code, Code::WalCorrupt);
    assert!(err.message.contains(&format!("offset {damaged}")), "{}", err.message);
    assert!(err.message.contains("braid doctor"), "{}", err.message);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "refusing leaves the file as it was");

    let report = braid_engine::doctor::doctor(dir.path(), false).unwrap();
    assert!(!report.healthy);
    let log = report.logs.iter().find(|l| l.owner == "branch default/main").unwrap();
    assert!(matches!(log.inspection.end, ScanEnd::Corrupt { offset, .. } if offset == damaged as u64));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "a report changes nothing");

    let report = braid_engine::doctor::doctor(dir.path(), true).unwrap();
    assert!(report.healthy);
    let log = report.logs.iter().find(|l| l.owner == "branch default/main").unwrap();
    assert_eq!(log.action, "salvaged");
    assert_eq!(std::fs::read(log.backup.as_ref().unwrap()).unwrap(), bytes, "the original is kept");

    // frames 1 and 2 (table creation is inside the first put) survive
    let engine = open(dir.path());
    assert!(engine.get(None, None, &key("r2"), None).unwrap().is_some());
    assert!(engine.get(None, None, &key("r3"), None).unwrap().is_none());
}

#[test]
fn doctor_salvage_refuses_a_live_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _engine = open(dir.path());
    let err = braid_engine::doctor::doctor(dir.path(), true).unwrap_err();
    assert_eq!(err.code, Code::DataDirLocked);
}

/// Regression: a zero-filled frame (length 0, checksum 0) passed the checksum
/// and the engine then refused to start. Zeros after the last frame are the
/// log's preallocated space (storage/wal.rs): the log ends there and nothing
/// is reported as cut.
#[test]
fn a_zero_filled_tail_ends_the_log() {
    let dir = tempfile::tempdir().unwrap();
    write_five(dir.path());
    append_to_wal(dir.path(), &[0u8; 8192]);
    let engine = open(dir.path());
    assert!(engine.get(None, None, &key("r5"), None).unwrap().is_some());
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.recovered_truncated_bytes, 0);
    assert_eq!(m.recovery_state, "healthy");
    engine.put(None, None, vec![rec("r6", json!({"title": "after"}))], None).unwrap();
    drop(engine);
    let engine = open(dir.path());
    assert!(engine.get(None, None, &key("r6"), None).unwrap().is_some());
}

/// A version 1 log (today's format before this change) is migrated on open.
#[test]
fn a_version_1_log_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let branch = dir.path().join("db").join("default").join("main");
    std::fs::create_dir_all(&branch).unwrap();
    let mut bytes = b"BRAIDWAL\x01\0\0\0\0\0\0\0".to_vec();
    let commits = [
        json!({"epoch": 1, "at_ms": 1, "schemas": [{"name": "docs", "columns": {"title": {"type": "string", "text": true, "scalar": true}}}],
               "rows": [{"table": "docs", "tenant_id": "acme", "id": "old", "version_id": 1, "fields": {"title": "from v1"}}]}),
        json!({"epoch": 2, "at_ms": 2, "rows": [{"table": "docs", "tenant_id": "acme", "id": "old", "version_id": 2, "fields": {"title": "second"}}]}),
    ];
    for c in &commits {
        let payload = serde_json::to_vec(c).unwrap();
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
    }
    std::fs::write(branch.join("wal.log"), &bytes).unwrap();
    let engine = open(dir.path());
    let got = engine.get(None, None, &key("old"), None).unwrap().unwrap();
    assert_eq!(got.version_id, 2);
    assert_eq!(got.fields["title"], "second");
    assert_eq!(engine.get(None, None, &key("old"), Some(1)).unwrap().unwrap().fields["title"], "from v1");
    assert_eq!(std::fs::read(main_wal(dir.path())).unwrap()[8], wal::FORMAT_VERSION);
}

/// A version 2 log (JSON commits, the format before binary frames) is read,
/// marked version 3 before anything binary is appended, and the old and new
/// commits read back exactly, vectors included.
#[test]
fn a_version_2_log_with_json_commits_is_read_and_extended() {
    let dir = tempfile::tempdir().unwrap();
    let branch = dir.path().join("db").join("default").join("main");
    std::fs::create_dir_all(&branch).unwrap();
    let mut bytes = b"BRAIDWAL\x02\0\0\0\0\0\0\0".to_vec();
    let commits = [
        json!({"epoch": 1, "at_ms": 1, "schemas": [{"name": "docs", "columns": {
                   "title": {"type": "string", "text": true, "scalar": true},
                   "emb": {"type": "vector", "dim": 3, "metric": "cosine", "text": false, "scalar": false}}}],
               "rows": [{"table": "docs", "tenant_id": "acme", "id": "old", "version_id": 1,
                         "fields": {"title": "from v2", "emb": [0.1, 0.2, 0.30000000000000004], "n": 7}}]}),
        json!({"epoch": 2, "at_ms": 2, "rows": [{"table": "docs", "tenant_id": "acme", "id": "gone", "version_id": 1, "deleted": true}]}),
    ];
    for (seq, c) in (1u64..).zip(&commits) {
        wal::encode_frame(seq, seq - 1, &serde_json::to_vec(c).unwrap(), &mut bytes);
    }
    std::fs::write(branch.join("wal-00000000.log"), &bytes).unwrap();
    {
        let engine = open(dir.path());
        assert_eq!(std::fs::read(main_wal(dir.path())).unwrap()[8], wal::FORMAT_VERSION);
        let old = engine.get(None, None, &key("old"), None).unwrap().unwrap();
        assert_eq!(
            old.fields,
            json!({"title": "from v2", "emb": [0.1, 0.2, 0.30000000000000004], "n": 7}).as_object().unwrap().clone()
        );
        engine.put(None, None, vec![rec("new", json!({"title": "binary", "emb": [0.5, -1.0, 1e-30]}))], None).unwrap();
    }
    let engine = open(dir.path());
    let old = engine.get(None, None, &key("old"), None).unwrap().unwrap();
    assert_eq!(old.fields["emb"], json!([0.1, 0.2, 0.30000000000000004]));
    assert_eq!(old.fields["n"], json!(7));
    let new = engine.get(None, None, &key("new"), None).unwrap().unwrap();
    assert_eq!(new.fields["emb"], json!([0.5, -1.0, 1e-30]));
    assert_eq!(new.version_id, 1);
    assert!(engine.get(None, None, &key("new"), Some(2)).unwrap().is_none(), "the new write took epoch 3");
    assert!(engine.get(None, None, &key("new"), Some(3)).unwrap().is_some());
    assert!(engine.get(None, None, &key("gone"), None).unwrap().is_none());
}

/// Regression (black-box fuzz): a read at an epoch not yet written answered
/// the latest version, where a query at that epoch is refused.
#[test]
fn a_get_after_the_latest_epoch_is_refused_like_a_query() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"title": "one"}))], None).unwrap();
    let epoch = engine.metrics(None, None).unwrap().latest_epoch;
    assert!(engine.get(None, None, &key("a"), Some(epoch)).unwrap().is_some());
    let err = engine.get(None, None, &key("a"), Some(epoch + 1)).unwrap_err();
    assert_eq!(err.code, Code::TemporalInFuture);
    let mut q = query("docs");
    q.temporal_as_of = Some(epoch as i64 + 1);
    assert_eq!(engine.query(None, None, &q).unwrap_err().code, Code::TemporalInFuture);
}

fn query(table: &str) -> HybridQuery {
    HybridQuery { table: Some(table.into()), tenant_id: Some("acme".into()), ..Default::default() }
}

/// Regression: values beyond f32's range became infinities, and a NaN distance
/// panicked inside hnsw_rs (500, and the indexer dropped its whole batch).
#[test]
fn non_finite_vectors_are_refused_on_writes_and_queries() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("ok", json!({"v": [0.5, 0.5, 0.5]}))], None).unwrap();
    let epoch = engine.metrics(None, None).unwrap().latest_epoch;
    for bad in [json!([1e39, 0.0, 0.0]), json!([0.0, -1e300, 0.0])] {
        let err = engine.put(None, None, vec![rec("x", json!({ "v": bad }))], None).unwrap_err();
        assert_eq!(err.code, Code::VectorNotFinite, "{}", err.message);
    }
    // on a new table the first write infers the column: checked there too
    let mut first = rec("y", json!({"w": [1.0, 3.5e38]}));
    first.table = "fresh".into();
    assert_eq!(engine.put(None, None, vec![first], None).unwrap_err().code, Code::VectorNotFinite);
    assert_eq!(engine.metrics(None, None).unwrap().latest_epoch, epoch, "nothing was written");
    assert!(engine.schemas(None, None).unwrap().iter().all(|s| s.name != "fresh"));

    let mut q = query("docs");
    q.vector = Some(vec![1e39, 0.0, 0.0]);
    assert_eq!(engine.query(None, None, &q).unwrap_err().code, Code::VectorNotFinite);
}

/// Finite values can still overflow a dot product; the graph must not panic
/// and other rows (other tenants' too) must still be indexed.
#[test]
fn overflowing_dot_products_do_not_stop_the_indexer() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let mut records: Vec<RecordInput> = (0..300)
        .map(|i| {
            let x = (i as f64 * 0.37).sin();
            let mut r = rec(&format!("n{i}"), json!({"v": [x, 1.0 - x, 0.25]}));
            r.tenant_id = if i % 2 == 0 { "acme".into() } else { "other".into() };
            r
        })
        .collect();
    records.push(rec("huge", json!({"v": [3e38, -3e38, 3e38]})));
    records.push(rec("huge2", json!({"v": [-3e38, 3e38, -3e38]})));
    engine.put(None, None, records, None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(60)));
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.indexer_state, "running");
    let mut q = query("docs");
    q.vector = Some(vec![0.3, 0.7, 0.25]);
    q.top_k = Some(5);
    let resp = engine.query(None, None, &q).unwrap();
    assert_eq!(resp.results.len(), 5);
    // a later write is indexed too: the indexer is alive
    engine.put(None, None, vec![rec("late", json!({"v": [0.3, 0.7, 0.25]}))], None).unwrap();
    assert!(engine.wait_indexed(Duration::from_secs(60)));
}

/// Rows written before writes checked finiteness have no vector: counted,
/// skipped, and the rest of the table is searchable.
#[test]
fn non_finite_vectors_from_an_older_log_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        engine.put(None, None, vec![rec("good", json!({"v": [1.0, 0.0]}))], None).unwrap();
    }
    let path = main_wal(dir.path());
    let frames = wal::inspect(&path).unwrap().frames;
    let commit = json!({"epoch": 2, "at_ms": 2, "rows": [
        {"table": "docs", "tenant_id": "acme", "id": "bad", "version_id": 1, "fields": {"v": [1e39, 0.0]}}
    ]});
    let mut frame = Vec::new();
    wal::encode_frame(frames + 1, frames, &serde_json::to_vec(&commit).unwrap(), &mut frame);
    OpenOptions::new().append(true).open(&path).unwrap().write_all(&frame).unwrap();

    let engine = open(dir.path());
    assert!(engine.get(None, None, &key("bad"), None).unwrap().is_some(), "the record itself is kept");
    assert!(engine.wait_indexed(Duration::from_secs(30)));
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.failed_feature_count, 1);
    assert_eq!(m.indexer_state, "running");
    let mut q = query("docs");
    q.vector = Some(vec![1.0, 0.0]);
    let resp = engine.query(None, None, &q).unwrap();
    assert_eq!(resp.results.iter().map(|r| r.record_id.as_str()).collect::<Vec<_>>(), vec!["good"]);
}

fn receipt(key: &str) -> ReceiptDraft {
    serde_json::from_value(json!({"key": key, "body_hash": "h", "status": 200, "body": {"epoch": 0}})).unwrap()
}

/// Regression: expired receipts stayed in memory until a restart.
#[test]
fn expired_receipts_leave_memory_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.branch.receipt_retention_ms = 200;
    let engine = Engine::open(config).unwrap();
    engine.put(None, None, vec![rec("a", json!({"n": 1}))], Some(receipt("POST /v1/records/put\nk1"))).unwrap();
    assert_eq!(engine.metrics(None, None).unwrap().receipt_count, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.metrics(None, None).unwrap().receipt_count > 0 {
        assert!(Instant::now() < deadline, "the expired receipt is still in memory");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(engine.receipt(None, None, "POST /v1/records/put\nk1").unwrap().is_none());
}

#[test]
fn a_text_query_has_a_term_cap() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"title": "hello world"}))], None).unwrap();
    let mut q = query("docs");
    q.text = Some((0..2000).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "));
    assert_eq!(engine.query(None, None, &q).unwrap_err().code, Code::TooManyTerms);
    // repeating one word is one term
    q.text = Some("hello ".repeat(5000));
    assert_eq!(engine.query(None, None, &q).unwrap().results.len(), 1);
}

/// Regression: the catalog was changed in memory before it was written, so a
/// failed write left a snapshot the disk does not know.
#[test]
fn a_failed_catalog_write_changes_nothing_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
    // make the atomic rewrite fail: its temporary path is a directory
    std::fs::create_dir(dir.path().join("catalog.json.tmp")).unwrap();
    assert!(engine.snapshot(None, None, "snap").is_err());
    assert!(engine.snapshots().is_empty(), "the failed snapshot is not in the catalog");
    assert!(engine.set_branch_state(None, None, true).is_err());
    assert_eq!(engine.branches("x")[0].state, "active");
    std::fs::remove_dir(dir.path().join("catalog.json.tmp")).unwrap();
    engine.snapshot(None, None, "snap").unwrap();
    assert_eq!(engine.snapshots().len(), 1);
}

#[cfg(unix)]
#[test]
fn data_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let data = parent.path().join("data");
    let engine = open(&data);
    engine.put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
    engine.snapshot(None, None, "s1").unwrap();
    engine.restore("s1", "b1").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for file in ["secret", "catalog.json", "LOCK", "snapshots/s1/snapshot.json"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    for d in ["", "db", "snapshots", "db/default", "db/default/main", "snapshots/s1", "db/default/b1"] {
        assert_eq!(mode(&data.join(d)), 0o700, "{d}");
    }
    // every log, record, vector and checkpoint file of the branches and the
    // snapshot, whatever their generation
    let mut seen = 0;
    for d in ["db/default/main", "snapshots/s1", "db/default/b1"] {
        for entry in std::fs::read_dir(data.join(d)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                seen += 1;
            }
        }
    }
    assert!(seen >= 6, "{seen} files");
}

#[test]
fn a_type_conflict_names_the_column_and_its_type_only() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"price": 10, "secret_note": "tenant acme only"}))], None).unwrap();
    let mut other = rec("b", json!({"price": "ten"}));
    other.tenant_id = "globex".into();
    let err = engine.put(None, None, vec![other], None).unwrap_err();
    assert_eq!(err.code, Code::SchemaTypeMismatch);
    assert!(err.message.contains("\"price\"") && err.message.contains("number"), "{}", err.message);
    assert!(!err.message.contains("acme") && !err.message.contains("10"), "{}", err.message);
}

fn request_key(key: &str, hash: &str) -> braid_engine::engine::RequestKey {
    braid_engine::engine::RequestKey { key: key.into(), body_hash: hash.into() }
}

/// Issue 14 item 2: a keyed snapshot or restore writes its key in the same
/// catalog rewrite as what it creates, so when the process dies before the
/// service stores its receipt, the retry answers the first result instead of
/// 409 snapshot_exists / branch_exists (or running twice).
#[test]
fn keyed_snapshot_and_restore_survive_a_crash_before_the_receipt() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        engine.put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
        let first = engine.snapshot_keyed(None, None, "s1", Some(&request_key("snap-key", "h1"))).unwrap();
        assert!(!first.replayed);
        let restored =
            engine.restore_keyed("s1", "b1", Some(&key("a")), Some(&request_key("restore-key", "h2"))).unwrap();
        assert!(!restored.replayed);
        assert_eq!(restored.verified.as_ref().unwrap().as_ref().unwrap().fields["n"], 1);
        // the process dies here, before any receipt of the service
    }
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"n": 2}))], None).unwrap();
    let again = engine.snapshot_keyed(None, None, "s1", Some(&request_key("snap-key", "h1"))).unwrap();
    assert!(again.replayed);
    assert_eq!(engine.snapshots().len(), 1, "the snapshot was not taken twice");
    let restored = engine.restore_keyed("s1", "b1", Some(&key("a")), Some(&request_key("restore-key", "h2"))).unwrap();
    assert!(restored.replayed);
    assert_eq!(engine.branches("x").iter().filter(|b| b.branch_id == "b1").count(), 1);
    // the same key with another body is refused; another key is a new request
    let reused = engine.snapshot_keyed(None, None, "s2", Some(&request_key("snap-key", "other"))).unwrap_err();
    assert_eq!(reused.code, Code::IdempotencyKeyReused);
    let clash = engine.snapshot_keyed(None, None, "s1", Some(&request_key("new-key", "h3"))).unwrap_err();
    assert_eq!(clash.code, Code::SnapshotExists);
}

/// Issue 14 item 4: an invalid verify_record used to be noticed after the
/// branch existed.
#[test]
fn a_restore_with_an_invalid_verify_record_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![rec("a", json!({"n": 1}))], None).unwrap();
    engine.snapshot(None, None, "s1").unwrap();
    let bad = RecordKey { table: "no-such table!".into(), tenant_id: "acme".into(), id: "a".into() };
    let err = engine.restore_keyed("s1", "b1", Some(&bad), None).unwrap_err();
    assert_eq!(err.code, Code::InvalidName);
    assert!(engine.branches("x").iter().all(|b| b.branch_id != "b1"));
    assert!(!dir.path().join("db/default/b1").exists());
    engine.restore_keyed("s1", "b1", Some(&key("a")), None).unwrap();
}

/// Found by a black-box test: the error of a restore from a damaged
/// snapshot named the new branch's directory, which the failed restore had
/// removed, instead of the snapshot.
#[test]
fn a_damaged_snapshot_is_named_in_its_restore_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let records = (0..200).map(|i| rec(&format!("r{i}"), json!({"title": format!("record {i}"), "n": i}))).collect();
    engine.put(None, None, records, None).unwrap();
    engine.snapshot(None, None, "s1").unwrap();
    let snapshot = dir.path().join("snapshots").join("s1");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&snapshot).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            continue;
        }
        // snapshot files are hard links of the branch's: damage a copy
        let mut bytes = std::fs::read(&path).unwrap();
        if bytes.len() < 64 {
            continue;
        }
        let at = bytes.len() / 2;
        for b in &mut bytes[at - 16..at + 16] {
            *b ^= 0x5a;
        }
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, bytes).unwrap();
        damaged += 1;
    }
    assert!(damaged > 0);
    let err = engine.restore("s1", "b1").unwrap_err();
    assert!(err.message.starts_with("snapshot \"s1\" cannot be restored: "), "{}", err.message);
    let branch = dir.path().join("db").join("default").join("b1");
    assert!(!err.message.contains(&*branch.to_string_lossy()), "{}", err.message);
    assert!(!branch.exists());
    // the branch it came from still reads
    assert!(engine.get(None, None, &key("r7"), None).unwrap().is_some());
}

/// Found by a black-box test: a log whose header was damaged made the whole
/// doctor report fail, naming no other log; it is now one of the report's
/// problems, and the report goes on.
#[test]
fn doctor_reports_a_log_it_cannot_read_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    write_five(dir.path());
    let engine = open(dir.path());
    engine.snapshot(None, None, "s1").unwrap();
    drop(engine);
    let path = main_wal(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let report = braid_engine::doctor::doctor(dir.path(), false).unwrap();
    assert!(!report.healthy);
    assert!(report.problems.iter().any(|p| p.starts_with("branch default/main: ")), "{:?}", report.problems);
    let salvaged = braid_engine::doctor::doctor(dir.path(), true).unwrap();
    assert!(!salvaged.healthy);
}

/// Found by a black-box review: with the live log segment deleted (or
/// replaced) by hand, the engine went on acknowledging writes into a file no
/// path named, and the next start could not find them. The write after it
/// is refused as a storage failure, and so is every write after that, while
/// reads go on.
#[test]
fn a_log_segment_deleted_or_replaced_under_a_running_engine_stops_writes() {
    for replace in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        engine.put(None, None, vec![rec("before", json!({"title": "kept"}))], None).unwrap();
        let wal_path = main_wal(dir.path());
        if replace {
            let copy = wal_path.with_extension("copy");
            std::fs::copy(&wal_path, &copy).unwrap();
            std::fs::rename(&copy, &wal_path).unwrap();
        } else {
            std::fs::remove_file(&wal_path).unwrap();
        }
        let err = engine.put(None, None, vec![rec("after", json!({"title": "lost"}))], None).unwrap_err();
        assert_eq!(err.code, Code::StorageFailure, "{}", err.message);
        let says = if replace { "was replaced by another file" } else { "is no longer there" };
        assert!(err.message.contains(says), "{}", err.message);
        assert_eq!(engine.put(None, None, vec![rec("later", json!({}))], None).unwrap_err().code, Code::StorageFailure);
        assert!(engine.get(None, None, &key("before"), None).unwrap().is_some(), "reads go on");
        assert!(engine.get(None, None, &key("after"), None).unwrap().is_none(), "the refused write is not applied");
    }
}
