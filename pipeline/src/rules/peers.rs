//! The message peer-set rule (ComputeGraph 1.d, `IPC_peer_set`).

use super::output::Src;
use argus_schema::{Nanos, SegmentId, Tid};
use serde::{Deserialize, Serialize};

/// The counters of the current segment at the entry of a message syscall, to split there
/// after the fact.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Mark {
    pub(super) ts: Nanos,
    pub(super) events: u32,
    pub(super) syscalls: u32,
    pub(super) seq_len: usize,
    pub(super) preemptions: u32,
    pub(super) yields: u32,
    pub(super) on_cpu_ns: u64,
    /// The run in progress at the mark (its start), and how much of it preceded the mark.
    pub(super) since: Option<Nanos>,
    pub(super) run_extra: u64,
}

/// A message syscall in flight.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct MsgOp {
    pub(super) nr: i32,
    pub(super) fd: u64,
    /// The connection it went through, as a peer.
    pub(super) peer: Peer,
    pub(super) seg: SegmentId,
    pub(super) mark: Mark,
    /// Endpoints produced inside it, held back until it returns.
    pub(super) srcs: Vec<Src>,
    /// Tasks it woke.
    pub(super) woke: Vec<Tid>,
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

/// How many connection descriptors and pending signals a thread remembers.
pub(super) const MAX_CONN_FDS: usize = 64;
pub(super) const MAX_PEERS: usize = 32;
