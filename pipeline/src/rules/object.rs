//! Object keys (ComputeGraph lines 2.b–2.f): a kernel object that joins an action with its
//! later effect. The `struct hrtimer` or `struct timer_list` of a timer (armed → expiry,
//! line 2.e), the `struct work_struct` of queued work (queued → started, line 2.c), a pipe
//! or socket channel (written → read without blocking, line 2.b), a watched data flag
//! (written → read by another thread, line 2.f) and a process-directed signal (generated
//! for the group leader → delivered in any thread of the group). Each pairs the latest
//! action with the effects it caused ([`Pair`]); the threads emit the two ends.

use super::config::RulesConfig;
use super::key::Role;
use super::output::{Output, Pair};
use super::peers::MAX_PEERS;
use argus_schema::{Event, Nanos, Tid};
use serde::{Deserialize, Serialize};

/// A timer, a work item or a pipe: the last action not yet matched with an effect.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ObjectState {
    /// `seq`, time and acting thread of the last arming.
    last_arm: Option<(u64, Nanos, Tid)>,
    /// Whether an action may cause several effects (a pipe's written data is read by
    /// several reads) rather than one (a timer expires once per arming).
    sticky: bool,
    /// Sticky objects: threads already linked to the last arming (one edge per reader
    /// thread and write, however many reads it takes).
    #[serde(default)]
    fired_by: Vec<Tid>,
    /// Whether the key reports [`Output::ArmDone`]: not for process-directed signals,
    /// whose generating event also has a direct target (the signalled thread).
    #[serde(default)]
    arms_done: bool,
}

impl ObjectState {
    /// A timer or a work item: each arming has one effect, and the joins are told when an
    /// action can pair no more.
    pub(super) fn once() -> ObjectState {
        ObjectState {
            arms_done: true,
            ..ObjectState::default()
        }
    }

    /// A channel or a flag: a write is read by several reads (once per reader thread).
    pub(super) fn sticky() -> ObjectState {
        ObjectState {
            last_arm: None,
            sticky: true,
            fired_by: Vec::new(),
            arms_done: true,
        }
    }

    /// A process-directed signal: one effect, but no [`Output::ArmDone`] (its generating
    /// event also has a direct target, the signalled thread).
    pub(super) fn signal() -> ObjectState {
        ObjectState::default()
    }

    pub(super) fn on_event(
        &mut self,
        ev: &Event,
        role: Role,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        match role {
            Role::Arm => {
                if let Some((old, ..)) = self.last_arm {
                    self.arm_done(old, out);
                }
                self.last_arm = Some((ev.seq, ev.ts, ev.tid));
                self.fired_by.clear();
            }
            Role::Fire => {
                let arm = if self.sticky {
                    self.last_arm
                } else {
                    self.last_arm.take()
                };
                let mut paired = false;
                match arm {
                    // Events were lost in between: the arming that caused this may be one
                    // we never saw.
                    Some((old, at, _)) if cfg.crosses_gap(at, ev.ts) => {
                        self.last_arm = None;
                        self.arm_done(old, out);
                    }
                    // A thread reading back what it wrote itself (a self-pipe, its own
                    // flag) depends on nobody.
                    Some((_, _, by)) if self.sticky && by == ev.tid => {}
                    // Each reader thread is linked once per write (a second link would
                    // repeat the edge); past MAX_PEERS readers of one write, none more.
                    Some(_)
                        if self.sticky
                            && (self.fired_by.contains(&ev.tid)
                                || self.fired_by.len() >= MAX_PEERS) => {}
                    Some((arm, _, _)) => {
                        if self.sticky {
                            self.fired_by.push(ev.tid);
                        }
                        out.push(Output::Pair(Pair { arm, fire: ev.seq }));
                        paired = true;
                        if !self.sticky {
                            // Its one effect came.
                            self.arm_done(arm, out);
                        }
                    }
                    None => {}
                }
                if !paired {
                    out.push(Output::NoEffect(ev.seq));
                }
            }
            _ => {}
        }
    }

    /// No later effect can be paired with the action `arm`.
    fn arm_done(&self, arm: u64, out: &mut Vec<Output>) {
        if self.arms_done {
            out.push(Output::ArmDone(arm));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{outputs, Trace};
    use super::super::Key;
    use super::*;
    use argus_schema::{Context, EventKind, Pid};

    fn flag(t: &mut Trace, tid: i32, write: bool) -> u64 {
        t.task(tid, EventKind::FlagAccess { addr: 0x40, write })
    }

    #[test]
    fn a_write_pairs_once_with_each_other_reader() {
        // Threads 100 and 101 of process 100 share the flag.
        let mut t = Trace::default();
        let early = flag(&mut t, 101, false);
        let w = flag(&mut t, 100, true);
        let own = flag(&mut t, 100, false);
        let r1 = flag(&mut t, 101, false);
        let r2 = flag(&mut t, 101, false);
        let w2 = flag(&mut t, 100, true);
        let r3 = flag(&mut t, 101, false);
        let out = outputs(&t.evs, Key::Flag(Pid(100), 0x40), &RulesConfig::default());
        assert_eq!(
            out,
            [
                Output::NoEffect(early),
                Output::NoEffect(own),
                Output::Pair(Pair { arm: w, fire: r1 }),
                Output::NoEffect(r2),
                Output::ArmDone(w),
                Output::Pair(Pair { arm: w2, fire: r3 }),
            ]
        );
    }

    #[test]
    fn a_timer_fires_once_per_arming() {
        let mut t = Trace::default();
        let arm = t.task(
            10,
            EventKind::HrtimerStart {
                timer: 0x5,
                function: 0x9,
                expires: 1,
            },
        );
        let expiry = EventKind::HrtimerExpire {
            timer: 0x5,
            function: 0x9,
        };
        let f1 = t.push(0, 0, Context::HardIrq, expiry.clone());
        let f2 = t.push(0, 0, Context::HardIrq, expiry);
        let out = outputs(&t.evs, Key::Timer(0x5), &RulesConfig::default());
        assert_eq!(
            out,
            [
                Output::Pair(Pair { arm, fire: f1 }),
                Output::ArmDone(arm),
                Output::NoEffect(f2),
            ]
        );
    }
}
