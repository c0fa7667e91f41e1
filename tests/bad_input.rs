//! Bad input: every broken trace gives a clear error naming the file and the offset, exit
//! code 2, and no panic. Each case starts from a copy of a real recording.

use crate::common::{chain, live_or_skip, run};
use std::fs;
use std::path::{Path, PathBuf};

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("readdir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

/// A copy of the recorded chain trace, broken by `damage`; returns `argus build`'s stderr
/// after checking exit code 2.
fn build_broken(name: &str, damage: impl FnOnce(&Path)) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join(name);
    copy_dir(&chain().trace, &trace);
    damage(&trace);
    let out = run(&[
        "build",
        trace.to_str().expect("utf-8"),
        "-o",
        dir.path().join("snap").to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit code 2 for {name}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
    assert!(
        !dir.path().join("snap").exists(),
        "no snapshot is left behind by a failed build"
    );
    stderr
}

fn first_chunk(trace: &Path) -> PathBuf {
    trace.join("cpu0/000000.chunk.zst")
}

#[test]
fn truncated_chunk_names_file_and_offset() {
    if !live_or_skip("truncated_chunk_names_file_and_offset") {
        return;
    }
    let err = build_broken("truncated", |t| {
        let p = first_chunk(t);
        let bytes = fs::read(&p).expect("chunk");
        fs::write(&p, &bytes[..bytes.len() / 2]).expect("truncate");
    });
    assert!(
        err.contains("cpu0/000000.chunk.zst: truncated zstd stream after")
            && err.contains("decompressed bytes"),
        "{err}"
    );
}

#[test]
fn corrupt_page_names_file_and_offset() {
    if !live_or_skip("corrupt_page_names_file_and_offset") {
        return;
    }
    let err = build_broken("corrupt", |t| {
        let p = first_chunk(t);
        let mut raw = zstd::decode_all(&fs::read(&p).expect("chunk")[..]).expect("zstd");
        assert!(raw.len() >= 2 * 4096, "at least two pages recorded");
        // Page 1's commit word claims more data than a page holds.
        raw[4096 + 8..4096 + 16].copy_from_slice(&0x0000_0000_0000_ff00u64.to_le_bytes());
        fs::write(&p, zstd::encode_all(&raw[..], 1).expect("zstd")).expect("write");
    });
    assert!(
        err.contains("cpu0/000000.chunk.zst: offset 4104 (page 1)"),
        "the error names the file, offset and page: {err}"
    );
}

#[test]
fn garbage_chunk_is_refused() {
    if !live_or_skip("garbage_chunk_is_refused") {
        return;
    }
    let err = build_broken("garbage", |t| {
        fs::write(
            first_chunk(t),
            b"this is not zstd at all, just garbage bytes",
        )
        .expect("write");
    });
    assert!(err.contains("cpu0/000000.chunk.zst"), "{err}");
}

#[test]
fn missing_format_file_says_which() {
    if !live_or_skip("missing_format_file_says_which") {
        return;
    }
    let err = build_broken("noformat", |t| {
        fs::remove_file(t.join("formats/events/sched/sched_switch/format")).expect("rm");
    });
    assert!(
        err.contains("formats/events/sched/sched_switch/format: not found"),
        "{err}"
    );
}

#[test]
fn garbage_meta_names_the_file() {
    if !live_or_skip("garbage_meta_names_the_file") {
        return;
    }
    let err = build_broken("badmeta", |t| {
        fs::write(t.join("meta.json"), b"\x00\x01garbage{").expect("write");
    });
    assert!(err.contains("meta.json"), "{err}");
}

#[test]
fn not_a_trace_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&[
        "build",
        dir.path().join("nope").to_str().expect("utf-8"),
        "-o",
        dir.path().join("snap").to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn debug_of_a_missing_snapshot_fails_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(&["debug", dir.path().to_str().expect("utf-8"), "--pid", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("manifest.json"), "{err}");
}

/// A trace-cmd `trace.dat` cut short inside its event formats: `argus build` names the file
/// and an offset inside what is left, exit 2, no snapshot; the whole file builds.
#[test]
fn truncated_trace_dat_names_file_and_offset() {
    let Some(rt) = argus_testkit::realtraces(&argus_testkit::current_test()) else {
        return;
    };
    let whole = rt.join("trace-dat/trappy_trace_idle.trace.dat");
    let bytes = fs::read(&whole).expect("trace.dat");
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = dir.path().join("cut.trace.dat");
    fs::write(&cut, &bytes[..3000]).expect("write");
    crate::common::build_refuses_with_offset(&cut, &dir.path().join("snap"), 2999);
    let ok = run(&[
        "build",
        whole.to_str().expect("utf-8"),
        "-o",
        dir.path().join("whole").to_str().expect("utf-8"),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
