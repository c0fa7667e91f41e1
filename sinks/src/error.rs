//! The one error type of this crate.

use arrow::datatypes::DataType;
use std::path::PathBuf;

/// Everything that can go wrong writing or reading a snapshot. Every variant names the file
/// (or directory) it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// A file system operation failed.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`creating`, `renaming to …`, `syncing`...).
        op: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The Parquet library failed: unreadable, truncated or corrupt file, or a write error.
    #[error("{}: corrupt or unreadable parquet: {source}", path.display())]
    Parquet {
        /// The Parquet file.
        path: PathBuf,
        /// The underlying error.
        source: parquet::errors::ParquetError,
    },
    /// Building or reading an Arrow batch failed.
    #[error("{}: arrow: {source}", path.display())]
    Arrow {
        /// The Parquet file.
        path: PathBuf,
        /// The underlying error.
        source: arrow::error::ArrowError,
    },
    /// A table file of the snapshot does not exist.
    #[error("{}: missing table file", path.display())]
    MissingFile {
        /// The expected path.
        path: PathBuf,
    },
    /// A file has a different number of columns than its table's schema.
    #[error("{}: has {found} columns, expected {expected}", path.display())]
    ColumnCount {
        /// The Parquet file.
        path: PathBuf,
        /// Number of columns in the file.
        found: usize,
        /// Number of columns of the schema.
        expected: usize,
    },
    /// A column has another name than the schema says at that position.
    #[error("{}: column {index} is named '{found}', expected '{expected}'", path.display())]
    ColumnName {
        /// The Parquet file.
        path: PathBuf,
        /// Position of the column (0-based).
        index: usize,
        /// The name in the file.
        found: String,
        /// The name of the schema.
        expected: String,
    },
    /// A column has another Arrow type than the schema says.
    #[error("{}: column '{column}' has type {found}, expected {expected}", path.display())]
    ColumnType {
        /// The Parquet file.
        path: PathBuf,
        /// Column name.
        column: String,
        /// The type in the file.
        found: DataType,
        /// The type of the schema.
        expected: DataType,
    },
    /// A column's nullability differs from the schema.
    #[error("{}: column '{column}' has nullable={found}, expected nullable={expected}", path.display())]
    ColumnNullability {
        /// The Parquet file.
        path: PathBuf,
        /// Column name.
        column: String,
        /// Nullability in the file.
        found: bool,
        /// Nullability of the schema.
        expected: bool,
    },
    /// A value cannot be turned back into the Rust record: an unknown enum name, a null
    /// where the row's kind needs a value, a number out of range.
    #[error("{}: row {row}, column '{column}': {problem}", path.display())]
    BadValue {
        /// The Parquet file.
        path: PathBuf,
        /// Row number within the file (0-based).
        row: u64,
        /// Column name.
        column: &'static str,
        /// What is wrong, with the offending value.
        problem: String,
    },
    /// `manifest.json` is not valid JSON or lacks fields.
    #[error("{}: invalid manifest: {source}", path.display())]
    Manifest {
        /// Path of `manifest.json`.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// `manifest.json` was written with another layout version.
    #[error(
        "{}: schema_version {} is not supported (this build reads version {expected})",
        path.display(),
        found.map_or_else(|| "missing".to_string(), |v| v.to_string())
    )]
    SchemaVersion {
        /// Path of `manifest.json`.
        path: PathBuf,
        /// The version found (`None` when the field is missing or not a number).
        found: Option<u64>,
        /// The version this build reads.
        expected: u32,
    },
    /// A table file holds another number of rows than the manifest says.
    #[error("{}: holds {found} rows, manifest.json says {expected}", path.display())]
    RowCount {
        /// The Parquet file.
        path: PathBuf,
        /// Rows in the file.
        found: u64,
        /// Rows according to the manifest.
        expected: u64,
    },
    /// The snapshot target exists and is not a previous snapshot (no `manifest.json`) nor an
    /// empty directory: it is never replaced.
    #[error(
        "{}: refusing to replace: exists and is not an argus snapshot (no manifest.json) nor an empty directory",
        path.display()
    )]
    NotASnapshot {
        /// The target path.
        path: PathBuf,
    },
    /// The snapshot target path has no final component (`/`, `..`).
    #[error("{}: not a usable snapshot directory name", path.display())]
    BadTarget {
        /// The target path.
        path: PathBuf,
    },
    /// The caller's record iterator failed while a table was being written.
    #[error("{table}: input failed: {source}")]
    Input {
        /// File name of the table being written.
        table: &'static str,
        /// The caller's error.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An earlier call on this writer failed, so it cannot produce a consistent snapshot.
    #[error("{}: an earlier write failed; the snapshot was not written", path.display())]
    WriterFailed {
        /// The target path.
        path: PathBuf,
    },
    /// A consolidated collection holds a record with a multiplicity other than 0 or 1.
    #[error("collection '{collection}': {records} records with multiplicity other than 0 or 1, first: {first} has count {count}")]
    Multiplicity {
        /// Name given to the collection sink.
        collection: String,
        /// How many distinct records are wrong.
        records: usize,
        /// The smallest wrong record, in `Debug` form.
        first: String,
        /// Its net count.
        count: i64,
    },
}

impl SinkError {
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        op: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        SinkError::Io {
            path: path.into(),
            op: op.into(),
            source,
        }
    }
}
