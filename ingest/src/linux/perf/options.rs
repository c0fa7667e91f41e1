//! What `--stacks` and `--watch` ask for ([`PerfConfig`], parsed from the command line by
//! [`parse_stacks`] and [`WatchSpec::parse`]) and what the perf recorder reports
//! ([`PerfSummary`]). No system calls here.

/// The perf directory may use 1/8 of the ring cap.
pub const PERF_SHARE_DIVISOR: u64 = 8;
/// Bytes of user stack copied per `--profile` sample: a thread sampled while it computes
/// may be deep in its own calls (a blocking or waking stack is taken at a syscall, where the
/// frames above the caller are few), and an unoptimized build's frames are large.
pub const PROFILE_STACK_BYTES: u32 = 4096;
/// Bytes of user stack copied per stack sample (default of [`PerfConfig::stack_bytes`]).
pub const DEFAULT_STACK_BYTES: u32 = 1024;
/// The syscalls `--stacks syscalls` samples: those that block or send
/// ([`argus_schema::syscalls`]: sleep, poll, send, receive, notify, yield, plus futex,
/// wait4/waitid, the epoll and semaphore waits).
pub fn default_stack_syscalls() -> Vec<i32> {
    use argus_schema::syscalls as sc;
    let extra = [
        "futex",
        "futex_waitv",
        "wait4",
        "waitid",
        "semop",
        "semtimedop",
        "flock",
        "connect",
        "msgrcv",
        "io_getevents",
        "io_uring_enter",
        "rt_sigtimedwait",
        "rt_sigsuspend",
    ];
    (0..sc::NAMES.len() as i32)
        .filter(|&nr| {
            sc::is_sleep(nr)
                || sc::is_poll(nr)
                || sc::is_send(nr)
                || sc::is_receive(nr)
                || sc::is_notify(nr)
                || sc::is_yield(nr)
                || extra.contains(&sc::NAMES[nr as usize])
        })
        .collect()
}

/// What `--stacks` samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackSet {
    /// Stacks of threads that block and of the tasks that wake them (`sched_switch` with
    /// `prev_state` S or D, `sched_waking` in task context): the default.
    pub blocking: bool,
    /// Stacks at `sys_enter` of these syscalls (the per-syscall mode).
    pub syscalls: Vec<i32>,
}

impl StackSet {
    /// Whether nothing would be sampled.
    pub fn is_empty(&self) -> bool {
        !self.blocking && self.syscalls.is_empty()
    }
}

/// Parses a `--stacks` argument: empty, `default` or `blocking` for the stacks of threads
/// that block and of their wakers ([`StackSet::blocking`]); else a comma-separated list of
/// syscall names or numbers, where `syscalls` stands for [`default_stack_syscalls`] and
/// `blocking` may be added (`--stacks blocking,connect`).
pub fn parse_stacks(spec: &str) -> Result<StackSet, String> {
    let mut out = StackSet::default();
    for item in spec.split(',').map(str::trim) {
        let add: Vec<i32> = match item {
            "" | "default" | "blocking" => {
                out.blocking = true;
                continue;
            }
            "syscalls" => default_stack_syscalls(),
            name => match name
                .parse::<i32>()
                .ok()
                .or_else(|| argus_schema::syscalls::number(name))
            {
                Some(nr) if (0..argus_schema::syscalls::NAMES.len() as i32).contains(&nr) => {
                    vec![nr]
                }
                _ => {
                    return Err(format!(
                        "{name:?} is not a syscall name or number (nor `blocking`, `syscalls`)"
                    ))
                }
            },
        };
        for nr in add {
            if !out.syscalls.contains(&nr) {
                out.syscalls.push(nr);
            }
        }
    }
    Ok(out)
}

/// Where a watched address is: a number or a symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchTarget {
    /// An address.
    Addr(u64),
    /// A symbol of the process's ELF files (raw or demangled name).
    Symbol(String),
}

/// Which process a watch is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchProcess {
    /// A running process.
    Pid(i32),
    /// The recorded command (`@cmd`).
    Command,
}

/// A parsed `--watch ADDR|SYMBOL[:LEN]@PID|@cmd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// The argument as given.
    pub text: String,
    /// What to watch.
    pub target: WatchTarget,
    /// Bytes (1, 2, 4 or 8); `None`: the symbol's size (capped to 8), or 8 for an address.
    pub len: Option<u64>,
    /// Which process.
    pub process: WatchProcess,
}

impl WatchSpec {
    /// Parses `ADDR|SYMBOL[:LEN]@PID|@cmd` (ADDR in hex with `0x`, or decimal).
    pub fn parse(text: &str) -> Result<WatchSpec, String> {
        let (what, proc_part) = text
            .rsplit_once('@')
            .ok_or_else(|| format!("{text:?}: expected ADDR|SYMBOL[:LEN]@PID or @cmd"))?;
        let process = match proc_part {
            "cmd" => WatchProcess::Command,
            p => WatchProcess::Pid(
                p.parse()
                    .ok()
                    .filter(|&p: &i32| p > 0)
                    .ok_or_else(|| format!("{text:?}: {p:?} is not a pid or `cmd`"))?,
            ),
        };
        let (target, len) = match what.rsplit_once(':') {
            Some((t, l)) if !t.ends_with(':') && l.chars().all(|c| c.is_ascii_digit()) => {
                let len: u64 = l
                    .parse()
                    .map_err(|_| format!("{text:?}: bad length {l:?}"))?;
                if ![1, 2, 4, 8].contains(&len) {
                    return Err(format!("{text:?}: length must be 1, 2, 4 or 8, got {len}"));
                }
                (t, Some(len))
            }
            _ => (what, None),
        };
        if target.is_empty() {
            return Err(format!("{text:?}: nothing to watch before '@'"));
        }
        let target = if let Some(hex) = target.strip_prefix("0x") {
            WatchTarget::Addr(
                u64::from_str_radix(hex, 16)
                    .map_err(|_| format!("{text:?}: {target:?} is not a hex address"))?,
            )
        } else if target.chars().all(|c| c.is_ascii_digit()) {
            WatchTarget::Addr(
                target
                    .parse()
                    .map_err(|_| format!("{text:?}: {target:?} is not an address"))?,
            )
        } else {
            WatchTarget::Symbol(target.to_string())
        };
        Ok(WatchSpec {
            text: text.to_string(),
            target,
            len,
            process,
        })
    }
}

/// What to record with perf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfConfig {
    /// What to sample call stacks at (`None`: no stacks).
    pub stacks: Option<StackSet>,
    /// Hardware watchpoints.
    pub watches: Vec<WatchSpec>,
    /// Bytes of user stack copied per stack sample ([`DEFAULT_STACK_BYTES`]; 0 keeps only
    /// the frame-pointer callchain).
    pub stack_bytes: u32,
    /// Time-based call-stack sampling of every running thread at this many samples per
    /// second (`--profile HZ`; `None`: off).
    pub profile_hz: Option<u32>,
}

impl PerfConfig {
    /// Whether anything is recorded with perf.
    pub fn enabled(&self) -> bool {
        self.stacks.is_some() || !self.watches.is_empty() || self.profile_hz.is_some()
    }

    /// Whether the command must be spawned stopped (a watch on `@cmd`).
    pub fn watches_command(&self) -> bool {
        self.watches
            .iter()
            .any(|w| w.process == WatchProcess::Command)
    }
}

/// What the perf collector recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfSummary {
    /// Stack samples written.
    pub stack_samples: u64,
    /// Watchpoint hits written.
    pub watch_hits: u64,
    /// Samples the kernel dropped (a ring was full).
    pub lost: u64,
    /// Samples of the recorder's own threads, dropped.
    pub own_dropped: u64,
    /// Maps copies written.
    pub maps_copies: u64,
    /// Perf chunks deleted by the budget.
    pub dropped_chunks: u64,
    /// Bytes under `perf/` at the end.
    pub bytes: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn watch_specs_parse() {
        let w = WatchSpec::parse("ARGUS_FLAG@cmd").unwrap();
        assert_eq!(w.target, WatchTarget::Symbol("ARGUS_FLAG".into()));
        assert_eq!(w.process, WatchProcess::Command);
        assert_eq!(w.len, None);
        let w = WatchSpec::parse("0x7f00:4@123").unwrap();
        assert_eq!(w.target, WatchTarget::Addr(0x7f00));
        assert_eq!((w.len, w.process), (Some(4), WatchProcess::Pid(123)));
        let w = WatchSpec::parse("my::flag:1@9").unwrap();
        assert_eq!(w.target, WatchTarget::Symbol("my::flag".into()));
        assert_eq!(w.len, Some(1));
        let w = WatchSpec::parse("my::flag@9").unwrap();
        assert_eq!(w.target, WatchTarget::Symbol("my::flag".into()));
        for bad in [
            "flag", "flag@", "flag@x", "@1", "flag:3@1", "0xzz@1", "f@-1",
        ] {
            assert!(WatchSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stack_syscall_sets() {
        let d = default_stack_syscalls();
        for name in [
            "read",
            "write",
            "futex",
            "nanosleep",
            "epoll_wait",
            "sendmsg",
        ] {
            let nr = argus_schema::syscalls::number(name).unwrap();
            assert!(d.contains(&nr), "{name}");
        }
        assert!(!d.contains(&argus_schema::syscalls::number("getpid").unwrap()));
        let blocking = StackSet {
            blocking: true,
            syscalls: vec![],
        };
        assert_eq!(parse_stacks("").unwrap(), blocking);
        assert_eq!(parse_stacks("default").unwrap(), blocking);
        assert_eq!(parse_stacks("blocking").unwrap(), blocking);
        assert_eq!(parse_stacks("read,1").unwrap().syscalls, vec![0, 1]);
        assert!(!parse_stacks("read,1").unwrap().blocking);
        let both = parse_stacks("blocking,connect").unwrap();
        assert!(both.blocking);
        assert_eq!(
            both.syscalls,
            vec![argus_schema::syscalls::number("connect").unwrap()]
        );
        assert_eq!(parse_stacks("syscalls").unwrap().syscalls, d);
        assert!(parse_stacks("read,nosuch").is_err());
        assert!(StackSet::default().is_empty());
    }
}
