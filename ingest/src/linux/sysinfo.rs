//! The side files of a trace directory: `meta.json`, `proc.json`, `kallsyms.zst`, `formats/`.

// The /proc and kallsyms helpers serve the Linux recorder only.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use super::error::RecordError;
use crate::tracedir::{self, MetaExt, ProcEntry, TraceMeta};
use std::ffi::CStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every file in a trace directory: they hold process names and syscall arguments.
pub(crate) const FILE_MODE: u32 = 0o600;
/// Mode of the trace directory and its subdirectories.
pub(crate) const DIR_MODE: u32 = 0o700;

/// Creates (truncating) a file readable by its owner only.
pub(crate) fn create_private(path: &Path) -> Result<fs::File, RecordError> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|source| RecordError::io("creating", path, source))
}

/// Writes a whole file readable by its owner only.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let mut file = create_private(path)?;
    file.write_all(bytes)
        .map_err(|source| RecordError::io("writing", path, source))
}

/// Creates a directory (and missing parents) accessible by its owner only; an existing
/// directory is set to that mode.
pub(crate) fn create_dir_private(path: &Path) -> Result<(), RecordError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
        .map_err(|source| RecordError::io("creating", path, source))?;
    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
        .map_err(|source| RecordError::io("setting the mode of", path, source))
}

/// `fsync` of a directory, so the names created in it survive a power loss.
pub(crate) fn sync_dir(path: &Path) -> Result<(), RecordError> {
    fs::File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| RecordError::io("syncing", path, source))
}

/// Bytes of the files under `dir` (recursively).
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `PF_KTHREAD` in `include/linux/sched.h`: the task is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// zstd level for `kallsyms.zst`: written once per recording (about 5 MB of text on a
/// distribution kernel, 60 ms at level 6), so a slower level that saves ~20% is worth it.
const KALLSYMS_ZSTD_LEVEL: i32 = 6;

/// Why this process cannot record the kernel here (not root, tracefs not mounted), or `None`:
/// the one check behind `argus demo`'s fallback, the tests' skips and the benches'.
pub fn cannot_trace() -> Option<String> {
    #[cfg(not(target_os = "linux"))]
    return Some(format!(
        "argus records the kernel on Linux only, not on {}",
        std::env::consts::OS
    ));
    #[cfg(target_os = "linux")]
    linux_cannot_trace()
}

#[cfg(target_os = "linux")]
fn linux_cannot_trace() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!("not running as root (euid {euid})"));
    }
    if !std::path::Path::new(super::DEFAULT_TRACEFS)
        .join("instances")
        .is_dir()
    {
        return Some(format!(
            "tracefs is not mounted (mount -t tracefs nodev {})",
            super::DEFAULT_TRACEFS
        ));
    }
    None
}

/// `clock` now, in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clocks asked for always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (the clock of `trace_clock=mono`, the trace clock).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).clamp(0, i128::from(u64::MAX)) as u64
}

/// `CLOCK_REALTIME − CLOCK_MONOTONIC` now, in nanoseconds: a trace time plus it is the
/// wall-clock time (ns since the Unix epoch). The realtime clock is read between two
/// monotonic reads and set against their midpoint.
pub fn wall_offset_ns() -> i64 {
    let before = clock_ns(libc::CLOCK_MONOTONIC);
    let wall = clock_ns(libc::CLOCK_REALTIME);
    let after = clock_ns(libc::CLOCK_MONOTONIC);
    (wall - (before + after) / 2) as i64
}

/// The last pid the kernel handed out in this pid namespace and `pid_max`
/// (`/proc/sys/kernel/ns_last_pid`, `/proc/sys/kernel/pid_max`); `None` when either cannot
/// be read (a kernel without `CONFIG_CHECKPOINT_RESTORE` has no `ns_last_pid`).
pub(crate) fn pid_cursor() -> Option<(i32, i32)> {
    let read = |p: &str| std::fs::read_to_string(p).ok()?.trim().parse::<i32>().ok();
    Some((
        read("/proc/sys/kernel/ns_last_pid")?,
        read("/proc/sys/kernel/pid_max")?,
    ))
}

/// `uname`: (release, machine, nodename).
pub(crate) fn uname() -> (String, String, String) {
    // SAFETY: utsname is plain old data; all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    let rc = unsafe { libc::uname(&mut uts) };
    if rc != 0 {
        return (String::new(), String::new(), String::new());
    }
    let field = |chars: &[libc::c_char]| {
        // SAFETY: uname NUL-terminates every field within its array.
        unsafe { CStr::from_ptr(chars.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    (
        field(&uts.release),
        field(&uts.machine),
        field(&uts.nodename),
    )
}

/// Writes `bytes` to `path` through `path.tmp` + rename, so readers never see half a file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    if let Err(e) = write_private(&tmp, bytes) {
        // A full disk leaves a partial copy taking room: it is no use to anyone.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path).map_err(|source| RecordError::io("renaming", &tmp, source))
}

/// Bytes free for an unprivileged writer on the filesystem holding `dir` (`statvfs`).
pub(crate) fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between Linux and macOS
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Writes `meta.json`: `meta` and the extension keys of `ext`.
pub(crate) fn write_meta(dir: &Path, meta: &TraceMeta, ext: &MetaExt) -> Result<(), RecordError> {
    let path = tracedir::meta_path(dir);
    let json_err = |source| RecordError::Json {
        path: path.clone(),
        source,
    };
    let doc = ext.merged_json(meta).map_err(json_err)?;
    let mut bytes = serde_json::to_vec_pretty(&doc).map_err(json_err)?;
    bytes.push(b'\n');
    write_atomic(&path, &bytes)
}

/// Copies `header_page`, `header_event` and each event's `format` from the instance's
/// `events/` directory into `formats/`.
#[cfg(target_os = "linux")]
pub(crate) fn copy_formats(
    dir: &Path,
    instance_events: &Path,
    events: &[String],
) -> Result<(), RecordError> {
    let formats = tracedir::formats_dir(dir);
    for header in ["header_page", "header_event"] {
        copy_file(&instance_events.join(header), &formats.join(header))?;
    }
    for event in events {
        copy_file(
            &instance_events.join(event).join("format"),
            &formats.join("events").join(event).join("format"),
        )?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn copy_file(from: &Path, to: &Path) -> Result<(), RecordError> {
    // tracefs files report size 0 (`fs::copy` would copy nothing) and some of them only
    // answer the first read: see `tracefs::read_bytes`.
    let bytes = super::tracefs::read_bytes(from)?;
    if let Some(parent) = to.parent() {
        create_dir_private(parent)?;
    }
    write_private(to, &bytes)
}

/// Writes `kallsyms.zst`: the text symbols (`t`/`T`) of `/proc/kallsyms`, which is what
/// names kernel callbacks (hrtimer functions, irq handlers). Data symbols are dropped.
pub(crate) fn write_kallsyms(dir: &Path) -> Result<(), RecordError> {
    let source_path = Path::new("/proc/kallsyms");
    let text =
        fs::read(source_path).map_err(|source| RecordError::io("reading", source_path, source))?;
    let mut kept = Vec::with_capacity(text.len());
    for line in text.split(|&b| b == b'\n') {
        // "ffffffff81000000 T _stext [module]"
        let mut fields = line.split(|&b| b == b' ');
        let _address = fields.next();
        if matches!(fields.next(), Some(b"t") | Some(b"T")) {
            kept.extend_from_slice(line);
            kept.push(b'\n');
        }
    }
    let path = tracedir::kallsyms_path(dir);
    let compressed = zstd::bulk::compress(&kept, KALLSYMS_ZSTD_LEVEL).map_err(|source| {
        RecordError::Compress {
            path: path.clone(),
            source,
        }
    })?;
    write_atomic(&path, &compressed)
}

/// Every thread of every process in `/proc`, sorted by (pid, tid). Threads that exit while
/// being read are skipped.
pub(crate) fn scan_threads() -> Vec<ProcEntry> {
    let mut threads = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return threads;
    };
    for proc_entry in procs.flatten() {
        let Some(pid) = numeric_name(&proc_entry.file_name()) else {
            continue;
        };
        let Ok(tasks) = fs::read_dir(proc_entry.path().join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Some(tid) = numeric_name(&task.file_name()) else {
                continue;
            };
            if let Some(entry) = read_thread(&task.path(), pid, tid) {
                threads.push(entry);
            }
        }
    }
    threads.sort_by_key(|t| (t.pid, t.tid));
    threads
}

fn numeric_name(name: &std::ffi::OsStr) -> Option<i32> {
    name.to_str()?.parse().ok()
}

fn read_thread(task_dir: &Path, pid: i32, tid: i32) -> Option<ProcEntry> {
    let comm = fs::read_to_string(task_dir.join("comm")).ok()?;
    let status = fs::read_to_string(task_dir.join("status")).ok()?;
    let stat = fs::read(task_dir.join("stat")).ok()?;
    let (tgid, ppid) = parse_status(&status);
    Some(ProcEntry {
        tid,
        pid: tgid.unwrap_or(pid),
        ppid: ppid.unwrap_or(0),
        comm: comm.trim_end_matches('\n').to_string(),
        kernel: stat_flags(&stat).is_some_and(|flags| flags & PF_KTHREAD != 0),
    })
}

/// `Tgid:` and `PPid:` of a `/proc/PID/task/TID/status` file.
fn parse_status(status: &str) -> (Option<i32>, Option<i32>) {
    let mut tgid = None;
    let mut ppid = None;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("Tgid:") {
            tgid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("PPid:") {
            ppid = v.trim().parse().ok();
        }
    }
    (tgid, ppid)
}

/// Field 9 (`flags`) of a `stat` line. `comm` (field 2) may hold spaces and parentheses, so
/// the fields are counted from the *last* `)`: state is field 3, flags the 7th after it.
fn stat_flags(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(6)?.parse().ok()
}

/// Writes `proc.json`.
pub(crate) fn write_proc(dir: &Path, threads: &[ProcEntry]) -> Result<(), RecordError> {
    let path = tracedir::proc_path(dir);
    let mut bytes = Vec::with_capacity(threads.len() * 80);
    bytes.push(b'[');
    for (i, thread) in threads.iter().enumerate() {
        if i > 0 {
            bytes.extend_from_slice(b",\n");
        }
        serde_json::to_writer(&mut bytes, thread).map_err(|source| RecordError::Json {
            path: path.clone(),
            source,
        })?;
    }
    bytes.extend_from_slice(b"]\n");
    write_private(&path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_flags_after_last_paren() {
        let stat = b"77 (we (ird) name) S 2 0 0 0 -1 2129984 0 0 0 0";
        assert_eq!(stat_flags(stat), Some(2_129_984));
        assert!(stat_flags(stat).is_some_and(|f| f & PF_KTHREAD != 0));
        let user = b"1 (systemd) S 0 1 1 0 -1 4194560 1 2";
        assert_eq!(stat_flags(user), Some(4_194_560));
        assert!(stat_flags(user).is_some_and(|f| f & PF_KTHREAD == 0));
        assert_eq!(stat_flags(b"1 (x) S 0"), None);
        assert_eq!(stat_flags(b"no paren"), None);
    }

    #[test]
    fn status_fields() {
        let status =
            "Name:\tbash\nUmask:\t0022\nState:\tS\nTgid:\t10\nNgid:\t0\nPid:\t11\nPPid:\t3\n";
        assert_eq!(parse_status(status), (Some(10), Some(3)));
        assert_eq!(parse_status(""), (None, None));
    }

    #[test]
    fn scan_sees_init_and_this_thread() {
        let threads = scan_threads();
        assert!(threads.iter().any(|t| t.tid == 1 && t.pid == 1));
        let own = std::process::id() as i32;
        assert!(threads.iter().any(|t| t.tid == own && t.pid == own));
    }
}
