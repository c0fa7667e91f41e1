//! What a partial graph holds of a whole one ([`Coverage`]), what a read lacked ([`Need`]),
//! and what a fetch brings ([`Parts`]): the vocabulary of `partial` (module docs there),
//! apart so the graph can hold its coverage without depending on the rounds.

use argus_schema::{CausalEdge, Nanos, Pid, Segment, SegmentId, Tid};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Something a diagnosis read that a partial graph did not hold.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "need", rename_all = "snake_case")]
pub enum Need {
    /// Every segment of the thread, in order.
    Thread {
        /// The thread.
        tid: Tid,
    },
    /// The thread's segments starting in `[from_ns, to_ns]`, with the last one starting before
    /// and the first one starting after (a [`Run`]).
    Window {
        /// The thread.
        tid: Tid,
        /// Start of the stretch.
        from_ns: Nanos,
        /// End of the stretch.
        to_ns: Nanos,
    },
    /// One segment (or the fact that it does not exist).
    Segment {
        /// The segment.
        id: SegmentId,
    },
    /// Every causal edge into the segment, with their sources.
    Incoming {
        /// The segment.
        id: SegmentId,
    },
    /// Every causal edge out of the segment, with their destinations.
    Outgoing {
        /// The segment.
        id: SegmentId,
    },
    /// Every thread that has segments, with its process.
    Threads,
    /// The maintained backward slice of the spin whose first segment is `spin`: its members
    /// with their incoming edges (a seed: it saves rounds, it is never required).
    Slice {
        /// The spin's first segment.
        spin: SegmentId,
    },
}

/// A stretch of one thread's segments, complete and in order (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The thread.
    pub tid: Tid,
    /// The first and last segment of the stretch; `None`: the thread has no segment at all.
    pub ids: Option<(SegmentId, SegmentId)>,
    /// The first is the thread's first segment.
    pub at_start: bool,
    /// The last is the thread's last segment.
    pub at_end: bool,
}

/// What one fetch returns: segments and edges, and what they cover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Parts {
    /// Segments.
    pub segments: Vec<Segment>,
    /// Causal edges (both ends are in `segments` or fetched before).
    pub edges: Vec<CausalEdge>,
    /// Stretches of threads fetched whole (their segments are in `segments`).
    pub runs: Vec<Run>,
    /// Segments looked up that do not exist.
    pub absent: Vec<SegmentId>,
    /// Segments whose incoming edges are all in `edges`.
    pub incoming: Vec<SegmentId>,
    /// Segments whose outgoing edges are all in `edges`.
    pub outgoing: Vec<SegmentId>,
    /// Every thread that has segments, with the process of its first segment.
    pub threads: Option<Vec<(Tid, Pid)>>,
}

/// Which parts of the whole graph a partial graph holds (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    /// Per thread, merged stretches `(first, last, at_start, at_end)`, sorted by `first`.
    pub(crate) runs: HashMap<Tid, Vec<(SegmentId, SegmentId, bool, bool)>>,
    /// Threads known to have no segment.
    pub(crate) empty: HashSet<Tid>,
    /// Segments known not to exist.
    pub(crate) absent: HashSet<SegmentId>,
    /// Segments whose incoming edges are all held.
    pub(crate) incoming: HashSet<SegmentId>,
    /// Segments whose outgoing edges are all held.
    pub(crate) outgoing: HashSet<SegmentId>,
    /// Every thread with its process, when fetched.
    pub(crate) threads: Option<Vec<(Tid, Pid)>>,
}

impl Coverage {
    pub(crate) fn add_run(&mut self, run: &Run) {
        let Some((first, last)) = run.ids else {
            self.empty.insert(run.tid);
            return;
        };
        let runs = self.runs.entry(run.tid).or_default();
        runs.push((first, last, run.at_start, run.at_end));
        runs.sort_unstable();
        // Merge stretches that share a segment: their union is complete too.
        let mut merged: Vec<(SegmentId, SegmentId, bool, bool)> = Vec::with_capacity(runs.len());
        for r in runs.drain(..) {
            match merged.last_mut() {
                Some(m) if r.0 <= m.1 => {
                    if r.1 >= m.1 {
                        m.3 = r.3 || (r.1 == m.1 && m.3);
                        m.1 = r.1;
                    }
                    m.2 |= r.0 == m.0 && r.2;
                }
                _ => merged.push(r),
            }
        }
        *runs = merged;
    }

    /// The stretch holding `id`, if any.
    pub(crate) fn run_of(&self, id: SegmentId) -> Option<(SegmentId, SegmentId, bool, bool)> {
        self.runs
            .get(&id.tid())?
            .iter()
            .find(|r| r.0 <= id && id <= r.1)
            .copied()
    }

    /// Whether every segment of `tid` is held.
    pub fn whole_thread(&self, tid: Tid) -> bool {
        self.empty.contains(&tid)
            || self
                .runs
                .get(&tid)
                .is_some_and(|r| r.iter().any(|r| r.2 && r.3))
    }

    /// Whether `id` is known not to exist.
    pub(crate) fn known_absent(&self, id: SegmentId) -> bool {
        self.absent.contains(&id) || self.run_of(id).is_some() || self.whole_thread(id.tid())
    }
}

/// The partial-graph side of a [`Graph`]: its coverage and the needs recorded so far.
#[derive(Debug, Default)]
pub(crate) struct Partial {
    pub(crate) coverage: Coverage,
    needs: std::sync::Mutex<BTreeSet<Need>>,
}

impl Partial {
    pub(crate) fn new(coverage: Coverage) -> Partial {
        Partial {
            coverage,
            needs: std::sync::Mutex::new(BTreeSet::new()),
        }
    }

    pub(crate) fn need(&self, n: Need) {
        self.needs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(n);
    }

    pub(crate) fn needs(&self) -> Vec<Need> {
        self.needs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    pub(crate) fn has_needs(&self) -> bool {
        !self
            .needs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(tid: i32, seq: u32) -> SegmentId {
        SegmentId::new(Tid(tid), seq)
    }

    #[test]
    fn runs_merge_when_they_share_a_segment_and_keep_their_ends() {
        let mut c = Coverage::default();
        let run = |a, b, s, e| Run {
            tid: Tid(7),
            ids: Some((id(7, a), id(7, b))),
            at_start: s,
            at_end: e,
        };
        c.add_run(&run(3, 5, false, false));
        c.add_run(&run(5, 9, false, true));
        assert!(!c.whole_thread(Tid(7)));
        assert_eq!(c.run_of(id(7, 4)), Some((id(7, 3), id(7, 9), false, true)));
        c.add_run(&run(10, 12, false, false));
        assert_eq!(c.runs[&Tid(7)].len(), 2, "touching is not sharing");
        c.add_run(&run(0, 3, true, false));
        assert_eq!(c.runs[&Tid(7)][0], (id(7, 0), id(7, 9), true, true));
        assert!(c.whole_thread(Tid(7)));
        assert!(c.known_absent(id(7, 6)), "inside a run and not held");
        c.add_run(&Run {
            tid: Tid(8),
            ids: None,
            at_start: true,
            at_end: true,
        });
        assert!(c.whole_thread(Tid(8)) && c.known_absent(id(8, 0)));
        assert!(!c.known_absent(id(9, 0)));
    }
}
