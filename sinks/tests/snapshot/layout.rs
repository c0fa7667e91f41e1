//! Parquet layout: row groups of 1Mi rows, zstd, the embedded Arrow schema.

use crate::*;
use argus_sinks::{SnapshotWriter, Table};
use parquet::basic::Compression;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::path::Path;

#[test]
fn events_file_has_three_row_groups_for_2_5m_events() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let mut w = SnapshotWriter::new(&target).unwrap();
    let n = 2_500_000;
    assert_eq!(w.write_events(small_events(n)).unwrap(), n);
    let m = w.finish(SnapshotInfo::default()).unwrap();
    assert_eq!(m.counts.events, n);

    let file = std::fs::File::open(target.join("events.parquet")).unwrap();
    let reader = SerializedFileReader::new(file).unwrap();
    let meta = reader.metadata();
    let rows: Vec<i64> = meta.row_groups().iter().map(|rg| rg.num_rows()).collect();
    assert_eq!(rows, vec![1_048_576, 1_048_576, 402_848]);
    for rg in meta.row_groups() {
        for col in rg.columns() {
            assert!(
                matches!(col.compression(), Compression::ZSTD(_)),
                "column {} is {:?}",
                col.column_path(),
                col.compression()
            );
        }
    }
}

/// A row group of a few thousand rows written at once is stored uncompressed (zstd's
/// contexts cost more than its saving there); one just past that is compressed; both read
/// back whole.
#[test]
fn a_small_row_group_is_uncompressed_and_a_larger_one_compressed() {
    let dir = tempfile::tempdir().unwrap();
    for (n, zstd) in [(4095u64, false), (4096, true)] {
        let target = dir.path().join(format!("snap-{n}"));
        let mut w = SnapshotWriter::new(&target).unwrap();
        w.write_events(small_events(n)).unwrap();
        w.finish(SnapshotInfo::default()).unwrap();
        let file = std::fs::File::open(target.join("events.parquet")).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let meta = reader.metadata();
        assert_eq!(meta.num_row_groups(), 1);
        for col in meta.row_group(0).columns() {
            let compressed = matches!(col.compression(), Compression::ZSTD(_));
            assert_eq!(compressed, zstd, "{n} rows: column {}", col.column_path());
        }
        let back: Vec<_> = argus_sinks::read_events(&target)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, small_events(n).collect::<Vec<_>>(), "{n} rows");
    }
}

#[test]
fn every_file_embeds_its_tables_arrow_schema() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    argus_sinks::write_snapshot(&target, &sample()).unwrap();
    for table in Table::ALL {
        let file = std::fs::File::open(target.join(table.file_name())).unwrap();
        let builder =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        assert_eq!(
            builder.schema().fields(),
            table.schema().fields(),
            "{}",
            table.file_name()
        );
    }
}

#[test]
fn sorted_graph_columns_are_delta_encoded_without_dictionary() {
    use parquet::basic::Encoding;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    argus_sinks::write_snapshot(&target, &sample()).unwrap();
    let expect: [(&str, &[&str]); 2] = [
        (
            "segments.parquet",
            &[
                "id",
                "tid",
                "pid",
                "start_ns",
                "end_ns",
                "wait_start_ns",
                // A nested leaf: its setting must reach the path `syscall_seq.list.item`.
                "syscall_seq.list.item",
            ],
        ),
        ("edges.parquet", &["src", "dst", "ts_ns"]),
    ];
    for (file, columns) in expect {
        let reader =
            SerializedFileReader::new(std::fs::File::open(target.join(file)).unwrap()).unwrap();
        let rg = reader.metadata().row_group(0);
        for name in columns {
            let col = rg
                .columns()
                .iter()
                .find(|c| c.column_path().string() == *name)
                .unwrap_or_else(|| panic!("{file} has no column {name}"));
            let encodings: Vec<Encoding> = col.encodings().collect();
            assert!(
                encodings.contains(&Encoding::DELTA_BINARY_PACKED)
                    && !encodings.contains(&Encoding::RLE_DICTIONARY)
                    && col.dictionary_page_offset().is_none(),
                "{file} {name}: {encodings:?}"
            );
        }
    }
}

/// The payload columns docs/snapshot.md lists for each event kind ("columns not listed are
/// null"): every backquoted column name of the kind's row, `arg0` … `arg5` meaning all six.
fn documented_payloads() -> std::collections::BTreeMap<String, Vec<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/snapshot.md"))
            .unwrap();
    let section = doc
        .split("Payload per `kind`")
        .nth(1)
        .expect("docs/snapshot.md has the payload table");
    let payload_columns = [
        "target", "nr", "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "ret", "state", "text",
    ];
    let mut out = std::collections::BTreeMap::new();
    // The header row, the rule row, then one row per kind up to the first non-table line.
    for line in section.lines().skip_while(|l| !l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            break;
        }
        let kind = cells[1].trim_matches('`').to_string();
        let payload = cells[3].replace(
            "`arg0` … `arg5`",
            "`arg0` `arg1` `arg2` `arg3` `arg4` `arg5`",
        );
        let mut cols: Vec<String> = payload
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|c| payload_columns.contains(c))
            .map(str::to_string)
            .collect();
        cols.sort();
        cols.dedup();
        out.insert(kind, cols);
    }
    out
}

#[test]
fn each_event_kind_fills_exactly_its_documented_payload_columns() {
    use arrow::array::{Array, AsArray};
    let expected = documented_payloads();
    assert_eq!(expected.len(), 30, "{expected:?}");
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let events = all_events();
    let mut w = SnapshotWriter::new(&target).unwrap();
    // Twice over: the second batch reuses the encoder's buffers.
    w.write_events(events.iter().chain(events.iter())).unwrap();
    w.finish(SnapshotInfo::default()).unwrap();
    let file = std::fs::File::open(target.join("events.parquet")).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut rows = 0;
    let mut kinds_seen = std::collections::BTreeSet::new();
    for batch in reader {
        let batch = batch.unwrap();
        let kind = batch
            .column_by_name("kind")
            .unwrap()
            .as_string::<i32>()
            .clone();
        for row in 0..batch.num_rows() {
            let k = kind.value(row).to_string();
            let filled: Vec<String> = batch
                .schema()
                .fields()
                .iter()
                .skip(7)
                .filter(|f| batch.column_by_name(f.name()).unwrap().is_valid(row))
                .map(|f| f.name().clone())
                .collect();
            let mut filled_sorted = filled.clone();
            filled_sorted.sort();
            assert_eq!(
                Some(&filled_sorted),
                expected.get(&k),
                "row {row} ({k}) fills {filled:?}"
            );
            kinds_seen.insert(k);
        }
        rows += batch.num_rows();
    }
    assert_eq!(rows, 2 * events.len());
    assert_eq!(kinds_seen.len(), 30, "{kinds_seen:?}");
}
