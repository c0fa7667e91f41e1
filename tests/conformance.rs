//! Conformance on others' recordings (`../shared/realtraces`, see its MANIFEST.txt): every
//! trace of `ftrace-text/`, every `trace.dat` and the SchedViz raw capture imports without error, with the event
//! counts the corpus documents, and builds into a non-empty event graph; the dataflow's final
//! graph equals the batch reference on each.

use argus_ingest::import::{self, Imported};
use argus_pipeline::dataflow::{collect_epochs, Batch, DataflowConfig};
use argus_pipeline::reference;
use argus_pipeline::rules::RulesConfig;
use std::path::PathBuf;

/// `../shared/realtraces`, or `None` after the SKIP line (a failure under
/// `ARGUS_REQUIRE_REALTRACES=1`).
fn realtraces() -> Option<PathBuf> {
    argus_testkit::realtraces(&argus_testkit::current_test())
}

/// Expected counts per event kind (from MANIFEST.txt / FORMATS.md, and `grep -c` of the
/// lines for the kinds they do not list).
type Expect = (&'static str, &'static str, &'static [(&'static str, u64)]);

const FTRACE_TEXT: &[Expect] = &[
    (
        "catapult_android_systrace.html",
        "systrace-html",
        &[("switch", 11_074), ("waking", 6_827), ("marker", 13_577)],
    ),
    (
        "catapult_atrace_data.txt",
        "ftrace-text",
        &[("switch", 72), ("waking", 44)],
    ),
    (
        "catapult_atrace_missing_tgids.txt",
        "ftrace-text",
        &[("switch", 72), ("waking", 44)],
    ),
    (
        "lisa_trace_report_raw.txt",
        "trace-cmd-report",
        &[("switch", 1_856), ("waking", 1_068), ("marker", 14)],
    ),
    (
        "tci_atrace-test.txt",
        "ftrace-text",
        &[("switch", 2_582), ("waking", 1_540), ("marker", 330)],
    ),
    (
        "tci_ftrace_syscalls.txt",
        "ftrace-text",
        &[
            ("switch", 60),
            ("waking", 30),
            ("sys_enter", 423),
            ("sys_exit", 419),
            ("fork", 1),
            ("exec", 1),
            ("exit", 2),
        ],
    ),
    (
        "tci_trace-android-sched-irq-syscall.txt",
        "ftrace-text",
        &[
            ("switch", 9),
            ("waking", 5),
            ("sys_enter", 51),
            ("sys_exit", 50),
            ("irq_entry", 2),
            ("softirq_entry", 8),
        ],
    ),
    (
        "tci_trace-android-sched-irq.txt",
        "ftrace-text",
        &[("switch", 67), ("waking", 45), ("softirq_entry", 9)],
    ),
    (
        "tci_trace-android-sched.txt",
        "ftrace-text",
        &[("switch", 82), ("waking", 57)],
    ),
    (
        "tci_trace-critical-path.txt",
        "ftrace-text",
        &[
            ("switch", 28),
            ("waking", 12),
            ("irq_entry", 2),
            ("softirq_entry", 7),
            ("hrtimer_start", 21),
            ("hrtimer_expire", 7),
            ("timer_start", 1),
        ],
    ),
    (
        "trappy_trace_surfaceflinger.html",
        "systrace-html",
        &[("switch", 715), ("waking", 421), ("marker", 158)],
    ),
];

/// Checks counts, then builds the graph with the reference and the dataflow.
fn check(name: &str, imported: &Imported, format: &str, expect: &[(&str, u64)]) {
    assert!(
        imported.errors().is_empty(),
        "{name}: {:?}",
        imported.errors()
    );
    assert_eq!(imported.format_name(), format, "{name}");
    let counts = imported.kind_counts();
    for &(kind, n) in expect {
        assert_eq!(counts.get(kind).copied().unwrap_or(0), n, "{name}: {kind}");
    }
    let events = imported.event_slice();
    assert!(
        events
            .windows(2)
            .all(|w| w[0].ts <= w[1].ts && w[0].seq + 1 == w[1].seq),
        "{name}: time-ordered, gapless seq"
    );
    assert!(!imported.threads().is_empty(), "{name}: threads");
    let watermark = events.last().map(|e| e.ts).unwrap_or_default();
    let want = reference::compute(events, watermark, &RulesConfig::default());
    assert!(
        !want.segments.is_empty() && !want.edges.is_empty(),
        "{name}: {} segments, {} edges",
        want.segments.len(),
        want.edges.len()
    );
    let batches: Vec<Batch> = events
        .chunks(4096)
        .map(|c| Batch {
            events: c.to_vec(),
            watermark: c.last().map(|e| e.ts).unwrap_or_default(),
        })
        .collect();
    let cfg = DataflowConfig {
        workers: 2,
        ..DataflowConfig::default()
    };
    let got = collect_epochs(&cfg, batches).expect("the dataflow runs");
    let (_, last) = got.last().expect("at least one epoch");
    assert!(
        last.segments == want.segments && last.edges == want.edges && last.spins == want.spins,
        "{name}: dataflow differs from the reference"
    );
    println!(
        "{name}: {} events ({counts:?}), {} threads, {} segments, {} edges, unknown {:?}",
        events.len(),
        imported.threads().len(),
        want.segments.len(),
        want.edges.len(),
        imported.summary().unknown
    );
}

#[test]
fn every_ftrace_text_trace_builds() {
    let Some(rt) = realtraces() else { return };
    let dir = rt.join("ftrace-text");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("ftrace-text lists") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let imported = import::open(&path).unwrap_or_else(|e| panic!("{name}: import failed: {e}"));
        if name == "perfetto_binder_txn_snippets.txt" {
            // Binder tracepoints only: nothing the schema maps; every record is counted.
            assert!(imported.event_slice().is_empty());
            let unknown: u64 = imported.summary().unknown.values().sum();
            assert_eq!(unknown, 29, "{:?}", imported.summary().unknown);
            seen += 1;
            continue;
        }
        let (_, format, expect) = FTRACE_TEXT
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| panic!("{name}: a file without expected counts"));
        check(&name, &imported, format, expect);
        seen += 1;
    }
    assert_eq!(seen, FTRACE_TEXT.len() + 1, "every file was checked");
}

#[test]
fn tgid_columns_give_processes() {
    let Some(rt) = realtraces() else { return };
    let imported = import::open(&rt.join("ftrace-text/tci_atrace-test.txt")).expect("imports");
    // `Binder:549_4-2029  (  549)`: thread 2029 of process 549.
    let t = imported
        .threads()
        .iter()
        .find(|t| t.tid.0 == 2029)
        .expect("thread 2029");
    assert_eq!((t.pid.0, t.comm.as_str()), (549, "Binder:549_4"));
    let ev = imported
        .event_slice()
        .iter()
        .find(|e| e.tid.0 == 2029)
        .expect("an event of 2029");
    assert_eq!(ev.pid.0, 549);
}

#[test]
fn schedviz_raw_capture_builds() {
    let Some(rt) = realtraces() else { return };
    let tmp = tempfile::tempdir().expect("tempdir");
    let st = std::process::Command::new("tar")
        .arg("xzf")
        .arg(rt.join("raw-ringbuffer/schedviz/server_testdata_test.tar.gz"))
        .arg("-C")
        .arg(tmp.path())
        .status()
        .expect("tar runs");
    assert!(st.success());
    assert!(import::is_importable(tmp.path()));
    let imported = import::open(tmp.path()).expect("the capture imports");
    check(
        "schedviz server_testdata_test.tar.gz",
        &imported,
        "raw-pages",
        &[
            ("switch", 15_056),
            ("waking", 11_134),
            ("wakeup_new", 2_732),
        ],
    );
}

/// trace-cmd `trace.dat` files (`trace-dat/`, v6, and the v7 conversions of one): imported
/// directly, with the counts `trace-cmd report` gives (the record-level equality with the
/// report is `argus-ingest`'s `decode::tracedat` test).
const TRACE_DAT: &[Expect] = &[
    (
        "trappy_trace_idle.trace.dat",
        "trace-dat",
        &[("switch", 23)],
    ),
    (
        "trappy_raw_trace.trace.dat",
        "trace-dat",
        &[("switch", 755)],
    ),
    (
        "lisa_example_rtapp.trace.dat",
        "trace-dat",
        &[("switch", 1_552), ("marker", 14)],
    ),
    (
        "lisa_sched_load.trace.dat",
        "trace-dat",
        &[("switch", 399), ("marker", 6)],
    ),
    (
        "derived/lisa_sched_load.v7-none.trace.dat",
        "trace-dat",
        &[("switch", 399), ("marker", 6)],
    ),
    (
        "derived/lisa_sched_load.v7-zstd.trace.dat",
        "trace-dat",
        &[("switch", 399), ("marker", 6)],
    ),
];

#[test]
fn every_trace_dat_builds() {
    let Some(rt) = realtraces() else { return };
    for (name, format, expect) in TRACE_DAT {
        let path = rt.join("trace-dat").join(name);
        let imported = import::open(&path).unwrap_or_else(|e| panic!("{name}: import failed: {e}"));
        println!(
            "{name}: {:?} {:?}",
            imported.kind_counts(),
            imported.summary()
        );
        check(name, &imported, format, expect);
    }
}
