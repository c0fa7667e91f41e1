//! End-to-end tests of the `argus` binary on the real kernel: record → build → debug.
//!
//! Live tests need root and tracefs. Where the machine cannot trace they print one loud
//! `SKIP` line and pass, unless `ARGUS_REQUIRE_LIVE=1` (set by `.ci/run`), which turns the
//! skip into a failure.

mod always_on;
mod arranged_real;
mod bad_input;
mod build_flags;
mod cluster;
mod collector;
mod common;
mod conformance;
mod continuous;
mod demo;
mod diagnosis;
mod dig;
mod dispatch;
mod exact_real;
mod fds;
mod graph_rules;
mod hang_suite;
mod identity;
mod inspect;
mod kdebug;
mod latency_suite;
mod live;
mod live_equals_batch;
mod live_query;
mod lock_files;
mod lock_owners;
mod moment;
mod notebook;
mod oracle_real;
mod other_recorders;
mod real_suite;
mod session;
mod slow_requests;
mod stacks;
mod start_options;
