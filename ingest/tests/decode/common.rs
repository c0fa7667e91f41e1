//! Shared helpers.

use argus_ingest::decode::{parse_page, RawRecord};
use argus_ingest::format::{FormatSet, HeaderPage};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `../shared/realtraces`, or `None` (after printing the SKIP line) when absent.
pub fn realtraces() -> Option<PathBuf> {
    let p = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/realtraces"
    ));
    if p.is_dir() {
        Some(p.to_path_buf())
    } else {
        println!("SKIP: ../shared/realtraces not found");
        None
    }
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
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 && Path::new("/sys/kernel/tracing/instances").is_dir() {
        return true;
    }
    if std::env::var("ARGUS_REQUIRE_LIVE").as_deref() == Ok("1") {
        panic!("ARGUS_REQUIRE_LIVE=1 but this machine cannot trace");
    }
    eprintln!("SKIP (cannot trace: not root or no tracefs at /sys/kernel/tracing)");
    false
}

/// Recordings are system-wide: one at a time in this test binary.
pub fn live_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
