//! Exports of the event graph for people: Chrome trace-event JSON (opened by
//! ui.perfetto.dev and chrome://tracing) and Graphviz DOT of a diagnosed path; plus
//! [`read_app_events`], the selective reader of the few application events (markers, data-flag
//! hits) that diagnosis needs out of the (large) events table.
//!
//! ```text
//!  Perfetto JSON (the "JSON Array Format" of the Trace Event Format):
//!   M process_name / thread_name   one track per thread, named "comm tid"
//!   X segment (run + wait)          nested X "wait: SYSCALL" for the blocked part
//!   s ──id──► f (bp "e")            a causal edge: from the causing segment at the edge's
//!                                   time to the start of the caused segment
//!   b … e  (async, cat argus.hang)  the hang window, on the hung thread's process
//!   i  (cat argus.path)             "① …" marks on every segment of the diagnosed path; path
//!                                   edges are flows of cat argus.path
//! ```
//!
//! Times are microseconds (floating point) since the earliest exported segment, as the format
//! wants. Interrupt pseudo-threads (negative tids) are exported in a process of their own,
//! pid 0 "kernel interrupts", with tid `0x4000_0000 + cpu`.

use crate::error::SinkError;
use crate::from_arrow::{decode_events, At};
use crate::manifest::Manifest;
use crate::table::Table;
use argus_schema::{CausalEdge, EdgeKind, Event, Nanos, Pid, Segment, SegmentId, ThreadInfo, Tid};
use arrow::array::{Array, AsArray, BooleanArray};
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ParquetRecordBatchReaderBuilder, RowFilter};
use parquet::arrow::ProjectionMask;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// A segment of the diagnosed path to mark.
#[derive(Clone, Debug, PartialEq)]
pub struct PathMark {
    /// The segment.
    pub segment: SegmentId,
    /// Its step number on the path (1 = the hang).
    pub step: usize,
    /// A short label (thread and what it did).
    pub label: String,
    /// Whether it is a root cause.
    pub root: bool,
}

/// An edge of the diagnosed path: `src` caused `dst`.
#[derive(Clone, Debug, PartialEq)]
pub struct EdgeMark {
    /// The causing segment.
    pub src: SegmentId,
    /// The caused segment.
    pub dst: SegmentId,
    /// Edge kind name (`wakeup`, `baseline`, …).
    pub kind: String,
    /// Strength name.
    pub strength: String,
}

/// What to mark in an export.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marks {
    /// The hang: thread, window and a title.
    pub hang: Option<(Tid, Nanos, Nanos, String)>,
    /// The diagnosed path, hang first.
    pub path: Vec<PathMark>,
    /// Its edges.
    pub path_edges: Vec<EdgeMark>,
}

/// What [`write_perfetto`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfettoStats {
    /// Threads (tracks).
    pub threads: usize,
    /// Segment slices.
    pub slices: usize,
    /// Flow arrows (causal edges).
    pub flows: usize,
}

const IRQ_PID: i64 = 0;
const IRQ_TID_BASE: i64 = 0x4000_0000;

fn track(seg_tid: Tid, pid: Pid) -> (i64, i64) {
    match seg_tid.irq_cpu() {
        Some(cpu) => (IRQ_PID, IRQ_TID_BASE + cpu.0 as i64),
        None => (pid.0 as i64, seg_tid.0 as i64),
    }
}

fn us(t: Nanos, base: Nanos) -> f64 {
    base.until(t) as f64 / 1000.0
}

/// Writes Chrome trace-event JSON of `segments` and `edges` (thread-order edges are left
/// out: the track shows them). With `only_pid`, only that process' threads and the threads
/// of marked segments are exported. `end_of` gives a segment's end (open segments: the trace
/// end).
pub fn write_perfetto<W: Write>(
    out: W,
    segments: &[Segment],
    edges: &[CausalEdge],
    threads: &[ThreadInfo],
    marks: &Marks,
    only_pid: Option<Pid>,
    end_of: &dyn Fn(&Segment) -> Nanos,
) -> Result<PerfettoStats, std::io::Error> {
    let marked: HashSet<SegmentId> = marks.path.iter().map(|m| m.segment).collect();
    let marked_tids: HashSet<Tid> = marks.path.iter().map(|m| m.segment.tid()).collect();
    let keep = |s: &Segment| match only_pid {
        None => true,
        Some(p) => (s.pid == p && s.tid.is_task()) || marked_tids.contains(&s.tid),
    };
    let kept: Vec<&Segment> = segments.iter().filter(|s| keep(s)).collect();
    let by_id: HashMap<SegmentId, &Segment> = kept.iter().map(|s| (s.id, *s)).collect();
    let base = kept.iter().map(|s| s.start_ns).min().unwrap_or_default();
    let info: HashMap<Tid, &ThreadInfo> = threads.iter().map(|t| (t.tid, t)).collect();
    let mut events: Vec<Value> = Vec::new();
    let mut stats = PerfettoStats::default();

    // Track metadata: one process and thread name per exported thread.
    let mut seen_tracks: HashSet<(i64, i64)> = HashSet::new();
    let mut seen_pids: HashSet<i64> = HashSet::new();
    for s in &kept {
        let (pid, tid) = track(s.tid, s.pid);
        if !seen_tracks.insert((pid, tid)) {
            continue;
        }
        let (pname, tname) = match s.tid.irq_cpu() {
            Some(cpu) => ("kernel interrupts".to_string(), format!("irq/cpu{}", cpu.0)),
            None => match info.get(&s.tid) {
                Some(t) => (
                    format!(
                        "{} {}",
                        if t.process.is_empty() {
                            &t.comm
                        } else {
                            &t.process
                        },
                        t.pid.0
                    ),
                    format!("{} {}", t.comm, t.tid.0),
                ),
                None => (format!("pid {}", s.pid.0), format!("tid {}", s.tid.0)),
            },
        };
        if seen_pids.insert(pid) {
            events.push(
                json!({"name": "process_name", "ph": "M", "pid": pid, "tid": tid,
                "args": {"name": pname}}),
            );
        }
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
            "args": {"name": tname}}),
        );
        stats.threads += 1;
    }

    // Segments: an X slice each, with its blocked part nested.
    for s in &kept {
        let (pid, tid) = track(s.tid, s.pid);
        let end = end_of(s).max(s.start_ns);
        let wait = argus_schema::syscalls::name(s.wait_syscall);
        let name = match (s.tid.irq_cpu(), s.wait_start_ns) {
            (Some(_), _) => s.kind.name().to_string(),
            (None, Some(_)) => format!("run → {wait}"),
            (None, None) => "run".to_string(),
        };
        let step = marks.path.iter().find(|m| m.segment == s.id);
        let mut args = json!({
            "segment": s.id.to_string(),
            "on_cpu_ms": s.on_cpu_ns as f64 / 1e6,
            "syscalls": s.syscalls,
            "start": s.start.name(),
            "end": s.end.name(),
        });
        if let Some(m) = step {
            args["path_step"] = json!(m.step);
            args["path"] = json!(m.label);
        }
        events.push(json!({"name": name, "cat": if marked.contains(&s.id) {"segment,argus.path"} else {"segment"},
            "ph": "X", "ts": us(s.start_ns, base), "dur": us(end, base) - us(s.start_ns, base),
            "pid": pid, "tid": tid, "args": args}));
        stats.slices += 1;
        if let Some(w) = s.wait_start_ns.filter(|w| *w < end && *w >= s.start_ns) {
            events.push(
                json!({"name": format!("wait: {wait}"), "cat": "wait", "ph": "X",
                "ts": us(w, base), "dur": us(end, base) - us(w, base), "pid": pid, "tid": tid,
                "args": {"ret": s.wait_ret}}),
            );
        }
    }

    // Causal edges as flows.
    let path_pairs: HashSet<(SegmentId, SegmentId)> =
        marks.path_edges.iter().map(|e| (e.src, e.dst)).collect();
    let mut flow_id: u64 = 0;
    for e in edges {
        if e.kind == EdgeKind::ThreadOrder {
            continue;
        }
        let (Some(src), Some(dst)) = (by_id.get(&e.src), by_id.get(&e.dst)) else {
            continue;
        };
        flow_id += 1;
        let on_path = path_pairs.contains(&(e.src, e.dst));
        let cat = if on_path { "edge,argus.path" } else { "edge" };
        let name = format!("{} ({})", e.kind.name(), e.strength.name());
        let (sp, st) = track(src.tid, src.pid);
        let (dp, dt) = track(dst.tid, dst.pid);
        let ts = e.ts.max(src.start_ns).min(end_of(src));
        events.push(json!({"name": name, "cat": cat, "ph": "s", "id": flow_id,
            "ts": us(ts, base), "pid": sp, "tid": st}));
        events.push(
            json!({"name": name, "cat": cat, "ph": "f", "bp": "e", "id": flow_id,
            "ts": us(dst.start_ns, base), "pid": dp, "tid": dt}),
        );
        stats.flows += 1;
    }
    // Path edges that are not graph edges (baseline comparisons, guessed flags).
    for m in &marks.path_edges {
        let (Some(src), Some(dst)) = (by_id.get(&m.src), by_id.get(&m.dst)) else {
            continue;
        };
        if edges
            .iter()
            .any(|e| e.src == m.src && e.dst == m.dst && e.kind.name() == m.kind)
        {
            continue;
        }
        flow_id += 1;
        let name = format!("{} ({})", m.kind, m.strength);
        let (sp, st) = track(src.tid, src.pid);
        let (dp, dt) = track(dst.tid, dst.pid);
        events.push(
            json!({"name": name, "cat": "edge,argus.path", "ph": "s", "id": flow_id,
            "ts": us(src.start_ns, base), "pid": sp, "tid": st}),
        );
        events.push(
            json!({"name": name, "cat": "edge,argus.path", "ph": "f", "bp": "e",
            "id": flow_id, "ts": us(dst.start_ns.max(src.start_ns), base), "pid": dp, "tid": dt}),
        );
        stats.flows += 1;
    }

    // The hang and the path marks.
    if let Some((tid, from, to, title)) = &marks.hang {
        let pid = kept
            .iter()
            .find(|s| s.tid == *tid)
            .map_or(tid.0 as i64, |s| track(s.tid, s.pid).0);
        let t = track(*tid, Pid(pid as i32)).1;
        events.push(
            json!({"name": title, "cat": "argus.hang", "ph": "b", "id": 1,
            "ts": us(*from, base), "pid": pid, "tid": t}),
        );
        events.push(
            json!({"name": title, "cat": "argus.hang", "ph": "e", "id": 1,
            "ts": us(*to, base), "pid": pid, "tid": t}),
        );
    }
    for m in &marks.path {
        let Some(s) = by_id.get(&m.segment) else {
            continue;
        };
        let (pid, tid) = track(s.tid, s.pid);
        let name = if m.root {
            format!("root cause · step {}: {}", m.step, m.label)
        } else {
            format!("step {}: {}", m.step, m.label)
        };
        events.push(
            json!({"name": name, "cat": "argus.path", "ph": "i", "s": "t",
            "ts": us(s.start_ns, base), "pid": pid, "tid": tid}),
        );
    }
    let doc = json!({"traceEvents": events, "displayTimeUnit": "ms",
        "otherData": {"producer": "argus", "time_base_ns": base.0}});
    serde_json::to_writer(out, &doc)
        .map_err(std::io::Error::other)
        .map(|()| stats)
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes Graphviz DOT of a diagnosed path: one cluster per thread, the path's segments as
/// nodes (the hang bold, root causes filled), edges from cause to effect (weak ones dashed).
pub fn write_dot<W: Write>(
    mut out: W,
    marks: &Marks,
    threads: &[ThreadInfo],
) -> Result<(), std::io::Error> {
    writeln!(out, "digraph argus {{")?;
    writeln!(out, "  rankdir=RL;")?;
    writeln!(
        out,
        "  node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=10];"
    )?;
    writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=9];")?;
    if let Some((_, from, to, title)) = &marks.hang {
        writeln!(
            out,
            "  label=\"{}\\n{:.3} s\"; labelloc=t;",
            dot_escape(title),
            from.until(*to) as f64 / 1e9
        )?;
    }
    let mut lanes: Vec<Tid> = Vec::new();
    for m in &marks.path {
        let t = m.segment.tid();
        if !lanes.contains(&t) {
            lanes.push(t);
        }
    }
    for (i, t) in lanes.iter().enumerate() {
        let name = match t.irq_cpu() {
            Some(cpu) => format!("interrupts cpu{}", cpu.0),
            None => threads
                .iter()
                .find(|x| x.tid == *t)
                .map_or(format!("tid {}", t.0), |x| {
                    format!("{} {}", x.comm, x.tid.0)
                }),
        };
        writeln!(out, "  subgraph cluster_{i} {{")?;
        writeln!(out, "    label=\"{}\"; style=dashed;", dot_escape(&name))?;
        for m in marks.path.iter().filter(|m| m.segment.tid() == *t) {
            let style = if m.step == 1 {
                ", penwidth=2.5, color=\"#b00020\""
            } else if m.root {
                ", style=\"rounded,filled\", fillcolor=\"#ffd7d7\""
            } else {
                ""
            };
            writeln!(
                out,
                "    \"{}\" [label=\"{}. {}\"{style}];",
                m.segment,
                m.step,
                dot_escape(&m.label)
            )?;
        }
        writeln!(out, "  }}")?;
    }
    for e in &marks.path_edges {
        let style = match e.strength.as_str() {
            "weak" => ", style=dashed",
            _ => "",
        };
        writeln!(
            out,
            "  \"{}\" -> \"{}\" [label=\"{} ({})\"{style}];",
            e.src,
            e.dst,
            dot_escape(&e.kind),
            dot_escape(&e.strength)
        )?;
    }
    writeln!(out, "}}")
}

/// Reads only the markers and data-flag accesses of a snapshot's events table: a row filter
/// on the `kind` column skips decoding every other row, so this costs a scan of one
/// dictionary-encoded column. Checks the manifest, the file's schema and row count first.
pub fn read_app_events(dir: &Path) -> Result<Vec<Event>, SinkError> {
    let manifest = Manifest::read(dir)?;
    let path = dir.join(Table::Events.file_name());
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SinkError::MissingFile { path })
        }
        Err(e) => return Err(SinkError::io(path, "opening", e)),
    };
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| SinkError::Parquet {
            path: path.clone(),
            source,
        })?;
    crate::reader::check_schema(&path, builder.schema(), &Table::Events.schema())?;
    let found = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let expected = manifest.counts.get(Table::Events);
    if found != expected {
        return Err(SinkError::RowCount {
            path,
            found,
            expected,
        });
    }
    let mask = ProjectionMask::columns(builder.parquet_schema(), ["kind"]);
    let predicate = ArrowPredicateFn::new(mask, |batch| {
        let kinds = batch.column(0).as_string::<i32>();
        Ok(kinds
            .iter()
            .map(|k| Some(matches!(k, Some("marker" | "flag_access"))))
            .collect::<BooleanArray>())
    });
    let reader = builder
        .with_row_filter(RowFilter::new(vec![Box::new(predicate)]))
        .build()
        .map_err(|source| SinkError::Parquet {
            path: path.clone(),
            source,
        })?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|source| SinkError::Arrow {
            path: path.clone(),
            source,
        })?;
        if batch.num_rows() == 0 || batch.column(0).is_empty() {
            continue;
        }
        // Row numbers in errors count the selected rows only.
        decode_events(
            &batch,
            &At {
                path: &path,
                first_row: out.len() as u64,
            },
            &mut out,
        )?;
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{EndCause, SegmentKind, StartCause, Strength};

    fn seg(tid: i32, seq: u32, start: u64, wait: Option<u64>, end: u64) -> Segment {
        Segment {
            id: SegmentId::new(Tid(tid), seq),
            tid: Tid(tid),
            pid: Pid(tid.max(0)),
            kind: if tid < 0 {
                SegmentKind::Interrupt
            } else {
                SegmentKind::Task
            },
            start_ns: Nanos(start),
            end_ns: Nanos(end),
            start: StartCause::Woken,
            end: EndCause::Woken,
            wait_start_ns: wait.map(Nanos),
            wait_state: b'S',
            wait_syscall: 202,
            wait_ret: Some(0),
            wait_object: None,
            on_cpu_ns: 10,
            preemptions: 0,
            yields: 0,
            syscalls: 1,
            events: 3,
            syscall_seq: vec![202],
        }
    }

    #[test]
    fn perfetto_json_has_tracks_slices_and_matching_flows() {
        let a = seg(10, 0, 1_000, Some(2_000), 9_000);
        let b = seg(11, 0, 1_000, None, 8_500);
        let irq = seg(-1, 0, 8_400, None, 8_450);
        let edges = vec![
            CausalEdge {
                src: b.id,
                dst: SegmentId::new(Tid(10), 1),
                kind: EdgeKind::Wakeup,
                strength: Strength::Weak,
                ts: Nanos(8_500),
                src_syscall: 202,
            },
            CausalEdge {
                src: irq.id,
                dst: b.id,
                kind: EdgeKind::Wakeup,
                strength: Strength::Strong,
                ts: Nanos(8_420),
                src_syscall: -1,
            },
        ];
        let a1 = seg(10, 1, 9_000, None, 9_500);
        let segs = vec![a, a1, b, irq];
        let marks = Marks {
            hang: Some((Tid(10), Nanos(2_000), Nanos(9_000), "hang".into())),
            path: vec![PathMark {
                segment: SegmentId::new(Tid(10), 0),
                step: 1,
                label: "main".into(),
                root: false,
            }],
            path_edges: vec![],
        };
        let mut buf = Vec::new();
        let stats =
            write_perfetto(&mut buf, &segs, &edges, &[], &marks, None, &|s| s.end_ns).unwrap();
        assert_eq!(stats.threads, 3);
        assert_eq!(stats.flows, 2);
        let v: Value = serde_json::from_slice(&buf).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        let flows_s: Vec<u64> = evs
            .iter()
            .filter(|e| e["ph"] == "s")
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        let flows_f: Vec<u64> = evs
            .iter()
            .filter(|e| e["ph"] == "f")
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        assert_eq!(flows_s, flows_f);
        assert!(evs
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "irq/cpu0"));
    }

    #[test]
    fn dot_has_clusters_and_dashed_weak_edges() {
        let marks = Marks {
            hang: Some((Tid(10), Nanos(0), Nanos(3_000_000_000), "main hangs".into())),
            path: vec![
                PathMark {
                    segment: SegmentId::new(Tid(10), 0),
                    step: 1,
                    label: "main \"blocked\"".into(),
                    root: false,
                },
                PathMark {
                    segment: SegmentId::new(Tid(11), 2),
                    step: 2,
                    label: "worker".into(),
                    root: true,
                },
            ],
            path_edges: vec![EdgeMark {
                src: SegmentId::new(Tid(11), 2),
                dst: SegmentId::new(Tid(10), 0),
                kind: "wakeup".into(),
                strength: "weak".into(),
            }],
        };
        let mut buf = Vec::new();
        write_dot(&mut buf, &marks, &[]).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.starts_with("digraph argus {"));
        assert_eq!(text.matches("subgraph cluster_").count(), 2);
        assert!(text.contains("\"11#2\" -> \"10#0\" [label=\"wakeup (weak)\", style=dashed];"));
        assert!(text.contains("main \\\"blocked\\\""));
        assert!(text.contains("fillcolor"));
    }
}
