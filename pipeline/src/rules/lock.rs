//! The lock-file rule.

use super::output::{Output, Pair};
use super::sysno::is_lock_refused;
use argus_schema::{Event, EventKind, Nanos, Pid};
use serde::{Deserialize, Serialize};

/// Holders a [`LockState`] keeps (shared locks can have many).
const MAX_HOLDERS: usize = 8;

/// A lockable file (lock-file rule), from the kernel's lock records ([`EventKind::FileLock`]):
/// the processes holding a lock on it (their latest granted lock, most recent last), the last
/// release by one of them, and the processes whose latest attempt was refused. Each refused
/// attempt is paired ([`Pair`]) with every other holder's lock (what it ran into); a lock
/// granted to a process after a refusal is paired with the last release by another process
/// (what it waited for). A release by a process that holds nothing known here (a child
/// closing an inherited descriptor at `exec`, a lock taken before the trace began) is no
/// release of a lock the trace saw, and is ignored. The threads emit the ends of the pairs
/// ([`ThreadState`](super::ThreadState)): every granted operation is a source, every refusal and every grant
/// after a refusal a target.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LockState {
    /// `(pid, seq, ts)` of each holder's latest granted lock.
    holders: Vec<(Pid, u64, Nanos)>,
    /// `(pid, seq, ts)` of the latest release by a holder.
    released: Option<(Pid, u64, Nanos)>,
    /// Processes whose latest attempt was refused.
    refused: Vec<Pid>,
}

impl LockState {
    pub(super) fn on_event(&mut self, ev: &Event, out: &mut Vec<Output>) {
        let EventKind::FileLock { lock_type, ret, .. } = ev.kind else {
            return;
        };
        let unlock = lock_type == 2;
        // Unlike a timer (re-armed all the time), a lock changes hands rarely: a holder
        // seen before a lost-events gap is still taken as the holder after it (a hand-over
        // inside the gap, unseen, would be blamed on the old holder).
        let mut paired = false;
        let mut pair = |arm: u64, out: &mut Vec<Output>| {
            out.push(Output::Pair(Pair { arm, fire: ev.seq }));
            paired = true;
        };
        match (unlock, ret) {
            (false, 0) => {
                if let Some(i) = self.refused.iter().position(|p| *p == ev.pid) {
                    self.refused.swap_remove(i);
                    match self.released.filter(|r| r.0 != ev.pid) {
                        Some((_, seq, _)) => pair(seq, out),
                        // Released unseen: whoever held it.
                        None => {
                            for &(_, seq, _) in self.holders.iter().filter(|h| h.0 != ev.pid) {
                                pair(seq, out);
                            }
                        }
                    }
                }
                if let Some(i) = self.holders.iter().position(|h| h.0 == ev.pid) {
                    out.push(Output::ArmDone(self.holders.remove(i).1));
                } else if self.holders.len() >= MAX_HOLDERS {
                    out.push(Output::ArmDone(self.holders.remove(0).1));
                }
                self.holders.push((ev.pid, ev.seq, ev.ts));
            }
            (true, 0) => {
                if let Some(i) = self.holders.iter().position(|h| h.0 == ev.pid) {
                    out.push(Output::ArmDone(self.holders.remove(i).1));
                    if let Some((_, old, _)) = self.released.replace((ev.pid, ev.seq, ev.ts)) {
                        out.push(Output::ArmDone(old));
                    }
                } else {
                    out.push(Output::ArmDone(ev.seq));
                }
            }
            (false, r) if is_lock_refused(i64::from(r)) => {
                for &(_, seq, _) in self.holders.iter().filter(|h| h.0 != ev.pid) {
                    pair(seq, out);
                }
                if !self.refused.contains(&ev.pid) {
                    if self.refused.len() >= MAX_HOLDERS {
                        self.refused.remove(0);
                    }
                    self.refused.push(ev.pid);
                }
            }
            // A blocking request that will wait (its wake-up is the edge), or an error.
            _ => {}
        }
        if !paired {
            out.push(Output::NoEffect(ev.seq));
        }
    }
}
