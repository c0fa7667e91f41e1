//! Diagnosis on hand-made event graphs: each scenario is the smallest set of segments and
//! edges that shows one rule of the walk. (The end-to-end tests on real traces live in the
//! workspace's integration tests.)
#![allow(clippy::unwrap_used)]

mod baseline;
mod blame;
mod builder;
mod fidelity;
mod findings;
mod graph;
mod locks;
mod scenarios;
mod slow;
mod windows;
