//! Live queries (issue 16 parts 3–4): a diagnosis from parts of the graph fetched on demand
//! equals the diagnosis of the whole graph.
//!
//! On the bundled recording (no tracing needed):
//! - every hang's diagnosis on partial graphs fetched from the whole snapshot graph
//!   (`argus_diagnose::fetch_whole`) equals the whole graph's, with several oracles;
//! - the live arrangements (`argus_pipeline::arranged`, fed epoch by epoch) answer every
//!   need as the whole graph of the same epoch does, and the diagnosis fetched from them
//!   equals the whole graph's at every epoch with a hang;
//! - `argus debug DIR --follow` with no job in DIR reports the hang of the latest snapshot
//!   with `argus debug`'s report.
//!
//! On the real kernel (`argus start`, the `chain` workload): the job answers over its
//! socket (0600) the diagnosis a snapshot of the same epoch gives; two clients at once and a
//! client that hangs up mid-request leave it unharmed; with no job, `argus debug DIR` falls
//! back to the latest snapshot.

use argus_engine::live::fetch;

use crate::common::{bundled_trace, trace_events};
use argus_diagnose::{
    diagnose, fetch_whole, rounds, AutoOracle, DiagnoseConfig, Graph, GraphInput, Need, Oracle,
    Replay, ScriptedOracle, Target, Whole,
};
use argus_pipeline::arranged::{ArrangedJob, SliceConfig};
use argus_pipeline::dataflow::{run, Batch, DataflowConfig, Message, Update};
use argus_schema::{Event, Nanos, SegmentId, Spin, ThreadInfo, Tid};
use std::collections::BTreeMap;

/// The bundled recording's snapshot (as `argus demo --bundled` builds it) and its trace.
fn bundled() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = bundled_trace(tmp.path());
    let snapshot = trace
        .parent()
        .expect("the kept demo directory")
        .join("snapshot");
    (tmp, trace, snapshot)
}

/// The whole tables of a graph.
fn whole_of(spins: &[Spin], threads: &[ThreadInfo], end: Nanos) -> Whole {
    Whole {
        threads: threads.to_vec(),
        spins: spins.to_vec(),
        trace_end_ns: end,
        lost: Vec::new(),
        app: Default::default(),
    }
}

/// The diagnosis of `target` on `g` with the oracle `make` gives.
fn diagnose_whole(
    g: &Graph,
    target: Target,
    oracle: &mut dyn Oracle,
    cfg: &DiagnoseConfig,
) -> serde_json::Value {
    diagnose(g, Some(target), oracle, cfg)
        .expect("diagnoses")
        .to_json()
}

/// The same on partial graphs fetched through `fetch`, and the rounds it took.
fn diagnose_partial(
    whole: &Whole,
    target: Target,
    mut fetch: impl FnMut(&[Need]) -> argus_diagnose::Parts,
    oracle: &mut dyn Oracle,
    cfg: &DiagnoseConfig,
) -> (serde_json::Value, argus_diagnose::RoundStats) {
    let mut replay = Replay::new();
    let seed = fetch::seed(target.thread(), &whole.spins);
    let (d, stats) = rounds(
        whole,
        seed,
        |needs| Ok::<_, argus_diagnose::Error>(fetch(needs)),
        |g| {
            let mut o = replay.round(g, &mut *oracle);
            diagnose(g, Some(target), &mut o, cfg)
        },
    )
    .expect("rounds end");
    (d.to_json(), stats)
}

fn target_of(s: &Spin) -> Target {
    Target {
        pid: s.pid,
        tid: (s.tid.0 != s.pid.0).then_some(s.tid),
    }
}

#[test]
fn partial_diagnoses_equal_the_whole_graphs_on_the_bundled_recording() {
    let (_tmp, _trace, snapshot) = bundled();
    let snap = argus_sinks::read_snapshot_tables(&snapshot, false).expect("the snapshot");
    let end = snap.manifest.trace_end_ns.unwrap_or_default();
    let g = Graph::new(GraphInput {
        segments: snap.segments.clone(),
        edges: snap.edges.clone(),
        spins: snap.spins.clone(),
        threads: snap.threads.clone(),
        trace_end_ns: end,
    })
    .expect("the graph");
    let whole = whole_of(&snap.spins, &snap.threads, g.trace_end_ns());
    let cfg = DiagnoseConfig::default();
    let mut targets: Vec<Target> = snap.spins.iter().map(target_of).collect();
    targets.dedup();
    assert!(targets.len() > 3, "{} hung threads", targets.len());
    let mut fetched = 0;
    for t in &targets {
        let want = diagnose_whole(&g, *t, &mut AutoOracle, &cfg);
        let (got, stats) =
            diagnose_partial(&whole, *t, |n| fetch_whole(&g, n), &mut AutoOracle, &cfg);
        assert!(!stats.inexact, "{t:?}: {stats:?}");
        assert_eq!(got, want, "{t:?} ({stats:?})");
        fetched += stats.segments;
        // Scripted answers: the second choice wherever there is one, then stop.
        let script = || {
            ScriptedOracle::new([
                argus_diagnose::Reply::Choice(1),
                argus_diagnose::Reply::Choice(0),
                argus_diagnose::Reply::Stop,
            ])
        };
        let want = diagnose_whole(&g, *t, &mut script(), &cfg);
        let (got, _) = diagnose_partial(&whole, *t, |n| fetch_whole(&g, n), &mut script(), &cfg);
        assert_eq!(got, want, "{t:?}, scripted");
    }
    eprintln!(
        "{} targets: {} of {} segments fetched in all",
        targets.len(),
        fetched,
        g.segments().len() * targets.len()
    );
}

/// The graph dataflow's updates and watermark for `evs` in batches of `size`, per epoch.
fn epochs(evs: &[Event], size: usize) -> Vec<(Vec<(Update, i64)>, Nanos)> {
    let (in_tx, in_rx) = crossbeam_channel::bounded(4);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let runner = std::thread::spawn(move || run(&DataflowConfig::default(), in_rx, out_tx));
    let chunks: Vec<Vec<Event>> = evs.chunks(size).map(|c| c.to_vec()).collect();
    let feeder = std::thread::spawn(move || {
        for c in chunks {
            let watermark = c.last().map(|e| e.ts).unwrap_or_default();
            in_tx
                .send(Batch {
                    events: c,
                    watermark,
                })
                .expect("the dataflow runs");
        }
    });
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for msg in out_rx {
        match msg {
            Message::Updates { updates, .. } => pending.extend(updates),
            Message::EpochDone { watermark, .. } => {
                out.push((std::mem::take(&mut pending), watermark))
            }
        }
    }
    feeder.join().expect("feeder");
    runner
        .join()
        .expect("the dataflow thread")
        .expect("the dataflow runs");
    out
}

#[test]
fn the_arrangements_answer_as_the_whole_graph_and_diagnose_alike_every_epoch() {
    let (_tmp, trace, snapshot) = bundled();
    let threads = argus_sinks::read_snapshot_tables(&snapshot, false)
        .expect("the snapshot")
        .threads;
    let evs = trace_events(&trace);
    let eps = epochs(&evs, 5_000);
    assert!(eps.len() > 5, "{} epochs", eps.len());
    let cfg = DiagnoseConfig::default();
    let mut checked = 0;
    timely::execute_directly(move |worker| {
        let mut job = ArrangedJob::new(worker, &SliceConfig::default());
        let mut acc: BTreeMap<Update, i64> = BTreeMap::new();
        for (e, (updates, watermark)) in eps.iter().enumerate() {
            let e = e as u64;
            for (u, d) in updates {
                *acc.entry(u.clone()).or_default() += d;
            }
            acc.retain(|_, d| *d != 0);
            job.send(e, updates.iter().cloned());
            job.close(e);
            worker.step_while(|| job.pending(e));
            job.traces().compact_to(e);
            let mut input = GraphInput {
                threads: threads.clone(),
                trace_end_ns: *watermark,
                ..GraphInput::default()
            };
            for u in acc.keys() {
                match u {
                    Update::Segment(s) => input.segments.push(s.clone()),
                    Update::Edge(x) => input.edges.push(x.clone()),
                    Update::Spin(s) => input.spins.push(s.clone()),
                }
            }
            if input.spins.is_empty() {
                continue;
            }
            let whole = whole_of(&input.spins, &threads, *watermark);
            let spins = input.spins.clone();
            let g = Graph::new(input).expect("the graph");
            // Every need the walk can make, answered alike.
            let some: Vec<SegmentId> = g.segments().iter().step_by(37).map(|s| s.id).collect();
            let mut needs = vec![
                Need::Threads,
                Need::Segment {
                    id: SegmentId(u64::MAX),
                },
            ];
            for id in &some {
                let s = g.segment(*id).expect("held");
                needs.push(Need::Segment { id: *id });
                needs.push(Need::Incoming { id: *id });
                needs.push(Need::Outgoing { id: *id });
                needs.push(Need::Window {
                    tid: id.tid(),
                    from_ns: s.start_ns,
                    to_ns: Nanos(s.start_ns.0 + 3_000_000),
                });
                needs.push(Need::Window {
                    tid: id.tid(),
                    from_ns: Nanos(s.start_ns.0 + 1),
                    to_ns: Nanos(s.start_ns.0 + 1),
                });
                needs.push(Need::Thread { tid: id.tid() });
            }
            needs.push(Need::Thread { tid: Tid(-77) });
            for n in &needs {
                let mut got = fetch::fetch(job.traces(), std::slice::from_ref(n), e)
                    .expect("the epoch is readable");
                let mut want = fetch_whole(&g, std::slice::from_ref(n));
                for p in [&mut got, &mut want] {
                    p.segments.sort();
                    p.absent.sort();
                    if let Some(t) = p.threads.as_mut() {
                        t.sort();
                    }
                }
                assert_eq!(got, want, "epoch {e}: {n:?}");
            }
            // The diagnosis of each hung thread, from the arrangements.
            let mut targets: Vec<Target> = spins.iter().map(target_of).collect();
            targets.dedup();
            for t in targets {
                let want = diagnose_whole(&g, t, &mut AutoOracle, &cfg);
                let (got, stats) = diagnose_partial(
                    &whole,
                    t,
                    |n| fetch::fetch(job.traces(), n, e).expect("the epoch is readable"),
                    &mut AutoOracle,
                    &cfg,
                );
                assert!(!stats.inexact, "epoch {e}, {t:?}: {stats:?}");
                assert_eq!(got, want, "epoch {e}, {t:?} ({stats:?})");
                checked += 1;
            }
        }
        assert!(checked > 5, "{checked} diagnoses compared");
    });
}

mod live {
    //! `argus start` on the real kernel, asked over its socket.

    use crate::common::{argus, live_or_skip, recording_lock, wait_for, Guard};
    use serde_json::{json, Value};
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::net::UnixStream;
    use std::path::{Path, PathBuf};
    use std::process::Stdio;
    use std::time::Duration;

    /// One connection to the job's socket.
    struct Conn {
        reader: BufReader<UnixStream>,
        writer: UnixStream,
    }

    impl Conn {
        fn open(sock: &Path) -> Conn {
            let s = UnixStream::connect(sock).expect("the job's socket accepts");
            Conn {
                writer: s.try_clone().expect("clone"),
                reader: BufReader::new(s),
            }
        }

        fn ask(&mut self, req: Value) -> Value {
            writeln!(self.writer, "{req}").expect("request sent");
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("answer read");
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the answer is JSON ({e}): {line:?}"));
            assert_eq!(v["v"], 1, "{v}");
            assert_eq!(v["id"], req["id"], "the id is echoed: {v}");
            v
        }
    }

    fn latest(job: &Path) -> Option<PathBuf> {
        let p = std::fs::canonicalize(job.join("latest")).ok()?;
        p.join("manifest.json").is_file().then_some(p)
    }

    /// `argus debug SNAPSHOT --pid P --auto --json`'s report.
    fn snapshot_diagnosis(snapshot: &Path, pid: i32) -> Value {
        crate::common::debug_json(snapshot, pid).1
    }

    /// The job's `status` once its live graph has a complete epoch (60 s at most).
    fn first_epoch(c: &mut Conn) -> Value {
        wait_for("a complete epoch", Duration::from_secs(60), || {
            let s = c.ask(json!({"v": 1, "id": 1, "op": "status"}));
            (s["ok"] == true && s["result"]["epoch"].is_u64()).then_some(s)
        })
    }

    /// Runs the `chain` hang workload for `secs` (its main thread waits on a worker blocked
    /// on `sleep`); its main thread's id.
    fn chain(secs: u32) -> i32 {
        let out = argus()
            .args(["workload", "chain", "--secs", &secs.to_string()])
            .stderr(Stdio::null())
            .output()
            .expect("the workload runs");
        assert!(out.status.success());
        let truth = crate::common::recorded_truth(&out);
        truth["main_tid"].as_i64().expect("main_tid") as i32
    }

    /// `argus start -o TMP/job ARGS`, its stderr in `TMP/start.log`, once its socket is
    /// there: the job's guard, its directory and its socket.
    fn start_job(tmp: &Path, args: &[&str]) -> (Guard, PathBuf, PathBuf) {
        let job = tmp.join("job");
        let log = std::fs::File::create(tmp.join("start.log")).expect("log");
        let guard = Guard(Some(
            argus()
                .args(["start", "-o"])
                .arg(&job)
                .args(args)
                .stderr(log)
                .spawn()
                .expect("argus start runs"),
        ));
        let sock = job.join("argus.sock");
        wait_for("the socket", Duration::from_secs(30), || {
            sock.exists().then_some(())
        });
        (guard, job, sock)
    }

    /// Retention by retraction (`--retain 3s`): one generation answers throughout; a hang
    /// that ended is in the live graph (`hangs`, `diagnose`) and the snapshots while it is
    /// inside the window, and gone from all three once the window has passed it, while the
    /// window start (`trace_start_ns`) follows the watermark. Every snapshot holds only
    /// what ended inside its window or is still open, and no edge names a segment it lacks.
    #[test]
    fn what_ended_before_the_window_leaves_the_live_graph_and_the_snapshots() {
        if !live_or_skip("what_ended_before_the_window_leaves_the_live_graph_and_the_snapshots") {
            return;
        }
        let _lock = recording_lock();
        let tmp = tempfile::tempdir().expect("tempdir");
        let (_start, job, sock) = start_job(
            tmp.path(),
            &[
                "--snapshot-every",
                "1",
                "--retain",
                "3s",
                "--watch-comm",
                "argus-hang-main",
                "--duration",
                "60",
            ],
        );
        let mut c = Conn::open(&sock);
        first_epoch(&mut c);
        // The chain workload: its main thread waits ~2 s on a worker blocked on `sleep`.
        let pid = chain(2);
        // Inside the window: the live graph has the ended hang.
        wait_for(
            "the ended hang in the live graph",
            Duration::from_secs(30),
            || {
                let h = c.ask(json!({"v": 1, "id": 2, "op": "hangs", "pid": pid, "open": false}));
                let found = h["result"]["hangs"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x["tid"] == pid));
                let d = c.ask(json!({"v": 1, "id": 3, "op": "diagnose", "pid": pid}));
                (found && d["result"]["diagnosis"]["outcome"] == "hang_diagnosed").then_some(())
            },
        );
        let ended_at = std::time::Instant::now();
        // Past the window (3 s, cut every 1 s, plus the lag): gone from the live graph.
        let gone = wait_for(
            "the hang forgotten by the live graph",
            Duration::from_secs(30),
            || {
                let h = c.ask(json!({"v": 1, "id": 4, "op": "hangs", "pid": pid}));
                let none = h["result"]["hangs"]
                    .as_array()
                    .is_some_and(|a| a.is_empty());
                // Not found, or (the thread table keeps exited threads) no hang of it.
                let d = c.ask(json!({"v": 1, "id": 5, "op": "diagnose", "pid": pid}));
                let no_hang = d["error"]["code"] == "not_found"
                    || (d["ok"] == true && d["result"]["diagnosis"]["outcome"] != "hang_diagnosed");
                (none && no_hang).then_some(d)
            },
        );
        assert!(
            ended_at.elapsed() >= Duration::from_secs(1),
            "forgotten only once the window passed it: {gone}"
        );
        let s = c.ask(json!({"v": 1, "id": 6, "op": "status"}));
        let r = &s["result"];
        assert_eq!(
            (r["generation"].as_u64(), r["generations"].as_u64()),
            (Some(0), Some(1)),
            "{r}"
        );
        assert!(r.get("dormant").is_none(), "{r}");
        let (start, watermark) = (
            r["trace_start_ns"].as_u64().expect("trace_start_ns"),
            r["watermark_ns"].as_u64().expect("watermark_ns"),
        );
        assert!(
            watermark - start <= 4_000_000_000 + 1_500_000_000,
            "the window follows the watermark ({start} .. {watermark}): {r}"
        );
        assert!(watermark - start >= 2_500_000_000, "{r}");
        // The snapshots: the latest has no record of the workload, and holds only its window.
        let snap = wait_for(
            "a snapshot without the workload",
            Duration::from_secs(30),
            || {
                let snap = latest(&job)?;
                let t = argus_sinks::read_snapshot_tables(&snap, false).ok()?;
                (!t.segments.iter().any(|s| s.pid.0 == pid)).then_some(snap)
            },
        );
        let t = argus_sinks::read_snapshot_tables(&snap, false).expect("snapshot tables");
        let start = t.manifest.trace_start_ns.expect("trace_start_ns");
        let w = t.manifest.watermark_ns;
        assert!(
            start.0 > 0 && start.until(w) <= 4_000_000_000 + 1_500_000_000,
            "{start:?} {w:?}"
        );
        let ids: std::collections::HashSet<_> = t.segments.iter().map(|s| s.id).collect();
        for s in &t.segments {
            assert!(
                s.end == argus_schema::EndCause::Open || s.end_ns >= start,
                "a segment that ended before the window {start:?}: {s:?}"
            );
        }
        for e in &t.edges {
            assert!(e.ts >= start, "an edge before the window {start:?}: {e:?}");
            assert!(
                ids.contains(&e.src) && ids.contains(&e.dst),
                "an edge naming a segment the snapshot lacks: {e:?}"
            );
        }
        for sp in &t.spins {
            assert!(sp.open || sp.end_ns >= start, "{sp:?}");
        }
        assert!(!t.segments.is_empty() && !t.edges.is_empty());
    }

    /// (a) the diagnosis the job answers over its socket equals `argus debug`'s on a snapshot
    /// of the same epoch; (b) two clients at once, clients that hang up mid-request, the job
    /// unharmed; (c) the socket is 0600; `argus debug DIR` asks the job while it runs and
    /// falls back to the latest snapshot once it has stopped (d), also past a stale socket.
    #[test]
    fn the_job_answers_live_the_diagnosis_a_snapshot_of_the_same_epoch_gives() {
        if !live_or_skip("the_job_answers_live_the_diagnosis_a_snapshot_of_the_same_epoch_gives") {
            return;
        }
        let _lock = recording_lock();
        let tmp = tempfile::tempdir().expect("tempdir");
        let (mut start, job, sock) = start_job(
            tmp.path(),
            &[
                "--snapshot-every",
                "1",
                "--retain",
                "120s",
                "--watch-comm",
                "argus-hang-main",
                "--duration",
                "120",
            ],
        );
        // (c) Only the job's user may connect.
        let meta = std::fs::symlink_metadata(&sock).expect("the socket's metadata");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{meta:?}");
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });

        let mut c = Conn::open(&sock);
        let status = first_epoch(&mut c);
        assert_eq!(status["result"]["protocol"], 1, "{status}");
        let bad = c.ask(json!({"v": 1, "id": "x", "op": "frobnicate"}));
        assert_eq!(bad["ok"], false);
        assert_eq!(bad["error"]["code"], "unknown_op", "{bad}");

        // The chain workload: its main thread waits ~3 s on a worker blocked on `sleep`.
        let pid = chain(3);

        // A snapshot holding the hang, closed: then ask the job as of that snapshot's epoch
        // (its watermark names it).
        let (snapshot, watermark, live) = wait_for(
            "a snapshot of the closed hang that the job answers for",
            Duration::from_secs(120),
            || {
                let snap = latest(&job)?;
                let tables = argus_sinks::read_snapshot_tables(&snap, false).ok()?;
                tables.spins.iter().find(|s| s.tid.0 == pid && !s.open)?;
                let w = tables.manifest.watermark_ns.0;
                // The live graph may lag the snapshot a little: not_ready, ask again.
                for _ in 0..200 {
                    let a = c.ask(
                        json!({"v": 1, "id": 2, "op": "diagnose", "pid": pid, "watermark_ns": w}),
                    );
                    match a["error"]["code"].as_str() {
                        None => return Some((snap, w, a)),
                        Some("not_ready") => std::thread::sleep(Duration::from_millis(100)),
                        Some(_) => return None, // compacted or gone: take the next snapshot
                    }
                }
                None
            },
        );
        assert_eq!(live["ok"], true, "{live}");
        let r = &live["result"];
        assert_eq!(r["watermark_ns"], watermark, "{r}");
        eprintln!(
            "live diagnosis as of epoch {} ({} ms, {} round(s), {} segments read); snapshot {}",
            r["epoch"],
            r["elapsed_ms"],
            r["rounds"],
            r["segments"],
            snapshot.display()
        );
        let want = snapshot_diagnosis(&snapshot, pid);
        let got = &r["diagnosis"];
        assert_eq!(got["outcome"], "hang_diagnosed", "{got}");
        // Part 4: the same answer — root cause, class, path, and everything else.
        assert_eq!(got["hang"]["class"], want["hang"]["class"]);
        assert_eq!(got["root_causes"], want["root_causes"]);
        assert_eq!(got["path"], want["path"]);
        assert_eq!(*got, want, "the whole report");

        // (b) Two clients at once, each diagnosing; meanwhile clients that hang up mid-request
        // (a whole request, then gone before the answer; half a request line).
        let ask_twice = |id: u64| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut c = Conn::open(&sock);
                (0..3)
                    .map(|i| {
                        c.ask(json!({"v": 1, "id": id * 10 + i, "op": "diagnose", "pid": pid}))
                    })
                    .collect::<Vec<Value>>()
            })
        };
        let (one, two) = (ask_twice(1), ask_twice(2));
        for _ in 0..5 {
            let mut s = UnixStream::connect(&sock).expect("connects");
            writeln!(
                s,
                "{}",
                json!({"v": 1, "id": 9, "op": "diagnose", "pid": pid})
            )
            .expect("sent");
            drop(s);
            let mut s = UnixStream::connect(&sock).expect("connects");
            write!(s, "{{\"v\": 1, \"op\": \"diag").expect("half sent");
            drop(s);
        }
        for answers in [one.join().expect("client 1"), two.join().expect("client 2")] {
            for a in answers {
                assert_eq!(a["ok"], true, "{a}");
                assert_eq!(
                    a["result"]["diagnosis"]["root_causes"], want["root_causes"],
                    "{a}"
                );
            }
        }
        let s = c.ask(json!({"v": 1, "id": 3, "op": "status"}));
        assert_eq!(s["ok"], true, "the job still answers: {s}");
        let h = c.ask(json!({"v": 1, "id": 4, "op": "hangs", "pid": pid}));
        let hangs = h["result"]["hangs"].as_array().expect("hangs");
        assert!(
            hangs
                .iter()
                .any(|x| x["tid"] == pid && x["class"] == "LongWait"),
            "{h}"
        );

        // `argus debug DIR` asks the job while it runs.
        let out = argus()
            .args(["debug"])
            .arg(&job)
            .args(["--pid", &pid.to_string(), "--auto", "--json"])
            .output()
            .expect("argus debug runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("answered by the job running in"),
            "{stderr}"
        );
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(report["root_causes"], want["root_causes"], "{report}");
        assert_eq!(report["path"], want["path"], "{report}");

        // A clean stop removes the socket.
        let child = start.0.take().expect("running");
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let mut child = child;
        assert!(child.wait().expect("argus start exits").success());
        let log = std::fs::read_to_string(tmp.path().join("start.log")).unwrap_or_default();
        assert!(!sock.exists(), "the socket is removed at exit: {log}");

        // (d) No job: the latest snapshot answers; so does a stale socket (a job killed
        // with kill -9 leaves one nobody listens on).
        for stale in [false, true] {
            if stale {
                drop(std::os::unix::net::UnixListener::bind(&sock).expect("a stale socket"));
                assert!(sock.exists());
            }
            let out = argus()
                .args(["debug"])
                .arg(&job)
                .args(["--pid", &pid.to_string(), "--auto", "--json"])
                .output()
                .expect("argus debug runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("answered from snapshot"), "{stderr}");
            let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
            assert_eq!(report["root_causes"], want["root_causes"], "{report}");
        }
    }
}

/// `argus debug DIR --follow` with no job answering in DIR reads its snapshots: one
/// `new_hang` line from the snapshot `latest` names, whose report is `argus debug --auto`'s
/// on that snapshot.
#[test]
fn follow_with_no_job_reads_the_latest_snapshot() {
    let (tmp, _trace, snapshot) = bundled();
    let job = tmp.path().join("job");
    let snaps = job.join("snapshots");
    std::fs::create_dir_all(&snaps).expect("snapshots dir");
    let name = "0000000001";
    std::os::unix::fs::symlink(&snapshot, snaps.join(name)).expect("snapshot link");
    std::os::unix::fs::symlink(format!("snapshots/{name}"), job.join("latest")).expect("latest");
    let snap = argus_sinks::read_snapshot_tables(&snapshot, false).expect("the snapshot");
    let main = snap
        .spins
        .iter()
        .find(|s| s.tid.0 == s.pid.0)
        .expect("a main thread's hang in the bundled recording");
    let pid = main.pid.0.to_string();

    let out = crate::common::argus()
        .args(["debug"])
        .arg(&job)
        .args(["--follow", "--follow-for", "2", "--json", "--pid", &pid])
        .output()
        .expect("argus debug --follow runs");
    assert_eq!(out.status.code(), Some(1), "a hang was reported");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["change"], "new_hang");
    assert_eq!(line["source"], "snapshot");
    assert_eq!(
        std::path::PathBuf::from(line["snapshot"].as_str().expect("the snapshot path")),
        std::fs::canonicalize(&snapshot).expect("canonical")
    );
    let direct = crate::common::argus()
        .arg("debug")
        .arg(&snapshot)
        .args(["--pid", &pid, "--auto", "--json"])
        .output()
        .expect("argus debug runs");
    let direct: serde_json::Value = serde_json::from_slice(&direct.stdout).expect("JSON");
    assert_eq!(line["report"], direct, "follow's report is argus debug's");
}
