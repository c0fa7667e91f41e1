//! Routing: which keys (and in which role) an event concerns ([`route`]).

use super::config::RulesConfig;
use super::key::{lock_key, Key, Role};
use super::sysno::message_op;
use argus_schema::{Context, Event, EventKind, Tid};

/// Calls `f` for every (key, role) the event concerns.
pub fn route(ev: &Event, cfg: &RulesConfig, mut f: impl FnMut(Key, Role)) {
    let actor = || -> Key {
        if ev.ctx == Context::Task && ev.tid.is_task() {
            Key::Thread(ev.tid)
        } else {
            // Interrupt context, or the idle task acting (its work is interrupt tail work).
            Key::Irq(ev.cpu)
        }
    };
    let task = ev.tid.is_task() && ev.ctx == Context::Task;
    match &ev.kind {
        EventKind::Switch { prev, next, .. } => {
            if prev.is_task() {
                f(Key::Thread(*prev), Role::SwitchOut);
            }
            if next.is_task() {
                f(Key::Thread(*next), Role::SwitchIn);
            }
        }
        EventKind::Waking { target } | EventKind::WakeupNew { target } => {
            f(actor(), Role::Actor);
            if target.is_task() {
                f(Key::Thread(*target), Role::Target);
            }
        }
        EventKind::Fork { child, .. } => {
            f(actor(), Role::Actor);
            if child.is_task() {
                f(Key::Thread(*child), Role::Target);
            }
        }
        EventKind::HrtimerStart { timer, .. } => {
            f(actor(), Role::Actor);
            f(Key::Timer(*timer), Role::Arm);
        }
        EventKind::HrtimerExpire { timer, .. } => {
            f(Key::Irq(ev.cpu), Role::Own);
            f(Key::Timer(*timer), Role::Fire);
        }
        EventKind::TimerStart { timer, .. } => {
            f(actor(), Role::Actor);
            f(Key::WheelTimer(*timer), Role::Arm);
        }
        EventKind::TimerExpire { timer, .. } => {
            f(Key::Irq(ev.cpu), Role::Own);
            f(Key::WheelTimer(*timer), Role::Fire);
        }
        EventKind::WorkQueue { work, .. } => {
            f(actor(), Role::Actor);
            f(Key::Work(*work), Role::Arm);
        }
        EventKind::WorkStart { work, .. } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
            }
            f(Key::Work(*work), Role::Fire);
        }
        EventKind::SignalGenerate { target, sig } => {
            f(actor(), Role::Actor);
            if target.is_task() {
                f(Key::Thread(*target), Role::SignalTarget);
                f(Key::ProcSignal(*target, *sig), Role::Arm);
            }
        }
        EventKind::IrqEntry { .. }
        | EventKind::IrqExit { .. }
        | EventKind::SoftirqEntry { .. }
        | EventKind::SoftirqExit { .. }
        | EventKind::HrtimerExpireExit { .. }
        | EventKind::TimerExpireExit { .. } => f(Key::Irq(ev.cpu), Role::Own),
        EventKind::SysEnter { nr, args } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                if let Some(write) = message_op(*nr) {
                    if let Some(k) = cfg.channel_key(ev.pid, args[0], ev.ts, write) {
                        f(k, if write { Role::Arm } else { Role::Fire });
                    }
                }
            }
        }
        EventKind::SignalDeliver { sig } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                // Delivered in a thread other than the group leader: it may be a
                // process-directed signal generated for the leader.
                if ev.tid.0 != ev.pid.0 && ev.pid.0 > 0 {
                    f(Key::ProcSignal(Tid(ev.pid.0), *sig), Role::Fire);
                }
            }
        }
        EventKind::SysExit { .. }
        | EventKind::Exec
        | EventKind::Exit
        | EventKind::Marker { .. }
        | EventKind::WorkEnd { .. } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own)
            }
        }
        // Semantic records: they go to their actor so that its segment counts them.
        EventKind::Stack { .. } => f(actor(), Role::Own),
        // A write to a watched flag arms it (the writer is the actor of a flag edge); a
        // read by another thread fires it.
        // A lock, unlock or refusal: the file's lock key pairs it with the other processes'
        // operations; the thread says which pairs are edges.
        EventKind::FileLock {
            inode, dev, flock, ..
        } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                f(lock_key(*inode, *dev, *flock), Role::Arm);
            }
        }
        // Data queued on a socket arms its channel, whoever's context it arrived in (a
        // packet from elsewhere is new data too); the thread it arrived in says whether it
        // was its own send.
        EventKind::SockReady { sk } => {
            if ev.tid.is_task() && matches!(ev.ctx, Context::Task | Context::SoftIrq) {
                f(Key::Thread(ev.tid), Role::Own);
            }
            f(Key::Sock(*sk), Role::Arm);
        }
        // A task blocking on a lock the kernel names the owner of: the owner's segment is
        // the source of the edge into the waiter's.
        EventKind::LockOwner { owner, .. } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                if owner.is_task() && *owner != ev.tid {
                    f(Key::Thread(*owner), Role::Holder);
                }
            }
        }
        // A receive that returned data drains the socket's channel.
        EventKind::SockRecv { sk, ret } => {
            if task {
                f(Key::Thread(ev.tid), Role::Own);
                if *ret > 0 {
                    f(Key::Sock(*sk), Role::Fire);
                }
            }
        }
        EventKind::FlagAccess { addr, write } => {
            if *write {
                f(actor(), Role::Actor);
                f(Key::Flag(ev.pid, *addr), Role::Arm);
            } else {
                f(actor(), Role::Own);
                f(Key::Flag(ev.pid, *addr), Role::Fire);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::Trace;
    use super::*;
    use argus_schema::Cpu;

    fn keys(ev: &Event, cfg: &RulesConfig) -> Vec<(Key, Role)> {
        let mut v = Vec::new();
        route(ev, cfg, |k, r| v.push((k, r)));
        v
    }

    #[test]
    fn a_wake_up_goes_to_its_actor_and_its_target() {
        let cfg = RulesConfig::default();
        let mut t = Trace::default();
        t.wake(10, 20);
        t.push(
            3,
            0,
            Context::HardIrq,
            EventKind::Waking { target: Tid(20) },
        );
        assert_eq!(
            keys(&t.evs[0], &cfg),
            [
                (Key::Thread(Tid(10)), Role::Actor),
                (Key::Thread(Tid(20)), Role::Target)
            ]
        );
        // In interrupt context the actor is the CPU's interrupt pseudo-thread.
        assert_eq!(
            keys(&t.evs[1], &cfg),
            [
                (Key::Irq(Cpu(3)), Role::Actor),
                (Key::Thread(Tid(20)), Role::Target)
            ]
        );
    }
}
