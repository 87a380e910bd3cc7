//! The engine: a catalog of databases, branches and snapshots over a data
//! directory, and the operations the service exposes.
//!
//! Data directory layout (documented in docs/storage.md):
//!
//! ```text
//! <data>/LOCK                          flock held by the one engine process using the directory
//! <data>/catalog.json                  branches and snapshots (atomic rewrite)
//! <data>/secret                        32 random bytes that sign cursors
//! <data>/db/<database>/<branch>/wal.log
//! <data>/db/<database>/<branch>/text/  tantivy index (derived, rebuildable)
//! <data>/snapshots/<name>/wal.log      the source branch's log cut at one epoch
//! <data>/snapshots/<name>/snapshot.json
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::fsutil;
use crate::model::{RecordInput, RecordKey, RecordOutput};
use crate::names;
use crate::query::execute::{self, QueryContext, RankedCache};
use crate::query::plan::{HybridQuery, QueryResponse};
use crate::schema::{Column, ColumnDeclaration, TableSchema};
use crate::storage::branch::{CheckpointInfo, WAL_FILE};
use crate::storage::commit::now_ms;
use crate::storage::events::Recorded;
use crate::storage::lock::DirLock;
use crate::storage::stats::{
    self, CheckpointFigures, IndexLag, MemoryEstimate, RetentionFigures, VectorGraphs, WalFigures,
};
use crate::storage::wal;
use crate::storage::{Branch, BranchConfig, ReceiptDraft, Reply, WriteOp, WriteResult};

pub const DEFAULT_DATABASE: &str = "default";
pub const DEFAULT_BRANCH: &str = "main";

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub branch: BranchConfig,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig { data_dir: data_dir.into(), branch: BranchConfig::default() }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BranchMeta {
    database_id: String,
    branch_id: String,
    parent_branch_id: Option<String>,
    state: String,
    created_ms: u64,
    #[serde(default)]
    source_snapshot: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub name: String,
    pub database_id: String,
    pub branch_id: String,
    pub epoch: u64,
    /// Length of the log of a snapshot taken before checkpoints existed
    /// (such a snapshot is that log); 0 for newer ones.
    pub wal_bytes: u64,
    /// Bytes of the snapshot's files.
    #[serde(default)]
    pub bytes: u64,
    pub created_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Catalog {
    branches: Vec<BranchMeta>,
    snapshots: Vec<SnapshotMeta>,
    /// Idempotency keys of snapshot and restore requests, written in the same
    /// catalog rewrite as the snapshot or branch they created, so a crash
    /// between the work and the service's receipt cannot run them twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    requests: Vec<AdminRequest>,
}

/// The idempotency key (already scoped by the service) and body hash of a
/// keyed admin request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestKey {
    pub key: String,
    pub body_hash: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AdminRequest {
    #[serde(flatten)]
    request: RequestKey,
    created_ms: u64,
    /// The snapshot or branch the request created.
    created: String,
}

/// What a keyed admin request finds when its key was seen before.
enum Seen {
    New,
    /// The same request already ran: what it created.
    Done(String),
}

impl Catalog {
    fn seen(&self, key: Option<&RequestKey>, retention_ms: u64) -> Result<Seen> {
        let Some(key) = key else { return Ok(Seen::New) };
        let cutoff = now_ms().saturating_sub(retention_ms);
        match self.requests.iter().find(|r| r.request.key == key.key && r.created_ms >= cutoff) {
            None => Ok(Seen::New),
            Some(r) if r.request.body_hash == key.body_hash => Ok(Seen::Done(r.created.clone())),
            Some(_) => bail!(IdempotencyKeyReused, "Idempotency-Key was already used with a different request body"),
        }
    }

    /// Records a keyed request with the work it did, dropping expired ones.
    fn remember(&mut self, key: Option<&RequestKey>, created: &str, retention_ms: u64) {
        let cutoff = now_ms().saturating_sub(retention_ms);
        self.requests.retain(|r| r.created_ms >= cutoff);
        if let Some(key) = key {
            self.requests.push(AdminRequest {
                request: key.clone(),
                created_ms: now_ms(),
                created: created.to_string(),
            });
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BranchSummary {
    pub branch_id: String,
    pub database_id: String,
    pub endpoint: String,
    pub latest_epoch: u64,
    pub parent_branch_id: Option<String>,
    pub state: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Metrics {
    pub durable_epoch: u64,
    pub latest_epoch: u64,
    pub index_count: u64,
    pub module_count: u64,
    pub schema_count: u64,
    pub schema_epoch: u64,
    pub segment_count: u64,
    pub record_count: u64,
    pub version_count: u64,
    pub branch_count: u64,
    /// Databases with a branch open (readiness' `catalog_databases`).
    pub database_count: u64,
    pub recovery_state: String,
    pub recovered_truncated_bytes: u64,
    /// `running`, `failing` (recent rounds kept failing) or `stopped`.
    pub indexer_state: String,
    pub failed_feature_count: u64,
    /// Idempotency receipts held in memory.
    pub receipt_count: u64,
    // The figures below feed `GET /metrics` only; route 12 (whose fields the
    // spec fixes) does not carry them.
    pub wal: WalFigures,
    pub checkpoints: CheckpointFigures,
    pub retention: RetentionFigures,
    pub index_lag: IndexLag,
    pub vector_graphs: VectorGraphs,
    pub memory: MemoryEstimate,
}

/// An event of one branch (storage/events.rs).
#[derive(Debug, Clone, Serialize)]
pub struct BranchEvent {
    pub database_id: String,
    pub branch_id: String,
    #[serde(flatten)]
    pub event: Recorded,
}

#[derive(Debug, Clone, Serialize)]
pub struct RestoreOutcome {
    pub restored: bool,
    pub source: String,
    pub target: String,
    pub epoch: u64,
    /// With a verify key: the record as the restored branch holds it (null
    /// when absent). Absent without a verify key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<Option<RecordOutput>>,
    /// True when a keyed request that already ran was answered again.
    pub replayed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotOutcome {
    #[serde(flatten)]
    pub meta: SnapshotMeta,
    pub replayed: bool,
}

pub struct Engine {
    config: EngineConfig,
    catalog: Mutex<Catalog>,
    branches: RwLock<Branches>,
    secret: Vec<u8>,
    cache: RankedCache,
    pub opened_at: Instant,
    /// Held from before recovery until `close`.
    lock: Mutex<Option<DirLock>>,
    /// Set by `close` (under the branch map's lock): a restore finishing
    /// after it closes the branch it opened instead of adding it.
    closed: std::sync::atomic::AtomicBool,
    /// Each branch's last metrics, answered while a long commit holds its
    /// state ([`Engine::metrics`]).
    last_metrics: Mutex<HashMap<(String, String), Metrics>>,
}

/// How long a metrics read waits for a branch's state before it answers the
/// branch's last figures instead.
const METRICS_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

fn ident(kind: &str, s: &str) -> Result<()> {
    names::check_identifier(kind, s)
}

impl Engine {
    pub fn open(config: EngineConfig) -> Result<Engine> {
        name_shared_pool();
        let data = &config.data_dir;
        wal::create_private_dir(data)?;
        // before anything else is read: a second process must touch nothing
        let lock = DirLock::acquire(data)?;
        wal::create_private_dir(&data.join("db"))?;
        wal::create_private_dir(&data.join("snapshots"))?;
        let secret = load_secret(&data.join("secret"))?;
        let catalog_path = data.join("catalog.json");
        // a rewrite that a crash (or a full disk) stopped before its rename:
        // the catalog beside it is the last one saved whole
        let _ = std::fs::remove_file(catalog_path.with_extension("json.tmp"));
        let mut catalog: Catalog = match std::fs::read(&catalog_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::storage(format!("catalog.json: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                refuse_without_catalog(data)?;
                Catalog::default()
            }
            Err(e) => return Err(e.into()),
        };
        // the one branch a start may create: main, the first time
        let mut created_main = false;
        if !catalog.branches.iter().any(is_main) {
            created_main = true;
            catalog.branches.insert(
                0,
                BranchMeta {
                    database_id: DEFAULT_DATABASE.into(),
                    branch_id: DEFAULT_BRANCH.into(),
                    parent_branch_id: None,
                    state: "active".into(),
                    created_ms: now_ms(),
                    source_snapshot: None,
                },
            );
            save_catalog(&catalog_path, &catalog)?;
        }
        remove_unfinished(data, &catalog)?;
        let mut branches = HashMap::new();
        for meta in &catalog.branches {
            let dir = branch_dir(data, &meta.database_id, &meta.branch_id);
            if !(created_main && is_main(meta)) {
                check_branch_dir(meta, &dir)?;
            }
            // a restore that finished: its mark may outlive the catalog write
            let _ = std::fs::remove_file(dir.join(RESTORING));
            let branch = Branch::open(&dir, config.branch.clone())?;
            branch.set_archived(meta.state == "archived");
            branches.insert((meta.database_id.clone(), meta.branch_id.clone()), Arc::new(branch));
        }
        Ok(Engine {
            config,
            catalog: Mutex::new(catalog),
            branches: RwLock::new(branches),
            secret,
            cache: RankedCache::default(),
            opened_at: Instant::now(),
            lock: Mutex::new(Some(lock)),
            closed: std::sync::atomic::AtomicBool::new(false),
            last_metrics: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The branch addressed by a request; `None` means the defaults.
    pub fn branch(&self, database: Option<&str>, branch: Option<&str>) -> Result<Arc<Branch>> {
        self.find_branch(&self.branches.read(), database, branch)
    }

    /// The branch addressed in `branches` (the branch list, locked by the
    /// caller). A closed engine answers nothing from its branches: it has
    /// released the data directory, which another engine may then write
    /// (found by a black-box test: a closed engine went on serving the
    /// versions it held, stale once a second engine had written the directory).
    fn find_branch(&self, branches: &Branches, database: Option<&str>, branch: Option<&str>) -> Result<Arc<Branch>> {
        let db = database.unwrap_or(DEFAULT_DATABASE);
        let br = branch.unwrap_or(DEFAULT_BRANCH);
        ident("database_id", db)?;
        ident("branch_id", br)?;
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            bail!(ShuttingDown, "the engine is closed");
        }
        branches
            .get(&(db.to_string(), br.to_string()))
            .cloned()
            .ok_or_else(|| Error::new(Code::BranchNotFound, format!("branch {db}/{br} does not exist")))
    }

    fn write(&self, database: Option<&str>, branch: Option<&str>, op: WriteOp) -> Result<WriteResult> {
        self.branch(database, branch)?.write(op)
    }

    /// Hands a write (a put, a delete or a receipt) to its branch's
    /// committer and returns at once; `reply` gets the outcome once the
    /// write is durable, or is refused. `put` and `delete` are this plus a
    /// wait; the Node binding settles a promise from `reply` instead, so no
    /// thread of its pool waits out the fsync.
    pub fn submit(&self, database: Option<&str>, branch: Option<&str>, op: WriteOp, reply: Reply) {
        match self.branch(database, branch) {
            Ok(branch) => branch.submit(op, reply),
            Err(e) => reply.send(Err(e)),
        }
    }

    pub fn put(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        records: Vec<RecordInput>,
        receipt: Option<ReceiptDraft>,
    ) -> Result<WriteResult> {
        self.write(database, branch, WriteOp::Put { records, receipt })
    }

    pub fn delete(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        key: RecordKey,
        receipt: Option<ReceiptDraft>,
    ) -> Result<WriteResult> {
        self.write(
            database,
            branch,
            WriteOp::Delete { table: key.table, tenant_id: key.tenant_id, id: key.id, receipt },
        )
    }

    /// Records a receipt on its own (for keyed requests that write no rows).
    pub fn record_receipt(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        receipt: ReceiptDraft,
    ) -> Result<WriteResult> {
        self.write(database, branch, WriteOp::Receipt { receipt })
    }

    /// Looks up a live receipt by its scoped key.
    pub fn receipt(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        key: &str,
    ) -> Result<Option<crate::storage::Receipt>> {
        let branch = self.branch(database, branch)?;
        let cutoff = now_ms().saturating_sub(branch.config.receipt_retention_ms);
        let state = branch.state.read();
        Ok(state.receipts.get(key).filter(|r| r.created_ms >= cutoff).cloned())
    }

    pub fn declare_table(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        table: &str,
        columns: BTreeMap<String, ColumnDeclaration>,
    ) -> Result<WriteResult> {
        let max_dim = self.config.branch.max_vector_dim;
        let columns: BTreeMap<String, Column> = columns
            .iter()
            .map(|(name, decl)| decl.to_column(name, max_dim).map(|c| (name.clone(), c)))
            .collect::<Result<_>>()?;
        self.write(database, branch, WriteOp::Declare { table: table.to_string(), columns })
    }

    pub fn schemas(&self, database: Option<&str>, branch: Option<&str>) -> Result<Vec<TableSchema>> {
        let branch = self.branch(database, branch)?;
        let state = branch.state.read();
        Ok(state.schemas.values().cloned().collect())
    }

    /// The visible version of a record at `epoch` (latest when `None`).
    pub fn get(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        key: &RecordKey,
        epoch: Option<u64>,
    ) -> Result<Option<RecordOutput>> {
        check_key_names(key)?;
        let branch = self.branch(database, branch)?;
        let state = branch.state.read();
        let read = |row| Some(state.fields(row, None));
        get_from(&branch, &state, key, epoch, read).expect("a read that may wait answers")
    }

    /// [`Engine::get`] if it can answer at once, else `None`: for a caller
    /// whose thread serves others (Node's JS thread), which then asks
    /// [`Engine::get`] on a thread that may wait. It waits for no lock (the
    /// branch list's, the branch state's, the record files' handles) and for
    /// no disk: the record's bytes must be in the page cache
    /// (`RWF_NOWAIT`) and at most [`records::NOW_MAX_BYTES`](crate::storage::records::NOW_MAX_BYTES).
    /// Its answer, given, is [`Engine::get`]'s.
    pub fn get_now(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        key: &RecordKey,
        epoch: Option<u64>,
    ) -> Option<Result<Option<RecordOutput>>> {
        if let Err(e) = check_key_names(key) {
            return Some(Err(e));
        }
        let found = self.find_branch(&*self.branches.try_read()?, database, branch);
        let branch = match found {
            Ok(branch) => branch,
            Err(e) => return Some(Err(e)),
        };
        let state = branch.state.try_read()?;
        get_from(&branch, &state, key, epoch, |row| state.fields_now(row, None))
    }

    pub fn query(&self, database: Option<&str>, branch: Option<&str>, q: &HybridQuery) -> Result<QueryResponse> {
        let db = database.unwrap_or(DEFAULT_DATABASE);
        let br = branch.unwrap_or(DEFAULT_BRANCH);
        let handle = self.branch(Some(db), Some(br))?;
        let branch_key = format!("{db}/{br}");
        let ctx = QueryContext { branch: &handle, branch_key: &branch_key, secret: &self.secret, cache: &self.cache };
        execute::execute(&ctx, q)
    }

    /// Takes a checkpoint of a branch now (they are also taken by WAL size
    /// and time, and on a clean close): the next start loads it and replays
    /// only what is written after.
    pub fn checkpoint(&self, database: Option<&str>, branch: Option<&str>) -> Result<CheckpointInfo> {
        self.branch(database, branch)?.checkpoint(None)
    }

    /// Lets the indexers of an engine opened with indexing deferred
    /// ([`crate::storage::IndexingGate`]) start; nothing when they run.
    pub fn start_indexing(&self) {
        self.config.branch.indexing.open();
    }

    /// Blocks until every branch's indexes cover every committed row.
    pub fn wait_indexed(&self, timeout: std::time::Duration) -> bool {
        let branches: Vec<Arc<Branch>> = self.branches.read().values().cloned().collect();
        branches.iter().all(|b| b.wait_indexed(timeout))
    }

    /// Snapshot `target` of a branch at its latest epoch, taken while writes go
    /// on: the log is append-only, so its first `wal_end` bytes are exactly the
    /// commits up to that epoch and never change.
    pub fn snapshot(&self, database: Option<&str>, branch: Option<&str>, target: &str) -> Result<SnapshotMeta> {
        Ok(self.snapshot_keyed(database, branch, target, None)?.meta)
    }

    /// [`Engine::snapshot`] for a keyed request: the key is written with the
    /// snapshot, and the same request again answers the snapshot it made.
    pub fn snapshot_keyed(
        &self,
        database: Option<&str>,
        branch: Option<&str>,
        target: &str,
        key: Option<&RequestKey>,
    ) -> Result<SnapshotOutcome> {
        ident("snapshot name", target)?;
        let db = database.unwrap_or(DEFAULT_DATABASE).to_string();
        let br = branch.unwrap_or(DEFAULT_BRANCH).to_string();
        let handle = self.branch(Some(&db), Some(&br))?;
        // a snapshot's key lives in the catalog, shared by every branch: it
        // is scoped by the branch the request addresses, as a write's key is
        // by living in its branch (a restore addresses none)
        let scoped = key.map(|k| RequestKey { key: format!("{db}/{br}\n{}", k.key), body_hash: k.body_hash.clone() });
        let key = scoped.as_ref();
        let mut catalog = self.catalog.lock();
        let retention = self.config.branch.receipt_retention_ms;
        if let Seen::Done(name) = catalog.seen(key, retention)? {
            if let Some(meta) = catalog.snapshots.iter().find(|s| s.name == name) {
                return Ok(SnapshotOutcome { meta: meta.clone(), replayed: true });
            }
        }
        if catalog.snapshots.iter().any(|s| s.name == target) {
            bail!(SnapshotExists, "snapshot {target:?} already exists");
        }
        let final_dir = self.config.data_dir.join("snapshots").join(target);
        let tmp_dir = self.config.data_dir.join("snapshots").join(format!(".{target}.tmp"));
        // the name is this engine's own (a snapshot's name never starts with
        // a dot): whatever is there, a file included, is a leftover (a
        // stray file there had made every snapshot of the name a 503)
        match std::fs::symlink_metadata(&tmp_dir) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&tmp_dir)?,
            Ok(_) => std::fs::remove_file(&tmp_dir)?,
            Err(_) => {}
        }
        unnamed_dir_free(&final_dir, &format!("snapshots/{target}"), SNAPSHOTTING, Code::SnapshotExists)?;
        wal::create_private_dir(&tmp_dir)?;
        // marks the directory as this snapshot's until the catalog names it
        // (renamed with it): a start removes an unnamed one only with it
        write_durable(&tmp_dir.join(SNAPSHOTTING), b"")?;
        // a checkpoint between two write groups holds exactly the commits up
        // to its epoch; its files are immutable, so linking them is a copy
        let info = handle.checkpoint(Some(&tmp_dir))?;
        let bytes = info.exported.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
        let meta = SnapshotMeta {
            name: target.to_string(),
            database_id: db,
            branch_id: br,
            epoch: info.epoch,
            wal_bytes: 0,
            bytes,
            created_ms: now_ms(),
        };
        write_durable(&tmp_dir.join("snapshot.json"), &serde_json::to_vec_pretty(&meta).expect("meta serialises"))?;
        std::fs::rename(&tmp_dir, &final_dir)?;
        fsutil::sync_dir(&final_dir)?;
        let mut next = catalog.clone();
        next.snapshots.push(meta.clone());
        next.remember(key, target, retention);
        if let Err(e) = self.commit_catalog(&mut catalog, next) {
            // found by a black-box test: a refused snapshot left its directory
            let _ = std::fs::remove_dir_all(&final_dir);
            return Err(e);
        }
        let _ = std::fs::remove_file(final_dir.join(SNAPSHOTTING));
        Ok(SnapshotOutcome { meta, replayed: false })
    }

    pub fn snapshots(&self) -> Vec<SnapshotMeta> {
        self.catalog.lock().snapshots.clone()
    }

    /// Restores snapshot `source` into a new branch `target` of the snapshot's
    /// database; the new branch's parent is the branch the snapshot was taken from.
    pub fn restore(&self, source: &str, target: &str) -> Result<RestoreOutcome> {
        self.restore_keyed(source, target, None, None)
    }

    /// [`Engine::restore`], reading `verify` back from the new branch, for a
    /// possibly keyed request: the key is written with the branch, and the
    /// same request again answers the branch it made. Everything is checked
    /// before anything is created.
    pub fn restore_keyed(
        &self,
        source: &str,
        target: &str,
        verify: Option<&RecordKey>,
        key: Option<&RequestKey>,
    ) -> Result<RestoreOutcome> {
        ident("snapshot name", source)?;
        ident("branch_id", target)?;
        if let Some(v) = verify {
            names::check_table(&v.table)?;
            names::check_key("tenant_id", &v.tenant_id)?;
            names::check_key("id", &v.id)?;
        }
        let mut catalog = self.catalog.lock();
        // a snapshot the catalog does not name may be a backup an operator
        // copied into `snapshots/` (docs/operations.md, "Restoring a
        // backup"): it is adopted by the restore that names it, its
        // `snapshot.json` giving the entry a catalog edit had had to
        let (snap, adopted) = match catalog.snapshots.iter().find(|s| s.name == source).cloned() {
            Some(snap) => (snap, false),
            None => (placed_snapshot(&self.config.data_dir, source)?, true),
        };
        let db = snap.database_id.clone();
        if let Seen::Done(name) = catalog.seen(key, self.config.branch.receipt_retention_ms)? {
            if catalog.branches.iter().any(|b| b.database_id == db && b.branch_id == name) {
                drop(catalog);
                let epoch = self.branch(Some(&db), Some(&name))?.state.read().latest_epoch;
                let verified = verify.map(|v| self.get(Some(&db), Some(&name), v, None)).transpose()?;
                return Ok(RestoreOutcome {
                    restored: true,
                    source: source.to_string(),
                    target: name,
                    epoch,
                    verified,
                    replayed: true,
                });
            }
        }
        if catalog.branches.iter().any(|b| b.database_id == db && b.branch_id == target) {
            bail!(BranchExists, "branch {db}/{target} already exists");
        }
        let src = snapshot_dir(&self.config.data_dir, source)?;
        let dir = branch_dir(&self.config.data_dir, &db, target);
        unnamed_dir_free(&dir, &format!("db/{db}/{target}"), RESTORING, Code::BranchExists)?;
        wal::create_private_dir(&dir)?;
        // marks the directory as a restore's until the catalog names it: a
        // start removes a directory the catalog does not name only with it
        write_durable(&dir.join(RESTORING), b"")?;
        // a snapshot's files are immutable: the new branch links them (an
        // old snapshot's single log is copied, since the branch appends to it)
        let opened = (|| -> Result<_> {
            let mut files = Vec::new();
            for entry in std::fs::read_dir(&src)? {
                let path = entry?.path();
                match path.file_name().and_then(|n| n.to_str()) {
                    Some("snapshot.json" | SNAPSHOTTING) => {}
                    Some(WAL_FILE) => wal::copy_prefix(&path, &dir.join(WAL_FILE), std::fs::metadata(&path)?.len())?,
                    _ => files.push(path),
                }
            }
            wal::link_or_copy(&files, &dir)?;
            crate::storage::checkpoint::start_tail(&dir)?;
            let branch = Branch::open(&dir, self.config.branch.clone())?;
            let epoch = branch.state.read().latest_epoch;
            if epoch != snap.epoch {
                // found by a black-box test: a snapshot whose checkpoint
                // image was deleted restored as an empty branch at epoch 0
                branch.close();
                return Err(Error::storage(format!(
                    "its files open at epoch {epoch}, not the epoch {} it was taken at: a file of {} is missing or damaged (braid doctor)",
                    snap.epoch,
                    src.display()
                )));
            }
            let verified = verify.map(|v| read_record(&branch.state.read(), v)).transpose();
            match verified {
                Ok(verified) => Ok((branch, epoch, verified)),
                Err(e) => {
                    branch.close();
                    Err(e)
                }
            }
        })();
        // a restore that failed (no file descriptors left, a full disk)
        // leaves no directory the catalog does not name
        let (branch, epoch, verified) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(restore_error(e, source, &src, &dir));
            }
        };
        let mut next = catalog.clone();
        if adopted {
            next.snapshots.push(snap.clone());
        }
        next.branches.push(BranchMeta {
            database_id: db.clone(),
            branch_id: target.to_string(),
            parent_branch_id: Some(snap.branch_id.clone()),
            state: "active".into(),
            created_ms: now_ms(),
            source_snapshot: Some(source.to_string()),
        });
        next.remember(key, target, self.config.branch.receipt_retention_ms);
        if let Err(e) = self.commit_catalog(&mut catalog, next) {
            branch.close();
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let _ = std::fs::remove_file(dir.join(RESTORING));
        {
            let mut branches = self.branches.write();
            if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                // the engine closed while this ran: the branch is on disk and in
                // the catalog (the next open serves it), but not left running,
                // with its threads and its text index's lock, in a closed engine
                drop(branches);
                branch.close();
            } else {
                branches.insert((db, target.to_string()), Arc::new(branch));
            }
        }
        Ok(RestoreOutcome {
            restored: true,
            source: source.to_string(),
            target: target.to_string(),
            epoch,
            verified,
            replayed: false,
        })
    }

    /// Archives (read-only) or reactivates a branch.
    pub fn set_branch_state(&self, database: Option<&str>, branch: Option<&str>, archived: bool) -> Result<()> {
        let db = database.unwrap_or(DEFAULT_DATABASE);
        let br = branch.unwrap_or(DEFAULT_BRANCH);
        let handle = self.branch(Some(db), Some(br))?;
        let mut catalog = self.catalog.lock();
        let mut next = catalog.clone();
        for meta in next.branches.iter_mut().filter(|m| m.database_id == db && m.branch_id == br) {
            meta.state = if archived { "archived" } else { "active" }.into();
        }
        self.commit_catalog(&mut catalog, next)?;
        handle.set_archived(archived);
        Ok(())
    }

    pub fn branches(&self, endpoint: &str) -> Vec<BranchSummary> {
        let catalog = self.catalog.lock();
        let handles = self.branches.read();
        catalog
            .branches
            .iter()
            .map(|m| BranchSummary {
                branch_id: m.branch_id.clone(),
                database_id: m.database_id.clone(),
                endpoint: endpoint.to_string(),
                latest_epoch: handles
                    .get(&(m.database_id.clone(), m.branch_id.clone()))
                    .map_or(0, |b| b.state.read().latest_epoch),
                parent_branch_id: m.parent_branch_id.clone(),
                state: m.state.clone(),
            })
            .collect()
    }

    /// Metrics of one branch (epochs, schemas, indexes, the committer's
    /// counters, index lag, memory estimates) plus engine-wide counts.
    ///
    /// The service reads metrics on its JS thread (readiness, `/metrics`), so
    /// this waits at most [`METRICS_WAIT`] for the branch's state: a commit
    /// applying a huge record holds it for up to a second (tokenising 1.8
    /// million distinct words), which had stalled every request of the server
    /// behind one readiness probe (found by a black-box test). Meanwhile it
    /// answers the branch's last figures, which the commit being applied has
    /// not changed for any reader yet.
    pub fn metrics(&self, database: Option<&str>, branch: Option<&str>) -> Result<Metrics> {
        let handle = self.branch(database, branch)?;
        let (branch_count, database_count) = {
            let open = self.branches.read();
            let databases: std::collections::HashSet<&str> = open.keys().map(|(db, _)| db.as_str()).collect();
            (open.len() as u64, databases.len() as u64)
        };
        let cache_key =
            (database.unwrap_or(DEFAULT_DATABASE).to_string(), branch.unwrap_or(DEFAULT_BRANCH).to_string());
        let state = match handle.state.try_read_for(METRICS_WAIT) {
            Some(state) => state,
            None => match self.last_metrics.lock().get(&cache_key) {
                Some(last) => return Ok(Metrics { branch_count, database_count, ..last.clone() }),
                None => handle.state.read(),
            },
        };
        let vector_indexes: u64 = state.tables.values().map(|t| t.vectors.len() as u64).sum();
        let scalar_indexes: u64 = state.tables.values().map(|t| t.scalar.len() as u64).sum();
        // per table: tenant masks and the text index scope, plus vector graphs and scalar bitmaps
        let index_count = state.tables.len() as u64 * 2 + vector_indexes + scalar_indexes;
        let rows = state.rows.len() as u32;
        let index_lag = IndexLag {
            text_rows: u64::from(rows.saturating_sub(handle.text.watermark())),
            vector_rows: u64::from(rows.saturating_sub(handle.vector_watermark())),
        };
        let recovery_state = if handle.is_failed() {
            "failed"
        } else if handle.recovered_truncated_bytes > 0 {
            "recovered"
        } else {
            "healthy"
        };
        let metrics = Metrics {
            durable_epoch: state.durable_epoch,
            latest_epoch: state.latest_epoch,
            index_count,
            module_count: crate::module_versions().len() as u64,
            schema_count: state.schemas.len() as u64,
            schema_epoch: state.schema_epoch,
            segment_count: handle.text.segment_count() as u64,
            record_count: state.live_records(),
            version_count: state.rows.len() as u64 - state.purged_rows,
            branch_count,
            database_count,
            recovery_state: recovery_state.to_string(),
            recovered_truncated_bytes: handle.recovered_truncated_bytes,
            indexer_state: handle.indexer_health().as_str().to_string(),
            failed_feature_count: handle.shared.failed_features.load(std::sync::atomic::Ordering::Relaxed)
                + state.invalid_vectors,
            receipt_count: state.receipts.len() as u64,
            wal: handle.stats().wal(),
            checkpoints: handle.stats().checkpoints(now_ms()),
            retention: handle.stats().retention(handle.horizon(&state), state.purged_rows),
            index_lag,
            vector_graphs: stats::vector_graphs(&state),
            memory: stats::memory(&state, handle.text.row_map_bytes()),
        };
        self.last_metrics.lock().insert(cache_key, metrics.clone());
        Ok(metrics)
    }

    /// Drains the events every branch recorded since the last call (recovery,
    /// checkpoints, indexer catch-up and failures, storage faults), oldest
    /// first. Works after `close`, so the events of the close are not lost.
    pub fn events(&self) -> Vec<BranchEvent> {
        let mut out: Vec<BranchEvent> = Vec::new();
        for ((database_id, branch_id), branch) in self.branches.read().iter() {
            out.extend(branch.drain_events().into_iter().map(|event| BranchEvent {
                database_id: database_id.clone(),
                branch_id: branch_id.clone(),
                event,
            }));
        }
        // stable: a branch's events keep their order within one millisecond
        out.sort_by_key(|e| e.event.at_ms);
        out
    }

    /// Makes `next` the catalog: on disk first, then in memory, so a failed
    /// write leaves both as they were.
    fn commit_catalog(&self, current: &mut Catalog, next: Catalog) -> Result<()> {
        save_catalog(&self.config.data_dir.join("catalog.json"), &next)?;
        *current = next;
        Ok(())
    }

    /// Finishes queued writes on every branch, stops their threads and
    /// releases the data directory.
    pub fn close(&self) {
        let open: Vec<Arc<Branch>> = {
            let branches = self.branches.write();
            self.closed.store(true, std::sync::atomic::Ordering::Release);
            branches.values().cloned().collect()
        };
        // found by a black-box test: SIGTERM right after 60 restores took 40
        // s, each branch's indexer finishing its round only once the one
        // before had closed
        for branch in &open {
            branch.begin_close();
        }
        for branch in open {
            branch.close();
        }
        self.lock.lock().take();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.close();
    }
}

fn read_record(state: &crate::storage::State, key: &RecordKey) -> Result<Option<RecordOutput>> {
    let Some(row) = state.visible_version(&key.table, &key.tenant_id, &key.id, state.latest_epoch) else {
        return Ok(None);
    };
    record_output(state, key, row, state.fields(row, None)?)
}

fn record_output(
    state: &crate::storage::State,
    key: &RecordKey,
    row: u32,
    fields: Map<String, Value>,
) -> Result<Option<RecordOutput>> {
    Ok(Some(RecordOutput {
        fields,
        id: key.id.clone(),
        table: key.table.clone(),
        tenant_id: key.tenant_id.clone(),
        version_id: state.rows[row as usize].version_id,
    }))
}

/// The open branches, by (database, branch).
type Branches = HashMap<(String, String), Arc<Branch>>;

/// A record key's names, checked as a write checks them.
fn check_key_names(key: &RecordKey) -> Result<()> {
    names::check_table(&key.table)?;
    names::check_key("tenant_id", &key.tenant_id)?;
    names::check_key("id", &key.id)
}

/// The version of `key` visible at `epoch` (the latest by default), its
/// fields read by `read`; `None` when `read` would wait.
fn get_from(
    branch: &Branch,
    state: &crate::storage::State,
    key: &RecordKey,
    epoch: Option<u64>,
    read: impl FnOnce(u32) -> Option<Result<Map<String, Value>>>,
) -> Option<Result<Option<RecordOutput>>> {
    let checked = || -> Result<u64> {
        let horizon = branch.horizon(state);
        match epoch {
            Some(e) if e < horizon => {
                bail!(TemporalBeforeHorizon, "epoch {e} is below the retained horizon {horizon}")
            }
            // as a query's temporal_as_of: an epoch not yet written has no versions to read
            Some(e) if e > state.latest_epoch => {
                bail!(TemporalInFuture, "epoch {e} is after the latest epoch {}", state.latest_epoch)
            }
            _ => Ok(epoch.unwrap_or(state.latest_epoch)),
        }
    };
    let at = match checked() {
        Ok(at) => at,
        Err(e) => return Some(Err(e)),
    };
    let Some(row) = state.visible_version(&key.table, &key.tenant_id, &key.id, at) else { return Some(Ok(None)) };
    Some(read(row)?.and_then(|fields| record_output(state, key, row, fields)))
}

/// A restore's failure as its client can act on it: about the snapshot, and
/// naming the snapshot's files, not the new branch's links to them, which
/// the failure removed (found by a black-box test: a damaged snapshot's
/// error named a branch directory that no longer existed).
/// Names rayon's global pool (a checkpoint's parallel load, key directory
/// builds), which is the process's, shared by every engine and kept after
/// they close: unnamed, its threads took the name of the thread that first
/// used it (`braid-index`), and read as an indexer left running by a
/// closed engine. Nothing when the host process built the pool itself.
fn name_shared_pool() {
    static NAMED: std::sync::Once = std::sync::Once::new();
    NAMED.call_once(|| {
        let _ = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("braid-pool-{i}")).build_global();
    });
}

fn restore_error(e: Error, source: &str, snapshot_dir: &Path, branch_dir: &Path) -> Error {
    let message = e.message.replace(&*branch_dir.to_string_lossy(), &snapshot_dir.to_string_lossy());
    Error { message: format!("snapshot {source:?} cannot be restored: {message}"), ..e }
}

/// What a start of `data` would refuse besides a damaged log (`braid
/// doctor`): the checks of [`Engine::open`] and `Branch::open` that read no
/// log, each as the start would say it.
pub fn start_problems(data: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let catalog: Option<Catalog> = match std::fs::read(data.join("catalog.json")) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(catalog) => Some(catalog),
            Err(e) => {
                problems.push(format!("catalog.json: {e}"));
                return problems;
            }
        },
        Err(_) => {
            if let Err(e) = refuse_without_catalog(data) {
                problems.push(e.message);
            }
            None
        }
    };
    let mut dirs = Vec::new();
    if let Some(catalog) = &catalog {
        for meta in &catalog.branches {
            let dir = branch_dir(data, &meta.database_id, &meta.branch_id);
            // main too: a start creates it only when the catalog does not name it
            match check_branch_dir(meta, &dir) {
                Ok(()) => dirs.push(dir),
                Err(e) => problems.push(e.message),
            }
        }
        // a restore reads these (found by a black-box test: a snapshot whose
        // directory was gone was called healthy, and its restore said only
        // "No such file or directory")
        for snap in &catalog.snapshots {
            if let Err(e) = snapshot_dir(data, &snap.name) {
                problems.push(e.message);
            }
        }
    }
    for dir in dirs {
        let checked = crate::storage::checkpoint::latest(&dir).and_then(|ckpt| {
            crate::storage::checkpoint::check_tail(&dir, ckpt)?;
            check_checkpoint(&dir, ckpt)
        });
        if let Err(e) = checked {
            problems.push(e.message);
        }
    }
    problems
}

/// The checks of a start that read a branch's (or snapshot's) checkpoint
/// `ckpt` without applying it: its image and the files it names, and the
/// trailers of its vector files (`braid doctor`).
pub fn check_checkpoint(dir: &Path, ckpt: Option<u32>) -> Result<()> {
    if let Some(gen) = ckpt {
        crate::storage::checkpoint::check_image(dir, gen)?;
    }
    crate::storage::checkpoint::check_vector_files(dir, ckpt)
}

fn is_main(meta: &BranchMeta) -> bool {
    meta.database_id == DEFAULT_DATABASE && meta.branch_id == DEFAULT_BRANCH
}

/// The directory of the snapshot the catalog names `name`, which a restore
/// reads.
/// The snapshot in `snapshots/<name>/` that the catalog does not name: a
/// finished snapshot (no mark of one under way) whose `snapshot.json` reads,
/// under the name of its directory, or `snapshot_not_found`.
fn placed_snapshot(data: &Path, name: &str) -> Result<SnapshotMeta> {
    let dir = data.join("snapshots").join(name);
    let not_found = || Error::new(Code::SnapshotNotFound, format!("snapshot {name:?} does not exist"));
    if !dir.is_dir() || dir.join(SNAPSHOTTING).exists() {
        return Err(not_found());
    }
    let bytes = match std::fs::read(dir.join("snapshot.json")) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let mut meta: SnapshotMeta = serde_json::from_slice(&bytes).map_err(|e| {
        Error::storage(format!(
            "{} is not a snapshot's description ({e}); copy the whole snapshot directory",
            dir.join("snapshot.json").display()
        ))
    })?;
    ident("the snapshot's database_id", &meta.database_id)?;
    ident("the snapshot's branch_id", &meta.branch_id)?;
    meta.name = name.to_string();
    Ok(meta)
}

fn snapshot_dir(data: &Path, name: &str) -> Result<PathBuf> {
    let dir = data.join("snapshots").join(name);
    if dir.is_dir() {
        return Ok(dir);
    }
    Err(Error::storage(format!(
        "snapshot {name:?} is in catalog.json but its directory {} is missing; put it back to restore it",
        dir.display()
    )))
}

/// A branch the catalog names must have its directory: without it, a start
/// had brought the branch up empty, every write gone, and healthy (found by
/// a black-box test).
fn check_branch_dir(meta: &BranchMeta, dir: &Path) -> Result<()> {
    if dir.exists() {
        return Ok(());
    }
    Err(Error::storage(format!(
        "branch {}/{} is in catalog.json but its directory {} is missing; put it back, or remove the branch from catalog.json to start without it",
        meta.database_id,
        meta.branch_id,
        dir.display()
    )))
}

/// The file that marks a branch directory as a restore's until the catalog
/// names the branch.
const RESTORING: &str = ".restoring";

/// The file that marks a snapshot directory as a snapshot's until the
/// catalog names it.
const SNAPSHOTTING: &str = ".snapshotting";

/// Makes way for a snapshot or a restore's directory `dir`, which the
/// catalog does not name: one holding `mark` was left by a snapshot or a
/// restore that never finished (this engine's own) and is removed; any
/// other is refused with `code`, not replaced. It is an operator's (found by
/// a black-box review: a backup copied into `snapshots/` under a new name,
/// and a directory of files under `db/`, were overwritten by a snapshot and a
/// restore of that name).
fn unnamed_dir_free(dir: &Path, shown: &str, mark: &str, code: Code) -> Result<()> {
    if dir.join(mark).exists() {
        std::fs::remove_dir_all(dir)?;
    } else if is_empty_dir(dir) {
        // a restore killed between making its directory and marking it
        std::fs::remove_dir(dir)?;
    } else if std::fs::symlink_metadata(dir).is_ok() {
        return Err(Error::new(
            code,
            format!("the data directory's {shown} exists and the catalog does not name it (put there by hand?): name it in catalog.json or move it away"),
        ));
    }
    Ok(())
}

/// Removes what a snapshot or a restore killed part way left (found by a
/// black-box test, which left four and then eleven behind): a snapshot's
/// temporary directory (`snapshots/.<name>.tmp`), and a snapshot or branch
/// directory the catalog does not name that holds a snapshot's or a
/// restore's mark. Such a directory was
/// never acknowledged (the catalog is written last); nothing reads it, and
/// its hard links kept alive files that retention had deleted from the
/// branch they came from. Any other directory the catalog does not name is
/// left as it is: a snapshot an operator put there to restore from (a
/// black-box test saw such a backup removed), or whatever it is, an
/// operator's to judge.
fn remove_unfinished(data: &Path, catalog: &Catalog) -> Result<()> {
    for (name, path) in subdirs(&data.join("snapshots"))? {
        let named = catalog.snapshots.iter().any(|s| s.name == name);
        if !named && ((name.starts_with('.') && name.ends_with(".tmp")) || path.join(SNAPSHOTTING).exists()) {
            std::fs::remove_dir_all(path)?;
        } else if named {
            // a snapshot that finished: its mark may outlive the catalog write
            let _ = std::fs::remove_file(path.join(SNAPSHOTTING));
        }
    }
    for (database, path) in subdirs(&data.join("db"))? {
        for (branch, path) in subdirs(&path)? {
            let named = catalog.branches.iter().any(|b| b.database_id == database && b.branch_id == branch);
            if !named && path.join(RESTORING).exists() {
                std::fs::remove_dir_all(path)?;
            } else if !named && is_empty_dir(&path) {
                // a restore killed between making its directory and marking
                // it (found by a black-box test: the name was then refused
                // as a directory put there by hand, also to the retry)
                std::fs::remove_dir(path)?;
            }
        }
    }
    Ok(())
}

/// Whether `path` is a directory with nothing in it: nothing an operator
/// could lose.
fn is_empty_dir(path: &Path) -> bool {
    std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
}

/// The directories in `path`, by name (none when `path` does not exist).
fn subdirs(path: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push((entry.file_name().to_string_lossy().into_owned(), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// A start without catalog.json would serve main alone: refused when the
/// data directory holds other branches or snapshots, which the catalog
/// names (found by a black-box test: that start removed them all).
fn refuse_without_catalog(data: &Path) -> Result<()> {
    let mut held = Vec::new();
    for (database, path) in subdirs(&data.join("db"))? {
        for (branch, _) in subdirs(&path)? {
            if !(database == DEFAULT_DATABASE && branch == DEFAULT_BRANCH) {
                held.push(format!("db/{database}/{branch}"));
            }
        }
    }
    for (name, _) in subdirs(&data.join("snapshots"))? {
        if !name.starts_with('.') {
            held.push(format!("snapshots/{name}"));
        }
    }
    if held.is_empty() {
        return Ok(());
    }
    Err(Error::storage(format!(
        "{} has no catalog.json, but holds branches or snapshots that it would name ({}); put catalog.json back (a start without it would serve main alone)",
        data.display(),
        held.join(", ")
    )))
}

fn branch_dir(data: &Path, database: &str, branch: &str) -> PathBuf {
    data.join("db").join(database).join(branch)
}

fn write_durable(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut file = wal::create_private(path, true)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

fn save_catalog(path: &Path, catalog: &Catalog) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let written = write_durable(&tmp, &serde_json::to_vec_pretty(catalog).expect("catalog serialises"))
        .and_then(|()| Ok(crate::faults::check("catalog::save")?))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(Into::into));
    if written.is_err() {
        // a half-written copy (a full disk) is not left beside the catalog;
        // the catalog itself was never touched
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    fsutil::sync_dir(path)?;
    Ok(())
}

fn load_secret(path: &Path) -> Result<Vec<u8>> {
    if let Ok(bytes) = std::fs::read(path) {
        if bytes.len() == 32 {
            return Ok(bytes);
        }
    }
    let mut bytes = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    write_durable(path, &bytes)?;
    fsutil::sync_dir(path)?;
    Ok(bytes)
}

/// Parses the `columns` argument of a table declaration.
pub fn parse_columns(value: &Value) -> Result<BTreeMap<String, ColumnDeclaration>> {
    serde_json::from_value(value.clone()).map_err(|e| Error::new(Code::InvalidRecord, format!("columns: {e}")))
}
