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
                } else if (syscalls::is_send(src.syscall) || syscalls::is_connect(src.syscall))
                    && (syscalls::is_receive(dst.wait) || syscalls::is_poll(dst.wait))
                {
                    // Data, or a connection request (a connect wakes whoever waits in
                    // `accept` or polls the listening socket).
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

#[cfg(test)]
mod tests {
    use super::super::testing::nr;
    use super::super::PoolRule;
    use super::*;
    use argus_schema::{Nanos, Tid};

    fn src(tid: i32, syscall: i32) -> Src {
        Src {
            seq: 1,
            seg: SegmentId::new(Tid(tid), 3),
            ts: Nanos(10),
            syscall,
            interrupt: false,
            exiting: false,
            condvar: false,
        }
    }

    fn dst(tid: i32, kind: EdgeKind, wait: i32) -> Dst {
        Dst {
            seq: 1,
            seg: SegmentId::new(Tid(tid), 5),
            kind,
            wait,
            paired: false,
            waited: true,
        }
    }

    #[test]
    fn wake_up_strength_follows_the_wakers_intent() {
        let mut cfg = RulesConfig::default();
        let (read, write, futex, exit, wait4, flock) = (
            nr("read"),
            nr("write"),
            nr("futex"),
            nr("exit_group"),
            nr("wait4"),
            nr("flock"),
        );
        let edge = |s: &Src, d: &Dst, cfg: &RulesConfig| {
            let e = wake_edge(s, d, cfg);
            (e.kind, e.strength)
        };
        let woke = |wait| dst(20, EdgeKind::Wakeup, wait);
        let strong = Strength::Strong;
        assert_eq!(
            edge(&src(10, write), &woke(read), &cfg),
            (EdgeKind::Message, strong)
        );
        assert_eq!(
            edge(&src(10, exit), &woke(wait4), &cfg),
            (EdgeKind::Exit, strong)
        );
        // A connect that wakes a listener in accept or in a readiness wait.
        for wait in [nr("accept4"), nr("epoll_wait")] {
            assert_eq!(
                edge(&src(10, nr("connect")), &woke(wait), &cfg),
                (EdgeKind::Message, strong)
            );
        }
        assert_eq!(
            edge(&src(10, -1), &woke(flock), &cfg),
            (EdgeKind::LockFile, strong)
        );
        assert_eq!(
            edge(&src(10, futex), &woke(futex), &cfg),
            (EdgeKind::Wakeup, Strength::Weak)
        );
        let condvar = Src {
            condvar: true,
            ..src(10, futex)
        };
        assert_eq!(edge(&condvar, &woke(futex), &cfg), (EdgeKind::Rule, strong));
        cfg.user.pools.push(PoolRule {
            tids: [Tid(10), Tid(20)].into(),
        });
        let pool = edge(&src(10, futex), &woke(futex), &cfg);
        assert_eq!(pool, (EdgeKind::Wakeup, Strength::Boosted));
        // Paired effects are strong, lock-file pairs (told by time order) boosted.
        let paired = Dst {
            paired: true,
            ..dst(20, EdgeKind::Timer, -1)
        };
        assert_eq!(edge(&src(10, -1), &paired, &cfg), (EdgeKind::Timer, strong));
        let lock = Dst {
            kind: EdgeKind::LockFile,
            ..paired
        };
        assert_eq!(
            edge(&src(10, -1), &lock, &cfg),
            (EdgeKind::LockFile, Strength::Boosted)
        );
    }

    #[test]
    fn a_wake_up_that_ended_a_wait_adds_the_weak_wait_wake_pair() {
        let cfg = RulesConfig::default();
        let mut edges = Vec::new();
        join_edges(&src(10, -1), &dst(20, EdgeKind::Wakeup, -1), &cfg, |e| {
            edges.push(e)
        });
        assert_eq!(edges.len(), 2);
        assert_eq!(
            (edges[1].src, edges[1].dst, edges[1].kind, edges[1].strength),
            (
                SegmentId::new(Tid(20), 4),
                SegmentId::new(Tid(10), 3),
                EdgeKind::WaitWake,
                Strength::Weak
            )
        );
        // Not when the waker is the waiter itself.
        edges.clear();
        join_edges(&src(20, -1), &dst(20, EdgeKind::Wakeup, -1), &cfg, |e| {
            edges.push(e)
        });
        assert_eq!(edges.len(), 1);
    }
}
