//! Test support shared by every test binary of the workspace (`publish = false`): the
//! switches that turn a skip into a failure, and the checks behind them, once.
//!
//! - [`REQUIRE_LIVE`] (`ARGUS_REQUIRE_LIVE=1`, set by `.ci/run`): a test that needs to record
//!   the real kernel (root, tracefs) or a tool it drives (Graphviz, the real suite's servers,
//!   Python for the notebooks) fails instead of skipping.
//! - [`REQUIRE_REALTRACES`] (`ARGUS_REQUIRE_REALTRACES=1`, set by `.ci/run`): a test that reads
//!   `../shared/realtraces` fails instead of skipping when it is missing.
//!
//! Without the switch a test that cannot run prints one loud `SKIP <test>: <why>` line and
//! passes, so `cargo test` on a laptop without root still says what it did not check.
//!
//! Bad input made on the spot: [`zstd_rle_bomb`], a few bytes of zstd that decompress to as
//! many bytes as asked. macOS test vectors from Linux recordings: [`kdebug`].

#[cfg(unix)]
pub mod elsewhere;
pub mod kdebug;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The switch for tests that record the real kernel or drive installed tools.
pub const REQUIRE_LIVE: &str = "ARGUS_REQUIRE_LIVE";
/// The switch for tests that read `../shared/realtraces`.
pub const REQUIRE_REALTRACES: &str = "ARGUS_REQUIRE_REALTRACES";

/// Whether `switch` is set to `1`.
pub fn required(switch: &str) -> bool {
    std::env::var(switch).as_deref() == Ok("1")
}

/// `test` cannot run (`why`): panics when `switch` is set, else prints the SKIP line.
/// Returns `false`, so a caller can `return skip(…)` from a `bool` check.
pub fn skip(test: &str, why: &str, switch: &str) -> bool {
    if required(switch) {
        panic!("{test}: {why}, but {switch}=1");
    }
    eprintln!("SKIP {test}: {why}");
    false
}

/// Why this machine cannot record the kernel (not root, no tracefs), or `None`: the
/// product's own check ([`argus_ingest::linux::cannot_trace`]).
pub fn cannot_trace() -> Option<String> {
    argus_ingest::linux::cannot_trace().map(|why| format!("cannot trace: {why}"))
}

/// True when a live test can run here; otherwise skips or fails (see [`skip`]).
pub fn live_or_skip(test: &str) -> bool {
    match cannot_trace() {
        None => true,
        Some(why) => skip(test, &why, REQUIRE_LIVE),
    }
}

/// `../shared/realtraces` beside the repository, or `None` after skipping (see [`skip`]).
pub fn realtraces(test: &str) -> Option<PathBuf> {
    let dir = shared().join("realtraces");
    if dir.join("MANIFEST.txt").is_file() {
        Some(dir)
    } else {
        skip(
            test,
            &format!(
                "{} not found (clone the project beside ../shared)",
                dir.display()
            ),
            REQUIRE_REALTRACES,
        );
        None
    }
}

/// The running test's name (libtest names each test's thread after it), for SKIP lines.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// `../shared`, beside the repository.
pub fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// Recordings are system-wide: one at a time in a test binary keeps each workload's ground
/// truth clean (each binary has its own lock; `cargo test` runs binaries one after another).
pub fn recording_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A zstd frame of RLE blocks that decompresses to `decompressed` bytes of `byte` from 4
/// bytes per 128 KiB: a "zstd bomb", for tests that readers bound what they decompress
/// (issue 18). Frame: magic, no content size, 128 KiB window; each block a 3-byte header
/// (last-block bit, type 1 = RLE, size) and the repeated byte.
pub fn zstd_rle_bomb(decompressed: u64, byte: u8) -> Vec<u8> {
    const BLOCK: u64 = 128 << 10;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3];
    let mut left = decompressed;
    loop {
        let size = left.min(BLOCK);
        left -= size;
        let last = u32::from(left == 0);
        let header = last | 1 << 1 | (size as u32) << 3;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(byte);
        if left == 0 {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_without_the_switch_passes_and_with_it_fails() {
        assert!(!skip("t", "absent", "ARGUS_TESTKIT_NEVER_SET"));
        // Only this test reads this variable.
        std::env::set_var("ARGUS_TESTKIT_SET_FOR_THIS_TEST", "1");
        let r = std::panic::catch_unwind(|| skip("t", "absent", "ARGUS_TESTKIT_SET_FOR_THIS_TEST"));
        assert!(r.is_err(), "the switch turns the skip into a failure");
    }

    #[test]
    fn realtraces_are_found_beside_the_repository() {
        // Under ARGUS_REQUIRE_REALTRACES=1 (CI) a missing ../shared fails here.
        if let Some(rt) = realtraces("realtraces_are_found_beside_the_repository") {
            assert!(rt.join("MANIFEST.txt").is_file());
            assert!(rt.join("ftrace-text").is_dir(), "{}", rt.display());
        }
    }
}
