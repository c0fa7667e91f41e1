//! Socket data (ComputeGraph line 2.b without fd identity): the kernel's own record of
//! which socket a send delivered to (`SockReady`, `sock:sk_data_ready`) and which socket a
//! receive drained (`SockRecv`, `sock:sock_recv_length`), paired by the socket's address
//! ([`Key::Sock`](super::Key::Sock)). Fd identity pairs the two ends of a connection only
//! when the tracker read both descriptors in `/proc` before they were closed; a client
//! that connects, sends and exits within a few milliseconds (`redis-cli`) is gone by then.
//! These records need nothing from `/proc`.
//!
//! The thread decides whether a delivery is a data dependency's action (it is in a write:
//! [`Reads::write_src`](super::data::Reads)) and whether a receive is one's effect (it
//! returned data without blocking); the socket pairs them here. Unlike a pipe, a socket
//! is also made readable by what no write of the reader's peer sent (a TCP FIN on the
//! peer's `close`, a packet from another host): such a delivery must not hide the write
//! before it. So a receive pairs with every thread's *first* delivery since the previous
//! receive, and the threads' endpoints say which of them were writes.

use super::config::RulesConfig;
use super::key::Role;
use super::output::{Output, Pair};
use super::peers::MAX_PEERS;
use argus_schema::{Event, Nanos, Tid};
use serde::{Deserialize, Serialize};

/// One socket's deliveries since its last receive.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SockState {
    /// Each delivering thread's first delivery since the last receive: `seq`, time, thread.
    pending: Vec<(u64, Nanos, Tid)>,
    /// Reader threads already linked to `pending` (one edge per delivery and reader).
    read_by: Vec<Tid>,
}

impl SockState {
    pub(super) fn on_event(
        &mut self,
        ev: &Event,
        role: Role,
        cfg: &RulesConfig,
        out: &mut Vec<Output>,
    ) {
        match role {
            Role::Arm => {
                if !self.read_by.is_empty() {
                    // Read since: what follows is new data.
                    self.forget(out);
                }
                if self.pending.len() < MAX_PEERS && !self.pending.iter().any(|p| p.2 == ev.tid) {
                    self.pending.push((ev.seq, ev.ts, ev.tid));
                } else {
                    // The thread's earlier delivery stands for it: this one pairs with nothing.
                    out.push(Output::ArmDone(ev.seq));
                }
            }
            Role::Fire => {
                // Events lost in between: a delivery we never saw may have made this data.
                self.pending.retain(|p| {
                    let lost = cfg.crosses_gap(p.1, ev.ts);
                    if lost {
                        out.push(Output::ArmDone(p.0));
                    }
                    !lost
                });
                let mut paired = false;
                if !self.read_by.contains(&ev.tid) {
                    for &(arm, _, by) in &self.pending {
                        // A thread reading back its own delivery depends on nobody.
                        if by != ev.tid {
                            out.push(Output::Pair(Pair { arm, fire: ev.seq }));
                            paired = true;
                        }
                    }
                    if self.read_by.len() < MAX_PEERS {
                        self.read_by.push(ev.tid);
                    }
                }
                if !paired {
                    out.push(Output::NoEffect(ev.seq));
                }
            }
            _ => {}
        }
    }

    /// Whether the machine may be forgotten when idle (a continuous job, see
    /// [`KeyState::forgettable`](super::KeyState::forgettable)): only with no delivery
    /// pending. A pending delivery, however old, stands for its thread's later deliveries
    /// until the next receive: kept, a receive after the horizon pairs with the old one (an
    /// edge older than the horizon) and not with the thread's new one; forgotten, with the
    /// new one (an edge inside it). Who the readers were (`read_by`) matters only while
    /// something is pending.
    pub fn forgettable(&self) -> bool {
        self.pending.is_empty()
    }

    /// The deliveries pending can pair no more.
    fn forget(&mut self, out: &mut Vec<Output>) {
        for p in self.pending.drain(..) {
            out.push(Output::ArmDone(p.0));
        }
        self.read_by.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{outputs, Trace};
    use super::super::Key;
    use super::*;
    use argus_schema::{Context, EventKind};

    const SK: u64 = 0xffff_8881_0000_4000;

    #[test]
    fn a_receive_pairs_with_each_threads_first_delivery_since_the_last_receive() {
        let mut t = Trace::default();
        let ready = |t: &mut Trace, tid: i32| {
            t.push(0, tid, Context::SoftIrq, EventKind::SockReady { sk: SK })
        };
        let recv = |t: &mut Trace, tid: i32| t.task(tid, EventKind::SockRecv { sk: SK, ret: 4 });
        // 100 writes, then closes (its FIN is a second delivery); 200 delivers too.
        let w = ready(&mut t, 100);
        let fin = ready(&mut t, 100);
        let other = ready(&mut t, 200);
        let r1 = recv(&mut t, 300);
        // The same reader again: already linked; another reader: linked too.
        let r2 = recv(&mut t, 300);
        let r3 = recv(&mut t, 301);
        // New data after a receive starts over; the writer reading back its own: nothing.
        let w2 = ready(&mut t, 100);
        let own = recv(&mut t, 100);
        let out = outputs(&t.evs, Key::Sock(SK), &RulesConfig::default());
        assert_eq!(
            out,
            [
                Output::ArmDone(fin),
                Output::Pair(Pair { arm: w, fire: r1 }),
                Output::Pair(Pair {
                    arm: other,
                    fire: r1
                }),
                Output::NoEffect(r2),
                Output::Pair(Pair { arm: w, fire: r3 }),
                Output::Pair(Pair {
                    arm: other,
                    fire: r3
                }),
                Output::ArmDone(w),
                Output::ArmDone(other),
                Output::NoEffect(own),
            ]
        );
        assert!(!out.contains(&Output::Pair(Pair { arm: w2, fire: own })));
    }
}
