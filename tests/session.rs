//! The interactive `argus debug` session on a real recording (`argus workload chain`: the
//! main thread waits on a worker, which reads a pipe from a shell that runs `sleep`): from a
//! script (`--script`) and in a real terminal (tmux), it finds the hang, steps back twice
//! along the edges that caused it, marks the edge that ended the shell's wait wrong, and the
//! diagnosis names another root cause.

use crate::common::{argus, chain, live_or_skip, Recorded};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

/// Blank lines for the questions the first walk asks (each takes the default).
fn defaults_for_the_first_walk(rec: &Recorded) -> String {
    let (_, report) = crate::common::debug_json(&rec.snapshot, rec.pid);
    let n = report["questions"].as_array().map_or(0, |q| q.len());
    "\n".repeat(n)
}

/// The JSON reports a session printed (`json`), in order.
fn reports(out: &str) -> Vec<Value> {
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a json line parses"))
        .collect()
}

/// The deepest root cause's thread name.
fn deepest(report: &Value) -> String {
    report["root_causes"]
        .as_array()
        .and_then(|r| r.last())
        .and_then(|c| c["comm"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The threads of the vertices shown after each `back` (`vertex TID#SEQ: ...` lines).
fn stepped_to(out: &str) -> Vec<i32> {
    let mut tids = Vec::new();
    let mut after_back = false;
    for l in out.lines() {
        if l.starts_with("back along") {
            after_back = true;
        } else if after_back {
            if let Some(rest) = l.strip_prefix("vertex ") {
                let tid = rest.split('#').next().unwrap_or("");
                tids.push(tid.parse().expect("a tid"));
                after_back = false;
            }
        }
    }
    tids
}

const STEPS: &str = "json\nback\nback\nwrong d\njson\nquit\n";

/// What both tests check: sleep first; the two steps reach the worker, then the shell; once
/// the edge that ended the shell's wait is marked wrong, the shell is the root cause.
fn check(out: &str, rec: &Recorded) {
    let reports = reports(out);
    assert_eq!(reports.len(), 2, "{out}");
    assert_eq!(deepest(&reports[0]), "sleep", "{out}");
    let steps = stepped_to(out);
    let worker = rec.truth["worker_tid"].as_i64().expect("worker_tid") as i32;
    assert_eq!(steps.len(), 2, "{out}");
    assert_eq!(steps[0], worker, "{out}");
    let shell = &reports[0]["path"]
        .as_array()
        .expect("a path")
        .iter()
        .find(|p| p["comm"] == "sh")
        .expect("the shell on the path")["tid"];
    assert_eq!(Some(i64::from(steps[1])), shell.as_i64(), "{out}");
    assert_eq!(deepest(&reports[1]), "sh", "{out}");
}

#[test]
fn a_script_steps_back_twice_marks_an_edge_wrong_and_gets_another_root_cause() {
    if !live_or_skip("a_script_steps_back_twice_marks_an_edge_wrong_and_gets_another_root_cause") {
        return;
    }
    let rec = chain();
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("steps.txt");
    std::fs::write(&script, defaults_for_the_first_walk(rec) + STEPS).expect("script");
    let out = argus()
        .args(["debug", rec.snapshot.to_str().expect("utf-8")])
        .args(["--pid", &rec.pid.to_string(), "--script"])
        .arg(&script)
        .output()
        .expect("argus debug runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check(&text, rec);

    // A script line where a command belongs that is no command: exit 2 naming the line.
    std::fs::write(
        &script,
        defaults_for_the_first_walk(rec) + "hangs\nfrobnicate\n",
    )
    .expect("script");
    let out = argus()
        .args(["debug", rec.snapshot.to_str().expect("utf-8")])
        .args(["--pid", &rec.pid.to_string(), "--script"])
        .arg(&script)
        .output()
        .expect("argus debug runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let n = defaults_for_the_first_walk(rec).len() + 2;
    assert!(err.contains(&format!("steps.txt line {n}")), "{err}");
}

/// One tmux server of our own (its socket name), removed when dropped.
struct Tmux(String);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.0])
            .args(args)
            .output()
            .expect("tmux runs (it is installed on CI machines)")
    }

    /// The whole pane, wrapped lines joined.
    fn screen(&self) -> String {
        String::from_utf8_lossy(
            &self
                .cmd(&["capture-pane", "-p", "-J", "-S", "-", "-t", "s"])
                .stdout,
        )
        .into_owned()
    }

    /// Waits until the pane shows `what` more than `seen` times.
    fn wait_for(&self, what: &str, seen: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.screen();
            if s.matches(what).count() > seen {
                return s;
            }
            assert!(Instant::now() < deadline, "{what:?} did not appear:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, line: &str) {
        if !line.is_empty() {
            assert!(self
                .cmd(&["send-keys", "-t", "s", "-l", line])
                .status
                .success());
        }
        assert!(self
            .cmd(&["send-keys", "-t", "s", "Enter"])
            .status
            .success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

#[test]
fn a_session_in_a_terminal_steps_back_marks_an_edge_wrong_and_gets_another_root_cause() {
    if !live_or_skip(
        "a_session_in_a_terminal_steps_back_marks_an_edge_wrong_and_gets_another_root_cause",
    ) {
        return;
    }
    let rec = chain();
    let home = tempfile::tempdir().expect("tempdir");
    let tmux = Tmux(format!("argus-test-{}", std::process::id()));
    let argus_bin = env!("CARGO_BIN_EXE_argus");
    let command = format!(
        "{argus_bin} debug {} --pid {}; echo session-exit=$?; sleep 600",
        rec.snapshot.display(),
        rec.pid
    );
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "s",
        "-x",
        "250",
        "-y",
        "50",
        "-e",
        &format!("HOME={}", home.path().display()),
        &command,
    ]);
    assert!(started.status.success(), "{started:?}");
    // The first walk's questions, each answered with Enter (the default).
    let questions = defaults_for_the_first_walk(rec).len();
    for i in 0..questions {
        tmux.wait_for("answer [", i);
        tmux.keys("");
    }
    for (prompts, step) in STEPS.lines().enumerate() {
        tmux.wait_for("argus> ", prompts);
        tmux.keys(step);
    }
    let screen = tmux.wait_for("session-exit=", 0);
    assert!(screen.contains("session-exit=1"), "{screen}");
    // The pane shows the prompt before each command; the rest is the session's output.
    let out: String = screen
        .lines()
        .map(|l| l.strip_prefix("argus> ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    check(&out, rec);
    // The commands went into the history file.
    let history = std::fs::read_to_string(home.path().join(".local/state/argus/history"))
        .expect("the session's history is kept");
    assert!(history.contains("wrong d"), "{history}");
}
