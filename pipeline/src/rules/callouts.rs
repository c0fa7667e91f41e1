//! Callouts (ComputeGraph line 1.c, `Dispatch_invoke`/`Runloop_invoke`; the queue edge of
//! line 2.c, `Dispatch_enqueue`): each work item (`workqueue_execute_start..end` in a
//! kernel worker) is a segment of its own, [`SegmentKind::WorkItem`], joined to the segment
//! that queued it. A work item started inside another splits it, and the outer item's two
//! parts are joined by a *boosted* thread-order edge (one piece of work split by the rule).
//!
//! User-space dispatches are callouts too: between the markers `argus:dispatch-begin NAME`
//! and `argus:dispatch-end NAME` ([`DISPATCH_BEGIN`]; from `trace_marker` or the
//! collector's uprobes) the thread runs one callback, a `WorkItem` segment with `work` 0 and
//! `function` [`dispatch_id`]`(NAME)`. Probes that fetch the work item's identity
//! (`argus record --dispatch BINARY:SYMBOL@N --enqueue BINARY:SYMBOL@N`) begin it with a
//! `work_start { work: item }` event instead, and the `work_queue { work: item }` of its
//! enqueue gives it the queue edge a kernel work item has; the `argus:dispatch-end` marker
//! ends either.
//!
//! While a thread is inside a callout (`callout_level > 0`) a blocking wait does not end
//! its segment (line 1.b), and what it wakes it wakes for whoever queued the item.

use super::output::{Counter, Dst, Output};
use argus_schema::{CausalEdge, EdgeKind, Event, Nanos, Segment, SegmentId, SegmentKind, Strength};
use serde::{Deserialize, Serialize};

/// The dispatch markers (`argus:dispatch-begin NAME` … `argus:dispatch-end NAME`, written by
/// applications to `trace_marker` or made by the collector from uprobes on the dispatch
/// function, `argus record --dispatch`), defined with the rest of the `argus:*` protocol in
/// [`argus_schema::markers`].
pub use argus_schema::markers::{DISPATCH_BEGIN, DISPATCH_END};

/// The `function` id of a dispatch callout's [`SegmentKind::WorkItem`]: the callout's name
/// (trimmed) hashed with FNV-1a, so callouts of different functions differ and a begin
/// matches its end.
pub use argus_schema::markers::dispatch_id;

/// A dispatch marker: the begin or the end of a dispatch of the function with this id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dispatch {
    Begin(u64),
    End(u64),
}

/// What a marker's text says of dispatch callouts, if anything.
pub(super) fn dispatch_marker(text: &str) -> Option<Dispatch> {
    if let Some(name) = text.strip_prefix(DISPATCH_BEGIN) {
        Some(Dispatch::Begin(dispatch_id(name)))
    } else {
        text.strip_prefix(DISPATCH_END)
            .map(|name| Dispatch::End(dispatch_id(name)))
    }
}

/// A work item being run (a callout), innermost last.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Callout {
    work: u64,
    function: u64,
    culled: bool,
    /// The segment of its latest part.
    seg: SegmentId,
}

/// The callouts a thread is inside, innermost last (`callout_level` is their number).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Callouts {
    stack: Vec<Callout>,
}

impl Callouts {
    /// Whether the thread is inside no callout.
    pub(super) fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }

    /// Whether the innermost callout is a maintenance callback (what it does is culled).
    pub(super) fn culled(&self) -> bool {
        self.stack.last().is_some_and(|c| c.culled)
    }

    /// Whether the innermost callout is the user-space dispatch of `function`, begun by its
    /// marker (`work` 0) or by an item-fetching probe's `work_start` (a dispatch that began
    /// before the trace did, or a kernel work item in progress, is not: a kernel work
    /// function is a kernel address, `function` a name's hash).
    pub(super) fn innermost_dispatch(&self, function: u64) -> bool {
        self.stack.last().is_some_and(|c| c.function == function)
    }

    /// A callout starts in `seg`, just opened for it; returns the segment's id.
    pub(super) fn begin(
        &mut self,
        seg: &mut Segment,
        work: u64,
        function: u64,
        culled: bool,
    ) -> SegmentId {
        seg.kind = SegmentKind::WorkItem { work, function };
        seg.events += 1;
        self.stack.push(Callout {
            work,
            function,
            culled,
            seg: seg.id,
        });
        seg.id
    }

    /// The innermost callout ended.
    pub(super) fn end(&mut self) {
        self.stack.pop();
    }

    /// After a callout ended and its segment was split at `ts`: when an outer item goes
    /// on, `cur` (the segment just opened) is its next part, joined to the previous one by
    /// a boosted thread-order edge; returns false when there is no outer item.
    pub(super) fn resume_outer(
        &mut self,
        cur: Option<&mut Segment>,
        ts: Nanos,
        out: &mut Vec<Output>,
    ) -> bool {
        let Some(outer) = self.stack.last_mut() else {
            return false;
        };
        // The outer item goes on: its parts are one piece of work.
        let prev = outer.seg;
        let kind = SegmentKind::WorkItem {
            work: outer.work,
            function: outer.function,
        };
        if let Some(c) = cur {
            c.kind = kind;
            outer.seg = c.id;
            out.push(Output::Edge(CausalEdge {
                src: prev,
                dst: c.id,
                kind: EdgeKind::ThreadOrder,
                strength: Strength::Boosted,
                ts,
                src_syscall: -1,
            }));
        }
        out.push(Output::Count(Counter::PrunedOrder));
        true
    }

    /// The thread exited.
    pub(super) fn clear(&mut self) {
        self.stack.clear();
    }
}

/// The target side of the queue edge (line 2.c) of work item `ev` (its start), run in
/// `seg`; a maintenance callback (`culled`) is counted instead.
pub(super) fn queued(ev: &Event, seg: SegmentId, culled: bool) -> Output {
    if culled {
        Output::Count(Counter::Culled)
    } else {
        Output::Dst(Dst {
            seq: ev.seq,
            seg,
            kind: EdgeKind::Queue,
            wait: -1,
            paired: true,
            waited: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{outputs, segments, Trace};
    use super::super::{Key, RulesConfig};
    use super::*;
    use argus_schema::{Context, EndCause, EventKind, Tid};

    #[test]
    fn dispatch_markers_name_their_function() {
        let id = dispatch_id("on_job");
        assert_eq!(dispatch_id("  on_job "), id, "trimmed");
        assert_ne!(dispatch_id("on_other"), id);
        let begin = format!("{DISPATCH_BEGIN} on_job");
        let end = format!("{DISPATCH_END} on_job");
        assert_eq!(dispatch_marker(&begin), Some(Dispatch::Begin(id)));
        assert_eq!(dispatch_marker(&end), Some(Dispatch::End(id)));
        assert_eq!(dispatch_marker("frame 42"), None);
    }

    #[test]
    fn a_work_item_is_a_segment_and_a_wait_inside_does_not_split_it() {
        let mut t = Trace::default();
        let (work, function) = (0xa0, 0xf0);
        t.run(10);
        let start = t.task(10, EventKind::WorkStart { work, function });
        t.block(10);
        let wake = t.push(
            1,
            0,
            Context::HardIrq,
            EventKind::Waking { target: Tid(10) },
        );
        t.run(10);
        t.task(10, EventKind::WorkEnd { work });
        let out = outputs(&t.evs, Key::Thread(Tid(10)), &RulesConfig::default());
        let item = SegmentId::new(Tid(10), 1);
        let segs = segments(&out);
        let kinds: Vec<_> = segs.iter().map(|s| (s.id.seq(), s.kind)).collect();
        assert_eq!(
            kinds,
            [
                (0, SegmentKind::Task),
                (1, SegmentKind::WorkItem { work, function }),
                (2, SegmentKind::Task),
            ],
            "{out:#?}"
        );
        assert_eq!(segs[1].end, EndCause::HandlerDone);
        // Queued work joins on the work start; the wake-up points into the item.
        for (seq, kind, paired) in [
            (start, EdgeKind::Queue, true),
            (wake, EdgeKind::Wakeup, false),
        ] {
            assert!(
                out.iter().any(|o| matches!(o, Output::Dst(d)
                    if d.seq == seq && d.seg == item && d.kind == kind && d.paired == paired)),
                "{kind:?} into the item: {out:#?}"
            );
        }
        // No thread order into or out of a work item.
        let pruned = out
            .iter()
            .filter(|o| **o == Output::Count(Counter::PrunedOrder))
            .count();
        assert_eq!(pruned, 2);
        assert!(!out.iter().any(|o| matches!(o, Output::Edge(_))));
    }
}
