//! The verbs of `argus`, one module each (`src/main.rs` dispatches to them): `record`,
//! `build` (with its stacks table and cluster flags), `debug` (and `debug --follow` in
//! `follow`), `export`, `inspect`, `dig`, `start` (the continuous job), `demo`, and `bundle` (the demo's
//! packed recording).

pub mod build;
mod build_cluster;
pub mod bundle;
pub mod debug;
pub mod demo;
pub mod dig;
pub mod export;
pub mod follow;
pub mod inspect;
pub mod record;
#[cfg(target_os = "linux")]
pub mod start;
