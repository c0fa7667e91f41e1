//! Order-independent digests of a snapshot's Parquet tables: whether two snapshots hold the
//! same rows, whatever order workers wrote them in, and if not, which rows differ.
//!
//! A row is its cells rendered as text (Arrow's display format, `|`-separated) and a table
//! is its schema plus its rows sorted; the digest is FNV-1a over that
//! ([`argus_schema::hash`]). Used by `tests/identity.rs` (the bundled recording and a trace of
//! another tool against digests kept in `tests/golden/`) and by `scripts/same-snapshots`
//! (two builds of the same trace, e.g. before and after a refactor).
//!
//! ```text
//!  DIR/*.parquet ─► rows as text ─► sort ─► FNV-1a(schema ⏎ row ⏎ row …) ─► (table, rows, digest)
//! ```

use crate::error::SinkError;
use argus_schema::hash::Fnv1a;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::fmt::Write as _;
use std::fs::File;
use std::path::Path;

/// One table's digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDigest {
    /// The file name without `.parquet` (`segments`, `edges`, …).
    pub table: String,
    /// Rows.
    pub rows: u64,
    /// FNV-1a of the schema and the sorted rows.
    pub digest: u64,
}

impl std::fmt::Display for TableDigest {
    /// `table rows digest`, the line format of the golden files.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {:016x}", self.table, self.rows, self.digest)
    }
}

/// The digest of every `*.parquet` file of `dir`, by file name.
pub fn table_digests(dir: &Path) -> Result<Vec<TableDigest>, SinkError> {
    let mut out = Vec::new();
    for path in parquet_files(dir)? {
        let (schema, rows) = table_rows(&path)?;
        let mut h = Fnv1a::new().update(schema.as_bytes());
        for r in &rows {
            h = h.update(b"\n").update(r.as_bytes());
        }
        out.push(TableDigest {
            table: table_name(&path),
            rows: rows.len() as u64,
            digest: h.finish(),
        });
    }
    Ok(out)
}

/// The schema (one line) and the rows as text, sorted, of the Parquet file `path`.
pub fn table_rows(path: &Path) -> Result<(String, Vec<String>), SinkError> {
    let file = File::open(path).map_err(|e| SinkError::io(path, "opening", e))?;
    let parquet = |source| SinkError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let arrow = |source| SinkError::Arrow {
        path: path.to_path_buf(),
        source,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(parquet)?;
    let schema = builder
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(",");
    let options = FormatOptions::default().with_null("∅");
    let mut rows = Vec::new();
    for batch in builder.build().map_err(parquet)? {
        let batch = batch.map_err(arrow)?;
        let cols = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(arrow)?;
        for i in 0..batch.num_rows() {
            let mut row = String::new();
            for (k, c) in cols.iter().enumerate() {
                if k > 0 {
                    row.push('|');
                }
                let _ = write!(row, "{}", c.value(i));
            }
            rows.push(row);
        }
    }
    rows.sort_unstable();
    Ok((schema, rows))
}

/// The `*.parquet` files of `dir`, by name.
fn parquet_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, SinkError> {
    let rd = std::fs::read_dir(dir).map_err(|e| SinkError::io(dir, "listing", e))?;
    let mut files = Vec::new();
    for entry in rd {
        let p = entry.map_err(|e| SinkError::io(dir, "listing", e))?.path();
        if p.extension().is_some_and(|e| e == "parquet") && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

fn table_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use std::sync::Arc;

    fn write(path: &Path, ids: &[i64], names: &[Option<&str>]) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap();
        let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    #[test]
    fn row_order_does_not_matter_and_a_changed_cell_does() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        for d in [&a, &b, &c] {
            std::fs::create_dir(d).unwrap();
        }
        write(&a.join("t.parquet"), &[1, 2], &[Some("x"), None]);
        write(&b.join("t.parquet"), &[2, 1], &[None, Some("x")]);
        write(&c.join("t.parquet"), &[1, 2], &[Some("x"), Some("")]);
        let (da, db, dc) = (
            table_digests(&a).unwrap(),
            table_digests(&b).unwrap(),
            table_digests(&c).unwrap(),
        );
        assert_eq!(da, db, "same rows in another order");
        assert_ne!(da, dc, "a null is not an empty string");
        assert_eq!(da[0].table, "t");
        assert_eq!(da[0].rows, 2);
        assert_eq!(
            table_rows(&a.join("t.parquet")).unwrap().1,
            vec!["1|x", "2|∅"]
        );
    }

    #[test]
    fn a_file_that_is_not_parquet_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.parquet"), b"nope").unwrap();
        let e = table_digests(dir.path()).unwrap_err();
        assert!(e.to_string().contains("bad.parquet"), "{e}");
    }
}
