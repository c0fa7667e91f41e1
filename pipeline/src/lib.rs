//! # argus-pipeline — the event graph, incrementally
//!
//! Turns the merged, time-ordered event stream into the event graph: segments (vertices),
//! causal edges (strong / weak) and spinning vertices. Two implementations of one contract:
//!
//! - [`dataflow`]: a timely dataflow job with differential semantics (its joins are
//!   hand-written, not `differential-dataflow`'s: an arrangement keeps the whole history
//!   behind every join key, the joins of `dataflow/join_seq.rs` and `dataflow/join_fire.rs`
//!   keep only what can still join). Events are routed to keys (threads, per-CPU interrupt
//!   context, timers; see [`rules`]), exchanged by key over the workers, folded by a keyed
//!   operator that holds per-key state and emits differential updates (closed records once;
//!   the open tail retracted and re-inserted each epoch), then joined on event `seq` into
//!   edges. Output goes to one place (worker 0) as consolidated deltas.
//! - [`reference`](mod@reference): a plain batch computation over a prefix of the stream, the test oracle.
//!
//! Downstream of the dataflow, [`arranged`] keeps the graph it emits as `differential-dataflow`
//! collections: shared arrangements (segments by id and by thread, edges by either end,
//! spins) that queries read as of an epoch while the graph changes, and each hang's backward
//! slice maintained by an `iterate` over them, checked against [`arranged::reference`](mod@arranged::reference).
//!
//! The rules themselves (segment boundaries, edge kinds and strengths, culling) are in
//! [`rules`], the user's rules file in [`rulesfile`], and Table-2-style graph statistics in
//! [`stats`].
//!
//! The contract: after epoch *e* the accumulated dataflow output equals
//! `reference::compute(events of epochs 0..=e, watermark of e)`, whatever the number of
//! workers or processes.
//!
//! Caller responsibilities: feed events in `seq` order, batched into epochs whose watermark
//! is the time up to which the stream is complete (ingest's merger guarantees both). This
//! crate does no I/O and knows nothing of Parquet; results leave through channels that the
//! binary connects to `argus_sinks`.
//!
//! Non-goals: decoding (ingest), diagnosis (diagnose).
//!
//! ```
//! use argus_pipeline::{reference, rules::RulesConfig};
//! let graph = reference::compute(&[], argus_schema::Nanos(0), &RulesConfig::default());
//! assert!(graph.segments.is_empty());
//! ```
#![warn(missing_docs)]

pub mod arranged;
pub mod dataflow;
pub mod gaps;
pub mod reference;
pub mod rules;
pub mod rulesfile;
pub mod stats;

use argus_schema::{CausalEdge, Segment, Spin};
use rules::Counts;
use serde::{Deserialize, Serialize};

/// The event graph as sets of records (sorted).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Graph {
    /// Vertices.
    pub segments: Vec<Segment>,
    /// Causal edges.
    pub edges: Vec<CausalEdge>,
    /// Spinning vertices.
    pub spins: Vec<Spin>,
    /// What the rules split, pruned and culled (for [`stats::GraphStats`]).
    pub counts: Counts,
}

impl Graph {
    /// Sorts every table (the canonical form used for comparisons).
    pub fn sort(&mut self) {
        self.segments.sort();
        self.edges.sort();
        self.spins.sort();
    }
}
