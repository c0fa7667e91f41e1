//! Finding the spinning vertex (ARCHITECTURE.md §6): a watched thread that made no
//! progress for longer than the threshold while *not* idle in its own event-loop wait.
//!
//! ```text
//!  watched threads: --tid T | --pid P (its main thread) | --comm NAME | every main thread
//!        │
//!        ├─ learn the thread's event-loop wait: the poll/epoll/select syscall most of its
//!        │  blocking waits end in, with short durations (or --loop-wait)
//!        ├─ candidates: one segment longer than the threshold, or a run of ≥3 short
//!        │  timed-out waits (sleep/yield loop) lasting longer than it, or the snapshot's
//!        │  spins table
//!        ├─ drop idleness: a long wait in the loop wait, a run of loop-wait timeouts
//!        ├─ application markers `argus:hang-begin` … `argus:hang-end` [tid=N] mark a hang
//!        │  directly (no threshold, no idleness test)
//!        ▼
//!  classes: LongWait (blocked ≥ half of it) · RepeatedYield (a loop of short timed waits or
//!           sched_yield) · LongRunning (on CPU, or runnable) — each with its evidence
//! ```

use crate::graph::{Graph, Marker};
use crate::logical::{self, Logical};
use argus_schema::{
    syscalls, EdgeKind, EndCause, Nanos, Pid, Segment, SegmentId, Spin, SpinClass, Tid,
};
use std::cmp::Reverse;

/// Tuning of hang finding.
#[derive(Clone, Debug, PartialEq)]
pub struct HangConfig {
    /// A segment or yield run longer than this is a hang (ns). Default 2 s, as macOS's
    /// spinning cursor.
    pub threshold_ns: u64,
    /// The event-loop wait syscall, when the user names it; otherwise learned per thread.
    pub loop_wait: Option<i32>,
    /// `sched_yield` calls per second from which a busy segment is a yield loop.
    pub yields_per_sec: u64,
    /// The moment the user names (`argus debug --at`, trace clock): the hang going on then,
    /// else the one nearest to it, is picked instead of the longest.
    pub at_ns: Option<Nanos>,
}

impl Default for HangConfig {
    fn default() -> HangConfig {
        HangConfig {
            threshold_ns: 2_000_000_000,
            loop_wait: None,
            yields_per_sec: 50,
            at_ns: None,
        }
    }
}

/// A thread's event-loop wait, learned from its trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoopWait {
    /// The wait syscall.
    pub syscall: i32,
    /// How many of the thread's blocking waits were in it.
    pub waits: u32,
    /// Their share of all its blocking waits.
    pub share: f64,
    /// Median duration of those waits (ns).
    pub median_ns: u64,
    /// Whether the user named it rather than the trace.
    pub given: bool,
}

/// Where a hang was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HangSource {
    /// Found from the thread's segments with the diagnosis threshold.
    Segments,
    /// From the snapshot's spins table.
    Spins,
    /// Marked by the application.
    Marker,
}

impl HangSource {
    /// Lowercase name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            HangSource::Segments => "segments",
            HangSource::Spins => "spins",
            HangSource::Marker => "marker",
        }
    }
}

/// A hang found in a watched thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Hang {
    /// The spinning vertex.
    pub spin: Spin,
    /// Why it is a hang of its class.
    pub evidence: Vec<String>,
    /// Where it came from.
    pub source: HangSource,
    /// The thread's event-loop wait, if it has one.
    pub loop_wait: Option<LoopWait>,
}

fn secs(ns: u64) -> String {
    crate::report::secs(ns)
}

/// Learns the event-loop wait of `tid`: the readiness wait (poll, epoll, select family) most
/// of its blocking waits end in, seen at least 3 times *below* `threshold_ns` (the long ones
/// are the hang candidates this decides about: they cannot vouch for themselves), at least
/// 30% of its waits, with a median duration below `threshold_ns`.
pub fn learn_loop_wait(g: &Graph, tid: Tid, cfg: &HangConfig) -> Option<LoopWait> {
    let mut by_sys: std::collections::BTreeMap<i32, Vec<u64>> = Default::default();
    let mut total = 0u32;
    for s in g.thread_segments(tid) {
        if s.wait_start_ns.is_none() || s.end == EndCause::Open {
            continue;
        }
        // A logical wait counts once, whole, at its last wait: a client that polls its
        // socket with a timeout until the reply has waited once, not in an event loop.
        if logical::timed_out_on_object(s)
            && g.next_in_thread(s.id)
                .is_some_and(|n| logical::same_wait(s, n))
        {
            continue;
        }
        let first = logical::backward(g, s).first;
        let wait_ns = first
            .wait_start_ns
            .unwrap_or(first.start_ns)
            .until(s.end_ns);
        total += 1;
        by_sys.entry(s.wait_syscall).or_default().push(wait_ns);
    }
    if let Some(nr) = cfg.loop_wait {
        // Every wait the syscall given names (on macOS, `epoll_wait` names `kevent`).
        let mut d: Vec<u64> = by_sys
            .iter()
            .filter(|(k, _)| syscalls::names(nr, **k))
            .flat_map(|(_, d)| d.iter().copied())
            .collect();
        d.sort_unstable();
        return Some(LoopWait {
            syscall: nr,
            waits: d.len() as u32,
            share: if total == 0 {
                0.0
            } else {
                d.len() as f64 / total as f64
            },
            median_ns: d.get(d.len() / 2).copied().unwrap_or(0),
            given: true,
        });
    }
    let (nr, mut d) = by_sys
        .into_iter()
        .filter(|(nr, _)| syscalls::is_poll(*nr))
        .max_by_key(|(nr, d)| (d.len(), std::cmp::Reverse(*nr)))?;
    d.sort_unstable();
    let share = d.len() as f64 / total.max(1) as f64;
    let median_ns = d[d.len() / 2];
    let short = d.iter().filter(|w| **w < cfg.threshold_ns).count();
    (short >= 3 && share >= 0.3 && median_ns < cfg.threshold_ns).then_some(LoopWait {
        syscall: nr,
        waits: d.len() as u32,
        share,
        median_ns,
        given: false,
    })
}

fn classify(s: &Segment, end: Nanos, open: bool, cfg: &HangConfig) -> SpinClass {
    let known = s.start_ns.until(end).max(1);
    let waiting = match s.wait_start_ns {
        Some(_) if open => true,
        Some(w) => w.until(end) * 2 >= known,
        None => false,
    };
    if waiting {
        SpinClass::LongWait
    } else if s.yields as u64 * 1_000_000_000 >= cfg.yields_per_sec * known && s.yields >= 3 {
        SpinClass::RepeatedYield
    } else {
        SpinClass::LongRunning
    }
}

fn single(g: &Graph, s: &Segment, cfg: &HangConfig) -> Spin {
    let open = s.end == EndCause::Open;
    let end = g.end_of(s);
    Spin {
        segment: s.id,
        last: s.id,
        tid: s.tid,
        pid: s.pid,
        class: classify(s, end, open, cfg),
        start_ns: s.start_ns,
        end_ns: end,
        open,
        on_cpu_ns: s.on_cpu_ns,
        wait_ns: s.wait_start_ns.map_or(0, |w| w.until(end)),
        segments: 1,
        wait_syscall: s.wait_syscall,
        timeouts: 0,
    }
}

/// The spin of a logical wait (see the `logical` module): LongWait from its first segment's
/// start to the end of the wait that ended it.
fn logical_spin(g: &Graph, l: &Logical<'_>) -> Spin {
    let open = l.last.end == EndCause::Open;
    let mut on_cpu_ns = 0;
    let mut wait_ns = 0;
    let mut segments = 0;
    let mut cur = Some(l.first);
    while let Some(s) = cur {
        on_cpu_ns += s.on_cpu_ns;
        wait_ns += s.wait_start_ns.map_or(0, |w| w.until(g.end_of(s)));
        segments += 1;
        cur = (s.id != l.last.id)
            .then(|| g.next_in_thread(s.id))
            .flatten();
    }
    Spin {
        segment: l.first.id,
        last: l.last.id,
        tid: l.first.tid,
        pid: l.first.pid,
        class: SpinClass::LongWait,
        start_ns: l.first.start_ns,
        end_ns: g.end_of(l.last),
        open,
        on_cpu_ns,
        wait_ns,
        segments,
        wait_syscall: l.last.wait_syscall,
        timeouts: l.timeouts,
    }
}

/// The candidate spins of one thread found from its segments: single segments longer than
/// the threshold, logical waits (timed-out waits on one object until a real wake-up) longer
/// than it, and polling loops — runs of short segments (each under a quarter of the
/// threshold) ending in blocking waits, at least a third of them (and at least 3) timeouts,
/// sleeps or yields, lasting longer than the threshold. The short non-timeout waits inside a
/// loop are hand-offs (an interpreter lock, a mutex around the flag) and do not break it.
fn segment_spins(g: &Graph, tid: Tid, cfg: &HangConfig) -> Vec<Spin> {
    let mut out = Vec::new();
    // (run, timed iterations, lock retries, the run as it was at its last timed turn)
    type Run = (Spin, u32, u32, Option<Spin>);
    let mut run: Option<Run> = None;
    // The loop ends with its last timed turn: the short waits after it (the work the loop
    // waited for, a reply being read) are not part of it.
    let flush = |run: &mut Option<Run>, out: &mut Vec<Spin>| {
        if let Some((_, timed, retries, Some(r))) = run.take() {
            if (timed >= 3 || retries >= 2)
                && timed * 3 >= r.segments
                && r.start_ns.until(r.end_ns) > cfg.threshold_ns
            {
                out.push(r);
            }
        }
    };
    let short = cfg.threshold_ns / 4;
    // The last segment of the logical wait being skipped over, once reported.
    let mut skip_to = None;
    for s in g.thread_segments(tid) {
        if let Some(last) = skip_to {
            if s.id <= last {
                continue;
            }
            skip_to = None;
        }
        if let Some(l) = logical::forward(g, s) {
            let spin = logical_spin(g, &l);
            if spin.start_ns.until(spin.end_ns) > cfg.threshold_ns {
                flush(&mut run, &mut out);
                out.push(spin);
                skip_to = Some(l.last.id);
                continue;
            }
        }
        let dur = s.start_ns.until(g.end_of(s));
        // A refused lock attempt and the sleep after it is one turn of a retry loop, however
        // long the sleep (apt-get waits 1 s between attempts).
        let retry = lock_retry(g, s);
        if dur > cfg.threshold_ns && !retry {
            flush(&mut run, &mut out);
            out.push(single(g, s, cfg));
            continue;
        }
        let in_loop =
            s.end == EndCause::Woken && s.wait_start_ns.is_some() && (dur < short || retry);
        if !in_loop {
            flush(&mut run, &mut out);
            continue;
        }
        let (r, timed, retries, at_last) = run.get_or_insert((
            Spin {
                segment: s.id,
                last: s.id,
                tid: s.tid,
                pid: s.pid,
                class: SpinClass::RepeatedYield,
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                open: false,
                on_cpu_ns: 0,
                wait_ns: 0,
                segments: 0,
                wait_syscall: s.wait_syscall,
                timeouts: 0,
            },
            0,
            0,
            None,
        ));
        let turn = s.wait_timed_out() || s.yields > 0;
        if turn && *timed == 0 {
            // The loop starts with its first timed turn: short waits before it are not part
            // of it either.
            r.segment = s.id;
            r.start_ns = s.start_ns;
            r.on_cpu_ns = 0;
            r.wait_ns = 0;
            r.segments = 0;
        }
        *retries += u32::from(retry);
        r.last = s.id;
        r.end_ns = s.end_ns;
        r.on_cpu_ns += s.on_cpu_ns;
        r.wait_ns += s.wait_ns();
        r.segments += 1;
        if turn {
            *timed += 1;
            r.wait_syscall = s.wait_syscall;
        }
        // A loop still going when the trace ends.
        if g.next_in_thread(s.id).is_some_and(|n| {
            n.end == EndCause::Open && n.start_ns.until(g.end_of(n)) < cfg.threshold_ns
        }) {
            r.open = true;
        }
        if turn {
            *at_last = Some(r.clone());
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Whether `s` is a turn of a file-lock retry loop: it ran into another process's lock (a
/// lock-file edge into it, docs/rules.md) and then slept until its timeout.
fn lock_retry(g: &Graph, s: &Segment) -> bool {
    s.end == EndCause::Woken
        && s.wait_timed_out()
        && g.incoming(s.id)
            .any(|e| e.kind == EdgeKind::LockFile && e.src.tid().is_task() && e.src.tid() != s.tid)
}

/// The hang marked by markers of (or naming) `tid`: `argus:hang-begin [tid=N]` …
/// `argus:hang-end [tid=N]` (no end: until the trace ends).
fn marker_hangs(g: &Graph, tid: Tid, cfg: &HangConfig) -> Vec<Hang> {
    let names = |m: &Marker| -> bool {
        let named = m
            .text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("tid="))
            .and_then(|v| v.parse::<i32>().ok());
        match named {
            Some(t) => t == tid.0,
            None => m.tid == tid,
        }
    };
    let mut out = Vec::new();
    let mut begin: Option<&Marker> = None;
    for m in g.app_events().markers.iter().filter(|m| names(m)) {
        if m.text.starts_with(argus_schema::markers::HANG_BEGIN) {
            begin = Some(m);
        } else if m.text.starts_with(argus_schema::markers::HANG_END) {
            if let Some(b) = begin.take() {
                out.extend(marked(g, tid, b.ts, m.ts, false, cfg));
            }
        }
    }
    if let Some(b) = begin {
        out.extend(marked(g, tid, b.ts, g.trace_end_ns(), true, cfg));
    }
    out
}

fn marked(
    g: &Graph,
    tid: Tid,
    from: Nanos,
    to: Nanos,
    open: bool,
    cfg: &HangConfig,
) -> Option<Hang> {
    // The segment of the thread that covers most of the marked window.
    let segs: Vec<&Segment> = g.segments_overlapping(tid, from, to).collect();
    let best = segs.iter().max_by_key(|s| {
        let a = s.start_ns.max(from);
        let b = g.end_of(s).min(to);
        a.until(b)
    })?;
    let timed = segs
        .iter()
        .filter(|s| s.end == EndCause::Woken && s.wait_timed_out())
        .count();
    let mut spin = single(g, best, cfg);
    spin.start_ns = from;
    spin.end_ns = to;
    spin.open = open;
    if timed >= 3 && timed * 2 >= segs.len() {
        spin.class = SpinClass::RepeatedYield;
        spin.segment = segs.first().map_or(best.id, |s| s.id);
        spin.last = segs.last().map_or(best.id, |s| s.id);
        spin.segments = segs.len() as u32;
        spin.on_cpu_ns = segs.iter().map(|s| s.on_cpu_ns).sum();
    }
    let mut evidence = vec![format!(
        "the application marked a hang of {} with argus:hang-begin at {}{}",
        secs(from.until(to)),
        from,
        if open {
            " and no argus:hang-end before the trace ended"
        } else {
            ""
        }
    )];
    evidence.extend(class_evidence(g, &spin, None));
    Some(Hang {
        spin,
        evidence,
        source: HangSource::Marker,
        loop_wait: None,
    })
}

/// Evidence for the class of a spin, in words.
pub fn class_evidence(g: &Graph, spin: &Spin, lw: Option<&LoopWait>) -> Vec<String> {
    let dur = spin.start_ns.until(spin.end_ns).max(1);
    let pct = |x: u64| (x as u128 * 100 / dur as u128) as u64;
    let mut ev = Vec::new();
    match spin.class {
        SpinClass::LongWait => {
            let sys = syscalls::name(spin.wait_syscall);
            ev.push(format!(
                "blocked {} in {sys} ({}% of the {} hang), {} on CPU",
                secs(spin.wait_ns),
                pct(spin.wait_ns),
                secs(dur),
                secs(spin.on_cpu_ns)
            ));
            match lw {
                Some(l) if !syscalls::names(l.syscall, spin.wait_syscall) => ev.push(format!(
                    "{sys} is not the thread's event-loop wait ({}: {} short waits, median {})",
                    syscalls::name(l.syscall),
                    l.waits,
                    secs(l.median_ns)
                )),
                Some(_) => {}
                None => ev.push("the thread has no event-loop wait in the trace".to_string()),
            }
        }
        SpinClass::RepeatedYield => {
            let n = spin.segments.max(1);
            ev.push(format!(
                "{} short waits in {} averaging {} each, {} on CPU in {}: a polling loop",
                spin.segments,
                syscalls::name(spin.wait_syscall),
                secs(spin.wait_ns / n as u64),
                secs(spin.on_cpu_ns),
                secs(dur)
            ));
            if let Some(s) = g.segment(spin.segment) {
                if s.yields > 0 {
                    ev.push(format!("{} sched_yield calls", s.yields));
                }
            }
        }
        SpinClass::LongRunning => ev.push(format!(
            "on CPU {} of {} ({}%); the rest runnable or preempted",
            secs(spin.on_cpu_ns),
            secs(dur),
            pct(spin.on_cpu_ns)
        )),
    }
    if spin.open {
        ev.push("still going when the trace ended".to_string());
    }
    ev
}

/// The hangs of `tid`, longest first (marked hangs before all others).
pub fn find_hangs(g: &Graph, tid: Tid, cfg: &HangConfig) -> Vec<Hang> {
    let lw = learn_loop_wait(g, tid, cfg);
    let mut out = marker_hangs(g, tid, cfg);
    let mut cands: Vec<(Spin, HangSource)> = segment_spins(g, tid, cfg)
        .into_iter()
        .map(|s| (s, HangSource::Segments))
        .collect();
    for s in g.spins().iter().filter(|s| s.tid == tid) {
        let end = spin_end(g, s);
        if s.start_ns.until(end) <= cfg.threshold_ns {
            continue;
        }
        // The same spin found from the segments; a spin of the table that starts at the same
        // segment but spans more (a polling loop whose first wait alone passes the
        // threshold) is another, longer candidate.
        if cands
            .iter()
            .any(|(c, _)| c.segment == s.segment && c.last == s.last)
        {
            continue;
        }
        let mut s = s.clone();
        s.end_ns = end;
        cands.push((s, HangSource::Spins));
    }
    for (spin, source) in cands {
        // A thread stopped by a tracer or a stop signal (state `t`/`T`: a debugger, the
        // recorder's own `--watch …@cmd` attach, SIGSTOP) is not hung: nothing it waits for
        // can be diagnosed.
        let stopped = spin.class == SpinClass::LongWait
            && g.segment(spin.segment)
                .is_some_and(|s| matches!(s.wait_state, b't' | b'T'));
        if stopped {
            tracing::debug!(segment = %spin.segment, "stopped (state t/T), not a hang");
            continue;
        }
        let idle = lw.as_ref().is_some_and(|l| {
            syscalls::names(l.syscall, spin.wait_syscall)
                && matches!(spin.class, SpinClass::LongWait | SpinClass::RepeatedYield)
                && !round_trip(g, &spin)
        });
        if idle {
            tracing::debug!(segment = %spin.segment, "idle in the event-loop wait, not a hang");
            continue;
        }
        let evidence = class_evidence(g, &spin, lw.as_ref());
        out.push(Hang {
            spin,
            evidence,
            source,
            loop_wait: lw,
        });
    }
    out.sort_by_key(|h| rank(h, cfg.at_ns));
    out
}

/// A hang's place in the picking order ([`rank`]): smaller first.
pub type Rank = (u64, bool, Reverse<u64>, Reverse<SegmentId>);

/// How far `at` lies from a hang: 0 while it goes on, else the time to its start or since its
/// end.
pub fn distance(h: &Hang, at: Nanos) -> u64 {
    if at < h.spin.start_ns {
        at.until(h.spin.start_ns)
    } else {
        h.spin.end_ns.until(at)
    }
}

/// The order hangs are picked in, first is best: with a moment (`at`), the hang going on
/// then, else the nearest; then marked hangs (an application's own `argus:hang` markers)
/// before the others, the longest first.
pub fn rank(h: &Hang, at: Option<Nanos>) -> Rank {
    (
        at.map_or(0, |t| distance(h, t)),
        h.source != HangSource::Marker,
        Reverse(h.spin.start_ns.until(h.spin.end_ns)),
        Reverse(h.spin.segment),
    )
}

/// Whether a long wait in the event-loop syscall was a round trip rather than idleness: the
/// segment that ended in it (the first of a logical wait) sent a message to another
/// process, and a message from that process ended the wait — a request and its reply (a
/// client library that polls its one connection, a GUI's synchronous call to a server). An
/// idle loop is woken by whoever has something new; a loop that asked and waits for the
/// answer is waiting for that work. (A server idle between two requests of a client that
/// took longer than the threshold to send its next one looks the same.)
/// Waits before a request's wait that still count as part of sending it.
const ROUND_TRIP_BRIEF_NS: u64 = 5_000_000;

fn round_trip(g: &Graph, spin: &Spin) -> bool {
    g.segment(spin.last)
        .is_some_and(|last| round_trip_wait(g, last))
}

/// Whether the wait ending `last` was a round trip (see [`round_trip`]).
pub(crate) fn round_trip_wait(g: &Graph, last: &Segment) -> bool {
    let Some(next) = g.next_in_thread(last.id) else {
        return false;
    };
    let first = logical::backward(g, last).first;
    // The request: sent from the segment that ended in the wait, or from the few before it
    // while their waits were brief (a flush, a lock hand-off between the send and the wait).
    let mut asked: Vec<Pid> = Vec::new();
    let mut cur = Some(first);
    for _ in 0..4 {
        let Some(s) = cur else { break };
        asked.extend(
            g.outgoing(s.id)
                .filter(|e| e.kind == EdgeKind::Message)
                .filter_map(|e| g.segment(e.dst))
                .filter(|d| d.pid != first.pid && d.tid.is_task())
                .map(|d| d.pid),
        );
        cur = g
            .prev_in_thread(s.id)
            .filter(|p| p.end_ns == s.start_ns && p.wait_ns() < ROUND_TRIP_BRIEF_NS);
    }
    !asked.is_empty()
        && g.incoming(next.id).any(|e| {
            e.kind == EdgeKind::Message && g.segment(e.src).is_some_and(|s| asked.contains(&s.pid))
        })
}

/// The idle long waits of `tid` in its event-loop wait: what the finder ignored, for the
/// "no hang" message.
pub fn idle_waits(g: &Graph, tid: Tid, cfg: &HangConfig) -> Option<(LoopWait, usize)> {
    let lw = learn_loop_wait(g, tid, cfg)?;
    let n = g
        .thread_segments(tid)
        .filter(|s| {
            syscalls::names(lw.syscall, s.wait_syscall)
                && s.start_ns.until(g.end_of(s)) > cfg.threshold_ns
        })
        .count();
    Some((lw, n))
}
/// The end of a spin: its `end_ns`, or the trace end when it is still going.
pub(crate) fn spin_end(g: &Graph, spin: &Spin) -> Nanos {
    if spin.open {
        spin.end_ns.max(g.trace_end_ns())
    } else {
        spin.end_ns
    }
}
