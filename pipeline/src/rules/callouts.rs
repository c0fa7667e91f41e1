//! Callouts (ComputeGraph 1.c, `Dispatch_invoke`): each kernel work item and each
//! user-space dispatch is a segment of its own.

use argus_schema::SegmentId;
use serde::{Deserialize, Serialize};

/// Marker text that starts a user-space dispatch callout in the writing thread
/// (`argus:dispatch-begin NAME`; written by applications to `trace_marker`, or made by the
/// collector from a uprobe on the dispatch function, `argus record --dispatch`).
pub const DISPATCH_BEGIN: &str = "argus:dispatch-begin";
/// Marker text that ends the innermost dispatch callout of the same `NAME`.
pub const DISPATCH_END: &str = "argus:dispatch-end";

/// The `function` id of a dispatch callout's [`SegmentKind::WorkItem`](argus_schema::SegmentKind::WorkItem) (its `work` is 0):
/// the callout's name (trimmed) hashed with FNV-1a, so callouts of different functions
/// differ and a begin matches its end.
pub fn dispatch_id(name: &str) -> u64 {
    name.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A work item being run (a callout), innermost last.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Callout {
    pub(super) work: u64,
    pub(super) function: u64,
    pub(super) culled: bool,
    /// The segment of its latest part.
    pub(super) seg: SegmentId,
}
