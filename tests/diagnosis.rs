//! Diagnosis through the CLI on hand-made snapshots (deterministic, no recording): a scripted
//! interactive session on stdin that changes the root cause, saved answers reused on a second
//! hang, application markers, event-loop idleness, the Perfetto and DOT exports (also on a
//! live recording when the machine can trace).

use crate::common::{live_or_skip, run};
use argus_schema::{
    syscalls, CausalEdge, Context, Cpu, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, Segment,
    SegmentId, SegmentKind, StartCause, Strength, ThreadInfo, Tid,
};
use argus_sinks::{
    write_snapshot, EventStack, SnapshotData, SnapshotInfo, SnapshotWriter, StackFrame,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const MS: u64 = 1_000_000;

fn nr(name: &str) -> i32 {
    syscalls::number(name).expect("known syscall")
}

#[derive(Default)]
struct World {
    segments: Vec<Segment>,
    edges: Vec<CausalEdge>,
    threads: Vec<ThreadInfo>,
    events: Vec<Event>,
    stacks: Vec<EventStack>,
    seq: HashMap<i32, u32>,
}

impl World {
    fn thread(&mut self, tid: i32, pid: i32, comm: &str, process: &str) {
        self.threads.push(ThreadInfo {
            tid: Tid(tid),
            pid: Pid(pid),
            comm: comm.into(),
            process: process.into(),
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: false,
        });
    }

    /// A segment: run `[start, wait)`, then blocked in `sys` until `end` (ms; `None`: open).
    #[allow(clippy::too_many_arguments)]
    fn seg(
        &mut self,
        tid: i32,
        start: u64,
        wait: Option<u64>,
        end: Option<u64>,
        sys: &str,
        on_cpu: u64,
        ret: Option<i64>,
    ) -> SegmentId {
        let n = self.seq.entry(tid).or_insert(0);
        let id = SegmentId::new(Tid(tid), *n);
        *n += 1;
        let pid = self
            .threads
            .iter()
            .find(|t| t.tid == Tid(tid))
            .map_or(Pid(tid), |t| t.pid);
        let kind = if tid < 0 {
            SegmentKind::Timer {
                timer: 0xfeed,
                function: 0xbeef,
            }
        } else {
            SegmentKind::Task
        };
        self.segments.push(Segment {
            id,
            tid: Tid(tid),
            pid,
            kind,
            start_ns: Nanos(start * MS),
            end_ns: Nanos(end.unwrap_or(wait.unwrap_or(start)) * MS),
            start: if id.seq() == 0 {
                StartCause::FirstSeen
            } else {
                StartCause::Woken
            },
            end: if end.is_some() {
                EndCause::Woken
            } else {
                EndCause::Open
            },
            wait_start_ns: wait.map(|w| Nanos(w * MS)),
            wait_state: if wait.is_some() { b'S' } else { 0 },
            wait_syscall: if sys.is_empty() { -1 } else { nr(sys) },
            wait_ret: ret,
            wait_object: None,
            on_cpu_ns: on_cpu * MS,
            preemptions: 0,
            yields: 0,
            syscalls: 3,
            events: 10,
            syscall_seq: if sys.is_empty() {
                vec![]
            } else {
                vec![0, nr(sys)]
            },
        });
        id
    }

    fn edge(
        &mut self,
        src: SegmentId,
        dst: SegmentId,
        kind: EdgeKind,
        strength: Strength,
        ts: u64,
    ) {
        self.edges.push(CausalEdge {
            src,
            dst,
            kind,
            strength,
            ts: Nanos(ts * MS),
            src_syscall: if src.tid().is_task() { nr("futex") } else { -1 },
        });
    }

    fn marker(&mut self, tid: i32, ts: u64, text: &str) {
        let seq = self.events.len() as u64;
        self.events.push(Event {
            ts: Nanos(ts * MS),
            seq,
            cpu: Cpu(0),
            pid: Pid(tid),
            tid: Tid(tid),
            ctx: Context::Task,
            kind: EventKind::Marker { text: text.into() },
        });
    }

    fn write(mut self, dir: &Path) {
        let end = self
            .segments
            .iter()
            .map(|s| s.end_ns)
            .max()
            .unwrap_or_default();
        if self.events.is_empty() {
            self.events.push(Event {
                ts: end,
                seq: 0,
                cpu: Cpu(0),
                pid: Pid(1),
                tid: Tid(1),
                ctx: Context::Task,
                kind: EventKind::Exec,
            });
        }
        let info = SnapshotInfo {
            trace_end_ns: Some(end),
            ..SnapshotInfo::default()
        };
        if !self.stacks.is_empty() {
            let mut w = SnapshotWriter::new(dir).expect("snapshot writer");
            w.write_events(&self.events).expect("events");
            w.write_segments(&self.segments).expect("segments");
            w.write_edges(&self.edges).expect("edges");
            w.write_threads(&self.threads).expect("threads");
            w.write_stacks(&self.stacks).expect("stacks");
            w.finish(info).expect("snapshot written");
            return;
        }
        let data = SnapshotData {
            info,
            events: self.events,
            segments: self.segments,
            edges: self.edges,
            spins: Vec::new(),
            threads: self.threads,
            errors: Vec::new(),
        };
        write_snapshot(dir, &data).expect("snapshot written");
    }
}

/// `app` (pid `base`) waits 3 s in futex; two wake-ups end it: `alpha`, strong, busy on CPU
/// all along, and `beta`, weak, after sleeping 3 s on its own timer.
fn two_wakers(dir: &Path, base: i32) {
    let (main, alpha, beta) = (base, base + 1, base + 2);
    let mut w = World::default();
    w.thread(main, base, "app", "app");
    w.thread(alpha, base, "alpha", "app");
    w.thread(beta, base, "beta", "app");
    w.seg(main, 0, Some(10), Some(3010), "futex", 5, Some(0));
    let m1 = w.seg(main, 3010, None, None, "", 50, None);
    let a0 = w.seg(alpha, 0, Some(3009), Some(3300), "futex", 2950, Some(0));
    let b0 = w.seg(beta, 0, Some(5), Some(3005), "clock_nanosleep", 1, Some(0));
    let b1 = w.seg(beta, 3005, Some(3010), Some(3300), "futex", 1, Some(0));
    let t0 = w.seg(-1, 3005, None, Some(3005), "", 0, None);
    w.edge(b0, t0, EdgeKind::Timer, Strength::Strong, 5);
    w.edge(t0, b1, EdgeKind::Wakeup, Strength::Strong, 3005);
    w.edge(a0, m1, EdgeKind::Wakeup, Strength::Strong, 3009);
    w.edge(b1, m1, EdgeKind::Wakeup, Strength::Weak, 3010);
    w.write(dir);
}

/// A stack taken at `ts` ms by `tid`: user functions (innermost first) of `/usr/bin/app`
/// called through libc's `syscall`, and the innermost kernel frame.
fn stack(w: &mut World, tid: i32, ts: u64, user: &[&str], kernel: &str) {
    let mut frames = vec![StackFrame {
        kernel: true,
        depth: 0,
        ip: 0xffff_ffff_8100_0000,
        symbol: Some(kernel.into()),
        offset: Some(0x10),
        object: Some("[kernel]".into()),
    }];
    let libc = std::iter::once(("syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6"));
    for (d, (sym, obj)) in libc
        .chain(user.iter().map(|u| (*u, "/usr/bin/app")))
        .enumerate()
    {
        frames.push(StackFrame {
            kernel: false,
            depth: d as u16,
            ip: 0x5555_0000 + d as u64 * 0x40,
            symbol: Some(sym.into()),
            offset: Some(4),
            object: Some(obj.into()),
        });
    }
    let event_seq = w.stacks.len() as u64 + 1000;
    w.stacks.push(EventStack {
        event_seq,
        tid,
        ts: ts * MS,
        frames,
    });
}

/// `two_wakers`, recorded with stacks: the main thread blocks in `app_wait_for_result`,
/// alpha wakes it from `alpha_publish_result`, beta from `beta_notify`.
#[test]
fn questions_and_report_steps_show_the_stacks_of_the_syscalls_that_blocked_or_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    let (main, alpha, beta) = (20, 21, 22);
    let mut w = World::default();
    w.thread(main, 20, "app", "app");
    w.thread(alpha, 20, "alpha", "app");
    w.thread(beta, 20, "beta", "app");
    w.seg(main, 0, Some(10), Some(3010), "futex", 5, Some(0));
    let m1 = w.seg(main, 3010, None, None, "", 50, None);
    let a0 = w.seg(alpha, 0, Some(3009), Some(3300), "futex", 2950, Some(0));
    let b0 = w.seg(beta, 0, Some(5), Some(3005), "clock_nanosleep", 1, Some(0));
    let b1 = w.seg(beta, 3005, Some(3010), Some(3300), "futex", 1, Some(0));
    let t0 = w.seg(-1, 3005, None, Some(3005), "", 0, None);
    w.edge(b0, t0, EdgeKind::Timer, Strength::Strong, 5);
    w.edge(t0, b1, EdgeKind::Wakeup, Strength::Strong, 3005);
    w.edge(a0, m1, EdgeKind::Wakeup, Strength::Strong, 3009);
    w.edge(b1, m1, EdgeKind::Wakeup, Strength::Weak, 3010);
    stack(
        &mut w,
        main,
        9,
        &["app_wait_for_result", "main"],
        "futex_wait",
    );
    stack(&mut w, alpha, 3008, &["alpha_publish_result"], "futex_wake");
    stack(&mut w, beta, 3009, &["beta_notify"], "futex_wake");
    // A stack of the main thread after it blocked is not the blocking one.
    stack(&mut w, main, 3011, &["app_after_the_wait"], "ksys_write");
    w.write(&snap);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_argus"));
    cmd.arg("debug")
        .arg(&snap)
        .args(["--pid", "20", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("argus runs");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("argus finishes");
    assert_eq!(out.status.code(), Some(1));
    let asked = String::from_utf8_lossy(&out.stderr);
    // The question shows where the main thread blocked, and each choice where it acted.
    assert!(
        asked.contains(
            "(blocked at: syscall (libc.so.6) ← app_wait_for_result (app) ← main (app) · \
             kernel: futex_wait)"
        ),
        "{asked}"
    );
    assert!(
        asked.contains("at: syscall (libc.so.6) ← alpha_publish_result (app) · kernel: futex_wake"),
        "{asked}"
    );
    assert!(asked.contains("beta_notify (app)"), "{asked}");
    assert!(!asked.contains("app_after_the_wait"), "{asked}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let syms = |v: &Value| -> Vec<String> {
        v["stack"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["symbol"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let path = r["path"].as_array().expect("path");
    assert_eq!(
        syms(&path[0]),
        ["syscall", "app_wait_for_result", "main", "futex_wait"]
    );
    assert_eq!(path[0]["stack"][3]["kernel"], true);
    assert_eq!(path[0]["stack"][1]["object"], "/usr/bin/app");
    let alpha_step = path.iter().find(|p| p["comm"] == "alpha").expect("alpha");
    assert_eq!(
        syms(alpha_step),
        ["syscall", "alpha_publish_result", "futex_wake"]
    );
    let q = &r["questions"][0];
    assert_eq!(syms(q)[1], "app_wait_for_result");
    let choice_syms: Vec<Vec<String>> = q["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .map(syms)
        .collect();
    assert!(choice_syms
        .iter()
        .any(|s| s.contains(&"beta_notify".to_string())));
    // Without --json the report prints the stacks under the steps.
    let out = run(&[
        "debug",
        snap.to_str().expect("utf-8"),
        "--pid",
        "20",
        "--auto",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("blocked at: syscall (libc.so.6) ← app_wait_for_result (app)")
            && text.contains("at: syscall (libc.so.6) ← alpha_publish_result (app)"),
        "{text}"
    );
}

/// Runs `argus debug` with `stdin` piped in (the interactive mode), `--json`.
fn debug_stdin(snapshot: &Path, pid: i32, stdin: &str, extra: &[&str]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_argus"));
    cmd.arg("debug")
        .arg(snapshot)
        .args(["--pid", &pid.to_string(), "--json"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("argus runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("answers written");
    let out = child.wait_with_output().expect("argus finishes");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a hang: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn root_comm(r: &Value) -> String {
    r["root_causes"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|c| c["comm"].as_str())
        .unwrap_or("")
        .to_string()
}

fn asked(r: &Value) -> usize {
    r["questions"]
        .as_array()
        .map_or(0, |q| q.iter().filter(|q| q["by_rule"] != true).count())
}

#[test]
fn a_scripted_terminal_session_picking_the_other_edge_changes_the_root_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    two_wakers(&snap, 10);
    // The default (and answer 1) follows the strong edge from the busy thread.
    let r1 = debug_stdin(&snap, 10, "\n", &[]);
    assert_eq!(root_comm(&r1), "alpha", "{r1:#}");
    assert_eq!(r1["root_causes"][0]["class"], "LongRunning");
    let q = &r1["questions"][0];
    assert_eq!(q["choices"].as_array().map(Vec::len), Some(2), "{q:#}");
    assert_eq!(q["defaulted"], true);
    // Answering 2 on the terminal picks the weak edge from beta, which slept.
    let r2 = debug_stdin(&snap, 10, "2\n", &[]);
    assert_eq!(root_comm(&r2), "beta", "{r2:#}");
    assert_eq!(
        r2["root_causes"]
            .as_array()
            .and_then(|a| a.last())
            .map(|c| c["class"].clone()),
        Some(Value::from("Sleep"))
    );
    assert_eq!(r2["questions"][0]["answer"], 1);
    assert_eq!(r2["questions"][0]["defaulted"], false);
    // The ranked paths hold both alternatives, best first.
    let ranked = r1["ranked_paths"].as_array().expect("ranked paths");
    assert!(ranked.len() >= 2, "{ranked:#?}");
    let scores: Vec<f64> = ranked.iter().filter_map(|p| p["score"].as_f64()).collect();
    assert!(scores.windows(2).all(|w| w[0] <= w[1]), "{scores:?}");
    assert_eq!(ranked[0]["steps"][1]["comm"], "alpha");
}

#[test]
fn saved_answers_answer_the_same_pattern_on_the_next_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (s1, s2) = (dir.path().join("one"), dir.path().join("two"));
    two_wakers(&s1, 10);
    two_wakers(&s2, 210);
    let rules = dir.path().join("answers.json");
    let rules_s = rules.to_str().expect("utf-8");
    let first = debug_stdin(&s1, 10, "2\n", &["--save-answers", rules_s]);
    assert_eq!(root_comm(&first), "beta");
    let asked_first = asked(&first);
    assert!(asked_first >= 1);
    let saved: Value =
        serde_json::from_slice(&std::fs::read(&rules).expect("rules written")).expect("JSON");
    let rule = &saved["rules"][0];
    assert_eq!(rule["pick"]["comm"], "beta", "{saved:#}");
    assert!(
        rule["pattern"]
            .as_str()
            .is_some_and(|p| p.contains("app") && p.contains("futex")),
        "keyed by names and syscalls, not ids: {saved:#}"
    );
    // A second hang of the same program (other pids), nobody at the terminal: the rule
    // answers, the outcome matches the first session, and fewer questions are asked.
    let second = debug_stdin(&s2, 210, "", &["--save-answers", rules_s]);
    assert_eq!(root_comm(&second), "beta", "{second:#}");
    assert!(asked(&second) < asked_first, "{second:#}");
    assert!(second["questions"]
        .as_array()
        .is_some_and(|q| q.iter().any(|q| q["by_rule"] == true)));
    // Without the rules the same snapshot takes the default edge.
    let plain = debug_stdin(&s2, 210, "", &[]);
    assert_eq!(root_comm(&plain), "alpha");
}

#[test]
fn an_application_marker_makes_a_hang_below_the_threshold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    let mut w = World::default();
    w.thread(20, 20, "editor", "editor");
    w.thread(21, 20, "saver", "editor");
    w.seg(20, 0, Some(100), Some(1600), "futex", 50, Some(0));
    let m1 = w.seg(20, 1600, None, None, "", 5, None);
    let s0 = w.seg(21, 0, Some(1599), Some(1700), "futex", 1500, Some(0));
    w.edge(s0, m1, EdgeKind::Wakeup, Strength::Strong, 1599);
    w.marker(20, 100, "argus:hang-begin");
    w.marker(20, 1600, "argus:hang-end");
    w.write(&snap);
    let out = run(&[
        "debug",
        snap.to_str().expect("utf-8"),
        "--pid",
        "20",
        "--auto",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["hang"]["source"], "marker", "{r:#}");
    assert_eq!(r["hang"]["class"], "LongWait");
    assert!(r["hang"]["evidence"][0]
        .as_str()
        .is_some_and(|e| e.contains("argus:hang-begin")));
    assert_eq!(root_comm(&r), "saver");
    // Without markers a 1.5 s wait is below the 2 s threshold: no hang.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let snap2 = dir2.path().join("snap");
    let mut w = World::default();
    w.thread(20, 20, "editor", "editor");
    w.seg(20, 0, Some(100), Some(1600), "futex", 50, Some(0));
    w.seg(20, 1600, None, None, "", 5, None);
    w.write(&snap2);
    let out = run(&[
        "debug",
        snap2.to_str().expect("utf-8"),
        "--pid",
        "20",
        "--auto",
    ]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn an_idle_event_loop_is_not_a_hang_but_a_long_wait_elsewhere_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let build = |with_futex: bool, dir: &Path| {
        let mut w = World::default();
        w.thread(30, 30, "gui", "gui");
        w.thread(31, 30, "helper", "gui");
        let mut t = 0;
        for _ in 0..10 {
            w.seg(30, t, Some(t + 2), Some(t + 20), "poll", 2, Some(1));
            t += 20;
        }
        // Idle for 5 s in its event-loop wait.
        w.seg(30, t, Some(t + 1), Some(t + 5000), "poll", 1, Some(1));
        t += 5000;
        if with_futex {
            w.seg(30, t, Some(t + 1), Some(t + 3001), "futex", 1, Some(0));
            let next = w.seg(30, t + 3001, None, None, "", 1, None);
            let h = w.seg(
                31,
                0,
                Some(t + 3000),
                Some(t + 3100),
                "futex",
                t + 2900,
                Some(0),
            );
            w.edge(h, next, EdgeKind::Wakeup, Strength::Strong, t + 3000);
        } else {
            w.seg(30, t, None, None, "", 1, None);
        }
        w.write(dir);
    };
    let idle = dir.path().join("idle");
    build(false, &idle);
    let out = run(&[
        "debug",
        idle.to_str().expect("utf-8"),
        "--pid",
        "30",
        "--auto",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("event-loop wait"), "{text}");
    let busy = dir.path().join("busy");
    build(true, &busy);
    let out = run(&[
        "debug",
        busy.to_str().expect("utf-8"),
        "--pid",
        "30",
        "--auto",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["hang"]["wait_syscall"], "futex", "{r:#}");
    assert_eq!(r["hang"]["loop_wait"], "poll");
    assert!(r["hang"]["evidence"]
        .as_array()
        .is_some_and(|e| e.iter().any(|e| e
            .as_str()
            .is_some_and(|s| s.contains("not the thread's event-loop wait")))));
    assert_eq!(root_comm(&r), "helper");
}

/// Checks Chrome trace-event JSON: required fields per phase, matching flow ids, and thread
/// metadata for every track used. Returns (slices, flows, hang marks).
pub fn check_trace_events(v: &Value) -> (usize, usize, usize) {
    let evs = v["traceEvents"].as_array().expect("traceEvents array");
    let mut named: HashSet<(i64, i64)> = HashSet::new();
    let mut processes: HashSet<i64> = HashSet::new();
    for e in evs.iter().filter(|e| e["ph"] == "M") {
        let key = (
            e["pid"].as_i64().expect("pid"),
            e["tid"].as_i64().expect("tid"),
        );
        match e["name"].as_str() {
            Some("thread_name") => {
                named.insert(key);
            }
            Some("process_name") => {
                processes.insert(key.0);
            }
            other => panic!("unexpected metadata {other:?}"),
        }
        assert!(e["args"]["name"].is_string(), "{e}");
    }
    let (mut slices, mut hang) = (0, 0);
    let mut starts: HashMap<u64, &Value> = HashMap::new();
    let mut finishes: HashMap<u64, &Value> = HashMap::new();
    for e in evs {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "name: {e}");
        if ph == "M" {
            continue;
        }
        let ts = e["ts"].as_f64().expect("ts");
        assert!(ts >= 0.0, "{e}");
        let key = (
            e["pid"].as_i64().expect("pid"),
            e["tid"].as_i64().expect("tid"),
        );
        assert!(
            named.contains(&key),
            "track {key:?} has thread_name metadata: {e}"
        );
        assert!(processes.contains(&key.0), "process {} is named", key.0);
        match ph {
            "X" => {
                assert!(e["dur"].as_f64().expect("dur") >= 0.0);
                slices += 1;
            }
            "s" => {
                assert!(
                    starts.insert(e["id"].as_u64().expect("id"), e).is_none(),
                    "unique s ids"
                );
            }
            "f" => {
                assert_eq!(e["bp"], "e");
                assert!(finishes.insert(e["id"].as_u64().expect("id"), e).is_none());
            }
            "b" | "e" => {
                assert_eq!(e["cat"], "argus.hang");
                assert!(e["id"].is_u64());
                hang += 1;
            }
            "i" => assert_eq!(e["s"], "t"),
            other => panic!("unexpected phase {other}"),
        }
    }
    assert_eq!(
        starts.keys().collect::<HashSet<_>>(),
        finishes.keys().collect::<HashSet<_>>(),
        "every flow start has its finish"
    );
    for (id, s) in &starts {
        let f = finishes[id];
        assert!(
            f["ts"].as_f64() >= s["ts"].as_f64(),
            "flow {id} goes forward in time"
        );
        assert_eq!(s["name"], f["name"]);
    }
    (slices, starts.len(), hang)
}

/// Whether Graphviz's `dot` is on the PATH. `.ci/run` installs it; without it the SVG checks
/// print a loud SKIP line, or fail under `ARGUS_REQUIRE_LIVE=1` (CI).
fn have_dot(test: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v dot"])
        .output()
        .is_ok_and(|o| o.status.success());
    found
        || argus_testkit::skip(
            test,
            "graphviz `dot` is not installed (.ci/run installs it); the DOT file was checked by structure only",
            argus_testkit::REQUIRE_LIVE,
        )
}

/// Renders the exported DOT with `dot -Tsvg` and checks the picture: one node per segment of
/// the diagnosed path (the same diagnosis as `argus debug --auto`), one edge per path edge,
/// each labelled `kind (strength)`; and the SVG `argus export` wrote beside the DOT file.
fn check_svg(snap: &Path, pid: i32, dot: &Path) {
    if !have_dot("check_svg") {
        return;
    }
    let out = Command::new("dot")
        .arg("-Tsvg")
        .arg(dot)
        .output()
        .expect("dot runs");
    assert!(
        out.status.success(),
        "dot parses the file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = String::from_utf8(out.stdout).expect("utf-8 SVG");
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    let (_, report) = crate::common::debug_json(snap, pid);
    let path = report["path"].as_array().expect("path");
    let segments: HashSet<u64> = path.iter().filter_map(|p| p["segment"].as_u64()).collect();
    let nodes = svg.matches("class=\"node\"").count();
    assert_eq!(nodes, segments.len(), "one node per path segment: {svg}");
    // One edge per step that was reached over an edge, each with its label.
    let steps = path
        .iter()
        .skip(1)
        .filter(|p| p["edge"].is_object())
        .count();
    let edges: Vec<&str> = svg.split("class=\"edge\"").skip(1).collect();
    assert_eq!(edges.len(), steps, "one edge per step: {svg}");
    // Each edge, found by its title `cause->effect` (segment labels), has its label.
    for w in path.windows(2).filter(|w| w[1]["edge"].is_object()) {
        let title = format!(
            "<title>{}&#45;&gt;{}</title>",
            w[1]["segment_label"].as_str().unwrap_or("?"),
            w[0]["segment_label"].as_str().unwrap_or("?")
        );
        let block = edges
            .iter()
            .find(|e| e.contains(&title))
            .unwrap_or_else(|| panic!("an edge {title}: {svg}"));
        let block = block.split("</g>").next().unwrap_or("");
        let label = format!(
            "{} ({})",
            w[1]["edge"]["kind"].as_str().unwrap_or("?"),
            w[1]["edge"]["strength"].as_str().unwrap_or("?")
        );
        assert!(
            block.contains(&format!(">{label}</text>")),
            "edge labelled {label}: {block}"
        );
    }
    let written =
        std::fs::read_to_string(dot.with_extension("svg")).expect("argus export wrote the SVG");
    assert_eq!(written.matches("class=\"node\"").count(), nodes);
}

fn export_and_check(snap: &Path, pid: i32) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("trace.json");
    let dot = dir.path().join("path.dot");
    let out = run(&[
        "export",
        snap.to_str().expect("utf-8"),
        "--perfetto",
        json.to_str().expect("utf-8"),
        "--dot",
        dot.to_str().expect("utf-8"),
        "--pid",
        &pid.to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "files written is success: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parses");
    let (slices, flows, hang) = check_trace_events(&v);
    assert!(slices > 0 && flows > 0, "slices {slices} flows {flows}");
    assert_eq!(hang, 2, "the hang is marked with b/e");
    assert!(v["traceEvents"]
        .as_array()
        .is_some_and(|a| a.iter().any(|e| e["cat"] == "argus.path" && e["ph"] == "i")));
    let text = std::fs::read_to_string(&dot).expect("dot");
    assert!(text.starts_with("digraph argus {") && text.trim_end().ends_with('}'));
    assert!(text.contains("subgraph cluster_0") && text.contains("->"));
    check_svg(snap, pid, &dot);
    text
}

#[test]
fn perfetto_and_dot_exports_follow_their_formats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    two_wakers(&snap, 10);
    let dot = export_and_check(&snap, 10);
    assert!(dot.contains("alpha"), "{dot}");
}

#[test]
fn live_exports_of_the_chain_follow_their_formats() {
    if !live_or_skip("live_exports_of_the_chain_follow_their_formats") {
        return;
    }
    let rec = crate::common::chain();
    let dot = export_and_check(&rec.snapshot, rec.pid);
    assert!(dot.contains("sleep"), "{dot}");
    // The terminal picture of the same diagnosis.
    let out = run(&[
        "debug",
        rec.snapshot.to_str().expect("utf-8"),
        "--pid",
        &rec.pid.to_string(),
        "--auto",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Picture (time →") && text.contains('①') && text.contains("─wakeup"),
        "{text}"
    );
}

/// `argus workload stacks` recorded with `--stacks`: the thread `argus-stackrd` blocks in
/// `read` until the main thread writes. The report's hang step carries the stack of that
/// read (the reader's last stack before it was woken) and the terminal shows its named
/// frames on the `blocked at:` line.
#[test]
fn live_stacks_show_where_the_hung_thread_blocked() {
    if !live_or_skip("live_stacks_show_where_the_hung_thread_blocked") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let rec = crate::common::record_with(
        &["--stacks"],
        &[exe, "workload", "stacks", "--secs", "1.5"],
        &[],
    );
    let (snap, truth) = (&rec.snapshot, &rec.truth);
    let reader = truth["reader_tid"].as_i64().expect("reader_tid");
    let snap_s = snap.to_str().expect("utf-8");
    let tid = reader.to_string();
    let out = run(&["debug", snap_s, "--tid", &tid, "--threshold", "1", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let hang = &r["path"][0];
    assert_eq!(hang["tid"].as_i64(), Some(reader), "{r:#}");
    // The reader's last stack before its wait ended: the read it blocked in.
    let stacks = argus_sinks::read_stacks(snap).expect("stacks.parquet");
    let end = hang["end_ns"].as_u64().expect("end_ns");
    let start = hang["start_ns"].as_u64().expect("start_ns");
    let read = stacks
        .iter()
        .filter(|s| i64::from(s.tid) == reader && s.ts >= start && s.ts <= end)
        .max_by_key(|s| s.ts)
        .expect("a stack of the reader during the hang");
    let user: Vec<&StackFrame> = read.frames.iter().filter(|f| !f.kernel).take(4).collect();
    assert!(!user.is_empty(), "user frames: {read:?}");
    let shown = hang["stack"].as_array().expect("stack array");
    let shown_user: Vec<u64> = shown
        .iter()
        .filter(|f| f["kernel"] == false)
        .filter_map(|f| f["ip"].as_u64())
        .collect();
    assert_eq!(
        shown_user,
        user.iter().map(|f| f.ip).collect::<Vec<_>>(),
        "{r:#}"
    );
    // The terminal names the same functions where the thread blocked.
    let out = run(&["debug", snap_s, "--tid", &tid, "--threshold", "1", "--auto"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("blocked at: "))
        .unwrap_or_else(|| panic!("a blocked-at line: {text}"));
    for f in &user {
        if let Some(sym) = &f.symbol {
            assert!(line.contains(sym.as_str()), "{sym} in {line}");
        }
    }
    // Some step names a function of the workload itself (the main thread's sleep, its write
    // or the reader's read).
    assert!(
        text.contains("argus::stackwork") || text.contains("argus_stack_blocking_read"),
        "{text}"
    );
}

/// `argus workload flag-watch` recorded with a hardware watchpoint on its flag
/// (`--watch ARGUS_HANG_FLAG@cmd`): the main thread polls the flag while `argus-decoy` burns
/// CPU and `argus-flagger` sleeps, then sets it. `--auto` names the setter from the
/// watchpoint's write (a strong flag step), not the busiest-thread guess, which — without
/// the watchpoint hits — would blame the decoy.
#[test]
fn live_watchpoint_names_the_real_flag_setter() {
    if !live_or_skip("live_watchpoint_names_the_real_flag_setter") {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_argus");
    let rec = crate::common::record_with(
        &["--watch", "ARGUS_HANG_FLAG@cmd"],
        &[exe, "workload", "flag-watch", "--secs", "1.5"],
        &["--threshold", "1"],
    );
    let (snap, truth) = (&rec.snapshot, &rec.truth);
    let pid = truth["target_pid"].as_i64().expect("target_pid");
    let snap_s = snap.to_str().expect("utf-8");
    let out = run(&[
        "debug",
        snap_s,
        "--pid",
        &pid.to_string(),
        "--threshold",
        "1",
        "--auto",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(r["hang"]["class"], "RepeatedYield", "{r:#}");
    let path = r["path"].as_array().expect("path");
    let setter = path
        .iter()
        .find(|p| p["role"] == "setter")
        .unwrap_or_else(|| panic!("a setter step: {r:#}"));
    assert_eq!(setter["comm"], "argus-flagger", "{r:#}");
    assert_eq!(setter["edge"]["kind"], "flag");
    assert_eq!(
        setter["edge"]["strength"], "strong",
        "known, not guessed: {r:#}"
    );
    // Known from a watchpoint write: directly, or through the flag edge the rules made of it.
    let evidence = &setter["step"]["evidence"];
    assert_eq!(setter["step"]["kind"], "flag_set", "{r:#}");
    assert!(
        evidence["kind"] == "watchpoint"
            || (evidence["kind"] == "graph_edge" && evidence["watchpoint"].is_u64()),
        "{r:#}"
    );
    assert_eq!(
        crate::common::comms(&r["root_causes"])
            .last()
            .map(String::as_str),
        Some("argus-flagger"),
        "{r:#}"
    );
    assert!(
        !r["advice"].to_string().contains("is a guess"),
        "no guessing advice: {r:#}"
    );
    // The same snapshot without its watchpoint hits (and the flag edges the rules made of
    // them): the guess blames the busy decoy.
    let snap_tables = argus_sinks::read_snapshot_tables(snap, false).expect("tables");
    let g = argus_diagnose::Graph::new(argus_diagnose::GraphInput {
        segments: snap_tables.segments,
        edges: snap_tables
            .edges
            .into_iter()
            .filter(|e| e.kind != EdgeKind::Flag)
            .collect(),
        spins: snap_tables.spins,
        threads: snap_tables.threads,
        trace_end_ns: snap_tables.manifest.trace_end_ns.unwrap_or_default(),
    })
    .expect("graph");
    let mut cfg = argus_diagnose::DiagnoseConfig::default();
    cfg.hang.threshold_ns = 1_000_000_000;
    let d = argus_diagnose::diagnose(
        &g,
        Some(argus_diagnose::Target {
            pid: Pid(pid as i32),
            tid: None,
        }),
        &mut argus_diagnose::AutoOracle,
        &cfg,
    )
    .expect("diagnosis");
    let guess = d.report.expect("a hang");
    let guessed = guess
        .path
        .iter()
        .find(|p| p.role == argus_diagnose::Role::Setter)
        .expect("a guessed setter");
    assert_eq!(guessed.comm, "argus-decoy", "{:#?}", guess.path);
    assert_eq!(guessed.edge.map(|e| e.strength), Some(Strength::Weak));
}
