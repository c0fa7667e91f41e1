//! The job's rules while it runs ([`LiveRules`]): what it learned from the recordings
//! (`setup::configure`), the fd identity its tracker writes as it comes
//! (`setup::LiveChannels`: message channels), and `--rules FILE` on top, re-read on
//! SIGHUP. Each change reaches the dataflow from the next epoch on
//! (`argus_pipeline::dataflow::RuleUpdates`: every stage switches at that epoch). A file that
//! does not parse leaves the rules as they were and says why.

use crate::setup::{apply_rules_file, LiveChannels};
use argus_ingest::tracedir::FileLine;
use argus_pipeline::rules::RulesConfig;
use argus_schema::Nanos;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGHUP, taken by [`LiveRules::hangup`].
static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::SeqCst);
}

/// The rules the job runs with, and what they are made of.
pub(crate) struct LiveRules {
    /// `--rules`.
    pub(crate) file: Option<PathBuf>,
    /// Learned from the recordings, without the file's.
    learned: RulesConfig,
    /// `learned` with the file's: what the dataflow runs now.
    current: RulesConfig,
    channels: LiveChannels,
    /// When the channels were last trimmed (event time).
    trimmed: Nanos,
}

/// How often (in event time) the channels forget what no event to come needs: each trim
/// costs a pass over them and a new copy of the rules for the dataflow.
const TRIM_EVERY: Nanos = Nanos(1_000_000_000);

impl LiveRules {
    /// Rules `learned` from the recordings, with `file` on top (its error names it).
    pub(crate) fn new(file: Option<PathBuf>, learned: RulesConfig) -> anyhow::Result<LiveRules> {
        let mut current = learned.clone();
        if let Some(f) = &file {
            apply_rules_file(&mut current, f)?;
        }
        Ok(LiveRules {
            file,
            learned,
            current,
            channels: LiveChannels::default(),
            trimmed: Nanos(0),
        })
    }

    /// Catches SIGHUP from now on (its default would end the job).
    pub(crate) fn catch_hangup() {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe;
        // SA_RESTART keeps the job's blocking calls from failing with EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int) = on_hangup;
            action.sa_sigaction = handler as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGHUP, &action, std::ptr::null_mut());
        }
    }

    /// Whether a SIGHUP came since the last call.
    pub(crate) fn hangup() -> bool {
        HANGUP.swap(false, Ordering::SeqCst)
    }

    /// The rules the dataflow runs now.
    pub(crate) fn current(&self) -> &RulesConfig {
        &self.current
    }

    /// Re-reads the file: the learned rules with it as it reads now. `None` without
    /// `--rules`; on an error the rules stay as they were.
    pub(crate) fn reread(&mut self) -> Option<anyhow::Result<()>> {
        let file = self.file.as_ref()?;
        let mut rules = self.learned.clone();
        Some(apply_rules_file(&mut rules, file).map(|()| self.current = rules))
    }

    /// Learns the fd identity `lines` (as written by the recorder's tracker), and forgets
    /// what no event at `now` or later needs (`LiveChannels::trim`, once a second); whether
    /// the rules changed.
    pub(crate) fn learn_files(&mut self, lines: Vec<FileLine>, now: Nanos) -> bool {
        let changes = self.channels.learn(lines);
        for c in &changes {
            c.apply(&mut self.learned.channels);
            c.apply(&mut self.current.channels);
        }
        let mut trimmed = false;
        if now.0 >= self.trimmed.0.saturating_add(TRIM_EVERY.0) {
            self.trimmed = now;
            let before = self.learned.channels.len();
            let forgot = self.channels.trim(
                now,
                &mut [&mut self.learned.channels, &mut self.current.channels],
            );
            trimmed = forgot > 0 || self.learned.channels.len() < before;
        }
        !changes.is_empty() || trimmed
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{Pid, Tid};

    #[test]
    fn a_reread_puts_the_file_on_the_learned_rules_and_a_bad_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.toml");
        std::fs::write(&file, "[[pool]]\ntids = [4243, 4244]\n").unwrap();
        let mut learned = RulesConfig::default();
        learned.kernel_threads.insert(Tid(7));
        let mut rules = LiveRules::new(Some(file.clone()), learned.clone()).unwrap();
        assert!(rules.current().user.same_pool(Tid(4243), Tid(4244)));
        assert!(rules.current().kernel_threads.contains(&Tid(7)));
        // Identity learned between re-reads stays through them.
        let pipe = FileLine::Fd {
            ts: 100,
            pid: 10,
            fd: 3,
            kind: "pipe".into(),
            ino: 7,
            peer: None,
            target: "pipe:[7]".into(),
            src: "syscall".into(),
        };
        assert!(rules.learn_files(vec![pipe], Nanos(0)));
        assert!(!rules.learn_files(Vec::new(), Nanos(0)));
        // A second read replaces the file's rules rather than adding to them.
        std::fs::write(&file, "[[pool]]\ntids = [1, 2]\n").unwrap();
        rules.reread().unwrap().unwrap();
        assert!(!rules.current().user.same_pool(Tid(4243), Tid(4244)));
        assert!(rules.current().user.same_pool(Tid(1), Tid(2)));
        assert!(rules
            .current()
            .channels
            .lookup(Pid(10), 3, Nanos(150))
            .is_some());
        std::fs::write(&file, "[[pool]\n").unwrap();
        let err = format!("{:#}", rules.reread().unwrap().unwrap_err());
        assert!(err.contains("rules.toml"), "{err}");
        assert!(rules.current().user.same_pool(Tid(1), Tid(2)));
        let mut none = LiveRules::new(None, learned).unwrap();
        assert!(none.reread().is_none());
    }
}
