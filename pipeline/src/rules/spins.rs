//! Spinning vertices (ARCHITECTURE.md §6; the paper's spinning cursor): a thread's segment
//! longer than [`RulesConfig::spin_threshold_ns`] classified as LongRunning, RepeatedYield
//! or LongWait ([`single_spin`]); a run of short timed waits, a yield loop, as one
//! RepeatedYield ([`YieldRun`]); and consecutive timed-out waits on one object, a logical
//! wait, as one LongWait ([`LogicalRun`]).
//!
//! A thread's [`Spins`] is fed each of its segments once final; its runs are reported open
//! ([`Spins::mutable`]) while they last.
//!
//! The arranged graph derives the same spins from the segments alone
//! ([`crate::arranged::spins`]): it carries a [`Spins`] from each final segment of a thread to
//! the next and calls the functions here, so the two cannot drift apart. An open spin is
//! reported once the watermark has passed its start by the threshold ([`past_threshold`]);
//! what it reports does not depend on the watermark ([`open_spin`], [`Spins::open_logical`]).

use super::config::RulesConfig;
use super::output::Output;
use argus_schema::{syscalls, EndCause, Nanos, Pid, Segment, SegmentId, Spin, SpinClass, Tid};
use serde::{Deserialize, Serialize};

/// A run of short timed waits (a yield loop) being tracked.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct YieldRun {
    first: SegmentId,
    last: SegmentId,
    start_ns: Nanos,
    end_ns: Nanos,
    on_cpu_ns: u64,
    wait_ns: u64,
    segments: u32,
    wait_syscall: i32,
    /// Turns that were refused file lock attempts (a retry loop may sleep long).
    #[serde(default)]
    retries: u32,
}

/// Consecutive timed-out waits of a thread in one syscall on one object (a client's `poll`
/// loop with a timeout, a runtime's monitor parked with back-off timeouts): one logical
/// wait, a LongWait over its whole span, ended by the first wait on the object that is not a
/// timeout (ARCHITECTURE.md §6).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct LogicalRun {
    first: SegmentId,
    last: SegmentId,
    start_ns: Nanos,
    end_ns: Nanos,
    on_cpu_ns: u64,
    wait_ns: u64,
    segments: u32,
    timeouts: u32,
    wait_syscall: i32,
    object: u64,
}

impl LogicalRun {
    fn of(&self, seg: &Segment) -> bool {
        seg.wait_syscall == self.wait_syscall && seg.wait_object == Some(self.object)
    }

    fn add(&mut self, seg: &Segment) {
        self.last = seg.id;
        self.end_ns = seg.end_ns;
        self.on_cpu_ns += seg.on_cpu_ns;
        self.wait_ns += seg.wait_ns();
        self.segments += 1;
    }

    /// Its spin, when it is one: at least one timeout merged with another wait. The caller
    /// checks that it lasted longer than the threshold ([`past_threshold`]).
    fn spin(&self, tid: Tid, pid: Pid, open: bool) -> Option<Spin> {
        if self.segments < 2 {
            return None;
        }
        Some(Spin {
            segment: self.first,
            last: self.last,
            tid,
            pid,
            class: SpinClass::LongWait,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            open,
            on_cpu_ns: self.on_cpu_ns,
            wait_ns: self.wait_ns,
            segments: self.segments,
            wait_syscall: self.wait_syscall,
            timeouts: self.timeouts,
        })
    }
}

/// The spin trackers of a [`ThreadState`](super::ThreadState) (and, carried from segment to
/// segment, of the arranged graph's derived spins).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct Spins {
    run: Option<YieldRun>,
    /// Consecutive timed-out waits on one object being tracked as one logical wait.
    #[serde(default)]
    logical: Option<LogicalRun>,
}

impl Spins {
    /// Feeds the trackers with a final segment of thread `tid` of process `pid` (before the
    /// segment itself is emitted). `lock_refused`: the thread's latest file lock attempt was
    /// refused (the segment is a turn of a retry loop).
    pub(crate) fn finish(
        &mut self,
        seg: &Segment,
        tid: Tid,
        pid: Pid,
        lock_refused: bool,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        if self.logical_wait(seg, tid, pid, cfg, out) {
            return;
        }
        // A refused file lock attempt and the sleep after it is a turn of a retry loop,
        // however long the sleep.
        let short_timed = seg.wait_timed_out()
            && seg.end == EndCause::Woken
            && (seg.duration_ns() < cfg.spin_threshold_ns || lock_refused);
        if short_timed {
            let run = self.run.get_or_insert(YieldRun {
                first: seg.id,
                last: seg.id,
                start_ns: seg.start_ns,
                end_ns: seg.end_ns,
                on_cpu_ns: 0,
                wait_ns: 0,
                segments: 0,
                wait_syscall: seg.wait_syscall,
                retries: 0,
            });
            run.retries += u32::from(lock_refused);
            run.last = seg.id;
            run.end_ns = seg.end_ns;
            run.on_cpu_ns += seg.on_cpu_ns;
            run.wait_ns += seg.wait_ns();
            run.segments += 1;
            run.wait_syscall = seg.wait_syscall;
        } else if let Some(run) = self.run.take() {
            if let Some(spin) = run_spin(&run, tid, pid, false, cfg) {
                out.push(Output::Spin(spin));
            }
        }
    }

    /// Feeds the logical-wait tracker with a final segment; true when the segment's wait is
    /// part of a logical wait (then it is no yield-loop iteration: it waited on something).
    fn logical_wait(
        &mut self,
        seg: &Segment,
        tid: Tid,
        pid: Pid,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) -> bool {
        let on_object = seg.end == EndCause::Woken
            && seg.wait_object.is_some()
            && !syscalls::is_sleep(seg.wait_syscall);
        let same = self.logical.as_ref().is_some_and(|r| r.of(seg));
        if !same {
            self.flush_logical(tid, pid, cfg, out);
        }
        if !on_object {
            return false;
        }
        let timed_out = seg.wait_timed_out();
        match self.logical.as_mut() {
            Some(run) => {
                run.add(seg);
                if timed_out {
                    run.timeouts += 1;
                } else {
                    // The first wake-up that is not a timeout ends it.
                    self.flush_logical(tid, pid, cfg, out);
                }
                true
            }
            None if timed_out => {
                let mut run = LogicalRun {
                    first: seg.id,
                    last: seg.id,
                    start_ns: seg.start_ns,
                    end_ns: seg.end_ns,
                    on_cpu_ns: 0,
                    wait_ns: 0,
                    segments: 0,
                    timeouts: 1,
                    wait_syscall: seg.wait_syscall,
                    object: seg.wait_object.unwrap_or_default(),
                };
                run.add(seg);
                self.logical = Some(run);
                true
            }
            None => false,
        }
    }

    fn flush_logical(&mut self, tid: Tid, pid: Pid, cfg: &RulesConfig, out: &mut Vec<Output>) {
        if let Some(run) = self.logical.take() {
            if past_threshold(run.start_ns, run.end_ns, cfg) {
                out.extend(run.spin(tid, pid, false).map(Output::Spin));
            }
        }
    }

    /// Whether no run is in progress.
    pub(crate) fn is_empty(&self) -> bool {
        self.run.is_none() && self.logical.is_none()
    }

    /// The thread exited: both runs are over.
    pub(crate) fn exit(&mut self, tid: Tid, pid: Pid, cfg: &RulesConfig, out: &mut Vec<Output>) {
        self.flush_logical(tid, pid, cfg, out);
        if let Some(run) = self.run.take() {
            if let Some(spin) = run_spin(&run, tid, pid, false, cfg) {
                out.push(Output::Spin(spin));
            }
        }
    }

    /// The open spins of the runs in progress, given that everything up to `watermark` has
    /// been seen; `cur` is the thread's open segment.
    pub(super) fn mutable(
        &self,
        cur: Option<&Segment>,
        tid: Tid,
        pid: Pid,
        watermark: Nanos,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        out.extend(self.open_run(tid, pid, cfg).map(Output::Spin));
        if let Some(spin) = self.open_logical(cur, tid, pid) {
            if past_threshold(spin.start_ns, watermark, cfg) {
                out.push(Output::Spin(spin));
            }
        }
    }

    /// The open spin of the yield run in progress, if it is one (whatever the watermark).
    pub(crate) fn open_run(&self, tid: Tid, pid: Pid, cfg: &RulesConfig) -> Option<Spin> {
        self.run
            .as_ref()
            .and_then(|run| run_spin(run, tid, pid, true, cfg))
    }

    /// The open spin of the logical wait in progress, still going through `cur` when the open
    /// segment is blocked on the same object; reported once the watermark has passed its
    /// start by the threshold ([`past_threshold`] of its `start_ns`).
    pub(crate) fn open_logical(&self, cur: Option<&Segment>, tid: Tid, pid: Pid) -> Option<Spin> {
        let mut run = self.logical.clone()?;
        if let Some(c) = cur.filter(|c| c.wait_start_ns.is_some()) {
            if run.of(c) {
                run.add(c);
            }
        }
        run.spin(tid, pid, true)
    }

    /// When the logical wait in progress started, if one is.
    pub(super) fn logical_start(&self) -> Option<Nanos> {
        self.logical.as_ref().map(|r| r.start_ns)
    }
}

/// Whether something that started at `start` has lasted longer than the spin threshold by
/// `until`: the condition of every spin, and of reporting an open one by the watermark.
pub(crate) fn past_threshold(start: Nanos, until: Nanos, cfg: &RulesConfig) -> bool {
    until.0.saturating_sub(start.0) > cfg.spin_threshold_ns
}

/// The spin of open segment `seg` once the watermark has passed its start by the threshold
/// ([`past_threshold`]): what is reported does not depend on the watermark.
pub(crate) fn open_spin(seg: &Segment, cfg: &RulesConfig) -> Option<Spin> {
    single_spin(seg, Nanos(u64::MAX), true, cfg)
}

/// The spin of one segment, if it is one. `until` is how long it is known to last (its end,
/// or the watermark for an open segment). An open spin reports `end_ns` = the segment's last
/// record, so that it does not change while nothing happens.
pub(crate) fn single_spin(
    seg: &Segment,
    until: Nanos,
    open: bool,
    cfg: &RulesConfig,
) -> Option<Spin> {
    if !seg.tid.is_task() {
        return None;
    }
    if !past_threshold(seg.start_ns, until, cfg) {
        return None;
    }
    // The class must not depend on the watermark (an open spin is reported once, when the
    // watermark crosses the threshold): an open segment that blocked is waiting for good.
    let known = seg.duration_ns().max(1);
    let waiting = match seg.wait_start_ns {
        Some(_) if open => true,
        Some(w) => w.until(seg.end_ns) * 2 >= known,
        None => false,
    };
    let class = if waiting {
        SpinClass::LongWait
    } else if seg.yields as u64 * 1_000_000_000 >= cfg.yields_per_sec * known && seg.yields >= 3 {
        SpinClass::RepeatedYield
    } else {
        SpinClass::LongRunning
    };
    Some(Spin {
        segment: seg.id,
        last: seg.id,
        tid: seg.tid,
        pid: seg.pid,
        class,
        start_ns: seg.start_ns,
        end_ns: seg.end_ns,
        open,
        on_cpu_ns: seg.on_cpu_ns,
        wait_ns: seg.wait_ns(),
        segments: 1,
        wait_syscall: seg.wait_syscall,
        timeouts: 0,
    })
}

fn run_spin(run: &YieldRun, tid: Tid, pid: Pid, open: bool, cfg: &RulesConfig) -> Option<Spin> {
    if (run.segments < 3 && run.retries < 2) || !past_threshold(run.start_ns, run.end_ns, cfg) {
        return None;
    }
    Some(Spin {
        segment: run.first,
        last: run.last,
        tid,
        pid,
        class: SpinClass::RepeatedYield,
        start_ns: run.start_ns,
        end_ns: run.end_ns,
        open,
        on_cpu_ns: run.on_cpu_ns,
        wait_ns: run.wait_ns,
        segments: run.segments,
        wait_syscall: run.wait_syscall,
        timeouts: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{SegmentKind, StartCause};

    const S: u64 = 1_000_000_000;

    /// A closed segment of thread 10 from `start` to `end` seconds, waiting from `wait` on.
    fn seg(ord: u32, start: f64, end: f64, wait: Option<f64>) -> Segment {
        let ns = |s: f64| Nanos((s * S as f64) as u64);
        let mut s = Segment::starting(
            SegmentId::new(Tid(10), ord),
            Pid(10),
            SegmentKind::Task,
            ns(start),
            StartCause::Woken,
        );
        s.end_ns = ns(end);
        s.end = EndCause::Woken;
        s.wait_start_ns = wait.map(ns);
        s
    }

    #[test]
    fn a_long_segment_is_classified_by_what_it_did() {
        let cfg = RulesConfig::default();
        let class = |s: &Segment| single_spin(s, s.end_ns, false, &cfg).map(|x| x.class);
        assert_eq!(class(&seg(0, 0.0, 1.0, None)), None, "under the threshold");
        assert_eq!(class(&seg(0, 0.0, 3.0, None)), Some(SpinClass::LongRunning));
        assert_eq!(
            class(&seg(0, 0.0, 3.0, Some(0.5))),
            Some(SpinClass::LongWait)
        );
        let mut yields = seg(0, 0.0, 3.0, None);
        yields.yields = 300;
        assert_eq!(class(&yields), Some(SpinClass::RepeatedYield));
    }

    #[test]
    fn short_timed_waits_make_one_repeated_yield() {
        let cfg = RulesConfig::default();
        let nanosleep = syscalls::number("nanosleep").expect("known");
        let mut spins = Spins::default();
        let mut out = Vec::new();
        for i in 0..4 {
            let mut s = seg(
                i,
                f64::from(i),
                f64::from(i) + 0.9,
                Some(f64::from(i) + 0.1),
            );
            s.wait_syscall = nanosleep;
            s.wait_ret = Some(0);
            spins.finish(&s, Tid(10), Pid(10), false, &cfg, &mut out);
        }
        assert!(out.is_empty(), "a run in progress is only reported open");
        spins.mutable(None, Tid(10), Pid(10), Nanos(4 * S), &cfg, &mut out);
        let [Output::Spin(open)] = &out[..] else {
            panic!("one open spin: {out:?}");
        };
        assert_eq!(
            (open.class, open.segments, open.open),
            (SpinClass::RepeatedYield, 4, true)
        );
        out.clear();
        spins.exit(Tid(10), Pid(10), &cfg, &mut out);
        assert!(matches!(&out[..], [Output::Spin(s)] if !s.open && s.segments == 4));
    }
}
