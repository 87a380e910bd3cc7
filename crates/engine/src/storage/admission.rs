//! Admission of writes: validating one write request against the branch's
//! state plus what earlier requests of the same commit group staged, and
//! turning it into the commit (one epoch) the committer logs.
//!
//! Only the committer thread (storage/committer.rs) calls in here: for each
//! group it builds one `Stage` over the state it holds a read lock on, and
//! `Stage::admit` answers each job with a `Staged`: a commit to log, a
//! receipt to replay, or nothing to do. A stage writes nothing shared; it
//! keeps what earlier jobs of its group staged (schemas, version ids,
//! idempotency keys) to itself, and is dropped with the group.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::bail;
use crate::error::{Code, Error, Result};
use crate::model::RecordInput;
use crate::names;
use crate::schema::TableSchema;
use crate::storage::commit::{now_ms, raw_json, Commit, Receipt, ReceiptDraft, WalRow};
use crate::storage::pipeline::{BranchConfig, WriteOp};
use crate::storage::state::{key_string, State};

/// What admitting one write request came to: a commit to log (with its
/// record count and receipt), a stored receipt to answer with, or nothing to
/// write (the epoch it read).
pub(super) enum Staged {
    Commit(Box<Commit>, usize, Option<Receipt>),
    Replay(Receipt),
    Noop(u64),
}

fn staged(commit: Commit, count: usize, receipt: Option<Receipt>) -> Staged {
    Staged::Commit(Box::new(commit), count, receipt)
}

/// What a staged write did, for its receipt.
#[derive(Clone, Copy)]
struct Outcome {
    epoch: u64,
    count: usize,
    changed: bool,
}

/// Validation of a group of jobs against the state and what earlier jobs of
/// the same group staged.
pub(super) struct Stage<'a> {
    state: &'a State,
    config: &'a BranchConfig,
    epoch: u64,
    schemas: HashMap<String, TableSchema>,
    versions: HashMap<String, u32>,
    receipts: HashSet<String>,
    /// Bytes of the receipts staged in this group ([`Receipt::bytes`]).
    receipt_bytes: u64,
}

impl<'a> Stage<'a> {
    pub(super) fn new(state: &'a State, config: &'a BranchConfig) -> Self {
        Stage {
            state,
            config,
            epoch: state.latest_epoch,
            schemas: HashMap::new(),
            versions: HashMap::new(),
            receipts: HashSet::new(),
            receipt_bytes: 0,
        }
    }

    fn schema(&self, table: &str) -> Option<&TableSchema> {
        self.schemas.get(table).or_else(|| self.state.schemas.get(table))
    }

    /// True when `op` carries an idempotency key a job of this group staged.
    pub(super) fn in_flight(&self, op: &WriteOp) -> bool {
        let draft = match op {
            WriteOp::Put { receipt, .. } | WriteOp::Delete { receipt, .. } => receipt.as_ref(),
            WriteOp::Receipt { receipt } => Some(receipt),
            WriteOp::Declare { .. } => None,
        };
        draft.is_some_and(|d| self.receipts.contains(&d.key))
    }

    fn check_receipt(&self, draft: Option<&ReceiptDraft>) -> Result<Option<Staged>> {
        let Some(draft) = draft else { return Ok(None) };
        let cutoff = now_ms().saturating_sub(self.config.receipt_retention_ms);
        match self.state.receipts.get(&draft.key) {
            Some(r) if r.created_ms >= cutoff && r.body_hash == draft.body_hash => Ok(Some(Staged::Replay(r.clone()))),
            Some(r) if r.created_ms >= cutoff => Err(Error::new(
                Code::IdempotencyKeyReused,
                "Idempotency-Key was already used with a different request body",
            )),
            _ => Ok(None),
        }
    }

    /// The receipt a write stores. A write route's body has placeholders for
    /// what only the commit knows: `epoch`, and for GraphQL mutations
    /// `record_count` and `changed`; members the body has are filled in. A
    /// receipt on its own (`outcome` None) stores the response as it is, or
    /// its `digest` once the branch's receipts would hold more than
    /// `receipt_memory_bytes` with it.
    fn receipt(&mut self, draft: Option<ReceiptDraft>, outcome: Option<Outcome>) -> Option<Receipt> {
        let mut draft = draft?;
        if let (Some(obj), Some(o)) = (draft.body.as_object_mut(), outcome) {
            for (name, value) in [
                ("epoch", Value::from(o.epoch)),
                ("record_count", Value::from(o.count)),
                ("changed", Value::from(o.changed)),
            ] {
                if obj.contains_key(name) {
                    obj.insert(name.into(), value);
                }
            }
        }
        let mut body = raw_json(&draft.body);
        if let Some(digest) = &draft.digest {
            let held = self.state.receipts.bytes() + self.receipt_bytes;
            if held + (draft.key.len() + draft.body_hash.len() + body.get().len()) as u64
                > self.config.receipt_memory_bytes
            {
                body = raw_json(digest);
            }
        }
        self.receipts.insert(draft.key.clone());
        let receipt =
            Receipt { key: draft.key, body_hash: draft.body_hash, status: draft.status, body, created_ms: now_ms() };
        self.receipt_bytes += receipt.bytes();
        Some(receipt)
    }

    pub(super) fn admit(&mut self, op: WriteOp) -> Result<Staged> {
        match op {
            WriteOp::Put { records, receipt } => {
                if let Some(s) = self.check_receipt(receipt.as_ref())? {
                    return Ok(s);
                }
                self.put(records, receipt)
            }
            WriteOp::Delete { table, tenant_id, id, receipt } => {
                if let Some(s) = self.check_receipt(receipt.as_ref())? {
                    return Ok(s);
                }
                names::check_table(&table)?;
                names::check_key("tenant_id", &tenant_id)?;
                names::check_key("id", &id)?;
                let key = key_string(&table, &tenant_id, &id);
                let exists = self.versions.contains_key(&key)
                    || self.state.visible_version(&table, &tenant_id, &id, self.state.latest_epoch).is_some();
                if !exists {
                    if receipt.is_none() {
                        return Ok(Staged::Noop(self.epoch));
                    }
                    let r = self.receipt(receipt, Some(Outcome { epoch: self.epoch, count: 0, changed: false }));
                    let commit = Commit {
                        epoch: self.epoch,
                        at_ms: now_ms(),
                        schemas: vec![],
                        rows: vec![],
                        receipt: r.clone(),
                    };
                    return Ok(staged(commit, 0, r));
                }
                let version_id = self.next_version(&table, &tenant_id, &id);
                self.epoch += 1;
                let rows = vec![WalRow { table, tenant_id, id, version_id, deleted: true, fields: Default::default() }];
                let r = self.receipt(receipt, Some(Outcome { epoch: self.epoch, count: 1, changed: true }));
                Ok(staged(
                    Commit { epoch: self.epoch, at_ms: now_ms(), schemas: vec![], rows, receipt: r.clone() },
                    1,
                    r,
                ))
            }
            WriteOp::Declare { table, columns } => {
                names::check_table(&table)?;
                let mut schema = self.schema(&table).cloned().unwrap_or_else(|| TableSchema::new(&table));
                let existed = self.schema(&table).is_some();
                let mut changed = !existed;
                for (name, column) in columns {
                    names::check_identifier("column", &name)?;
                    match schema.columns.get(&name) {
                        Some(existing) if *existing == column => {}
                        Some(existing) => bail!(
                            SchemaTypeMismatch,
                            "column {name:?} is already declared as {} (text={}, scalar={}); existing columns cannot be changed",
                            existing.ty.name(),
                            existing.text,
                            existing.scalar
                        ),
                        None => {
                            schema.columns.insert(name, column);
                            changed = true;
                        }
                    }
                }
                if !changed {
                    return Ok(Staged::Noop(self.epoch));
                }
                crate::schema::check_column_count(&table, schema.columns.len(), self.config.max_columns)?;
                self.epoch += 1;
                self.schemas.insert(table, schema.clone());
                Ok(staged(
                    Commit { epoch: self.epoch, at_ms: now_ms(), schemas: vec![schema], rows: vec![], receipt: None },
                    0,
                    None,
                ))
            }
            WriteOp::Receipt { receipt } => {
                if let Some(s) = self.check_receipt(Some(&receipt))? {
                    return Ok(s);
                }
                let r = self.receipt(Some(receipt), None);
                Ok(staged(
                    Commit { epoch: self.epoch, at_ms: now_ms(), schemas: vec![], rows: vec![], receipt: r.clone() },
                    0,
                    r,
                ))
            }
        }
    }

    fn next_version(&mut self, table: &str, tenant: &str, id: &str) -> u32 {
        let key = key_string(table, tenant, id);
        let next = match self.versions.get(&key) {
            Some(v) => v + 1,
            None => self.state.last_version_id(table, tenant, id) + 1,
        };
        self.versions.insert(key, next);
        next
    }

    fn put(&mut self, records: Vec<RecordInput>, receipt: Option<ReceiptDraft>) -> Result<Staged> {
        if records.is_empty() {
            bail!(BatchEmpty, "a write needs at least one record");
        }
        if records.len() > self.config.max_batch {
            bail!(BatchTooLarge, "{} records exceed the batch limit of {}", records.len(), self.config.max_batch);
        }
        // validate everything before staging anything, so a bad record leaves
        // the stage untouched
        let mut schemas: HashMap<String, TableSchema> = HashMap::new();
        for (i, record) in records.iter().enumerate() {
            record.validate_names().map_err(|e| e.at_index(i))?;
            let schema = match schemas.get_mut(&record.table) {
                Some(s) => s,
                None => {
                    let base = self.schema(&record.table).cloned();
                    let s = base.unwrap_or_else(|| TableSchema::new(&record.table));
                    schemas.entry(record.table.clone()).or_insert(s)
                }
            };
            schema
                .admit(&record.fields, self.config.max_vector_dim, self.config.max_columns)
                .map_err(|e| e.at_index(i))?;
        }
        let changed: Vec<TableSchema> = schemas.into_values().filter(|s| self.schema(&s.name) != Some(s)).collect();
        for s in &changed {
            self.schemas.insert(s.name.clone(), s.clone());
        }
        self.epoch += 1;
        let count = records.len();
        let rows = records
            .into_iter()
            .map(|r| {
                let version_id = self.next_version(&r.table, &r.tenant_id, &r.id);
                WalRow {
                    table: r.table,
                    tenant_id: r.tenant_id,
                    id: r.id,
                    version_id,
                    deleted: false,
                    fields: r.fields,
                }
            })
            .collect();
        let r = self.receipt(receipt, Some(Outcome { epoch: self.epoch, count, changed: true }));
        Ok(staged(Commit { epoch: self.epoch, at_ms: now_ms(), schemas: changed, rows, receipt: r.clone() }, count, r))
    }
}
