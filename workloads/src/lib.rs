//! # argus-workloads — hangs with ground truth known by construction
//!
//! Every workload `argus workload NAME` runs, out of the product's own sources: the demo's
//! and the live tests' basic hangs, the causal patterns of the rule tests, the hang suite
//! (our own programs), the real-software suite (servers and runtimes we did not write, made
//! to hang honestly), and the fixtures of the stack, watchpoint, dispatch and fd-identity
//! tests. Each prints one JSON line on stdout saying who should be blamed; the tests compare
//! a diagnosis with it.
//!
//! | module | workloads | used by |
//! |---|---|---|
//! | [`basic`] | `chain`, `cpu`, `yield` (+ hidden `fd-pass`, `dispatch`) | `argus demo`, tests/live.rs, … |
//! | [`patterns`] | the causal patterns (pipes, locks, timers, stack-loop, …) | tests/graph_rules.rs |
//! | [`suite`] | the hang suite | tests/hang_suite.rs |
//! | [`real`] | the real-software suite (MariaDB, Redis, lighttpd, Go, Ruby, …) | tests/real_suite.rs |
//! | [`stackflag`] | stacks and watched flags | tests/stacks.rs, tests/diagnosis.rs |
//!
//! Adding a workload: write it in the module of its family, add its name and one-line
//! description to that module's table (what [`names`] lists and the unknown-name error
//! prints), and make it print its JSON truth line.

pub mod basic;
pub mod dispatchwork;
pub mod fdpass;
pub mod patterns;
pub mod real;
pub mod stackflag;
pub mod suite;

use anyhow::Result;

/// Runs the workload `name` for about `secs` seconds of hang.
pub fn run(name: &str, secs: f64) -> Result<()> {
    if suite::is_hang(name) {
        suite::run(name, secs)
    } else if real::is_hang(name) {
        real::run(name, secs)
    } else {
        match stackflag::run(name, secs) {
            Some(r) => r,
            None => basic::run(name, secs),
        }
    }
}

/// Every listed workload, `(name, what it does)`, family by family.
pub fn names() -> Vec<(&'static str, &'static str)> {
    basic::WORKLOADS
        .iter()
        .chain(patterns::PATTERNS)
        .chain(suite::HANGS)
        .chain(real::HANGS)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_listed_once() {
        let all = names();
        let mut seen = std::collections::BTreeSet::new();
        for (n, what) in &all {
            assert!(seen.insert(*n), "{n} listed twice");
            assert!(!what.is_empty(), "{n} has no description");
        }
        for n in ["chain", "cpu", "yield", "stack-loop"] {
            assert!(seen.contains(n), "{n}");
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_known_ones() {
        let e = run("no-such-workload", 0.1).expect_err("unknown");
        assert!(e.to_string().contains("chain"), "{e}");
    }
}
