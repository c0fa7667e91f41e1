//! The new event families live: record this machine with work-queue, wheel-timer and signal
//! events and the instance's stack options on, run workloads that must produce each, replay
//! and check the decoded payloads.

use argus_ingest::linux::{RecordConfig, Recorder, DEFAULT_EVENTS};
use argus_ingest::replay::TraceReader;
use argus_schema::{Event, EventKind, Tid};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

const EXTRA: &[&str] = &[
    "workqueue/workqueue_queue_work",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
    "timer/timer_start",
    "timer/timer_expire_entry",
    "timer/timer_expire_exit",
    "signal/signal_generate",
    "signal/signal_deliver",
];

/// Copies this boot's `ftrace/{kernel,user}_stack` formats into the trace (the recorder
/// saves the formats of the events it enables; stack records come from options instead).
fn add_stack_formats(trace: &Path) {
    for ev in ["kernel_stack", "user_stack"] {
        let from = Path::new("/sys/kernel/tracing/events/ftrace")
            .join(ev)
            .join("format");
        let to = trace.join("formats/events/ftrace").join(ev);
        std::fs::create_dir_all(&to).unwrap();
        let mut text = Vec::new();
        std::fs::File::open(&from)
            .unwrap()
            .read_to_end(&mut text)
            .unwrap();
        std::fs::write(to.join("format"), text).unwrap();
    }
}

#[test]
fn work_timer_signal_and_stack_events_live() {
    if !crate::common::can_trace() {
        return;
    }
    let _guard = crate::common::live_lock();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("trace");
    let mut config = RecordConfig::new(&dir);
    config.buffer_size_kb = 8192;
    config.chunk_pages = 256;
    config.events = DEFAULT_EVENTS
        .iter()
        .chain(EXTRA)
        .map(|e| e.to_string())
        .collect();
    let rec = Recorder::new(config).start().unwrap();
    let options = Path::new("/sys/kernel/tracing/instances")
        .join(rec.instance_name())
        .join("options");
    std::fs::write(options.join("userstacktrace"), "1").unwrap();
    std::fs::write(options.join("stacktrace"), "1").unwrap();

    // A signal to a sleeping child, sent by a shell (this process is the recorder's: its own
    // records are filtered out). SIGUSR1 kills `sleep`: the kernel then delivers it as the
    // group exit's SIGKILL.
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "sleep 10 & p=$!; echo $p; sleep 0.1; kill -USR1 $p; wait $p; true",
        ])
        .output()
        .unwrap();
    let child_pid: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    // Kernel work items: writeback queued by sync.
    let sync = std::process::Command::new("sync").spawn().unwrap();
    let sync_pid = sync.id() as i32;
    let st = std::process::Command::new("true").status().unwrap();
    assert!(st.success());
    let mut sync = sync;
    sync.wait().unwrap();
    // Wheel timers: TCP over loopback arms retransmit/delayed-ack timers (`timer_list`), and
    // the kernel's own delayed works expire at least every second.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut a = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut b, _) = listener.accept().unwrap();
    for _ in 0..20 {
        a.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        b.read_exact(&mut buf).unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    drop((a, b));
    rec.stop().unwrap();
    add_stack_formats(&dir);

    let reader = TraceReader::open(&dir).unwrap();
    let mut events = reader.events();
    let all: Vec<Event> = (&mut events).map(|e| e.unwrap()).collect();
    let summary = events.finish();
    assert!(
        summary.skipped.unknown_ids.is_empty(),
        "{:?}",
        summary.skipped
    );
    let has = |f: &dyn Fn(&Event) -> bool| all.iter().any(f);

    // Signals: generated for the child, delivered in the child.
    assert!(
        has(&|e| e.kind
            == EventKind::SignalGenerate {
                sig: libc::SIGUSR1,
                target: Tid(child_pid)
            }),
        "signal_generate SIGUSR1 → {child_pid}"
    );
    assert!(
        has(&|e| e.tid == Tid(child_pid)
            && matches!(e.kind, EventKind::SignalDeliver { sig }
                if sig == libc::SIGUSR1 || sig == libc::SIGKILL)),
        "signal_deliver in {child_pid}"
    );
    // Work items: queued, then run and finished by a worker, same work_struct.
    let queued: Vec<u64> = all
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WorkQueue { work, function } if function != 0 => Some(work),
            _ => None,
        })
        .collect();
    assert!(!queued.is_empty(), "no workqueue_queue_work");
    let started: Vec<(Tid, u64)> = all
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WorkStart { work, .. } => Some((e.tid, work)),
            _ => None,
        })
        .collect();
    assert!(
        started.iter().any(|(_, w)| queued.contains(w)),
        "a queued work item runs"
    );
    assert!(has(
        &|e| matches!(e.kind, EventKind::WorkEnd { work } if started.iter().any(|s| s.1 == work))
    ));
    // Wheel timers: armed (with a callback and a jiffies expiry) and expiring.
    assert!(has(
        &|e| matches!(e.kind, EventKind::TimerStart { timer, function, expires } if timer != 0 && function != 0 && expires != 0)
    ));
    assert!(has(
        &|e| matches!(e.kind, EventKind::TimerExpire { function, .. } if function != 0)
    ));
    assert!(has(&|e| matches!(
        e.kind,
        EventKind::TimerExpireExit { .. }
    )));
    // Stacks: user stacks of the traced children, kernel stacks everywhere.
    assert!(
        has(&|e| e.tid == Tid(child_pid) || e.tid == Tid(sync_pid))
            && has(
                &|e| matches!(&e.kind, EventKind::Stack { kernel: false, ips } if !ips.is_empty())
                    && (e.tid == Tid(child_pid) || e.tid == Tid(sync_pid))
            ),
        "a user stack of sleep or sync"
    );
    assert!(has(
        &|e| matches!(&e.kind, EventKind::Stack { kernel: true, ips } if ips.len() >= 2
        && ips.iter().all(|&ip| ip >= 0xffff_0000_0000_0000))
    ));
    // A stack record follows an event of the same task on the same CPU.
    let stack_follows = all.windows(2).any(|w| {
        matches!(w[1].kind, EventKind::Stack { .. })
            && !matches!(w[0].kind, EventKind::Stack { .. })
            && w[0].tid == w[1].tid
            && w[0].cpu == w[1].cpu
    });
    assert!(stack_follows);
    println!(
        "live new events: {} events; {} work items queued, {} started",
        all.len(),
        queued.len(),
        started.len()
    );
}
