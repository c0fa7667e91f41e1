//! Spinning vertices (ARCHITECTURE.md §6): a segment longer than the threshold
//! (LongRunning, RepeatedYield, LongWait), a run of short timed waits (a yield loop,
//! RepeatedYield) and consecutive timed-out waits on one object (a logical LongWait).

use super::config::RulesConfig;
use argus_schema::{Nanos, Pid, Segment, SegmentId, Spin, SpinClass, Tid};
use serde::{Deserialize, Serialize};

/// A run of short timed waits (a yield loop) being tracked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct YieldRun {
    pub(super) first: SegmentId,
    pub(super) last: SegmentId,
    pub(super) start_ns: Nanos,
    pub(super) end_ns: Nanos,
    pub(super) on_cpu_ns: u64,
    pub(super) wait_ns: u64,
    pub(super) segments: u32,
    pub(super) wait_syscall: i32,
    /// Turns that were refused file lock attempts (a retry loop may sleep long).
    #[serde(default)]
    pub(super) retries: u32,
}

/// Consecutive timed-out waits of a thread in one syscall on one object (a client's `poll`
/// loop with a timeout, a runtime's monitor parked with back-off timeouts): one logical
/// wait, a LongWait over its whole span, ended by the first wait on the object that is not a
/// timeout (ARCHITECTURE.md §6).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct LogicalRun {
    pub(super) first: SegmentId,
    pub(super) last: SegmentId,
    pub(super) start_ns: Nanos,
    pub(super) end_ns: Nanos,
    pub(super) on_cpu_ns: u64,
    pub(super) wait_ns: u64,
    pub(super) segments: u32,
    pub(super) timeouts: u32,
    pub(super) wait_syscall: i32,
    pub(super) object: u64,
}

impl LogicalRun {
    pub(super) fn of(&self, seg: &Segment) -> bool {
        seg.wait_syscall == self.wait_syscall && seg.wait_object == Some(self.object)
    }

    pub(super) fn add(&mut self, seg: &Segment) {
        self.last = seg.id;
        self.end_ns = seg.end_ns;
        self.on_cpu_ns += seg.on_cpu_ns;
        self.wait_ns += seg.wait_ns();
        self.segments += 1;
    }

    /// Its spin, when it is one: at least one timeout merged with another wait, longer than
    /// the threshold. `until` is how long it is known to last.
    pub(super) fn spin(
        &self,
        tid: Tid,
        pid: Pid,
        until: Nanos,
        open: bool,
        cfg: &RulesConfig,
    ) -> Option<Spin> {
        if self.segments < 2 || self.start_ns.until(until) <= cfg.spin_threshold_ns {
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

/// The spin of one segment, if it is one. `until` is how long it is known to last (its end,
/// or the watermark for an open segment). An open spin reports `end_ns` = the segment's last
/// record, so that it does not change while nothing happens.
pub(super) fn single_spin(
    seg: &Segment,
    until: Nanos,
    open: bool,
    cfg: &RulesConfig,
) -> Option<Spin> {
    if !seg.tid.is_task() {
        return None;
    }
    let dur = seg.start_ns.until(until);
    if dur <= cfg.spin_threshold_ns {
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

pub(super) fn run_spin(
    run: &YieldRun,
    tid: Tid,
    pid: Pid,
    open: bool,
    cfg: &RulesConfig,
) -> Option<Spin> {
    if (run.segments < 3 && run.retries < 2)
        || run.start_ns.until(run.end_ns) <= cfg.spin_threshold_ns
    {
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
