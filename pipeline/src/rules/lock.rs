//! The lock-file rule (ARCHITECTURE.md §5, "lock file"): file locks (`flock`, `fcntl` record
//! locks) as the kernel records them ([`EventKind::FileLock`]: device, inode, type, result;
//! releases on close and exit included), keyed by file ([`lock_key`](super::lock_key),
//! [`Key::Lock`](super::Key::Lock)).
//!
//! - A wake-up of a task blocked in `flock` or `fcntl(F_SETLKW)` is a strong
//!   [`EdgeKind::LockFile`] (the unlock, close or exit that released it): made by
//!   [`wake_edge`](super::wake_edge) from the blocked syscall.
//! - Lock attempts that are refused (`EAGAIN`/`EACCES`, a retry loop) are linked to the
//!   latest granted operation of each other process on the file, and a lock granted after
//!   refusals to the release before it: boosted [`EdgeKind::LockFile`] edges, paired by the
//!   file's key ([`LockState`]) from the ends the threads emit ([`Locking`]).
//!
//! A refused attempt also makes the sleep after it a turn of a retry loop, however long
//! (the RepeatedYield of [`super::spins`]).

use super::output::{Dst, Output, Pair, Src};
use super::sysno::is_lock_refused;
use argus_schema::{EdgeKind, Event, EventKind, Nanos, Pid, SegmentId};
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
/// ([`ThreadState`](super::ThreadState)): every granted operation is a source, every
/// refusal and every grant after a refusal a target.
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
    /// Whether the machine may be forgotten when idle (a continuous job, see
    /// [`KeyState::forgettable`](super::KeyState::forgettable)): only when it knows of no
    /// holder, no release and no refusal. Each of them, however old, decides what a later
    /// operation pairs with: a release by an old holder becomes the release a later grant
    /// after a refusal is linked to (an edge inside the horizon), an old refusal makes a grant
    /// now a grant after a refusal, and a grant after a refusal with no release known pairs
    /// with the holders instead of an old release. So a lock file is kept once a lock on it
    /// was released: one small machine per file locked during the job.
    pub fn forgettable(&self) -> bool {
        self.holders.is_empty() && self.released.is_none() && self.refused.is_empty()
    }

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

/// The thread side of the lock-file rule: whether its latest attempt was refused.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Locking {
    /// Whether the thread's latest file lock attempt was refused (a retry loop).
    #[serde(default)]
    refused: bool,
}

impl Locking {
    /// Whether the thread's latest file lock attempt was refused.
    pub(super) fn refused(&self) -> bool {
        self.refused
    }

    /// A file lock operation `ev` by the thread in segment `seg` (in syscall `syscall`, -1
    /// none; `exiting`: after its exit): a granted lock or a release is the source of the
    /// lock-file pairs of its file; a refused attempt, or a lock granted after a refusal,
    /// their target ([`LockState`]).
    pub(super) fn operation(
        &mut self,
        ev: &Event,
        seg: SegmentId,
        syscall: i32,
        exiting: bool,
        out: &mut Vec<Output>,
    ) {
        let EventKind::FileLock { lock_type, ret, .. } = ev.kind else {
            return;
        };
        // `lock_type` 2: a release.
        let unlock = lock_type == 2;
        let target = if ret == 0 {
            out.push(Output::Src(Src {
                seq: ev.seq,
                seg,
                ts: ev.ts,
                syscall,
                interrupt: false,
                exiting,
                condvar: false,
            }));
            !unlock && std::mem::take(&mut self.refused)
        } else if is_lock_refused(i64::from(ret)) {
            self.refused = true;
            true
        } else {
            false
        };
        if target {
            out.push(Output::Dst(Dst {
                seq: ev.seq,
                seg,
                kind: EdgeKind::LockFile,
                wait: -1,
                paired: true,
                waited: false,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{outputs, Trace};
    use super::super::{lock_key, Key, RulesConfig};
    use super::*;
    use argus_schema::Tid;

    fn lock(t: &mut Trace, tid: i32, lock_type: u8, ret: i32) -> u64 {
        t.task(
            tid,
            EventKind::FileLock {
                inode: 77,
                dev: 8,
                flock: true,
                lock_type,
                ret,
            },
        )
    }

    #[test]
    fn a_refusal_pairs_with_the_holder_and_the_grant_after_it_with_the_release() {
        let mut t = Trace::default();
        let held = lock(&mut t, 10, 1, 0);
        let refused = lock(&mut t, 20, 1, -11);
        let released = lock(&mut t, 10, 2, 0);
        let granted = lock(&mut t, 20, 1, 0);
        let cfg = RulesConfig::default();
        let file = outputs(&t.evs, lock_key(77, 8, true), &cfg);
        assert_eq!(
            file,
            [
                Output::NoEffect(held),
                Output::Pair(Pair {
                    arm: held,
                    fire: refused
                }),
                Output::ArmDone(held),
                Output::NoEffect(released),
                Output::Pair(Pair {
                    arm: released,
                    fire: granted
                }),
            ]
        );
        // The waiting thread's ends: its refusal and its later grant are targets, the grant
        // a source too.
        let waiter = outputs(&t.evs, Key::Thread(Tid(20)), &cfg);
        let targets: Vec<u64> = waiter
            .iter()
            .filter_map(|o| match o {
                Output::Dst(d) if d.kind == EdgeKind::LockFile && d.paired => Some(d.seq),
                _ => None,
            })
            .collect();
        assert_eq!(targets, [refused, granted]);
        assert!(waiter
            .iter()
            .any(|o| matches!(o, Output::Src(s) if s.seq == granted)));
    }
}
