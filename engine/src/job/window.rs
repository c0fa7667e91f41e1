//! The collector's graph in time buckets ([`WindowGraph`]), so that forgetting what ended
//! before the retained window is dropping whole buckets, not rewriting the graph.
//!
//! ```text
//!  update (record, diff) ─► end time? ─ none (open segment, open spin) ─► open sink
//!                                     └ t ─► bucket ⌊t / step⌋ ─► its CollectionSink
//!                                            (below the floor: dropped, see below)
//!  cut at c ─► buckets ending at or before c leave, frozen ─► the live graph decodes them
//!              floor = ⌊c / step⌋                             as retractions
//!  snapshot ─► every bucket and the open sink frozen, read as one (Frozen::concat)
//! ```
//!
//! A record's *end time* ([`Timed`]) is a function of the record alone: a closed segment's
//! or spin's end, an edge's action time (`ts`, inside its source segment and no later than
//! its target's end); open segments and spins have none. A record's versions are separate
//! records, so every update of one record lands in the same bucket, and once a bucket has
//! been dropped every later update of its records (the dataflow retracting an old version, a
//! late insertion) is over before the floor and dropped too: the tables stay consistent (no
//! retraction ever misses its record). A cut costs freezing the buckets that go (no copy);
//! the live graph's worker decodes them. The first version rewrote the whole graph at every
//! cut on the collector's thread: 1.5–6.8 s per cut at 300k events/s with `--retain 30s`,
//! during which the collector published no spins (soak, 10 minutes).

use crate::collect::{add_counts, dispatch, Changed};
use argus_pipeline::dataflow::{Timed, Update};
use argus_pipeline::rules::Counts;
use argus_schema::{CausalEdge, Epoch, Nanos, Segment, Spin};
use argus_sinks::{CollectionSink, Frozen, Pack};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// One bucket of a table, and how many updates it has taken: a snapshot re-encodes only the
/// buckets whose count changed since the last one ([`Part`]).
struct Bucket<T> {
    sink: CollectionSink<T>,
    version: u64,
}

/// A table's bucket as of a capture, frozen, with its number (`None`: the open records) and
/// version (updates taken so far): the same bucket and version is the same contents.
pub(crate) struct Part<T> {
    pub(crate) bucket: Option<u64>,
    pub(crate) version: u64,
    /// When the bucket ends: every record in it ended before (`u64::MAX` for the open ones).
    pub(crate) ends_ns: u64,
    pub(crate) frozen: Frozen<T>,
}

/// One table of the graph in time buckets of `step` ns (module docs).
pub(crate) struct Windowed<T> {
    name: &'static str,
    step: u64,
    buckets: BTreeMap<u64, Bucket<T>>,
    open: CollectionSink<T>,
    /// Buckets below this were dropped: updates of their records are too.
    floor: u64,
}

impl<T: Timed + Ord + Clone + Debug + Pack> Windowed<T> {
    fn new(name: &'static str, step: u64) -> Self {
        Windowed {
            name,
            step: step.max(1),
            buckets: BTreeMap::new(),
            open: CollectionSink::new(name),
            floor: 0,
        }
    }

    /// Whether updates of `record` are kept: it is open, or ended in a bucket not dropped.
    fn keeps(&self, record: &T) -> bool {
        record
            .end_time()
            .is_none_or(|t| t.0 / self.step >= self.floor)
    }

    /// Adds one update (dropped when its record is over before the floor).
    fn update(&mut self, record: T, diff: i64) {
        match record.end_time() {
            None => self.open.update(record, diff),
            Some(t) => {
                let b = t.0 / self.step;
                if b < self.floor {
                    return;
                }
                let name = self.name;
                let bucket = self.buckets.entry(b).or_insert_with(|| Bucket {
                    sink: CollectionSink::new(name),
                    version: 0,
                });
                bucket.sink.update(record, diff);
                bucket.version += 1;
            }
        }
    }

    /// Drops the buckets that end at or before `cutoff`; returns them frozen.
    fn forget_before(&mut self, cutoff: Nanos) -> Frozen<T> {
        let floor = cutoff.0 / self.step;
        self.floor = self.floor.max(floor);
        let kept = self.buckets.split_off(&self.floor);
        let gone = std::mem::replace(&mut self.buckets, kept);
        Frozen::concat(self.name, gone.into_values().map(|mut b| b.sink.freeze()))
    }

    /// The whole table as it stands, frozen (no copy: see [`CollectionSink::freeze`]).
    pub(crate) fn freeze(&mut self) -> Frozen<T> {
        Frozen::concat(self.name, self.parts().into_iter().map(|p| p.frozen))
    }

    /// The table as it stands, bucket by bucket (oldest first), then the open records.
    pub(crate) fn parts(&mut self) -> Vec<Part<T>> {
        let mut parts: Vec<Part<T>> = self
            .buckets
            .iter_mut()
            .map(|(&b, bucket)| Part {
                bucket: Some(b),
                version: bucket.version,
                ends_ns: (b + 1).saturating_mul(self.step),
                frozen: bucket.sink.freeze(),
            })
            .collect();
        parts.push(Part {
            bucket: None,
            version: 0,
            ends_ns: u64::MAX,
            frozen: self.open.freeze(),
        });
        parts
    }

    /// The records, sorted (each repeated by its positive net count).
    pub(crate) fn contents(&mut self) -> Vec<T> {
        self.freeze().contents_checked().0
    }

    /// Where the retained window starts: records that ended before this are gone.
    fn floor_ns(&self) -> Nanos {
        Nanos(self.floor.saturating_mul(self.step))
    }
}

/// How wide a time bucket is. Narrow buckets mean a snapshot re-encodes little besides what
/// changed since the one before ([`Part`]: the soak's 10 s snapshots of a 30 s window
/// re-encoded 60–80% of the rows with buckets a quarter of `--retain` wide, 7.5 s), and each
/// cut hands the live graph a second of records to retract instead of a quarter of the
/// window at once.
pub(crate) const BUCKET_NS: u64 = 1_000_000_000;

/// How much a retention cut takes at once (`None` without retention): a quarter of
/// `--retain` in whole buckets, at least one. The live graph keeps the records that ended in
/// each such stretch in a layer of its own and drops it whole when the collector cuts it
/// (`layers.rs`): cutting a second at a time, it retracted every record one by one, which
/// cost its worker more than arranging them had (soak, 300k events/s, `--retain 30s`: ~10
/// epochs of ~700k updates took 1–1.9 s to step, against ~30 ms per 36k-update epoch before
/// the first cut) and it fell behind every 40 s.
pub(crate) fn cut_step_ns(retain: Option<std::time::Duration>) -> Option<u64> {
    let r = retain?.as_nanos() as u64;
    Some((r / 4 / BUCKET_NS).max(1) * BUCKET_NS)
}

/// The collector's graph (as [`crate::collect::GraphSink`] for a build), each table
/// [`Windowed`], and its retention (`--retain`): buckets are [`BUCKET_NS`] wide, and whenever
/// `watermark − retain`, rounded down to a [`cut_step_ns`], passes the end of the oldest
/// bucket, the buckets that ended before it leave ([`WindowGraph::forget_due`]). The graph
/// holds between `retain` and `retain` + a cut step (a quarter of `retain`) of history, plus
/// what is still open (a thread blocked for longer shows whole).
pub(crate) struct WindowGraph {
    pub(crate) segments: Windowed<Segment>,
    pub(crate) edges: Windowed<CausalEdge>,
    pub(crate) spins: Windowed<Spin>,
    /// The last epoch done, with its watermark.
    pub(crate) done: Option<(Epoch, Nanos)>,
    /// What the rules split, pruned and culled, summed over the epochs done.
    pub(crate) counts: Counts,
    /// `--retain` in ns (`u64::MAX`: keep everything).
    retain: u64,
    /// Cutoffs are multiples of this ([`cut_step_ns`]).
    cut_step: u64,
    /// The furthest the dataflow's horizon has reached (ns): records that ended before it
    /// are not kept, whatever the window ([`WindowGraph::forget_due`]).
    forgotten_by_dataflow: u64,
}

/// What a cut took out of the graph, frozen.
pub(crate) struct Forgotten {
    pub(crate) segments: Frozen<Segment>,
    pub(crate) edges: Frozen<CausalEdge>,
    pub(crate) spins: Frozen<Spin>,
}

impl Forgotten {
    /// Its records as retractions (decoded here: on the live graph's thread).
    pub(crate) fn retractions(self) -> Vec<(Update, i64)> {
        let (segments, _) = self.segments.contents_checked();
        let (edges, _) = self.edges.contents_checked();
        let (spins, _) = self.spins.contents_checked();
        let mut out = Vec::with_capacity(segments.len() + edges.len() + spins.len());
        out.extend(segments.into_iter().map(|s| (Update::Segment(s), -1)));
        out.extend(edges.into_iter().map(|e| (Update::Edge(e), -1)));
        out.extend(spins.into_iter().map(|s| (Update::Spin(s), -1)));
        out
    }

    /// Updates it holds (an upper bound of its records).
    pub(crate) fn updates(&self) -> usize {
        self.segments.updates() + self.edges.updates() + self.spins.updates()
    }
}

impl WindowGraph {
    /// An empty graph keeping `retain` (`None`: everything, in one bucket).
    pub(crate) fn new(retain: Option<std::time::Duration>) -> WindowGraph {
        let cut_step = cut_step_ns(retain).unwrap_or(u64::MAX);
        let (retain, step) = match retain {
            Some(r) => {
                let r = r.as_nanos() as u64;
                (r, BUCKET_NS)
            }
            None => (u64::MAX, u64::MAX),
        };
        WindowGraph {
            retain,
            cut_step,
            forgotten_by_dataflow: 0,
            segments: Windowed::new("segments", step),
            edges: Windowed::new("edges", step),
            spins: Windowed::new("spins", step),
            done: None,
            counts: Counts::default(),
        }
    }

    /// Drops from `updates` those of records over before the window (before they are
    /// copied to the live graph, which must not get them either).
    pub(crate) fn keep(&self, updates: &mut Vec<(Update, i64)>) {
        if self.segments.floor == 0 {
            // Nothing dropped yet (every table is cut at once).
            return;
        }
        updates.retain(|(u, _)| match u {
            Update::Segment(s) => self.segments.keeps(s),
            Update::Edge(e) => self.edges.keeps(e),
            Update::Spin(s) => self.spins.keeps(s),
        });
    }

    /// Applies updates (moved, each to its table; those [`WindowGraph::keep`] drops are
    /// dropped here too).
    pub(crate) fn update(&mut self, updates: Vec<(Update, i64)>) -> Changed {
        dispatch(
            updates,
            |s, d| self.segments.update(s, d),
            |e, d| self.edges.update(e, d),
            |s, d| self.spins.update(s, d),
        )
    }

    /// Every update of `epoch` has been applied: it is the last done, and its rule
    /// counters are added up.
    pub(crate) fn epoch_done(&mut self, epoch: Epoch, watermark: Nanos, counts: &Counts) {
        add_counts(&mut self.counts, counts);
        self.done = Some((epoch, watermark));
    }

    /// At the end of an epoch with `watermark`: when `watermark − retain`, rounded down to
    /// a cut step, is past the oldest bucket, drops the buckets below it and returns them.
    /// `window` (ns) keeps less than `retain` when shorter (the memory budget: `budget.rs`);
    /// its cuts are rounded to a quarter of it, so they need not fall on the live graph's
    /// layer boundaries (it retracts what a cut takes from a layer it keeps).
    ///
    /// The dataflow forgets its state after twice the window (`job::continuous`), so when a
    /// window grows back the collector never keeps a record from before the furthest the
    /// dataflow's horizon has reached (`watermark − 2 × window` at any cut so far): a later
    /// change to it could not be applied.
    pub(crate) fn forget_due(&mut self, watermark: Nanos, window: u64) -> Option<Forgotten> {
        let (keep, step) = if window < self.retain {
            let step =
                cut_step_ns(Some(std::time::Duration::from_nanos(window))).unwrap_or(BUCKET_NS);
            (window, step)
        } else {
            (self.retain, self.cut_step)
        };
        self.forgotten_by_dataflow = self
            .forgotten_by_dataflow
            .max(watermark.0.saturating_sub(keep.saturating_mul(2)));
        let cutoff = watermark
            .0
            .saturating_sub(keep)
            .max(self.forgotten_by_dataflow);
        let cutoff = Nanos(cutoff - cutoff % step);
        (cutoff.0 / self.segments.step > self.segments.floor).then(|| self.forget_before(cutoff))
    }

    /// Drops what ended before the bucket holding `cutoff` (every record of the buckets
    /// below it); returns it.
    fn forget_before(&mut self, cutoff: Nanos) -> Forgotten {
        Forgotten {
            segments: self.segments.forget_before(cutoff),
            edges: self.edges.forget_before(cutoff),
            spins: self.spins.forget_before(cutoff),
        }
    }

    /// Where the retained window starts (0 before the first cut).
    pub(crate) fn window_start(&self) -> Nanos {
        self.segments.floor_ns()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use argus_schema::{
        EdgeKind, EndCause, Pid, SegmentId, SegmentKind, StartCause, Strength, Tid,
    };

    /// A task segment of `tid`, closed (woken) at `end` or open.
    pub(crate) fn seg(tid: i32, ord: u32, start: u64, end: Option<u64>) -> Segment {
        let mut s = Segment::starting(
            SegmentId::new(Tid(tid), ord),
            Pid(tid),
            SegmentKind::Task,
            Nanos(start),
            StartCause::Created,
        );
        if let Some(e) = end {
            s.end = EndCause::Woken;
            s.end_ns = Nanos(e);
        }
        s
    }

    fn edge(ts: u64) -> CausalEdge {
        CausalEdge {
            src: SegmentId::new(Tid(1), 0),
            dst: SegmentId::new(Tid(2), 0),
            kind: EdgeKind::Wakeup,
            strength: Strength::Strong,
            ts: Nanos(ts),
            src_syscall: -1,
        }
    }

    /// Records go to the bucket of their end time (open ones to the open sink); a cut drops
    /// the buckets below the cutoff's and returns them; updates of their records are dropped
    /// afterwards (also from the message), and a snapshot reads every bucket as one table.
    #[test]
    fn a_cut_drops_whole_buckets_and_later_updates_of_their_records() {
        let mut g = WindowGraph::new(None);
        // Buckets of 10 ns (a retain of 40 ns, were it one), cut one at a time.
        g.retain = 40;
        g.cut_step = 10;
        for t in [&mut g.segments.step, &mut g.edges.step, &mut g.spins.step] {
            *t = 10;
        }
        let open = seg(1, 0, 2, None);
        let (a, b, c) = (
            seg(2, 0, 1, Some(5)),
            seg(3, 0, 8, Some(15)),
            seg(4, 0, 20, Some(27)),
        );
        let mut ups = vec![
            (Update::Segment(open.clone()), 1),
            (Update::Segment(a.clone()), 1),
            (Update::Segment(b.clone()), 1),
            (Update::Segment(c.clone()), 1),
            (Update::Edge(edge(4)), 1),
            (Update::Edge(edge(21)), 1),
        ];
        g.keep(&mut ups);
        assert_eq!(ups.len(), 6);
        let changed = g.update(ups);
        assert_eq!(changed.open_segments, 1);
        let mut want = vec![open.clone(), a.clone(), b.clone(), c.clone()];
        want.sort();
        assert_eq!(g.segments.contents(), want);
        // Watermark 56, cutoff 16: not past bucket 1 ([10, 20)), which holds it: bucket 0
        // goes. Watermark 59: still in bucket 1, nothing more.
        let gone = g.forget_due(Nanos(56), u64::MAX).unwrap();
        assert!(g.forget_due(Nanos(59), u64::MAX).is_none());
        assert_eq!(g.window_start(), Nanos(10));
        let r = gone.retractions();
        assert_eq!(
            r,
            vec![
                (Update::Segment(a.clone()), -1),
                (Update::Edge(edge(4)), -1)
            ]
        );
        let mut want = vec![open.clone(), b.clone(), c.clone()];
        want.sort();
        assert_eq!(g.segments.contents(), want);
        // Later: the dataflow retracts `a` and inserts an edge of time 3 (both over before
        // the window: dropped, from the message too), and closes the open segment.
        let closed = seg(1, 0, 2, Some(30));
        let mut ups = vec![
            (Update::Segment(a), -1),
            (Update::Edge(edge(3)), 1),
            (Update::Segment(open), -1),
            (Update::Segment(closed.clone()), 1),
        ];
        g.keep(&mut ups);
        assert_eq!(ups.len(), 2, "{ups:?}");
        let changed = g.update(ups);
        assert_eq!(changed.open_segments, -1);
        let (segs, check) = g.segments.freeze().contents_checked();
        assert!(check.is_ok(), "{check:?}");
        let mut want = vec![b, c, closed];
        want.sort();
        assert_eq!(segs, want);
        let (edges, check) = g.edges.freeze().contents_checked();
        assert!(check.is_ok());
        assert_eq!(edges, vec![edge(21)]);
    }

    /// A cut takes a quarter of `--retain` at once, in whole buckets (at least one): the
    /// cutoff is `watermark − retain` rounded down to a multiple of it, the live graph's
    /// layer boundaries (`layers.rs`).
    #[test]
    fn cuts_fall_on_multiples_of_a_quarter_of_retain() {
        let s = 1_000_000_000u64;
        let secs = |n| Some(std::time::Duration::from_secs(n));
        assert_eq!(cut_step_ns(None), None);
        assert_eq!(cut_step_ns(secs(2)), Some(s));
        assert_eq!(cut_step_ns(secs(30)), Some(7 * s));
        assert_eq!(cut_step_ns(secs(60)), Some(15 * s));
        let mut g = WindowGraph::new(secs(30));
        let mut ups = vec![
            (Update::Segment(seg(1, 0, 0, Some(3 * s))), 1),
            (Update::Segment(seg(2, 0, 0, Some(8 * s))), 1),
        ];
        g.keep(&mut ups);
        g.update(ups);
        // Cutoff 36.9 − 30 = 6.9 s: below the first step (7 s), nothing goes.
        assert!(g.forget_due(Nanos(36 * s + 9 * s / 10), u64::MAX).is_none());
        // 37.5 − 30 = 7.5 s → 7 s: the buckets before 7 s go (the segment ended at 3 s).
        let gone = g.forget_due(Nanos(37 * s + s / 2), u64::MAX).unwrap();
        assert_eq!(gone.retractions().len(), 1);
        assert_eq!(g.window_start(), Nanos(7 * s));
        // Until 14 s − retain, no more.
        assert!(g.forget_due(Nanos(43 * s + 9 * s / 10), u64::MAX).is_none());
        assert!(g.forget_due(Nanos(44 * s), u64::MAX).is_some());
        assert_eq!(g.window_start(), Nanos(14 * s));
    }

    /// A window shorter than `--retain` (the memory budget's) cuts at `watermark − window`,
    /// rounded to a quarter of that window, not to the layers' step; back at `--retain`, the
    /// cuts follow `--retain` again and never bring anything back.
    #[test]
    fn a_budget_window_cuts_sooner_in_steps_of_its_own_quarter() {
        let s = 1_000_000_000u64;
        let mut g = WindowGraph::new(Some(std::time::Duration::from_secs(600)));
        let mut ups: Vec<(Update, i64)> = (0..100)
            .map(|i| {
                (
                    Update::Segment(seg(i, 0, 0, Some(u64::from(i as u32) * s + 1))),
                    1,
                )
            })
            .collect();
        g.keep(&mut ups);
        g.update(ups);
        // --retain 600 s: at 100 s nothing is due.
        assert!(g.forget_due(Nanos(100 * s), u64::MAX).is_none());
        // A 20 s window: cutoff 80 s (a multiple of 5 s), the segments that ended before go.
        let gone = g.forget_due(Nanos(100 * s), 20 * s).unwrap();
        assert_eq!(gone.retractions().len(), 80);
        assert_eq!(g.window_start(), Nanos(80 * s));
        // 103 s − 20 s = 83 s → 80 s: nothing more; at 105 s, up to 85 s.
        assert!(g.forget_due(Nanos(103 * s), 20 * s).is_none());
        assert_eq!(
            g.forget_due(Nanos(105 * s), 20 * s)
                .unwrap()
                .retractions()
                .len(),
            5
        );
        // The dataflow forgot what is older than twice the window: 105 − 40 s.
        assert_eq!(g.forgotten_by_dataflow, 65 * s);
        // Back to --retain: nothing is due before 600 s past the window start.
        assert!(g.forget_due(Nanos(200 * s), u64::MAX).is_none());
        assert_eq!(g.segments.contents().len(), 15);
    }

    /// A bucket's version moves with every update it takes and only then: a snapshot
    /// encodes again the buckets whose version changed. The open records come last.
    #[test]
    fn parts_carry_their_bucket_and_a_version_that_moves_with_its_updates() {
        let mut g = WindowGraph::new(Some(std::time::Duration::from_secs(4)));
        let step = 1_000_000_000;
        let a = seg(1, 0, 0, Some(step / 2));
        let b = seg(2, 0, 0, Some(step + 1));
        g.update(vec![
            (Update::Segment(a.clone()), 1),
            (Update::Segment(b.clone()), 1),
            (Update::Segment(seg(3, 0, 0, None)), 1),
        ]);
        let versions = |g: &mut WindowGraph| -> Vec<(Option<u64>, u64)> {
            g.segments
                .parts()
                .iter()
                .map(|p| (p.bucket, p.version))
                .collect()
        };
        let first = versions(&mut g);
        assert_eq!(first, vec![(Some(0), 1), (Some(1), 1), (None, 0)]);
        assert_eq!(versions(&mut g), first, "nothing changed");
        // A retraction and a new version of b: bucket 1 moves, bucket 0 stays.
        let mut b2 = b.clone();
        b2.events += 1;
        g.update(vec![
            (Update::Segment(b), -1),
            (Update::Segment(b2.clone()), 1),
        ]);
        assert_eq!(
            versions(&mut g),
            vec![(Some(0), 1), (Some(1), 3), (None, 0)]
        );
        let parts = g.segments.parts();
        let (got, check) = parts[1].frozen.clone().contents_checked();
        assert!(check.is_ok());
        assert_eq!(got, vec![b2]);
    }

    /// With no retention (one bucket) nothing is ever dropped.
    #[test]
    fn one_bucket_keeps_everything() {
        let mut g = WindowGraph::new(None);
        g.update(vec![(Update::Edge(edge(4)), 1)]);
        assert!(g.forget_due(Nanos(u64::MAX), u64::MAX).is_none());
        assert_eq!(g.edges.contents(), vec![edge(4)]);
        assert_eq!(g.window_start(), Nanos(0));
    }
}
