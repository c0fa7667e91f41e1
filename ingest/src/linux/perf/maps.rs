//! The maps thread ([`MapsKeeper`]): copies `/proc/PID/maps` into `perf/maps/PID-TS.maps`
//! for every process at start, every new process or exec, and every process whose sample
//! falls outside its last copy (dlopen), so `argus build` can symbolize the stacks.

use crate::linux::sysinfo;
use crate::perffile;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the collector knows of a process's maps.
struct KnownProc {
    /// Which image the copy is of: the executable's path and where its code starts.
    image: Image,
    /// Executable ranges of the last copy.
    exec: Vec<(u64, u64)>,
    last_copy: Instant,
}

/// What tells one exec from the next: the executable's path, and the start of its code
/// (`/proc/PID/stat` field 26, read without the process's `mmap_lock`). A program that execs
/// itself (a shell, a server re-executing for an upgrade, `argus` running its workloads)
/// keeps its path; its position-independent code lands elsewhere with every exec.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Image {
    exe: Option<PathBuf>,
    start_code: Option<u64>,
}

impl Image {
    fn of(pid: i32) -> Image {
        Image {
            exe: fs::read_link(format!("/proc/{pid}/exe")).ok(),
            start_code: fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| start_code(&s)),
        }
    }
}

/// Field 26 (`startcode`) of a `/proc/PID/stat` line; the command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn start_code(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow the name: startcode is the 24th of them.
    rest.split_ascii_whitespace().nth(23)?.parse().ok()
}

/// How soon after a copy a sample outside it makes another (a process mapping many
/// libraries one after the other would otherwise be copied for each).
const RECOPY_AFTER: Duration = Duration::from_millis(100);

static MAPS_SERIAL: AtomicU64 = AtomicU64::new(0);

/// Processes (and a sample's first user ip) whose maps copy may be missing or stale.
pub(super) type MapsRequest = Vec<(i32, Option<u64>)>;

/// The maps thread: copies `/proc/PID/maps` when the collector sees a sample of a process
/// it has no (or a stale) copy of, and scans `/proc` every flush interval for new processes
/// and execs — reading `/proc` can wait on a busy process's `mmap_lock`, so the collector
/// never does it itself.
pub(super) struct MapsKeeper {
    dir: PathBuf,
    maps: HashMap<i32, KnownProc>,
    own_pid: i32,
    maps_bytes: Arc<AtomicU64>,
    copies: u64,
    /// Processes with a sample outside their last copy taken less than [`RECOPY_AFTER`]
    /// ago: copied again once that has passed (the sample that showed it may be the only
    /// one, as for a thread that blocks once, right after its process's exec).
    recopy: BTreeSet<i32>,
}

impl MapsKeeper {
    /// A keeper writing into `dir`'s `perf/maps/`; `maps_bytes` counts what it wrote (the
    /// perf budget includes it).
    pub(super) fn new(dir: &Path, maps_bytes: Arc<AtomicU64>) -> MapsKeeper {
        MapsKeeper {
            dir: dir.to_path_buf(),
            maps: HashMap::new(),
            own_pid: std::process::id() as i32,
            maps_bytes,
            copies: 0,
            recopy: BTreeSet::new(),
        }
    }

    /// Serves requests until the collector hangs up; returns the number of copies made.
    pub(super) fn run(
        mut self,
        requests: &crossbeam_channel::Receiver<MapsRequest>,
        interval: Duration,
    ) -> u64 {
        let mut last_scan = Instant::now();
        loop {
            let mut wait = interval.saturating_sub(last_scan.elapsed());
            if !self.recopy.is_empty() {
                wait = wait.min(RECOPY_AFTER / 4);
            }
            match requests.recv_timeout(wait) {
                Ok(need) => self.need(need),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
            self.recopy_due();
            if last_scan.elapsed() >= interval {
                self.scan_proc(false);
                last_scan = Instant::now();
            }
        }
        self.copies
    }

    /// Copies the maps of the processes of samples whose copy is missing or stale (the
    /// sample's user ip is outside every executable mapping of the last copy: dlopen).
    fn need(&mut self, need: Vec<(i32, Option<u64>)>) {
        for (pid, ip) in need {
            let stale = match self.maps.get(&pid) {
                None => true,
                Some(k) => {
                    ip.is_some_and(|ip| ip != 0 && !k.exec.iter().any(|&(s, e)| ip >= s && ip < e))
                }
            };
            if !stale {
                continue;
            }
            match self.maps.get(&pid) {
                Some(k) if k.last_copy.elapsed() < RECOPY_AFTER => {
                    self.recopy.insert(pid);
                }
                _ => self.copy_maps(pid),
            }
        }
    }

    /// Copies again the maps of processes whose stale copy was too recent to redo at once.
    fn recopy_due(&mut self) {
        let due: Vec<i32> = self
            .recopy
            .iter()
            .copied()
            .filter(|pid| {
                self.maps
                    .get(pid)
                    .is_none_or(|k| k.last_copy.elapsed() >= RECOPY_AFTER)
            })
            .collect();
        for pid in due {
            self.recopy.remove(&pid);
            self.copy_maps(pid);
        }
    }

    /// Copies `/proc/PID/maps` into `perf/maps/PID-TS.maps`.
    fn copy_maps(&mut self, pid: i32) {
        let Ok(text) = fs::read(format!("/proc/{pid}/maps")) else {
            return;
        };
        let ts = sysinfo::monotonic_ns();
        let exec = String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| {
                let mut p = l.split_ascii_whitespace();
                let range = p.next()?;
                let perms = p.next()?;
                if perms.as_bytes().get(2) != Some(&b'x') {
                    return None;
                }
                let (s, e) = range.split_once('-')?;
                Some((
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                ))
            })
            .collect();
        // Two copies in the same nanosecond would collide: bump.
        let ts = ts.max(MAPS_SERIAL.fetch_max(ts, Ordering::Relaxed) + 1);
        MAPS_SERIAL.store(ts, Ordering::Relaxed);
        let path = perffile::maps_path(&self.dir, pid, ts);
        if let Err(e) = sysinfo::write_private(&path, &text) {
            tracing::warn!("{e}");
            return;
        }
        self.maps_bytes
            .fetch_add(text.len() as u64, Ordering::Relaxed);
        self.copies += 1;
        self.maps.insert(
            pid,
            KnownProc {
                image: Image::of(pid),
                exec,
                last_copy: Instant::now(),
            },
        );
    }

    /// Copies the maps of new processes and of processes whose executable changed (exec).
    pub(super) fn scan_proc(&mut self, all: bool) {
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let mut alive = BTreeSet::new();
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            alive.insert(pid);
            if pid == self.own_pid {
                continue;
            }
            let image = Image::of(pid);
            if image.exe.is_none() {
                continue; // kernel thread (no user address space) or gone
            }
            let changed = match self.maps.get(&pid) {
                None => true,
                Some(k) => k.image != image,
            };
            if all || changed {
                self.copy_maps(pid);
            }
        }
        self.maps.retain(|pid, _| alive.contains(pid));
        self.recopy.retain(|pid| alive.contains(pid));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn start_code_is_field_26_after_a_name_with_spaces_and_parentheses() {
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[26 - 3] = "94558612480000".to_string();
        let line = format!("4242 (a (b) c) {}", fields.join(" "));
        assert_eq!(start_code(&line), Some(94_558_612_480_000));
        assert_eq!(start_code("4242 (x) S 1"), None);
        // This process's own code start is where its maps put the executable.
        let own = Image::of(std::process::id() as i32);
        assert!(own.exe.is_some());
        assert!(own.start_code.is_some_and(|a| a > 0));
    }

    /// A process that execs its own executable keeps its path but not its code start, so
    /// the `/proc` scan copies its maps again.
    #[test]
    fn an_exec_of_the_same_executable_is_a_new_image() {
        // A shell that execs a shell (a later command keeps it from exec'ing `sleep`).
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 0.3; exec /bin/sh -c 'sleep 2; true'"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::thread::sleep(Duration::from_millis(100));
        let first = Image::of(pid);
        std::thread::sleep(Duration::from_millis(600));
        let second = Image::of(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(first.exe, second.exe);
        assert_ne!(first, second);
    }
}
