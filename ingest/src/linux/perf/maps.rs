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
    exe: Option<PathBuf>,
    /// Executable ranges of the last copy.
    exec: Vec<(u64, u64)>,
    last_copy: Instant,
}

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
            let wait = interval.saturating_sub(last_scan.elapsed());
            match requests.recv_timeout(wait) {
                Ok(need) => self.need(need),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
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
            let known = self.maps.get(&pid);
            let stale = match known {
                None => true,
                Some(k) => ip.is_some_and(|ip| {
                    ip != 0
                        && !k.exec.iter().any(|&(s, e)| ip >= s && ip < e)
                        && k.last_copy.elapsed() >= Duration::from_millis(100)
                }),
            };
            if stale {
                self.copy_maps(pid);
            }
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
                exe: fs::read_link(format!("/proc/{pid}/exe")).ok(),
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
            let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
            if exe.is_none() {
                continue; // kernel thread (no user address space) or gone
            }
            let changed = match self.maps.get(&pid) {
                None => true,
                Some(k) => k.exe != exe,
            };
            if all || changed {
                self.copy_maps(pid);
            }
        }
        self.maps.retain(|pid, _| alive.contains(pid));
    }
}
