//! `argus demo`, live and from the bundled recording.

use crate::common::{live_or_skip, recording_lock, run};

fn check_demo_output(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("argus-hang-main"), "{stdout}");
    assert!(stdout.contains("LongWait"), "{stdout}");
    let root = stdout
        .lines()
        .find(|l| l.starts_with("Root cause"))
        .unwrap_or_else(|| panic!("no root cause line: {stdout}"));
    assert!(
        root.contains("sleep"),
        "the root cause is the sleep: {root}"
    );
}

#[test]
fn demo_from_the_bundled_recording() {
    let out = run(&["demo", "--bundled"]);
    check_demo_output(&out);
}

#[test]
fn demo_live() {
    if !live_or_skip("demo_live") {
        return;
    }
    let _g = recording_lock();
    let out = run(&["demo"]);
    check_demo_output(&out);
}
