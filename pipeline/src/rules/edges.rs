//! Edge kinds and strengths (ComputeGraph lines 2.a–2.f): the edge a joined actor and target
//! make ([`wake_edge`]), and the weak wait↔wake pair of a wake-up that ended a wait
//! ([`join_edges`], line 2.a).

use super::config::RulesConfig;
use super::output::{Dst, Src};
use super::sysno::{is_exit_call, is_lock_wait, is_wait_child};
use argus_schema::{syscalls, CausalEdge, EdgeKind, SegmentId, Strength};

/// The edge from a matched actor and target.
pub fn wake_edge(src: &Src, dst: &Dst, cfg: &RulesConfig) -> CausalEdge {
    let (kind, strength) = if dst.paired {
        match dst.kind {
            // Told by time order (the latest lock of another process), not by a wake-up.
            EdgeKind::LockFile => (EdgeKind::LockFile, Strength::Boosted),
            k => (k, Strength::Strong),
        }
    } else {
        match dst.kind {
            // An unlock, close or exit released the lock a blocked `flock`/`F_SETLKW` waited
            // for.
            EdgeKind::Wakeup if is_lock_wait(dst.wait) && !src.interrupt => {
                (EdgeKind::LockFile, Strength::Strong)
            }
            EdgeKind::Wakeup => {
                if src.condvar {
                    (EdgeKind::Rule, Strength::Strong)
                } else if src.exiting || is_exit_call(src.syscall) {
                    if is_wait_child(dst.wait) {
                        (EdgeKind::Exit, Strength::Strong)
                    } else {
                        (EdgeKind::Wakeup, Strength::Strong)
                    }
                } else if syscalls::is_send(src.syscall)
                    && (syscalls::is_receive(dst.wait) || syscalls::is_poll(dst.wait))
                {
                    (EdgeKind::Message, Strength::Strong)
                } else if src.interrupt
                    || syscalls::is_send(src.syscall)
                    || syscalls::is_notify(src.syscall)
                {
                    (EdgeKind::Wakeup, Strength::Strong)
                } else if cfg.user.same_pool(src.seg.tid(), dst.seg.tid()) {
                    (EdgeKind::Wakeup, Strength::Boosted)
                } else {
                    // futex hand-offs and unknown kernel paths may be mere mutual exclusion.
                    (EdgeKind::Wakeup, Strength::Weak)
                }
            }
            EdgeKind::ThreadOrder => (EdgeKind::ThreadOrder, Strength::Weak),
            k => (k, Strength::Strong),
        }
    };
    CausalEdge {
        src: src.seg,
        dst: dst.seg,
        kind,
        strength,
        ts: src.ts,
        src_syscall: src.syscall,
    }
}

/// Every edge one joined (actor, target) pair makes: the edge of [`wake_edge`], and for a
/// wake-up that ended a wait, the weak wait↔wake pair (ComputeGraph line 2.a): from the
/// segment that ended in the wait to the waker's segment, when the waker is another task.
pub fn join_edges(src: &Src, dst: &Dst, cfg: &RulesConfig, mut f: impl FnMut(CausalEdge)) {
    f(wake_edge(src, dst, cfg));
    let waiter = dst.seg.tid();
    if dst.waited
        && !dst.paired
        && dst.seg.seq() > 0
        && src.seg.tid().is_task()
        && src.seg.tid() != waiter
    {
        f(CausalEdge {
            src: SegmentId::new(waiter, dst.seg.seq() - 1),
            dst: src.seg,
            kind: EdgeKind::WaitWake,
            strength: Strength::Weak,
            ts: src.ts,
            src_syscall: -1,
        });
    }
}
