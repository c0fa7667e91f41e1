//! Argus's stages composed once: a recording, replayed (`argus build`) or live (`argus
//! start`), into the dataflow's configuration ([`setup`]), through ingest → pipeline →
//! sinks, and the graph it gives served to the diagnosis.
//!
//! ```text
//!  setup ─ the dataflow's configuration from the user's rules and the recordings (one place)
//!  build ─ trace directories or an import → the dataflow → one Parquet snapshot
//!  job   ─ the continuous job of `argus start` (Linux): the live ring → the dataflow →
//!          a snapshot every period and at each hang, the live graph and its query server
//!  collect ─ the one collector of the dataflow's output (build and job)
//!  live  ─ the query protocol of the job's socket, its needs answered from arrangements,
//!          and the client `argus debug DIR` uses
//!  diagnosis ─ what `argus debug`'s flags mean (shared with the query server)
//!  gap_rows, progress, memory, priority ─ error rows for lost-events gaps, the build's
//!          progress line, the allocator's settings, how the job's threads are scheduled
//! ```
//!
//! The binary (`src/cmd/`) turns flags into these configurations and calls them.

pub mod build;
mod collect;
pub mod diagnosis;
mod gap_rows;
#[cfg(target_os = "linux")]
pub mod job;
pub mod live;
pub mod memory;
pub mod priority;
mod progress;
pub mod setup;
