//! The interrupt cut-out (ComputeGraph line 1.a, "Interrupt or Timeshare_maintenance:
//! remove following event sequence before return"): hard interrupts, softirqs and timer
//! callbacks (hrtimer and wheel timers) are segments of the per-CPU pseudo-thread
//! [`Tid::irq`], never of the task they interrupted ([`IrqState`]). What they wake, arm or
//! queue is attributed to them (strong: delegated work), and to the timer's armer through
//! the timer edge (line 2.e, the [`Dst`] of an expiry). A device softirq run on return from
//! a hard interrupt gets a *boosted* queue edge from it: it is the interrupt's bottom half.

use super::config::RulesConfig;
use super::output::{Counter, Dst, Output, Src};
use argus_schema::{
    CausalEdge, Context, Cpu, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, Segment, SegmentId,
    SegmentKind, StartCause, Strength, Tid,
};
use serde::{Deserialize, Serialize};

/// One open interrupt-context handler.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Frame {
    seg: Segment,
    /// A maintenance callback: what it does is culled.
    culled: bool,
    /// The context its entry record was in.
    #[serde(default)]
    ctx: Context,
}

/// How deep a context is: a handler of one context only ever runs inside those below it.
fn level(ctx: Context) -> u8 {
    match ctx {
        Context::Task => 0,
        Context::SoftIrq => 1,
        Context::HardIrq => 2,
        Context::Nmi => 3,
    }
}

/// Whether a record of `kind` in context `ctx` shows that the open handler `f` has returned
/// although its exit record never came. The kernel's contexts nest strictly: a record in a
/// lower context than a handler's means the handler is over; hard interrupts do not nest in
/// each other, nor softirqs, and the timer callbacks of one context run one after another.
/// (Exit records do go missing without any loss reported: in `argus start` under load, one
/// `hrtimer_wakeup` callback every ~13 s, each on a CPU running a thread of the job itself
/// just before the recorder hid it. The kernel's pid filter, which hides them, is switched
/// per CPU by the wake-ups a callback makes.)
fn lost_exit(f: &Frame, ctx: Context, kind: &EventKind) -> bool {
    let (at, open) = (level(ctx), level(f.ctx));
    open > at
        || open == at
            && match kind {
                EventKind::IrqEntry { .. } | EventKind::SoftirqEntry { .. } => true,
                EventKind::HrtimerExpire { .. } | EventKind::TimerExpire { .. } => {
                    matches!(f.seg.kind, SegmentKind::Timer { .. })
                }
                _ => false,
            }
}

/// Softirq vectors that are a device's bottom half (NET_TX, NET_RX, BLOCK, IRQ_POLL,
/// TASKLET).
fn is_device_softirq(vec: u32) -> bool {
    matches!(vec, 2..=6)
}

/// How soon after a hard interrupt returns its bottom half must start to be attributed to
/// it.
const BOTTOM_HALF_NS: u64 = 1_000_000;

/// Interrupt context of one CPU: a stack of open handlers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IrqState {
    cpu: Cpu,
    next_ord: u32,
    stack: Vec<Frame>,
    /// The last hard interrupt, when it was the last interrupt record on this CPU.
    last_hard: Option<(SegmentId, Nanos)>,
}

impl IrqState {
    pub(super) fn new(cpu: Cpu) -> IrqState {
        IrqState {
            cpu,
            next_ord: 0,
            stack: Vec::new(),
            last_hard: None,
        }
    }

    /// A fresh machine for `cpu` whose segments are numbered from `next_ord` (see
    /// [`KeyState::resume`](super::KeyState::resume)).
    pub(super) fn resume(cpu: Cpu, next_ord: u32) -> IrqState {
        IrqState {
            next_ord,
            ..IrqState::new(cpu)
        }
    }

    /// The ordinal of the next interrupt segment.
    pub(super) fn next_ordinal(&self) -> u32 {
        self.next_ord
    }

    /// Whether the machine may be forgotten when idle: no handler open, no bottom-half link
    /// pending (a fresh machine would then do exactly what this one does).
    pub(super) fn forgettable(&self) -> bool {
        self.stack.is_empty() && self.last_hard.is_none()
    }

    fn new_segment(&mut self, ts: Nanos, kind: SegmentKind) -> Segment {
        let tid = Tid::irq(self.cpu);
        let id = SegmentId::new(tid, self.next_ord);
        self.next_ord += 1;
        Segment {
            events: 1,
            ..Segment::starting(id, Pid(tid.0), kind, ts, StartCause::Interrupt)
        }
    }

    fn push(&mut self, ev: &Event, kind: SegmentKind, culled: bool) -> SegmentId {
        let seg = self.new_segment(ev.ts, kind);
        let id = seg.id;
        self.stack.push(Frame {
            seg,
            culled,
            ctx: ev.ctx,
        });
        id
    }

    /// Closes the open handlers that record `ev` shows to be over although their exit
    /// record was lost ([`lost_exit`]), at the last moment known inside each: otherwise each
    /// would stay open for ever and take the interrupt work of every later handler without
    /// records of its own (IPIs, the local timer vector) as its own.
    fn close_lost(&mut self, ev: &Event, out: &mut Vec<Output>) {
        if !self.stack.iter().any(|f| lost_exit(f, ev.ctx, &ev.kind)) {
            return;
        }
        // A handler lasted at least as long as those nested in it.
        let mut last = Nanos(0);
        let mut ends: Vec<Nanos> = (self.stack.iter().rev())
            .map(|f| {
                last = last.max(f.seg.end_ns);
                last
            })
            .collect();
        ends.reverse();
        for (f, end) in std::mem::take(&mut self.stack).into_iter().zip(ends) {
            if !lost_exit(&f, ev.ctx, &ev.kind) {
                self.stack.push(f);
                continue;
            }
            let mut seg = f.seg;
            seg.end_ns = end;
            seg.on_cpu_ns = seg.start_ns.until(end);
            seg.end = EndCause::HandlerDone;
            out.push(Output::Segment(seg));
        }
    }

    fn pop_matching(&mut self, ts: Nanos, out: &mut Vec<Output>, m: impl Fn(&SegmentKind) -> bool) {
        if let Some(pos) = self.stack.iter().rposition(|s| m(&s.seg.kind)) {
            // Handlers nested inside the one ending lost their exit record: close them too.
            while self.stack.len() > pos {
                if let Some(Frame { mut seg, .. }) = self.stack.pop() {
                    seg.end_ns = ts;
                    seg.on_cpu_ns = seg.start_ns.until(ts);
                    seg.end = EndCause::HandlerDone;
                    if self.stack.is_empty() && matches!(seg.kind, SegmentKind::HardIrq { .. }) {
                        self.last_hard = Some((seg.id, ts));
                    }
                    out.push(Output::Segment(seg));
                }
            }
        }
    }

    fn timer_fires(
        &mut self,
        ev: &Event,
        timer: u64,
        function: u64,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        let culled = cfg.cull_functions.contains(&function);
        let id = self.push(ev, SegmentKind::Timer { timer, function }, culled);
        out.push(if culled {
            Output::Count(Counter::Culled)
        } else {
            Output::Dst(Dst {
                seq: ev.seq,
                seg: id,
                kind: EdgeKind::Timer,
                wait: -1,
                paired: true,
                waited: false,
            })
        });
    }

    pub(super) fn on_event(&mut self, ev: &Event, cfg: &RulesConfig, out: &mut Vec<Output>) {
        let ts = ev.ts;
        let last_hard = self.last_hard.take();
        self.close_lost(ev, out);
        match ev.kind {
            EventKind::IrqEntry { irq } => {
                self.push(ev, SegmentKind::HardIrq { irq }, false);
            }
            EventKind::SoftirqEntry { vec } => {
                let id = self.push(ev, SegmentKind::SoftIrq { vec }, false);
                if let Some((hard, at)) = last_hard {
                    if self.stack.len() == 1
                        && is_device_softirq(vec)
                        && at.until(ts) <= BOTTOM_HALF_NS
                    {
                        out.push(Output::Edge(CausalEdge {
                            src: hard,
                            dst: id,
                            kind: EdgeKind::Queue,
                            strength: Strength::Boosted,
                            ts: at,
                            src_syscall: -1,
                        }));
                    }
                }
            }
            EventKind::HrtimerExpire { timer, function }
            | EventKind::TimerExpire { timer, function } => {
                self.timer_fires(ev, timer, function, cfg, out);
            }
            EventKind::IrqExit { irq } => self.pop_matching(
                ts,
                out,
                |k| matches!(k, SegmentKind::HardIrq { irq: i } if *i == irq),
            ),
            EventKind::SoftirqExit { vec } => self.pop_matching(
                ts,
                out,
                |k| matches!(k, SegmentKind::SoftIrq { vec: v } if *v == vec),
            ),
            EventKind::HrtimerExpireExit { timer } | EventKind::TimerExpireExit { timer } => self
                .pop_matching(
                    ts,
                    out,
                    |k| matches!(k, SegmentKind::Timer { timer: t, .. } if *t == timer),
                ),
            EventKind::Waking { .. }
            | EventKind::WakeupNew { .. }
            | EventKind::Fork { .. }
            | EventKind::HrtimerStart { .. }
            | EventKind::TimerStart { .. }
            | EventKind::WorkQueue { .. }
            | EventKind::SignalGenerate { .. } => {
                let (seg, culled) = match self.stack.last_mut() {
                    Some(top) => {
                        top.seg.end_ns = top.seg.end_ns.max(ts);
                        top.seg.events += 1;
                        (top.seg.id, top.culled)
                    }
                    None => {
                        // Interrupt work with no enclosing handler record (IPI, local timer
                        // vector): a point segment of its own.
                        let mut s = self.new_segment(ts, SegmentKind::Interrupt);
                        s.end = EndCause::HandlerDone;
                        let id = s.id;
                        out.push(Output::Segment(s));
                        (id, false)
                    }
                };
                if culled {
                    out.push(Output::Count(Counter::Culled));
                } else {
                    out.push(Output::Src(Src {
                        seq: ev.seq,
                        seg,
                        ts,
                        syscall: -1,
                        interrupt: true,
                        exiting: false,
                        condvar: false,
                    }));
                }
            }
            _ => {
                // Other records in interrupt context (stacks, …) keep the bottom-half link.
                if self.stack.is_empty() {
                    self.last_hard = last_hard;
                }
            }
        }
    }

    pub(super) fn mutable(&self, out: &mut Vec<Output>) {
        for f in &self.stack {
            out.push(Output::Segment(f.seg.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{outputs, Trace};
    use super::super::Key;
    use super::*;
    use argus_schema::Context;

    #[test]
    fn a_device_softirq_right_after_a_hard_interrupt_is_its_bottom_half() {
        let mut t = Trace::default();
        t.push(1, 0, Context::HardIrq, EventKind::IrqEntry { irq: 30 });
        let exit = t.push(1, 0, Context::HardIrq, EventKind::IrqExit { irq: 30 });
        t.push(1, 0, Context::SoftIrq, EventKind::SoftirqEntry { vec: 3 });
        let wake = t.push(
            1,
            0,
            Context::SoftIrq,
            EventKind::Waking { target: Tid(10) },
        );
        t.push(1, 0, Context::SoftIrq, EventKind::SoftirqExit { vec: 3 });
        let out = outputs(&t.evs, Key::Irq(Cpu(1)), &RulesConfig::default());
        let irq = Tid::irq(Cpu(1));
        let (hard, soft) = (SegmentId::new(irq, 0), SegmentId::new(irq, 1));
        assert!(out.contains(&Output::Edge(CausalEdge {
            src: hard,
            dst: soft,
            kind: EdgeKind::Queue,
            strength: Strength::Boosted,
            ts: t.evs[exit as usize].ts,
            src_syscall: -1,
        })));
        // The softirq's wake-up acts from the softirq's segment, as interrupt context.
        assert!(out.iter().any(|o| matches!(o, Output::Src(s)
            if s.seq == wake && s.seg == soft && s.interrupt)));
        let kinds: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Segment(s) => Some(s.kind),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            [
                SegmentKind::HardIrq { irq: 30 },
                SegmentKind::SoftIrq { vec: 3 }
            ]
        );
    }

    /// The expiry of an hrtimer, and of a wheel timer, whose callback is function 0x9.
    fn hr(timer: u64) -> EventKind {
        EventKind::HrtimerExpire {
            timer,
            function: 0x9,
        }
    }

    fn wheel(timer: u64) -> EventKind {
        EventKind::TimerExpire {
            timer,
            function: 0x9,
        }
    }

    /// The segment kind of such a callback.
    fn timer(timer: u64) -> SegmentKind {
        SegmentKind::Timer {
            timer,
            function: 0x9,
        }
    }

    /// A segment as the tests compare it: kind, start, end, end cause.
    type Seg = (SegmentKind, u64, u64, EndCause);

    /// Every segment in `out`, and each endpoint's `(seq, segment ordinal)`.
    fn segments_and_srcs(out: &[Output]) -> (Vec<Seg>, Vec<(u64, u32)>) {
        let segs = out
            .iter()
            .filter_map(|o| match o {
                Output::Segment(s) => Some((s.kind, s.start_ns.0, s.end_ns.0, s.end)),
                _ => None,
            })
            .collect();
        let srcs = out
            .iter()
            .filter_map(|o| match o {
                Output::Src(s) => Some((s.seq, s.seg.seq())),
                _ => None,
            })
            .collect();
        (segs, srcs)
    }

    #[test]
    fn a_handler_whose_exit_was_lost_ends_when_its_context_shows_it_over() {
        let wake = |t| EventKind::Waking { target: Tid(t) };
        let mut t = Trace::default();
        // Two hard-interrupt timer callbacks, the first one's exit lost: callbacks of one
        // context do not nest, so the second one ends the first.
        let a = t.push(0, 50, Context::HardIrq, hr(0x5));
        let w0 = t.push(0, 50, Context::HardIrq, wake(10));
        let b = t.push(0, 50, Context::HardIrq, hr(0x6));
        let w1 = t.push(0, 50, Context::HardIrq, wake(11));
        let b_exit = t.push(
            0,
            50,
            Context::HardIrq,
            EventKind::HrtimerExpireExit { timer: 0x6 },
        );
        // Interrupt work with no handler record of its own is not the lost one's.
        let w2 = t.push(0, 50, Context::HardIrq, wake(12));
        // A softirq, inside it a hard interrupt whose exit is lost: the softirq's next
        // record shows the hard interrupt over.
        let soft = t.push(0, 50, Context::SoftIrq, EventKind::SoftirqEntry { vec: 1 });
        let irq = t.push(0, 50, Context::HardIrq, EventKind::IrqEntry { irq: 30 });
        let w3 = t.push(0, 50, Context::SoftIrq, wake(13));
        // A wheel timer inside the softirq is nested as it should be, and its exit lost:
        // the idle task's record in task context ends it and the softirq.
        let wheel_fires = t.push(0, 50, Context::SoftIrq, wheel(0x7));
        let w4 = t.push(0, 50, Context::SoftIrq, wake(14));
        let w5 = t.push(0, 0, Context::Task, wake(15));
        let out = outputs(&t.evs, Key::Irq(Cpu(0)), &RulesConfig::default());
        let at = |seq: u64| t.evs[seq as usize].ts.0;
        let done = EndCause::HandlerDone;
        let (segs, srcs) = segments_and_srcs(&out);
        assert_eq!(
            segs,
            [
                (timer(0x5), at(a), at(w0), done),
                (timer(0x6), at(b), at(b_exit), done),
                (SegmentKind::Interrupt, at(w2), at(w2), done),
                (SegmentKind::HardIrq { irq: 30 }, at(irq), at(irq), done),
                (SegmentKind::SoftIrq { vec: 1 }, at(soft), at(w4), done),
                (timer(0x7), at(wheel_fires), at(w4), done),
                (SegmentKind::Interrupt, at(w5), at(w5), done),
            ]
        );
        // Segment ordinals in the order the handlers started.
        assert_eq!(srcs, [(w0, 0), (w1, 1), (w2, 2), (w3, 3), (w4, 5), (w5, 6)]);
    }

    #[test]
    fn handlers_nested_as_the_kernel_nests_them_end_at_their_exits() {
        let mut t = Trace::default();
        let soft = t.push(0, 50, Context::SoftIrq, EventKind::SoftirqEntry { vec: 1 });
        let wheel_fires = t.push(0, 50, Context::SoftIrq, wheel(0x7));
        let irq = t.push(0, 50, Context::HardIrq, EventKind::IrqEntry { irq: 30 });
        let hr_fires = t.push(0, 50, Context::HardIrq, hr(0x5));
        let hr_exit = t.push(
            0,
            50,
            Context::HardIrq,
            EventKind::HrtimerExpireExit { timer: 0x5 },
        );
        let irq_exit = t.push(0, 50, Context::HardIrq, EventKind::IrqExit { irq: 30 });
        let wheel_exit = t.push(
            0,
            50,
            Context::SoftIrq,
            EventKind::TimerExpireExit { timer: 0x7 },
        );
        let soft_exit = t.push(0, 50, Context::SoftIrq, EventKind::SoftirqExit { vec: 1 });
        let out = outputs(&t.evs, Key::Irq(Cpu(0)), &RulesConfig::default());
        let at = |seq: u64| t.evs[seq as usize].ts.0;
        let done = EndCause::HandlerDone;
        let (segs, _) = segments_and_srcs(&out);
        assert_eq!(
            segs,
            [
                (timer(0x5), at(hr_fires), at(hr_exit), done),
                (
                    SegmentKind::HardIrq { irq: 30 },
                    at(irq),
                    at(irq_exit),
                    done
                ),
                (timer(0x7), at(wheel_fires), at(wheel_exit), done),
                (
                    SegmentKind::SoftIrq { vec: 1 },
                    at(soft),
                    at(soft_exit),
                    done
                ),
            ]
        );
    }

    #[test]
    fn a_timer_expiry_is_the_paired_target_of_its_arming() {
        let mut t = Trace::default();
        let fire = t.push(
            0,
            0,
            Context::HardIrq,
            EventKind::HrtimerExpire {
                timer: 0x5,
                function: 0x9,
            },
        );
        let out = outputs(&t.evs, Key::Irq(Cpu(0)), &RulesConfig::default());
        assert!(out.iter().any(|o| matches!(o, Output::Dst(d)
            if d.seq == fire && d.kind == EdgeKind::Timer && d.paired)));
        // A maintenance callback's expiry is culled instead.
        let mut cfg = RulesConfig::default();
        cfg.cull_functions.insert(0x9);
        let out = outputs(&t.evs, Key::Irq(Cpu(0)), &cfg);
        assert!(out.contains(&Output::Count(Counter::Culled)));
        assert!(!out.iter().any(|o| matches!(o, Output::Dst(_))));
    }
}
