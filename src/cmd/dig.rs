//! `argus dig SNAPSHOT --pid P`: dig into one vertex of a hang — by default its deepest root
//! cause — the way the seeds' "debugger scripts" do: record its thread again with more
//! detail, then compare the hung occurrence with the normal ones (`docs/dig.md`).
//!
//! ```text
//!  snapshot ─► diagnose (default answers) ─► the vertex: thread, process, window, its stacks
//!      ─► plan: argus record --stacks --profile HZ [--watch SPEC…] -o OUT/trace -- CMD
//!  --run: record it, build OUT/snapshot       --trace DIR: a recording made from the plan
//!      ─► diagnose the new recording (the same process, found by the recorded command or by
//!         name) ─► the vertex of the same thread on the new hang's path: the hung window
//!      ─► that thread's profile samples (perf/, unwound and symbolized) and syscalls, inside
//!         the window versus the rest of its life ─► argus_diagnose::profile::profile_diff
//! ```
//!
//! The new recording is needed because the always-on one samples stacks only where threads
//! block and wake: a thread that hangs by computing leaves no stack from inside the
//! computation. `--profile` samples every running thread's stack at `HZ` per second of CPU.

use crate::cli::{DigArgs, RecordArgs, RecordingArgs};
use anyhow::{bail, Context, Result};
use argus_diagnose::profile::{profile_diff, ProfileDiff, ProfileSample};
use argus_diagnose::{AutoOracle, DiagnoseConfig, Graph, Target};
use argus_ingest::perffile::{PerfTrace, StreamKind};
use argus_ingest::symbolize::Symbolizer;
use argus_schema::{EventKind, Tid};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The vertex dug into, as the snapshot shows it.
#[derive(Clone, Debug, Serialize)]
struct Subject {
    vertex: String,
    tid: i32,
    pid: i32,
    comm: String,
    process: String,
    start_ns: u64,
    end_ns: u64,
    /// What the diagnosis said of it (the root cause's reason, or the step's description).
    about: String,
    /// Function names of the stacks recorded at its waits and wake-ups (user frames,
    /// innermost first, each once).
    stack_functions: Vec<String>,
    /// The functions of those stacks worth a call probe, as `BINARY:SYMBOL`
    /// ([`probe_worthy`]).
    probes: Vec<String>,
    /// The hang it belongs to.
    hang: String,
    /// The hung thread's name (found again by it in the focused recording with `--tid`).
    hung_comm: String,
}

/// The focused recording.
#[derive(Clone, Debug, Serialize)]
struct Plan {
    /// `argus record …` as it would be typed.
    argv: Vec<String>,
    /// Where it records.
    trace: PathBuf,
    /// Where it is built.
    snapshot: PathBuf,
    /// `argus dig … --trace …`: the comparison once it is recorded.
    compare: Vec<String>,
}

/// The comparison of the new recording's hung vertex with the thread's normal runs.
#[derive(Clone, Debug, Serialize)]
struct Compared {
    trace: PathBuf,
    /// The same thread's vertex on the new hang's path.
    vertex: String,
    tid: i32,
    comm: String,
    hung_windows: Vec<(u64, u64)>,
    /// Profile samples the rings lost (the profile is short by that many).
    lost_samples: u64,
    diff: ProfileDiff,
    /// The probed functions' calls by the thread, in the hung vertex and in its normal runs.
    calls: Vec<CallShare>,
}

/// A probed function's calls (`--probe`): counted where they began, their time clipped to
/// the hung window or to the rest.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
struct CallShare {
    function: String,
    hung_calls: u64,
    hung_ns: u64,
    normal_calls: u64,
    normal_ns: u64,
}

#[derive(Debug, Serialize)]
struct DigReport {
    subject: Subject,
    plan: Plan,
    compared: Option<Compared>,
}

pub fn run(args: &DigArgs) -> Result<u8> {
    if !(args.threshold.is_finite() && args.threshold > 0.0) {
        bail!(
            "--threshold must be a positive number of seconds, got {}",
            args.threshold
        );
    }
    let mut config = DiagnoseConfig::default();
    config.hang.threshold_ns = (args.threshold * 1e9) as u64;
    let snapshot = crate::cmd::follow::resolve_snapshot(&args.snapshot)?;
    let graph = crate::cmd::debug::load_graph(&snapshot)?;
    let target = args.target.resolve(&graph)?;
    let diagnosis = argus_diagnose::diagnose(&graph, target, &mut AutoOracle, &config)?;
    let Some(report) = diagnosis.report else {
        eprintln!(
            "argus dig: {} has no hang of {} s or more in {}: nothing to dig into",
            diagnosis.subject,
            args.threshold,
            snapshot.display()
        );
        return Ok(0);
    };
    let subject = subject(args, &graph, &snapshot, &report)?;
    let manifest = argus_sinks::Manifest::read(&snapshot)
        .with_context(|| format!("reading snapshot {}", snapshot.display()))?;
    let source = manifest.sources.first().map(PathBuf::from);
    let out = match &args.output {
        Some(o) => o.clone(),
        None => PathBuf::from(format!(
            "argus-dig-{}-{}",
            subject.tid,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default()
        )),
    };
    let (record, mut plan) = plan(args, &subject, source.as_deref(), &out)?;
    plan.compare = compare_argv(args, &snapshot, &plan.trace);
    let compared = if args.run {
        if out.exists() && std::fs::read_dir(&out).is_ok_and(|mut d| d.next().is_some()) {
            bail!(
                "{} exists and is not empty: name another directory with -o",
                out.display()
            );
        }
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        eprintln!("argus dig: recording: {}", shell_line(&plan.argv));
        crate::cmd::record::record_plan(&record)?;
        Some(compare(
            args,
            &subject,
            &plan.trace,
            &plan.snapshot,
            &config,
        )?)
    } else if let Some(trace) = &args.trace {
        let snap = out.join("snapshot");
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        Some(compare(args, &subject, trace, &snap, &config)?)
    } else {
        None
    };
    let report = DigReport {
        subject,
        plan,
        compared,
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", text(&report))?;
    }
    stdout.flush()?;
    Ok(0)
}

/// The vertex to dig into: `--vertex`, else the deepest root cause, else the hang itself.
fn subject(
    args: &DigArgs,
    graph: &Graph,
    snapshot: &Path,
    report: &argus_diagnose::Report,
) -> Result<Subject> {
    let (id, about) = match &args.vertex {
        Some(text) => {
            let id = argus_engine::diagnosis::parse_vertex(text)?;
            let about = report
                .path
                .iter()
                .find(|p| p.segment == id)
                .map(|p| p.description.clone())
                .unwrap_or_default();
            (id, about)
        }
        None => match report.root_causes.last() {
            Some(c) => (c.segment, c.reason.clone()),
            None => (report.hang.segment, String::new()),
        },
    };
    let seg = graph
        .segment(id)
        .with_context(|| format!("there is no vertex {id} in {}", snapshot.display()))?;
    let (start, end) = (seg.start_ns.0, graph.end_of(seg).0);
    let info = graph.thread(id.tid());
    let stacks = argus_sinks::read_stacks(snapshot)
        .with_context(|| format!("reading the stacks of {}", snapshot.display()))?;
    let (stack_functions, probes) = functions_and_probes(
        stacks
            .iter()
            .filter(|s| s.tid == id.tid().0 && s.ts >= start && s.ts <= end)
            .flat_map(|s| &s.frames),
    );
    Ok(Subject {
        vertex: id.to_string(),
        tid: id.tid().0,
        pid: seg.pid.0,
        comm: info.map(|t| t.comm.clone()).unwrap_or_default(),
        process: info.map(|t| t.process.clone()).unwrap_or_default(),
        start_ns: start,
        end_ns: end,
        about,
        stack_functions,
        probes,
        hang: report.summary.clone(),
        hung_comm: report.hang.comm.clone(),
    })
}

/// At most this many call probes (each costs a trap per call).
const MAX_PROBES: usize = 4;

/// The user functions of a vertex's stacks, in order of first appearance, and the call
/// probes (`object:function`) for the application's own among them ([`probe_worthy`], at
/// most [`MAX_PROBES`]). A function inlined where the stack was taken (no offset of its
/// own) is named but not probed: its calls have no entry a probe could trap.
fn functions_and_probes<'a>(
    frames: impl Iterator<Item = &'a argus_sinks::StackFrame>,
) -> (Vec<String>, Vec<String>) {
    let mut functions: Vec<String> = Vec::new();
    let mut probes: Vec<String> = Vec::new();
    for f in frames.filter(|f| !f.kernel) {
        let Some(name) = &f.symbol else { continue };
        if !functions.contains(name) {
            functions.push(name.clone());
        }
        if let Some(object) = f.object.as_deref().filter(|_| f.offset.is_some()) {
            let spec = format!("{object}:{name}");
            if probe_worthy(object, name) && !probes.contains(&spec) && probes.len() < MAX_PROBES {
                probes.push(spec);
            }
        }
    }
    (functions, probes)
}

/// Whether a function of the vertex's stacks gets a call probe: the application's own code
/// (not a system library, not the Rust or C runtime), named so a uprobe can find it (a
/// closure's or shim's demangled name is not unique).
fn probe_worthy(object: &str, name: &str) -> bool {
    let system = ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"]
        .iter()
        .any(|d| object.starts_with(d));
    let runtime = [
        "std::", "core::", "alloc::", "<std::", "<core::", "<alloc::", "__rust", "_start",
    ]
    .iter()
    .any(|p| name.starts_with(p));
    object.starts_with('/')
        && !object.ends_with(" (deleted)")
        && !system
        && !runtime
        && !name.contains("{{")
        && !name.contains(char::is_whitespace)
}

/// The focused recording: the `argus record` arguments and the plan as printed.
fn plan(
    args: &DigArgs,
    subject: &Subject,
    source: Option<&Path>,
    out: &Path,
) -> Result<(RecordArgs, Plan)> {
    let meta = source.and_then(|dir| {
        let text = std::fs::read_to_string(argus_ingest::tracedir::meta_path(dir)).ok()?;
        serde_json::from_str::<argus_ingest::tracedir::TraceMeta>(&text).ok()
    });
    let command = if args.command.is_empty() {
        meta.as_ref()
            .and_then(|m| m.command.clone())
            .unwrap_or_default()
    } else {
        args.command.clone()
    };
    // The watchpoints of the original recording, on the same flags.
    let watch: Vec<String> = source
        .and_then(|dir| PerfTrace::open(dir).ok().flatten())
        .map(|t| {
            let mut specs: Vec<String> = t
                .streams()
                .iter()
                .filter_map(|s| match &s.kind {
                    StreamKind::Watch { spec, .. } => Some(spec.clone()),
                    _ => None,
                })
                .collect();
            specs.dedup();
            specs
        })
        .unwrap_or_default();
    let duration = match (command.is_empty(), args.duration) {
        (_, Some(d)) if !(d.is_finite() && d > 0.0) => {
            bail!("--duration must be a positive number of seconds, got {d}")
        }
        (true, None) if args.run => bail!(
            "nothing to record: the snapshot's trace recorded no command; give one after `--`, or --duration SECS to record system-wide"
        ),
        (_, d) => d,
    };
    let trace = out.join("trace");
    let record = RecordArgs {
        output: trace.clone(),
        duration,
        recording: RecordingArgs {
            stacks: Some("default".into()),
            profile: Some(args.hz),
            watch: watch.clone(),
            probe: subject.probes.clone(),
            ..RecordingArgs::default()
        },
        flush_interval: 1.0,
        command: command.clone(),
    };
    let mut argv: Vec<String> = ["argus", "record", "-o"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.push(trace.display().to_string());
    argv.extend([
        "--stacks".to_string(),
        "--profile".to_string(),
        args.hz.to_string(),
    ]);
    for w in &watch {
        argv.extend(["--watch".to_string(), w.clone()]);
    }
    for p in &subject.probes {
        argv.extend(["--probe".to_string(), p.clone()]);
    }
    if let Some(d) = duration {
        argv.extend(["--duration".to_string(), d.to_string()]);
    }
    if !command.is_empty() {
        argv.push("--".to_string());
        argv.extend(command);
    }
    Ok((
        record,
        Plan {
            argv,
            trace,
            snapshot: out.join("snapshot"),
            compare: Vec::new(),
        },
    ))
}

/// `argus dig` again on `snapshot` with the same target, comparing with `trace`.
fn compare_argv(args: &DigArgs, snapshot: &Path, trace: &Path) -> Vec<String> {
    let mut v = vec![
        "argus".to_string(),
        "dig".to_string(),
        snapshot.display().to_string(),
    ];
    let flags = [
        ("--pid", args.target.pid.map(|p| p.to_string())),
        ("--tid", args.target.tid.map(|t| t.to_string())),
        ("--comm", args.target.comm.clone()),
        ("--vertex", args.vertex.clone()),
        ("--threshold", Some(args.threshold.to_string())),
        ("--trace", Some(trace.display().to_string())),
    ];
    for (flag, value) in flags {
        if let Some(value) = value {
            v.push(flag.to_string());
            v.push(value);
        }
    }
    v
}

/// Builds the focused recording `trace` into `snap`, finds the subject's thread on the path
/// of its hang and compares its hung vertex with the rest of its life.
fn compare(
    args: &DigArgs,
    subject: &Subject,
    trace: &Path,
    snap: &Path,
    config: &DiagnoseConfig,
) -> Result<Compared> {
    let perf = PerfTrace::open(trace)
        .with_context(|| format!("reading the perf records of {}", trace.display()))?;
    let Some(perf) = perf.filter(|p| {
        p.streams()
            .iter()
            .any(|s| matches!(s.kind, StreamKind::Profile { .. }))
    }) else {
        bail!(
            "{} has no call-stack samples: record it with `argus record --profile` (the plan `argus dig` prints)",
            trace.display()
        );
    };
    let mut cfg = argus_engine::build::BuildConfig {
        traces: vec![trace.to_path_buf()],
        output: snap.to_path_buf(),
        ..Default::default()
    };
    cfg.dataflow.rules.spin_threshold_ns = config.hang.threshold_ns;
    let built = argus_engine::build::build(&cfg)
        .with_context(|| format!("building {}", trace.display()))?;
    eprintln!(
        "argus dig: built {}: {} events, {} segments, {} edges",
        snap.display(),
        built.events,
        built.segments,
        built.edges
    );
    let graph = crate::cmd::debug::load_graph(snap)?;
    let meta: argus_ingest::tracedir::TraceMeta = serde_json::from_str(
        &std::fs::read_to_string(argus_ingest::tracedir::meta_path(trace))
            .with_context(|| format!("reading {}/meta.json", trace.display()))?,
    )
    .with_context(|| format!("parsing {}/meta.json", trace.display()))?;
    // The same process: the recorded command's, else the one of the same name.
    let pid = match meta.command_pid {
        Some(p) => argus_schema::Pid(p),
        None => {
            argus_diagnose::target_by_comm(&graph, &subject_process(args, subject))
                .with_context(|| {
                    format!(
                        "no process named {:?} in {}",
                        subject_process(args, subject),
                        trace.display()
                    )
                })?
                .pid
        }
    };
    // The watched thread: the main one, or the one of the same name as `--tid`'s.
    let tid = match args.target.tid {
        Some(_) => graph
            .threads()
            .iter()
            .find(|t| t.pid == pid && t.comm == subject.hung_comm)
            .map(|t| t.tid),
        None => None,
    };
    let target = Target { pid, tid };
    let diagnosis = argus_diagnose::diagnose(&graph, Some(target), &mut AutoOracle, config)?;
    let report = diagnosis.report.with_context(|| {
        format!(
            "the hang did not come back in {}: {} has no hang of {} s or more (record longer, or until it recurs)",
            trace.display(),
            diagnosis.subject,
            args.threshold
        )
    })?;
    // The subject's thread on the new path: same thread name and process name.
    let same = |comm: &str, process: &str| comm == subject.comm && process == subject.process;
    let found = report
        .root_causes
        .iter()
        .rev()
        .find(|c| same(&c.comm, &c.process))
        .map(|c| c.segment)
        .or_else(|| {
            report
                .path
                .iter()
                .find(|p| same(&p.comm, &p.process))
                .map(|p| p.segment)
        })
        .with_context(|| {
            format!(
                "the new hang ({}) does not go through thread {} of {}: it is another hang; dig into it with `argus dig {}`",
                report.summary,
                subject.comm,
                subject.process,
                snap.display()
            )
        })?;
    let seg = graph.segment(found).context("the vertex on the new path")?;
    let window = (seg.start_ns.0, graph.end_of(seg).0);
    let thread = found.tid();
    let span = thread_span(&graph, thread).unwrap_or(window);
    let samples = symbolized_samples(&perf, trace, thread)?;
    let (syscalls, calls) = syscalls_and_calls(snap, thread, window, span.1)?;
    let diff = profile_diff(&samples.0, &syscalls, &[window], span);
    Ok(Compared {
        trace: trace.to_path_buf(),
        vertex: found.to_string(),
        tid: thread.0,
        comm: graph.comm(thread),
        hung_windows: vec![window],
        lost_samples: samples.1,
        diff,
        calls,
    })
}

fn subject_process(args: &DigArgs, subject: &Subject) -> String {
    args.target
        .comm
        .clone()
        .unwrap_or_else(|| subject.process.clone())
}

/// The first and last moments of a thread's segments.
fn thread_span(graph: &Graph, tid: Tid) -> Option<(u64, u64)> {
    let first = graph.thread_segments(tid).next()?;
    let last = graph.thread_segments(tid).next_back()?;
    Some((first.start_ns.0, graph.end_of(last).0))
}

/// The profile samples of thread `tid`, unwound and symbolized (kernel frames, then user
/// frames, innermost first), and the samples lost.
fn symbolized_samples(
    perf: &PerfTrace,
    trace: &Path,
    tid: Tid,
) -> Result<(Vec<ProfileSample>, u64)> {
    let found = perf
        .profile_samples(|s| s.tid == tid.0)
        .with_context(|| format!("reading the call-stack samples of {}", trace.display()))?;
    let kallsyms = std::fs::File::open(argus_ingest::tracedir::kallsyms_path(trace))
        .ok()
        .and_then(|f| argus_ingest::kallsyms::Kallsyms::from_zstd(f).ok());
    let mut sym = Symbolizer::new(kallsyms, &perf.maps_files());
    let name = |f: argus_ingest::symbolize::SymFrame| {
        f.symbol.unwrap_or_else(|| {
            format!(
                "{:#x} ({})",
                f.ip,
                f.object.as_deref().unwrap_or("unknown object")
            )
        })
    };
    let mut out = Vec::with_capacity(found.samples.len());
    for s in &found.samples {
        let mut frames = Vec::new();
        for f in sym.sample_frames(s) {
            // A user address no mapping holds ends the walk: what follows is read from stack
            // slots that are not frames (the frame-pointer chain beyond the copied stack
            // through code built without frame pointers).
            if !f.kernel && f.object.is_none() {
                break;
            }
            frames.push(name(f));
        }
        out.push(ProfileSample { ts: s.time, frames });
    }
    Ok((out, found.lost))
}

/// Syscalls entered: (time, name).
type Syscalls = Vec<(u64, String)>;

/// The syscalls thread `tid` entered, with their times, and its calls of probed functions
/// (`argus:call-begin/end` markers) split at the hung `window`; a call still open at the
/// end of the trace ends at `end`.
fn syscalls_and_calls(
    snap: &Path,
    tid: Tid,
    window: (u64, u64),
    end: u64,
) -> Result<(Syscalls, Vec<CallShare>)> {
    use argus_schema::markers::{parse, Marker};
    let mut syscalls = Vec::new();
    let mut open: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    let mut done: Vec<(String, u64, u64)> = Vec::new();
    let events = argus_sinks::read_events(snap)
        .with_context(|| format!("reading the events of {}", snap.display()))?;
    for ev in events {
        let ev = ev.with_context(|| format!("reading the events of {}", snap.display()))?;
        if ev.tid != tid {
            continue;
        }
        match &ev.kind {
            EventKind::SysEnter { nr, .. } => {
                syscalls.push((ev.ts.0, argus_schema::syscalls::name(*nr)));
            }
            EventKind::Marker { text } => match parse(text) {
                Some(Marker::CallBegin(f)) => open.entry(f.to_string()).or_default().push(ev.ts.0),
                Some(Marker::CallEnd(f)) => {
                    if let Some(start) = open.get_mut(f).and_then(Vec::pop) {
                        done.push((f.to_string(), start, ev.ts.0));
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    for (f, starts) in open {
        done.extend(starts.into_iter().map(|s| (f.clone(), s, end.max(s))));
    }
    Ok((syscalls, call_shares(&done, window)))
}

/// Per function, the calls `(function, start, end)` that began inside `window` and the
/// rest, with their time inside and outside it.
fn call_shares(calls: &[(String, u64, u64)], window: (u64, u64)) -> Vec<CallShare> {
    let mut by: std::collections::BTreeMap<&str, CallShare> = Default::default();
    for (f, start, end) in calls {
        let c = by.entry(f.as_str()).or_insert_with(|| CallShare {
            function: f.clone(),
            ..CallShare::default()
        });
        let inside = end.min(&window.1).saturating_sub(*start.max(&window.0));
        let len = end.saturating_sub(*start);
        if *start >= window.0 && *start < window.1 {
            c.hung_calls += 1;
        } else {
            c.normal_calls += 1;
        }
        c.hung_ns += inside;
        c.normal_ns += len - inside.min(len);
    }
    by.into_values().collect()
}

/// A command line as a shell would take it back.
fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@,+%#".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The report for a terminal.
fn text(r: &DigReport) -> String {
    use std::fmt::Write as _;
    let s = &r.subject;
    let mut t = String::new();
    let _ = writeln!(t, "Hang: {}", s.hang);
    let _ = writeln!(
        t,
        "Dig into {}: thread {} (tid {}) of {} (pid {}), {:.3} s{}",
        s.vertex,
        s.comm,
        s.tid,
        s.process,
        s.pid,
        (s.end_ns - s.start_ns) as f64 / 1e9,
        if s.about.is_empty() {
            String::new()
        } else {
            format!(": {}", s.about)
        }
    );
    if !s.stack_functions.is_empty() {
        let _ = writeln!(
            t,
            "  its stacks at waits and wake-ups: {}",
            s.stack_functions.join(", ")
        );
    }
    let _ = writeln!(
        t,
        "Focused recording (call stacks sampled while it runs, stacks at its waits):\n  {}",
        shell_line(&r.plan.argv)
    );
    let Some(c) = &r.compared else {
        let _ = writeln!(
            t,
            "Then compare (or make it and compare at once with --run):\n  {}",
            shell_line(&r.plan.compare)
        );
        return t;
    };
    let d = &c.diff;
    let _ = writeln!(
        t,
        "In {}: the hang came back through {} (thread {}, tid {}): {:.3} s.",
        c.trace.display(),
        c.vertex,
        c.comm,
        c.tid,
        c.hung_windows
            .iter()
            .map(|(a, b)| (b - a) as f64 / 1e9)
            .sum::<f64>()
    );
    let _ = writeln!(
        t,
        "Call stacks: {} samples in the hung vertex, {} in its normal runs{}.",
        d.hung_samples,
        d.normal_samples,
        if c.lost_samples > 0 {
            format!(" ({} samples lost)", c.lost_samples)
        } else {
            String::new()
        }
    );
    let share = |name: &str, hung: bool| {
        d.functions
            .iter()
            .find(|f| f.function == name)
            .map(|f| pct(if hung { f.hung } else { f.normal }))
            .unwrap_or_default()
    };
    if d.normal_samples == 0 {
        let _ = writeln!(
            t,
            "  no normal run to compare with: the thread ran only in the hang"
        );
    }
    for (what, list, hung) in [
        ("the hang", &d.only_in_hang, true),
        ("the normal runs", &d.only_in_normal, false),
    ] {
        if !list.is_empty() {
            let named: Vec<String> = list
                .iter()
                .map(|f| format!("{f} ({})", share(f, hung)))
                .collect();
            let _ = writeln!(t, "  only in {what}: {}", named.join(", "));
        }
    }
    if !d.functions.is_empty() {
        let _ = writeln!(
            t,
            "  {:<56} {:>7} {:>7} {:>9} {:>9}",
            "function (share of samples: on the stack, on top)",
            "hung",
            "normal",
            "hung top",
            "norm top"
        );
    }
    for f in d.functions.iter().take(12) {
        let name: String = f.function.chars().take(56).collect();
        let _ = writeln!(
            t,
            "  {name:<56} {:>7} {:>7} {:>9} {:>9}",
            pct(f.hung),
            pct(f.normal),
            pct(f.hung_self),
            pct(f.normal_self)
        );
    }
    if !c.calls.is_empty() {
        let _ = writeln!(t, "Calls of the probed functions:");
        for call in &c.calls {
            let _ = writeln!(
                t,
                "  {:<40} hung {:>5} calls, {:.3} s   normal {:>5} calls, {:.3} s",
                call.function,
                call.hung_calls,
                call.hung_ns as f64 / 1e9,
                call.normal_calls,
                call.normal_ns as f64 / 1e9
            );
        }
    }
    if !d.syscalls.is_empty() {
        let _ = writeln!(
            t,
            "Syscalls per second: {:.3} s hung, {:.3} s normal",
            d.hung_ns as f64 / 1e9,
            d.normal_ns as f64 / 1e9
        );
        // A rate over a few milliseconds says nothing.
        let rate = |per_s: f64, ns: u64| {
            if ns >= 10_000_000 {
                format!("{per_s:>8.1}/s")
            } else {
                format!("{:>10}", "-")
            }
        };
        for sc in d.syscalls.iter().take(8) {
            let _ = writeln!(
                t,
                "  {:<20} hung {:>5} ({})   normal {:>5} ({})",
                sc.syscall,
                sc.hung,
                rate(sc.hung_per_s, d.hung_ns),
                sc.normal,
                rate(sc.normal_per_s, d.normal_ns)
            );
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_where_they_begin_and_timed_on_each_side() {
        let calls = vec![
            ("f".to_string(), 0, 10),
            ("f".to_string(), 95, 130),
            ("f".to_string(), 150, 160),
            ("g".to_string(), 120, 300),
        ];
        let c = call_shares(&calls, (100, 200));
        assert_eq!(
            c[0],
            CallShare {
                function: "f".into(),
                hung_calls: 1,
                hung_ns: 30 + 10,
                normal_calls: 2,
                normal_ns: 10 + 5,
            }
        );
        assert_eq!(
            (c[1].hung_calls, c[1].hung_ns, c[1].normal_ns),
            (1, 80, 100)
        );
    }

    #[test]
    fn probes_go_on_the_applications_own_named_functions() {
        assert!(probe_worthy("/srv/app/bin/server", "handle_request"));
        assert!(probe_worthy("/usr/bin/app", "app::io::flush"));
        assert!(!probe_worthy("/usr/lib/x86_64-linux-gnu/libc.so.6", "read"));
        assert!(!probe_worthy("/usr/bin/app", "std::thread::park"));
        assert!(!probe_worthy("/usr/bin/app", "app::main::{{closure}}"));
        assert!(!probe_worthy("[vdso]", "clock_gettime"));
    }

    /// Inlined functions are named among the stack's functions, never probed; kernel
    /// frames are neither; the probes stop at [`MAX_PROBES`].
    #[test]
    fn inlined_functions_are_named_but_not_probed() {
        let frame = |kernel, name: &str, offset| argus_sinks::StackFrame {
            kernel,
            depth: 0,
            ip: 0x1000,
            symbol: Some(name.to_string()),
            offset,
            object: Some("/srv/app/bin/server".to_string()),
        };
        let mut frames = vec![
            frame(true, "do_sys_poll", Some(4)),
            frame(false, "app::parse_header", None),
            frame(false, "app::handle_request", Some(16)),
            frame(false, "app::handle_request", Some(16)),
        ];
        frames.extend((0..6).map(|i| frame(false, &format!("app::f{i}"), Some(1))));
        let (functions, probes) = functions_and_probes(frames.iter());
        assert_eq!(
            &functions[..2],
            ["app::parse_header", "app::handle_request"]
        );
        assert_eq!(functions.len(), 8);
        assert_eq!(
            probes,
            [
                "/srv/app/bin/server:app::handle_request",
                "/srv/app/bin/server:app::f0",
                "/srv/app/bin/server:app::f1",
                "/srv/app/bin/server:app::f2",
            ]
        );
    }

    #[test]
    fn shell_lines_quote_what_a_shell_would_split() {
        let argv: Vec<String> = ["argus", "record", "--", "sh", "-c", "sleep 3; it's"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            shell_line(&argv),
            r"argus record -- sh -c 'sleep 3; it'\''s'"
        );
    }
}
