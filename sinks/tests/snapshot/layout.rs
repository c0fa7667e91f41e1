//! Parquet layout: row groups of 1Mi rows, zstd, the embedded Arrow schema.

use crate::*;
use argus_sinks::{SnapshotWriter, Table};
use parquet::basic::Compression;
use parquet::file::reader::{FileReader, SerializedFileReader};

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
