//! The importers' entry point for the text targets: [`argus_ingest::import::open`] on a file
//! of the scratch directory (the text and HTML readers have no public entry point of their
//! own), checked the way `argus build` uses what it returns.

use crate::scratch::Scratch;
use argus_ingest::import;

/// Writes `bytes` to `NAME` in `scratch`, imports it and walks everything the import gives.
pub fn import_file(scratch: &Scratch, name: &str, bytes: &[u8]) {
    scratch.reset();
    let path = scratch.write(name, bytes);
    let imported = match import::open(&path) {
        Ok(i) => i,
        Err(e) => {
            assert!(e.file().is_some(), "{e}: names the file");
            return;
        }
    };
    let mut seq = 0;
    let mut errors = 0;
    for ev in imported.events() {
        match ev {
            Ok(ev) => {
                assert_eq!(ev.seq, seq, "imported events are numbered in order");
                seq += 1;
            }
            Err(e) => {
                assert!(e.file().is_some(), "{e}: names the file");
                errors += 1;
            }
        }
    }
    assert_eq!(errors, imported.errors().len());
    let _ = imported.threads();
    let _ = imported.kind_counts();
    let _ = imported.summary();
}
