//! The rules file of `argus build --rules` (`pipeline/src/rulesfile.rs`): TOML `[[split]]`,
//! `[[condvar]]`, `[[pool]]`, `[[pipe]]` and `[kernel]`, parsed and applied to a
//! configuration; every error names the file and a line of it.
#![no_main]

use argus_pipeline::rules::RulesConfig;
use argus_pipeline::rulesfile::{self, RulesFileError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match rulesfile::parse(text, "rules.toml") {
        Ok(file) => {
            let again = file.clone();
            let mut cfg = RulesConfig::default();
            file.apply(&mut cfg);
            assert_eq!(cfg.user.splits.len(), again.user.splits.len());
            assert_eq!(cfg.user.condvars.len(), again.user.condvars.len());
        }
        Err(e) => {
            let lines = text.lines().count().max(1);
            match &e {
                RulesFileError::Syntax { line, column, .. } => {
                    assert!(*line >= 1 && *line <= lines + 1 && *column >= 1, "{e}")
                }
                RulesFileError::Invalid { line, .. } => {
                    assert!(*line >= 1 && *line <= lines + 1, "{e}")
                }
                _ => {}
            }
            assert!(e.to_string().starts_with("rules.toml:"), "{e}");
        }
    }
});
