//! Live queries: what `argus start` serves on `DIR/argus.sock` and how `argus debug DIR`
//! asks it (issue 16 parts 3–4; the protocol is docs/query-protocol.md).
//!
//! ```text
//!  argus debug DIR --pid P                          argus start -o DIR
//!   client.rs ── fetch {needs} ──► argus.sock ──► job/serve.rs (a thread per client)
//!     │ rounds (argus_diagnose::partial)               │ GraphRequest as of an epoch
//!     │ on partial graphs, its own oracle              ▼
//!     ▼                                            job/live_graph.rs: the oldest
//!   the report, as from a snapshot                 generation's arrangements (fetch.rs)
//! ```
//!
//! - [`protocol`]: the request and response lines, their parsing and error codes.
//! - [`fetch`]: needs answered from the arrangements (also used by the tests and
//!   `benches/live_query.rs`).
//! - [`client`]: the socket's client side, for `argus debug`.
//!
//! A diagnosis over the socket is the diagnosis of the whole live graph as of one epoch
//! (`argus_diagnose::partial` explains why the parts suffice), which is what a snapshot of
//! that epoch holds: same segments, edges, spins, threads and trace end, and the markers and
//! data-flag hits of the retained window (a build's events table). What a build has and the
//! live graph has not: call stacks, which a live diagnosis goes without.

pub mod client;
// The job's half of the protocol serves `argus start`, Linux-only.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub mod fetch;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub mod protocol;

use argus_diagnose::{Graph, GraphInput, Need, Whole};
use argus_schema::Tid;

/// The socket's name in an `argus start` directory.
pub const SOCKET: &str = "argus.sock";

/// The needs that seed the diagnosis of the thread a `pid` / `tid` / `comm` names (as
/// `argus debug` resolves them), given the whole tables: the thread and its spins' slices
/// ([`fetch::seed`]). Nothing when no thread is named (the rounds find what they need).
pub fn seed_for(
    whole: &Whole,
    pid: Option<i32>,
    tid: Option<i32>,
    comm: Option<&str>,
) -> Vec<Need> {
    let tid = match (pid, tid, comm) {
        (_, Some(t), _) => Tid(t),
        (Some(p), None, _) => Tid(p),
        (None, None, Some(name)) => {
            // Resolving a name reads the threads and spins only.
            let Ok(g) = Graph::new(GraphInput {
                threads: whole.threads.clone(),
                spins: whole.spins.clone(),
                ..GraphInput::default()
            }) else {
                return Vec::new();
            };
            match argus_diagnose::target_by_comm(&g, name) {
                Some(t) => t.thread(),
                None => return Vec::new(),
            }
        }
        (None, None, None) => return Vec::new(),
    };
    fetch::seed(tid, &whole.spins)
}
