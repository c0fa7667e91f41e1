//! Damaged snapshots: each error names the file at fault.

use crate::*;
use argus_schema::arrow_schema;
use argus_sinks::{read_snapshot, read_snapshot_tables, write_snapshot, SinkError};
use arrow::array::{new_empty_array, ArrayRef, Int32Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use std::sync::Arc;

fn good_snapshot() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    write_snapshot(&target, &sample()).unwrap();
    (dir, target)
}

fn write_parquet(path: &std::path::Path, batch: &RecordBatch) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

fn set_manifest(target: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = target.join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn truncated_parquet_names_the_file() {
    let (_dir, target) = good_snapshot();
    let path = target.join("segments.parquet");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = read_snapshot(&target).unwrap_err();
    assert!(matches!(err, SinkError::Parquet { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "{}: corrupt or unreadable parquet: ",
            path.display()
        )),
        "{msg}"
    );
}

#[test]
fn garbage_in_the_middle_of_a_column_chunk_names_the_file() {
    let (_dir, target) = good_snapshot();
    let path = target.join("threads.parquet");
    let mut bytes = std::fs::read(&path).unwrap();
    // Keep the magic and the footer, scribble over the data pages.
    for b in &mut bytes[4..60] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = read_snapshot(&target).unwrap_err();
    assert!(
        err.to_string().starts_with(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn wrong_column_type_names_file_and_column() {
    let (_dir, target) = good_snapshot();
    // The segments schema with start_ns as Int64 instead of UInt64.
    let fields: Vec<Field> = arrow_schema::segments()
        .fields()
        .iter()
        .map(|f| {
            if f.name() == "start_ns" {
                Field::new("start_ns", DataType::Int64, false)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| new_empty_array(f.data_type()))
        .collect();
    let path = target.join("segments.parquet");
    write_parquet(&path, &RecordBatch::try_new(schema, columns).unwrap());
    let err = read_snapshot(&target).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 'start_ns' has type Int64, expected UInt64",
            path.display()
        )
    );
}

#[test]
fn wrong_column_names_and_counts_are_reported() {
    let (_dir, target) = good_snapshot();
    // An edges file with only two columns, the second misnamed.
    let schema = Arc::new(Schema::new(vec![
        Field::new("src", DataType::UInt64, false),
        Field::new("target", DataType::UInt64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(UInt64Array::from(Vec::<u64>::new())),
            Arc::new(UInt64Array::from(Vec::<u64>::new())),
        ],
    )
    .unwrap();
    let path = target.join("edges.parquet");
    write_parquet(&path, &batch);
    let err = read_snapshot(&target).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 1 is named 'target', expected 'dst'",
            path.display()
        )
    );

    // A threads file with one column too many.
    let mut fields: Vec<Field> = arrow_schema::threads()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("extra", DataType::Int32, true));
    let schema = Arc::new(Schema::new(fields));
    let columns = schema
        .fields()
        .iter()
        .map(|f| new_empty_array(f.data_type()))
        .collect();
    let path = target.join("threads.parquet");
    write_parquet(&path, &RecordBatch::try_new(schema, columns).unwrap());
    write_parquet(
        &target.join("edges.parquet"),
        &RecordBatch::new_empty(arrow_schema::edges()),
    );
    set_manifest(&target, |m| m["counts"]["edges"] = 0.into());
    let err = read_snapshot(&target).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: has 9 columns, expected 8", path.display())
    );
}

#[test]
fn events_schema_is_checked_even_when_events_are_not_loaded() {
    let (_dir, target) = good_snapshot();
    let mut fields: Vec<Field> = arrow_schema::events()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[7] = Field::new("target", DataType::Int32, false); // nullable in the schema
    let schema = Arc::new(Schema::new(fields));
    let columns = schema
        .fields()
        .iter()
        .map(|f| new_empty_array(f.data_type()))
        .collect();
    let path = target.join("events.parquet");
    write_parquet(&path, &RecordBatch::try_new(schema, columns).unwrap());
    let err = read_snapshot_tables(&target, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 'target' has nullable=false, expected nullable=true",
            path.display()
        )
    );
}

#[test]
fn missing_table_names_the_file() {
    let (_dir, target) = good_snapshot();
    let path = target.join("spins.parquet");
    std::fs::remove_file(&path).unwrap();
    let err = read_snapshot(&target).unwrap_err();
    assert!(matches!(err, SinkError::MissingFile { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("{}: missing table file", path.display())
    );
}

#[test]
fn missing_manifest_names_it() {
    let (_dir, target) = good_snapshot();
    std::fs::remove_file(target.join("manifest.json")).unwrap();
    let err = read_snapshot(&target).unwrap_err();
    assert!(err.to_string().contains("manifest.json: missing"), "{err}");
}

#[test]
fn other_schema_version_is_refused() {
    let (_dir, target) = good_snapshot();
    set_manifest(&target, |m| {
        m["schema_version"] = 99.into();
        // Fields of a future layout must not turn this into a parse error.
        m["counts"] = "renamed".into();
    });
    let err = read_snapshot(&target).unwrap_err();
    assert!(
        matches!(
            err,
            SinkError::SchemaVersion {
                found: Some(99),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}: schema_version 99 is not supported (this build reads version {})",
            target.join("manifest.json").display(),
            argus_schema::SCHEMA_VERSION
        )
    );
}

#[test]
fn invalid_manifest_json_names_it() {
    let (_dir, target) = good_snapshot();
    std::fs::write(target.join("manifest.json"), "{\"schema_version\": 1, ").unwrap();
    let err = read_snapshot(&target).unwrap_err();
    assert!(matches!(err, SinkError::Manifest { .. }), "{err:?}");
    assert!(
        err.to_string().contains("manifest.json: invalid manifest"),
        "{err}"
    );
}

#[test]
fn row_count_disagreeing_with_manifest_is_reported() {
    let (_dir, target) = good_snapshot();
    set_manifest(&target, |m| m["counts"]["spins"] = 7.into());
    let err = read_snapshot(&target).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: holds 6 rows, manifest.json says 7",
            target.join("spins.parquet").display()
        )
    );
}

#[test]
fn unknown_enum_name_names_file_row_and_column() {
    let (_dir, target) = good_snapshot();
    let mut edges = all_edges();
    edges.truncate(2);
    let schema = arrow_schema::edges();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(UInt64Array::from(vec![1u64, 2])),
            Arc::new(UInt64Array::from(vec![3u64, 4])),
            Arc::new(StringArray::from(vec!["wakeup", "telepathy"])),
            Arc::new(StringArray::from(vec!["strong", "weak"])),
            Arc::new(UInt64Array::from(vec![5u64, 6])),
            Arc::new(Int32Array::from(vec![-1, -1])),
        ],
    )
    .unwrap();
    let path = target.join("edges.parquet");
    write_parquet(&path, &batch);
    set_manifest(&target, |m| m["counts"]["edges"] = 2.into());
    let err = read_snapshot(&target).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: row 1, column 'kind': unknown edge kind 'telepathy'",
            path.display()
        )
    );
}

#[test]
fn missing_event_payload_is_reported() {
    let (_dir, target) = good_snapshot();
    // A switch row without its next tid.
    let schema = arrow_schema::events();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(UInt64Array::from(vec![1u64])),
            Arc::new(UInt64Array::from(vec![0u64])),
            Arc::new(arrow::array::UInt32Array::from(vec![0u32])),
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(StringArray::from(vec!["task"])),
            Arc::new(StringArray::from(vec!["switch"])),
            Arc::new(Int32Array::from(vec![None::<i32>])),
            Arc::new(Int32Array::from(vec![None::<i32>])),
            Arc::new(UInt64Array::from(vec![Some(1u64)])),
            Arc::new(UInt64Array::from(vec![None::<u64>])),
            Arc::new(UInt64Array::from(vec![None::<u64>])),
            Arc::new(UInt64Array::from(vec![None::<u64>])),
            Arc::new(UInt64Array::from(vec![None::<u64>])),
            Arc::new(UInt64Array::from(vec![None::<u64>])),
            Arc::new(arrow::array::Int64Array::from(vec![None::<i64>])),
            Arc::new(StringArray::from(vec![Some("S")])),
            Arc::new(StringArray::from(vec![None::<&str>])),
        ],
    )
    .unwrap();
    let path = target.join("events.parquet");
    write_parquet(&path, &batch);
    set_manifest(&target, |m| m["counts"]["events"] = 1.into());
    let err = read_snapshot(&target).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: row 0, column 'target': null, but kind 'switch' needs a value",
            path.display()
        )
    );
    // Without the events the rest of the snapshot is still readable.
    assert_eq!(
        read_snapshot_tables(&target, false).unwrap().spins,
        all_spins()
    );
}

/// An events file whose definition levels run past their data page (found by the
/// `snapshot` fuzz target): the parquet crate panics decoding it; the reader reports the
/// file as corrupt Parquet instead, for the whole snapshot and for the streaming reader.
// See: issue 18 (fuzzing), docs/fuzzing.md.
#[test]
fn gh_18_parquet_decoder_panic_is_the_files_error() {
    let (_dir, target) = good_snapshot();
    let path = target.join("events.parquet");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshot/testdata/gh_18_def_levels_past_page.events.parquet"),
        &path,
    )
    .unwrap();
    set_manifest(&target, |m| m["counts"]["events"] = 200.into());
    let expected = format!(
        "{}: corrupt or unreadable parquet: Parquet error: the parquet decoder failed: offset + len out of bounds",
        path.display()
    );
    let err = read_snapshot(&target).unwrap_err();
    assert!(matches!(err, SinkError::Parquet { .. }), "{err:?}");
    assert_eq!(err.to_string(), expected);
    let mut events = argus_sinks::read_events(&target).unwrap();
    let err = events
        .find_map(Result::err)
        .expect("the streaming reader fails too");
    assert_eq!(err.to_string(), expected);
    assert!(events.next().is_none(), "and stops");
    // Without the events the rest of the snapshot is read.
    assert_eq!(
        read_snapshot_tables(&target, false).unwrap().spins,
        all_spins()
    );
}
