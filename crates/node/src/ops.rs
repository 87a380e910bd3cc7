//! JSON in, JSON out: converts a call's payload into an engine call and its
//! result (or error) into the envelope the TypeScript layer reads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use braid_engine::engine::RequestKey;
use braid_engine::query::HybridQuery;
use braid_engine::storage::{ReceiptDraft, WriteResult};
use braid_engine::{Code, Engine, EngineConfig, Error, RecordInput, RecordKey};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigJson {
    data_dir: String,
    #[serde(default)]
    max_vector_dim: Option<u32>,
    #[serde(default)]
    max_batch: Option<usize>,
    #[serde(default)]
    receipt_retention_ms: Option<u64>,
    #[serde(default)]
    history_epochs: Option<u64>,
    #[serde(default)]
    text_commit_interval_ms: Option<u64>,
    #[serde(default)]
    checkpoint_bytes: Option<u64>,
    #[serde(default)]
    checkpoint_interval_ms: Option<u64>,
}

pub fn parse_config(json: &str) -> Result<EngineConfig, serde_json::Error> {
    let c: ConfigJson = serde_json::from_str(json)?;
    let mut config = EngineConfig::new(c.data_dir);
    let b = &mut config.branch;
    if let Some(v) = c.max_vector_dim {
        b.max_vector_dim = v;
    }
    if let Some(v) = c.max_batch {
        b.max_batch = v;
    }
    if let Some(v) = c.receipt_retention_ms {
        b.receipt_retention_ms = v;
    }
    b.history_epochs = c.history_epochs;
    if let Some(v) = c.text_commit_interval_ms {
        b.text_commit_interval = Duration::from_millis(v);
    }
    if let Some(v) = c.checkpoint_bytes {
        b.checkpoint_wal_bytes = v;
    }
    if let Some(v) = c.checkpoint_interval_ms {
        b.checkpoint_interval = Duration::from_millis(v);
    }
    Ok(config)
}

/// The branch a payload addresses.
#[derive(Deserialize, Default)]
struct Route {
    #[serde(default)]
    database_id: Option<String>,
    #[serde(default)]
    branch_id: Option<String>,
}

#[derive(Deserialize)]
struct Put {
    #[serde(flatten)]
    route: Route,
    records: Vec<RecordInput>,
    #[serde(default)]
    receipt: Option<ReceiptDraft>,
}

#[derive(Deserialize)]
struct Delete {
    #[serde(flatten)]
    route: Route,
    #[serde(flatten)]
    key: RecordKey,
    #[serde(default)]
    receipt: Option<ReceiptDraft>,
}

#[derive(Deserialize)]
struct Get {
    #[serde(flatten)]
    route: Route,
    table: String,
    tenant_id: String,
    id: String,
    #[serde(default)]
    epoch: Option<u64>,
}

#[derive(Deserialize)]
struct Query {
    #[serde(flatten)]
    route: Route,
    query: Value,
}

#[derive(Deserialize)]
struct Declare {
    #[serde(flatten)]
    route: Route,
    table: String,
    columns: Value,
}

#[derive(Deserialize)]
struct ReceiptOp {
    #[serde(flatten)]
    route: Route,
    receipt: ReceiptDraft,
}

#[derive(Deserialize)]
struct ReceiptLookup {
    #[serde(flatten)]
    route: Route,
    key: String,
}

#[derive(Deserialize)]
struct Snapshot {
    #[serde(flatten)]
    route: Route,
    target: String,
    #[serde(default)]
    request_key: Option<RequestKey>,
}

#[derive(Deserialize)]
struct Restore {
    source: String,
    target: String,
    #[serde(default)]
    verify: Option<RecordKey>,
    #[serde(default)]
    request_key: Option<RequestKey>,
}

#[derive(Deserialize)]
struct BranchState {
    #[serde(flatten)]
    route: Route,
    archived: bool,
}

#[derive(Deserialize)]
struct Branches {
    endpoint: String,
}

/// Test hook: configures a storage fail point (storage/faults.rs).
#[derive(Deserialize)]
struct Fault {
    point: String,
    actions: String,
}

#[derive(Deserialize)]
struct WaitIndexed {
    timeout_ms: u64,
}

fn parse<T: for<'de> Deserialize<'de>>(payload: &str) -> Result<T, Error> {
    serde_json::from_str(payload).map_err(|e| {
        // serde_json stops at 128 levels; say so in the words the service
        // uses when its own encoder gives up first (src/json.ts)
        let message = match e.to_string() {
            m if m.starts_with("recursion limit exceeded") => {
                format!("the request's values nest too deeply (more than 128 levels): {m}")
            }
            m => m,
        };
        Error::new(Code::InvalidRecord, message)
    })
}

fn write_result(result: WriteResult) -> Value {
    match result {
        WriteResult::Committed(outcome) => json!({ "committed": outcome }),
        WriteResult::Replayed(receipt) => json!({ "replayed": { "status": receipt.status, "body": receipt.body } }),
    }
}

fn run(engine: &Engine, op: &str, payload: &str) -> Result<Value, Error> {
    Ok(match op {
        "put" => {
            let p: Put = parse(payload)?;
            write_result(engine.put(
                p.route.database_id.as_deref(),
                p.route.branch_id.as_deref(),
                p.records,
                p.receipt,
            )?)
        }
        "delete" => {
            let p: Delete = parse(payload)?;
            write_result(engine.delete(
                p.route.database_id.as_deref(),
                p.route.branch_id.as_deref(),
                p.key,
                p.receipt,
            )?)
        }
        "get" => {
            let p: Get = parse(payload)?;
            let key = RecordKey { table: p.table, tenant_id: p.tenant_id, id: p.id };
            let record = engine.get(p.route.database_id.as_deref(), p.route.branch_id.as_deref(), &key, p.epoch)?;
            json!({ "record": record })
        }
        "query" => {
            let p: Query = parse(payload)?;
            let q: HybridQuery =
                serde_json::from_value(p.query).map_err(|e| Error::new(Code::InvalidQuery, e.to_string()))?;
            serde_json::to_value(engine.query(p.route.database_id.as_deref(), p.route.branch_id.as_deref(), &q)?)
                .map_err(Error::internal)?
        }
        "declare" => {
            let p: Declare = parse(payload)?;
            let columns = braid_engine::engine::parse_columns(&p.columns)?;
            write_result(engine.declare_table(
                p.route.database_id.as_deref(),
                p.route.branch_id.as_deref(),
                &p.table,
                columns,
            )?)
        }
        "schemas" => {
            let p: Route = parse(payload)?;
            json!({ "tables": engine.schemas(p.database_id.as_deref(), p.branch_id.as_deref())? })
        }
        "record_receipt" => {
            let p: ReceiptOp = parse(payload)?;
            write_result(engine.record_receipt(
                p.route.database_id.as_deref(),
                p.route.branch_id.as_deref(),
                p.receipt,
            )?)
        }
        "receipt" => {
            let p: ReceiptLookup = parse(payload)?;
            json!({ "receipt": engine.receipt(p.route.database_id.as_deref(), p.route.branch_id.as_deref(), &p.key)? })
        }
        "snapshot" => {
            let p: Snapshot = parse(payload)?;
            json!(engine.snapshot_keyed(
                p.route.database_id.as_deref(),
                p.route.branch_id.as_deref(),
                &p.target,
                p.request_key.as_ref()
            )?)
        }
        "snapshots" => json!({ "snapshots": engine.snapshots() }),
        "restore" => {
            let p: Restore = parse(payload)?;
            json!(engine.restore_keyed(&p.source, &p.target, p.verify.as_ref(), p.request_key.as_ref())?)
        }
        "set_branch_state" => {
            let p: BranchState = parse(payload)?;
            engine.set_branch_state(p.route.database_id.as_deref(), p.route.branch_id.as_deref(), p.archived)?;
            json!({})
        }
        "branches" => {
            let p: Branches = parse(payload)?;
            json!({ "branches": engine.branches(&p.endpoint) })
        }
        "metrics" => {
            let p: Route = parse(payload)?;
            json!(engine.metrics(p.database_id.as_deref(), p.branch_id.as_deref())?)
        }
        "events" => json!({ "events": engine.events() }),
        "wait_indexed" => {
            let p: WaitIndexed = parse(payload)?;
            json!({ "indexed": engine.wait_indexed(Duration::from_millis(p.timeout_ms)) })
        }
        "panic" => panic!("deliberate panic requested through the test hook"),
        "fault" => {
            let p: Fault = parse(payload)?;
            braid_engine::storage::faults::configure(&p.point, &p.actions)
                .map_err(|e| Error::new(Code::InvalidRecord, e))?;
            json!({})
        }
        other => return Err(Error::new(Code::Internal, format!("unknown operation {other:?}"))),
    })
}

/// Runs one operation and returns the JSON envelope. Never panics.
pub fn dispatch(engine: &Engine, op: &str, payload: &str) -> String {
    let result = catch_unwind(AssertUnwindSafe(|| run(engine, op, payload)))
        .unwrap_or_else(|_| Err(Error::new(Code::InternalPanic, format!("the engine panicked while running {op}"))));
    envelope(result)
}

/// `braid doctor` over a data directory that no engine here has open.
pub fn doctor(data_dir: &str, salvage: bool) -> String {
    let result = catch_unwind(AssertUnwindSafe(|| {
        braid_engine::doctor::doctor(std::path::Path::new(data_dir), salvage)
            .and_then(|report| serde_json::to_value(report).map_err(Error::internal))
    }))
    .unwrap_or_else(|_| Err(Error::new(Code::InternalPanic, "the engine panicked while running doctor")));
    envelope(result)
}

fn envelope(result: Result<Value, Error>) -> String {
    match result {
        Ok(value) => json!({ "ok": value }).to_string(),
        Err(err) => {
            json!({ "err": { "code": err.code.as_str(), "message": err.message, "index": err.index } }).to_string()
        }
    }
}
