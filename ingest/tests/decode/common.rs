//! Shared helpers.

use argus_ingest::format::{FormatSet, HeaderPage};
use argus_ingest::page::{parse_page, RawRecord};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `../shared/realtraces`, or `None` after the SKIP line (a failure under
/// `ARGUS_REQUIRE_REALTRACES=1`).
pub fn realtraces() -> Option<PathBuf> {
    argus_testkit::realtraces(&argus_testkit::current_test())
}

/// Untars `tarball` (gzip) into a fresh temporary directory with the `tar` command.
pub fn untar(tarball: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("tar")
        .arg("xzf")
        .arg(tarball)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("the tar command runs");
    assert!(st.success(), "tar xzf {} failed", tarball.display());
    dir
}

/// Every record of every page of `data` (a concatenation of pages), with the page index.
pub fn records<'a>(
    layout: &HeaderPage,
    data: &'a [u8],
    page_size: usize,
) -> Vec<(usize, RawRecord<'a>)> {
    assert_eq!(data.len() % page_size, 0);
    let mut out = Vec::new();
    for (i, page) in data.chunks(page_size).enumerate() {
        for r in parse_page(layout, page).unwrap() {
            out.push((i, r.unwrap_or_else(|e| panic!("page {i}: {e}"))));
        }
    }
    out
}

/// Count of records per event name (`#ID` when the id has no format).
pub fn count_by_name(
    formats: &FormatSet,
    recs: &[(usize, RawRecord<'_>)],
) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (_, r) in recs {
        let id = r.id().unwrap();
        let name = formats.get(id).map_or(format!("#{id}"), |e| e.name.clone());
        *m.entry(name).or_default() += 1;
    }
    m
}

/// Whether this machine can record (root, tracefs instances). Otherwise prints a loud SKIP
/// line, or panics when `ARGUS_REQUIRE_LIVE=1`.
pub fn can_trace() -> bool {
    argus_testkit::live_or_skip(&argus_testkit::current_test())
}

pub use argus_testkit::recording_lock as live_lock;
