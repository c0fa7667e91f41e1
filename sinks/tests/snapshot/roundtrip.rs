//! Every table, every enum variant, every null, written and read back.

use crate::*;
use argus_schema::SCHEMA_VERSION;
use argus_sinks::{
    read_events, read_snapshot, read_snapshot_tables, write_snapshot, EncodedPart, Manifest,
    SnapshotWriter, TableCounts, WriterOptions,
};

#[test]
fn every_table_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let data = sample();
    let written = write_snapshot(&target, &data).unwrap();
    let snap = read_snapshot(&target).unwrap();

    let expected_events: Vec<Event> = data.events.iter().cloned().map(as_stored).collect();
    assert_eq!(snap.events.as_deref(), Some(expected_events.as_slice()));
    assert_eq!(snap.segments, data.segments);
    assert_eq!(snap.edges, data.edges);
    assert_eq!(snap.spins, data.spins);
    assert_eq!(snap.threads, data.threads);
    assert_eq!(snap.errors, data.errors);
    assert_eq!(snap.manifest, written);
}

#[test]
fn sys_enter_keeps_all_six_argument_registers() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let mut w = SnapshotWriter::new(&target).unwrap();
    let e = Event {
        ts: Nanos(1),
        seq: 0,
        cpu: Cpu(0),
        pid: Pid(1),
        tid: Tid(1),
        ctx: Context::Task,
        kind: EventKind::SysEnter {
            nr: 7,
            args: [1, 2, 3, 4, 5, 6],
        },
    };
    w.write_events([&e]).unwrap();
    w.finish(SnapshotInfo::default()).unwrap();
    let back = read_snapshot(&target).unwrap().events.unwrap();
    assert_eq!(
        back[0].kind,
        EventKind::SysEnter {
            nr: 7,
            args: [1, 2, 3, 4, 5, 6]
        }
    );
}

#[test]
fn manifest_holds_the_callers_facts_and_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let data = sample();
    let m = write_snapshot(&target, &data).unwrap();
    let expected = Manifest {
        schema_version: SCHEMA_VERSION,
        created_by: format!("argus {}", env!("CARGO_PKG_VERSION")),
        sources: vec!["/traces/a".to_string(), "/traces/b".to_string()],
        trace_start_ns: Some(Nanos(1_000_000_000)),
        trace_end_ns: Some(Nanos(1_000_000_000 + (data.events.len() as u64 - 1) * 17)),
        epoch: Epoch(42),
        watermark_ns: Nanos(999),
        counts: TableCounts {
            events: data.events.len() as u64,
            segments: 24,
            edges: 8,
            spins: 6,
            threads: 3,
            errors: 2,
        },
        lost_events: [(0, 3), (7, 100)].into_iter().collect(),
        lost_ranges: vec![(Nanos(10), Nanos(20)), (Nanos(50), Nanos(70))],
        unknown_events: 12,
        threshold_ns: 1_000_000_000,
        workers: 4,
        wall_offset_ns: Some(1_764_000_000_000_000_000),
        recorder_tids: vec![4242, 4243],
    };
    assert_eq!(m, expected);
    // The JSON is plain numbers and strings, for notebooks.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(target.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(json["schema_version"], argus_schema::SCHEMA_VERSION);
    assert_eq!(json["trace_start_ns"], 1_000_000_000u64);
    assert_eq!(json["epoch"], 42);
    assert_eq!(json["lost_events"]["7"], 100);
    assert_eq!(json["lost_ranges"][1], serde_json::json!([50, 70]));
    assert_eq!(json["counts"]["segments"], 24);
    assert_eq!(json["recorder_tids"], serde_json::json!([4242, 4243]));
}

#[test]
fn caller_trace_range_wins_and_empty_snapshot_has_null_range() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("empty");
    let m = SnapshotWriter::new(&target)
        .unwrap()
        .finish(SnapshotInfo::default())
        .unwrap();
    assert_eq!(m.trace_start_ns, None);
    assert_eq!(m.counts, TableCounts::default());
    let snap = read_snapshot(&target).unwrap();
    assert_eq!(snap.events, Some(vec![]));
    assert!(snap.segments.is_empty() && snap.threads.is_empty());

    let target = dir.path().join("ranged");
    let mut w = SnapshotWriter::new(&target).unwrap();
    w.write_events(small_events(10)).unwrap();
    let m = w
        .finish(SnapshotInfo {
            trace_start_ns: Some(Nanos(0)),
            trace_end_ns: Some(Nanos(5_000)),
            ..SnapshotInfo::default()
        })
        .unwrap();
    assert_eq!(
        (m.trace_start_ns, m.trace_end_ns),
        (Some(Nanos(0)), Some(Nanos(5_000)))
    );
}

#[test]
fn tiny_batches_and_row_groups_round_trip_across_boundaries() {
    for encode_threads in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("snap");
        let options = WriterOptions {
            batch_rows: 3,
            row_group_rows: 5,
            zstd_level: 3,
            encode_threads,
        };
        let data = sample();
        let mut w = SnapshotWriter::with_options(&target, options).unwrap();
        // Several calls append in order.
        let (a, b) = data.events.split_at(7);
        assert_eq!(w.write_events(a).unwrap(), 7);
        assert_eq!(w.write_events(b.iter().cloned()).unwrap(), b.len() as u64);
        w.write_segments(&data.segments).unwrap();
        w.write_edges(&data.edges[..4]).unwrap();
        w.write_edges(&data.edges[4..]).unwrap();
        w.write_spins(&data.spins).unwrap();
        w.write_threads(&data.threads).unwrap();
        w.write_errors(&data.errors).unwrap();
        w.finish(data.info.clone()).unwrap();

        let snap = read_snapshot(&target).unwrap();
        let expected: Vec<Event> = data.events.iter().cloned().map(as_stored).collect();
        assert_eq!(snap.events.unwrap(), expected);
        assert_eq!(snap.segments, data.segments);
        assert_eq!(snap.edges, data.edges);
        assert_eq!(snap.spins, data.spins);
        assert_eq!(snap.threads, data.threads);
        assert_eq!(snap.errors, data.errors);

        // The events in batches of 3 cut into row groups of 5.
        let file = std::fs::File::open(target.join("events.parquet")).unwrap();
        let meta = parquet::file::reader::FileReader::metadata(
            &parquet::file::reader::SerializedFileReader::new(file).unwrap(),
        )
        .clone();
        let groups: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
        let n = data.events.len() as i64;
        let mut want = vec![5; (n / 5) as usize];
        if n % 5 != 0 {
            want.push(n % 5);
        }
        assert_eq!(groups, want, "encode_threads={encode_threads}");
    }
}

#[test]
fn tables_without_events_and_streaming_events() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let data = sample();
    write_snapshot(&target, &data).unwrap();

    let snap = read_snapshot_tables(&target, false).unwrap();
    assert_eq!(snap.events, None);
    assert_eq!(snap.segments, data.segments);

    let streamed: Vec<Event> = read_events(&target)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expected: Vec<Event> = data.events.iter().cloned().map(as_stored).collect();
    assert_eq!(streamed, expected);
}

#[test]
fn streaming_reader_crosses_batches() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snap");
    let mut w = SnapshotWriter::new(&target).unwrap();
    let n = 150_000;
    w.write_events(small_events(n)).unwrap();
    w.finish(SnapshotInfo::default()).unwrap();
    let mut count = 0u64;
    for (i, e) in read_events(&target).unwrap().enumerate() {
        let e = e.unwrap();
        assert_eq!(e.seq, i as u64);
        count += 1;
    }
    assert_eq!(count, n);
}

#[test]
fn encoded_parts_are_copied_into_any_number_of_snapshots_with_rows_written_around_them() {
    for (encode_threads, row_group_rows) in [(1, 5), (3, 1 << 20)] {
        let options = WriterOptions {
            batch_rows: 3,
            row_group_rows,
            zstd_level: 1,
            encode_threads,
        };
        let data = sample();
        let (seg_a, seg_rest) = data.segments.split_at(data.segments.len() / 3);
        let (seg_b, seg_c) = seg_rest.split_at(seg_rest.len() / 2);
        let (edge_a, edge_b) = data.edges.split_at(data.edges.len() / 2);
        let segs_a = std::sync::Arc::new(EncodedPart::segments(seg_a, &options).unwrap());
        let segs_c = std::sync::Arc::new(EncodedPart::segments(seg_c, &options).unwrap());
        let edges_b = std::sync::Arc::new(EncodedPart::edges(edge_b, &options).unwrap());
        assert_eq!(segs_a.rows(), seg_a.len() as u64);
        // Parts of the wrong table are refused.
        let dir = tempfile::tempdir().unwrap();
        let mut w = SnapshotWriter::with_options(dir.path().join("bad"), options).unwrap();
        assert!(w.append_edge_part(segs_a.clone()).is_err());
        drop(w);
        // The same parts in two snapshots, each time between rows written afresh.
        for name in ["one", "two"] {
            let target = dir.path().join(name);
            let mut w = SnapshotWriter::with_options(&target, options).unwrap();
            assert_eq!(
                w.append_segment_part(segs_a.clone()).unwrap(),
                seg_a.len() as u64
            );
            w.write_segments(seg_b).unwrap();
            w.append_segment_part(segs_c.clone()).unwrap();
            w.write_edges(edge_a).unwrap();
            w.append_edge_part(edges_b.clone()).unwrap();
            let m = w.finish(data.info.clone()).unwrap();
            assert_eq!(m.counts.segments, data.segments.len() as u64);
            assert_eq!(m.counts.edges, data.edges.len() as u64);
            let snap = read_snapshot(&target).unwrap();
            assert_eq!(snap.segments, data.segments, "{name} {encode_threads}");
            assert_eq!(snap.edges, data.edges, "{name} {encode_threads}");
            // Row groups stop at each part's edges; the page indexes stay readable.
            let file = std::fs::File::open(target.join("segments.parquet")).unwrap();
            let options = parquet::file::serialized_reader::ReadOptionsBuilder::new()
                .with_page_index()
                .build();
            let reader =
                parquet::file::reader::SerializedFileReader::new_with_options(file, options)
                    .unwrap();
            let meta = parquet::file::reader::FileReader::metadata(&reader).clone();
            let groups: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
            assert_eq!(groups.iter().sum::<i64>(), data.segments.len() as i64);
            if row_group_rows > data.segments.len() {
                let want = [seg_a.len(), seg_b.len(), seg_c.len()].map(|n| n as i64);
                assert_eq!(groups, want);
            }
            let index = meta.page_index_for_row_group(groups.len() - 1);
            assert!(index.offset_index(0).is_some(), "page indexes are kept");
        }
    }
}
