//! Object keys: an action paired with its effect.

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
    pub(super) last_arm: Option<(u64, Nanos, Tid)>,
    /// Whether an action may cause several effects (a pipe's written data is read by
    /// several reads) rather than one (a timer expires once per arming).
    pub(super) sticky: bool,
    /// Sticky objects: threads already linked to the last arming (one edge per reader
    /// thread and write, however many reads it takes).
    #[serde(default)]
    pub(super) fired_by: Vec<Tid>,
    /// Whether the key reports [`Output::ArmDone`]: not for process-directed signals,
    /// whose generating event also has a direct target (the signalled thread).
    #[serde(default)]
    pub(super) arms_done: bool,
}

impl ObjectState {
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
