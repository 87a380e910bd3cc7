//! The engine's one error type. Every failure has a stable machine-readable
//! code; the service maps codes to HTTP statuses in `src/errors.ts` and never
//! branches on message text.

use std::fmt;

/// Stable error codes. The string forms are part of the public API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidName,
    InvalidRecord,
    InvalidQuery,
    SchemaTypeMismatch,
    VectorDimensionMismatch,
    VectorDimensionTooLarge,
    VectorNotFinite,
    TooManyTerms,
    BatchTooLarge,
    BatchEmpty,
    TooManyColumns,
    UnknownTable,
    UnknownColumn,
    TopKOutOfRange,
    TemporalBeforeHorizon,
    TemporalInFuture,
    InvalidCursor,
    CursorExpired,
    CursorQueryMismatch,
    BranchNotFound,
    BranchExists,
    BranchArchived,
    SnapshotNotFound,
    SnapshotExists,
    IdempotencyKeyReused,
    StorageFailure,
    WalCorrupt,
    FormatUnsupported,
    DataDirLocked,
    InternalPanic,
    Internal,
    ShuttingDown,
}

impl Code {
    /// Every code, in declaration order (the binding exports the table).
    pub const ALL: [Code; 32] = [
        Code::InvalidName,
        Code::InvalidRecord,
        Code::InvalidQuery,
        Code::SchemaTypeMismatch,
        Code::VectorDimensionMismatch,
        Code::VectorDimensionTooLarge,
        Code::VectorNotFinite,
        Code::TooManyTerms,
        Code::BatchTooLarge,
        Code::BatchEmpty,
        Code::TooManyColumns,
        Code::UnknownTable,
        Code::UnknownColumn,
        Code::TopKOutOfRange,
        Code::TemporalBeforeHorizon,
        Code::TemporalInFuture,
        Code::InvalidCursor,
        Code::CursorExpired,
        Code::CursorQueryMismatch,
        Code::BranchNotFound,
        Code::BranchExists,
        Code::BranchArchived,
        Code::SnapshotNotFound,
        Code::SnapshotExists,
        Code::IdempotencyKeyReused,
        Code::StorageFailure,
        Code::WalCorrupt,
        Code::FormatUnsupported,
        Code::DataDirLocked,
        Code::InternalPanic,
        Code::Internal,
        Code::ShuttingDown,
    ];

    /// The HTTP status the service answers this code with (docs/errors.md):
    /// 400 for a request the engine refuses, 404 for a missing branch or
    /// snapshot, 409 for a conflict with what exists, 500 for a fault of
    /// Braid's own, 503 for a store that cannot serve now.
    pub fn status(self) -> u16 {
        match self {
            Code::BranchNotFound | Code::SnapshotNotFound => 404,
            Code::BranchExists | Code::BranchArchived | Code::SnapshotExists | Code::IdempotencyKeyReused => 409,
            Code::InternalPanic | Code::Internal => 500,
            Code::StorageFailure
            | Code::WalCorrupt
            | Code::FormatUnsupported
            | Code::DataDirLocked
            | Code::ShuttingDown => 503,
            _ => 400,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidName => "invalid_name",
            Code::InvalidRecord => "invalid_record",
            Code::InvalidQuery => "invalid_query",
            Code::SchemaTypeMismatch => "schema_type_mismatch",
            Code::VectorDimensionMismatch => "vector_dimension_mismatch",
            Code::VectorDimensionTooLarge => "vector_dimension_too_large",
            Code::VectorNotFinite => "vector_not_finite",
            Code::TooManyTerms => "too_many_terms",
            Code::BatchTooLarge => "batch_too_large",
            Code::BatchEmpty => "batch_empty",
            Code::TooManyColumns => "too_many_columns",
            Code::UnknownTable => "unknown_table",
            Code::UnknownColumn => "unknown_column",
            Code::TopKOutOfRange => "top_k_out_of_range",
            Code::TemporalBeforeHorizon => "temporal_before_horizon",
            Code::TemporalInFuture => "temporal_in_future",
            Code::InvalidCursor => "invalid_cursor",
            Code::CursorExpired => "cursor_expired",
            Code::CursorQueryMismatch => "cursor_query_mismatch",
            Code::BranchNotFound => "branch_not_found",
            Code::BranchExists => "branch_exists",
            Code::BranchArchived => "branch_archived",
            Code::SnapshotNotFound => "snapshot_not_found",
            Code::SnapshotExists => "snapshot_exists",
            Code::IdempotencyKeyReused => "idempotency_key_reused",
            Code::StorageFailure => "storage_failure",
            Code::WalCorrupt => "wal_corrupt",
            Code::FormatUnsupported => "format_unsupported",
            Code::DataDirLocked => "data_dir_locked",
            Code::InternalPanic => "internal_panic",
            Code::Internal => "internal_error",
            Code::ShuttingDown => "shutting_down",
        }
    }
}

/// An engine error: a stable code and a lowercase human message.
#[derive(Debug, Clone)]
pub struct Error {
    pub code: Code,
    pub message: String,
    /// Index of the offending record inside a batch, when there is one.
    pub index: Option<usize>,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Error { code, message: message.into(), index: None }
    }

    pub fn at_index(mut self, index: usize) -> Self {
        self.index = Some(index);
        self.message = format!("records[{index}]: {}", self.message);
        self
    }

    pub fn storage(err: impl fmt::Display) -> Self {
        Error::new(Code::StorageFailure, format!("storage failure: {err}"))
    }

    pub fn internal(err: impl fmt::Display) -> Self {
        Error::new(Code::Internal, err.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        Error::storage(err)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for an early `Err` with a code and a formatted message.
#[macro_export]
macro_rules! bail {
    ($code:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::Code::$code, format!($($arg)*)))
    };
}
