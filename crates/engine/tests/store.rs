//! Model-based test of the store against an in-memory map, across restarts,
//! plus recovery from a torn WAL tail.

use std::collections::BTreeMap;

use braid_engine::storage::WriteResult;
use braid_engine::{Engine, EngineConfig, Field, RecordInput, RecordKey};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

mod common;

type Key = (String, String, String);
/// A committed version: its epoch and its fields (None for a delete).
type Version = (u64, Option<Map<String, Value>>);

/// Every committed version of every key: (epoch, fields or None for a delete).
#[derive(Default)]
struct Model {
    versions: BTreeMap<Key, Vec<Version>>,
    epoch: u64,
}

impl Model {
    fn at(&self, key: &Key, epoch: u64) -> Option<(u32, &Map<String, Value>)> {
        let versions = self.versions.get(key)?;
        let idx = versions.iter().rposition(|(e, _)| *e <= epoch)?;
        versions[idx].1.as_ref().map(|f| (idx as u32 + 1, f))
    }
}

fn open(dir: &std::path::Path) -> Engine {
    Engine::open(EngineConfig::new(dir)).expect("engine opens")
}

fn committed_epoch(r: WriteResult) -> Option<u64> {
    match r {
        WriteResult::Committed(o) if o.changed => Some(o.epoch),
        _ => None,
    }
}

/// A filter-only query at `epoch` lists exactly the model's visible
/// records of each table and tenant, at their versions: at a random past
/// epoch and at recent ones (a read a moment back takes the rows written
/// since from the live set, query/rank.rs `visible_at`).
fn check_lists(engine: &Engine, model: &Model, rng: &mut StdRng) {
    let recent = model.epoch.saturating_sub(rng.gen_range(1..4));
    for epoch in [rng.gen_range(1..=model.epoch.max(1)), recent.max(1)] {
        for table in ["a", "b"] {
            for tenant in ["t0", "t1", "t2"] {
                let q = braid_engine::query::HybridQuery {
                    table: Some(table.into()),
                    tenant_id: Some(tenant.into()),
                    temporal_as_of: Some(epoch as i64),
                    top_k: Some(1000),
                    return_fields: Some(vec![]),
                    ..Default::default()
                };
                let resp = engine.query(None, None, &q).unwrap();
                let mut got: Vec<(String, u32)> =
                    resp.results.iter().map(|r| (r.record_id.clone(), r.version_id)).collect();
                got.sort();
                let want: Vec<(String, u32)> = model
                    .versions
                    .keys()
                    .filter(|k| k.0 == table && k.1 == tenant)
                    .filter_map(|k| model.at(k, epoch).map(|(version, _)| (k.2.clone(), version)))
                    .collect();
                assert_eq!(got, want, "{table}/{tenant} at epoch {epoch} of {}", model.epoch);
            }
        }
    }
}

fn check(engine: &Engine, model: &Model, rng: &mut StdRng) {
    if model.epoch > 0 {
        check_lists(engine, model, rng);
    }
    for (key, _) in model.versions.iter() {
        let rk = RecordKey { table: key.0.clone(), tenant_id: key.1.clone(), id: key.2.clone() };
        // latest and a random past epoch
        for epoch in [model.epoch, rng.gen_range(0..=model.epoch)] {
            let got = engine.get(None, None, &rk, Some(epoch)).unwrap();
            // an answer given without waiting is get's
            if let Some(now) = engine.get_now(None, None, &rk, Some(epoch)) {
                assert_eq!(now.unwrap(), got, "{key:?} at {epoch}: get_now");
            }
            match model.at(key, epoch) {
                None => assert!(got.is_none(), "{key:?} at {epoch}: expected nothing, got {got:?}"),
                Some((version, fields)) => {
                    let got = got.unwrap_or_else(|| panic!("{key:?} at {epoch}: missing"));
                    assert_eq!(got.version_id, version, "{key:?} at {epoch}");
                    assert_eq!(&got.fields, fields, "{key:?} at {epoch}");
                }
            }
        }
    }
}

#[test]
fn store_matches_model_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Model::default();
    let mut engine = open(dir.path());
    for step in 0..600 {
        let table = ["a", "b"][rng.gen_range(0..2)].to_string();
        let tenant = format!("t{}", rng.gen_range(0..3));
        if rng.gen_bool(0.15) {
            let id = format!("k{}", rng.gen_range(0..40));
            let key = (table.clone(), tenant.clone(), id.clone());
            let exists = model.at(&key, model.epoch).is_some();
            let r = engine.delete(None, None, RecordKey { table, tenant_id: tenant, id }, None).unwrap();
            match committed_epoch(r) {
                Some(epoch) => {
                    assert!(exists);
                    assert_eq!(epoch, model.epoch + 1);
                    model.epoch = epoch;
                    model.versions.get_mut(&key).unwrap().push((epoch, None));
                }
                None => assert!(!exists, "delete of a live record must commit"),
            }
        } else {
            let n = rng.gen_range(1..5);
            let records: Vec<RecordInput> = (0..n)
                .map(|_| {
                    let mut fields = Map::new();
                    fields.insert("n".into(), json!(rng.gen_range(0..100)));
                    fields.insert("s".into(), json!(format!("word{}", rng.gen_range(0..10))));
                    RecordInput {
                        table: table.clone(),
                        tenant_id: tenant.clone(),
                        id: format!("k{}", rng.gen_range(0..40)),
                        fields: fields.into(),
                    }
                })
                .collect();
            // now and then a record that must fail the whole batch
            let poison = rng.gen_bool(0.1);
            let mut sent = records.clone();
            if poison {
                let mut bad = records[0].clone();
                bad.fields.insert("n".into(), Field::Value(json!("not a number")));
                sent.push(bad);
            }
            let result = engine.put(None, None, sent, None);
            if poison {
                let err = result.unwrap_err();
                assert_eq!(err.index, Some(records.len()));
                continue;
            }
            let epoch = committed_epoch(result.unwrap()).unwrap();
            assert_eq!(epoch, model.epoch + 1, "one epoch per write request");
            model.epoch = epoch;
            for r in records {
                model.versions.entry((r.table, r.tenant_id, r.id)).or_default().push((epoch, Some(r.fields.into())));
            }
        }
        if step % 150 == 149 {
            check(&engine, &model, &mut rng);
            drop(engine);
            engine = open(dir.path());
            let metrics = engine.metrics(None, None).unwrap();
            assert_eq!(metrics.latest_epoch, model.epoch);
            check(&engine, &model, &mut rng);
        }
    }
}

#[test]
fn torn_tail_is_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        let r = RecordInput { table: "t".into(), tenant_id: "x".into(), id: "1".into(), fields: Map::new().into() };
        engine.put(None, None, vec![r], None).unwrap();
    }
    let wal = common::newest_wal(&dir.path().join("db/default/main"));
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3]);
    std::fs::write(&wal, &bytes).unwrap();
    let engine = open(dir.path());
    let m = engine.metrics(None, None).unwrap();
    assert_eq!(m.latest_epoch, 1);
    assert_eq!(m.recovered_truncated_bytes, 7);
    assert_eq!(m.recovery_state, "recovered");
    // and it keeps accepting writes after the cut
    let r = RecordInput { table: "t".into(), tenant_id: "x".into(), id: "2".into(), fields: Map::new().into() };
    assert!(matches!(engine.put(None, None, vec![r], None).unwrap(), WriteResult::Committed(_)));
}

#[test]
fn concurrent_writers_share_fsyncs_and_each_gets_its_own_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(open(dir.path()));
    let handles: Vec<_> = (0..16)
        .map(|w| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                (0..25)
                    .map(|i| {
                        let r = RecordInput {
                            table: "c".into(),
                            tenant_id: "t".into(),
                            id: format!("{w}-{i}"),
                            fields: Map::new().into(),
                        };
                        match engine.put(None, None, vec![r], None).unwrap() {
                            WriteResult::Committed(o) => (o.epoch, o.timing.group_size),
                            WriteResult::Replayed(_) => unreachable!(),
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<(u64, f64)> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let mut epochs: Vec<u64> = results.iter().map(|r| r.0).collect();
    epochs.sort();
    assert_eq!(epochs, (1..=400).collect::<Vec<_>>(), "every write request gets its own epoch");
    assert!(results.iter().any(|r| r.1 > 1.0), "some writers shared an fsync");
}

#[test]
fn receipts_commit_with_the_write_and_replay() {
    use braid_engine::storage::ReceiptDraft;
    let dir = tempfile::tempdir().unwrap();
    let draft = |hash: &str| ReceiptDraft {
        key: "POST /v1/records/put\nk1".into(),
        body_hash: hash.into(),
        status: 200,
        body: json!({"epoch": null}),
        digest: None,
    };
    let rec =
        || vec![RecordInput { table: "r".into(), tenant_id: "t".into(), id: "1".into(), fields: Map::new().into() }];
    {
        let engine = open(dir.path());
        let first = engine.put(None, None, rec(), Some(draft("h1"))).unwrap();
        assert!(matches!(first, WriteResult::Committed(ref o) if o.epoch == 1));
        let again = engine.put(None, None, rec(), Some(draft("h1"))).unwrap();
        match again {
            WriteResult::Replayed(r) => assert_eq!(r.body_value(), json!({"epoch": 1})),
            other => panic!("expected a replay, got {other:?}"),
        }
        let err = engine.put(None, None, rec(), Some(draft("h2"))).unwrap_err();
        assert_eq!(err.code.as_str(), "idempotency_key_reused");
        assert_eq!(engine.metrics(None, None).unwrap().latest_epoch, 1, "replays write nothing");
    }
    let engine = open(dir.path());
    assert!(matches!(engine.put(None, None, rec(), Some(draft("h1"))).unwrap(), WriteResult::Replayed(_)));
}

/// A keyed read's receipt holds its answer as text, and once the branch's
/// receipts hold `receipt_memory_bytes` the draft's digest is stored
/// instead; write receipts are stored whole whatever the budget, and the
/// memory gauge counts what the receipts hold (it assumed 256 bytes each,
/// and 200 receipts of 612 KB answers had held 600 MB; found by a
/// black-box review).
#[test]
fn read_receipts_past_their_memory_budget_store_their_digest() {
    use braid_engine::storage::ReceiptDraft;
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.branch.receipt_memory_bytes = 64 * 1024;
    let engine = Engine::open(config).unwrap();
    let answer = json!({"results": (0..100).map(|i| json!({"record_id": format!("r{i}"), "fields": {"body": "x".repeat(200)}})).collect::<Vec<_>>()});
    let text_bytes = serde_json::to_string(&answer).unwrap().len() as u64;
    let digest = json!({"$braid_response_digest": true, "sha256": "ab", "bytes": text_bytes});
    let read = |i: usize| ReceiptDraft {
        key: format!("POST /v1/query\nk{i}"),
        body_hash: "h".into(),
        status: 200,
        body: answer.clone(),
        digest: Some(Box::new(digest.clone())),
    };
    let stored = |i: usize| engine.receipt(None, None, &format!("POST /v1/query\nk{i}")).unwrap().unwrap().body_value();
    for i in 0..6 {
        engine.record_receipt(None, None, read(i)).unwrap();
    }
    let whole = (0..6).filter(|&i| stored(i) == answer).count();
    let per_receipt = text_bytes + "POST /v1/query\nk0".len() as u64 + 1;
    assert_eq!(whole as u64, (64 * 1024) / per_receipt, "answers stored whole until the budget");
    for i in whole..6 {
        assert_eq!(stored(i), digest, "past the budget, the digest");
    }
    let memory = engine.metrics(None, None).unwrap().memory.receipts;
    assert!(
        memory >= whole as u64 * text_bytes && memory < 64 * 1024 + 8 * 1024,
        "the gauge counts the bodies: {memory}"
    );
    // a write's receipt is whole past the budget
    let put = ReceiptDraft {
        key: "POST /v1/records/put\nw".into(),
        body_hash: "h".into(),
        status: 200,
        body: json!({"epoch": null}),
        digest: None,
    };
    let rec = vec![RecordInput { table: "r".into(), tenant_id: "t".into(), id: "1".into(), fields: Map::new().into() }];
    engine.put(None, None, rec, Some(put)).unwrap();
    assert_eq!(
        engine.receipt(None, None, "POST /v1/records/put\nw").unwrap().unwrap().body_value(),
        json!({"epoch": 1})
    );
    // and so they are after a restart
    drop(engine);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let stored = |i: usize| engine.receipt(None, None, &format!("POST /v1/query\nk{i}")).unwrap().unwrap().body_value();
    assert_eq!((0..6).filter(|&i| stored(i) == answer).count(), whole);
}

/// `Engine::submit` answers through its reply from the committer thread,
/// without the caller waiting: the writes of many callers that did not
/// wait share fsyncs, each gets its own epoch, and a write to a missing or
/// closed branch is answered at once.
#[test]
fn submitted_writes_are_answered_through_their_reply() {
    use braid_engine::storage::{Reply, WriteOp};
    use std::sync::mpsc;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (tx, rx) = mpsc::channel();
    for i in 0..200 {
        let tx = tx.clone();
        let records = vec![common::rec(&format!("s{i}"), json!({"n": i}))];
        let reply = Reply::new(move |outcome| tx.send(outcome).unwrap());
        engine.submit(None, None, WriteOp::Put { records, receipt: None }, reply);
    }
    let mut epochs: Vec<u64> = (0..200).map(|_| committed_epoch(rx.recv().unwrap().unwrap()).unwrap()).collect();
    epochs.sort();
    assert_eq!(epochs, (1..=200).collect::<Vec<_>>());
    assert_eq!(engine.metrics(None, None).unwrap().record_count, 200);

    let answer = |database: Option<&str>, branch: Option<&str>| {
        let (tx, rx) = mpsc::channel();
        let records = vec![common::rec("x", json!({}))];
        let reply = Reply::new(move |outcome| tx.send(outcome).unwrap());
        engine.submit(database, branch, WriteOp::Put { records, receipt: None }, reply);
        rx.try_recv().expect("answered before submit returned").unwrap_err()
    };
    assert_eq!(answer(None, Some("nope")).code.as_str(), "branch_not_found");
    engine.close();
    assert_eq!(answer(None, None).code.as_str(), "shutting_down");
}

/// A reply dropped unanswered (its write still queued when the branch went
/// away) answers `shutting_down` rather than leaving its caller waiting.
#[test]
fn a_dropped_reply_answers_shutting_down() {
    use braid_engine::storage::Reply;
    let (tx, rx) = std::sync::mpsc::channel();
    drop(Reply::new(move |outcome| tx.send(outcome).unwrap()));
    assert_eq!(rx.recv().unwrap().unwrap_err().code.as_str(), "shutting_down");
    let (tx, rx) = std::sync::mpsc::channel();
    Reply::new(move |outcome| tx.send(outcome).unwrap())
        .send(Err(braid_engine::Error::new(braid_engine::Code::InvalidRecord, "x")));
    assert_eq!(rx.recv().unwrap().unwrap_err().code.as_str(), "invalid_record");
    assert!(rx.recv().is_err(), "answered once");
}

fn record(id: &str, fields: Value) -> RecordInput {
    let Value::Object(fields) = fields else { panic!("fields are an object") };
    RecordInput { table: "docs".into(), tenant_id: "acme".into(), id: id.into(), fields: fields.into() }
}

fn rkey(table: &str, id: &str) -> RecordKey {
    RecordKey { table: table.into(), tenant_id: "acme".into(), id: id.into() }
}

/// `get_now` answers as `get` does when it can answer at once, and leaves
/// to `get` what would wait: a record past its size cap, a branch whose
/// state another thread holds.
#[test]
fn get_now_answers_as_get_or_leaves_the_read_to_get() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let large = "x".repeat(braid_engine::storage::records::NOW_MAX_BYTES + 1);
    let records = vec![
        record("small", json!({"n": 1, "s": "one"})),
        record("large", json!({"s": large})),
        record("gone", json!({"n": 3})),
    ];
    engine.put(None, None, records, None).unwrap();
    engine.delete(None, None, rkey("docs", "gone"), None).unwrap();
    let now = |table: &str, id: &str, epoch: Option<u64>| engine.get_now(None, None, &rkey(table, id), epoch);
    let get = |table: &str, id: &str, epoch: Option<u64>| engine.get(None, None, &rkey(table, id), epoch);

    // answered at once: the record (its bytes were just written, so they
    // are in the page cache), at an earlier epoch too, a deleted and a missing one
    let small = now("docs", "small", None).expect("a small cached record is answered at once").unwrap();
    assert_eq!(small, get("docs", "small", None).unwrap());
    assert_eq!(small.unwrap().fields, json!({"n": 1, "s": "one"}).as_object().unwrap().clone());
    assert!(now("docs", "gone", Some(1)).unwrap().unwrap().is_some());
    assert_eq!(now("docs", "gone", None).unwrap().unwrap(), None);
    assert_eq!(now("docs", "never", None).unwrap().unwrap(), None);

    // refusals are get's
    for (table, epoch) in [("", None), ("docs", Some(99))] {
        let a = now(table, "small", epoch).expect("a refusal is answered at once").unwrap_err();
        let b = get(table, "small", epoch).unwrap_err();
        assert_eq!((a.code, a.message), (b.code, b.message));
    }
    let missing = engine.get_now(None, Some("nope"), &rkey("docs", "small"), None).unwrap().unwrap_err();
    assert_eq!(missing.code, engine.get(None, Some("nope"), &rkey("docs", "small"), None).unwrap_err().code);

    // left to get: a record over the cap, and any read while a writer holds the state
    assert!(now("docs", "large", None).is_none());
    assert_eq!(get("docs", "large", None).unwrap().unwrap().fields["s"].as_str().unwrap().len(), large.len());
    let branch = engine.branch(None, None).unwrap();
    let held = branch.state.write();
    assert!(now("docs", "small", None).is_none());
    drop(held);
    assert!(now("docs", "small", None).is_some());
}

/// A closed engine has released its data directory, which another engine
/// may then write: it answers nothing from its branches, rather than the
/// versions it held (found by a black-box test).
#[test]
fn a_closed_engine_answers_nothing_from_its_branches() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.put(None, None, vec![record("a", json!({"s": "one"}))], None).unwrap();
    engine.close();
    let other = open(dir.path());
    other.put(None, None, vec![record("a", json!({"s": "two"}))], None).unwrap();
    let get = engine.get(None, None, &rkey("docs", "a"), None).unwrap_err();
    assert_eq!(get.code, braid_engine::Code::ShuttingDown, "{}", get.message);
    let now = engine.get_now(None, None, &rkey("docs", "a"), None).expect("a refusal is answered at once").unwrap_err();
    assert_eq!((now.code, now.message), (get.code, get.message));
    let put = engine.put(None, None, vec![record("b", json!({"s": "x"}))], None).unwrap_err();
    assert_eq!(put.code, braid_engine::Code::ShuttingDown);
    assert_eq!(other.get(None, None, &rkey("docs", "a"), None).unwrap().unwrap().fields["s"], "two");
}
