//! The answers files of `argus debug` (`diagnose/src/answerer.rs`, `diagnose/src/answers.rs`):
//! `--answers FILE` (one reply per line) and `--save-answers FILE` (JSON rules keyed by
//! question pattern), parsed; saved answers survive a write and a read unchanged.
#![no_main]

use argus_diagnose::{parse_reply, SavedAnswers, ScriptedOracle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        let _ = parse_reply(line.trim());
    }
    match ScriptedOracle::parse(&text) {
        Ok(oracle) => assert!(oracle.remaining() <= text.lines().count()),
        Err(e) => assert!(e.to_string().contains("line"), "{e}"),
    }
    if let Ok(saved) = SavedAnswers::parse(&text) {
        let again = SavedAnswers::parse(&saved.to_json()).expect("saved answers read back");
        assert_eq!(again, saved);
        let mut merged = SavedAnswers::default();
        merged.merge(&saved);
        assert!(merged.rules.len() <= saved.rules.len());
    }
});
