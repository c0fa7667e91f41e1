//! User-defined boundaries (ComputeGraph line 1.e, "other heuristics"): the `[[split]]`
//! rules of the rules file ([`crate::rulesfile`]) end a segment at the entry of a syscall or
//! at an application marker. The papers: "easy for a user to incrementally extend with
//! custom segment boundaries and edges". (The user's edges, condition variables and worker
//! pools, are strengths of wake-up edges: [`wake_edge`](super::wake_edge).)

use super::config::{RulesConfig, SplitAt};
use argus_schema::{syscalls, Pid};

/// Whether a rule splits the segments of process `pid` at the entry of syscall `nr` (a rule
/// naming a Linux syscall splits at the macOS calls of its class too).
pub(super) fn at_syscall(cfg: &RulesConfig, pid: Pid, nr: i32) -> bool {
    splits(
        cfg,
        pid,
        |at| matches!(at, SplitAt::Syscall(s) if syscalls::names(*s, nr)),
    )
}

/// Whether a rule splits the segments of process `pid` at the marker `text`.
pub(super) fn at_marker(cfg: &RulesConfig, pid: Pid, text: &str) -> bool {
    splits(
        cfg,
        pid,
        |at| matches!(at, SplitAt::Marker(p) if text.starts_with(p.as_str())),
    )
}

fn splits(cfg: &RulesConfig, pid: Pid, at: impl Fn(&SplitAt) -> bool) -> bool {
    cfg.user
        .splits
        .iter()
        .any(|s| s.pid.is_none_or(|p| p == pid) && at(&s.at))
}

#[cfg(test)]
mod tests {
    use super::super::SplitRule;
    use super::*;

    #[test]
    fn splits_apply_to_their_process_or_to_all() {
        let mut cfg = RulesConfig::default();
        cfg.user.splits = vec![
            SplitRule {
                pid: Some(Pid(100)),
                at: SplitAt::Syscall(7),
            },
            SplitRule {
                pid: None,
                at: SplitAt::Marker("frame".into()),
            },
        ];
        assert!(at_syscall(&cfg, Pid(100), 7));
        assert!(!at_syscall(&cfg, Pid(200), 7));
        assert!(!at_syscall(&cfg, Pid(100), 8));
        assert!(at_marker(&cfg, Pid(200), "frame 12"));
        assert!(!at_marker(&cfg, Pid(200), "idle"));
    }

    /// A rule naming a Linux syscall splits at the macOS calls of its class; one naming a
    /// macOS call at that call only.
    #[test]
    fn a_split_at_a_linux_syscall_splits_at_macos_calls_of_its_class() {
        let n = |s: &str| syscalls::number(s).expect("known");
        let rule = |name: &str| {
            let mut cfg = RulesConfig::default();
            cfg.user.splits = vec![SplitRule {
                pid: None,
                at: SplitAt::Syscall(n(name)),
            }];
            cfg
        };
        let (cvwait, ulock) = (n("psynch_cvwait"), n("ulock_wait"));
        assert!(at_syscall(&rule("futex"), Pid(1), cvwait));
        assert!(at_syscall(&rule("futex"), Pid(1), ulock));
        assert!(at_syscall(&rule("psynch_cvwait"), Pid(1), cvwait));
        assert!(!at_syscall(&rule("psynch_cvwait"), Pid(1), ulock));
        assert!(!at_syscall(&rule("psynch_cvwait"), Pid(1), n("futex")));
        assert!(!at_syscall(&rule("read"), Pid(1), cvwait));
    }
}
