//! Diagnosis at the paper's Chromium scale: 2.7M vertices, 3.6M edges (Argus §2.3).
//!
//! A real recorded snapshot (`ARGUS_BENCH_SNAPSHOT=DIR`, else the bundled demo recording,
//! built with `cargo run --release -- demo --bundled --keep`) is replicated with tid offsets
//! until it has at least 2.7M segments; its edges are replicated with it, plus weak wake-up
//! edges between consecutive replicas (the same edges, their source moved one replica back)
//! until there are at least 3.6M edges. The scaled tables are written as a Parquet snapshot.
//!
//! Measured (release build), against the unscaled snapshot in the same run:
//! - load: `read_snapshot_tables` + `Graph::new`;
//! - `--auto` diagnosis of the demo's hang in the last replica;
//! - each interactive step: the longest time between two questions (or from the start to
//!   the first question, or from the last to the end) in a diagnosis answered by an oracle,
//!   and one beam search of the ranked paths from the hang.
//!
//! Targets: load + auto diagnosis ≤ 2 s; an interactive step ≤ 50 ms.
//!
//! `cargo bench -p argus-diagnose --bench scale`

use argus_diagnose::{
    diagnose, AutoOracle, DiagnoseConfig, Graph, GraphInput, Oracle, Question, Reply, Target,
};
use argus_schema::{
    CausalEdge, EdgeKind, Pid, Segment, SegmentId, Spin, Strength, ThreadInfo, Tid,
};
use argus_sinks::{read_snapshot_tables, write_snapshot, SnapshotData, SnapshotInfo};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TARGET_SEGMENTS: usize = 2_700_000;
const TARGET_EDGES: usize = 3_600_000;

fn fail(msg: String) -> ! {
    eprintln!("scale bench: {msg}");
    std::process::exit(2);
}

/// A real snapshot: the one named by ARGUS_BENCH_SNAPSHOT, or the bundled demo's.
fn source_snapshot(keep: &Path) -> (PathBuf, Option<i32>) {
    if let Ok(dir) = std::env::var("ARGUS_BENCH_SNAPSHOT") {
        let pid = std::env::var("ARGUS_BENCH_PID")
            .ok()
            .and_then(|p| p.parse().ok());
        return (PathBuf::from(dir), pid);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo)
        .current_dir(&root)
        .args([
            "run",
            "--release",
            "-q",
            "--",
            "demo",
            "--bundled",
            "--keep",
        ])
        .arg(keep)
        .output()
        .unwrap_or_else(|e| fail(format!("running the demo: {e}")));
    if !out.status.success() {
        fail(format!(
            "the demo failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let pid = text
        .lines()
        .find_map(|l| l.strip_prefix("Try: argus debug "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|p| p.parse().ok());
    (keep.join("snapshot"), pid)
}

fn shift_tid(t: Tid, r: i32, off: i32, cpus: i32) -> Tid {
    if t.0 < 0 {
        Tid(t.0 - r * cpus)
    } else if t.0 == 0 {
        t
    } else {
        Tid(t.0 + r * off)
    }
}

fn shift_id(id: SegmentId, r: i32, off: i32, cpus: i32) -> SegmentId {
    SegmentId::new(shift_tid(id.tid(), r, off, cpus), id.seq())
}

struct Scaled {
    segments: Vec<Segment>,
    edges: Vec<CausalEdge>,
    spins: Vec<Spin>,
    threads: Vec<ThreadInfo>,
    replicas: i32,
    off: i32,
}

fn scale(
    segments: &[Segment],
    edges: &[CausalEdge],
    spins: &[Spin],
    threads: &[ThreadInfo],
) -> Scaled {
    let max_tid = segments.iter().map(|s| s.tid.0).max().unwrap_or(1).max(1);
    let cpus = segments.iter().map(|s| -s.tid.0).max().unwrap_or(0).max(1);
    let off = max_tid + 1;
    let replicas = TARGET_SEGMENTS.div_ceil(segments.len().max(1)) as i32;
    if (replicas as i64) * (off as i64) >= i32::MAX as i64 {
        fail(format!(
            "{replicas} replicas of tids up to {max_tid} overflow i32"
        ));
    }
    let mut out = Scaled {
        segments: Vec::with_capacity(segments.len() * replicas as usize),
        edges: Vec::with_capacity(TARGET_EDGES + edges.len()),
        spins: Vec::new(),
        threads: Vec::new(),
        replicas,
        off,
    };
    let cross: Vec<&CausalEdge> = edges
        .iter()
        .filter(|e| e.kind != EdgeKind::ThreadOrder)
        .collect();
    let per_replica_extra = (TARGET_EDGES.saturating_sub(edges.len() * replicas as usize))
        .div_ceil((replicas as usize).saturating_sub(1).max(1));
    for r in 0..replicas {
        let pid = |p: Pid| {
            Pid(if p.0 > 0 {
                p.0 + r * off
            } else {
                p.0 - r * cpus
            })
        };
        for s in segments {
            let mut s = s.clone();
            s.id = shift_id(s.id, r, off, cpus);
            s.tid = shift_tid(s.tid, r, off, cpus);
            s.pid = pid(s.pid);
            out.segments.push(s);
        }
        for e in edges {
            let mut e = e.clone();
            e.src = shift_id(e.src, r, off, cpus);
            e.dst = shift_id(e.dst, r, off, cpus);
            out.edges.push(e);
        }
        if r > 0 && !cross.is_empty() {
            for i in 0..per_replica_extra {
                let e = cross[i % cross.len()];
                out.edges.push(CausalEdge {
                    src: shift_id(e.src, r - 1, off, cpus),
                    dst: shift_id(e.dst, r, off, cpus),
                    kind: EdgeKind::Wakeup,
                    strength: Strength::Weak,
                    ts: e.ts,
                    src_syscall: e.src_syscall,
                });
            }
        }
        for s in spins {
            let mut s = s.clone();
            s.segment = shift_id(s.segment, r, off, cpus);
            s.last = shift_id(s.last, r, off, cpus);
            s.tid = shift_tid(s.tid, r, off, cpus);
            s.pid = pid(s.pid);
            out.spins.push(s);
        }
        for t in threads {
            let mut t = t.clone();
            t.tid = shift_tid(t.tid, r, off, cpus);
            t.pid = pid(t.pid);
            t.parent = t.parent.map(|p| shift_tid(p, r, off, cpus));
            out.threads.push(t);
        }
    }
    out
}

fn load(dir: &Path) -> Graph {
    let t = Instant::now();
    let snap = read_snapshot_tables(dir, false).unwrap_or_else(|e| fail(format!("{e}")));
    eprintln!("  (reading the tables: {:.1} ms)", ms(t.elapsed()));
    Graph::new(GraphInput {
        segments: snap.segments,
        edges: snap.edges,
        spins: snap.spins,
        threads: snap.threads,
        trace_end_ns: snap.manifest.trace_end_ns.unwrap_or_default(),
    })
    .unwrap_or_else(|e| fail(format!("{e}")))
}

/// Times the computation between questions.
struct StepTimer {
    last: Instant,
    steps: Vec<Duration>,
}

impl Oracle for StepTimer {
    fn ask(&mut self, _q: &Question) -> Reply {
        self.steps.push(self.last.elapsed());
        let r = Reply::Default;
        self.last = Instant::now();
        r
    }
}

struct Figures {
    load: Duration,
    auto: Duration,
    max_step: Duration,
    steps: usize,
    beam: Duration,
    found: bool,
}

fn measure(dir: &Path, target: Target) -> Figures {
    let t = Instant::now();
    let g = load(dir);
    let load_t = t.elapsed();
    let cfg = DiagnoseConfig::default();
    let t = Instant::now();
    let d =
        diagnose(&g, Some(target), &mut AutoOracle, &cfg).unwrap_or_else(|e| fail(format!("{e}")));
    let auto = t.elapsed();
    let mut timer = StepTimer {
        last: Instant::now(),
        steps: Vec::new(),
    };
    let _ = diagnose(&g, Some(target), &mut timer, &cfg);
    timer.steps.push(timer.last.elapsed());
    let max_step = timer.steps.iter().copied().max().unwrap_or_default();
    let beam = match d.report.as_ref().and_then(|r| g.segment(r.hang.segment)) {
        Some(s) => {
            let t = Instant::now();
            let _ = argus_diagnose::beam::search(&g, s, (s.start_ns, g.end_of(s)), &cfg.beam);
            t.elapsed()
        }
        None => Duration::ZERO,
    };
    Figures {
        load: load_t,
        auto,
        max_step,
        steps: timer.steps.len(),
        beam,
        found: d.report.is_some(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| fail(format!("tempdir: {e}")));
    let (src, pid) = source_snapshot(&tmp.path().join("demo"));
    let snap = read_snapshot_tables(&src, false).unwrap_or_else(|e| fail(format!("{e}")));
    let pid = pid
        .or_else(|| {
            snap.spins
                .iter()
                .filter(|s| s.tid.0 == s.pid.0)
                .max_by_key(|s| s.end_ns.0 - s.start_ns.0)
                .map(|s| s.pid.0)
        })
        .unwrap_or_else(|| fail("no hang in the source snapshot".into()));
    eprintln!(
        "source snapshot {}: {} segments, {} edges; hang in pid {pid}",
        src.display(),
        snap.segments.len(),
        snap.edges.len()
    );
    let t = Instant::now();
    let scaled = scale(&snap.segments, &snap.edges, &snap.spins, &snap.threads);
    let last = scaled.replicas - 1;
    let big = tmp.path().join("scaled");
    let (nseg, nedge) = (scaled.segments.len(), scaled.edges.len());
    let data = SnapshotData {
        info: SnapshotInfo {
            trace_start_ns: snap.manifest.trace_start_ns,
            trace_end_ns: snap.manifest.trace_end_ns,
            ..SnapshotInfo::default()
        },
        events: Vec::new(),
        segments: scaled.segments,
        edges: scaled.edges,
        spins: scaled.spins,
        threads: scaled.threads,
        errors: Vec::new(),
    };
    write_snapshot(&big, &data).unwrap_or_else(|e| fail(format!("{e}")));
    drop(data);
    eprintln!(
        "scaled ×{} to {nseg} segments and {nedge} edges, written in {:.1} s",
        scaled.replicas,
        t.elapsed().as_secs_f64()
    );

    let small = measure(
        &src,
        Target {
            pid: Pid(pid),
            tid: None,
        },
    );
    let target = Target {
        pid: Pid(pid + last * scaled.off),
        tid: None,
    };
    let large = measure(&big, target);
    if !small.found || !large.found {
        fail("the hang was not found".into());
    }
    let total = large.load + large.auto;
    println!("diagnosis at Chromium scale ({nseg} vertices, {nedge} edges):");
    println!(
        "  load (Parquet + graph)   {:>9.1} ms   (unscaled: {:.1} ms, ×{:.0})",
        ms(large.load),
        ms(small.load),
        ms(large.load) / ms(small.load).max(0.001)
    );
    println!(
        "  --auto diagnosis         {:>9.1} ms   (unscaled: {:.1} ms, ×{:.1})",
        ms(large.auto),
        ms(small.auto),
        ms(large.auto) / ms(small.auto).max(0.001)
    );
    println!(
        "  load + --auto            {:>9.1} ms   target ≤ 2000 ms: {}",
        ms(total),
        if total <= Duration::from_secs(2) {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "  longest interactive step {:>9.2} ms over {} steps (unscaled {:.2} ms); target ≤ 50 ms: {}",
        ms(large.max_step),
        large.steps,
        ms(small.max_step),
        if large.max_step <= Duration::from_millis(50) { "met" } else { "MISSED" }
    );
    println!(
        "  one ranked-path beam search {:>6.2} ms (unscaled {:.2} ms)",
        ms(large.beam),
        ms(small.beam)
    );
}
