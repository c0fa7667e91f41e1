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
//! | [`basic`] | `chain`, `cpu`, `yield` (+ hidden `fd-pass`, `dispatch`, `group-commit`) | `argus demo`, tests/live.rs, … |
//! | [`patterns`] | the causal patterns (pipes, locks, timers, stack-loop, …) | tests/graph_rules.rs |
//! | [`suite`] | the hang suite | tests/hang_suite.rs |
//! | [`real`] | the real-software suite (MariaDB, Redis, lighttpd, Go, Ruby, …) | tests/real_suite.rs |
//! | [`stackflag`] | stacks and watched flags | tests/stacks.rs, tests/diagnosis.rs |
//!
//! Adding a workload: write its function in the module of its family and add one row to
//! that module's table ([`Workload::plain`], [`Workload::rounds`], [`Workload::suite`] or
//! [`Workload::real`]: the family's setup around the function); the row is the only place
//! its name is written. Make it print its JSON truth line.

// The workloads make their hangs with Linux system calls (futexes, epoll, timerfd,
// SO_PEERCRED, prctl): elsewhere the crate is empty and `argus workload` says so.
#![cfg(target_os = "linux")]

pub mod basic;
pub mod dispatchwork;
pub mod fdpass;
pub mod groupcommit;
pub mod patterns;
pub mod real;
pub mod stackflag;
pub mod suite;

use anyhow::{bail, Result};
use std::path::Path;

/// How a workload runs: its function, with its family's setup around it.
#[derive(Clone, Copy)]
pub enum Runner {
    /// Runs for about `secs` seconds and prints its truth line.
    Plain(fn(f64) -> Result<()>),
    /// A causal pattern run for a number of rounds (about 100 ms each).
    Rounds(fn(usize) -> Result<()>),
    /// A hang-suite program, given its name, length and a scratch directory.
    Suite(fn(&suite::Hang<'_>) -> Result<()>),
    /// Real software run in a scratch directory; returns its truth (the name is added).
    Real(fn(&Path, f64) -> Result<serde_json::Value>),
}

/// One workload: a row of its family's table.
#[derive(Clone, Copy)]
pub struct Workload {
    /// The name `argus workload NAME` takes.
    pub name: &'static str,
    /// One line on what happens.
    pub about: &'static str,
    /// Whether [`names`] lists it (the test fixtures are run by name only).
    pub listed: bool,
    /// How it runs.
    pub runner: Runner,
}

impl Workload {
    /// A listed workload that runs for `secs` seconds.
    pub const fn plain(name: &'static str, about: &'static str, f: fn(f64) -> Result<()>) -> Self {
        Workload {
            name,
            about,
            listed: true,
            runner: Runner::Plain(f),
        }
    }

    /// A test fixture: run by name, not listed.
    pub const fn hidden(name: &'static str, about: &'static str, f: fn(f64) -> Result<()>) -> Self {
        Workload {
            name,
            about,
            listed: false,
            runner: Runner::Plain(f),
        }
    }

    /// A causal pattern of [`patterns`].
    pub const fn rounds(
        name: &'static str,
        about: &'static str,
        f: fn(usize) -> Result<()>,
    ) -> Self {
        Workload {
            name,
            about,
            listed: true,
            runner: Runner::Rounds(f),
        }
    }

    /// A hang of the [`suite`].
    pub const fn suite(
        name: &'static str,
        about: &'static str,
        f: fn(&suite::Hang<'_>) -> Result<()>,
    ) -> Self {
        Workload {
            name,
            about,
            listed: true,
            runner: Runner::Suite(f),
        }
    }

    /// A hang of [`real`] software.
    pub const fn real(
        name: &'static str,
        about: &'static str,
        f: fn(&Path, f64) -> Result<serde_json::Value>,
    ) -> Self {
        Workload {
            name,
            about,
            listed: true,
            runner: Runner::Real(f),
        }
    }
}

/// Every family's table.
pub const FAMILIES: &[&[Workload]] = &[
    basic::WORKLOADS,
    patterns::PATTERNS,
    suite::HANGS,
    real::HANGS,
    stackflag::WORKLOADS,
];

/// The workload called `name`.
pub fn find(name: &str) -> Option<&'static Workload> {
    FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .find(|w| w.name == name)
}

/// Runs the workload `name` for about `secs` seconds of hang.
pub fn run(name: &str, secs: f64) -> Result<()> {
    let Some(w) = find(name) else {
        bail!(
            "unknown workload {name:?}; known: {}",
            names()
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    match w.runner {
        Runner::Plain(f) => f(secs),
        Runner::Rounds(f) => f(patterns::rounds(secs)),
        Runner::Suite(f) => suite::run(w.name, secs, f),
        Runner::Real(f) => real::run(w.name, secs, f),
    }
}

/// Every listed workload, `(name, what it does)`, family by family.
pub fn names() -> Vec<(&'static str, &'static str)> {
    FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .filter(|w| w.listed)
        .map(|w| (w.name, w.about))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for w in FAMILIES.iter().flat_map(|f| f.iter()) {
            assert!(seen.insert(w.name), "{} has two rows", w.name);
            assert!(!w.about.is_empty(), "{} has no description", w.name);
        }
        for n in [
            "fd-pass",
            "dispatch",
            "group-commit",
            "stacks",
            "flag",
            "flag-watch",
        ] {
            assert!(find(n).is_some(), "{n} runs by name");
        }
        assert!(names()
            .iter()
            .all(|(n, _)| find(n).is_some_and(|w| w.listed)));
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
