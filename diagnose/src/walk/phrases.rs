//! Phrases: all the English of the walk. The walk decides and records its decisions as data
//! ([`Finding`], [`Step`], [`During`]); this module says them in words: names of threads and
//! interrupts, times relative to the hang, syscall names; the `description` of path items,
//! the `reason` of root causes, question prompts, choice descriptions, advice and the
//! summary. Nothing here decides anything.

use crate::findings::{By, During, Finding, FlagEvidence, RunStart, Step, WakerState};
use crate::graph::Graph;
use crate::report::{
    secs, CauseClass, FurtherCulprit, HangInfo, PathEdgeKind, PathItem, Question, Role, RootCause,
};
use argus_schema::{syscalls, EdgeKind, Nanos, Segment, SegmentKind, Strength, Tid};

/// The name of a syscall number (`futex`; `-` for none).
pub(super) fn sc(nr: i32) -> String {
    syscalls::name(nr)
}

/// The name of the syscall an edge's source acted through, when it was in one.
pub(super) fn src_syscall(nr: i32) -> Option<String> {
    (nr >= 0).then(|| sc(nr))
}

fn softirq_name(vec: u32) -> &'static str {
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

/// How the source of a step acted on it (`"woken by"`): the one piece of per-kind prose.
/// The match on [`EdgeKind`] has no wildcard, so a new kind does not compile without its
/// phrase (its other facts are its row of [`argus_schema::EDGE_KINDS`]).
fn via(kind: PathEdgeKind) -> &'static str {
    match kind {
        PathEdgeKind::Edge(edge) => match edge {
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
            EdgeKind::LockOwner => "waiting for a lock held by",
        },
        PathEdgeKind::Baseline => "compared with",
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn pct(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        0
    } else {
        ((part as u128 * 100) / whole as u128) as u64
    }
}

fn run_start(how: RunStart) -> &'static str {
    match how {
        RunStart::Created => "it was created by",
        RunStart::ReceivedData => "it received data from",
        RunStart::Timer => "a timer fired, armed by",
        RunStart::SentInput => "it was sent input by",
        RunStart::Woken => "it was woken by",
    }
}

fn strength(s: Strength) -> &'static str {
    s.name()
}

/// Turns the walk's findings into English: thread names from the graph, times relative to
/// the start of the hang. The report's `reason`, `description` and `during_hang` strings are
/// these phrases of its `finding`, `step` and `during` data.
#[derive(Clone, Copy)]
pub struct Phrases<'g> {
    g: &'g Graph,
    hang_start: Nanos,
}

impl<'g> Phrases<'g> {
    /// Phrases for a hang that started at `hang_start`, naming threads from `graph`.
    pub fn new(graph: &'g Graph, hang_start: Nanos) -> Phrases<'g> {
        Phrases {
            g: graph,
            hang_start,
        }
    }

    /// A thread: `thread x (tid 3) of p`, `p (pid 3)`.
    pub fn who(&self, tid: Tid) -> String {
        self.g.describe(tid)
    }

    /// The hung thread: `main thread of p (pid 3)` for a main thread.
    pub fn hang_who(&self, tid: Tid) -> String {
        match self.g.thread(tid) {
            Some(t) if self.g.is_main(t.tid, t.pid) => {
                format!("main thread of {} (pid {})", t.comm, t.pid.0)
            }
            _ => self.who(tid),
        }
    }

    /// A time relative to the start of the hang: `+1.234 s` / `-0.500 s`.
    pub fn rel(&self, t: Nanos) -> String {
        if t >= self.hang_start {
            format!("+{}", secs(self.hang_start.until(t)))
        } else {
            format!("-{}", secs(t.until(self.hang_start)))
        }
    }

    /// An interrupt segment: `a timer expiry on cpu1`, `device interrupt irq 24 on cpu0`.
    pub(super) fn irq(&self, s: &Segment) -> String {
        let cpu = s.tid.irq_cpu().map_or(0, |c| c.0);
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

    /// How a segment acted through an edge: `thread x (tid 3) of p in write`, `a timer expiry
    /// on cpu1`.
    pub(super) fn source(&self, s: &Segment, syscall: Option<&str>) -> String {
        if s.tid.irq_cpu().is_some() {
            return self.irq(s);
        }
        let mut d = self.who(s.tid);
        if let Some(sys) = syscall {
            d.push_str(" in ");
            d.push_str(sys);
        }
        d
    }

    // ---- data ----------------------------------------------------------------------------

    /// What a thread did during a window.
    pub fn during(&self, d: &During) -> String {
        match d {
            During::Exited { at } => format!("exited at {}", self.rel(*at)),
            During::Blocked {
                syscall,
                blocked_ns,
                still_waiting,
            } => {
                let still = if *still_waiting {
                    ", still waiting when the trace ended"
                } else {
                    ""
                };
                format!("blocked {} in {syscall}{still}", secs(*blocked_ns))
            }
            During::Running { on_cpu_ns } => format!("running on CPU for {}", secs(*on_cpu_ns)),
            During::NotSeen => "not seen in the trace".to_string(),
            During::Active {
                segments,
                on_cpu_ns,
                stopped_near_end,
            } => {
                let near = if *stopped_near_end {
                    ", stopping shortly before the end"
                } else {
                    ""
                };
                format!(
                    "active in {segments} segment(s) with {} on CPU{near}",
                    secs(*on_cpu_ns)
                )
            }
            During::Unknown => "doing something this version cannot say".to_string(),
        }
    }

    /// Why segment `s` is a culprit: the `reason` of its root cause.
    pub fn reason(&self, s: &Segment, f: &Finding) -> String {
        let who = self.who(s.tid);
        let woke = |t: &Tid| self.who(*t);
        match f {
            Finding::Busy {
                on_cpu_ns,
                run_ns,
                woke: None,
                still_running,
                ..
            } => format!(
                "{} was busy on CPU for {} ({}% of the {} hang){}",
                self.hang_who(s.tid),
                secs(*on_cpu_ns),
                pct(*on_cpu_ns, *run_ns),
                secs(*run_ns),
                still_running_note(*still_running)
            ),
            Finding::Busy {
                on_cpu_ns,
                run_ns,
                woke: Some(t),
                through_brief_waits,
                still_running,
            } => {
                let through = if *through_brief_waits {
                    ", through brief waits"
                } else {
                    ""
                };
                format!(
                    "{who} ran {} on CPU ({}% of its {} run{through}) before it woke {}{}",
                    secs(*on_cpu_ns),
                    pct(*on_cpu_ns, *run_ns),
                    secs(*run_ns),
                    woke(t),
                    still_running_note(*still_running)
                )
            }
            Finding::Starved {
                on_cpu_ns,
                run_ns,
                preemptions,
                woke: w,
                still_running,
                lost_ns,
            } => {
                let subject = match w {
                    None => self.hang_who(s.tid),
                    Some(_) => who,
                };
                let before =
                    w.map_or_else(String::new, |t| format!(" before it woke {}", woke(&t)));
                if unrecorded(*on_cpu_ns, *run_ns, *lost_ns) {
                    return format!(
                        "{subject} is not explained: only {} on CPU in {}, and events were lost                          for {} of it, so its waits and wake-ups there were not recorded{before}{}",
                        secs(*on_cpu_ns),
                        secs(*run_ns),
                        secs(*lost_ns),
                        still_running_note(*still_running)
                    );
                }
                format!(
                    "{subject} was runnable but not running: only {} on CPU in {} (CPU starved, \
                     {preemptions} preemptions){before}{}",
                    secs(*on_cpu_ns),
                    secs(*run_ns),
                    still_running_note(*still_running)
                )
            }
            Finding::Slept {
                syscall,
                wait_ns,
                still_sleeping,
                woke: w,
            } => {
                let still = if *still_sleeping {
                    " and was still sleeping when the trace ended"
                } else {
                    ""
                };
                let before =
                    w.map_or_else(String::new, |t| format!(" before it woke {}", woke(&t)));
                format!("{who} slept {} in {syscall}{still}{before}", secs(*wait_ns))
            }
            Finding::OwnTimer {
                syscall,
                wait_ns,
                slept: true,
            } => format!(
                "{who} slept {} in {syscall} (its own timer)",
                secs(*wait_ns)
            ),
            Finding::OwnTimer {
                syscall,
                wait_ns,
                slept: false,
            } => format!(
                "{who} waited {} in {syscall} until its own timeout fired: nobody else woke it",
                secs(*wait_ns)
            ),
            Finding::TimedOut { syscall, wait_ns } => format!(
                "{who} waited {} in {syscall} until its timeout expired: nobody woke it",
                secs(*wait_ns)
            ),
            Finding::NeverWoken {
                syscall,
                wait_ns,
                exited: true,
            } => format!(
                "{who} blocked {} in {syscall} and exited without being woken",
                secs(*wait_ns)
            ),
            Finding::NeverWoken {
                syscall,
                wait_ns,
                exited: false,
            } => format!(
                "{who} blocked {} in {syscall} and was never woken: still waiting when the \
                 trace ended",
                secs(*wait_ns)
            ),
            Finding::WakeUntraced {
                syscall,
                wait_ns,
                ended_at,
            } => format!(
                "{who} blocked {} in {syscall}; the wake-up that ended it at {} was not traced",
                secs(*wait_ns),
                self.rel(*ended_at)
            ),
            Finding::Stopped { syscall, wait_ns } => format!(
                "{who} blocked {} in {syscall}; the walk was stopped here",
                secs(*wait_ns)
            ),
            Finding::DepthLimit { steps } => {
                format!("{who} is as far as the walk goes ({steps} steps)")
            }
            Finding::DepthLimitInWait {
                syscall,
                wait_ns,
                steps,
            } => format!(
                "{who} blocked {} in {syscall}; the walk stopped after {steps} steps",
                secs(*wait_ns)
            ),
            Finding::Circular => format!(
                "circular wait: {who} is already on the path, so these threads wait for each \
                 other"
            ),
            Finding::CircularTimer { woke: t } => format!(
                "circular wait: {who} armed the timer that woke {} and is already on the path",
                woke(t)
            ),
            Finding::WaitedThenWoke {
                woke: t,
                syscall,
                wait_ns,
                walk_stopped,
            } => {
                let waited = syscall
                    .as_ref()
                    .map_or_else(String::new, |sys| format!(" {} in {sys}", secs(*wait_ns)));
                let end = if *walk_stopped {
                    "the walk was stopped here"
                } else {
                    "the wake-up that ended that wait was not traced"
                };
                format!("{who} waited{waited} before it woke {}; {end}", woke(t))
            }
            Finding::FirstSeen { woke: t, at } => format!(
                "{who} first appears in the trace at {}, then woke {}; nothing earlier is known",
                self.rel(*at),
                woke(t)
            ),
            Finding::CreatedLate {
                created,
                late_ns,
                woke: t,
            } => {
                let child = self.who(*created);
                format!(
                    "{who} created {child} only {} after the wait began; {child} then woke {}",
                    secs(*late_ns),
                    woke(t)
                )
            }
            Finding::CreatorUntraced { late_ns, woke: t } => format!(
                "{who} was created only {} after the wait began (its creator was not traced), \
                 then woke {}",
                secs(*late_ns),
                woke(t)
            ),
            Finding::Interrupt {
                woke: t,
                after_ns,
                device,
            } => {
                let device = if *device {
                    ": it was waiting for the device"
                } else {
                    ""
                };
                format!(
                    "{} woke {} after {}{device}",
                    self.irq(s),
                    woke(t),
                    secs(*after_ns)
                )
            }
            Finding::InterruptStopped { woke: t } => format!(
                "{} woke {}; the walk was stopped here",
                self.irq(s),
                woke(t)
            ),
            Finding::TimerArmUntraced { woke: t } => format!(
                "{} woke {}; who armed the timer was not traced",
                self.irq(s),
                woke(t)
            ),
            Finding::TimerArmed {
                woke: t,
                fired_after_ns,
            } => format!(
                "{who} armed a timer that fired {} later and woke {}",
                secs(*fired_after_ns),
                woke(t)
            ),
            Finding::PollNoSetter {
                waits,
                syscall,
                loop_ns,
            } => format!(
                "{} polls a data flag ({waits} short waits in {syscall} over {}); no other \
                 thread of {} ran during the loop, so the flag's setter is not in the trace",
                self.hang_who(s.tid),
                secs(*loop_ns),
                self.g.process_name(s.tid)
            ),
            Finding::PollStopped {
                waits,
                syscall,
                loop_ns,
            } => format!(
                "{} polls a data flag ({waits} short waits in {syscall} over {}); the walk was \
                 stopped before naming the setter",
                self.hang_who(s.tid),
                secs(*loop_ns)
            ),
            Finding::LikelySetterBusy {
                poller,
                on_cpu_ns,
                loop_ns,
            } => format!(
                "{who} ran {} on CPU during the {} poll loop of {}: it is the likely setter of \
                 the flag, and the loop lasts as long as its work",
                secs(*on_cpu_ns),
                secs(*loop_ns),
                self.hang_who(*poller)
            ),
            Finding::LikelySetterBlocked {
                poller,
                syscall,
                blocked_ns,
            } => format!(
                "{who}, the likely setter of the flag {} polls, was blocked {} in {syscall} \
                 during the loop",
                self.hang_who(*poller),
                secs(*blocked_ns)
            ),
            Finding::LikelySetter { poller, during } => format!(
                "{who} is the likely setter of the flag {} polls: {}",
                self.hang_who(*poller),
                self.during(during)
            ),
            Finding::LockHolderBusy {
                poller,
                on_cpu_ns,
                loop_ns,
            } => format!(
                "{who} held the lock {} waited for and ran {} on CPU during its {} wait",
                self.hang_who(*poller),
                secs(*on_cpu_ns),
                secs(*loop_ns)
            ),
            Finding::LockHolderBlocked {
                poller,
                syscall,
                blocked_ns,
            } => format!(
                "{who} held the lock {} waited for while it was blocked {} in {syscall} \
                 during that wait",
                self.hang_who(*poller),
                secs(*blocked_ns)
            ),
            Finding::LockHolder { poller, during } => format!(
                "{who} held the lock {} waited for: {}",
                self.hang_who(*poller),
                self.during(during)
            ),
            Finding::FlagSetRunning {
                poller,
                after_ns,
                on_cpu_ns,
            } => format!(
                "{who} sets the flag {} polls, {} after the loop began; it ran {} on CPU \
                 meanwhile",
                self.hang_who(*poller),
                secs(*after_ns),
                secs(*on_cpu_ns)
            ),
            Finding::FlagSetAfterWait {
                poller,
                syscall,
                wait_ns,
            } => format!(
                "{who}, which sets the flag {} polls, was itself blocked {} in {syscall} before \
                 setting it",
                self.hang_who(*poller),
                secs(*wait_ns)
            ),
            Finding::FlagSetLate { poller, started } => format!(
                "{who} sets the flag {} polls; it started only at {}",
                self.hang_who(*poller),
                self.rel(*started)
            ),
            Finding::OnBaselinePath {
                waiter,
                normally_wakes,
                during,
                circular,
            } => {
                let wakes = if *normally_wakes {
                    format!("which normally wakes {}", self.who(*waiter))
                } else {
                    format!(
                        "which is normally on the wake-up path of {}",
                        self.who(*waiter)
                    )
                };
                match during {
                    During::Exited { at } => format!(
                        "{who}, {wakes}, exited at {} so the wake-up never came",
                        self.rel(*at)
                    ),
                    During::Blocked { syscall, .. } if *circular => format!(
                        "circular wait: {who}, {wakes}, was blocked in {syscall} and is already \
                         on the path"
                    ),
                    During::Blocked {
                        syscall,
                        blocked_ns,
                        ..
                    } => format!(
                        "{who}, {wakes}, was itself blocked {} in {syscall} during the hang",
                        secs(*blocked_ns)
                    ),
                    During::Running { on_cpu_ns } => format!(
                        "{who}, {wakes}, was busy on CPU for {} during the hang instead",
                        secs(*on_cpu_ns)
                    ),
                    other => format!("{who}, {wakes}, was {} during the hang", self.during(other)),
                }
            }
            Finding::Unknown => format!("{who} is a culprit (no finding recorded)"),
        }
    }

    /// What path item `s` did and why it is on the path: its `description`.
    pub fn step(&self, s: &Segment, st: &Step) -> String {
        let who = self.who(s.tid);
        match st {
            Step::HangWait {
                syscall,
                wait_ns,
                still_blocked,
                logical,
            } => {
                let open = if *still_blocked {
                    " (still blocked when the trace ended)"
                } else {
                    ""
                };
                let timeouts = logical.map_or_else(String::new, |l| {
                    format!(
                        ", one logical wait of {} waits on the same object, {} of them timed out",
                        l.waits, l.timeouts
                    )
                });
                format!(
                    "{} blocked {} in {syscall}{open}{timeouts}",
                    self.hang_who(s.tid),
                    secs(*wait_ns)
                )
            }
            Step::HangRun { on_cpu_ns, hang_ns } => format!(
                "{} ran {} on CPU over {}",
                self.hang_who(s.tid),
                secs(*on_cpu_ns),
                secs(*hang_ns)
            ),
            Step::HangPoll {
                loop_ns,
                waits,
                syscall,
                on_cpu_ns,
            } => format!(
                "{} polled for {}: {waits} short waits in {syscall}, {} on CPU",
                self.hang_who(s.tid),
                secs(*loop_ns),
                secs(*on_cpu_ns)
            ),
            Step::Waker { by, then } => {
                let by = match by {
                    By::Edge { edge, syscall } => {
                        format!("{} {}", via(*edge), self.source(s, syscall.as_deref()))
                    }
                    By::Continuing => format!("continuing the previous segment of {who}"),
                    By::Earlier => format!("earlier, {who}"),
                };
                match then {
                    WakerState::Again => format!("{by}, again"),
                    WakerState::NotExamined => by,
                    WakerState::Busy {
                        on_cpu_ns,
                        run_ns,
                        through_brief_waits: true,
                    } => format!(
                        "{by}, which was busy on CPU ({} of its {} run, counting from before the \
                         brief waits that split it)",
                        secs(*on_cpu_ns),
                        secs(*run_ns)
                    ),
                    WakerState::Busy {
                        on_cpu_ns, run_ns, ..
                    } => format!(
                        "{by}, which was busy on CPU ({} of its {} run)",
                        secs(*on_cpu_ns),
                        secs(*run_ns)
                    ),
                    WakerState::Starved {
                        on_cpu_ns,
                        run_ns,
                        lost_ns,
                    } if unrecorded(*on_cpu_ns, *run_ns, *lost_ns) => format!(
                        "{by}, which was only {} on CPU in {}: events were lost for {} of it, \
                         its waits there were not recorded",
                        secs(*on_cpu_ns),
                        secs(*run_ns),
                        secs(*lost_ns)
                    ),
                    WakerState::Starved {
                        on_cpu_ns, run_ns, ..
                    } => format!(
                        "{by}, which was runnable but starved of CPU ({} on CPU in {})",
                        secs(*on_cpu_ns),
                        secs(*run_ns)
                    ),
                    WakerState::Split => {
                        format!("{by}, in a segment split from its previous one (no wait between)")
                    }
                    WakerState::BlockedEarlier {
                        syscall,
                        blocked_ns,
                        until,
                        worked_ns,
                        passed_waits,
                    } => format!(
                        "{by}; its thread had been blocked {} of the window in {syscall} until \
                         {}, then worked {} (through {passed_waits} shorter wait{}) before it \
                         acted",
                        secs(*blocked_ns),
                        self.rel(*until),
                        secs(*worked_ns),
                        if *passed_waits == 1 { "" } else { "s" }
                    ),
                    WakerState::HadWaited {
                        syscall,
                        wait_ns,
                        slept,
                    } => format!(
                        "{by}, which had itself {} {} in {syscall}",
                        if *slept { "slept" } else { "waited" },
                        secs(*wait_ns)
                    ),
                    WakerState::CreatedAt { at } => {
                        format!("{by}, whose thread was only created at {}", self.rel(*at))
                    }
                    WakerState::FirstSeenAt { at } => format!(
                        "{by}, whose thread first appears in the trace at {}",
                        self.rel(*at)
                    ),
                    WakerState::QueuedLate { at } => {
                        format!("{by}, running a work item queued only at {}", self.rel(*at))
                    }
                    WakerState::WokenThroughWindow {
                        by: t,
                        waits,
                        covered_ns,
                    } => format!(
                        "{by}; its thread spent the window in short waits, {waits} of them \
                         ({} of the window) ended by {}",
                        secs(*covered_ns),
                        self.who(*t)
                    ),
                }
            }
            Step::WokenByInterrupt => format!("woken by {}", self.irq(s)),
            Step::CreatedBy { syscall } => {
                format!("created by {}", self.source(s, syscall.as_deref()))
            }
            Step::Blocked {
                syscall,
                blocked_ns,
            } => format!("{who} blocked {} in {syscall}", secs(*blocked_ns)),
            Step::Slept {
                syscall,
                wait_ns,
                untraced_timer,
            } => {
                let note = if *untraced_timer {
                    " (its timer fired in an untraced interrupt)"
                } else {
                    ""
                };
                format!("{who} slept {} in {syscall}{note}", secs(*wait_ns))
            }
            Step::OwnTimer {
                syscall,
                wait_ns,
                slept,
            } => format!(
                "timer armed by {who} itself, which then {} {} in {syscall}",
                if *slept { "slept" } else { "waited" },
                secs(*wait_ns)
            ),
            Step::TimerArmedBy { syscall, before_ns } => format!(
                "timer armed by {}, {} before it fired",
                self.source(s, syscall.as_deref()),
                secs(*before_ns)
            ),
            Step::RunBegan { how, syscall, at } => format!(
                "its run began when {} {} at {}",
                run_start(*how),
                self.source(s, syscall.as_deref()),
                self.rel(*at)
            ),
            Step::LikelySetter { during } => format!(
                "likely sets the flag: {who}, which during the loop was {}",
                self.during(during)
            ),
            Step::LockHolder {
                poller,
                at,
                strength: st,
            } => format!(
                "holds the lock {} waits for: {who} (known at {}, a {} edge)",
                self.hang_who(*poller),
                self.rel(*at),
                strength(*st)
            ),
            Step::FlagSet { at, evidence } => {
                let how = match evidence {
                    FlagEvidence::GraphEdge {
                        strength: st,
                        watchpoint: Some(addr),
                    } => format!(
                        "a watchpoint write to {addr:#x} the loop reads (a {} flag edge of the \
                         graph)",
                        strength(*st)
                    ),
                    FlagEvidence::GraphEdge {
                        strength: st,
                        watchpoint: None,
                    } => format!("a flag edge of the graph ({})", strength(*st)),
                    FlagEvidence::Watchpoint { addr } => {
                        format!("a watchpoint write to {addr:#x} the loop reads")
                    }
                    FlagEvidence::Marker { text } => format!("the application marker {text:?}"),
                };
                format!("flag set by {who} at {} (known from {how})", self.rel(*at))
            }
            Step::Baseline {
                normally_wakes,
                baseline_tid,
                syscall,
                baseline_at,
                baseline_wait_ns,
                during,
            } => {
                let how = if *normally_wakes {
                    "normally woken by"
                } else {
                    "normally on the wake-up path:"
                };
                let mut src = self.who(*baseline_tid);
                if let Some(sys) = syscall {
                    src.push_str(" in ");
                    src.push_str(sys);
                }
                let same = if *baseline_tid == s.tid {
                    String::new()
                } else {
                    format!(" ({who} has the role {} had)", self.who(*baseline_tid))
                };
                let now = match during {
                    During::Exited { at } => format!("{who} exited at {}", self.rel(*at)),
                    During::Blocked {
                        syscall,
                        blocked_ns,
                        ..
                    } => format!(
                        "during the hang {who} was blocked {} in {syscall}",
                        secs(*blocked_ns)
                    ),
                    During::Running { on_cpu_ns } => format!(
                        "during the hang {who} was busy on CPU for {}",
                        secs(*on_cpu_ns)
                    ),
                    other => format!("during the hang {who} was {}", self.during(other)),
                };
                format!(
                    "{how} {src} (the same wait at {} ended after {}){same}; {now}",
                    self.rel(*baseline_at),
                    secs(*baseline_wait_ns)
                )
            }
            Step::Unknown => String::new(),
        }
    }

    // ---- questions ---------------------------------------------------------------------

    /// A question about the cause of something (`subject`) among `n` edges, `strong` of
    /// them strong.
    pub(super) fn wake_prompt(&self, subject: String, n: usize, strong: usize) -> String {
        if n == 1 {
            format!(
                "{subject}: the only wake-up is weak (it may be mere mutual exclusion). \
                 Follow it, or stop here?"
            )
        } else {
            format!("{subject}: {n} candidate causes ({strong} strong). Which one caused it?")
        }
    }

    pub(super) fn ask_wait_ended(
        &self,
        tid: Tid,
        syscall: &str,
        wait_ns: u64,
        at: Nanos,
    ) -> String {
        format!(
            "The {} wait of {} in {syscall} ended at {}",
            secs(wait_ns),
            self.who(tid),
            self.rel(at)
        )
    }

    pub(super) fn ask_run_started(&self, what: &str, tid: Tid, at: Nanos) -> String {
        format!(
            "{what}: what started the run of {} at {}",
            self.who(tid),
            self.rel(at)
        )
    }

    pub(super) fn ask_input(&self, tid: Tid, at: Nanos) -> String {
        self.ask_run_started("Input", tid, at)
    }

    pub(super) fn ask_split(&self, tid: Tid, at: Nanos) -> String {
        format!(
            "{} started a new segment at {} without blocking: the segment was split by a \
             heuristic (a batching loop changing peers). Continue with its previous segment, or \
             stop here?",
            self.who(tid),
            self.rel(at)
        )
    }

    pub(super) fn ask_started_after_wait(
        &self,
        tid: Tid,
        at: Nanos,
        waited: Option<(&str, u64)>,
    ) -> String {
        let waited = waited.map_or_else(String::new, |(sys, ns)| format!(" {} in {sys}", secs(ns)));
        format!(
            "{} started at {} after waiting{waited}",
            self.who(tid),
            self.rel(at)
        )
    }

    pub(super) fn ask_timer_armer(&self, expiry: &Segment) -> String {
        format!("Who armed {}", self.irq(expiry))
    }

    pub(super) fn ask_irq_cause(&self, irq: &Segment) -> String {
        format!("What raised {}", self.irq(irq))
    }

    /// The sleep of `tid` began late: what started it (`after_ns`: since the wait began).
    pub(super) fn ask_late_sleep(
        &self,
        tid: Tid,
        sleep_ns: u64,
        at: Nanos,
        after_ns: Option<u64>,
    ) -> String {
        let after = after_ns.map_or_else(String::new, |ns| {
            format!(", {} after the wait began", secs(ns))
        });
        format!(
            "{} only started the {} sleep at {}{after}; what started it",
            self.who(tid),
            secs(sleep_ns),
            self.rel(at)
        )
    }

    pub(super) fn ask_setter(
        &self,
        poller: Tid,
        class: &str,
        syscall: &str,
        loop_ns: u64,
    ) -> String {
        format!(
            "{} polls a data flag ({class} in {syscall}, {}). Which thread sets the flag?",
            self.hang_who(poller),
            secs(loop_ns)
        )
    }

    pub(super) fn ask_baseline(&self, tid: Tid, syscall: &str, wait_ns: u64, n: usize) -> String {
        format!(
            "The {} wait of {} in {syscall} never ended normally: {n} similar waits that did \
             end quickly. Which one is the baseline to compare with?",
            secs(wait_ns),
            self.who(tid)
        )
    }

    pub(super) fn ask_culprit(&self, tid: Tid, syscall: &str, wait_ns: u64, n: usize) -> String {
        format!(
            "{n} threads on the baseline's wake-up path behaved abnormally during the {} wait \
             of {} in {syscall}, with separate causes. Which one to follow?",
            secs(wait_ns),
            self.who(tid)
        )
    }

    pub(super) fn ask_baseline_wake(&self, tid: Tid, at: Nanos) -> String {
        format!(
            "Baseline: what started {} at {}",
            self.who(tid),
            self.rel(at)
        )
    }

    /// Whether to diagnose recursively a flag setter blocked before it set the flag.
    pub(super) fn ask_recurse_setter(&self, tid: Tid, syscall: &str, wait_ns: u64) -> String {
        self.ask_recurse_blocked(tid, syscall, wait_ns, "before it set the flag")
    }

    /// Whether to diagnose recursively a thread of a baseline path blocked during the hang.
    pub(super) fn ask_recurse_baseline(&self, tid: Tid, syscall: &str, wait_ns: u64) -> String {
        self.ask_recurse_blocked(tid, syscall, wait_ns, "during the hang")
    }

    fn ask_recurse_blocked(&self, tid: Tid, syscall: &str, wait_ns: u64, when: &str) -> String {
        format!(
            "{} was blocked {} in {syscall} {when}: diagnose why (the culprit of the \
             culprit)?",
            self.who(tid),
            secs(wait_ns)
        )
    }

    pub(super) fn ask_recurse_busy(&self, tid: Tid) -> String {
        format!(
            "{} was busy on CPU during the hang: slice back to what started its work?",
            self.who(tid)
        )
    }

    // ---- choices -----------------------------------------------------------------------

    pub(super) fn choice_edge(
        &self,
        src: &Segment,
        kind: EdgeKind,
        syscall: Option<&str>,
        ts: Nanos,
    ) -> String {
        format!(
            "{} {} at {}",
            via(kind.into()),
            self.source(src, syscall),
            self.rel(ts)
        )
    }

    pub(super) fn choice_setter(&self, tid: Tid, during: &During) -> String {
        format!("{}: {}", self.who(tid), self.during(during))
    }

    pub(super) fn choice_baseline(
        &self,
        b: &Segment,
        syscall: &str,
        at: Nanos,
        similarity: f64,
    ) -> String {
        format!(
            "the same wait of {} in {syscall} at {} ended after {} (similarity {similarity:.2})",
            self.who(b.tid),
            self.rel(at),
            secs(b.wait_ns())
        )
    }

    pub(super) fn choice_culprit(
        &self,
        tid: Tid,
        during_hang: &str,
        score: f64,
        ends: Option<&str>,
    ) -> String {
        let ends = ends.map_or_else(String::new, |r| format!("; its chain ends at: {r}"));
        format!(
            "{}: during the hang {during_hang} (score {score:.2}){ends}",
            self.who(tid)
        )
    }

    pub(super) fn choice_continue(&self, tid: Tid) -> String {
        format!("continue with {}", self.who(tid))
    }

    // ---- advice ------------------------------------------------------------------------

    pub(super) fn advice_events_lost(&self, lost_ns: u64, hang_ns: u64) -> String {
        format!(
            "events were lost for {} of the {} hang (the kernel's ring buffer overran): waits, \
             wake-ups and edges there may be missing; record with a larger `--buffer-kb`",
            secs(lost_ns),
            secs(hang_ns)
        )
    }

    pub(super) fn advice_untraced_flag(&self, poller: Tid) -> String {
        format!(
            "{} is polling a data flag and the trace has no record of it (no flag edge, \
             watchpoint hit or argus:flag-set marker), so the setter below is a guess. To trace \
             the flag: find its address (gdb: `info address NAME` or `p &NAME`), record again \
             with a hardware watchpoint on it (perf_event_open PERF_TYPE_BREAKPOINT, e.g. \
             `perf record -e mem:ADDR:rw -p PID`), or have the setter write \
             `argus:flag-set NAME` to the trace_marker printed by `argus record`, and reproduce \
             the hang",
            self.hang_who(poller)
        )
    }

    pub(super) fn advice_input_marker(&self, text: &str, tid: Tid, at: Nanos) -> String {
        format!(
            "the work started with the application's input marker {text:?} of {} at {}",
            self.who(tid),
            self.rel(at)
        )
    }

    pub(super) fn advice_input_missing(&self, tid: Tid, first_seen: bool) -> String {
        let why = if first_seen {
            "it was already running when the trace began"
        } else {
            "no traced edge leads into it"
        };
        format!(
            "the input that started the work of {} was not found: {why}",
            self.who(tid)
        )
    }

    pub(super) fn advice_input(
        &self,
        tid: Tid,
        how: RunStart,
        src: &Segment,
        syscall: Option<&str>,
        at: Nanos,
    ) -> String {
        format!(
            "the work of {} started with the input {} {} at {}",
            self.who(tid),
            run_start(how),
            self.source(src, syscall),
            self.rel(at)
        )
    }

    pub(super) fn advice_no_baseline(&self, tid: Tid, syscall: &str) -> String {
        format!(
            "no baseline: no similar wait of {} in {syscall} (or of a thread with the same \
             name) was ended quickly by a wake-up; the candidates are the other threads of its \
             process",
            self.who(tid)
        )
    }

    pub(super) fn advice_baseline_unpicked(&self) -> String {
        "the baseline comparison was stopped before a baseline was picked".to_string()
    }

    pub(super) fn advice_normally_woken(
        &self,
        tid: Tid,
        by: Option<(&Segment, Option<&str>)>,
        at: Nanos,
        wait_ns: u64,
    ) -> String {
        let by = match by {
            Some((x, sys)) => format!("by {}", self.source(x, sys)),
            None => "by an untraced cause".to_string(),
        };
        format!(
            "{} is normally woken {by} (the same wait at {} ended after {}); during the hang \
             that did not happen",
            self.who(tid),
            self.rel(at),
            secs(wait_ns)
        )
    }

    pub(super) fn advice_path_normal(&self, tids: &[Tid]) -> String {
        let names: Vec<String> = tids.iter().map(|t| self.g.comm(*t)).collect();
        format!(
            "every thread on the baseline's wake-up path ({}) ran normally during the hang; \
             the missing wake-up is not explained by them",
            names.join(", ")
        )
    }

    pub(super) fn advice_culprit_unfollowed(&self) -> String {
        "the baseline comparison was stopped before a culprit was followed; the abnormal \
         threads of the baseline path are listed as further culprits"
            .to_string()
    }

    // ---- baselines, ranked paths, summary ----------------------------------------------

    /// What a thread of a baseline's wake-up path did during the hang, with notes: the
    /// event-loop wait it idled in, the exited baseline thread whose role it has.
    pub(super) fn thread_during(
        &self,
        during: &During,
        idle: Option<&str>,
        role_of: Option<Tid>,
    ) -> String {
        let idle = idle.map_or_else(String::new, |sys| {
            format!(" (its event-loop wait {sys}: idle)")
        });
        let role = role_of.map_or_else(String::new, |bt| {
            format!(
                " (the baseline's {} had exited; this is another {})",
                self.who(bt),
                self.g.comm(bt)
            )
        });
        format!("{}{idle}{role}", self.during(during))
    }

    /// What a segment did, in a few words (a ranked path's step).
    pub(super) fn seg_summary(&self, s: &Segment) -> String {
        if s.tid.irq_cpu().is_some() {
            return format!("{} at {}", self.irq(s), self.rel(s.start_ns));
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
        } else if s.end == argus_schema::EndCause::Exit {
            d.push_str(", then exited");
        }
        d
    }

    /// Why a ranked path ranks where it does.
    pub(super) fn ranked_evidence(
        &self,
        edges: usize,
        weak: usize,
        end: Option<(Tid, CauseClass, f64)>,
    ) -> Vec<String> {
        let mut evidence = vec![format!(
            "{edges} edge(s): {} strong or boosted, {weak} weak",
            edges - weak
        )];
        if let Some((tid, class, coverage)) = end {
            evidence.push(format!(
                "ends at {} ({}), covering {:.0}% of the hang",
                self.who(tid),
                class.name(),
                100.0 * coverage
            ));
        }
        evidence
    }

    /// The report's summary paragraph.
    pub(super) fn summary(
        &self,
        hang: &HangInfo,
        path: &[PathItem],
        root_causes: &[RootCause],
        further: &[FurtherCulprit],
        questions: &[Question],
    ) -> String {
        let mut out = match path.first() {
            Some(p) => format!("{} ({}).", capitalize(&p.description), hang.class.name()),
            None => format!("{} hang of tid {}.", hang.class.name(), hang.tid.0),
        };
        let chain: Vec<&str> = path
            .iter()
            .filter(|p| p.role == Role::Cause)
            .map(|p| p.description.as_str())
            .collect();
        if !chain.is_empty() {
            out.push_str(&format!(" Causal chain: {}.", chain.join("; ")));
        }
        for p in path {
            match p.role {
                Role::Baseline => out.push_str(&format!(" Baseline: {}.", p.description)),
                Role::Setter => out.push_str(&format!(" Flag: {}.", p.description)),
                _ => {}
            }
        }
        if let Some((last, others)) = root_causes.split_last() {
            out.push_str(&format!(" Root cause: {}.", last.reason));
            if !others.is_empty() {
                let o: Vec<&str> = others.iter().map(|r| r.reason.as_str()).collect();
                out.push_str(&format!(" Also implicated: {}.", o.join("; ")));
            }
        }
        let further: Vec<&str> = further
            .iter()
            .filter_map(|f| f.root_causes.last().map(|r| r.reason.as_str()))
            .collect();
        if !further.is_empty() {
            out.push_str(&format!(" Further culprits: {}.", further.join("; ")));
        }
        if !questions.is_empty() {
            let d = questions.iter().filter(|q| q.defaulted).count();
            out.push_str(&format!(
                " {} question(s) asked, {d} answered by default.",
                questions.len()
            ));
        }
        out
    }
}

fn still_running_note(still: bool) -> &'static str {
    if still {
        " and was still running when the trace ended"
    } else {
        ""
    }
}

/// Whether a "starved" run is mostly unrecorded: lost-events ranges cover at least half of
/// its time off CPU, where its waits would have been.
pub(crate) fn unrecorded(on_cpu_ns: u64, run_ns: u64, lost_ns: u64) -> bool {
    let off = run_ns.saturating_sub(on_cpu_ns);
    lost_ns > 0 && lost_ns.saturating_mul(2) >= off
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every edge kind of the table, and the baseline, has its own phrase (a new kind
    /// without one does not compile; this checks it is not empty or a copy).
    #[test]
    fn every_kind_has_its_own_phrase() {
        let mut seen = HashSet::new();
        let kinds = EdgeKind::ALL
            .map(PathEdgeKind::Edge)
            .into_iter()
            .chain([PathEdgeKind::Baseline]);
        for k in kinds {
            let phrase = via(k);
            assert!(!phrase.trim().is_empty(), "{}: no phrase", k.name());
            assert!(seen.insert(phrase), "{}: phrase {phrase:?} twice", k.name());
        }
        assert_eq!(seen.len(), argus_schema::EDGE_KINDS.len() + 1);
    }
}
