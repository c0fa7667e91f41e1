//! The dataflow's output, consolidated: one [`GraphSink`] holds the graph as one
//! [`CollectionSink`] per table (segments, edges, spins) and where the output stands (epochs
//! done, the last one and its watermark, the rule counters summed).
//!
//! ```text
//!  dataflow ─► Message::Updates   ─► GraphSink::update     ─► the three tables
//!           └► Message::EpochDone ─► GraphSink::epoch_done ─► epochs, done, counts
//! ```
//!
//! `argus build` collects a whole run into one ([`GraphSink::collect`]) and streams its
//! tables into the snapshot; each generation of `argus start` keeps one live
//! (`start/generations.rs`), with its own extras on top: the open-segment count for the
//! status line, the spins published when an epoch changed them, snapshot requests served
//! at epoch boundaries.

use argus_pipeline::dataflow::{Message, Update};
use argus_pipeline::rules::Counts;
use argus_schema::{CausalEdge, EndCause, Epoch, Nanos, Segment, Spin, UpdateSink};
use argus_sinks::CollectionSink;

/// The graph the dataflow has sent so far, consolidated.
pub(crate) struct GraphSink {
    /// Vertices.
    pub(crate) segments: CollectionSink<Segment>,
    /// Causal edges.
    pub(crate) edges: CollectionSink<CausalEdge>,
    /// Spinning vertices.
    pub(crate) spins: CollectionSink<Spin>,
    /// Epochs done.
    pub(crate) epochs: u64,
    /// The last epoch done, with its watermark.
    pub(crate) done: Option<(Epoch, Nanos)>,
    /// What the rules split, pruned and culled, summed over the epochs done.
    pub(crate) counts: Counts,
}

/// What a message of updates changed besides the tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Changed {
    /// The net change in open segments (those with [`EndCause::Open`]).
    pub(crate) open_segments: i64,
    /// Whether any spin was inserted or retracted.
    pub(crate) spins: bool,
}

impl GraphSink {
    /// An empty graph, no epoch done.
    pub(crate) fn new() -> GraphSink {
        GraphSink {
            segments: CollectionSink::new("segments"),
            edges: CollectionSink::new("edges"),
            spins: CollectionSink::new("spins"),
            epochs: 0,
            done: None,
            counts: Counts::default(),
        }
    }

    /// Consumes the dataflow's whole output. The tables are left as sorted runs: a build
    /// streams them, merged, into Parquet (or consolidates them when it needs the whole
    /// graph in memory).
    pub(crate) fn collect(rx: crossbeam_channel::Receiver<Message>) -> GraphSink {
        let mut graph = GraphSink::new();
        for msg in rx {
            graph.apply(msg);
        }
        graph
    }

    /// Takes one message of the dataflow.
    pub(crate) fn apply(&mut self, msg: Message) {
        match msg {
            Message::Updates { epoch, updates } => {
                self.update(epoch, updates);
            }
            Message::EpochDone {
                epoch,
                watermark,
                counts,
                ..
            } => self.epoch_done(epoch, watermark, &counts),
        }
    }

    /// Applies updates at `epoch`, each to its table (moved, no per-table copy).
    pub(crate) fn update(&mut self, epoch: Epoch, updates: Vec<(Update, i64)>) -> Changed {
        let changed = dispatch(
            updates,
            |s, d| self.segments.update(s, d),
            |e, d| self.edges.update(e, d),
            |s, d| self.spins.update(s, d),
        );
        // Records the epoch (the updates went in above).
        self.segments.apply(epoch, &mut std::iter::empty());
        self.edges.apply(epoch, &mut std::iter::empty());
        self.spins.apply(epoch, &mut std::iter::empty());
        changed
    }

    /// Every update of `epoch` has been applied: it is the last done, and its rule
    /// counters are added up.
    pub(crate) fn epoch_done(&mut self, epoch: Epoch, watermark: Nanos, counts: &Counts) {
        add_counts(&mut self.counts, counts);
        self.epochs += 1;
        self.done = Some((epoch, watermark));
    }
}

/// Hands each update to its table's function (moved); says what changed besides the tables.
pub(crate) fn dispatch(
    updates: Vec<(Update, i64)>,
    mut segment: impl FnMut(Segment, i64),
    mut edge: impl FnMut(CausalEdge, i64),
    mut spin: impl FnMut(Spin, i64),
) -> Changed {
    let mut changed = Changed::default();
    for (u, d) in updates {
        match u {
            Update::Segment(s) => {
                if s.end == EndCause::Open {
                    changed.open_segments += d;
                }
                segment(s, d)
            }
            Update::Edge(e) => edge(e, d),
            Update::Spin(s) => {
                changed.spins = true;
                spin(s, d)
            }
        }
    }
    changed
}

/// Adds one epoch's rule counters to the totals.
pub(crate) fn add_counts(total: &mut Counts, counts: &Counts) {
    for (t, n) in total.values.iter_mut().zip(counts.values) {
        *t += n;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_pipeline::rules::Counter;
    use argus_schema::{Pid, SegmentId, SegmentKind, StartCause, Tid};

    fn segment(seq: u32, end: EndCause) -> Segment {
        Segment {
            end,
            ..Segment::starting(
                SegmentId::new(Tid(7), seq),
                Pid(7),
                SegmentKind::Task,
                Nanos(5),
                StartCause::Created,
            )
        }
    }

    #[test]
    fn updates_and_epochs_accumulate_and_say_what_changed() {
        let mut g = GraphSink::new();
        let open = segment(0, EndCause::Open);
        let changed = g.update(Epoch(0), vec![(Update::Segment(open.clone()), 1)]);
        assert_eq!(
            changed,
            Changed {
                open_segments: 1,
                spins: false
            }
        );
        let mut counts = Counts::default();
        counts.add(Counter::ALL[0], 2);
        g.apply(Message::EpochDone {
            epoch: Epoch(0),
            watermark: Nanos(10),
            events: 3,
            counts: counts.clone(),
        });
        // The open segment closes.
        let closed = segment(0, EndCause::Woken);
        let changed = g.update(
            Epoch(1),
            vec![
                (Update::Segment(open), -1),
                (Update::Segment(closed.clone()), 1),
            ],
        );
        assert_eq!(changed.open_segments, -1);
        g.epoch_done(Epoch(1), Nanos(20), &counts);
        assert_eq!(g.segments.contents(), vec![closed]);
        assert_eq!(g.segments.epoch(), Some(Epoch(1)));
        assert_eq!(g.epochs, 2);
        assert_eq!(g.done, Some((Epoch(1), Nanos(20))));
        assert_eq!(g.counts.get(Counter::ALL[0]), 4);
    }
}
