//! Data dependencies where the reader did not block, or was woken by an interrupt
//! (ComputeGraph lines 2.b and 2.f): a read that returned data from a pipe or socket depends
//! on the last write into the channel ([`EdgeKind::Message`]; a packet's delivery in the
//! network softirq wakes the reader on the sender's behalf), and a read of a watched data flag on its last write by another
//! thread ([`EdgeKind::Flag`]). The thread emits the ends (the write's [`Src`], the read's
//! paired [`Dst`]); the channel's or flag's object key pairs them
//! ([`ObjectState`](super::ObjectState)).

use super::output::{Dst, Output, Src};
use argus_schema::{EdgeKind, Event, SegmentId};
use serde::{Deserialize, Serialize};

/// The read in flight of a thread.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Reads {
    /// `seq` of the entry of a read on a channel (fd identity or declared pipe) in flight.
    pipe_read: Option<u64>,
    /// `seq` of the socket receive that returned data in the syscall in flight
    /// ([`Reads::sock_received`]).
    #[serde(default)]
    sock_read: Option<u64>,
}

impl Reads {
    /// A syscall entered: no read in flight.
    pub(super) fn syscall(&mut self) {
        self.pipe_read = None;
        self.sock_read = None;
    }

    /// The syscall in flight received data from a socket (`seq`: the `SockRecv` record):
    /// the socket's own channel names the data's sender, so the fd-identity read, a guess
    /// at the same dependency, is dropped (one edge, not two).
    pub(super) fn sock_received(&mut self, seq: u64) {
        self.sock_read = Some(seq);
        self.pipe_read = None;
    }

    /// The action end of a data dependency: `ev`, in segment `seg`, inside the write
    /// syscall `nr` — the write's entry on a channel, or socket data queued while the
    /// thread was in it (a `SockReady`: a unix socket's `sendmsg`, or loopback TCP's softirq
    /// run at the end of the send), which whoever reads that socket next depends on.
    pub(super) fn write_src(ev: &Event, seg: SegmentId, nr: i32) -> Src {
        Src {
            seq: ev.seq,
            seg,
            ts: ev.ts,
            syscall: nr,
            interrupt: false,
            exiting: false,
            condvar: false,
        }
    }

    /// Syscall `nr` (entered by `ev`, in segment `seg`) transfers data through a channel: a
    /// write is the action of a data dependency (its endpoint goes to `srcs`, held back with
    /// the message syscall's), a read its possible effect.
    pub(super) fn transfer(
        &mut self,
        ev: &Event,
        seg: SegmentId,
        nr: i32,
        write: bool,
        srcs: &mut Vec<Src>,
    ) {
        if write {
            // The write is the action of a pipe data dependency.
            srcs.push(Self::write_src(ev, seg, nr));
        } else {
            self.pipe_read = Some(ev.seq);
        }
    }

    /// The syscall returned `ret`; `waited`: the thread blocked in it; `by_irq`: an
    /// interrupt, not a task, ended that wait; `seg`: its segment now.
    pub(super) fn returned(
        &mut self,
        ret: i64,
        waited: bool,
        by_irq: bool,
        seg: Option<SegmentId>,
        out: &mut Vec<Output>,
    ) {
        let sock = self.sock_read.take();
        if let Some(seq) = self.pipe_read.take().or(sock) {
            // Data was there already: the reader depends on the last write. Or the reader
            // blocked and an interrupt woke it: the network softirq delivering a packet
            // (loopback TCP or UDP) wakes the reader, but the data, and so the wake-up, is
            // the sender's; a task's own wake-up of the reader is already its edge.
            if ret > 0 && (!waited || by_irq) {
                if let Some(seg) = seg {
                    out.push(Output::Dst(Dst {
                        seq,
                        seg,
                        kind: EdgeKind::Message,
                        wait: -1,
                        paired: true,
                        waited: false,
                    }));
                }
            }
        }
    }
}

/// A read of a watched flag (`ev`) in segment `seg` depends on the last write of another
/// thread.
pub(super) fn flag_read(ev: &Event, seg: Option<SegmentId>, out: &mut Vec<Output>) {
    if let Some(seg) = seg {
        out.push(Output::Dst(Dst {
            seq: ev.seq,
            seg,
            kind: EdgeKind::Flag,
            wait: -1,
            paired: true,
            waited: false,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nr, outputs, Trace};
    use super::super::{Key, Pair, PipeRule, RulesConfig};
    use super::*;
    use argus_schema::{Context, EventKind, Pid, Tid};

    #[test]
    fn a_read_that_finds_data_depends_on_the_last_write() {
        let (read, write) = (nr("read"), nr("write"));
        let mut cfg = RulesConfig::default();
        cfg.user.pipes.push(PipeRule {
            pid: Pid(100),
            write_fd: 4,
            read_fd: 3,
        });
        let mut t = Trace::default();
        t.run(100);
        let w = t.enter(100, write, 4);
        t.exit(100, write, 8);
        t.run(101);
        let r = t.enter(101, read, 3);
        t.exit(101, read, 8);
        // A read that blocked was woken: no data dependency.
        t.enter(101, read, 3);
        t.block(101);
        t.wake(100, 101);
        t.run(101);
        t.exit(101, read, 8);
        let writer = outputs(&t.evs, Key::Thread(Tid(100)), &cfg);
        assert!(writer
            .iter()
            .any(|o| matches!(o, Output::Src(s) if s.seq == w && s.syscall == write)));
        let reader = outputs(&t.evs, Key::Thread(Tid(101)), &cfg);
        let deps: Vec<_> = reader
            .iter()
            .filter(|o| matches!(o, Output::Dst(d) if d.kind == EdgeKind::Message))
            .collect();
        assert_eq!(
            deps,
            [&Output::Dst(Dst {
                seq: r,
                seg: SegmentId::new(Tid(101), 0),
                kind: EdgeKind::Message,
                wait: -1,
                paired: true,
                waited: false,
            })]
        );
        let pipe = outputs(&t.evs, Key::Pipe(0), &cfg);
        assert!(pipe.contains(&Output::Pair(Pair { arm: w, fire: r })));
    }

    /// Loopback TCP: the sender's send runs the network softirq, which queues the data on
    /// the reader's socket and wakes the blocked reader. The wake-up is the interrupt's; the
    /// receive that then returns data is the paired end of a message from the send.
    #[test]
    fn a_blocked_receive_woken_by_the_network_softirq_depends_on_the_send() {
        const SK: u64 = 0xffff_8881_0000_4000;
        let (recv, send) = (nr("recvfrom"), nr("sendto"));
        let mut t = Trace::default();
        t.run(101);
        t.enter(101, recv, 3);
        t.block(101);
        t.run(100);
        t.enter(100, send, 4);
        let ready = t.push(0, 100, Context::SoftIrq, EventKind::SockReady { sk: SK });
        t.push(
            0,
            100,
            Context::SoftIrq,
            EventKind::Waking { target: Tid(101) },
        );
        t.exit(100, send, 5);
        t.run(101);
        let got = t.task(101, EventKind::SockRecv { sk: SK, ret: 5 });
        t.exit(101, recv, 5);
        // The same reader woken by a task (a unix socket's send wakes it itself): the
        // wake-up is the edge, no second one.
        t.enter(101, recv, 3);
        t.block(101);
        t.wake(100, 101);
        t.run(101);
        let by_task = t.task(101, EventKind::SockRecv { sk: SK, ret: 5 });
        t.exit(101, recv, 5);
        let cfg = RulesConfig::default();
        let sender = outputs(&t.evs, Key::Thread(Tid(100)), &cfg);
        assert!(
            sender
                .iter()
                .any(|o| matches!(o, Output::Src(s) if s.seq == ready && s.syscall == send)),
            "{sender:?}"
        );
        let reader = outputs(&t.evs, Key::Thread(Tid(101)), &cfg);
        let deps: Vec<&Dst> = reader
            .iter()
            .filter_map(|o| match o {
                Output::Dst(d) if d.kind == EdgeKind::Message => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(
            deps,
            [&Dst {
                seq: got,
                seg: SegmentId::new(Tid(101), 1),
                kind: EdgeKind::Message,
                wait: -1,
                paired: true,
                waited: false,
            }],
            "{reader:?}"
        );
        assert!(deps.iter().all(|d| d.seq != by_task));
        let sock = outputs(&t.evs, Key::Sock(SK), &cfg);
        assert!(sock.contains(&Output::Pair(Pair {
            arm: ready,
            fire: got
        })));
    }

    #[test]
    fn a_flag_read_is_the_paired_target_of_a_flag_edge() {
        let mut t = Trace::default();
        t.run(10);
        let read = t.task(
            10,
            EventKind::FlagAccess {
                addr: 0x1000,
                write: false,
            },
        );
        let out = outputs(&t.evs, Key::Thread(Tid(10)), &RulesConfig::default());
        assert!(out.contains(&Output::Dst(Dst {
            seq: read,
            seg: SegmentId::new(Tid(10), 0),
            kind: EdgeKind::Flag,
            wait: -1,
            paired: true,
            waited: false,
        })));
    }
}
