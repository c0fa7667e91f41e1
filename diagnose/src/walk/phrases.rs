//! Phrases: all the English of the walk. Names of threads and interrupts, times relative to
//! the hang, syscall names; the descriptions of path items, the reasons of root causes,
//! question prompts, choice descriptions, advice and the summary.

use super::activity::Activity;
use super::at_least;
use super::Walk;
use crate::report::{secs, HangInfo, Role};
use argus_schema::{syscalls, CausalEdge, EdgeKind, EndCause, Nanos, Segment, SegmentKind, Tid};

pub(super) fn sc(nr: i32) -> String {
    syscalls::name(nr)
}

pub(super) fn softirq_name(vec: u32) -> &'static str {
    match vec {
        0 => "HI",
        1 => "TIMER",
        2 => "NET_TX",
        3 => "NET_RX",
        4 => "BLOCK",
        5 => "IRQ_POLL",
        6 => "TASKLET",
        7 => "SCHED",
        8 => "HRTIMER",
        9 => "RCU",
        _ => "unknown",
    }
}

pub(super) fn via(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Wakeup => "woken by",
        EdgeKind::Fork => "created by",
        EdgeKind::Timer => "timer armed by",
        EdgeKind::ThreadOrder => "after",
        EdgeKind::Message => "sent data by",
        EdgeKind::Queue => "work queued by",
        EdgeKind::Signal => "signalled by",
        EdgeKind::Exit => "released by the exit of",
        EdgeKind::Flag => "flag set by",
        EdgeKind::Rule => "linked by a rule to",
        EdgeKind::WaitWake => "possibly working for",
        EdgeKind::LockFile => "lock released by",
    }
}

pub(super) fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl<'g> Walk<'g, '_> {
    pub(super) fn who(&self, tid: Tid) -> String {
        self.g.describe(tid)
    }

    pub(super) fn hang_who(&self, tid: Tid) -> String {
        match self.g.thread(tid) {
            Some(t) if t.pid.0 == t.tid.0 => {
                format!("main thread of {} (pid {})", t.comm, t.pid.0)
            }
            _ => self.who(tid),
        }
    }

    /// A time relative to the start of the hang: `+1.234 s` / `-0.500 s`.
    pub(super) fn rel(&self, t: Nanos) -> String {
        if t >= self.hang_start {
            format!("+{}", secs(self.hang_start.until(t)))
        } else {
            format!("-{}", secs(t.until(self.hang_start)))
        }
    }

    /// How a segment acted through an edge: `thread x (tid 3) of p in write`, `a timer expiry
    /// on cpu1`, `device interrupt irq 24 on cpu0`.
    pub(super) fn source_phrase(&self, s: &Segment, e: &CausalEdge) -> String {
        match s.tid.irq_cpu() {
            Some(cpu) => self.irq_phrase(s, cpu.0),
            None => {
                let mut d = self.who(s.tid);
                if e.src_syscall >= 0 {
                    d.push_str(" in ");
                    d.push_str(&sc(e.src_syscall));
                }
                d
            }
        }
    }

    pub(super) fn irq_phrase(&self, s: &Segment, cpu: u32) -> String {
        match s.kind {
            SegmentKind::Timer { .. } => format!("a timer expiry on cpu{cpu}"),
            SegmentKind::HardIrq { irq } => format!("device interrupt irq {irq} on cpu{cpu}"),
            SegmentKind::SoftIrq { vec } => {
                format!("softirq {} on cpu{cpu}", softirq_name(vec))
            }
            SegmentKind::Interrupt | SegmentKind::Task => {
                format!("interrupt work on cpu{cpu}")
            }
            SegmentKind::WorkItem { .. } => format!("a kernel work item on cpu{cpu}"),
        }
    }

    /// What a segment did, in a few words.
    pub(super) fn seg_summary(&self, s: &Segment) -> String {
        if let Some(cpu) = s.tid.irq_cpu() {
            return format!("{} at {}", self.irq_phrase(s, cpu.0), self.rel(s.start_ns));
        }
        let end = self.g.end_of(s);
        let run_end = s.wait_start_ns.unwrap_or(end);
        let mut d = format!(
            "{} from {}: ran {} ({} on CPU)",
            self.who(s.tid),
            self.rel(s.start_ns),
            secs(s.start_ns.until(run_end)),
            secs(s.on_cpu_ns)
        );
        if s.wait_start_ns.is_some() {
            d.push_str(&format!(
                ", then blocked {} in {}",
                secs(run_end.until(end)),
                sc(s.wait_syscall)
            ));
        } else if s.end == EndCause::Exit {
            d.push_str(", then exited");
        }
        d
    }

    /// What a thread did during a window, in words.
    pub(super) fn during(&self, act: &Activity<'_>, from: Nanos, to: Nanos) -> String {
        let window = from.until(to);
        if let Some((_, t)) = act.exited_at {
            return format!("exited at {}", self.rel(t));
        }
        if let Some((b, ns)) = act.longest_block {
            if at_least(ns, window, self.cfg.busy_fraction) {
                let still = if b.end == EndCause::Open {
                    ", still waiting when the trace ended"
                } else {
                    ""
                };
                return format!("blocked {} in {}{still}", secs(ns), sc(b.wait_syscall));
            }
        }
        if at_least(act.on_cpu_ns, window, self.cfg.busy_fraction) {
            return format!("running on CPU for {}", secs(act.on_cpu_ns));
        }
        if act.segments == 0 {
            return "not seen in the trace".to_string();
        }
        let near = if act.ended_near {
            ", stopping shortly before the end"
        } else {
            ""
        };
        format!(
            "active in {} segment(s) with {} on CPU{near}",
            act.segments,
            secs(act.on_cpu_ns)
        )
    }

    pub(super) fn summary(&self, hang: &HangInfo) -> String {
        let mut out = match self.path.first() {
            Some(p) => format!("{} ({}).", capitalize(&p.description), hang.class.name()),
            None => format!("{} hang of tid {}.", hang.class.name(), hang.tid.0),
        };
        let chain: Vec<&str> = self
            .path
            .iter()
            .filter(|p| p.role == Role::Cause)
            .map(|p| p.description.as_str())
            .collect();
        if !chain.is_empty() {
            out.push_str(&format!(" Causal chain: {}.", chain.join("; ")));
        }
        for p in &self.path {
            match p.role {
                Role::Baseline => out.push_str(&format!(" Baseline: {}.", p.description)),
                Role::Setter => out.push_str(&format!(" Flag: {}.", p.description)),
                _ => {}
            }
        }
        if let Some((last, others)) = self.root_causes.split_last() {
            out.push_str(&format!(" Root cause: {}.", last.reason));
            if !others.is_empty() {
                let o: Vec<&str> = others.iter().map(|r| r.reason.as_str()).collect();
                out.push_str(&format!(" Also implicated: {}.", o.join("; ")));
            }
        }
        let further: Vec<&str> = self
            .further
            .iter()
            .filter_map(|f| f.root_causes.last().map(|r| r.reason.as_str()))
            .collect();
        if !further.is_empty() {
            out.push_str(&format!(" Further culprits: {}.", further.join("; ")));
        }
        if !self.questions.is_empty() {
            let d = self.questions.iter().filter(|q| q.defaulted).count();
            out.push_str(&format!(
                " {} question(s) asked, {d} answered by default.",
                self.questions.len()
            ));
        }
        out
    }
}
