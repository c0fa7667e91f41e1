//! CollectionSink: consolidation of differential updates.

use argus_schema::{
    Epoch, Nanos, Pid, Segment, SegmentId, SegmentKind, StartCause, Tid, UpdateSink,
};
use argus_sinks::{CollectionSink, SinkError};

/// A xorshift64 generator: the same stream on every run.
struct XorShift(u64);

impl XorShift {
    fn step(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The records of a count model, each repeated by its (positive) count, in order.
fn multiset(model: &std::collections::BTreeMap<u32, i64>) -> Vec<u32> {
    let mut out = Vec::new();
    for (&r, &c) in model {
        for _ in 0..c.max(0) {
            out.push(r);
        }
    }
    out
}

#[test]
fn insert_retract_pairs_cancel() {
    let mut sink = CollectionSink::new("segments");
    sink.apply(Epoch(0), &mut vec![(2u32, 1), (1, 1), (3, 1)].into_iter());
    sink.apply(Epoch(1), &mut vec![(1, -1), (4, 1)].into_iter());
    sink.apply(
        Epoch(2),
        &mut vec![(3, -1), (3, 1), (5, 1), (5, -1)].into_iter(),
    );
    assert_eq!(sink.contents(), vec![2, 3, 4]);
    assert_eq!(sink.len(), 3);
    assert_eq!(sink.count(&1), 0);
    assert_eq!(sink.count(&3), 1);
    assert_eq!(sink.epoch(), Some(Epoch(2)));
    assert_eq!(sink.updates(), 9);
    sink.check().unwrap();
}

#[test]
fn retraction_before_insertion_consolidates() {
    // Differential may deliver the -1 of a record before its +1 within an epoch.
    let mut sink = CollectionSink::new("edges");
    sink.apply(Epoch(3), &mut vec![(7u64, -1)].into_iter());
    assert!(sink.check().is_err());
    sink.apply(Epoch(3), &mut vec![(7u64, 1)].into_iter());
    assert!(sink.is_empty());
    sink.check().unwrap();
}

#[test]
fn check_catches_a_double_insert() {
    let mut sink = CollectionSink::new("spins");
    sink.apply(
        Epoch(0),
        &mut vec![(5u32, 1), (9, 1), (5, 1), (2, -1)].into_iter(),
    );
    let err = sink.check().unwrap_err();
    assert!(
        matches!(
            err,
            SinkError::Multiplicity {
                records: 2,
                count: -1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "collection 'spins': 2 records with multiplicity other than 0 or 1, first: 2 has count -1"
    );
    // contents still shows the multiset as it stands.
    assert_eq!(sink.contents(), vec![5, 5, 9]);
}

#[test]
fn worker_shares_absorb_into_one() {
    let mut a = CollectionSink::new("segments");
    let mut b = CollectionSink::new("segments");
    a.apply(Epoch(1), &mut vec![(1, 1), (2, 1)].into_iter());
    b.apply(Epoch(4), &mut vec![(2, -1), (3, 1)].into_iter());
    a.absorb(b);
    assert_eq!(a.contents(), vec![1, 3]);
    assert_eq!(a.epoch(), Some(Epoch(4)));
    assert_eq!(a.updates(), 4);
    a.check().unwrap();
}

#[test]
fn works_through_the_trait_object() {
    let mut sink = CollectionSink::new("threads");
    {
        let dyn_sink: &mut dyn UpdateSink<String> = &mut sink;
        dyn_sink.apply(Epoch(0), &mut vec![("x".to_string(), 1)].into_iter());
    }
    assert_eq!(sink.contents(), vec!["x".to_string()]);
}

#[test]
fn large_streams_consolidate_like_a_map() {
    // Enough updates to fold the pending ones in place several times (the threshold is a
    // million), with retractions landing before and after their insertions' folds.
    let mut sink = CollectionSink::new("segments");
    let mut model = std::collections::BTreeMap::<u32, i64>::new();
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    for i in 0..2_200_000u32 {
        let x = rng.step();
        let record = (x % 1_100_000) as u32;
        let diff = if i % 3 == 0 { -1 } else { 1 };
        sink.update(record, diff);
        *model.entry(record).or_insert(0) += diff;
        if i == 1_700_000 {
            // A query in the middle sees pending and folded updates alike.
            let n = model.values().filter(|&&c| c != 0).count();
            assert_eq!(sink.len(), n);
            assert_eq!(sink.count(&record), model[&record]);
        }
    }
    model.retain(|_, c| *c != 0);
    let expected = multiset(&model);
    assert_eq!(sink.len(), model.len());
    assert_eq!(sink.updates(), 2_200_000);
    assert_eq!(sink.contents(), expected);
    let first_bad = model.iter().find(|(_, &c)| c != 1).map(|(r, _)| *r);
    match sink.check() {
        Err(SinkError::Multiplicity { records, first, .. }) => {
            assert_eq!(records, model.values().filter(|&&c| c != 1).count());
            assert_eq!(Some(first), first_bad.map(|r| r.to_string()));
        }
        other => panic!("expected a multiplicity error, got {other:?}"),
    }
    sink.consolidate();
    assert_eq!(sink.into_contents(), expected);
}

#[test]
fn a_clean_collection_comes_out_sorted_across_chunks_and_folds() {
    // Every record ends with count 1 (inserted, some retracted and re-inserted): the
    // records are handed out without copies, sorted, across many chunks and two folds.
    let mut sink = CollectionSink::new("edges");
    let n = 1_300_000u64;
    for i in 0..n {
        let record = (i * 7_919) % n;
        sink.update(record, 1);
        if i % 5 == 0 {
            sink.update(record, -1);
            sink.update(record, 1);
        }
    }
    assert!(sink.check().is_ok());
    assert_eq!(sink.len(), n as usize);
    let out = sink.into_contents();
    assert_eq!(out.len(), n as usize);
    assert!(out.iter().enumerate().all(|(i, r)| *r == i as u64));
}

#[test]
fn into_sorted_streams_the_net_counts_in_order() {
    // Inserts, retractions and double inserts over many chunks: the lazy merge gives each
    // record once, in order, with its net count (zeros omitted), like a map.
    let mut sink = CollectionSink::new("segments");
    let mut model = std::collections::BTreeMap::<u32, i64>::new();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for i in 0..400_000u32 {
        let x = rng.step();
        let record = (x % 150_000) as u32;
        let diff = if i % 4 == 0 { -1 } else { 1 };
        sink.update(record, diff);
        *model.entry(record).or_insert(0) += diff;
    }
    model.retain(|_, c| *c != 0);
    let got: Vec<(u32, i64)> = sink.into_sorted().collect();
    let want: Vec<(u32, i64)> = model.into_iter().collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}

#[test]
fn segments_come_out_sorted_and_consolidated() {
    // Real segments (packed in the sink's runs): the same net counts in the same order as a
    // map gives, across chunks, folds and retractions, every field intact.
    let big = |k: u32| -> Segment {
        let mut s = Segment::starting(
            SegmentId::new(Tid((k % 97) as i32 - 3), k / 97),
            Pid((k % 13) as i32),
            match k % 4 {
                0 => SegmentKind::Task,
                1 => SegmentKind::HardIrq { irq: k as i32 },
                2 => SegmentKind::WorkItem {
                    work: u64::from(k) << 20,
                    function: u64::MAX - u64::from(k),
                },
                _ => SegmentKind::Interrupt,
            },
            Nanos(1_700_000_000_000_000_000 + u64::from(k) * 7_001),
            StartCause::Woken,
        );
        s.end_ns = Nanos(s.start_ns.0 + u64::from(k % 5_000));
        s.wait_start_ns = k.is_multiple_of(3).then_some(Nanos(s.start_ns.0 + 1));
        s.wait_ret = k.is_multiple_of(7).then_some(-(i64::from(k)));
        s.syscall_seq = (0..(k % 17) as i32).collect();
        s.events = k;
        s
    };
    let mut sink: CollectionSink<Segment> = CollectionSink::new("segments");
    let mut model = std::collections::BTreeMap::<Segment, i64>::new();
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    for i in 0..200_000u32 {
        let x = rng.step();
        let record = big((x % 90_000) as u32);
        let diff = if i % 3 == 0 { -1 } else { 1 };
        sink.update(record.clone(), diff);
        *model.entry(record).or_insert(0) += diff;
    }
    model.retain(|_, c| *c != 0);
    assert_eq!(
        sink.count(&big(5)),
        model.get(&big(5)).copied().unwrap_or(0)
    );
    let got: Vec<(Segment, i64)> = sink.into_sorted().collect();
    let want: Vec<(Segment, i64)> = model.into_iter().collect();
    assert_eq!(got, want);
}

/// A frozen view holds the contents of its moment, whatever the sink does afterwards (more
/// chunks, folds that rebuild the runs), and its one-pass read equals `contents` and
/// `check` of that moment, the multiplicity error included.
#[test]
fn a_frozen_view_reads_the_contents_and_check_of_its_moment() {
    let mut sink = CollectionSink::new("segments");
    let mut model = std::collections::BTreeMap::<u32, i64>::new();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut frozen = None;
    for i in 0..2_400_000u32 {
        let x = rng.step();
        let record = (x % 900_000) as u32;
        let diff = if i % 3 == 0 { -1 } else { 1 };
        sink.update(record, diff);
        *model.entry(record).or_insert(0) += diff;
        if i == 700_123 {
            // Mid-chunk: the open chunk is sealed into the view.
            let expected = multiset(&model);
            let bad: Vec<u32> = model
                .iter()
                .filter(|(_, &c)| c != 0 && c != 1)
                .map(|(&r, _)| r)
                .collect();
            assert_eq!(sink.contents(), expected);
            frozen = Some((sink.freeze(), expected, bad));
        }
    }
    let (view, expected, bad) = frozen.unwrap();
    assert!(!bad.is_empty(), "the stream makes some counts other than 1");
    let (contents, check) = view.clone().contents_checked();
    assert_eq!(contents, expected);
    match check {
        Err(SinkError::Multiplicity {
            collection,
            records,
            first,
            ..
        }) => {
            assert_eq!(collection, "segments");
            assert_eq!(records, bad.len());
            assert_eq!(first, bad[0].to_string());
        }
        other => panic!("expected a multiplicity error, got {other:?}"),
    }
    // The sink went on to the end and still agrees with the model.
    model.retain(|_, c| *c != 0);
    let end: Vec<u32> = model
        .iter()
        .flat_map(|(&r, &c)| std::iter::repeat_n(r, c.max(0) as usize))
        .collect();
    assert_eq!(sink.contents(), end);
    assert_ne!(end, expected);
    // A clean view checks clean.
    let mut clean = CollectionSink::new("edges");
    clean.apply(Epoch(0), &mut vec![(3u64, 1), (1, 1), (2, 1)].into_iter());
    clean.apply(Epoch(1), &mut vec![(2u64, -1)].into_iter());
    let (contents, check) = clean.freeze().contents_checked();
    assert_eq!(contents, vec![1, 3]);
    check.unwrap();
}

#[test]
fn frozen_parts_read_as_one_collection() {
    // Three sinks (settled runs, chunks, the open chunk), records spread over them, one
    // record in two of them: the concatenated view gives the sorted union with net counts,
    // and its check names the record counted twice.
    let mut parts = [
        CollectionSink::new("segments"),
        CollectionSink::new("segments"),
        CollectionSink::new("segments"),
    ];
    let mut model = std::collections::BTreeMap::<u32, i64>::new();
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    for i in 0..120_000u32 {
        let record = (rng.step() % 60_000) as u32;
        // A record always goes to the same part, as a time bucket would.
        let part = (record % 3) as usize;
        let diff = if i % 5 == 0 { -1 } else { 1 };
        parts[part].update(record, diff);
        *model.entry(record).or_insert(0) += diff;
    }
    model.retain(|_, c| *c != 0);
    let frozen: Vec<_> = parts.iter_mut().map(|p| p.freeze()).collect();
    assert!(frozen.iter().map(|f| f.updates()).sum::<usize>() >= model.len());
    let (got, check) = argus_sinks::Frozen::concat("segments", frozen).contents_checked();
    assert_eq!(got, multiset(&model));
    assert_eq!(check.is_ok(), model.values().all(|&c| c == 1));
    // One record in two parts.
    let mut a = CollectionSink::new("edges");
    let mut b = CollectionSink::new("edges");
    a.update(5u32, 1);
    a.update(9, 1);
    b.update(5, 1);
    let (got, check) =
        argus_sinks::Frozen::concat("edges", [a.freeze(), b.freeze()]).contents_checked();
    assert_eq!(got, vec![5, 5, 9]);
    match check {
        Err(SinkError::Multiplicity { first, count, .. }) => {
            assert_eq!((first.as_str(), count), ("5", 2))
        }
        other => panic!("expected a multiplicity error, got {other:?}"),
    }
}
