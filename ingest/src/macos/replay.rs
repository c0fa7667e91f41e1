//! [`Replay`]: a [`KdebugSystem`] that hands out a recorded kdebug stream as the kernel
//! would, so the collector's loop, buffers and ring run and are tested on any machine.

use super::{Host, KdebugSystem};
use crate::import::kdebug::{codes, encode, KdCpu, KdEvent, KdFile, RAW_VERSION3};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    SetUp,
    Enabled,
}

/// A recorded stream replayed as a kernel would hand it out: each `wait` moves a virtual
/// clock on by its timeout and the events up to then enter a per-CPU buffer (the kernel's
/// buffer split evenly between the CPUs); a full CPU buffer drops its oldest record, and the
/// next read puts a `TRACE_LOST_EVENTS` record before that CPU's first record after the
/// loss, as xnu's `kdbg_read` does; a read returns the records of all CPUs merged by time.
/// Calls out of order (reading before setup, enabling twice) fail with `EINVAL` as they
/// would there.
pub struct Replay {
    events: Vec<KdEvent>,
    next: usize,
    threads: Vec<u8>,
    cpus: Vec<u8>,
    ncpus: usize,
    timebase: (u32, u32),
    clock: u64,
    per_cpu: usize,
    queues: BTreeMap<u32, VecDeque<KdEvent>>,
    lost: BTreeSet<u32>,
    state: State,
    busy: bool,
    calls: Vec<&'static str>,
    dropped: u64,
    done: Arc<AtomicBool>,
}

impl Replay {
    /// Replays `kd`'s events (in file order), thread map and CPU map (made from the events'
    /// CPUs when the file has none).
    pub fn new(kd: &KdFile) -> Replay {
        let mut cpus = kd.cpus.clone();
        if cpus.is_empty() {
            let ids: BTreeSet<u32> = kd.events.iter().map(|e| e.cpu).collect();
            cpus = ids
                .into_iter()
                .map(|c| KdCpu {
                    cpu_id: c,
                    flags: 0,
                    name: format!("cpu{c}"),
                })
                .collect();
        }
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX).max(1);
        Replay {
            events: kd.events.clone(),
            next: 0,
            threads: encode::thread_map(&kd.threads),
            ncpus: cpus.len().max(1),
            cpus: encode::cpu_map(RAW_VERSION3, &cpus),
            timebase: (clamp(kd.timebase.0), clamp(kd.timebase.1)),
            clock: kd
                .events
                .first()
                .map_or(0, |e| e.timestamp.saturating_sub(1)),
            per_cpu: 0,
            queues: BTreeMap::new(),
            lost: BTreeSet::new(),
            state: State::Free,
            busy: false,
            calls: Vec::new(),
            dropped: 0,
            done: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Makes `setup` fail with `EBUSY`, as when another tracer owns kdebug.
    pub fn busy(mut self) -> Replay {
        self.busy = true;
        self
    }

    /// Set once every event has been read (and tracing is still on): a `stop` for
    /// [`super::record`].
    pub fn done(&self) -> Arc<AtomicBool> {
        self.done.clone()
    }

    /// The operations called so far, by their sysctl names.
    pub fn calls(&self) -> &[&'static str] {
        &self.calls
    }

    /// Records the buffer dropped because it was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn invalid(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
    }

    fn ticks(&self, d: Duration) -> u64 {
        let (n, den) = self.timebase;
        u64::try_from(d.as_nanos() * u128::from(den) / u128::from(n)).unwrap_or(u64::MAX)
    }
}

impl KdebugSystem for Replay {
    fn timebase(&self) -> (u32, u32) {
        self.timebase
    }

    fn now(&self) -> u64 {
        self.clock
    }

    fn walltime(&self) -> (u64, u32) {
        let ns = u128::from(self.clock) * u128::from(self.timebase.0) / u128::from(self.timebase.1);
        let ns = ns + 1_764_300_000 * 1_000_000_000;
        (
            (ns / 1_000_000_000) as u64,
            ((ns % 1_000_000_000) / 1_000) as u32,
        )
    }

    fn host(&self) -> Host {
        Host {
            kernel: "replay".into(),
            machine: "replay".into(),
            hostname: "replay".into(),
        }
    }

    fn setup(&mut self, events: u32) -> io::Result<()> {
        self.calls
            .extend(["KERN_KDREMOVE", "KERN_KDSETBUF", "KERN_KDSETUP"]);
        if self.busy {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.per_cpu = (events as usize / self.ncpus).max(1);
        self.state = State::SetUp;
        Ok(())
    }

    fn enable(&mut self, on: bool) -> io::Result<()> {
        self.calls.push("KERN_KDENABLE");
        self.state = match (self.state, on) {
            (State::SetUp, true) => State::Enabled,
            (State::Enabled, false) => State::SetUp,
            _ => return Err(Self::invalid("KERN_KDENABLE out of order")),
        };
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.calls.push("KERN_KDBUFWAIT");
        if self.state != State::Enabled {
            return Err(Self::invalid("KERN_KDBUFWAIT while not tracing"));
        }
        self.clock = self.clock.saturating_add(self.ticks(timeout));
        while let Some(e) = self
            .events
            .get(self.next)
            .filter(|e| e.timestamp <= self.clock)
        {
            let q = self.queues.entry(e.cpu).or_default();
            q.push_back(*e);
            if q.len() > self.per_cpu {
                q.pop_front();
                self.dropped += 1;
                self.lost.insert(e.cpu);
            }
            self.next += 1;
        }
        Ok(())
    }

    fn read(&mut self, out: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        self.calls.push("KERN_KDREADTR");
        if self.state == State::Free {
            return Err(Self::invalid("KERN_KDREADTR before KERN_KDSETUP"));
        }
        let mut n = 0;
        while n < max {
            let Some((&cpu, _)) = self
                .queues
                .iter()
                .filter_map(|(c, q)| q.front().map(|e| (c, e.timestamp)))
                .min_by_key(|&(c, t)| (t, *c))
            else {
                break;
            };
            let Some(q) = self.queues.get_mut(&cpu) else {
                break;
            };
            let e = if self.lost.remove(&cpu) {
                let first = q.front().map_or(self.clock, |e| e.timestamp);
                KdEvent {
                    offset: 0,
                    timestamp: first,
                    args: [0; 4],
                    tid: 0,
                    debugid: codes::TRACE_LOST_EVENTS,
                    cpu,
                }
            } else {
                match q.pop_front() {
                    Some(e) => e,
                    None => break,
                }
            };
            encode::kd_buf(out, &e);
            n += 1;
        }
        if self.state == State::Enabled
            && self.next == self.events.len()
            && self.queues.values().all(VecDeque::is_empty)
        {
            self.done.store(true, Ordering::SeqCst);
        }
        Ok(n)
    }

    fn thread_map(&mut self) -> io::Result<Vec<u8>> {
        self.calls.push("KERN_KDREADCURTHRMAP");
        Ok(self.threads.clone())
    }

    fn cpu_map(&mut self) -> io::Result<Vec<u8>> {
        self.calls.push("KERN_KDCPUMAP");
        Ok(self.cpus.clone())
    }

    fn remove(&mut self) -> io::Result<()> {
        self.calls.push("KERN_KDREMOVE");
        self.state = State::Free;
        Ok(())
    }
}
