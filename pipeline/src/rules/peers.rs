//! The message peer-set rule (ComputeGraph line 1.d, `IPC_peer_set`; ARCHITECTURE.md §4.5):
//! each data-transfer syscall of a thread has a peer set (the connection, the tasks its send
//! woke, and for a receive that blocked, its waker); when two consecutive message
//! operations of a segment have disjoint peer sets, the segment is split at the entry of
//! the second one. After a readiness wait woken by a task, a first operation on a connection
//! known to lead to another task is split off too. See the [module docs](super) for the
//! full rule.
//!
//! The decision is taken when the syscall returns ([`Peers::returned`]); the split is placed
//! at its entry ([`Mark`]), and the endpoints produced inside it are held back until then
//! ([`MsgOp`]).

use super::output::{Output, Src};
use super::sysno::{message_op, nrs};
use argus_schema::{syscalls, EndCause, Event, EventKind, Nanos, Segment, SegmentId, Tid};
use serde::{Deserialize, Serialize};

/// How many connection descriptors a thread remembers.
const MAX_CONN_FDS: usize = 64;
/// How many peers a segment's peer set holds (and tasks one send is known to wake).
pub(super) const MAX_PEERS: usize = 32;

/// The counters of the current segment at the entry of a message syscall, to split there
/// after the fact.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Mark {
    pub(super) ts: Nanos,
    events: u32,
    syscalls: u32,
    seq_len: usize,
    preemptions: u32,
    yields: u32,
    on_cpu_ns: u64,
    /// The run in progress at the mark (its start), and how much of it preceded the mark.
    since: Option<Nanos>,
    run_extra: u64,
}

impl Mark {
    /// The mark of `cur` at `ts`, the thread running since `running_since`.
    pub(super) fn at(cur: &Segment, running_since: Option<Nanos>, ts: Nanos) -> Mark {
        Mark {
            ts,
            events: cur.events,
            syscalls: cur.syscalls,
            seq_len: cur.syscall_seq.len(),
            preemptions: cur.preemptions,
            yields: cur.yields,
            on_cpu_ns: cur.on_cpu_ns,
            since: running_since,
            run_extra: running_since.map_or(0, |s| s.until(ts)),
        }
    }

    /// Whether the thread's run in progress (since `running_since`) is the one the mark was
    /// taken in.
    pub(super) fn same_run(&self, running_since: Option<Nanos>) -> bool {
        self.since.is_some() && running_since == self.since
    }

    /// The part of `cur` before the mark, closed there.
    pub(super) fn head(&self, cur: &Segment) -> Segment {
        let mut old = cur.clone();
        old.end_ns = self.ts;
        old.end = EndCause::HandlerDone;
        old.events = self.events;
        old.syscalls = self.syscalls;
        old.syscall_seq.truncate(self.seq_len);
        old.preemptions = self.preemptions;
        old.yields = self.yields;
        old.on_cpu_ns = self.on_cpu_ns + self.run_extra;
        old
    }

    /// Gives `c`, the segment opened at the mark, the rest of `cur` from the mark on: `nr` is
    /// the message syscall it starts with, `same_run` whether the run the mark was taken in
    /// goes on ([`Mark::same_run`]).
    pub(super) fn tail(&self, cur: &Segment, nr: i32, same_run: bool, c: &mut Segment) {
        c.end_ns = cur.end_ns;
        c.events = cur.events.saturating_sub(self.events);
        c.syscalls = cur.syscalls.saturating_sub(self.syscalls);
        let mut seq: Vec<i32> = cur.syscall_seq.get(self.seq_len..).unwrap_or(&[]).to_vec();
        if seq.first() != Some(&nr) {
            seq.insert(0, nr);
            seq.truncate(Segment::MAX_SYSCALLS);
        }
        c.syscall_seq = seq;
        c.preemptions = cur.preemptions.saturating_sub(self.preemptions);
        c.yields = cur.yields.saturating_sub(self.yields);
        c.on_cpu_ns = cur.on_cpu_ns.saturating_sub(self.on_cpu_ns);
        if !same_run {
            // The run that straddled the mark was already added to `cur`.
            c.on_cpu_ns = c.on_cpu_ns.saturating_sub(self.run_extra);
        }
    }
}

/// A message syscall in flight.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct MsgOp {
    pub(super) nr: i32,
    fd: u64,
    /// The connection it went through, as a peer.
    peer: Peer,
    pub(super) seg: SegmentId,
    pub(super) mark: Mark,
    /// Endpoints produced inside it, held back until it returns.
    pub(super) srcs: Vec<Src>,
    /// Tasks it woke.
    woke: Vec<Tid>,
}

impl MsgOp {
    /// Syscall `nr` on descriptor `fd` entered at `mark` in segment `seg`, through the
    /// connection `conn` when known
    /// ([`RulesConfig::message_channel`](super::RulesConfig::message_channel)).
    pub(super) fn new(nr: i32, fd: u64, conn: Option<u64>, seg: SegmentId, mark: Mark) -> MsgOp {
        MsgOp {
            nr,
            fd,
            peer: conn.map_or(Peer::Fd(fd), Peer::Chan),
            seg,
            mark,
            srcs: Vec::new(),
            woke: Vec::new(),
        }
    }

    /// The segment was split at the mark: the endpoints produced in it belong to `new`.
    pub(super) fn moved_to(&mut self, new: SegmentId) {
        for s in self.srcs.iter_mut().filter(|s| s.seg == self.seg) {
            s.seg = new;
        }
    }

    /// Releases the endpoints held back.
    pub(super) fn flush(self, out: &mut Vec<Output>) {
        out.extend(self.srcs.into_iter().map(Output::Src));
    }
}

/// A member of a message peer set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Peer {
    /// A descriptor whose connection is unknown, by number.
    Fd(u64),
    /// A connection ([`RulesConfig::message_channel`](super::RulesConfig::message_channel)).
    Chan(u64),
    /// A descriptor number the thread closed since (it may come back as another
    /// connection): no later operation shares it.
    Closed,
    Task(Tid),
}

/// The peer-set part of a [`ThreadState`](super::ThreadState).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Peers {
    /// Message peer set of the current segment.
    peers: Vec<Peer>,
    /// Whether the current segment has done a message operation yet.
    messaged: bool,
    /// The task whose wake-up started the current segment.
    woken_by: Option<Tid>,
    /// The task whose wake-up ended the readiness wait (`epoll_wait`, `poll`, `select`)
    /// that started the current segment, until its first message operation.
    #[serde(default)]
    ready_waker: Option<Tid>,
    /// Connections known to lead to one task: a send through them woke that task (most
    /// recent last, at most [`MAX_CONN_FDS`]).
    #[serde(default)]
    peer_tasks: Vec<(Peer, Tid)>,
    /// Descriptors known to be connections.
    conn_fds: Vec<u64>,
    /// The message syscall in flight.
    msg: Option<MsgOp>,
}

impl Peers {
    /// A new segment starts: its peer set is empty.
    pub(super) fn open(&mut self) {
        self.peers.clear();
        self.messaged = false;
        self.woken_by = None;
        self.ready_waker = None;
    }

    /// The new segment starts with a wake-up by `waker` that ended a wait in syscall `wait`.
    pub(super) fn woken(&mut self, waker: Option<Tid>, wait: i32) {
        // The waker is a peer of the receive it ended (not of a readiness
        // wait, which may report other connections first).
        self.woken_by = waker.filter(|_| message_op(wait) == Some(false));
        self.ready_waker = waker.filter(|_| syscalls::is_poll(wait));
    }

    /// An endpoint the thread produced (`ev` its event): held back while a message syscall
    /// is in flight and the thread is still in the segment it entered it in, else emitted.
    ///
    /// Only a split at the syscall's entry changes a held endpoint ([`MsgOp::moved_to`]),
    /// and there is none once the thread has left that segment ([`Peers::returned`] with
    /// `same` false): an endpoint of a later segment is final at once, and so are the ones
    /// held before it. (A thread whose records stop inside a message syscall, e.g. a thread
    /// of the recording job hidden from tracing but still seen waking others, would
    /// otherwise hold every endpoint it makes for ever.)
    pub(super) fn hold(&mut self, ev: &Event, src: Src, out: &mut Vec<Output>) {
        let Some(m) = self.msg.as_mut() else {
            out.push(Output::Src(src));
            return;
        };
        if let EventKind::Waking { target } = ev.kind {
            if m.woke.len() < MAX_PEERS {
                m.woke.push(target);
            }
        }
        if src.seg == m.seg {
            m.srcs.push(src);
        } else {
            out.extend(m.srcs.drain(..).map(Output::Src));
            out.push(Output::Src(src));
        }
    }

    /// The entry of syscall `nr` with `args[0]` = `fd`: a message syscall still in flight
    /// never returned (lost record), and a `close` ends what the descriptor stood for.
    pub(super) fn syscall(&mut self, nr: i32, fd: u64, out: &mut Vec<Output>) {
        if let Some(m) = self.msg.take() {
            // The previous message syscall never returned (lost record).
            m.flush(out);
        }
        if syscalls::class(nr) == nrs().close {
            self.conn_fds.retain(|f| *f != fd);
            // The number may come back as another connection: it no longer stands
            // for this one in the peer set.
            for p in self.peers.iter_mut().filter(|p| **p == Peer::Fd(fd)) {
                *p = Peer::Closed;
            }
            self.peer_tasks.retain(|(p, _)| *p != Peer::Fd(fd));
        }
    }

    /// A message syscall entered.
    pub(super) fn begin(&mut self, op: MsgOp) {
        self.msg = Some(op);
    }

    /// The message syscall in flight, taken (it returned, or the thread exits).
    pub(super) fn take(&mut self) -> Option<MsgOp> {
        self.msg.take()
    }

    /// The peer-set rule when the message syscall `m` returns `ret`; `same`: the thread is
    /// still in the segment it entered in. Returns the peer set of a new segment when the
    /// current one must be split at the entry ([`Peers::restart`] once split).
    pub(super) fn returned(&mut self, m: &MsgOp, ret: i64, same: bool) -> Option<Vec<Peer>> {
        let mut peer: Vec<Peer> = vec![m.peer];
        peer.extend(m.woke.iter().map(|t| Peer::Task(*t)));
        if same && !self.messaged {
            if let Some(w) = self.woken_by {
                peer.push(Peer::Task(w));
            }
        }
        let evidence = peer.iter().any(|p| matches!(p, Peer::Task(_)));
        let known = self.conn_fds.contains(&m.fd);
        if evidence && !known {
            if self.conn_fds.len() >= MAX_CONN_FDS {
                self.conn_fds.remove(0);
            }
            self.conn_fds.push(m.fd);
        }
        if ret > 0 {
            if let [t] = m.woke[..] {
                // This connection leads to `t` (most often known already, as the latest).
                if self.peer_tasks.last() != Some(&(m.peer, t)) {
                    self.peer_tasks.retain(|(p, _)| *p != m.peer);
                    if self.peer_tasks.len() >= MAX_CONN_FDS {
                        self.peer_tasks.remove(0);
                    }
                    self.peer_tasks.push((m.peer, t));
                }
            }
        }
        // A readiness wait woken by one task may return several ready connections and the
        // loop may serve another one first: when this first operation's connection is known
        // to lead to another task, the wake-up's part of the segment ends here (the waker's
        // own request is served further on, after a split of its own).
        let ready_other = same
            && !self.messaged
            && self
                .ready_waker
                .is_some_and(|w| self.peer_tasks.iter().any(|(p, t)| *p == m.peer && *t != w));
        if ret > 0 && (evidence || known) {
            let disjoint = !self.peers.is_empty() && !peer.iter().any(|p| self.peers.contains(p));
            if same && (disjoint || ready_other) {
                return Some(peer);
            }
            for p in peer {
                if !self.peers.contains(&p) && self.peers.len() < MAX_PEERS {
                    self.peers.push(p);
                }
            }
            self.messaged = true;
        }
        None
    }

    /// The segment was split at the entry of the message syscall that returned: the new
    /// segment's peer set is `peer`.
    pub(super) fn restart(&mut self, peer: Vec<Peer>) {
        self.peers = peer;
        self.messaged = true;
    }

    /// The endpoints of the message syscall in flight, as they are now.
    pub(super) fn mutable(&self, out: &mut Vec<Output>) {
        if let Some(m) = &self.msg {
            out.extend(m.srcs.iter().cloned().map(Output::Src));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{Pid, SegmentKind, StartCause};

    fn op(conn: u64, woke: &[i32]) -> MsgOp {
        let seg = SegmentId::new(Tid(10), 0);
        let cur = Segment::starting(seg, Pid(10), SegmentKind::Task, Nanos(1), StartCause::Woken);
        let mut m = MsgOp::new(1, conn, Some(conn), seg, Mark::at(&cur, None, Nanos(2)));
        m.woke = woke.iter().map(|t| Tid(*t)).collect();
        m
    }

    #[test]
    fn disjoint_consecutive_peer_sets_split_the_segment() {
        let mut p = Peers::default();
        // First operation of the segment: nothing to be disjoint from.
        assert_eq!(p.returned(&op(1, &[20]), 8, true), None);
        assert_eq!(p.peers, [Peer::Chan(1), Peer::Task(Tid(20))]);
        // The same client again, then another connection that woke nobody but is known.
        assert_eq!(p.returned(&op(1, &[20]), 8, true), None);
        // A failed or empty transfer decides nothing.
        assert_eq!(p.returned(&op(2, &[30]), 0, true), None);
        // Another client: split, and the new segment's peer set is that client's.
        let split = p.returned(&op(2, &[30]), 8, true);
        assert_eq!(split, Some(vec![Peer::Chan(2), Peer::Task(Tid(30))]));
        // Not the segment it entered in any more: nothing to split.
        assert_eq!(p.returned(&op(3, &[40]), 8, false), None);
    }

    #[test]
    fn endpoints_inside_a_message_syscall_wait_for_its_return() {
        let mut p = Peers::default();
        let src = Src {
            seq: 7,
            seg: SegmentId::new(Tid(10), 0),
            ts: Nanos(3),
            syscall: 1,
            interrupt: false,
            exiting: false,
            condvar: false,
        };
        let waking = Event {
            ts: Nanos(3),
            seq: 7,
            cpu: argus_schema::Cpu(0),
            pid: Pid(10),
            tid: Tid(10),
            ctx: argus_schema::Context::Task,
            kind: EventKind::Waking { target: Tid(20) },
        };
        let mut out = Vec::new();
        p.hold(&waking, src.clone(), &mut out);
        assert_eq!(out, [Output::Src(src.clone())], "none in flight");
        out.clear();
        p.begin(op(1, &[]));
        p.hold(&waking, src.clone(), &mut out);
        assert_eq!(out, []);
        let mut m = p.take().expect("in flight");
        assert_eq!(m.woke, [Tid(20)]);
        let new = SegmentId::new(Tid(10), 1);
        m.moved_to(new);
        m.flush(&mut out);
        assert_eq!(out, [Output::Src(Src { seg: new, ..src })]);
    }

    #[test]
    fn endpoints_of_a_later_segment_are_not_held() {
        let mut p = Peers::default();
        let entered = SegmentId::new(Tid(10), 0);
        let src = |seq, seg| Src {
            seq,
            seg,
            ts: Nanos(seq),
            syscall: 45,
            interrupt: false,
            exiting: false,
            condvar: false,
        };
        let waking = |seq, target| Event {
            ts: Nanos(seq),
            seq,
            cpu: argus_schema::Cpu(0),
            pid: Pid(10),
            tid: Tid(10),
            ctx: argus_schema::Context::Task,
            kind: EventKind::Waking {
                target: Tid(target),
            },
        };
        let mut out = Vec::new();
        p.begin(op(1, &[]));
        p.hold(&waking(3, 20), src(3, entered), &mut out);
        p.hold(&waking(4, 21), src(4, entered), &mut out);
        assert_eq!(out, []);
        // The thread blocked inside the syscall and was woken: a segment of its own, which
        // no split at the entry can touch; what was held is final too.
        let later = SegmentId::new(Tid(10), 1);
        p.hold(&waking(5, 22), src(5, later), &mut out);
        assert_eq!(
            out,
            [
                Output::Src(src(3, entered)),
                Output::Src(src(4, entered)),
                Output::Src(src(5, later)),
            ]
        );
        // The tasks it woke still count in its peer set when it returns.
        let m = p.take().expect("in flight");
        assert_eq!(m.woke, [Tid(20), Tid(21), Tid(22)]);
        assert!(m.srcs.is_empty());
    }
}
