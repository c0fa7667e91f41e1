//! Signals: a boundary (a delivered signal starts a segment: the handler is an asynchronous
//! callout, ARCHITECTURE.md §4) and an edge (ARCHITECTURE.md §5): `signal_generate` → the
//! target's segment that starts at the matching `signal_deliver`. A process-directed signal
//! (`kill(pid)`: generated for the group leader) delivered in another thread of the group is
//! paired through the leader's [`Key::ProcSignal`](super::Key::ProcSignal) key instead.

use super::output::{Dst, Output};
use argus_schema::{EdgeKind, Event, Pid, Segment, SegmentId, StartCause, Tid};
use serde::{Deserialize, Serialize};

/// How many generated, undelivered signals a thread remembers.
const MAX_PENDING_SIGNALS: usize = 64;

/// The signals generated for a thread and not yet delivered.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Signals {
    /// (signal, seq of the generation).
    pending: Vec<(i32, u64)>,
}

/// Whether a signal delivered now starts a segment: not when the current segment just
/// started with a wake-up and has done nothing yet.
pub(super) fn splits(cur: Option<&Segment>) -> bool {
    let fresh = cur
        .is_some_and(|c| c.start == StartCause::Woken && c.syscalls == 0 && c.start_ns == c.end_ns);
    !fresh
}

impl Signals {
    /// Signal `sig` was generated for the thread by the event `seq`.
    pub(super) fn generated(&mut self, sig: i32, seq: u64) {
        self.pending.retain(|(s, _)| *s != sig);
        if self.pending.len() >= MAX_PENDING_SIGNALS {
            self.pending.remove(0);
        }
        self.pending.push((sig, seq));
    }

    /// Signal `sig` is delivered (`ev`) to thread `tid` of process `pid`, whose segment is now
    /// `seg`: the target side of the edge from its generation.
    pub(super) fn delivered(
        &mut self,
        ev: &Event,
        sig: i32,
        seg: Option<SegmentId>,
        tid: Tid,
        pid: Pid,
        out: &mut Vec<Output>,
    ) {
        let gen = self
            .pending
            .iter()
            .position(|(s, _)| *s == sig)
            .map(|i| self.pending.remove(i).1);
        let Some(seg) = seg else {
            return;
        };
        match gen {
            Some(seq) => out.push(Output::Dst(Dst {
                seq,
                seg,
                kind: EdgeKind::Signal,
                wait: -1,
                paired: false,
                waited: false,
            })),
            // Not generated for this thread: a process-directed signal generated for the
            // group leader, paired with its generation through [`Key::ProcSignal`].
            None if tid.0 != pid.0 => out.push(Output::Dst(Dst {
                seq: ev.seq,
                seg,
                kind: EdgeKind::Signal,
                wait: -1,
                paired: true,
                waited: false,
            })),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{outputs, segments, Trace};
    use super::super::{Counter, Key, RulesConfig};
    use super::*;
    use argus_schema::EventKind;

    #[test]
    fn a_delivered_signal_starts_the_segment_its_generation_links_to() {
        let mut t = Trace::default();
        t.run(10);
        let gen = t.task(
            20,
            EventKind::SignalGenerate {
                sig: 10,
                target: Tid(10),
            },
        );
        t.task(10, EventKind::SignalDeliver { sig: 10 });
        let out = outputs(&t.evs, Key::Thread(Tid(10)), &RulesConfig::default());
        let handler = SegmentId::new(Tid(10), 1);
        assert!(out.contains(&Output::Count(Counter::SplitSignal)));
        assert!(out.contains(&Output::Dst(Dst {
            seq: gen,
            seg: handler,
            kind: EdgeKind::Signal,
            wait: -1,
            paired: false,
            waited: false,
        })));
        assert_eq!(segments(&out).len(), 2);
    }

    #[test]
    fn a_signal_for_the_group_leader_taken_by_another_thread_is_paired() {
        // Thread 101 of process 100 takes a signal generated for the leader, 100.
        let mut t = Trace::default();
        t.run(101);
        let deliver = t.task(101, EventKind::SignalDeliver { sig: 15 });
        let out = outputs(&t.evs, Key::Thread(Tid(101)), &RulesConfig::default());
        assert!(out.contains(&Output::Dst(Dst {
            seq: deliver,
            seg: SegmentId::new(Tid(101), 1),
            kind: EdgeKind::Signal,
            wait: -1,
            paired: true,
            waited: false,
        })));
    }

    #[test]
    fn a_segment_that_just_woke_is_not_split_again() {
        let mut s = Segment::starting(
            SegmentId::new(Tid(10), 1),
            Pid(10),
            argus_schema::SegmentKind::Task,
            argus_schema::Nanos(5),
            StartCause::Woken,
        );
        assert!(!splits(Some(&s)));
        s.syscalls = 1;
        assert!(splits(Some(&s)));
        assert!(splits(None));
    }
}
