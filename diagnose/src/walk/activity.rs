//! Activity: what a thread did during a window (on-CPU time, its longest block, whether it
//! exited or stopped near the end), and the candidates a report lists from it.

use super::phrases::sc;
use super::Walk;
use super::{at_least, overlap};
use crate::findings::During;
use crate::report::Candidate;
use argus_schema::{EndCause, Nanos, Segment, Tid};

/// What a thread did during a window.
pub(super) struct Activity<'g> {
    pub(super) on_cpu_ns: u64,
    /// Time in the window it was not blocked (on CPU or runnable), while it existed.
    pub(super) run_ns: u64,
    pub(super) segments: u32,
    /// The segment with the most on-CPU time in the window.
    pub(super) busiest: Option<&'g Segment>,
    /// The segment whose wait covers most of the window, and how much of it.
    pub(super) longest_block: Option<(&'g Segment, u64)>,
    /// When the thread exited, if at or before the window's end.
    pub(super) exited_at: Option<(&'g Segment, Nanos)>,
    /// Whether it stopped running (blocked or exited) shortly before the window's end.
    pub(super) ended_near: bool,
    /// The segment active at the window's start (or the first after it).
    pub(super) at_start: Option<&'g Segment>,
}

/// The wait of a thread that covers most of a window.
pub(super) struct WindowWait<'g> {
    /// The segment that ended in it (the last of a logical wait).
    pub(super) last: &'g Segment,
    /// The segment that started when it ended.
    pub(super) next: &'g Segment,
    /// How much of the window it covers (ns).
    pub(super) covered: u64,
    /// How many waits of the thread came after it in the window.
    pub(super) passed: u32,
}

impl<'g> Walk<'g, '_> {
    /// What `tid` did during `[from, to)`.
    pub(super) fn activity(&self, tid: Tid, from: Nanos, to: Nanos) -> Activity<'g> {
        let g = self.g;
        let mut act = Activity {
            on_cpu_ns: 0,
            segments: 0,
            busiest: None,
            longest_block: None,
            exited_at: None,
            ended_near: false,
            run_ns: 0,
            at_start: g.segment_at(tid, from),
        };
        let mut busiest_ns = 0u64;
        let near_from = Nanos(to.0.saturating_sub(self.cfg.near_ns));
        for s in g.segments_overlapping(tid, from, to) {
            act.segments += 1;
            let end = g.end_of(s);
            let run_end = s.wait_start_ns.unwrap_or(end).min(end);
            let run = s.start_ns.until(run_end);
            let run_in = overlap(s.start_ns, run_end, from, to);
            act.run_ns += run_in;
            let cpu = if run == 0 {
                0
            } else {
                ((s.on_cpu_ns.min(run) as u128 * run_in as u128) / run as u128) as u64
            };
            act.on_cpu_ns += cpu;
            if cpu >= busiest_ns && (cpu > 0 || act.busiest.is_none()) {
                busiest_ns = cpu;
                act.busiest = Some(s);
            }
            if let Some(ws) = s.wait_start_ns {
                let blocked = overlap(ws, end, from, to);
                if blocked > act.longest_block.map_or(0, |(_, b)| b) {
                    act.longest_block = Some((s, blocked));
                }
            }
            let stopped = if s.wait_start_ns.is_some() || s.end == EndCause::Exit {
                Some(run_end)
            } else {
                None
            };
            if stopped.is_some_and(|t| t >= near_from && t <= to) {
                act.ended_near = true;
            }
            if s.end == EndCause::Exit && end <= to {
                act.exited_at = Some((s, end));
            }
        }
        if act.segments == 0 {
            // Not running during the window: it exited before, or appears after.
            if let Some(last) = g.thread_segments(tid).next_back() {
                if last.end == EndCause::Exit && g.end_of(last) <= from {
                    act.exited_at = Some((last, g.end_of(last)));
                }
            }
        }
        if act.exited_at.is_none() {
            if let (Some(t), Some(last)) = (g.thread(tid), g.thread_segments(tid).next_back()) {
                if let Some(x) = t.exit_ns.filter(|x| *x <= to) {
                    act.exited_at = Some((last, x));
                }
            }
        }
        act
    }

    /// What a thread did during `[from, to)`: exited, blocked or running most of it, or
    /// neither.
    pub(super) fn during(&self, act: &Activity<'_>, from: Nanos, to: Nanos) -> During {
        let window = from.until(to);
        if let Some((_, at)) = act.exited_at {
            return During::Exited { at };
        }
        if let Some((b, ns)) = act.longest_block {
            if at_least(ns, window, self.cfg.busy_fraction) {
                return During::Blocked {
                    syscall: sc(b.wait_syscall),
                    blocked_ns: ns,
                    still_waiting: b.end == EndCause::Open,
                };
            }
        }
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            return During::Running {
                on_cpu_ns: act.on_cpu_ns,
            };
        }
        if act.segments == 0 {
            return During::NotSeen;
        }
        During::Active {
            segments: act.segments,
            on_cpu_ns: act.on_cpu_ns,
            stopped_near_end: act.ended_near,
        }
    }

    pub(super) fn add_candidate(
        &mut self,
        tid: Tid,
        act: &Activity<'_>,
        from: Nanos,
        to: Nanos,
        base: bool,
    ) {
        if let Some(c) = self.candidates.iter_mut().find(|c| c.tid == tid) {
            c.baseline_waker |= base;
            return;
        }
        let g = self.g;
        let during = self.during(act, from, to);
        let during_hang = self.words().during(&during);
        self.candidates.push(Candidate {
            tid,
            pid: g.pid_of(tid).unwrap_or_default(),
            comm: g.comm(tid),
            process: g.process_name(tid),
            segment: act.busiest.or(act.at_start).map(|s| s.id),
            on_cpu_ns: act.on_cpu_ns,
            during_hang,
            during,
            baseline_waker: base,
        });
    }

    /// Candidates for a wake-up that never came: the baseline waker first, then the other
    /// threads of the process.
    pub(super) fn add_process_candidates(
        &mut self,
        s: &Segment,
        from: Nanos,
        to: Nanos,
        base: Option<Tid>,
    ) {
        let mut tids: Vec<Tid> = base.into_iter().collect();
        tids.extend(
            self.g
                .threads_of(s.pid)
                .into_iter()
                .filter(|t| *t != s.tid && Some(*t) != base && t.is_task()),
        );
        for tid in tids.into_iter().take(self.cfg.max_choices.max(1) + 1) {
            let act = self.activity(tid, from, to);
            self.add_candidate(tid, &act, from, to, Some(tid) == base);
        }
    }
}
