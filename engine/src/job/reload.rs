//! `--rules FILE` re-read on SIGHUP: the job's rules become what it learned from the
//! recordings (`setup::configure`) plus the file as it reads now, from the next epoch on
//! (`argus_pipeline::dataflow::RuleUpdates`: every stage switches at that epoch). A file
//! that does not parse leaves the rules as they were and says why.

use argus_pipeline::rules::RulesConfig;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGHUP, taken by [`Reload::asked`].
static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::SeqCst);
}

/// What a re-read starts from.
pub(crate) struct Reload {
    /// `--rules`.
    pub(crate) file: Option<PathBuf>,
    /// The rules learned from the recordings, without the file's.
    pub(crate) learned: RulesConfig,
}

impl Reload {
    /// Catches SIGHUP from now on (its default would end the job).
    pub(crate) fn install(file: Option<PathBuf>, learned: RulesConfig) -> Reload {
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
        Reload { file, learned }
    }

    /// Whether a SIGHUP came since the last call.
    pub(crate) fn asked() -> bool {
        HANGUP.swap(false, Ordering::SeqCst)
    }

    /// The rules with the file as it reads now; `None` without `--rules`.
    pub(crate) fn read(&self) -> Option<anyhow::Result<RulesConfig>> {
        let file = self.file.as_ref()?;
        let mut rules = self.learned.clone();
        Some(crate::setup::apply_rules_file(&mut rules, file).map(|()| rules))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_reread_adds_the_file_to_the_learned_rules_and_a_bad_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.toml");
        let mut learned = RulesConfig::default();
        learned.kernel_threads.insert(argus_schema::Tid(7));
        let reload = Reload {
            file: Some(file.clone()),
            learned: learned.clone(),
        };
        std::fs::write(&file, "[[pool]]\ntids = [4243, 4244]\n").unwrap();
        let first = reload.read().unwrap().unwrap();
        assert!(first
            .user
            .same_pool(argus_schema::Tid(4243), argus_schema::Tid(4244)));
        assert!(first.kernel_threads.contains(&argus_schema::Tid(7)));
        // A second read replaces the file's rules rather than adding to them.
        std::fs::write(&file, "[[pool]]\ntids = [1, 2]\n").unwrap();
        let second = reload.read().unwrap().unwrap();
        assert!(!second
            .user
            .same_pool(argus_schema::Tid(4243), argus_schema::Tid(4244)));
        assert!(second
            .user
            .same_pool(argus_schema::Tid(1), argus_schema::Tid(2)));
        std::fs::write(&file, "[[pool]\n").unwrap();
        let err = format!("{:#}", reload.read().unwrap().unwrap_err());
        assert!(err.contains("rules.toml"), "{err}");
        let none = Reload {
            file: None,
            learned,
        };
        assert!(none.read().is_none());
    }
}
