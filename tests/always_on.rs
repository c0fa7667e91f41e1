//! The recorder where users run it (issue 42): in a session or a cgroup of its own while a
//! saturating load runs in another, it loses nothing; on a filesystem that fills up it
//! keeps recording, records the stretch it could not write as lost ranges, and the trace
//! builds. Both for `argus record` and for `argus start`.

use crate::common::{argus, live_or_skip, recording_lock, run, trace_events, wait_for, Guard};
use argus_schema::EventKind;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use argus_ingest::linux::monotonic_ns as mono_ns;

fn meta(trace: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(trace.join("meta.json")).expect("meta.json"))
        .expect("meta.json parses")
}

/// Events the kernel counted as lost, all CPUs (`meta.json` `lost`).
fn lost(meta: &Value) -> u64 {
    meta["lost"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// How the recorder is started relative to the test (where the load runs).
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A session of its own (`setsid`: with `sched_autogroup`, a scheduling group of its
    /// own), as from another terminal.
    Session,
    /// A new cgroup v1 `cpu` group with default weight, as a service or a container.
    Cgroup,
}

/// A `cpu` cgroup made for one test, removed on drop.
struct CpuGroup(PathBuf);

impl CpuGroup {
    fn new(name: &str) -> CpuGroup {
        let root = Path::new("/sys/fs/cgroup/cpu");
        assert!(
            root.join("cpu.rt_runtime_us").is_file(),
            "this test needs a cgroup v1 cpu hierarchy at {}",
            root.display()
        );
        let dir = root.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir a cpu cgroup (root)");
        CpuGroup(dir)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Its tasks have exited; an empty group can be removed.
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Spawns `argus ARGS` in `place`, its output into `log`.
fn spawn_in(place: Place, args: &[&str], log: &Path, group: Option<&CpuGroup>) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    let mut cmd = argus();
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    let tasks = match place {
        Place::Session => None,
        Place::Cgroup => group.map(|g| g.0.join("tasks")),
    };
    argus_testkit::elsewhere::own_session(&mut cmd, tasks.as_deref());
    cmd.spawn().expect("argus starts")
}

fn wait_exit(child: &mut Guard, within: Duration, log: &Path) -> i32 {
    let c = child.0.as_mut().expect("child");
    let end = Instant::now() + within;
    loop {
        if let Some(status) = c.try_wait().expect("wait") {
            child.0 = None;
            return status.code().unwrap_or(-1);
        }
        assert!(
            Instant::now() < end,
            "argus did not exit within {within:?}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Records (or runs `argus start`) in `place` while `saturate.c` runs 6 s in the test's own
/// session; returns the trace's `meta.json`.
fn under_saturation(test: &str, start: bool, place: Place) -> Value {
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let load = argus_testkit::elsewhere::saturate(tmp.path());
    let out = tmp.path().join("out");
    let log = tmp.path().join("argus.log");
    let group = matches!(place, Place::Cgroup).then(|| CpuGroup::new("argus-test"));
    let out_s = out.to_str().expect("utf-8");
    let args: Vec<&str> = if start {
        vec![
            "start",
            "-o",
            out_s,
            "--duration",
            "14",
            "--snapshot-every",
            "3",
        ]
    } else {
        vec!["record", "-o", out_s, "--duration", "12"]
    };
    let mut child = Guard(Some(spawn_in(place, &args, &log, group.as_ref())));
    let trace = if start {
        out.join("trace")
    } else {
        out.clone()
    };
    wait_for("tracing on (meta.json)", Duration::from_secs(30), || {
        trace.join("meta.json").is_file().then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let status = Command::new(&load)
        .arg("6")
        .output()
        .expect("the load runs");
    assert!(
        status.status.success(),
        "{test}: the load failed: {status:?}"
    );
    let code = wait_exit(&mut child, Duration::from_secs(90), &log);
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, 0, "{test}: argus exited {code}: {said}");
    meta(&trace)
}

#[test]
fn a_recorder_in_its_own_session_loses_nothing_under_saturation() {
    let test = "a_recorder_in_its_own_session_loses_nothing_under_saturation";
    if !live_or_skip(test) {
        return;
    }
    let m = under_saturation(test, false, Place::Session);
    assert_eq!(lost(&m), 0, "lost events: {}", m["lost"]);
}

#[test]
fn a_recorder_in_a_cgroup_of_its_own_loses_nothing_under_saturation() {
    let test = "a_recorder_in_a_cgroup_of_its_own_loses_nothing_under_saturation";
    if !live_or_skip(test) {
        return;
    }
    let m = under_saturation(test, false, Place::Cgroup);
    assert_eq!(lost(&m), 0, "lost events: {}", m["lost"]);
}

#[test]
fn start_in_its_own_session_loses_nothing_under_saturation() {
    let test = "start_in_its_own_session_loses_nothing_under_saturation";
    if !live_or_skip(test) {
        return;
    }
    let m = under_saturation(test, true, Place::Session);
    assert_eq!(lost(&m), 0, "lost events: {}", m["lost"]);
}

/// A tmpfs of `size` mounted for one test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&dir).expect("mkdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount runs");
        assert!(ok.success(), "mount a tmpfs at {} (root)", dir.display());
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes a marker into the recorder's instance (the recorder is process `pid`).
fn mark(pid: u32, text: &str) {
    let path = format!("/sys/kernel/tracing/instances/argus-{pid}/trace_marker");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {path}: {e}"));
}

/// Runs `argus ARGS` (recording into `trace` on the tmpfs `disk`), fills the disk with
/// another writer for 4 s mid-recording, frees it, and checks what a user needs: the
/// recorder kept going and exited 0, `meta.json` has a lost range over the full stretch
/// on every CPU, the trace builds, and markers written before the disk filled and after
/// the space returned are in it. Returns the log.
fn survives_a_full_disk(test: &str, args: &[&str], disk: &Path, trace: &Path) -> String {
    let log = disk.parent().expect("parent").join("argus.log");
    let mut child = Guard(Some(
        argus()
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(std::fs::File::create(log.with_extension("err")).expect("log"))
            .spawn()
            .expect("argus starts"),
    ));
    let pid = child.0.as_ref().expect("child").id();
    wait_for("tracing on (meta.json)", Duration::from_secs(30), || {
        trace.join("meta.json").is_file().then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    mark(pid, "argus-test-before-full");
    // Pages reach the disk every flush interval (1 s): what the readers hold when the disk
    // fills is not written (and is inside the lost range).
    std::thread::sleep(Duration::from_millis(2500));
    // Another program fills the disk and keeps it full for 4 s: whatever room the recorder
    // or the job gives back, it takes.
    let fill_start = mono_ns();
    let fill = disk.join("fill");
    let keep_full = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let filler = {
        let (fill, keep_full) = (fill.clone(), keep_full.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&fill)
                .expect("the fill file");
            let block = vec![0u8; 64 << 10];
            let mut full_once = false;
            while keep_full.load(std::sync::atomic::Ordering::Relaxed) {
                while f.write_all(&block).is_ok() {}
                full_once = true;
                std::thread::sleep(Duration::from_millis(10));
            }
            full_once
        })
    };
    std::thread::sleep(Duration::from_secs(4));
    keep_full.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(filler.join().expect("the filler"), "the disk filled");
    std::fs::remove_file(&fill).expect("free the disk");
    let fill_end = mono_ns();
    std::thread::sleep(Duration::from_secs(2));
    mark(pid, "argus-test-after-full");
    let code = wait_exit(&mut child, Duration::from_secs(60), &log);
    let said = std::fs::read_to_string(log.with_extension("err")).unwrap_or_default();
    assert_eq!(code, 0, "{test}: argus exited {code}: {said}");

    let m = meta(trace);
    assert_eq!(m["status"], "complete", "{test}: {m}");
    let cpus: Vec<u64> = m["cpus"]
        .as_array()
        .expect("cpus")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    for cpu in &cpus {
        let ranges = m["lost_ranges"][cpu.to_string()]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let over_the_fill = ranges.iter().any(|r| {
            let (from, to) = (r["from_ns"].as_u64(), r["to_ns"].as_u64());
            from.zip(to)
                .is_some_and(|(f, t)| f < fill_end && t > fill_start)
        });
        assert!(
            over_the_fill,
            "{test}: cpu {cpu} has no lost range over the full stretch \
             {fill_start}..{fill_end}: {ranges:?}"
        );
    }
    let snap = disk.parent().expect("parent").join("snap");
    let out = run(&[
        "build",
        "-q",
        trace.to_str().expect("utf-8"),
        "-o",
        snap.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{test}: build: {out:?}");
    let markers: Vec<String> = trace_events(trace)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Marker { text } => Some(text),
            _ => None,
        })
        .collect();
    for want in ["argus-test-before-full", "argus-test-after-full"] {
        assert!(
            markers.iter().any(|t| t.contains(want)),
            "{test}: marker {want} not in the trace: {markers:?}"
        );
    }
    said
}

#[test]
fn record_survives_a_full_disk() {
    let test = "record_survives_a_full_disk";
    if !live_or_skip(test) {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let disk = Tmpfs::mount(tmp.path().join("disk"), "16m");
    let trace = disk.0.join("trace");
    let args = [
        "record",
        "-o",
        trace.to_str().expect("utf-8"),
        "--duration",
        "12",
    ];
    survives_a_full_disk(test, &args, &disk.0, &trace);
}

#[test]
fn start_survives_a_full_disk() {
    let test = "start_survives_a_full_disk";
    if !live_or_skip(test) {
        return;
    }
    let _lock = recording_lock();
    let tmp = tempfile::tempdir().expect("tempdir");
    let disk = Tmpfs::mount(tmp.path().join("disk"), "48m");
    let job = disk.0.join("job");
    let args = [
        "start",
        "-o",
        job.to_str().expect("utf-8"),
        "--duration",
        "14",
        "--snapshot-every",
        "2",
    ];
    let began = mono_ns();
    survives_a_full_disk(test, &args, &disk.0, &job.join("trace"));
    // Snapshots went on once the space returned: the newest covers the end of the run.
    let latest = std::fs::canonicalize(job.join("latest")).expect("a latest snapshot");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(latest.join("manifest.json")).expect("manifest"))
            .expect("manifest parses");
    let watermark = manifest["watermark_ns"]
        .as_u64()
        .expect("the manifest's watermark");
    // The disk was full from about 4.5 s to 8.5 s into the run.
    assert!(
        watermark > began + 10_000_000_000,
        "{test}: the newest snapshot ends at {watermark}, before the space returned"
    );
}
