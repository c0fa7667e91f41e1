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
//!   refusals to the releases by other processes since the refusal: boosted
//!   [`EdgeKind::LockFile`] edges, paired by the file's key ([`LockState`]) from the ends the
//!   threads emit ([`Locking`]).
//!
//! A refused attempt also makes the sleep after it a turn of a retry loop, however long
//! (the RepeatedYield of [`super::spins`]).
//!
//! # Each edge once
//!
//! An edge is (source segment, target segment, time of the source's operation): the same
//! lock operation paired with two attempts of one segment would be the same edge twice. Two
//! rules keep every pairing of a segment distinct:
//!
//! - a refusal is paired with the locks other processes *hold* (grants), a grant after a
//!   refusal only with *releases* (made after that refusal): never the same operation. A
//!   grant after a refusal is not linked to a lock still held: the grant did not wait for it
//!   (a POSIX lock is a byte range and the kernel's record has no range, so SQLite's lock of
//!   a read-mark byte, granted between two refusals of the write byte, is such a grant);
//! - a thread's segment is the target of its first refusal on a file only ([`Locking`]): a
//!   retry loop that does not block between attempts, or SQLite trying several bytes of its
//!   `-shm` file in one turn, would meet the same holders again. (A lock another process
//!   takes between two attempts of one segment is not linked to it; the next turn's first
//!   attempt is.)
//!
//! A retry loop that sleeps between attempts has one segment per turn, each linked to the
//! holders it ran into: the diagnosis reads those edges as the loop's turns.

use super::output::{Dst, Output, Pair, Src};
use super::sysno::is_lock_refused;
use argus_schema::{EdgeKind, Event, EventKind, Nanos, Pid, SegmentId};
use serde::{Deserialize, Serialize};

/// Holders a [`LockState`] keeps (shared locks can have many), and as many refused
/// processes and releases.
const MAX_HOLDERS: usize = 8;

/// A lockable file (lock-file rule), from the kernel's lock records ([`EventKind::FileLock`]):
/// the processes holding a lock on it (their latest granted lock, most recent last), the
/// processes whose latest attempt was refused (with that attempt), and the releases since
/// (the latest of each process that held a lock). Each refused attempt is paired ([`Pair`])
/// with every other holder's lock (what it ran into); a lock granted to a process after a
/// refusal is paired with each release by another process made after that refusal (what it
/// waited for), and with nothing when there is none. A release by a process that holds
/// nothing known here (a child closing an inherited descriptor at `exec`, a lock taken before
/// the trace began) is no release of a lock the trace saw, and is ignored; so is a release
/// no refused process can have waited for. The threads emit the ends of the pairs
/// ([`ThreadState`](super::ThreadState)): every granted operation is a source, a segment's
/// first refusal on the file and every grant after a refusal a target.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LockState {
    /// `(pid, seq, ts)` of each holder's latest granted lock.
    holders: Vec<(Pid, u64, Nanos)>,
    /// `(pid, seq, ts)` of the latest release by each process that held a lock, kept while a
    /// refusal of another process came before it (a later grant to that process may pair
    /// with it).
    released: Vec<(Pid, u64, Nanos)>,
    /// `(pid, seq)`: processes whose latest attempt was refused, and that attempt.
    refused: Vec<(Pid, u64)>,
}

impl LockState {
    /// Whether the machine may be forgotten when idle (a continuous job, see
    /// [`KeyState::forgettable`](super::KeyState::forgettable)): only when it knows of no
    /// holder, no release and no refusal. Each of them, however old, decides what a later
    /// operation pairs with: an old holder's lock is what a refusal now runs into, an old
    /// refusal makes a grant now a grant after a refusal, and a release kept (one made after
    /// a refusal still pending) is what that grant is linked to. So a lock file is kept while
    /// a lock on it is held or an attempt on it was refused last: one small machine per file
    /// in use.
    pub fn forgettable(&self) -> bool {
        self.holders.is_empty() && self.released.is_empty() && self.refused.is_empty()
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
                if let Some(i) = self.refused.iter().position(|r| r.0 == ev.pid) {
                    let (_, refusal) = self.refused.swap_remove(i);
                    // What it waited for: the releases by others since it was refused. Not
                    // the locks still held: it got its lock in spite of them.
                    for &(_, seq, _) in self
                        .released
                        .iter()
                        .filter(|r| r.0 != ev.pid && r.1 > refusal)
                    {
                        pair(seq, out);
                    }
                    self.forget_releases(out);
                }
                if let Some(i) = self.holders.iter().position(|h| h.0 == ev.pid) {
                    out.push(Output::ArmDone(self.holders.remove(i).1));
                } else if self.holders.len() >= MAX_HOLDERS {
                    out.push(Output::ArmDone(self.holders.remove(0).1));
                }
                self.holders.push((ev.pid, ev.seq, ev.ts));
            }
            (true, 0) => {
                let held = self.holders.iter().position(|h| h.0 == ev.pid);
                if let Some(i) = held {
                    out.push(Output::ArmDone(self.holders.remove(i).1));
                }
                let awaited = self.refused.iter().any(|r| r.0 != ev.pid);
                if held.is_some() && awaited {
                    if let Some(i) = self.released.iter().position(|r| r.0 == ev.pid) {
                        out.push(Output::ArmDone(self.released.remove(i).1));
                    } else if self.released.len() >= MAX_HOLDERS {
                        out.push(Output::ArmDone(self.released.remove(0).1));
                    }
                    self.released.push((ev.pid, ev.seq, ev.ts));
                } else {
                    out.push(Output::ArmDone(ev.seq));
                }
            }
            (false, r) if is_lock_refused(i64::from(r)) => {
                for &(_, seq, _) in self.holders.iter().filter(|h| h.0 != ev.pid) {
                    pair(seq, out);
                }
                if let Some(r) = self.refused.iter_mut().find(|r| r.0 == ev.pid) {
                    r.1 = ev.seq;
                } else {
                    if self.refused.len() >= MAX_HOLDERS {
                        self.refused.remove(0);
                    }
                    self.refused.push((ev.pid, ev.seq));
                }
                // A refusal newer than a release makes it matter to no one new; one that
                // replaced an older refusal (or pushed one out) may leave it to no one.
                self.forget_releases(out);
            }
            // A blocking request that will wait (its wake-up is the edge), or an error.
            _ => {}
        }
        if !paired {
            out.push(Output::NoEffect(ev.seq));
        }
    }

    /// Drops the releases no pending refusal of another process came before: no later grant
    /// can be paired with them.
    fn forget_releases(&mut self, out: &mut Vec<Output>) {
        let refused = &self.refused;
        self.released.retain(|&(pid, seq, _)| {
            let kept = refused.iter().any(|r| r.0 != pid && r.1 < seq);
            if !kept {
                out.push(Output::ArmDone(seq));
            }
            kept
        });
    }
}

/// A file lock's file, as its [`lock_key`](super::lock_key) takes it: inode, device,
/// `flock`.
type LockFile = (u64, u32, bool);

/// The thread side of the lock-file rule: whether its latest attempt was refused, and on
/// which files it was refused in its current segment.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Locking {
    /// Whether the thread's latest file lock attempt was refused (a retry loop).
    #[serde(default)]
    refused: bool,
    /// The segment of the thread's latest refused attempt, and the files it was refused a
    /// lock on in that segment (each file's first refusal there is the segment's target).
    #[serde(default)]
    refused_in: Option<(SegmentId, Vec<LockFile>)>,
}

impl Locking {
    /// Whether the thread's latest file lock attempt was refused.
    pub(super) fn refused(&self) -> bool {
        self.refused
    }

    /// A file lock operation `ev` by the thread in segment `seg` (in syscall `syscall`, -1
    /// none; `exiting`: after its exit): a granted lock or a release is the source of the
    /// lock-file pairs of its file; the segment's first refused attempt on the file, or a
    /// lock granted after a refusal, their target ([`LockState`]).
    pub(super) fn operation(
        &mut self,
        ev: &Event,
        seg: SegmentId,
        syscall: i32,
        exiting: bool,
        out: &mut Vec<Output>,
    ) {
        let EventKind::FileLock {
            inode,
            dev,
            flock,
            lock_type,
            ret,
        } = ev.kind
        else {
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
            self.first_refusal(seg, (inode, dev, flock))
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

    /// Whether a refusal on `file` is segment `seg`'s first there (noting it). The file's
    /// key pairs every refusal with the locks the other processes hold; a second refusal in
    /// the same segment would mostly meet the same holders and make the same edges again.
    fn first_refusal(&mut self, seg: SegmentId, file: LockFile) -> bool {
        match &mut self.refused_in {
            Some((s, files)) if *s == seg => {
                let first = !files.contains(&file);
                if first {
                    files.push(file);
                }
                first
            }
            _ => {
                self.refused_in = Some((seg, vec![file]));
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nr, outputs, Trace};
    use super::super::{lock_key, Key, RulesConfig};
    use super::*;
    use argus_schema::{Context, Tid};

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
                // No refusal is pending any more: no grant can be paired with it again.
                Output::ArmDone(released),
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

    /// A POSIX lock record of `tid` on inode 78 (`-shm`-like): `lock_type` 0 read, 1 write,
    /// 2 release.
    fn posix(t: &mut Trace, tid: i32, lock_type: u8, ret: i32) -> u64 {
        t.task(
            tid,
            EventKind::FileLock {
                inode: 78,
                dev: 8,
                flock: false,
                lock_type,
                ret,
            },
        )
    }

    /// `tid` sleeps (`nanosleep`, woken by the timer interrupt): its segment ends.
    fn sleep(t: &mut Trace, tid: i32) {
        let nanosleep = nr("nanosleep");
        t.enter(tid, nanosleep, 0);
        t.block(tid);
        t.irq(0, Context::HardIrq, EventKind::Waking { target: Tid(tid) });
        t.run(tid);
        t.exit(tid, nanosleep, 0);
    }

    /// The lock-file edges of the reference graph of `t`, as (source, target) in graph
    /// order; asserts no edge of the graph is there twice.
    fn lock_edges(t: &Trace) -> Vec<(SegmentId, SegmentId)> {
        let wm = t.evs.last().map_or(Nanos(0), |e| e.ts);
        let g = crate::reference::compute(&t.evs, wm, &RulesConfig::default());
        let twice: Vec<_> = g.edges.windows(2).filter(|w| w[0] == w[1]).collect();
        assert!(twice.is_empty(), "edges made twice: {twice:#?}");
        g.edges
            .iter()
            .filter(|e| e.kind == EdgeKind::LockFile)
            .map(|e| (e.src, e.dst))
            .collect()
    }

    fn seg(tid: i32, n: u32) -> SegmentId {
        SegmentId::new(Tid(tid), n)
    }

    /// SQLite in WAL mode, as recorded (issue 42): the writer (10) holds the `-shm` write
    /// byte; each turn of the busy handler of 20 takes a read-mark byte (granted), is refused
    /// the write byte and lets the read mark go, then sleeps. The record has no byte range:
    /// the grant of the read mark is a grant after a refusal, made while the writer still
    /// holds its lock; linking it to that lock repeated the refusal's edge into the same
    /// segment (the build failed on "count 2").
    #[test]
    fn a_grant_after_a_refusal_is_not_linked_to_a_lock_still_held() {
        let mut t = Trace::default();
        t.run(10);
        let held = posix(&mut t, 10, 1, 0);
        t.run(20);
        let mut turns = Vec::new();
        for _ in 0..3 {
            let mark = posix(&mut t, 20, 0, 0);
            let refused = posix(&mut t, 20, 1, -11);
            posix(&mut t, 20, 2, 0);
            sleep(&mut t, 20);
            turns.push((mark, refused));
        }
        t.run(10);
        let commit = posix(&mut t, 10, 2, 0);
        t.run(20);
        let mark = posix(&mut t, 20, 0, 0);
        posix(&mut t, 20, 1, 0);
        let file = outputs(&t.evs, lock_key(78, 8, false), &RulesConfig::default());
        let pairs: Vec<(u64, u64)> = file
            .iter()
            .filter_map(|o| match o {
                Output::Pair(p) => Some((p.arm, p.fire)),
                _ => None,
            })
            .collect();
        let mut want: Vec<(u64, u64)> = turns.iter().map(|&(_, r)| (held, r)).collect();
        want.push((commit, mark));
        assert_eq!(pairs, want);
        // One edge into each turn, from the lock it ran into; the turn after the commit from
        // the commit's release (the writer never blocked: one segment).
        assert_eq!(
            lock_edges(&t),
            [
                (seg(10, 0), seg(20, 0)),
                (seg(10, 0), seg(20, 1)),
                (seg(10, 0), seg(20, 2)),
                (seg(10, 0), seg(20, 3)),
            ]
        );
    }

    /// A retry loop that does not block between attempts (or SQLite trying several bytes
    /// of one file in a turn) meets the same holder again in the same segment: one edge
    /// per segment and file, and again after the thread slept.
    #[test]
    fn repeated_refusals_in_one_segment_are_linked_once() {
        let mut t = Trace::default();
        t.run(10);
        posix(&mut t, 10, 1, 0);
        lock(&mut t, 10, 1, 0);
        t.run(20);
        let targets = |t: &Trace| -> Vec<u64> {
            outputs(&t.evs, Key::Thread(Tid(20)), &RulesConfig::default())
                .iter()
                .filter_map(|o| match o {
                    Output::Dst(d) if d.kind == EdgeKind::LockFile => Some(d.seq),
                    _ => None,
                })
                .collect()
        };
        let first = posix(&mut t, 20, 1, -11);
        posix(&mut t, 20, 1, -11);
        // Another file in the same segment is another edge.
        let other = lock(&mut t, 20, 1, -11);
        posix(&mut t, 20, 1, -11);
        sleep(&mut t, 20);
        let again = posix(&mut t, 20, 1, -11);
        posix(&mut t, 20, 1, -13);
        assert_eq!(targets(&t), [first, other, again]);
        assert_eq!(
            lock_edges(&t),
            [
                (seg(10, 0), seg(20, 0)),
                (seg(10, 0), seg(20, 0)),
                (seg(10, 0), seg(20, 1)),
            ]
        );
    }

    /// A release is what a grant after a refusal waited for only when it came after the
    /// refusal, whoever released last; the grantee's own release is never one.
    #[test]
    fn a_grant_after_a_refusal_pairs_with_the_releases_since_the_refusal() {
        let mut t = Trace::default();
        posix(&mut t, 10, 1, 0);
        let early = posix(&mut t, 10, 2, 0);
        let taken = posix(&mut t, 30, 1, 0);
        posix(&mut t, 20, 0, 0);
        let refused = posix(&mut t, 20, 1, -11);
        let freed = posix(&mut t, 30, 2, 0);
        // 20 lets its own read lock go after 30's release: still 30's release it waited for.
        posix(&mut t, 20, 2, 0);
        let granted = posix(&mut t, 20, 1, 0);
        let file = outputs(&t.evs, lock_key(78, 8, false), &RulesConfig::default());
        let pairs: Vec<Pair> = file
            .iter()
            .filter_map(|o| match o {
                Output::Pair(p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            pairs,
            [
                Pair {
                    arm: taken,
                    fire: refused
                },
                Pair {
                    arm: freed,
                    fire: granted
                },
            ]
        );
        // The release before any refusal was no one's to wait for: done at once.
        assert!(file.contains(&Output::ArmDone(early)));
    }
}
