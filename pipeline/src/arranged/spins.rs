//! Spinning vertices derived from the arranged segments, maintained by differential dataflow:
//! at every epoch the same spins as the keyed rule machines put in the graph's spins table
//! (`spins_by_thread`), computed from `segments_by_id` and the watermark alone.
//!
//! The spins come from `rules/spins.rs`: a long segment
//! (`single_spin`), a run of short timed waits (a yield loop, one RepeatedYield) and
//! consecutive timed-out waits on one object (a logical wait, one LongWait). The rule machine
//! of a thread feeds each segment, once *final*, to its trackers (`Spins::finish`), closes
//! both runs when the thread exits (`Spins::exit`) and reports the runs in progress, and the
//! open segment's spin, as *open* spins once the watermark has passed their start by the
//! threshold (`Spins::mutable`, `past_threshold`).
//!
//! **Which spins the dataflow's table holds at an epoch**, for one thread whose segments
//! (ordinals consecutive from 0, in time order) are `0 … n`:
//!
//! ```text
//!   closed single spins  single_spin(s, s.end_ns, closed) of every closed segment s (a final
//!                        one's, and the pending one's, which the machine reports as it will be)
//!   closed run spins     what feeding the final segments in order emits (Spins::finish), and
//!                        Spins::exit after the thread's Exit segment
//!   open run spins       the trackers' state after the last final segment f, with the open
//!                        segment o:  open_run always; open_logical(o) and open_spin(o) once
//!                        the watermark W has passed their start by the threshold
//!   pending              the closed segment before o that ended in a wake-up inside a syscall
//!                        whose return is not seen yet (end Woken, wait_syscall ≥ 0,
//!                        wait_ret None): it is not final, f is the one before it
//! ```
//!
//! An open spin reported at an earlier epoch stays in the table while nothing touches its
//! thread; it is what the same computation gives with the current watermark, since the
//! watermark only grows and the keyed stage wakes a thread when it crosses one of its
//! deadlines (`dataflow/keyed.rs`). So the table at epoch `e` is a function of the segments at
//! `e` and the watermark `W_e`, which this module computes.
//!
//! **The computation** ([`derived_spins`]). Segment `s` of thread `t` has id `(t, k)`; its
//! predecessor is `(t, k − 1)` (the ordinals of a thread are consecutive), found by key:
//!
//! ```text
//!  pending  = closed segments of the pending shape ⋉ (open segments' predecessors)
//!  finals   = closed task segments − pending
//!  scans    = iterate { x ↦ (finals ⋈ x on predecessor: step(x(pred), s))
//!                           ∪ (finals whose predecessor has no entry in x: step(∅, s)) }
//!             keeping the entries whose state or closed spins are not empty
//!  step(st, s) = st.finish(s) (and st.exit() after an Exit segment): the trackers after s,
//!                and the run spins that s closed
//!  tails    = open segments o, by f (o − 1, or o − 2 past a pending one) ⋈ scans
//!  spins    = closed single spins ∪ closed run spins of the scans ∪ open_run of the tails
//!             ∪ (open_logical of the tails ∪ open_spin of the open segments) ⋈ W,
//!               kept where past_threshold(spin.start_ns, W)
//! ```
//!
//! The scan carries the rule machine's own trackers (`Spins`) from a final segment to the
//! next, instead of labelling runs and summing each run with a `reduce`: a run's members are
//! not a local property of two neighbours (a logical wait inside a yield loop is skipped by
//! it, not ending it; a wait on the run's object that ended otherwise than by a wake-up is
//! skipped by the logical wait), and a `reduce` per run would read the whole run again at
//! every epoch it grows. Here appending a segment to a run costs one step. A segment out of
//! any run has no entry (most segments), so a chain in the iteration is as long as a run's
//! stretch of new segments: an epoch's rounds are the most new segments one run got in it.
//!
//! **Costs.** Per epoch: the changed segments (one step each, a step for their successors
//! when their entry changed), plus the open candidates compared with the new watermark (one
//! per open segment and per logical wait in progress: the comparison is a join on the
//! watermark, so it reads every candidate when the watermark moves, on the one worker that
//! owns the key). Memory: one entry per segment in a run, one per open segment.
//!
//! **What is not matched.** The segments do not say two things the machines know:
//!
//! - whether the thread's latest file lock attempt was refused when a segment became final
//!   (a refused attempt makes the sleeps after it turns of a retry loop, however long: the
//!   `lock_refused` argument of `Spins::finish`). The scan takes every segment as not after a
//!   refusal, so a thread's spins differ from the machines' after a refused lock attempt;
//! - whether a segment of the pending shape followed by the open segment is still pending or
//!   was made final by the return of *another* syscall than the one it waited in (its result
//!   then stays unknown): the scan takes it as pending. The difference lasts until the open
//!   segment closes.
//!
//! A spin's `pid` is the segment's that ends (or, open, continues) the run, where the machine
//! takes the thread's latest: they differ only if the thread's pid changed in between.
//! Outside these the derived spins equal the table at every epoch (the oracle test
//! `derived_spins_equal_the_dataflows_every_epoch_*` in `pipeline/tests/arranged.rs`).

use super::{ArrangedGraph, Diff, Time};
use crate::rules::spins::{open_spin, past_threshold, single_spin, Spins};
use crate::rules::{Output, RulesConfig};
use argus_schema::{EndCause, Nanos, Segment, SegmentId, Spin, Tid};
use differential_dataflow::operators::Iterate;
use differential_dataflow::VecCollection;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The trackers after one final segment of a thread, and the run spins that segment closed.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct Scan {
    state: Spins,
    closed: Vec<Spin>,
}

impl Scan {
    /// Whether it says nothing that the absence of an entry would not.
    fn is_empty(&self) -> bool {
        self.state.is_empty() && self.closed.is_empty()
    }
}

/// The trackers in `prev` (none: empty) fed final segment `seg`, and what that closed.
fn step(prev: Option<&Spins>, seg: &Segment, cfg: &RulesConfig) -> Scan {
    let mut state = prev.cloned().unwrap_or_default();
    let mut out = Vec::new();
    // Not after a refused lock attempt: the segments do not say (see the module docs).
    state.finish(seg, seg.tid, seg.pid, false, cfg, &mut out);
    if seg.end == EndCause::Exit {
        state.exit(seg.tid, seg.pid, cfg, &mut out);
    }
    let closed = out
        .into_iter()
        .filter_map(|o| match o {
            Output::Spin(s) => Some(s),
            _ => None,
        })
        .collect();
    Scan { state, closed }
}

/// The segment before `id` in its thread.
fn pred(id: SegmentId) -> Option<SegmentId> {
    id.seq()
        .checked_sub(1)
        .map(|seq| SegmentId::new(id.tid(), seq))
}

/// The segment after `id` in its thread.
fn succ(id: SegmentId) -> Option<SegmentId> {
    id.seq()
        .checked_add(1)
        .map(|seq| SegmentId::new(id.tid(), seq))
}

/// A segment of a task's rule machine (the only ones with spin trackers).
fn of_task(s: &Segment) -> bool {
    s.tid.is_task()
}

fn is_open(s: &Segment) -> bool {
    s.end == EndCause::Open
}

/// Closed by a wake-up inside a syscall whose return has not been seen: the machine holds
/// such a segment back (pending) until the return, or until its successor closes.
fn pending_shape(s: &Segment) -> bool {
    s.end == EndCause::Woken && s.wait_syscall >= 0 && s.wait_ret.is_none()
}

/// The spins of `graph`'s segments with the watermark `watermark` (one record, the current
/// one; none: no open spin that needs it is reported), as `(tid, spin)`: at every epoch those
/// of the dataflow's spins table (see the module docs for the exceptions).
pub fn derived_spins<'scope>(
    graph: &ArrangedGraph<'scope>,
    watermark: VecCollection<'scope, Time, Nanos, Diff>,
    cfg: &RulesConfig,
) -> VecCollection<'scope, Time, (Tid, Spin), Diff> {
    let segments = &graph.segments_by_id;
    let single_cfg = cfg.clone();
    let singles = segments.clone().flat_map_ref(move |_, s: &Arc<Segment>| {
        (!is_open(s))
            .then(|| single_spin(s, s.end_ns, false, &single_cfg))
            .flatten()
            .map(|spin| (spin.tid, spin))
    });

    // The pending segment of each thread: of the pending shape, followed by the open one.
    let open_preds = segments
        .clone()
        .flat_map_ref(|id: &SegmentId, s: &Arc<Segment>| {
            (is_open(s) && of_task(s)).then(|| pred(*id)).flatten()
        });
    let pending = segments
        .clone()
        .flat_map_ref(|id: &SegmentId, s: &Arc<Segment>| {
            (of_task(s) && pending_shape(s)).then_some((*id, ()))
        })
        .semijoin(open_preds)
        .map(|(id, ())| id);

    // Each final segment fed to empty trackers, where that says something: the entry of a
    // segment whose predecessor has none.
    let fresh_cfg = cfg.clone();
    let fresh = segments
        .clone()
        .flat_map_ref(move |id: &SegmentId, s: &Arc<Segment>| {
            (!is_open(s) && of_task(s))
                .then(|| (*id, step(None, s, &fresh_cfg)))
                .filter(|(_, scan)| !scan.is_empty())
        })
        .antijoin(pending.clone());
    let firsts = fresh.clone().filter(|(id, _)| id.seq() == 0);
    let fresh_by_pred = fresh.flat_map(|(id, scan)| pred(id).map(|p| (p, (id, scan))));

    let loop_cfg = cfg.clone();
    let scans = firsts.clone().iterate(|scope, x| {
        let segments = graph.segments_by_id.clone().enter(scope);
        let pending = pending.clone().enter(scope);
        let firsts = firsts.clone().enter(scope);
        let fresh_by_pred = fresh_by_pred.clone().enter(scope);
        let cfg = loop_cfg.clone();
        let carried = x
            .clone()
            .flat_map(|(id, scan): (SegmentId, Scan)| succ(id).map(|s| (s, scan.state)))
            .join_core(
                segments,
                move |id: &SegmentId, state: &Spins, s: &Arc<Segment>| {
                    (!is_open(s) && of_task(s))
                        .then(|| (*id, step(Some(state), s, &cfg)))
                        .filter(|(_, scan)| !scan.is_empty())
                },
            )
            .antijoin(pending);
        let started = fresh_by_pred
            .antijoin(x.map(|(id, _)| id))
            .map(|(_, entry)| entry);
        carried.concat(started).concat(firsts)
    });
    let scans_by_id = scans.clone().arrange_by_key_named("arranged::spin_scans");
    let closed_runs = scans.flat_map(|(_, scan)| scan.closed.into_iter().map(|s| (s.tid, s)));

    // The open segments, by the last final segment before them.
    let open_by_pred = segments
        .clone()
        .flat_map_ref(|id: &SegmentId, s: &Arc<Segment>| {
            (is_open(s) && of_task(s))
                .then(|| pred(*id).map(|p| (p, Segment::clone(s))))
                .flatten()
        });
    let past_pending = open_by_pred
        .clone()
        .semijoin(pending.clone())
        .flat_map(|(p, o)| pred(p).map(|f| (f, o)));
    let tails_cfg = cfg.clone();
    let tails = open_by_pred
        .antijoin(pending)
        .concat(past_pending)
        .join_core(
            scans_by_id,
            move |_f: &SegmentId, o: &Segment, scan: &Scan| {
                let run = scan.state.open_run(o.tid, o.pid, &tails_cfg);
                let logical = scan.state.open_logical(Some(o), o.tid, o.pid);
                [(false, run), (true, logical)]
                    .into_iter()
                    .filter_map(|(gated, spin)| spin.map(|s| (gated, s)))
            },
        );
    let open_runs = tails
        .clone()
        .flat_map(|(gated, s)| (!gated).then_some((s.tid, s)));
    let open_cfg = cfg.clone();
    let open_segments = segments.clone().flat_map_ref(move |_, s: &Arc<Segment>| {
        (is_open(s) && of_task(s))
            .then(|| open_spin(s, &open_cfg))
            .flatten()
    });
    let gate_cfg = cfg.clone();
    let by_watermark = tails
        .flat_map(|(gated, s)| gated.then_some(s))
        .concat(open_segments)
        .map(|s| ((), s))
        .join_core(
            watermark
                .map(|w| ((), w))
                .arrange_by_key_named("arranged::watermark"),
            move |_, spin: &Spin, w: &Nanos| {
                past_threshold(spin.start_ns, *w, &gate_cfg).then(|| (spin.tid, spin.clone()))
            },
        );
    singles
        .concat(closed_runs)
        .concat(open_runs)
        .concat(by_watermark)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arranged::{ArrangedJob, JobConfig};
    use crate::dataflow::Update;
    use crate::rules::testing::{nr, outputs, Trace};
    use crate::rules::Key;
    use argus_schema::SpinClass;

    const MS: u64 = 1_000_000;
    const TID: i32 = 10;

    #[test]
    fn neighbours_are_found_by_ordinal() {
        let id = SegmentId::new(Tid(7), 3);
        assert_eq!(pred(id), Some(SegmentId::new(Tid(7), 2)));
        assert_eq!(succ(id), Some(SegmentId::new(Tid(7), 4)));
        assert_eq!(pred(SegmentId::new(Tid(7), 0)), None);
        assert_eq!(succ(SegmentId::new(Tid(7), u32::MAX)), None);
    }

    /// One turn of thread `TID`: syscall `nr` on `arg0` blocks for `ms`, is woken, returns
    /// `ret`.
    fn turn(t: &mut Trace, nr: i32, arg0: u64, ret: i64, ms: u64) {
        t.enter(TID, nr, arg0);
        t.block(TID);
        t.ts += ms * MS;
        t.wake(0, TID);
        t.run(TID);
        t.exit(TID, nr, ret);
    }

    /// The rule machine's segments and spins for the thread after `evs`, its mutable records
    /// as of the last event.
    fn machine(evs: &[argus_schema::Event], cfg: &RulesConfig) -> (Vec<Segment>, Vec<Spin>) {
        let mut segments = Vec::new();
        let mut spins = Vec::new();
        for o in outputs(evs, Key::Thread(Tid(TID)), cfg) {
            match o {
                Output::Segment(s) => segments.push(s),
                Output::Spin(s) => spins.push(s),
                _ => {}
            }
        }
        spins.sort();
        (segments, spins)
    }

    /// The spins derived from `segments` with watermark `w`, in one epoch.
    fn derived(segments: Vec<Segment>, w: Nanos, cfg: &RulesConfig) -> Vec<Spin> {
        let cfg = cfg.clone();
        timely::execute_directly(move |worker| {
            let mut job = ArrangedJob::with_config(
                worker,
                &JobConfig {
                    slices: None,
                    derived_spins: Some(cfg),
                },
            );
            job.send(0, segments.into_iter().map(|s| (Update::Segment(s), 1)));
            job.watermark(0, w);
            job.close(0);
            worker.step_while(|| job.pending(0));
            let mut spins = job.traces().derived_spins(0).expect("complete");
            spins.sort();
            spins
        })
    }

    /// Checks the derived spins against the machine's after every prefix of `t`'s events;
    /// returns every spin seen.
    fn every_prefix(t: &Trace) -> Vec<Spin> {
        let cfg = RulesConfig::default();
        let mut seen = Vec::new();
        for k in 1..=t.evs.len() {
            let evs = &t.evs[..k];
            let (segments, want) = machine(evs, &cfg);
            let got = derived(segments, evs[k - 1].ts, &cfg);
            assert_eq!(got, want, "after event {} of {:#?}", k - 1, evs[k - 1]);
            seen.extend(want);
        }
        seen
    }

    fn has(seen: &[Spin], class: SpinClass, open: bool, segments: u32) -> bool {
        seen.iter()
            .any(|s| s.class == class && s.open == open && s.segments == segments)
    }

    #[test]
    fn a_yield_loop_is_one_repeated_yield_open_while_it_lasts() {
        let mut t = Trace::default();
        t.run(TID);
        for _ in 0..5 {
            turn(&mut t, nr("nanosleep"), 0, 0, 600);
        }
        // A wait that is no timeout ends the loop; a long run after it is a spin of its own.
        turn(&mut t, nr("read"), 3, 5, 10);
        t.ts += 2_500 * MS;
        t.task(
            TID,
            argus_schema::EventKind::Marker {
                text: "still running".into(),
            },
        );
        t.task(TID, argus_schema::EventKind::Exit);
        let seen = every_prefix(&t);
        assert!(
            has(&seen, SpinClass::RepeatedYield, true, 4),
            "open, growing"
        );
        assert!(has(&seen, SpinClass::RepeatedYield, true, 5));
        assert!(
            has(&seen, SpinClass::RepeatedYield, false, 5),
            "closed by the read"
        );
        assert!(
            has(&seen, SpinClass::LongRunning, true, 1),
            "the run after it, open"
        );
        assert!(
            has(&seen, SpinClass::LongRunning, false, 1),
            "closed by the exit"
        );
    }

    #[test]
    fn timed_out_waits_on_one_object_are_one_long_wait_inside_a_yield_loop() {
        let futex = nr("futex");
        let mut t = Trace::default();
        t.run(TID);
        turn(&mut t, nr("nanosleep"), 0, 0, 500);
        turn(&mut t, nr("nanosleep"), 0, 0, 500);
        // A logical wait: skipped by the yield loop, which goes on after it.
        for _ in 0..4 {
            turn(&mut t, futex, 0x1000, -110, 700);
        }
        turn(&mut t, nr("nanosleep"), 0, 0, 500);
        turn(&mut t, nr("nanosleep"), 0, 0, 500);
        // Another logical wait, still blocked on its object at the end.
        for _ in 0..2 {
            turn(&mut t, futex, 0x2000, -110, 900);
        }
        t.enter(TID, futex, 0x2000);
        t.block(TID);
        t.ts += 1_500 * MS;
        t.wake(0, 99);
        let seen = every_prefix(&t);
        assert!(
            has(&seen, SpinClass::LongWait, true, 4),
            "open logical wait"
        );
        assert!(
            has(&seen, SpinClass::LongWait, false, 4),
            "closed by the sleep"
        );
        assert!(
            has(&seen, SpinClass::LongWait, true, 3),
            "through the open segment blocked on the object"
        );
        assert!(
            has(&seen, SpinClass::RepeatedYield, true, 4),
            "the sleeps on both sides of the first logical wait are one loop"
        );
    }

    #[test]
    fn an_exit_closes_the_runs_in_progress() {
        let mut t = Trace::default();
        t.run(TID);
        for _ in 0..4 {
            turn(&mut t, nr("nanosleep"), 0, 0, 800);
        }
        t.task(TID, argus_schema::EventKind::Exit);
        let seen = every_prefix(&t);
        assert!(has(&seen, SpinClass::RepeatedYield, true, 4));
        assert!(has(&seen, SpinClass::RepeatedYield, false, 4));
    }
}
