//! The dataflow's configuration from the user's flags and the recordings it runs over: the one
//! place where rules are set up, for `argus build` (trace directories and imports, every
//! process of a cluster alike) and `argus start` (the previous run's ring and the live one).
//!
//! - [`user_rules`]: the threshold and the rules file (`--rules`, `docs/rules.md`;
//!   [`apply_rules_file`], which `argus start` calls again on SIGHUP).
//! - [`configure`]: what each recording adds, from its [`Recording`]: kernel delegate and
//!   maintenance threads from its thread table, maintenance callbacks from its kallsyms,
//!   message channels from its fd identity, and its lost-events ranges as gaps (no edge is
//!   made across one).

use anyhow::{Context, Result};
use argus_ingest::import::Imported;
use argus_ingest::kallsyms::Kallsyms;
use argus_ingest::replay::TraceReader;
use argus_ingest::tracedir::ProcEntry;
use argus_pipeline::dataflow::DataflowConfig;
use argus_pipeline::rules::{ChannelEnd, ChannelMap, RulesConfig};
use argus_schema::{Nanos, Tid};
use std::path::Path;

/// The rules the user asked for: the spinning-vertex threshold and, with `rules_file`, the
/// boundaries and edges it declares ([`apply_rules_file`]).
pub fn user_rules(threshold_ns: u64, rules_file: Option<&Path>) -> Result<RulesConfig> {
    let mut rules = RulesConfig {
        spin_threshold_ns: threshold_ns,
        ..RulesConfig::default()
    };
    if let Some(file) = rules_file {
        apply_rules_file(&mut rules, file)?;
    }
    Ok(rules)
}

/// Adds what the rules file `file` declares (`docs/rules.md`) to `rules`: at the start of a
/// build or a job, and on each re-read of `argus start` (SIGHUP) to the rules the job had
/// learned without it. An error names the file (and the line and column).
pub fn apply_rules_file(rules: &mut RulesConfig, file: &Path) -> Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading rules {}", file.display()))?;
    argus_pipeline::rulesfile::parse(&text, &file.display().to_string())?.apply(rules);
    Ok(())
}

/// A recording the dataflow runs over, as far as its configuration goes.
pub enum Recording<'a> {
    /// A trace directory written by `argus record` (or an earlier `argus start`'s ring).
    Trace(&'a TraceReader),
    /// Another tool's recording (`argus build FILE`).
    Import(&'a Imported),
    /// The ring `argus start` is recording now: what its recorder wrote when it started
    /// (the `/proc` table, kallsyms). Lost-events gaps reach the rules as they happen
    /// (the merge adds them to the shared gap set).
    Live {
        /// The live trace's `/proc` table at its start.
        procs: &'a [ProcEntry],
        /// Its kallsyms, when the recorder could read them.
        kallsyms: Option<&'a Kallsyms>,
    },
}

/// `base` with what `recordings` tell the rules (module docs). Every process of a cluster
/// calls this with the same recordings and so runs the same rules.
pub fn configure(base: &DataflowConfig, recordings: &[Recording<'_>]) -> Result<DataflowConfig> {
    let mut cfg = base.clone();
    let rules = &mut cfg.rules;
    for rec in recordings {
        match rec {
            Recording::Trace(r) => {
                rules.classify_threads(
                    r.procs()
                        .iter()
                        .map(|p| (Tid(p.tid), p.comm.as_str(), p.kernel)),
                );
                if let Some(k) = r.kallsyms() {
                    rules.cull_symbols(k.iter());
                }
                // fd identity: pipes, sockets and eventfds become channels for message edges.
                let files = r
                    .files()
                    .with_context(|| format!("reading the fd identity of {}", r.dir().display()))?;
                rules.channels.merge(ChannelMap::from_identity(
                    files.entries().map(|(pid, fd, ts, f)| {
                        // An unknown identity ends the previous one.
                        let end = f.map_or(ChannelEnd::default(), |f| {
                            ChannelEnd::of_file(f.kind.as_str(), f.inode, f.peer, &f.target)
                        });
                        (pid, fd, ts, end)
                    }),
                    files.forks(),
                ));
                for ranges in r.meta_ext().lost_ranges.values() {
                    for g in ranges {
                        rules.add_gap(Nanos(g.from_ns), Nanos(g.to_ns));
                    }
                }
            }
            Recording::Import(imp) => {
                rules.classify_threads(
                    imp.threads()
                        .iter()
                        .map(|t| (t.tid, t.comm.as_str(), t.kernel)),
                );
                if let Some(k) = imp.kallsyms() {
                    rules.cull_symbols(k.iter());
                }
                for &(_, from, to, _) in &imp.summary().lost_ranges {
                    rules.add_gap(Nanos(from), Nanos(to));
                }
            }
            Recording::Live { procs, kallsyms } => {
                rules.classify_threads(
                    procs
                        .iter()
                        .map(|p| (Tid(p.tid), p.comm.as_str(), p.kernel)),
                );
                if let Some(k) = kallsyms {
                    rules.cull_symbols(k.iter());
                }
            }
        }
    }
    Ok(cfg)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn proc(tid: i32, comm: &str, kernel: bool) -> ProcEntry {
        ProcEntry {
            pid: tid,
            tid,
            ppid: 2,
            comm: comm.to_string(),
            kernel,
        }
    }

    #[test]
    fn a_live_recording_classifies_its_kernel_threads_and_culls_maintenance_callbacks() {
        let procs = [
            proc(10, "kworker/0:1", true),
            proc(11, "rcu_preempt", true),
            proc(12, "kworker/0:1", false),
            proc(13, "bash", false),
        ];
        let ks = Kallsyms::parse(
            "ffffffff81000000 T tick_sched_timer\nffffffff81000100 T my_driver_fn\n",
        );
        let base = DataflowConfig::default();
        let cfg = configure(
            &base,
            &[Recording::Live {
                procs: &procs,
                kallsyms: Some(&ks),
            }],
        )
        .unwrap();
        assert!(cfg.rules.kernel_threads.contains(&Tid(10)));
        assert!(cfg.rules.cull_threads.contains(&Tid(11)));
        // A user thread named like a kernel one is not a kernel thread.
        assert!(!cfg.rules.kernel_threads.contains(&Tid(12)));
        assert!(!cfg.rules.kernel_threads.contains(&Tid(13)));
        assert_eq!(
            cfg.rules.cull_functions.iter().copied().collect::<Vec<_>>(),
            vec![0xffffffff81000000]
        );
        // The base is left as it was.
        assert!(base.rules.kernel_threads.is_empty());
    }

    #[test]
    fn the_rules_file_is_applied_and_a_bad_one_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.toml");
        std::fs::write(&file, "[[pool]]\ntids = [4243, 4244]\n").unwrap();
        let with = user_rules(3_000_000_000, Some(&file));
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[[condvar]\n").unwrap();
        let err = format!("{:#}", user_rules(1, Some(&bad)).unwrap_err());
        assert!(err.contains("bad.toml"), "{err}");
        let with = with.unwrap();
        assert_eq!(with.spin_threshold_ns, 3_000_000_000);
        assert_ne!(with.user, RulesConfig::default().user);
        let missing = format!(
            "{:#}",
            user_rules(1, Some(&dir.path().join("none.toml"))).unwrap_err()
        );
        assert!(missing.contains("none.toml"), "{missing}");
    }
}
