//! Oracle tests of the arranged graph (`argus_pipeline::arranged`): the graph dataflow runs
//! on the randomized oracle stream (`common`), and its messages are fed epoch by epoch into
//! the arranged job with 1 and 2 timely workers. After every epoch:
//!
//! - each arrangement, read whole and united over the workers, consolidates to the sink's
//!   contents at that epoch (the updates accumulated so far);
//! - the slices arrangement equals `arranged::reference::slices` recomputed from scratch on
//!   that snapshot;
//! - point and window queries (a segment, its incoming and outgoing edges, a thread's
//!   segments in a window, a spin's slice), united over the workers, equal the same questions
//!   asked of the snapshot;
//! - a query as of the next epoch is refused as not yet complete, and, once the handles are
//!   compacted to the epoch, one as of the previous epoch as compacted away;
//! - on the stream with spin loops (`common::spin_stream`), the spins derived from the
//!   segments and the watermark (`arranged::spins`) equal the dataflow's spins table.
//!
//! The check is `common/arranged_check.rs`, shared with `arranged_cluster.rs` (the same in a
//! 2-process timely cluster).

mod common;

use argus_pipeline::arranged::SliceMember;
use argus_pipeline::arranged::{reference, ArrangedJob, SliceConfig, Span, Window};
use argus_pipeline::dataflow::Update;
use argus_schema::SpinClass;
use argus_schema::{CausalEdge, Nanos, Segment, SegmentId, Spin, Strength, Tid};
use common::arranged_check::{check, Coverage};
use common::{rules, stream};
use std::collections::BTreeMap;

#[test]
fn arranged_graph_and_slices_equal_the_sink_and_the_reference_every_epoch_one_worker() {
    for (seed, n, size) in [(11, 4000, 131), (14, 6000, 1000)] {
        let cov = check(seed, n, size, 1, SliceConfig::default(), false);
        assert!(cov.slices > 0, "the stream has hangs");
        assert!(cov.largest > 10, "and slices beyond their roots");
        assert_eq!(cov.strengths.len(), 3, "with members of every strength");
        assert!(cov.successors > 0, "and the segments that ended waits");
    }
}

#[test]
fn arranged_graph_and_slices_equal_the_sink_and_the_reference_every_epoch_two_workers() {
    for (seed, n, size) in [(13, 4000, 173), (11, 6000, 1500)] {
        let cov = check(seed, n, size, 2, SliceConfig::default(), false);
        assert!(cov.slices > 0 && cov.largest > 10);
    }
}

#[test]
fn slices_with_no_look_back_and_one_epoch_per_event_run() {
    // A look-back of 0 cuts the window at the spin's start; one event per epoch makes every
    // open segment and spin change at every epoch.
    let cov = check(15, 800, 1, 2, SliceConfig { lookback_ns: 0 }, false);
    assert!(cov.slices > 0 && cov.largest > 2);
    // The window does cut: without it the slices are larger.
    let evs = stream(15, 800);
    let g = argus_pipeline::reference::compute(
        &evs,
        evs.last().map(|e| e.ts).unwrap_or_default(),
        &rules(),
    );
    let cut = reference::slices(&g, &SliceConfig { lookback_ns: 0 }).len();
    let all = reference::slices(
        &g,
        &SliceConfig {
            lookback_ns: u64::MAX,
        },
    )
    .len();
    assert!(
        cut < all,
        "{cut} members within the windows, {all} without them"
    );
}

/// Asserts that the spin loops of `cov` made every kind of spin the derived spins compute.
fn assert_spin_coverage(cov: &Coverage) {
    use SpinClass::{LongRunning, LongWait, RepeatedYield};
    for (kind, what) in [
        ((RepeatedYield, false, true), "closed yield runs"),
        ((RepeatedYield, true, true), "open yield runs"),
        ((LongWait, false, true), "closed logical waits"),
        ((LongWait, true, true), "open logical waits"),
        ((LongWait, false, false), "closed long waits"),
        ((LongWait, true, false), "open long waits"),
        ((LongRunning, true, false), "open long runs"),
    ] {
        assert!(
            cov.count(kind) > 0,
            "the stream has {what}: {:?}",
            cov.spins
                .iter()
                .map(|(k, v)| (k, v.len()))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn derived_spins_equal_the_dataflows_every_epoch_one_worker() {
    for (seed, n, size) in [(21, 4000, 97), (22, 6000, 1000)] {
        let cov = check(seed, n, size, 1, SliceConfig::default(), true);
        assert_spin_coverage(&cov);
    }
}

#[test]
fn derived_spins_equal_the_dataflows_every_epoch_two_workers() {
    for (seed, n, size) in [(23, 4000, 131), (24, 5000, 1500)] {
        let cov = check(seed, n, size, 2, SliceConfig::default(), true);
        assert_spin_coverage(&cov);
    }
}

#[test]
fn derived_spins_with_one_event_per_epoch() {
    // Every open segment, pending segment and open run changes at every epoch.
    let cov = check(25, 1500, 1, 2, SliceConfig::default(), true);
    assert!(cov.count((SpinClass::RepeatedYield, true, true)) > 0);
}

/// The thread-window query relies on this: the segments of one thread do not overlap (each
/// ends at or before the start of the next; only the last may be open). The slices' roots
/// rely on their ordinals being consecutive in time order (`last`'s successor is `seq + 1`).
#[test]
fn a_threads_segments_do_not_overlap_and_are_numbered_in_order() {
    let evs = stream(16, 6000);
    let g = argus_pipeline::reference::compute(
        &evs,
        evs.last().map(|e| e.ts).unwrap_or_default(),
        &rules(),
    );
    let mut by_thread: BTreeMap<Tid, Vec<&Segment>> = BTreeMap::new();
    for s in &g.segments {
        by_thread.entry(s.tid).or_default().push(s);
    }
    for (tid, mut segs) in by_thread {
        segs.sort_by_key(|s| (s.start_ns, s.id));
        for pair in segs.windows(2) {
            let end = Span::of(pair[0]).end_ns;
            assert!(
                end.is_some_and(|end| end <= pair[1].start_ns),
                "{tid:?}: {:?} and {:?} overlap",
                pair[0],
                pair[1]
            );
            assert_eq!(
                pair[1].id,
                SegmentId::new(tid, pair[0].id.seq() + 1),
                "{tid:?}: the segment after {:?}",
                pair[0]
            );
        }
        assert_eq!(
            segs.first().map(|s| s.id.seq()),
            Some(0),
            "{tid:?} is numbered from 0"
        );
    }
}

/// The definition on a hand-made hang: a LongWait of thread 1 from 10 s to 13 s (window from
/// 8 s with the 2 s look-back), ended by thread 2's wake-up into its next segment.
#[test]
fn a_hand_made_hang_has_the_slice_its_definition_gives() {
    use argus_schema::{EdgeKind, EndCause, Pid, SegmentKind, SpinClass, StartCause};
    const S: u64 = 1_000_000_000;
    let seg = |tid: i32, seq: u32, start: u64, end: Option<u64>| {
        let mut s = Segment::starting(
            SegmentId::new(Tid(tid), seq),
            Pid(tid),
            SegmentKind::Task,
            Nanos(start),
            if seq == 0 {
                StartCause::FirstSeen
            } else {
                StartCause::Woken
            },
        );
        s.end_ns = Nanos(end.unwrap_or(start + S / 2));
        s.end = if end.is_some() {
            EndCause::Woken
        } else {
            EndCause::Open
        };
        s
    };
    let edge = |src: &Segment, dst: &Segment, kind, strength| CausalEdge {
        src: src.id,
        dst: dst.id,
        kind,
        strength,
        ts: dst.start_ns,
        src_syscall: -1,
    };
    let a0 = seg(1, 0, 10 * S, Some(13 * S));
    let a1 = seg(1, 1, 13 * S, None);
    let b0 = seg(2, 0, 9 * S, Some(11 * S));
    let b1 = seg(2, 1, 11 * S, Some(14 * S));
    let c0 = seg(3, 0, 17 * S / 2, Some(12 * S));
    let d0 = seg(4, 0, S, Some(7 * S));
    let e0 = seg(5, 0, 12 * S, Some(25 * S / 2));
    let spin = Spin {
        segment: a0.id,
        last: a0.id,
        tid: Tid(1),
        pid: Pid(1),
        class: SpinClass::LongWait,
        start_ns: a0.start_ns,
        end_ns: a0.end_ns,
        open: false,
        on_cpu_ns: 0,
        wait_ns: 3 * S,
        segments: 1,
        wait_syscall: 202,
        timeouts: 0,
    };
    let woke = edge(&b1, &a1, EdgeKind::Wakeup, Strength::Strong);
    let mut first: Vec<(Update, i64)> = [&a0, &a1, &b0, &b1, &c0, &d0, &e0]
        .into_iter()
        .map(|s| (Update::Segment(s.clone()), 1))
        .collect();
    first.extend(
        [
            woke.clone(),
            edge(&b0, &b1, EdgeKind::ThreadOrder, Strength::Weak),
            edge(&c0, &b1, EdgeKind::Message, Strength::Boosted),
            edge(&d0, &b0, EdgeKind::Fork, Strength::Strong),
            edge(&e0, &a0, EdgeKind::WaitWake, Strength::Weak),
            edge(&a0, &a1, EdgeKind::ThreadOrder, Strength::Weak),
        ]
        .map(|e| (Update::Edge(e), 1)),
    );
    first.push((Update::Spin(spin.clone()), 1));
    let epochs = [
        first,
        vec![(Update::Edge(woke), -1)],
        vec![(
            Update::Edge(edge(&c0, &a0, EdgeKind::Message, Strength::Strong)),
            1,
        )],
    ];
    let member = |s: &Segment, strength| SliceMember {
        window: Window {
            from_ns: Nanos(8 * S),
            to_ns: Some(Nanos(13 * S)),
        },
        segment: s.id,
        strength,
    };
    use Strength::{Boosted, Strong, Weak};
    let want = [
        vec![
            member(&a0, Strong),
            member(&a1, Strong),
            member(&b0, Weak),
            member(&b1, Strong),
            member(&c0, Boosted),
            member(&e0, Weak),
        ],
        vec![member(&a0, Strong), member(&a1, Strong), member(&e0, Weak)],
        vec![
            member(&a0, Strong),
            member(&a1, Strong),
            member(&c0, Strong),
            member(&e0, Weak),
        ],
    ];
    let cfg = SliceConfig::default();
    let got = timely::execute_directly(move |worker| {
        let mut job = ArrangedJob::new(worker, &cfg);
        let mut got = Vec::new();
        for (e, updates) in epochs.into_iter().enumerate() {
            let e = e as u64;
            job.send(e, updates);
            job.close(e);
            worker.step_while(|| job.pending(e));
            got.push(job.traces().slice(a0.id, e).expect("the epoch is complete"));
        }
        got
    });
    for (i, want) in want.iter().enumerate() {
        let mut got = got[i].clone();
        got.sort();
        let mut want = want.clone();
        want.sort();
        assert_eq!(got, want, "epoch {i}");
    }
}
