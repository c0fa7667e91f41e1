//! Which hangs are reported: the watched threads ([`Watch`]), the tracker that reports a spin
//! when new or doubled ([`HangTracker`]), the job's own threads (never reported), spins
//! across lost-events gaps (not reported), and the `--on-hang` hook.

use super::sync::lock;
use argus_ingest::linux::OwnThread;
use argus_pipeline::gaps::GapSet;
use argus_schema::{Nanos, SegmentId, Spin, SpinClass, ThreadInfo};
use std::collections::HashMap;
use std::path::Path;

/// Which spins run the hook.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// Processes named by the user.
    pub pids: Vec<i32>,
    /// Names given by the user.
    pub comms: Vec<String>,
    /// Spins starting before this (an earlier run, across the unrecorded gap) never fire.
    pub since: Nanos,
}

/// The event-loop waits that mean "idle", not "hung", for the default watch.
pub(crate) fn is_event_loop_wait(nr: i32) -> bool {
    let name = argus_schema::syscalls::name(nr);
    matches!(
        name.as_str(),
        "poll" | "ppoll" | "select" | "pselect6" | "epoll_wait" | "epoll_pwait" | "epoll_pwait2"
    )
}

/// A single long wait the default watch does not take for a hang of its own: a sleep (the
/// thread chose to wait) or a wait for a child process (a shell running a command, `make`
/// running a compiler: the child's time is the child's, and its main thread is watched in
/// its own right). On an idle machine these were most of the default watch's "hangs" (every
/// shell script and every `sleep` in it), each taking a snapshot at once. A loop of sleeps
/// (a `RepeatedYield`) is still watched.
pub(crate) fn is_chosen_wait(spin: &Spin) -> bool {
    let name = argus_schema::syscalls::name(spin.wait_syscall);
    spin.class == SpinClass::LongWait
        && (argus_schema::syscalls::is_sleep(spin.wait_syscall)
            || matches!(name.as_str(), "wait4" | "waitid"))
}

impl Watch {
    /// Whether `spin` is of a watched thread.
    pub fn watches(&self, spin: &Spin, threads: &HashMap<i32, &ThreadInfo>) -> bool {
        if spin.start_ns < self.since || !spin.tid.is_task() {
            return false;
        }
        let info = threads.get(&spin.tid.0);
        // The thread table's process, where it has the thread: a thread that did nothing but
        // run or wait since the recording began has no event naming its process, and the
        // graph takes its tid for its pid.
        let pid = info.map_or(spin.pid.0, |t| t.pid.0);
        if self.pids.is_empty() && self.comms.is_empty() {
            return spin.tid.0 == pid
                && spin.tid.0 > 0
                && !info.is_some_and(|t| t.kernel)
                && !is_event_loop_wait(spin.wait_syscall)
                && !is_chosen_wait(spin);
        }
        self.pids.contains(&pid)
            || info.is_some_and(|t| {
                self.comms
                    .iter()
                    .any(|c| *c == t.comm || (*c == t.process && spin.tid.0 == pid))
            })
    }
}

/// What a hook is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangNotice {
    /// The spin.
    pub spin: Spin,
    /// First report (else it grew).
    pub new: bool,
    /// Its duration as of the snapshot.
    pub duration_ns: u64,
}

/// Decides which spins to report: new ones, and known ones whose duration doubled since last
/// reported.
#[derive(Debug, Default)]
pub struct HangTracker {
    pub(crate) reported: HashMap<SegmentId, u64>,
}

impl HangTracker {
    /// What `s` would report now (an open spin lasts until `watermark`): `None` when it was
    /// reported and has not doubled since. The main loop asks this (without updating) to
    /// take a snapshot at once for a hang; the snapshot's [`HangTracker::update`] reports it.
    pub(crate) fn notice(&self, s: &Spin, watermark: Nanos) -> Option<HangNotice> {
        let d = if s.open {
            s.start_ns.until(watermark.max(s.end_ns))
        } else {
            s.duration_ns()
        };
        let new = match self.reported.get(&s.segment) {
            None => true,
            Some(&prev) if d >= prev.saturating_mul(2) => false,
            Some(_) => return None,
        };
        Some(HangNotice {
            spin: s.clone(),
            new,
            duration_ns: d,
        })
    }

    /// The notices for one snapshot's spins; an open spin lasts until `watermark`.
    pub fn update(
        &mut self,
        spins: &[Spin],
        watermark: Nanos,
        mut watched: impl FnMut(&Spin) -> bool,
    ) -> Vec<HangNotice> {
        let mut out = Vec::new();
        for s in spins.iter().filter(|s| watched(s)) {
            if let Some(n) = self.notice(s, watermark) {
                self.reported.insert(s.segment, n.duration_ns);
                out.push(n);
            }
        }
        // Forget spins that left the window.
        let live: std::collections::HashSet<SegmentId> = spins.iter().map(|s| s.segment).collect();
        self.reported.retain(|k, _| live.contains(k));
        out
    }
}

/// This job's own threads, every one seen so far: they appear in the records of the tasks
/// they switch with, and the recorder cannot always tell their process (a thread created
/// while the job runs may look like a process of its own), so the hang filter recognises
/// them here: the threads alive now (`/proc/self/task`) and every one the recorder hid
/// ([`OwnExits`]). A thread that ended before the recorder hid it has its exit in the trace
/// and no open spin. The set only grows: snapshot writers and dataflow workers of earlier
/// generations have exited by the time a later snapshot names their spins.
pub(crate) fn own_threads() -> std::collections::HashSet<i32> {
    look_at_own_threads()
}

/// Every thread of this job seen so far: [`own_threads`] adds what `/proc/self/task` lists
/// at each call, [`note_own_threads`] what the recorder hid.
static SEEN: std::sync::Mutex<Option<std::collections::HashSet<i32>>> = std::sync::Mutex::new(None);

/// Every thread of this job seen so far ([`own_threads`]), after one look at
/// `/proc/self/task`.
fn look_at_own_threads() -> std::collections::HashSet<i32> {
    let alive = std::fs::read_dir("/proc/self/task")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut seen = lock(&SEEN);
    let set = seen.get_or_insert_with(Default::default);
    set.extend(alive);
    set.clone()
}

/// Notes threads of this job that a look at `/proc/self/task` may have missed (the
/// recorder hid them).
fn note_own_threads(tids: &[i32]) {
    lock(&SEEN)
        .get_or_insert_with(Default::default)
        .extend(tids.iter().copied());
}

/// The exits of the job's own threads, which the trace does not show: the recorder hides a
/// thread of its process once it finds it (every 250 ms), so a short-lived one (a snapshot
/// encoder, a query's thread) leaves its first records and no exit, and its last segment and
/// spin would stay open for good. The recorder says which threads it hid and when it found
/// one gone ([`OwnThread`]); the job adds the exit ([`LiveMerge::untraced_exit`]) once the
/// released stream has passed that moment (so every record the thread left comes first).
/// A thread that ended before it was hidden has its exit in the trace and is not reported.
///
/// [`LiveMerge::untraced_exit`]: argus_ingest::live::LiveMerge::untraced_exit
pub(crate) struct OwnExits {
    reports: crossbeam_channel::Receiver<OwnThread>,
    /// Hidden and not found gone yet.
    alive: std::collections::BTreeSet<i32>,
    /// Found gone, not added yet: the thread and when (trace clock).
    pending: Vec<(i32, Nanos)>,
}

/// What [`OwnExits::due`] found in the recorder's reports.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct OwnChanges {
    /// Threads hidden since the last call: threads of this process.
    pub(crate) hidden: Vec<i32>,
    /// Every hidden thread not found gone (their records may still be on their way: the
    /// table is told again each time).
    pub(crate) alive: Vec<i32>,
    /// Threads whose exit the stream released up to the watermark has passed.
    pub(crate) exited: Vec<i32>,
}

impl OwnExits {
    pub(crate) fn new(reports: crossbeam_channel::Receiver<OwnThread>) -> OwnExits {
        OwnExits {
            reports,
            alive: Default::default(),
            pending: Vec::new(),
        }
    }

    /// The recorder's reports since the last call: the threads it hid (also noted as the
    /// job's own, [`own_threads`]) and, of those found gone, the ones whose exit the stream
    /// released up to `watermark` has passed (returned once). At the `end` of the stream
    /// (every record released) all of them.
    pub(crate) fn due(&mut self, watermark: Nanos, end: bool) -> OwnChanges {
        let mut changes = OwnChanges::default();
        for report in self.reports.try_iter() {
            match report {
                OwnThread::Hidden(tid) => {
                    self.alive.insert(tid);
                    changes.hidden.push(tid);
                }
                OwnThread::Gone { tid, noticed_ns } => {
                    self.alive.remove(&tid);
                    self.pending.push((tid, Nanos(noticed_ns)));
                }
            }
        }
        changes.alive = self.alive.iter().copied().collect();
        if !changes.hidden.is_empty() {
            note_own_threads(&changes.hidden);
        }
        self.pending.retain(|&(t, at)| {
            let passed = end || at <= watermark;
            if passed {
                changes.exited.push(t);
            }
            !passed
        });
        changes
    }
}

/// Whether `tid` is one of this job's threads: seen in `/proc/self/task` ([`own_threads`]),
/// of this process, or created by one of them (a thread that exited between two looks, or
/// a hook's shell), following creators up to 8 steps.
pub(crate) fn is_own(
    tid: i32,
    threads: &HashMap<i32, &ThreadInfo>,
    own: &std::collections::HashSet<i32>,
) -> bool {
    let me = std::process::id() as i32;
    let mut t = tid;
    for _ in 0..8 {
        if own.contains(&t) {
            return true;
        }
        let Some(info) = threads.get(&t) else {
            return false;
        };
        if info.pid.0 == me || untraced_own_name(info) {
            return true;
        }
        match info.parent {
            Some(p) if p.0 > 0 && p.0 != t => t = p.0,
            _ => return false,
        }
    }
    false
}

/// A thread whose creation the trace does not show (no creator, no process of its own
/// known: it was created by a thread the recorder excludes) named as the job names its
/// threads: one of ours that lived too briefly for [`own_threads`] to see it. With its own
/// events excluded, its last switch looks like a run or a wait that never ends.
pub(crate) fn untraced_own_name(info: &ThreadInfo) -> bool {
    info.parent.is_none()
        && info.pid.0 == info.tid.0
        && (info.comm.starts_with("argus-") || info.comm.starts_with("timely:"))
}

/// Whether `s` (an open spin lasts until `watermark`) overlaps a lost-events gap of the
/// live graph: a thread whose switch-out or wake-up fell in the gap looks running or
/// blocked for as long as the gap hides it, so such a spin is no evidence of a hang.
pub(crate) fn spans_gap(s: &Spin, watermark: Nanos, gaps: &GapSet) -> bool {
    let end = if s.open {
        watermark.max(s.end_ns)
    } else {
        s.end_ns
    };
    gaps.crosses(s.start_ns, end)
}

pub(crate) fn run_hook(cmd: &str, n: &HangNotice, snapshot: &Path) {
    let s = &n.spin;
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("ARGUS_HANG_PID", s.pid.0.to_string())
        .env("ARGUS_HANG_TID", s.tid.0.to_string())
        .env("ARGUS_HANG_CLASS", s.class.name())
        .env("ARGUS_HANG_SNAPSHOT", snapshot)
        // DIR/snapshots/<epoch> → DIR: `argus debug "$ARGUS_HANG_DIR"` asks the live graph.
        .env(
            "ARGUS_HANG_DIR",
            snapshot.parent().and_then(Path::parent).unwrap_or(snapshot),
        )
        .env("ARGUS_HANG_SEGMENT", s.segment.0.to_string())
        .env("ARGUS_HANG_DURATION_NS", n.duration_ns.to_string())
        .env("ARGUS_HANG_NEW", if n.new { "1" } else { "0" })
        .stdin(std::process::Stdio::null())
        .spawn();
    match child {
        Ok(mut child) => {
            // Reap it without waiting here.
            let _ = std::thread::Builder::new()
                .name("argus-hook".into())
                .spawn(move || child.wait());
        }
        Err(e) => eprintln!("argus start: cannot run --on-hang command: {e}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use argus_schema::{Pid, SpinClass, Tid};

    pub(crate) fn spin(seg: u64, tid: i32, pid: i32, start: u64, end: u64) -> Spin {
        Spin {
            segment: SegmentId(seg),
            last: SegmentId(seg),
            tid: Tid(tid),
            pid: Pid(pid),
            class: SpinClass::LongWait,
            start_ns: Nanos(start),
            end_ns: Nanos(end),
            open: true,
            on_cpu_ns: 0,
            wait_ns: end - start,
            segments: 1,
            wait_syscall: 202,
            timeouts: 0,
        }
    }

    /// A thread the recorder found gone is reported once, and only when the released stream
    /// has passed the moment it was found gone; a hidden thread is known as the job's own.
    #[test]
    fn an_own_thread_gone_is_reported_once_after_the_stream_passed_its_exit() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut exits = OwnExits::new(rx);
        // A tid no thread of this process has: known as own only through the report.
        let hidden = i32::MAX - 7;
        assert!(!own_threads().contains(&hidden));
        tx.send(OwnThread::Hidden(hidden)).unwrap();
        tx.send(OwnThread::Hidden(12)).unwrap();
        let first = exits.due(Nanos(0), false);
        assert_eq!(first.hidden, vec![hidden, 12]);
        assert_eq!(first.alive, vec![12, hidden]);
        assert!(first.exited.is_empty());
        assert!(own_threads().contains(&hidden));
        tx.send(OwnThread::Gone {
            tid: hidden,
            noticed_ns: 1_000,
        })
        .unwrap();
        // Found gone at 1000, the stream released up to 999: not yet.
        let still = |exited: Vec<i32>| OwnChanges {
            hidden: Vec::new(),
            alive: vec![12],
            exited,
        };
        assert_eq!(exits.due(Nanos(999), false), still(vec![]));
        // The stream passed it: reported, once.
        assert_eq!(exits.due(Nanos(1_000), false), still(vec![hidden]));
        assert_eq!(exits.due(Nanos(5_000), false), still(vec![]));
        // At the end of the stream, one found gone after the last watermark is reported.
        tx.send(OwnThread::Gone {
            tid: 12,
            noticed_ns: 9_000,
        })
        .unwrap();
        assert_eq!(exits.due(Nanos(6_000), false), OwnChanges::default());
        assert_eq!(exits.due(Nanos(6_000), true).exited, vec![12]);
    }

    #[test]
    fn the_jobs_own_threads_are_known_after_they_exit_and_through_their_creators() {
        // A thread of this process that has exited by the next look is still known.
        let gone = std::thread::spawn(|| {
            let _ = own_threads();
            // SAFETY: gettid has no preconditions.
            unsafe { libc::gettid() }
        })
        .join()
        .unwrap();
        let own = own_threads();
        assert!(own.contains(&gone));
        let info = |tid: i32, pid: i32, parent: Option<i32>| ThreadInfo {
            tid: Tid(tid),
            pid: argus_schema::Pid(pid),
            comm: "x".into(),
            process: "x".into(),
            parent: parent.map(Tid),
            start_ns: None,
            exit_ns: None,
            kernel: false,
        };
        // 9_000_001: created by one of ours, never seen in /proc, recorded as its own
        // process; 9_000_002: a child of that; 9_000_003: a stranger.
        let me = std::process::id() as i32;
        let rows = [
            info(9_000_001, 9_000_001, Some(gone)),
            info(9_000_002, 9_000_002, Some(9_000_001)),
            info(9_000_003, 9_000_003, Some(1)),
            info(9_000_004, me, None),
        ];
        let by_tid: HashMap<i32, &ThreadInfo> = rows.iter().map(|t| (t.tid.0, t)).collect();
        assert!(is_own(9_000_001, &by_tid, &own));
        assert!(is_own(9_000_002, &by_tid, &own));
        assert!(!is_own(9_000_003, &by_tid, &own));
        assert!(is_own(9_000_004, &by_tid, &own));
        assert!(!is_own(9_000_005, &by_tid, &own));
        // One of ours too brief to be seen in /proc: untraced creation, our naming.
        let brief = ThreadInfo {
            comm: "argus-write-eve".into(),
            ..info(9_000_006, 9_000_006, None)
        };
        let named = ThreadInfo {
            comm: "argus-write-eve".into(),
            ..info(9_000_007, 9_000_007, Some(1))
        };
        let by_tid: HashMap<i32, &ThreadInfo> = [(9_000_006, &brief), (9_000_007, &named)]
            .into_iter()
            .collect();
        assert!(is_own(9_000_006, &by_tid, &own));
        assert!(
            !is_own(9_000_007, &by_tid, &own),
            "created by a traced stranger"
        );
    }

    #[test]
    fn hangs_are_reported_when_new_and_when_doubled() {
        let mut t = HangTracker::default();
        let all = |_: &Spin| true;
        let w = Nanos(0);
        let n = t.update(&[spin(1, 10, 10, 0, 2_500)], w, all);
        assert_eq!(n.len(), 1);
        assert!(n[0].new);
        assert!(t.update(&[spin(1, 10, 10, 0, 4_000)], w, all).is_empty());
        let n = t.update(&[spin(1, 10, 10, 0, 5_000)], w, all);
        assert_eq!((n.len(), n[0].new, n[0].duration_ns), (1, false, 5_000));
        // An open spin lasts until the watermark, whatever its last record.
        let n = t.update(&[spin(1, 10, 10, 0, 5_000)], Nanos(10_000), all);
        assert_eq!(n[0].duration_ns, 10_000);
        // Gone from the window: forgotten, so it would be new again.
        assert!(t.update(&[], w, all).is_empty());
        assert!(t.update(&[spin(1, 10, 10, 0, 5_000)], w, all)[0].new);
    }

    #[test]
    fn the_default_watch_is_main_threads_not_idle_in_their_event_loop() {
        let w = Watch::default();
        let threads = HashMap::new();
        assert!(w.watches(&spin(1, 10, 10, 0, 1), &threads));
        assert!(!w.watches(&spin(1, 11, 10, 0, 1), &threads), "not main");
        let mut s = spin(1, 10, 10, 0, 1);
        s.wait_syscall = argus_schema::syscalls::number("epoll_wait").unwrap();
        assert!(!w.watches(&s, &threads), "idle in epoll");
        let nr = |n: &str| argus_schema::syscalls::number(n).unwrap();
        for (sys, class, watched) in [
            ("wait4", SpinClass::LongWait, false),
            ("clock_nanosleep", SpinClass::LongWait, false),
            ("clock_nanosleep", SpinClass::RepeatedYield, true),
            ("read", SpinClass::LongWait, true),
        ] {
            let mut s = spin(1, 10, 10, 0, 1);
            (s.wait_syscall, s.class) = (nr(sys), class);
            assert_eq!(w.watches(&s, &threads), watched, "{sys} {class:?}");
        }
        let named = Watch {
            pids: vec![10],
            ..Watch::default()
        };
        let mut s = spin(1, 10, 10, 0, 1);
        s.wait_syscall = nr("wait4");
        assert!(
            named.watches(&s, &threads),
            "a process named is watched whole"
        );
        let w = Watch {
            since: Nanos(5),
            ..Watch::default()
        };
        assert!(
            !w.watches(&spin(1, 10, 10, 0, 9), &threads),
            "before the run"
        );
        let w = Watch {
            pids: vec![20],
            ..Watch::default()
        };
        assert!(w.watches(&spin(1, 21, 20, 0, 1), &threads));
        assert!(!w.watches(&spin(1, 10, 10, 0, 1), &threads));
    }

    /// A worker thread that the graph knows only by its tid (no event named its process) is
    /// not taken for a main thread when the thread table knows its process.
    #[test]
    fn the_thread_tables_process_decides_what_a_main_thread_is() {
        let info = ThreadInfo {
            tid: Tid(76),
            pid: Pid(1),
            comm: "tokio-rt-worker".into(),
            process: "process_api".into(),
            parent: None,
            start_ns: None,
            exit_ns: None,
            kernel: false,
        };
        let threads: HashMap<i32, &ThreadInfo> = [(76, &info)].into();
        let worker = spin(1, 76, 76, 0, 1);
        assert!(!Watch::default().watches(&worker, &threads), "a worker");
        assert!(
            Watch::default().watches(&worker, &HashMap::new()),
            "unknown"
        );
        let by_pid = Watch {
            pids: vec![1],
            ..Watch::default()
        };
        assert!(by_pid.watches(&worker, &threads), "of the named process");
    }
}
