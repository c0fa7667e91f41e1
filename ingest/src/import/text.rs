//! tracefs text (`trace`, `trace_pipe`, atrace, `trace-cmd report`) → events.
//!
//! A line is `<comm>-<pid> [(<tgid>)] [<cpu>] [<flags>] <sec>.<frac>: <event>: <payload>`.
//! `comm` may hold spaces, `-`, `[` and `:`, so the columns are found around the first
//! `[digits]` whose left side ends in `-<pid>` (with an optional `(tgid)` column) and whose
//! right side is an optional flags token then a timestamp (`FORMATS.md` §1).

use super::{ImportFormat, ImportSummary, Imported};
use crate::convert::{Comm, Decoded, ForkSource};
use crate::error::IngestError;
use crate::format::FormatError;
use crate::kallsyms::Kallsyms;
use crate::merge::ThreadTable;
use crate::tracedir::ProcEntry;
use argus_schema::{syscalls, Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

/// `CLONE_THREAD`.
const CLONE_THREAD: u64 = 0x0001_0000;

/// The columns of one event line of tracefs text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextLine<'a> {
    /// The task name column (`<...>` when the kernel had not cached it, `<idle>` for 0).
    pub comm: &'a str,
    /// The task id.
    pub tid: i32,
    /// The TGID column: `Some` when present and known (`(-----)` is unknown).
    pub tgid: Option<i32>,
    /// The CPU column.
    pub cpu: u32,
    /// The flags column (`d.h5`, `.....`), when present.
    pub flags: Option<&'a str>,
    /// The timestamp in nanoseconds.
    pub ts: u64,
    /// Everything after the timestamp: `event: payload`, or `sys_X(...)` / `sys_X -> 0x..`.
    pub body: &'a str,
}

impl TextLine<'_> {
    /// The interrupt context the flags column shows (third flag: `h`/`H` hardirq, `s`
    /// softirq, `z`/`Z` NMI; kernel `trace_print_lat_fmt`). Task context without flags.
    pub fn context(&self) -> Context {
        match self.flags.and_then(|f| f.as_bytes().get(2)) {
            Some(b'z' | b'Z') => Context::Nmi,
            Some(b'h' | b'H') => Context::HardIrq,
            Some(b's') => Context::SoftIrq,
            _ => Context::Task,
        }
    }
}

/// Splits one line of tracefs text into its columns; `None` for anything that is not an
/// event line (headers, comments, continuation lines).
///
/// ```
/// use argus_ingest::import::parse_line;
/// let l = parse_line(
///     " IntentService[E-3866  (  549) [001] d.h1   652.762632: sys_exit: NR 54 = 0",
/// )
/// .expect("an event line");
/// assert_eq!((l.comm, l.tid, l.tgid, l.cpu), ("IntentService[E", 3866, Some(549), 1));
/// assert_eq!((l.flags, l.ts, l.body), (Some("d.h1"), 652_762_632_000, "sys_exit: NR 54 = 0"));
/// ```
pub fn parse_line(line: &str) -> Option<TextLine<'_>> {
    let mut search = 0;
    while let Some(rel) = line[search..].find('[') {
        let open = search + rel;
        search = open + 1;
        let close = open + 1 + line[open + 1..].find(']')?;
        let cpu_text = &line[open + 1..close];
        if cpu_text.is_empty() || !cpu_text.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cpu) = cpu_text.parse::<u32>() else {
            continue;
        };
        let mut left = line[..open].trim_end();
        let mut tgid = None;
        if left.ends_with(')') {
            let Some(po) = left.rfind('(') else {
                continue;
            };
            let inner = left[po + 1..left.len() - 1].trim();
            if !inner.bytes().all(|c| c == b'-') {
                match digits(inner) {
                    Some(v) => tgid = Some(v),
                    None => continue,
                }
            }
            left = left[..po].trim_end();
        }
        let Some(dash) = left.rfind('-') else {
            continue;
        };
        let Some(tid) = digits(&left[dash + 1..]) else {
            continue;
        };
        let comm = left[..dash].trim_start();
        let rest = line[close + 1..].trim_start();
        let (flags, rest) = if parse_ts(rest).is_some() {
            (None, rest)
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            (Some(&rest[..end]), rest[end..].trim_start())
        };
        let Some((ts, body)) = parse_ts(rest) else {
            continue;
        };
        return Some(TextLine {
            comm,
            tid,
            tgid,
            cpu,
            flags,
            ts,
            body,
        });
    }
    None
}

/// A non-negative decimal `i32` made of digits only.
fn digits(s: &str) -> Option<i32> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `<sec>.<frac>:` at the start of `s` → (ns, the text after it).
fn parse_ts(s: &str) -> Option<(u64, &str)> {
    let colon = s.find(':')?;
    let (sec, frac) = s[..colon].split_once('.')?;
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    if !all_digits(sec) || !all_digits(frac) || frac.len() > 9 {
        return None;
    }
    let scale = 10u64.pow(9 - frac.len() as u32);
    let ns = sec
        .parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(frac.parse::<u64>().ok()? * scale)?;
    Some((ns, s[colon + 1..].trim_start()))
}

/// Index just after `key=` where `key` starts the text or follows a space, tab or `[`.
fn find_key(p: &str, key: &str) -> Option<usize> {
    let b = p.as_bytes();
    let mut from = 0;
    while let Some(i) = p[from..].find(key) {
        let s = from + i;
        let e = s + key.len();
        let starts = s == 0 || matches!(b[s - 1], b' ' | b'\t' | b'[');
        if starts && b.get(e) == Some(&b'=') {
            return Some(e + 1);
        }
        from = s + 1;
    }
    None
}

/// The value of `key=`, up to the next whitespace.
fn kv<'a>(p: &'a str, key: &str) -> Option<&'a str> {
    let v = &p[find_key(p, key)?..];
    Some(&v[..v.find(char::is_whitespace).unwrap_or(v.len())])
}

/// A value that may contain spaces (a comm): from `key=` to ` next=` (or the next
/// whitespace when `next` does not follow).
fn kv_str<'a>(p: &'a str, key: &str, next: &str) -> Option<&'a str> {
    let at = find_key(p, key)?;
    let rest = &p[at..];
    let mut from = 0;
    while let Some(i) = rest[from..].find(' ') {
        let sp = from + i;
        let after = &rest[sp + 1..];
        if after.starts_with(next) && after.as_bytes().get(next.len()) == Some(&b'=') {
            return Some(&rest[..sp]);
        }
        from = sp + 1;
    }
    Some(&rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())])
}

fn int(s: Option<&str>) -> Option<i64> {
    let s = s?.trim().trim_end_matches(',');
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok().map(|v| v as i64);
    }
    s.parse::<i64>().ok()
}

fn hex(s: Option<&str>) -> Option<u64> {
    let s = s?.trim().trim_end_matches([',', ':']);
    let s = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(s, 16).ok()
}

/// The letter of a `prev_state` as printed: kernel letters (`S`, `D|K`, `R+`), or a number
/// (`trace-cmd report -R`). Numbers are read with the pre-4.14 table (`S D T t Z X x K`; the
/// numeric form comes from old kernels in practice), a lone bit above the low byte being the
/// preempted marker (`R+`: 256 since 4.14, 2048 or 4096 before).
fn state_letter(s: &str) -> Option<u8> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|c| c.is_ascii_digit()) {
        let v: u64 = s.parse().ok()?;
        let low = v & 0xff;
        return Some(if v == 0 {
            b'R'
        } else if low == 0 {
            b'+'
        } else {
            b"SDTtZXxK"[low.trailing_zeros() as usize]
        });
    }
    if s.starts_with("R+") || s == "+" {
        return Some(b'+');
    }
    s.bytes().next()
}

/// `comm:pid [prio]` (trace-cmd's plugin rendering of a task).
fn plugin_task(s: &str) -> Option<(&str, i32)> {
    let s = s.trim();
    let s = match s.rfind(" [") {
        Some(i) if s.ends_with(']') => &s[..i],
        _ => s,
    };
    let (comm, pid) = s.rsplit_once(':')?;
    Some((comm, digits(pid.trim())?))
}

fn usable_comm(c: &str) -> bool {
    !c.is_empty() && !c.starts_with('<')
}

/// The result of mapping one line.
enum Mapped {
    Event {
        kind: EventKind,
        comms: [Option<(Tid, Comm)>; 2],
        fork_source: ForkSource,
        exec_old_tid: Option<Tid>,
        /// Whether the line's comm column may name the current task.
        column_comm: bool,
    },
    Names([Option<(Tid, Comm)>; 2]),
    Unknown,
    Ignored,
}

fn event(kind: EventKind) -> Mapped {
    Mapped::Event {
        kind,
        comms: [None, None],
        fork_source: ForkSource::None,
        exec_old_tid: None,
        column_comm: true,
    }
}

fn with_comm(kind: EventKind, who: Tid, comm: Option<&str>) -> Mapped {
    Mapped::Event {
        kind,
        comms: [
            None,
            comm.filter(|c| usable_comm(c)).map(|c| (who, comm_of(c))),
        ],
        fork_source: ForkSource::None,
        exec_old_tid: None,
        column_comm: true,
    }
}

fn comm_of(s: &str) -> Comm {
    Comm::new(s.as_bytes())
}

/// Per-file decisions and the callback names seen.
struct Mapper {
    /// The file has `sched_waking`: `sched_wakeup` lines are duplicates of it.
    has_waking: bool,
    /// The file has `task_newtask`: `sched_process_fork` lines only name the child.
    has_newtask: bool,
    /// Pseudo-address → name of the callbacks printed by name.
    symbols: BTreeMap<u64, String>,
}

type Bad = &'static str;

impl Mapper {
    /// A callback printed by `%ps`: its address when printed as one, else a stable
    /// pseudo-address (FNV-1a of the name, top bit set) remembered for naming.
    fn symbol(&mut self, s: Option<&str>) -> Result<u64, Bad> {
        let s = s.ok_or("no function")?.trim();
        if let Some(v) = hex(Some(s)).filter(|_| s.starts_with("0x")) {
            return Ok(v);
        }
        let addr = argus_schema::hash::fnv1a(s.as_bytes()) | (1 << 63);
        self.symbols.entry(addr).or_insert_with(|| s.to_string());
        Ok(addr)
    }

    fn map(&mut self, name: &str, p: &str) -> Result<Mapped, Bad> {
        let tid_of = |key| -> Result<Tid, Bad> {
            int(kv(p, key))
                .map(|v| Tid(v as i32))
                .ok_or("missing pid field")
        };
        Ok(match name {
            "sched_switch" => self.switch(p)?,
            "sched_waking" | "sched_wakeup" | "sched_wakeup_new" => {
                if name == "sched_wakeup" && self.has_waking {
                    return Ok(Mapped::Ignored);
                }
                let (target, comm) = match find_key(p, "pid") {
                    Some(_) => (tid_of("pid")?, kv_str(p, "comm", "pid")),
                    None => {
                        let end = p.find(']').map_or(p.len(), |i| i + 1);
                        let (comm, pid) = plugin_task(&p[..end]).ok_or("no pid")?;
                        (Tid(pid), Some(comm))
                    }
                };
                let kind = if name == "sched_wakeup_new" {
                    EventKind::WakeupNew { target }
                } else {
                    EventKind::Waking { target }
                };
                with_comm(kind, target, comm)
            }
            // A waiter boosting the owner of the PI futex it blocks on. A priority lowered (a
            // waiter leaving, the owner's release) names no lock waited for; the owner's own
            // reset is dropped anyway where the line's task is known.
            "sched_pi_setprio" => {
                let owner = tid_of("pid")?;
                let prio = |k| int(kv(p, k)).ok_or("missing priority field");
                if prio("newprio")? >= prio("oldprio")? {
                    return Ok(Mapped::Ignored);
                }
                with_comm(
                    EventKind::LockOwner { owner, lock: 0 },
                    owner,
                    kv_str(p, "comm", "pid"),
                )
            }
            "sched_process_fork" => {
                let child = tid_of("child_pid")?;
                let comm = kv_str(p, "child_comm", "child_pid");
                if self.has_newtask {
                    let c = comm.filter(|c| usable_comm(c)).map(|c| (child, comm_of(c)));
                    return Ok(Mapped::Names([None, c]));
                }
                let Mapped::Event { comms, .. } = with_comm(EventKind::Exec, child, comm) else {
                    return Err("internal");
                };
                Mapped::Event {
                    kind: EventKind::Fork {
                        child,
                        child_pid: Pid(child.0),
                        thread: false,
                    },
                    comms,
                    fork_source: ForkSource::ProcessFork,
                    exec_old_tid: None,
                    column_comm: true,
                }
            }
            "task_newtask" => {
                let child = tid_of("pid")?;
                let flags = hex(kv(p, "clone_flags")).ok_or("no clone_flags")?;
                let comm = kv_str(p, "comm", "clone_flags");
                let thread = flags & CLONE_THREAD != 0;
                let Mapped::Event { comms, .. } = with_comm(EventKind::Exec, child, comm) else {
                    return Err("internal");
                };
                Mapped::Event {
                    kind: EventKind::Fork {
                        child,
                        child_pid: Pid(child.0),
                        thread,
                    },
                    comms,
                    fork_source: ForkSource::NewTask,
                    exec_old_tid: None,
                    column_comm: true,
                }
            }
            "sched_process_exec" => {
                let file = kv_str(p, "filename", "pid").ok_or("no filename")?;
                let pid = int(kv(p, "pid")).ok_or("no pid")?;
                let old = int(kv(p, "old_pid")).unwrap_or(pid);
                let base = file.rsplit('/').next().unwrap_or(file);
                let who = Tid(pid as i32);
                Mapped::Event {
                    kind: EventKind::Exec,
                    comms: [
                        None,
                        Some((who, Comm::new(&base.as_bytes()[..base.len().min(15)]))),
                    ],
                    fork_source: ForkSource::None,
                    exec_old_tid: (old != pid).then_some(Tid(old as i32)),
                    column_comm: false,
                }
            }
            "sched_process_exit" => event(EventKind::Exit),
            "task_rename" => {
                let who = tid_of("pid")?;
                let comm = kv_str(p, "newcomm", "oom_score_adj").ok_or("no newcomm")?;
                Mapped::Names([None, Some((who, comm_of(comm)))])
            }
            "sys_enter" => {
                let (nr, args) = if let Some(rest) = p.strip_prefix("NR ") {
                    let (nr, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                    let inner = rest.trim().trim_start_matches('(').trim_end_matches(')');
                    (int(Some(nr)).ok_or("bad NR")?, inner)
                } else {
                    let id = int(kv(p, "id")).ok_or("no NR or id")?;
                    let args = find_key(p, "args").map_or("", |i| &p[i..]);
                    let args = args.trim_start_matches("ARRAY[").trim_end_matches(']');
                    (id, args)
                };
                let mut a = [0u64; 6];
                for (slot, v) in a.iter_mut().zip(args.split(',')) {
                    *slot = hex(Some(v.trim())).unwrap_or(0);
                }
                event(EventKind::SysEnter {
                    nr: nr as i32,
                    args: a,
                })
            }
            "sys_exit" => {
                let (nr, ret) = if let Some(rest) = p.strip_prefix("NR ") {
                    let (nr, ret) = rest.split_once(" = ").ok_or("no `= ret`")?;
                    (int(Some(nr)), int(Some(ret)))
                } else {
                    (int(kv(p, "id")), int(kv(p, "ret")))
                };
                event(EventKind::SysExit {
                    nr: nr.ok_or("bad NR")? as i32,
                    ret: ret.ok_or("bad return value")?,
                })
            }
            "irq_handler_entry" | "irq_handler_exit" => {
                let irq = int(kv(p, "irq")).ok_or("no irq")? as i32;
                event(if name == "irq_handler_entry" {
                    EventKind::IrqEntry { irq }
                } else {
                    EventKind::IrqExit { irq }
                })
            }
            "softirq_entry" | "softirq_exit" => {
                let vec = int(kv(p, "vec")).ok_or("no vec")? as u32;
                event(if name == "softirq_entry" {
                    EventKind::SoftirqEntry { vec }
                } else {
                    EventKind::SoftirqExit { vec }
                })
            }
            "hrtimer_start" => event(EventKind::HrtimerStart {
                timer: hex(kv(p, "hrtimer")).ok_or("no hrtimer")?,
                function: self.symbol(kv(p, "function"))?,
                expires: int(kv(p, "expires")).ok_or("no expires")? as u64,
            }),
            "hrtimer_expire_entry" => event(EventKind::HrtimerExpire {
                timer: hex(kv(p, "hrtimer")).ok_or("no hrtimer")?,
                function: self.symbol(kv(p, "function"))?,
            }),
            "hrtimer_expire_exit" => event(EventKind::HrtimerExpireExit {
                timer: hex(kv(p, "hrtimer")).ok_or("no hrtimer")?,
            }),
            "timer_start" => event(EventKind::TimerStart {
                timer: hex(kv(p, "timer")).ok_or("no timer")?,
                function: self.symbol(kv(p, "function"))?,
                expires: int(kv(p, "expires")).ok_or("no expires")? as u64,
            }),
            "timer_expire_entry" => event(EventKind::TimerExpire {
                timer: hex(kv(p, "timer")).ok_or("no timer")?,
                function: self.symbol(kv(p, "function"))?,
            }),
            "timer_expire_exit" => event(EventKind::TimerExpireExit {
                timer: hex(kv(p, "timer")).ok_or("no timer")?,
            }),
            "workqueue_queue_work" => event(EventKind::WorkQueue {
                work: hex(kv(p, "struct").or_else(|| kv(p, "work"))).ok_or("no work")?,
                function: self.symbol(kv(p, "function"))?,
            }),
            "workqueue_execute_start" | "workqueue_execute_end" => {
                // `work struct %p: function %ps` (raw: `work=0x.. function=0x..`).
                let (work, function) = match p.strip_prefix("work struct ") {
                    Some(rest) => {
                        let (w, f) = rest.split_once(':').unwrap_or((rest, ""));
                        (
                            hex(Some(w)),
                            f.trim().strip_prefix("function ").map(str::trim),
                        )
                    }
                    None => (hex(kv(p, "work")), kv(p, "function")),
                };
                let work = work.ok_or("no work")?;
                if name == "workqueue_execute_end" {
                    event(EventKind::WorkEnd { work })
                } else {
                    event(EventKind::WorkStart {
                        work,
                        function: self.symbol(function)?,
                    })
                }
            }
            "signal_generate" => event(EventKind::SignalGenerate {
                sig: int(kv(p, "sig")).ok_or("no sig")? as i32,
                target: tid_of("pid")?,
            }),
            "signal_deliver" => event(EventKind::SignalDeliver {
                sig: int(kv(p, "sig")).ok_or("no sig")? as i32,
            }),
            "tracing_mark_write" | "0" => marker(p),
            "print" => {
                // `ip: text` (the print fmt `%ps: %s`), or raw `ip=0x.. buf=text`.
                let text = match find_key(p, "buf") {
                    Some(i) if p.starts_with("ip=") => &p[i..],
                    _ => match p.split_once(": ") {
                        Some((ip, rest)) if !ip.contains(' ') => rest,
                        _ => p,
                    },
                };
                marker(text)
            }
            _ => Mapped::Unknown,
        })
    }

    fn switch(&mut self, p: &str) -> Result<Mapped, Bad> {
        let (prev, prev_comm, state, next, next_comm) = if find_key(p, "prev_pid").is_some() {
            (
                int(kv(p, "prev_pid")).ok_or("bad prev_pid")? as i32,
                kv_str(p, "prev_comm", "prev_pid"),
                kv(p, "prev_state").ok_or("no prev_state")?,
                int(kv(p, "next_pid")).ok_or("bad next_pid")? as i32,
                kv_str(p, "next_comm", "next_pid"),
            )
        } else {
            // trace-cmd's plugin form: `comm:pid [prio] S ==> comm:pid [prio]`.
            let (l, r) = p.split_once(" ==> ").ok_or("neither prev_pid= nor ==>")?;
            let (task, state) = l.trim().rsplit_once(' ').ok_or("no prev state")?;
            let (pc, pp) = plugin_task(task).ok_or("bad prev task")?;
            let (nc, np) = plugin_task(r).ok_or("bad next task")?;
            (pp, Some(pc), state, np, Some(nc))
        };
        let letter = state_letter(state).ok_or("bad prev_state")?;
        let c =
            |t: i32, s: Option<&str>| s.filter(|s| usable_comm(s)).map(|s| (Tid(t), comm_of(s)));
        Ok(Mapped::Event {
            kind: EventKind::Switch {
                prev: Tid(prev),
                prev_state: TaskState(letter),
                next: Tid(next),
            },
            comms: [c(prev, prev_comm), c(next, next_comm)],
            fork_source: ForkSource::None,
            exec_old_tid: None,
            column_comm: false,
        })
    }
}

fn marker(text: &str) -> Mapped {
    let text = text.trim_end();
    if text.starts_with("trace_event_clock_sync:") {
        return Mapped::Ignored;
    }
    event(EventKind::Marker {
        text: text.to_string(),
    })
}

/// `sys_X(a: 1, b: 2)` / `sys_X -> 0x0` (per-syscall tracepoints as the kernel prints them)
/// and trace-cmd's named `sys_enter_X: ...` / `sys_exit_X: 0x0`.
fn syscall_form(body: &str) -> Option<Result<EventKind, Bad>> {
    let number = |name: &str| {
        syscalls::number(name)
            .or_else(|| name.strip_prefix("new").and_then(syscalls::number))
            .unwrap_or(-1)
    };
    let args_of = |list: &str| {
        let mut a = [0u64; 6];
        for (slot, arg) in a.iter_mut().zip(list.split(", ")) {
            let v = arg.rsplit_once(": ").map_or(arg, |(_, v)| v);
            *slot = hex(Some(v)).unwrap_or(0);
        }
        a
    };
    let named = |prefix: &str| {
        let rest = body.strip_prefix(prefix)?;
        let (name, tail) = rest.split_once(':')?;
        name.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_')
            .then_some((name, tail))
    };
    if let Some((name, list)) = named("sys_enter_") {
        return Some(Ok(EventKind::SysEnter {
            nr: number(name),
            args: args_of(list.trim()),
        }));
    }
    if let Some((name, ret)) = named("sys_exit_") {
        return Some(
            int(Some(ret.trim()))
                .map(|ret| EventKind::SysExit {
                    nr: number(name),
                    ret,
                })
                .ok_or("bad return value"),
        );
    }
    let rest = body.strip_prefix("sys_")?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let (name, tail) = rest.split_at(end);
    if let Some(list) = tail.strip_prefix('(') {
        let list = list.trim_end().trim_end_matches(')');
        return Some(Ok(EventKind::SysEnter {
            nr: number(name),
            args: args_of(list),
        }));
    }
    let ret = tail.strip_prefix(" -> ")?;
    Some(
        int(Some(ret.trim()))
            .map(|ret| EventKind::SysExit {
                nr: number(name),
                ret,
            })
            .ok_or("bad return value"),
    )
}

/// Imports tracefs text (already extracted from its container).
pub(super) fn import(
    path: &Path,
    text: &str,
    format: ImportFormat,
) -> Result<Imported, IngestError> {
    let mut summary = ImportSummary::default();
    let mut lines = Vec::new();
    let mut max_cpu = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        match parse_line(line) {
            Some(l) => {
                max_cpu = max_cpu.max(Some(l.cpu));
                lines.push((i + 1, l));
            }
            None => {
                header(line, &mut summary);
                let t = line.trim();
                if !t.is_empty() && !t.starts_with('#') {
                    summary.skipped_lines += 1;
                    if summary.first_skipped_line.is_none()
                        && !t.starts_with("version = ")
                        && !t.starts_with("cpus=")
                        && !t.starts_with("CPU ")
                    {
                        summary.first_skipped_line = Some(i + 1);
                    }
                }
            }
        }
    }
    if lines.is_empty() {
        return Err(IngestError::Io {
            file: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "no trace event lines found ({}); expected tracefs text, trace-cmd report output or systrace HTML",
                    summary
                        .first_skipped_line
                        .map_or("the file is empty or all comments".to_string(), |l| {
                            format!("first unrecognized line: {l}")
                        })
                ),
            ),
        });
    }
    if summary.cpus == 0 {
        // Saturating: `[4294967295]` is a CPU column as far as the line's shape goes.
        summary.cpus = max_cpu.map_or(0, |c| c.saturating_add(1));
    }
    // The lines are indexed once, at the first error: looking each one up from the start
    // made a file of bad lines quadratic (issue 18).
    let index = std::cell::OnceCell::new();
    let line_text = |no: usize| {
        let all = index.get_or_init(|| text.lines().collect::<Vec<&str>>());
        no.checked_sub(1)
            .and_then(|i| all.get(i))
            .map_or_else(String::new, |l| l.to_string())
    };
    import_lines(path, &lines, &line_text, summary, format, Vec::new())
}

/// Maps event lines (`(line number, columns)`, each CPU's in its order) into an import:
/// the second half of [`import`], shared with the importers that render their records as
/// lines ([`super::perfetto`]). `line_text` gives a line's text for error messages; `procs`
/// are threads the input names beyond its TGID column.
pub(super) fn import_lines(
    path: &Path,
    lines: &[(usize, TextLine<'_>)],
    line_text: &dyn Fn(usize) -> String,
    mut summary: ImportSummary,
    format: ImportFormat,
    mut procs: Vec<ProcEntry>,
) -> Result<Imported, IngestError> {
    let has_waking = lines
        .iter()
        .any(|(_, l)| l.body.starts_with("sched_waking:"));
    let has_newtask = lines
        .iter()
        .any(|(_, l)| l.body.starts_with("task_newtask:"));
    // Threads alive with a known process: the TGID column.
    let mut seen = HashSet::new();
    for (_, l) in lines {
        if let Some(tgid) = l.tgid.filter(|&g| g > 0 && l.tid > 0) {
            if seen.insert(l.tid) {
                procs.push(ProcEntry {
                    tid: l.tid,
                    pid: tgid,
                    ppid: 0,
                    comm: if usable_comm(l.comm) {
                        l.comm.to_string()
                    } else {
                        String::new()
                    },
                    kernel: false,
                });
            }
        }
    }

    let mut mapper = Mapper {
        has_waking,
        has_newtask,
        symbols: BTreeMap::new(),
    };
    let mut named = HashSet::new();
    let mut errors = Vec::new();
    let mut recs: Vec<(u64, u32, usize, Decoded)> = Vec::with_capacity(lines.len());
    for (no, l) in lines {
        let (name, mapped) = match syscall_form(l.body) {
            Some(r) => ("syscall", r.map(event)),
            None => match l.body.split_once(':') {
                Some((name, payload)) if !name.contains(' ') => {
                    (name, mapper.map(name, payload.trim()))
                }
                _ => {
                    summary.skipped_lines += 1;
                    summary.first_skipped_line.get_or_insert(*no);
                    continue;
                }
            },
        };
        let mapped = match mapped {
            Ok(m) => m,
            Err(reason) => {
                errors.push(IngestError::Format {
                    file: path.to_path_buf(),
                    source: FormatError::BadTraceLine {
                        line: *no,
                        event: name.to_string(),
                        reason,
                        text: line_text(*no),
                    },
                });
                continue;
            }
        };
        let tid = Tid(l.tid);
        if matches!(&mapped, Mapped::Event { kind: EventKind::LockOwner { owner, .. }, .. } if *owner == tid)
        {
            *summary.ignored.entry(name.to_string()).or_default() += 1;
            continue;
        }
        let (ts, cpu) = (Nanos(l.ts), Cpu(l.cpu));
        let column = |column_comm: bool, named: &mut HashSet<i32>| {
            (column_comm && l.tid > 0 && usable_comm(l.comm) && named.insert(l.tid))
                .then(|| (tid, comm_of(l.comm)))
        };
        let d = match mapped {
            Mapped::Unknown => {
                *summary.unknown.entry(name.to_string()).or_default() += 1;
                continue;
            }
            Mapped::Ignored => {
                *summary.ignored.entry(name.to_string()).or_default() += 1;
                continue;
            }
            Mapped::Names(mut comms) => {
                if comms[0].is_none() {
                    comms[0] = column(true, &mut named);
                }
                Decoded {
                    ts,
                    cpu,
                    event: None,
                    comms,
                    fork_source: ForkSource::None,
                    exec_old_tid: None,
                }
            }
            Mapped::Event {
                kind,
                mut comms,
                fork_source,
                exec_old_tid,
                column_comm,
            } => {
                if comms[0].is_none() {
                    comms[0] = column(column_comm, &mut named);
                }
                Decoded {
                    ts,
                    cpu,
                    event: Some(Event {
                        ts,
                        seq: 0,
                        cpu,
                        pid: Pid(l.tid),
                        tid,
                        ctx: l.context(),
                        kind,
                    }),
                    comms,
                    fork_source,
                    exec_old_tid,
                }
            }
        };
        recs.push((l.ts, l.cpu, *no, d));
    }
    // Text traces come merged already, but clock-sync lines and per-CPU buffers can be out of
    // order: the stable sort keeps each CPU's file order for equal times.
    recs.sort_by_key(|r| (r.0, r.1, r.2));
    let mut table = ThreadTable::from_proc(&procs);
    let mut events = Vec::with_capacity(recs.len());
    for (_, _, _, d) in recs {
        if let Some(mut ev) = table.apply(d) {
            ev.seq = events.len() as u64;
            events.push(ev);
        }
    }
    summary.start_ns = events.first().map(|e| e.ts);
    summary.end_ns = events.last().map(|e| e.ts);
    let kallsyms = (!mapper.symbols.is_empty()).then(|| {
        let mut text = String::new();
        for (addr, name) in &mapper.symbols {
            let _ = writeln!(text, "{addr:016x} t {name}");
        }
        Kallsyms::parse(&text)
    });
    Ok(Imported {
        path: path.to_path_buf(),
        format,
        events,
        threads: table.threads(),
        errors,
        summary,
        kallsyms,
    })
}

/// Reads what header lines say: `#P:N` / `cpus=N` (CPU count) and
/// `entries-in-buffer/entries-written: A/B` (B − A events lost).
fn header(line: &str, summary: &mut ImportSummary) {
    if let Some(rest) = line.strip_prefix("cpus=") {
        if let Ok(n) = rest.trim().parse() {
            summary.cpus = n;
        }
    }
    if let Some(i) = line.find("entries-in-buffer/entries-written:") {
        let rest = &line[i + "entries-in-buffer/entries-written:".len()..];
        let mut it = rest.split_whitespace();
        if let Some((a, b)) = it.next().and_then(|ab| ab.split_once('/')) {
            if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
                summary.lost = summary.lost.saturating_add(b.saturating_sub(a));
            }
        }
        if let Some(p) = rest.find("#P:") {
            if let Ok(n) = rest[p + 3..].trim().parse() {
                summary.cpus = n;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Header lines whose lost counts add up past `u64::MAX` (a text trace's headers are the
    /// file's word): the summary's count saturates.
    // See: issue 18 (fuzzing, target `import_text`), docs/fuzzing.md.
    #[test]
    fn gh_18_header_lost_counts_saturate() {
        let header = format!(
            "# entries-in-buffer/entries-written: 0/{}   #P:2\n",
            u64::MAX
        );
        let text = format!(
            "{header}{header}          <idle>-0     [000] d..2   100.000001: sched_switch: \
             prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=sh \
             next_pid=7 next_prio=120\n"
        );
        let imported = import(Path::new("t.txt"), &text, ImportFormat::FtraceText).unwrap();
        assert_eq!(imported.summary().lost, u64::MAX);
        assert_eq!(imported.event_slice().len(), 1);
    }

    /// A line on CPU `u32::MAX` counts `u32::MAX` CPUs instead of overflowing; every bad
    /// line's error quotes that line.
    // See: issue 18 (fuzzing, target `import_text`), docs/fuzzing.md.
    #[test]
    fn gh_18_last_cpu_number_and_bad_line_texts() {
        let mut text = String::from(
            "          <idle>-0     [4294967295] d..2   100.000001: sched_switch: \
             prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=sh \
             next_pid=7 next_prio=120\n",
        );
        for i in 0..50 {
            text.push_str(&format!(
                "              sh-7     [000] ....   100.{i:06}: sched_waking: bad{i}\n"
            ));
        }
        let imported = import(Path::new("t.txt"), &text, ImportFormat::FtraceText).unwrap();
        assert_eq!(imported.summary().cpus, u32::MAX);
        assert_eq!(imported.errors().len(), 50);
        for (i, e) in imported.errors().iter().enumerate() {
            let IngestError::Format {
                source: FormatError::BadTraceLine { line, text, .. },
                ..
            } = e
            else {
                panic!("{e}");
            };
            assert_eq!(*line, i + 2);
            assert!(text.ends_with(&format!("sched_waking: bad{i}")), "{text}");
        }
    }

    /// `sched_pi_setprio` in a waiter's context names the owner of the PI futex it blocks on
    /// (lines as tracefs prints them, from the `pi-lock` workload); the owner's own reset at
    /// its release, and a priority lowered by another task (a waiter leaving), are no lock
    /// owner.
    #[test]
    fn a_pi_boost_by_a_waiter_is_a_lock_owner_and_a_lowering_is_not() {
        let text = "    argus-holder-30286   [000] d..2. 38160.029635: sched_pi_setprio: \
                    comm=argus-spinner pid=30285 oldprio=130 newprio=125\n   \
                    argus-spinner-30285   [001] d..2. 38161.029429: sched_pi_setprio: \
                    comm=argus-spinner pid=30285 oldprio=125 newprio=130\n   \
                    argus-holder-30286   [000] d..2. 38161.029500: sched_pi_setprio: \
                    comm=argus-spinner pid=30285 oldprio=125 newprio=130\n";
        let imported = import(Path::new("t.txt"), text, ImportFormat::FtraceText).unwrap();
        let kinds: Vec<(i32, &EventKind)> = imported
            .event_slice()
            .iter()
            .map(|e| (e.tid.0, &e.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![(
                30286,
                &EventKind::LockOwner {
                    owner: Tid(30285),
                    lock: 0
                }
            )]
        );
        assert_eq!(imported.summary().ignored.get("sched_pi_setprio"), Some(&2));
    }

    #[test]
    fn columns_right_to_left() {
        let l = parse_line("     Web Content-2711  [003] d... 26186.336632: sched_waking: comm=Timer pid=2745 prio=120 target_cpu=001").unwrap();
        assert_eq!(
            (l.comm, l.tid, l.cpu, l.flags),
            ("Web Content", 2711, 3, Some("d..."))
        );
        assert_eq!(l.ts, 26_186_336_632_000);
        let l = parse_line("   binder:496_9-10961 (  496) [000] ..... 12.000000001: x: y").unwrap();
        assert_eq!(
            (l.comm, l.tid, l.tgid, l.ts),
            ("binder:496_9", 10961, Some(496), 12_000_000_001)
        );
        let l = parse_line(
            "          <idle>-0      (-----) [000] d..4  1212.465074: sched_wakeup: comm=a pid=3",
        )
        .unwrap();
        assert_eq!(
            (l.comm, l.tid, l.tgid, l.flags),
            ("<idle>", 0, None, Some("d..4"))
        );
        let l = parse_line(
            "           <...>-1701  [001]    76.211513: sched_switch:          prev_comm=x",
        )
        .unwrap();
        assert_eq!(
            (l.flags, l.body),
            (None, "sched_switch:          prev_comm=x")
        );
        let l = parse_line("a-b-c [x]-7 [002] 1.5: 0: B|1|x").unwrap();
        assert_eq!((l.comm, l.tid, l.ts), ("a-b-c [x]", 7, 1_500_000_000));
        assert!(parse_line("# tracer: nop").is_none());
        assert!(parse_line(" gid=4").is_none());
        assert!(parse_line("cpus=6").is_none());
    }

    #[test]
    fn flags_give_the_context() {
        let ctx = |f: &str| {
            let line = format!("a-1 [000] {f} 1.0: x: y");
            parse_line(&line).unwrap().context()
        };
        assert_eq!(ctx("d.h5"), Context::HardIrq);
        assert_eq!(ctx("dNs6"), Context::SoftIrq);
        assert_eq!(ctx("d.H."), Context::HardIrq);
        assert_eq!(ctx("..z.."), Context::Nmi);
        assert_eq!(ctx("...1"), Context::Task);
    }

    #[test]
    fn states() {
        assert_eq!(state_letter("S"), Some(b'S'));
        assert_eq!(state_letter("R+"), Some(b'+'));
        assert_eq!(state_letter("R"), Some(b'R'));
        assert_eq!(state_letter("D|K"), Some(b'D'));
        assert_eq!(state_letter("0"), Some(b'R'));
        assert_eq!(state_letter("4096"), Some(b'+'));
        assert_eq!(state_letter("256"), Some(b'+'));
        assert_eq!(state_letter("1"), Some(b'S'));
        assert_eq!(state_letter("2"), Some(b'D'));
        assert_eq!(state_letter("64"), Some(b'x'));
        assert!(TaskState(state_letter("1024").unwrap()).letter() == '+');
    }

    fn map1(m: &mut Mapper, name: &str, p: &str) -> EventKind {
        match m.map(name, p).unwrap() {
            Mapped::Event { kind, .. } => kind,
            _ => panic!("{name} not mapped"),
        }
    }

    #[test]
    fn payloads() {
        let mut m = Mapper {
            has_waking: false,
            has_newtask: false,
            symbols: BTreeMap::new(),
        };
        assert_eq!(
            map1(&mut m, "sched_switch", "prev_comm=Web Content prev_pid=2711 prev_prio=120 prev_state=R+ ==> next_comm=CompositorTileW next_pid=3490 next_prio=120"),
            EventKind::Switch { prev: Tid(2711), prev_state: TaskState(b'+'), next: Tid(3490) }
        );
        assert_eq!(
            map1(
                &mut m,
                "sched_switch",
                "trace-cmd:4734 [120] R ==> migration/2:18 [0]"
            ),
            EventKind::Switch {
                prev: Tid(4734),
                prev_state: TaskState(b'R'),
                next: Tid(18)
            }
        );
        assert_eq!(
            map1(&mut m, "sched_switch", "prev_comm=sh prev_pid=1642 prev_prio=120 prev_state=4096 next_comm=kworker/u12:1 next_pid=46 next_prio=120"),
            EventKind::Switch { prev: Tid(1642), prev_state: TaskState(b'+'), next: Tid(46) }
        );
        assert_eq!(
            map1(
                &mut m,
                "sys_enter",
                "NR 172 (29, c350, 805, ffffffff, 81, a508c6e8)"
            ),
            EventKind::SysEnter {
                nr: 172,
                args: [0x29, 0xc350, 0x805, 0xffffffff, 0x81, 0xa508c6e8]
            }
        );
        assert_eq!(
            map1(&mut m, "sys_exit", "NR 54 = -11"),
            EventKind::SysExit { nr: 54, ret: -11 }
        );
        assert_eq!(
            syscall_form("sys_recvmsg -> 0xfffffffffffffff5")
                .unwrap()
                .unwrap(),
            EventKind::SysExit {
                nr: syscalls::number("recvmsg").unwrap(),
                ret: -11
            }
        );
        assert_eq!(
            syscall_form("sys_recvmsg(fd: 3, msg: 7ffe3ce41670, flags: 0)")
                .unwrap()
                .unwrap(),
            EventKind::SysEnter {
                nr: 47,
                args: [3, 0x7ffe3ce41670, 0, 0, 0, 0]
            }
        );
        assert_eq!(
            syscall_form("sys_newstat(filename: 1, statbuf: 2)")
                .unwrap()
                .unwrap(),
            EventKind::SysEnter {
                nr: syscalls::number("stat").unwrap(),
                args: [1, 2, 0, 0, 0, 0]
            }
        );
        assert!(syscall_form("sched_switch: x").is_none());
        assert_eq!(
            syscall_form("sys_exit_group(error_code: 7f)")
                .unwrap()
                .unwrap(),
            EventKind::SysEnter {
                nr: 231,
                args: [0x7f, 0, 0, 0, 0, 0]
            }
        );
        assert_eq!(
            syscall_form("sys_exit_read: 0x24").unwrap().unwrap(),
            EventKind::SysExit { nr: 0, ret: 0x24 }
        );
        let EventKind::HrtimerStart { timer, function, expires } = map1(&mut m, "hrtimer_start", "hrtimer=ffffaf6e0126bd18 function=hrtimer_wakeup expires=26193635601343 softexpires=26193635551343") else { panic!() };
        assert_eq!((timer, expires), (0xffffaf6e0126bd18, 26193635601343));
        assert_eq!(m.symbols[&function], "hrtimer_wakeup");
        let EventKind::WorkStart { work, function } = map1(
            &mut m,
            "workqueue_execute_start",
            "work struct 00000000a1b2c3d4: function vmstat_update",
        ) else {
            panic!()
        };
        assert_eq!(
            (work, m.symbols[&function].as_str()),
            (0xa1b2c3d4, "vmstat_update")
        );
        assert_eq!(
            map1(
                &mut m,
                "workqueue_queue_work",
                "work struct=ffff8881 function=0xffffffff81000000 workqueue=events req_cpu=8 cpu=0"
            ),
            EventKind::WorkQueue {
                work: 0xffff8881,
                function: 0xffffffff81000000
            }
        );
        assert_eq!(
            map1(
                &mut m,
                "signal_generate",
                "sig=10 errno=0 code=0 comm=sleep pid=4242 grp=1 res=0"
            ),
            EventKind::SignalGenerate {
                sig: 10,
                target: Tid(4242)
            }
        );
        assert_eq!(
            map1(&mut m, "print", "0xffff00000819ff24s: TRACE_MARKER_START"),
            EventKind::Marker {
                text: "TRACE_MARKER_START".into()
            }
        );
        assert_eq!(
            map1(&mut m, "tracing_mark_write", "B|7459|notifyFramePending"),
            EventKind::Marker {
                text: "B|7459|notifyFramePending".into()
            }
        );
        assert!(matches!(
            m.map(
                "tracing_mark_write",
                "trace_event_clock_sync: parent_ts=1.0"
            ),
            Ok(Mapped::Ignored)
        ));
        assert!(matches!(
            m.map("cpu_idle", "state=1 cpu_id=0"),
            Ok(Mapped::Unknown)
        ));
        assert!(m.map("sched_switch", "prev_comm=x prev_state=S").is_err());
    }
}
