//! The napi-rs binding: `NativeEngine`, one method per engine operation.
//!
//! Arguments and results are typed (`types.rs`, from which `napi build`
//! writes `native/index.d.ts`). Records, queries and receipts are read from
//! their JavaScript objects by `js.rs`, never printed as JSON text; vectors
//! may be `Float32Array`s. Each asynchronous method converts its arguments
//! on the JS thread, runs the engine call on the binding's worker pool
//! (`pool.rs`) and settles its promise there; a write is handed to its
//! branch's committer instead, whose reply settles the promise once the
//! write is durable, so no thread waits out the fsync. An engine error rejects it
//! with a JavaScript `Error` carrying the stable `code`, its HTTP `status`
//! and, for a batch, the record's `index`; a panic inside the engine
//! becomes `internal_panic`. Nothing here decides anything.

mod js;
mod pool;
mod settle;
mod types;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use braid_engine::storage::{IndexingGate, Reply, WriteOp, WriteResult as EngineWrite};
use braid_engine::{Code, Engine, EngineConfig, Error as EngineError};
use napi::bindgen_prelude::*;
use napi::JsValue;
use napi_derive::napi;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// mimalloc instead of glibc's malloc: the engine allocates and frees from
/// several threads at once (group commit, indexing, rayon), where glibc's
/// per-thread arenas fragment and keep freed memory resident.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (mimalloc.h, v2): how long freed pages
/// stay committed before they are returned to the OS (10 ms by default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the OS at once: on WordNet 100k (ingest then
/// index) the peak resident size was 759 MB with the default delay and 674 MB
/// with none, at the same speed. An open is different: replaying the WAL tail
/// allocates and frees in bursts, and with no delay each burst faulted its
/// pages in again (replay of a 100,000-row tail: 700-730 ms with none, 650-660
/// ms with 100 ms). So an open runs with [`OPEN_PURGE_DELAY_MS`] and the delay
/// drops to none once it is done.
fn set_purge_delay(ms: i64) {
    // an operator's MIMALLOC_PURGE_DELAY (read by mimalloc itself) wins
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets a process-wide option; mimalloc reads it on each purge
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms as std::os::raw::c_long) };
}

const OPEN_PURGE_DELAY_MS: i64 = 100;

/// Largest request body `put_json` reads on the JS thread; larger ones are
/// read on the worker pool.
const INLINE_BODY_BYTES: usize = 64 << 10;

/// mimalloc's `mi_collect`: hands back what the calling thread's heap holds
/// freed (engine/src/memory.rs says when the engine calls it).
pub(crate) fn collect(force: bool) {
    // SAFETY: mi_collect may be called on any thread at any time
    unsafe { libmimalloc_sys::mi_collect(force) };
}

/// Opens an engine with the allocator tuned for the open (above).
fn open_engine(config: EngineConfig) -> EngineResult<Engine> {
    braid_engine::memory::set_collect(collect);
    set_purge_delay(OPEN_PURGE_DELAY_MS);
    let engine = guard("open", || Engine::open(config));
    set_purge_delay(0);
    engine
}

use types::{
    BranchRef, BranchSummary, ErrorCodeStatus, NamedBranch, OpenOptions, PutBatchOutcome, QueryResponse, RecordKey,
    RecordOutput, RequestKey, RestoreOutcome, SnapshotInfo, StoredReceipt, TableSchema, WriteResult,
};

type EngineResult<T> = std::result::Result<T, EngineError>;

/// Frees an `ArrayBuffer`'s memory now instead of when V8's collector next
/// runs, by detaching it: the buffer is empty after. The service frees the
/// request bodies it read into buffers of their own once the engine's call
/// on them has settled (src/routes/body-bytes.ts).
#[napi(ts_args_type = "buffer: ArrayBuffer")]
pub fn release_buffer(env: &Env, buffer: Unknown<'_>) -> Result<()> {
    const REFUSED: &str = "releaseBuffer takes an ArrayBuffer that can be detached";
    // SAFETY: the value is this call's argument, alive for the call
    let buffer = unsafe { ArrayBuffer::from_napi_value(env.raw(), buffer.raw()) };
    buffer.and_then(ArrayBuffer::detach).map_err(|e| Error::new(e.status, REFUSED))
}

/// The branch a `/v1/records/put` wrapper body names, read without its
/// record (`braid_engine::wire::put_names`): where a keyed put's receipt is
/// looked up. `null` for a body that names none or is not a wrapper.
#[napi]
pub fn put_body_branch(env: &Env, body: Buffer) -> Result<Option<BranchRef>> {
    let names = guard("reading a put body's branch", || Ok(braid_engine::wire::put_names(&body)));
    let names = names.map_err(|e| js_error(env, &e))?;
    Ok(names.map(|(database_id, branch_id)| BranchRef { database_id, branch_id }))
}

/// Every stable error code of the engine with its HTTP status; the service
/// builds its error table from this (src/errors.ts).
#[napi]
pub fn error_codes() -> Vec<ErrorCodeStatus> {
    Code::ALL.iter().map(|c| ErrorCodeStatus { code: c.as_str().to_string(), status: c.status().into() }).collect()
}

/// Inspects every log of a data directory (and with `salvage`, cuts corrupt
/// ones at their first damaged frame after copying them aside).
#[napi(ts_return_type = "DoctorReport")]
pub fn doctor(env: &Env, data_dir: String, salvage: bool) -> Result<Value> {
    let report = guard("doctor", || {
        braid_engine::doctor::doctor(std::path::Path::new(&data_dir), salvage)
            .and_then(|report| serde_json::to_value(report).map_err(EngineError::internal))
    });
    report.map_err(|e| js_error(env, &e))
}

#[napi]
pub struct NativeEngine {
    opening: Arc<Opening>,
    pool: pool::Pool,
    settler: settle::Settler,
    /// Writes made while the engine was opening, not yet handed to their
    /// committer: `close` waits for them, so a write made before it is
    /// finished as every other is, not refused as the branch closes.
    early_writes: Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>,
}

/// The engine behind a `NativeEngine`: open already (`open`), or being
/// opened on a thread of its own (`openInBackground`). Every call waits for
/// the open, and fails as it failed.
struct Opening {
    engine: std::sync::Mutex<Option<EngineResult<Arc<Engine>>>>,
    done: std::sync::Condvar,
}

impl Opening {
    fn new(engine: Option<EngineResult<Arc<Engine>>>) -> Arc<Opening> {
        Arc::new(Opening { engine: std::sync::Mutex::new(engine), done: std::sync::Condvar::new() })
    }

    fn finish(&self, engine: EngineResult<Arc<Engine>>) {
        *self.engine.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(engine);
        self.done.notify_all();
    }

    /// The engine, or how its open failed, once the open is over.
    fn get(&self) -> Option<EngineResult<Arc<Engine>>> {
        self.engine.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The engine once it is open (blocks until then).
    fn wait(&self) -> EngineResult<Arc<Engine>> {
        let mut engine = self.engine.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            match &*engine {
                Some(result) => return result.clone(),
                None => engine = self.done.wait(engine).unwrap_or_else(std::sync::PoisonError::into_inner),
            }
        }
    }
}

#[napi]
impl NativeEngine {
    /// Opens (or creates) the engine over a data directory.
    #[napi(factory)]
    pub fn open(env: &Env, options: OpenOptions) -> Result<NativeEngine> {
        let config = config(options).map_err(|e| js_error(env, &e))?;
        let engine = open_engine(config).map_err(|e| js_error(env, &e))?;
        NativeEngine::over(env, Opening::new(Some(Ok(Arc::new(engine)))))
    }

    /// Starts opening the engine on a thread of its own and returns at
    /// once; calls wait for the open (and fail as it failed), and `ready()`
    /// resolves when it is done. Options are checked here, before the thread
    /// starts. The server opens its data directory this way, and builds its
    /// routes meanwhile.
    #[napi(factory)]
    pub fn open_in_background(env: &Env, options: OpenOptions) -> Result<NativeEngine> {
        let config = config(options).map_err(|e| js_error(env, &e))?;
        let opening = Opening::new(None);
        let finished = opening.clone();
        std::thread::Builder::new()
            .name("braid-open".into())
            .spawn(move || finished.finish(open_engine(config).map(Arc::new)))
            .map_err(|e| js_error(env, &EngineError::internal(format!("cannot start the open thread: {e}"))))?;
        NativeEngine::over(env, opening)
    }

    /// Resolves once the engine is open; rejects as the open failed.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn ready<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        self.run(env, Ok(|_: &Engine| Ok(())))
    }

    /// Writes records atomically at one epoch; resolves once durable.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, records: RecordInput[], receipt?: ReceiptDraft | undefined | null",
        ts_return_type = "Promise<WriteResult>"
    )]
    pub fn put<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        records: Unknown<'env>,
        receipt: Option<Unknown<'env>>,
    ) -> Result<Object<'env>> {
        let write = (|| -> EngineResult<_> {
            let records = read_records(env, records)?;
            let receipt = read_receipt(env, receipt)?;
            Ok(WriteOp::Put { records, receipt })
        })();
        self.submit(env, branch, write)
    }

    /// Writes the records of a `/v1/records/put-batch` body, read from its
    /// JSON bytes on the worker pool (`braid_engine::wire::put_batch`).
    /// Resolves `null`, having written nothing, when the body needs the
    /// service's own reading: its schema check, its parser or its refusal.
    ///
    /// With `freeBody`, the body's `ArrayBuffer` is detached (its memory
    /// freed, the buffer empty after) on the JS thread as soon as the
    /// records are read from it, before they are committed; only when the
    /// body is the whole of its `ArrayBuffer`, which nothing else holds (a
    /// buffer of `Buffer.allocUnsafeSlow`, never a pooled one). A body that
    /// needs the service's reading is left as it is.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, body: Buffer, receipt?: ReceiptDraft | undefined | null, freeBody?: boolean | undefined | null",
        ts_return_type = "Promise<PutBatchOutcome | null>"
    )]
    pub fn put_batch_json<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        body: Buffer,
        receipt: Option<Unknown<'env>>,
        free_body: Option<bool>,
    ) -> Result<Object<'env>> {
        let read = |body: &[u8]| match braid_engine::wire::put_batch(body) {
            Some(b) => Read::Write(b.records, b.include_write_timing),
            None => Read::Service,
        };
        let answer =
            |result: EngineWrite, include_write_timing| PutBatchOutcome { result: result.into(), include_write_timing };
        self.put_read(env, branch, body, free_body.unwrap_or(false), receipt, "a put-batch body", read, answer)
    }

    /// Writes the record of a `/v1/records/put` body, read from its JSON
    /// bytes (`braid_engine::wire::put`): on the JS thread when the body is
    /// at most [`INLINE_BODY_BYTES`] (serde reads a record with a 256-d
    /// vector in microseconds, less than a hand-off to a worker), else on
    /// the worker pool, so a body of megabytes does not hold the thread (a
    /// 15 MB put of 800,000 fields held it 3.5 s). Resolves `null`, having
    /// written nothing, when the body needs the service's own reading.
    ///
    /// A wrapper that names its branch (`database_id`, `branch_id`) is not
    /// written at first: the promise resolves `{named}` with the names, which
    /// the service checks against the request's headers (its one branch
    /// rule), then calls again with the branch it chose and `named` as it was
    /// answered; the record is written only when the body still names it.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, body: Buffer, receipt?: ReceiptDraft | undefined | null, named?: BranchRef | undefined | null",
        ts_return_type = "Promise<WriteResult | NamedBranch | null>"
    )]
    pub fn put_json<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        body: Buffer,
        receipt: Option<Unknown<'env>>,
        named: Option<BranchRef>,
    ) -> Result<Object<'env>> {
        if body.len() > INLINE_BODY_BYTES {
            let read = move |body: &[u8]| match put_decision(braid_engine::wire::put(body), named) {
                PutDecision::Write(record) => Read::Write(vec![record], ()),
                PutDecision::Named(named) => Read::Answer(Either::B(NamedBranch { named })),
                PutDecision::Service => Read::Service,
            };
            let answer = |result, ()| Either::<WriteResult, NamedBranch>::A(WriteResult::from(result));
            return self.put_read(env, branch, body, false, receipt, "a put body", read, answer);
        }
        let decision = guard("reading a put body", || Ok(put_decision(braid_engine::wire::put(&body), named)));
        let answered = |answer: Option<NamedBranch>| -> Result<Object<'env>> {
            // SAFETY: methods run on the JS thread
            let (promise, pending) = unsafe { self.settler.promise(env.raw()) }?;
            unsafe { pending.settle_now(env.raw(), outcome::<Option<NamedBranch>>(Ok(answer))) };
            Ok(Object::from_raw(env.raw(), promise))
        };
        match decision {
            Ok(PutDecision::Write(record)) => {
                let write = read_receipt(env, receipt).map(|receipt| WriteOp::Put { records: vec![record], receipt });
                self.submit(env, branch, write)
            }
            Ok(PutDecision::Named(named)) => answered(Some(NamedBranch { named })),
            Ok(PutDecision::Service) => answered(None),
            Err(e) => self.refuse::<Option<WriteResult>>(env, e),
        }
    }

    /// Writes a tombstone version of a record.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, key: RecordKey, receipt?: ReceiptDraft | undefined | null",
        ts_return_type = "Promise<WriteResult>"
    )]
    pub fn delete<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        key: Unknown<'env>,
        receipt: Option<Unknown<'env>>,
    ) -> Result<Object<'env>> {
        let key = record_key(env, key)?;
        let write = key.and_then(|RecordKey { table, tenant_id, id }| {
            read_receipt(env, receipt).map(|receipt| WriteOp::Delete { table, tenant_id, id, receipt })
        });
        self.submit(env, branch, write)
    }

    /// The visible version of a record, at the latest epoch or at `epoch`.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, key: RecordKey, epoch?: number | undefined | null",
        ts_return_type = "Promise<RecordOutput | null>"
    )]
    pub fn get<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        key: Unknown<'env>,
        epoch: Option<f64>,
    ) -> Result<Object<'env>> {
        let key = record_key(env, key)?;
        let read = (|| -> EngineResult<_> {
            // a read's epoch is judged as a query's temporal_as_of is
            Ok((engine_key(key?), epoch.map(|v| whole_as(Code::InvalidQuery, "epoch", v)).transpose()?))
        })();
        let (key, epoch) = match read {
            Ok(read) => read,
            Err(e) => return self.refuse::<Option<RecordOutput>>(env, e),
        };
        let (db, br) = route(&branch);
        if let Some(out) = self.now(|e| e.get_now(db, br, &key, epoch)) {
            return self.settled(env, out.map(|r| r.map(RecordOutput::from)));
        }
        self.run(
            env,
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                e.get(db, br, &key, epoch).map(|r| r.map(RecordOutput::from))
            }),
        )
    }

    /// Runs a hybrid query.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, query: HybridQuery",
        ts_return_type = "Promise<QueryResponse>"
    )]
    pub fn query<'env>(&self, env: &'env Env, branch: Option<BranchRef>, query: Unknown<'env>) -> Result<Object<'env>> {
        let job = (|| -> EngineResult<_> {
            let query: braid_engine::query::HybridQuery = read(env, query, "query", Code::InvalidQuery)?;
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                e.query(db, br, &query).map(QueryResponse::from)
            })
        })();
        self.run(env, job)
    }

    /// The visible version of the record a `/v1/records/get` body names,
    /// read from its JSON bytes (`braid_engine::wire::get`) on the worker
    /// pool, answered as the route's JSON bytes (`{"record": ...}`, the
    /// record `null` when there is none). Resolves `null` when the body needs
    /// the service's own reading.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, body: Buffer",
        ts_return_type = "Promise<Buffer | null>"
    )]
    pub fn get_json<'env>(&self, env: &'env Env, branch: Option<BranchRef>, body: Buffer) -> Result<Object<'env>> {
        self.run_on_body(env, body, move |e: &Engine, body: &[u8]| -> EngineResult<Option<Buffer>> {
            let Some(key) = braid_engine::wire::get(body) else { return Ok(None) };
            let (db, br) = route(&branch);
            #[derive(serde::Serialize)]
            struct Answer {
                record: Option<braid_engine::RecordOutput>,
            }
            json_bytes(&Answer { record: e.get(db, br, &key, None)? }, "record").map(Some)
        })
    }

    /// Runs the hybrid query of a `/v1/query` body, read from its JSON bytes
    /// (`braid_engine::wire::query`) on the worker pool, and answers the
    /// response as JSON bytes: the HTTP route sends them as they are, so the
    /// query is never a JavaScript object and its answer is serialised once.
    /// Resolves `null`, having run nothing, when the body needs the service's
    /// own reading: its parser, its schema check or its refusal.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, body: Buffer",
        ts_return_type = "Promise<Buffer | null>"
    )]
    pub fn query_json<'env>(&self, env: &'env Env, branch: Option<BranchRef>, body: Buffer) -> Result<Object<'env>> {
        self.query_body(env, branch, body, false)
    }

    /// Runs the hybrid query of a `/v1/explain` body, read from its JSON
    /// bytes as [`Self::query_json`] reads one (on the worker pool: a 15 MB
    /// body parsed on the JS thread had held every other request), and
    /// answers its explain alone as JSON bytes. Resolves `null`, having run
    /// nothing, when the body needs the service's own reading.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, body: Buffer",
        ts_return_type = "Promise<Buffer | null>"
    )]
    pub fn explain_json<'env>(&self, env: &'env Env, branch: Option<BranchRef>, body: Buffer) -> Result<Object<'env>> {
        self.query_body(env, branch, body, true)
    }

    /// Runs a hybrid query and answers the response as JSON bytes, for a
    /// route to send as they are (`/v1/nativeql`, whose query the service
    /// parses from the language): the answer is not built as JavaScript
    /// objects only to be printed again.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, query: HybridQuery",
        ts_return_type = "Promise<Buffer>"
    )]
    pub fn query_to_json<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        query: Unknown<'env>,
    ) -> Result<Object<'env>> {
        let job = (|| -> EngineResult<_> {
            let query: braid_engine::query::HybridQuery = read(env, query, "query", Code::InvalidQuery)?;
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                json_bytes(&e.query(db, br, &query)?, "query's answer")
            })
        })();
        self.run(env, job)
    }

    /// Declares a table or adds columns to it.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, table: string, columns: Record<string, ColumnDeclaration>",
        ts_return_type = "Promise<WriteResult>"
    )]
    pub fn declare_table<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        table: String,
        columns: Unknown<'env>,
    ) -> Result<Object<'env>> {
        let job = (|| -> EngineResult<_> {
            let columns: Value = read(env, columns, "columns", Code::InvalidRecord)?;
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                let columns = braid_engine::engine::parse_columns(&columns)?;
                e.declare_table(db, br, &table, columns).map(WriteResult::from)
            })
        })();
        self.run(env, job)
    }

    #[napi(ts_return_type = "Promise<TableSchema[]>")]
    pub fn schemas<'env>(&self, env: &'env Env, branch: Option<BranchRef>) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                e.schemas(db, br).map(|tables| tables.into_iter().map(TableSchema::from).collect::<Vec<_>>())
            }),
        )
    }

    /// Stores a receipt for a keyed request that writes no rows.
    #[napi(
        ts_args_type = "branch: BranchRef | undefined | null, receipt: ReceiptDraft",
        ts_return_type = "Promise<WriteResult>"
    )]
    pub fn record_receipt<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        receipt: Unknown<'env>,
    ) -> Result<Object<'env>> {
        let write = read(env, receipt, "receipt", Code::InvalidRecord).map(|receipt| WriteOp::Receipt { receipt });
        self.submit(env, branch, write)
    }

    /// A live idempotency receipt by its scoped key.
    #[napi(ts_return_type = "Promise<StoredReceipt | null>")]
    pub fn receipt<'env>(&self, env: &'env Env, branch: Option<BranchRef>, key: String) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                e.receipt(db, br, &key).map(|r| {
                    r.map(|r| StoredReceipt { status: r.status.into(), body: r.body_value(), body_hash: r.body_hash })
                })
            }),
        )
    }

    /// Takes snapshot `target` of a branch at its latest epoch; with a
    /// request key, the same request again answers that snapshot.
    #[napi(ts_return_type = "Promise<SnapshotInfo>")]
    pub fn snapshot<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        target: String,
        request_key: Option<RequestKey>,
    ) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                let key = request_key.map(engine_request_key);
                e.snapshot_keyed(db, br, &target, key.as_ref()).map(|o| SnapshotInfo::new(o.meta, Some(o.replayed)))
            }),
        )
    }

    #[napi(ts_return_type = "Promise<SnapshotInfo[]>")]
    pub fn snapshots<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(|e: &Engine| Ok(e.snapshots().into_iter().map(|m| SnapshotInfo::new(m, None)).collect::<Vec<_>>())),
        )
    }

    /// Restores snapshot `source` into a new branch `target`; with `verify`,
    /// reads that record back from the new branch.
    #[napi(
        ts_args_type = "source: string, target: string, verify?: RecordKey | undefined | null, requestKey?: RequestKey | undefined | null",
        ts_return_type = "Promise<RestoreOutcome>"
    )]
    pub fn restore<'env>(
        &self,
        env: &'env Env,
        source: String,
        target: String,
        verify: Option<Unknown<'env>>,
        request_key: Option<RequestKey>,
    ) -> Result<Object<'env>> {
        let verify = match verify {
            Some(v) if !matches!(v.get_type()?, ValueType::Undefined | ValueType::Null) => Some(record_key(env, v)?),
            _ => None,
        };
        self.run(
            env,
            verify.transpose().map(|verify| {
                move |e: &Engine| {
                    let verify = verify.map(engine_key);
                    let key = request_key.map(engine_request_key);
                    e.restore_keyed(&source, &target, verify.as_ref(), key.as_ref()).map(RestoreOutcome::from)
                }
            }),
        )
    }

    /// Archives a branch (read-only) or makes it active again.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn set_branch_archived<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        archived: bool,
    ) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(move |e: &Engine| {
                let (db, br) = route(&branch);
                e.set_branch_state(db, br, archived)
            }),
        )
    }

    #[napi(ts_return_type = "Promise<BranchSummary[]>")]
    pub fn branches<'env>(&self, env: &'env Env, endpoint: String) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(move |e: &Engine| Ok(e.branches(&endpoint).into_iter().map(BranchSummary::from).collect::<Vec<_>>())),
        )
    }

    /// A branch's figures; cheap, so it runs on the JS thread.
    #[napi(ts_return_type = "EngineMetrics")]
    pub fn metrics(&self, env: &Env, branch: Option<BranchRef>) -> Result<Value> {
        guard("metrics", || {
            let (db, br) = route(&branch);
            self.opening.wait()?.metrics(db, br).and_then(|m| serde_json::to_value(m).map_err(EngineError::internal))
        })
        .map_err(|e| js_error(env, &e))
    }

    /// The engine's events since the last call, oldest first.
    #[napi(ts_return_type = "EngineEvent[]")]
    pub fn events(&self, env: &Env) -> Result<Value> {
        guard("events", || serde_json::to_value(self.opening.wait()?.events()).map_err(EngineError::internal))
            .map_err(|e| js_error(env, &e))
    }

    /// Waits until the text and vector indexes cover every committed write.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn wait_indexed<'env>(&self, env: &'env Env, timeout_ms: f64) -> Result<Object<'env>> {
        let timeout = Duration::from_millis(whole("timeout_ms", timeout_ms).map_err(|e| js_error(env, &e))?);
        self.run(env, Ok(move |e: &Engine| Ok(e.wait_indexed(timeout))))
    }

    /// Test hook: configures a storage fail point (faults.rs). It runs on the
    /// JS thread, not on a worker, so that a test can release calls a
    /// `pause` holds even when they hold every worker.
    #[napi]
    pub fn fault_for_test(&self, env: &Env, point: String, actions: String) -> Result<()> {
        braid_engine::faults::configure(&point, &actions)
            .map_err(|e| js_error(env, &EngineError::new(Code::InvalidRecord, e)))
    }

    /// Test hook: panics inside an engine call.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn panic_for_test<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        self.run(
            env,
            Ok(|_: &Engine| -> EngineResult<()> { panic!("deliberate panic requested through the test hook") }),
        )
    }

    /// Lets the indexers of an engine opened with `deferIndexing` start.
    #[napi]
    pub fn start_indexing(&self) {
        if let Ok(engine) = self.opening.wait() {
            engine.start_indexing();
        }
    }

    /// Finishes queued writes and stops the engine's threads (after the
    /// open, when it is still running; nothing when it failed).
    #[napi]
    pub fn close(&self, env: &Env) -> Result<()> {
        let closed = guard("close", || {
            if let Ok(engine) = self.opening.wait() {
                // writes made during the open reach their committer first
                let (count, done) = &*self.early_writes;
                let mut left = count.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                while *left > 0 {
                    left = done.wait(left).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                drop(left);
                engine.close();
            }
            Ok(())
        });
        // the call workers stop once they have settled what is queued
        self.pool.close();
        closed.map_err(|e| js_error(env, &e))
    }
}

impl NativeEngine {
    fn over(env: &Env, opening: Arc<Opening>) -> Result<NativeEngine> {
        // SAFETY: the factories run on the JS thread
        let settler = unsafe { settle::Settler::new(env.raw()) }?;
        Ok(NativeEngine { opening, pool: pool::Pool::new(32), settler, early_writes: Arc::default() })
    }

    /// Runs `job` on the pool and returns the promise it settles; when the
    /// arguments could not be read (`job` is an error), the promise rejects
    /// with that error, as every asynchronous method's failures do.
    /// A promise rejected at once with `err`.
    /// Reads a write's records from a request body on the worker pool
    /// (`read`) and hands them to the branch's committer, whose reply
    /// settles the promise with `answer`'s value; a read that answers
    /// without writing settles it with that answer, and one that leaves the
    /// body to the service settles it `null`, having written nothing.
    #[allow(clippy::too_many_arguments)]
    fn put_read<'env, A, T>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        body: Buffer,
        free_body: bool,
        receipt: Option<Unknown<'env>>,
        what: &'static str,
        read: impl FnOnce(&[u8]) -> Read<A, T> + Send + 'static,
        answer: impl FnOnce(EngineWrite, A) -> T + Send + 'static,
    ) -> Result<Object<'env>>
    where
        A: Send + 'static,
        T: ToNapiValue + Send + 'static,
    {
        let receipt = match read_receipt(env, receipt) {
            Ok(receipt) => receipt,
            Err(e) => return self.refuse::<Option<T>>(env, e),
        };
        // SAFETY: methods run on the JS thread
        let (promise, pending) = unsafe { self.settler.promise(env.raw()) }?;
        let opening = self.opening.clone();
        self.pool.spawn(Box::new(move || {
            let read = guard(what, || {
                let engine = opening.wait()?;
                Ok((engine, read(&body)))
            });
            let (engine, records, extra) = match read {
                Ok((engine, Read::Write(records, extra))) => (engine, records, extra),
                Ok((_, Read::Answer(value))) => {
                    return pending.settle(outcome_releasing::<Option<T>>(Ok(Some(value)), body));
                }
                Ok((_, Read::Service)) => return pending.settle(outcome_releasing::<Option<T>>(Ok(None), body)),
                Err(e) => return pending.settle(outcome_releasing::<Option<T>>(Err(e), body)),
            };
            // the records are read: nothing reads the body again
            let held = match free_body {
                true => {
                    pending.run_on_js_thread(Box::new(move |env| detach_buffer(env, body)));
                    None
                }
                false => Some(body),
            };
            let reply = Reply::new(move |result| {
                pending.settle(outcome_releasing(result.map(|r| Some(answer(r, extra))), held));
            });
            let (db, br) = route(&branch);
            let write = WriteOp::Put { records, receipt };
            // a panic drops the reply, which answers the write as not done
            drop(catch_unwind(AssertUnwindSafe(|| engine.submit(db, br, write, reply))));
        }));
        Ok(Object::from_raw(env.raw(), promise))
    }

    fn refuse<'env, T: ToNapiValue + Send + 'static>(&self, env: &'env Env, err: EngineError) -> Result<Object<'env>> {
        self.settled::<T>(env, Err(err))
    }

    /// A promise settled now with `out`.
    fn settled<'env, T: ToNapiValue + Send + 'static>(
        &self,
        env: &'env Env,
        out: EngineResult<T>,
    ) -> Result<Object<'env>> {
        // SAFETY: methods run on the JS thread
        let (promise, pending) = unsafe { self.settler.promise(env.raw()) }?;
        unsafe { pending.settle_now(env.raw(), outcome::<T>(out)) };
        Ok(Object::from_raw(env.raw(), promise))
    }

    /// What `read` answers on the JS thread, when the engine is open, no
    /// other call is in flight, and `read` can answer without waiting (an
    /// engine method that waits for no lock and no disk, such as
    /// `Engine::get_now`); else `None`, and the caller runs the read on the
    /// pool. A panic is `internal_panic`, as on the pool.
    ///
    /// A read answered here skips the two thread switches of a pool call: a
    /// sequential in-process `get` took 13 µs through the pool and 3.4 µs
    /// here. The HTTP get route does not use it: under 32 concurrent clients
    /// the pool settles a burst of gets together, and answering each here
    /// measured 0.43x of a bare fastify route against 0.56x, because each
    /// response then woke its client on its own (bench/JOURNAL.md, "The seventh session").
    fn now<T>(&self, read: impl FnOnce(&Engine) -> Option<EngineResult<T>>) -> Option<EngineResult<T>> {
        if self.settler.unsettled() > 0 {
            return None;
        }
        let Some(Ok(engine)) = self.opening.get() else { return None };
        guard("a call", || Ok(read(&engine))).unwrap_or_else(|e| Some(Err(e)))
    }

    /// Hands a write to its branch's committer; the promise settles from
    /// the committer's reply once the write's group is durable (or the write
    /// is refused). Once the engine is open that is a channel send on the JS
    /// thread: no worker of the pool waits out the fsync, and a durable put
    /// costs no thread switch beyond the committer's own. While the engine
    /// is still opening, a worker waits for the open and submits then.
    /// [`Self::query_json`] and [`Self::explain_json`]: the query of a
    /// request body read by `wire::query` on the pool, answered whole or
    /// (`explain_only`) as its explain alone; `null` when the service must
    /// read the body.
    fn query_body<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        body: Buffer,
        explain_only: bool,
    ) -> Result<Object<'env>> {
        self.run_on_body(env, body, move |e: &Engine, body: &[u8]| -> EngineResult<Option<Buffer>> {
            let Some(mut query) = braid_engine::wire::query(body) else { return Ok(None) };
            let (db, br) = route(&branch);
            if !explain_only {
                return json_bytes(&e.query(db, br, &query)?, "query's answer").map(Some);
            }
            query.explain = Some(true);
            json_bytes(&e.query(db, br, &query)?.explain, "query's explain").map(Some)
        })
    }

    fn submit<'env>(
        &self,
        env: &'env Env,
        branch: Option<BranchRef>,
        write: EngineResult<WriteOp>,
    ) -> Result<Object<'env>> {
        let write = match write {
            Ok(write) => write,
            Err(e) => return self.refuse::<WriteResult>(env, e),
        };
        // SAFETY: methods run on the JS thread
        let (promise, pending) = unsafe { self.settler.promise(env.raw()) }?;
        let reply = Reply::new(move |result| pending.settle(outcome(result.map(WriteResult::from))));
        let submit = move |engine: EngineResult<Arc<Engine>>| match engine {
            Ok(engine) => {
                let (db, br) = route(&branch);
                engine.submit(db, br, write, reply);
            }
            Err(e) => reply.send(Err(e)),
        };
        match self.opening.get() {
            // a panic drops the reply, which answers the write as not done
            Some(engine) => drop(catch_unwind(AssertUnwindSafe(|| submit(engine)))),
            None => {
                let opening = self.opening.clone();
                let early = self.early_writes.clone();
                *early.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
                self.pool.spawn(Box::new(move || {
                    drop(catch_unwind(AssertUnwindSafe(|| submit(opening.wait()))));
                    let (count, done) = &*early;
                    *count.lock().unwrap_or_else(std::sync::PoisonError::into_inner) -= 1;
                    done.notify_all();
                }));
            }
        }
        Ok(Object::from_raw(env.raw(), promise))
    }

    /// Runs `job` on the pool over the bytes of `body`, a request body the
    /// service handed over, and returns the promise it settles. The buffer
    /// belongs to JavaScript: it is released as the promise settles, on the
    /// JS thread ([`outcome_releasing`]).
    fn run_on_body<'env, T, F>(&self, env: &'env Env, body: Buffer, job: F) -> Result<Object<'env>>
    where
        T: ToNapiValue + Send + 'static,
        F: FnOnce(&Engine, &[u8]) -> EngineResult<T> + Send + 'static,
    {
        self.run_holding(env, Ok(move |e: &Engine, body: &Buffer| job(e, body)), body)
    }

    fn run<'env, T, F>(&self, env: &'env Env, job: EngineResult<F>) -> Result<Object<'env>>
    where
        T: ToNapiValue + Send + 'static,
        F: FnOnce(&Engine) -> EngineResult<T> + Send + 'static,
    {
        self.run_holding(env, job.map(|job| move |e: &Engine, _: &()| job(e)), ())
    }

    /// Runs `job` over `held` on the pool and returns the promise it
    /// settles, releasing `held` on the JS thread as it does; when the
    /// arguments could not be read (`job` is an error), the promise rejects
    /// with that error, as every asynchronous method's failures do.
    fn run_holding<'env, T, F, H>(&self, env: &'env Env, job: EngineResult<F>, held: H) -> Result<Object<'env>>
    where
        T: ToNapiValue + Send + 'static,
        F: FnOnce(&Engine, &H) -> EngineResult<T> + Send + 'static,
        H: Send + 'static,
    {
        let job = match job {
            Ok(job) => job,
            Err(e) => return self.refuse::<T>(env, e),
        };
        // SAFETY: methods run on the JS thread
        let (promise, pending) = unsafe { self.settler.promise(env.raw()) }?;
        let opening = self.opening.clone();
        self.pool.spawn(Box::new(move || {
            let out = guard("a call", || job(&*opening.wait()?, &held));
            pending.settle(outcome_releasing(out, held));
        }));
        Ok(Object::from_raw(env.raw(), promise))
    }
}

/// `value` as JSON bytes, for a route to send as they are.
fn json_bytes(value: &impl serde::Serialize, what: &str) -> EngineResult<Buffer> {
    braid_engine::wire::javascript_json(value)
        .map(Buffer::from)
        .map_err(|err| EngineError::internal(format!("the {what} could not be written as JSON: {err}")))
}

/// What a request body read by the engine leads to.
enum Read<A, T> {
    /// Write these records; `A` goes to the answer.
    Write(Vec<braid_engine::RecordInput>, A),
    /// Answer this without writing.
    Answer(T),
    /// The service reads the body itself.
    Service,
}

/// What a put body leads to (see `put_json`).
enum PutDecision {
    Write(braid_engine::RecordInput),
    /// The body names a branch the service has not yet checked.
    Named(BranchRef),
    Service,
}

/// Writes a body that names no branch, or the branch the service was told
/// of (`named`, answered by an earlier call); asks about one it was not told
/// of; leaves any other body to the service.
fn put_decision(body: Option<braid_engine::wire::PutBody>, named: Option<BranchRef>) -> PutDecision {
    let Some(body) = body else { return PutDecision::Service };
    if !body.names_a_branch() {
        return PutDecision::Write(body.record);
    }
    match named {
        None => PutDecision::Named(BranchRef { database_id: body.database_id, branch_id: body.branch_id }),
        Some(n) if n.database_id == body.database_id && n.branch_id == body.branch_id => {
            PutDecision::Write(body.record)
        }
        Some(_) => PutDecision::Service,
    }
}

/// How a finished call settles its promise on the JS thread.
fn outcome<T: ToNapiValue + Send + 'static>(out: EngineResult<T>) -> settle::Outcome {
    outcome_releasing(out, ())
}

/// [`outcome`], and `held` (a JavaScript buffer the call was given)
/// released once the promise is settled, on the JS thread that settles it.
/// Dropped on a worker, napi-rs hands a buffer's release to the JS thread
/// through a threadsafe function of its own: one more wake of that thread,
/// and a context switch in and out of the worker that dropped it, for every
/// request (a sequence of vector queries over HTTP, `perf sched`: with the
/// settle queue's own extra wake, since removed, the JS thread was woken
/// three to five times per query; it is woken twice now, the second time by
/// Node's mutex in `napi_call_threadsafe_function`).
fn outcome_releasing<T: ToNapiValue + Send + 'static>(
    out: EngineResult<T>,
    held: impl Send + 'static,
) -> settle::Outcome {
    Box::new(move |env| {
        let settled = match out {
            // SAFETY: settle runs this on the JS thread of `env`
            Ok(value) => unsafe { T::to_napi_value(env, value) }.map_err(|e| {
                error_value(env, &EngineError::internal(format!("the result could not be converted: {e}")))
            }),
            Err(e) => Err(error_value(env, &e)),
        };
        drop(held);
        settled
    })
}

/// Detaches the `ArrayBuffer` that `body` is the whole of, on the JS thread
/// of `env`: V8 frees its memory now, and the buffer is empty after. A body
/// that is part of a larger `ArrayBuffer` is only let go.
fn detach_buffer(env: napi::sys::napi_env, body: Buffer) {
    use napi::sys;
    use std::ptr;
    // SAFETY: a chore runs on the JS thread of `env`, in a handle scope
    unsafe {
        let Ok(value) = Buffer::to_napi_value(env, body) else { return };
        let (mut length, mut data, mut arraybuffer, mut offset) = (0, ptr::null_mut(), ptr::null_mut(), 0);
        let mut kind = 0;
        let typed =
            sys::napi_get_typedarray_info(env, value, &mut kind, &mut length, &mut data, &mut arraybuffer, &mut offset);
        let mut whole = 0;
        let mut whole_data = ptr::null_mut();
        if typed != sys::Status::napi_ok
            || sys::napi_get_arraybuffer_info(env, arraybuffer, &mut whole_data, &mut whole) != sys::Status::napi_ok
        {
            return;
        }
        // a Buffer's typed array is of bytes, so its length is its byte length
        if offset == 0 && length == whole {
            sys::napi_detach_arraybuffer(env, arraybuffer);
        }
    }
}

/// Runs `f`, turning a panic into `internal_panic`.
fn guard<T>(what: &str, f: impl FnOnce() -> EngineResult<T>) -> EngineResult<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(EngineError::new(Code::InternalPanic, format!("the engine panicked while running {what}")))
    })
}

/// A JavaScript `Error` with the engine error's `code`, `status` and `index`,
/// to throw.
fn js_error(env: &Env, err: &EngineError) -> Error {
    // SAFETY: a live value of this call's environment
    Error::from(unsafe { Unknown::from_raw_unchecked(env.raw(), error_value(env.raw(), err)) })
}

/// The same error as a value (to reject a promise with).
fn error_value(env: napi::sys::napi_env, err: &EngineError) -> napi::sys::napi_value {
    let env = Env::from_raw(env);
    let build = || -> Result<napi::sys::napi_value> {
        let mut obj = env.create_error(Error::new(Status::GenericFailure, err.message.clone()))?;
        obj.set_named_property("code", err.code.as_str())?;
        obj.set_named_property("status", u32::from(err.code.status()))?;
        if let Some(index) = err.index {
            obj.set_named_property("index", index as u32)?;
        }
        Ok(obj.raw())
    };
    build().unwrap_or_else(|_| {
        // no object could be made: reject with the message alone
        env.create_string(&err.message).map(|s| s.raw()).unwrap_or(std::ptr::null_mut())
    })
}

/// Whether a reader's path names a record's or a query's name: `id`,
/// `[3].tenant_id`, `record.table`.
fn is_name_path(path: &str) -> bool {
    let last = path.rsplit(['.', ']']).next().unwrap_or(path);
    matches!(last, "table" | "tenant_id" | "id")
}

/// Whether a reader's path is an element of a record field's array:
/// `[3].fields.embedding[7]` (in a batch) or `fields.embedding[7]`.
fn is_field_element_path(path: &str) -> bool {
    let path = match path.strip_prefix('[') {
        Some(rest) => rest.split_once("].").map_or("", |(i, rest)| if i.parse::<u32>().is_ok() { rest } else { "" }),
        None => path,
    };
    let Some(field) = path.strip_prefix("fields.") else { return false };
    let Some((name, index)) = field.split_once('[') else { return false };
    !name.is_empty()
        && !name.contains(['.', ']'])
        && index.strip_suffix(']').is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// Reads a JavaScript value into an engine type: `code` when its shape is
/// wrong, the reader's own reasons otherwise (js.rs).
fn read<T: DeserializeOwned>(env: &Env, value: Unknown, what: &str, code: Code) -> EngineResult<T> {
    let json = read_json(env, value, what, code)?;
    serde_json::from_value(json).map_err(|e| EngineError::new(code, format!("{what}: {e}")))
}

/// Reads a JavaScript value as JSON (`null` for `undefined`), each refusal
/// with the code it gets (js.rs).
fn read_json(env: &Env, value: Unknown, what: &str, code: Code) -> EngineResult<Value> {
    // SAFETY: both handles belong to this call on the JS thread
    let json = unsafe { js::read(env.raw(), value.raw()) }.map_err(|e| refusal(e, what, code))?;
    Ok(json.unwrap_or(Value::Null))
}

/// A value the reader refused, as the error it is (js.rs): `code` when
/// nothing more specific applies.
fn refusal(e: js::ReadError, what: &str, code: Code) -> EngineError {
    let code = match e.reason {
        js::Reason::NotFinite if code == Code::InvalidQuery && e.path.starts_with("vector") => Code::VectorNotFinite,
        // a number of a record's array of numbers (a vector): as the
        // engine refuses one past f32's range (`1e400` reads as Infinity)
        js::Reason::NotFinite if code == Code::InvalidRecord && is_field_element_path(&e.path) => Code::VectorNotFinite,
        js::Reason::TooDeep | js::Reason::TooLarge => Code::InvalidRecord,
        // a name (table, tenant_id, id) that is not Unicode text
        js::Reason::LoneSurrogate if is_name_path(&e.path) => Code::InvalidName,
        _ => code,
    };
    let mut err = EngineError::new(code, e.message(what));
    // in a list (a batch's records), the item it is in, as the engine's
    // own refusals say
    err.index = record_index(&e.path);
    err
}

/// The list position a reader's path (`[3].fields.t`) starts with.
fn record_index(path: &str) -> Option<usize> {
    path.strip_prefix('[')?.split(']').next()?.parse().ok()
}

/// A batch's records, each refusal naming its record (`err.index`), as the
/// engine's own refusals do: a record of the wrong shape (a number for
/// `tenant_id`, no `id`) as well as a value that cannot be read. The values
/// read are moved into the records, not deserialised again
/// (`RecordInput::from_json`): a batch's vectors are built once.
fn read_records(env: &Env, records: Unknown) -> EngineResult<Vec<braid_engine::RecordInput>> {
    let record = |i: usize, record: Value| {
        braid_engine::RecordInput::from_json(record).map_err(|e| {
            let mut err = EngineError::new(Code::InvalidRecord, format!("records[{i}]: {e}"));
            err.index = Some(i);
            err
        })
    };
    // a list: each record's values become its fields (a vector's numbers
    // its floats) before the next record is read
    // SAFETY: both handles belong to this call on the JS thread
    match unsafe { js::read_elements(env.raw(), records.raw(), record) } {
        Ok(Some(read)) => return read,
        Ok(None) => {}
        Err(e) => return Err(refusal(e, "records", Code::InvalidRecord)),
    }
    let list = match read_json(env, records, "records", Code::InvalidRecord)? {
        Value::Array(list) => list,
        // not a list: serde's refusal, as for any other argument
        other => serde_json::from_value::<Vec<Value>>(other)
            .map_err(|e| EngineError::new(Code::InvalidRecord, format!("records: {e}")))?,
    };
    list.into_iter().enumerate().map(|(i, r)| record(i, r)).collect()
}

fn read_receipt(env: &Env, receipt: Option<Unknown>) -> EngineResult<Option<braid_engine::storage::ReceiptDraft>> {
    match receipt {
        Some(r) if !matches!(r.get_type(), Ok(ValueType::Undefined | ValueType::Null)) => {
            read(env, r, "receipt", Code::InvalidRecord).map(Some)
        }
        _ => Ok(None),
    }
}

fn route(branch: &Option<BranchRef>) -> (Option<&str>, Option<&str>) {
    match branch {
        Some(b) => (b.database_id.as_deref(), b.branch_id.as_deref()),
        None => (None, None),
    }
}

/// A record key, read by napi-rs's typed conversion (whose errors are the
/// caller's type errors, thrown at once) and refused with `invalid_name` when
/// a part held an unpaired UTF-16 surrogate: that conversion reads one as
/// U+FFFD, so `"\ud800"` and `"\udbff"` would name the same record.
fn record_key(env: &Env, key: Unknown) -> Result<EngineResult<RecordKey>> {
    // SAFETY: both handles belong to this call on the JS thread
    let k = unsafe { RecordKey::from_napi_value(env.raw(), key.raw()) }?;
    for (part, name, value) in
        [("table", c"table", &k.table), ("tenant_id", c"tenant_id", &k.tenant_id), ("id", c"id", &k.id)]
    {
        // SAFETY: as above
        if value.contains('\u{FFFD}') && unsafe { js::property_has_lone_surrogate(env.raw(), key.raw(), name) } {
            let e = js::ReadError { path: part.to_string(), reason: js::Reason::LoneSurrogate };
            return Ok(Err(EngineError::new(Code::InvalidName, e.message("key"))));
        }
    }
    Ok(Ok(k))
}

fn engine_key(k: RecordKey) -> braid_engine::RecordKey {
    braid_engine::RecordKey { table: k.table, tenant_id: k.tenant_id, id: k.id }
}

fn engine_request_key(k: RequestKey) -> braid_engine::engine::RequestKey {
    braid_engine::engine::RequestKey { key: k.key, body_hash: k.body_hash }
}

/// A JavaScript number that must be a whole number of at least 0.
fn whole(name: &str, v: f64) -> EngineResult<u64> {
    whole_as(Code::InvalidRecord, name, v)
}

/// A threshold that must be reached before something happens: a whole
/// number of at least 1, as the server's settings take it (0 had taken a
/// checkpoint after every write).
fn threshold(name: &str, v: f64) -> EngineResult<u64> {
    match whole(name, v)? {
        0 => Err(EngineError::new(
            Code::InvalidRecord,
            format!("{name} must be a whole number from 1 to 2^53 - 1, not 0"),
        )),
        n => Ok(n),
    }
}

/// [`whole`], refused with `code`.
fn whole_as(code: Code, name: &str, v: f64) -> EngineResult<u64> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 {
        Ok(v as u64)
    } else {
        // 2^60 is whole, but past what a JavaScript number holds exactly
        Err(EngineError::new(code, format!("{name} must be a whole number from 0 to 2^53 - 1, not {v}")))
    }
}

/// A limit: a whole number of at least 1 that fits `u32` (a JavaScript
/// number read as `u32` wraps: 2^32 had become a batch limit of 0, -1 one
/// of 4,294,967,295).
fn limit(name: &str, v: f64) -> EngineResult<u32> {
    if v.is_finite() && v >= 1.0 && v.fract() == 0.0 && v <= f64::from(u32::MAX) {
        Ok(v as u32)
    } else {
        Err(EngineError::new(
            Code::InvalidRecord,
            format!("{name} must be a whole number from 1 to {}, not {v}", u32::MAX),
        ))
    }
}

fn config(o: OpenOptions) -> EngineResult<EngineConfig> {
    if o.data_dir.is_empty() {
        // an empty path is the current directory to the file system, which
        // would then be written into
        return Err(EngineError::new(Code::InvalidRecord, "dataDir must name a directory, not be empty"));
    }
    let mut config = EngineConfig::new(o.data_dir);
    let b = &mut config.branch;
    if let Some(v) = o.max_vector_dim {
        b.max_vector_dim = limit("maxVectorDim", v)?;
    }
    if let Some(v) = o.max_batch {
        b.max_batch = limit("maxBatch", v)? as usize;
    }
    if let Some(v) = o.max_columns {
        b.max_columns = limit("maxColumns", v)? as usize;
    }
    if let Some(v) = o.receipt_retention_ms {
        b.receipt_retention_ms = whole("receiptRetentionMs", v)?;
    }
    if let Some(v) = o.receipt_memory_bytes {
        b.receipt_memory_bytes = whole("receiptMemoryBytes", v)?;
    }
    b.history_epochs = o.history_epochs.map(|v| whole("historyEpochs", v)).transpose()?;
    if let Some(v) = o.text_commit_interval_ms {
        b.text_commit_interval = Duration::from_millis(whole("textCommitIntervalMs", v)?);
    }
    if let Some(v) = o.checkpoint_bytes {
        b.checkpoint_wal_bytes = threshold("checkpointBytes", v)?;
    }
    if let Some(v) = o.checkpoint_rows {
        b.checkpoint_rows = threshold("checkpointRows", v)?;
    }
    if let Some(v) = o.checkpoint_interval_ms {
        b.checkpoint_interval = Duration::from_millis(threshold("checkpointIntervalMs", v)?);
    }
    b.indexing = IndexingGate::new(!o.defer_indexing.unwrap_or(false));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::is_field_element_path;

    #[test]
    fn a_field_element_path_is_one_index_into_a_field() {
        for path in ["[3].fields.embedding[7]", "fields.v[0]", "[0].fields.v[12]"] {
            assert!(is_field_element_path(path), "{path}");
        }
        for path in [
            "[3].fields.n",
            "fields.v",
            "fields.v[0][1]",
            "fields.o.v[0]",
            "[x].fields.v[0]",
            "vector[0]",
            "fields.v[]",
        ] {
            assert!(!is_field_element_path(path), "{path}");
        }
    }
}
