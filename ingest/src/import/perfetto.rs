//! Perfetto traces (`.perfetto-trace`, `.pftrace`): the ftrace data of Android and ChromeOS
//! recordings, read directly from the protobuf (`perfetto/trace/trace.proto`,
//! `ftrace/ftrace_event_bundle.proto`, `ftrace/ftrace_event.proto` of Perfetto's repository;
//! field numbers below).
//!
//! ```text
//!  Trace { repeated TracePacket packet = 1 }
//!  TracePacket { FtraceEventBundle ftrace_events = 1; ProcessTree process_tree = 2 }
//!  FtraceEventBundle { uint32 cpu = 1; repeated FtraceEvent event = 2; bool lost_events = 3;
//!                      CompactSched compact_sched = 4 }
//!  FtraceEvent { uint64 timestamp = 1; uint32 pid = 2; uint32 common_flags = 5;
//!                oneof: print = 3, sched_switch = 4, sched_wakeup = 17, sched_waking = 20,
//!                softirq_entry/exit = 24/25, irq_handler_entry/exit = 36/37,
//!                sched_wakeup_new = 114, task_newtask = 235, task_rename = 236,
//!                sched_process_exec/exit/fork = 237/238/239, sys_enter/exit = 329/330,
//!                hrtimer_start = 551, hrtimer_expire_entry/exit = 553/554 }
//!  CompactSched { intern_table = 5; switch_timestamp = 1 (deltas), switch_prev_state = 2,
//!                 switch_next_pid = 3, switch_next_prio = 4, switch_next_comm_index = 6;
//!                 waking_timestamp = 7 (deltas), waking_pid = 8, waking_target_cpu = 9,
//!                 waking_prio = 10, waking_comm_index = 11, waking_common_flags = 12 }
//! ```
//!
//! Each event becomes the line `trace-cmd report -R` would print for it (the same fields by
//! the same names) and goes through the text importer's mapping, so a Perfetto trace means
//! what the same events mean in any other input. Compact sched events carry no previous task:
//! it is the CPU's current task (the last switch's next, the last full event's pid); a switch
//! or waking with none known yet (the first of a CPU) is skipped and counted in a note.
//! `process_tree` packets give the thread groups and names. A bundle with `lost_events` is a
//! lost range on its CPU from its previous bundle's last event to its first.

use super::text::{import_lines, TextLine};
use super::{ImportFormat, ImportSummary, Imported};
use crate::error::IngestError;
use crate::tracedir::ProcEntry;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

fn malformed(file: &Path, offset: u64, what: impl Into<String>) -> IngestError {
    IngestError::Malformed {
        file: file.to_path_buf(),
        offset,
        what: what.into(),
    }
}

/// One field of a protobuf message.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl Value<'_> {
    fn u64(self) -> u64 {
        match self {
            Value::Varint(v) | Value::Fixed64(v) => v,
            Value::Fixed32(v) => v.into(),
            Value::Bytes(_) => 0,
        }
    }

    fn i64(self) -> i64 {
        self.u64() as i64
    }

    fn str(self) -> String {
        match self {
            Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        }
    }
}

/// The fields of one message: `(number, value, offset of the field in the file)`.
struct Message<'a> {
    fields: Vec<(u32, Value<'a>, u64)>,
}

fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl<'a> Message<'a> {
    /// Parses `b` (at `base` of `file`).
    fn parse(file: &Path, b: &'a [u8], base: u64) -> Result<Message<'a>, IngestError> {
        let mut fields = Vec::new();
        let mut pos = 0;
        while pos < b.len() {
            let at = base + pos as u64;
            let bad = |what: &str| malformed(file, at, what.to_string());
            let key =
                varint(b, &mut pos).ok_or_else(|| bad("a field key runs past its message"))?;
            let (num, wire) = ((key >> 3) as u32, key & 7);
            let value = match wire {
                0 => Value::Varint(
                    varint(b, &mut pos).ok_or_else(|| bad("a varint runs past its message"))?,
                ),
                1 => {
                    let s = b
                        .get(pos..pos + 8)
                        .ok_or_else(|| bad("a fixed64 runs past its message"))?;
                    pos += 8;
                    Value::Fixed64(u64::from_le_bytes(
                        s.try_into().map_err(|_| bad("fixed64"))?,
                    ))
                }
                2 => {
                    let n =
                        varint(b, &mut pos).ok_or_else(|| bad("a length runs past its message"))?;
                    let end = (pos as u64)
                        .checked_add(n)
                        .filter(|&e| e <= b.len() as u64)
                        .ok_or_else(|| {
                            bad(&format!(
                                "a field of {n} bytes runs past its message ({} bytes left)",
                                b.len() - pos
                            ))
                        })? as usize;
                    let s = &b[pos..end];
                    pos = end;
                    Value::Bytes(s)
                }
                5 => {
                    let s = b
                        .get(pos..pos + 4)
                        .ok_or_else(|| bad("a fixed32 runs past its message"))?;
                    pos += 4;
                    Value::Fixed32(u32::from_le_bytes(
                        s.try_into().map_err(|_| bad("fixed32"))?,
                    ))
                }
                w => {
                    return Err(bad(&format!(
                        "field {num} has wire type {w}, which protobuf does not define"
                    )))
                }
            };
            fields.push((num, value, at));
        }
        Ok(Message { fields })
    }

    fn get(&self, num: u32) -> Option<Value<'a>> {
        self.fields.iter().rev().find(|f| f.0 == num).map(|f| f.1)
    }

    fn all(&self, num: u32) -> impl Iterator<Item = (Value<'a>, u64)> + '_ {
        self.fields
            .iter()
            .filter(move |f| f.0 == num)
            .map(|f| (f.1, f.2))
    }

    /// A repeated scalar, packed or not.
    fn packed(&self, num: u32, file: &Path) -> Result<Vec<u64>, IngestError> {
        let mut out = Vec::new();
        for (v, at) in self.all(num) {
            match v {
                Value::Bytes(b) => {
                    let mut pos = 0;
                    while pos < b.len() {
                        out.push(varint(b, &mut pos).ok_or_else(|| {
                            malformed(file, at, "a packed varint runs past its field")
                        })?);
                    }
                }
                v => out.push(v.u64()),
            }
        }
        Ok(out)
    }

    /// The sub-message in field `num` (its bytes' offset is close to the field's).
    fn sub(&self, num: u32, file: &Path) -> Result<Option<Message<'a>>, IngestError> {
        self.fields
            .iter()
            .find(|f| f.0 == num)
            .map(|&(_, v, at)| match v {
                Value::Bytes(b) => Message::parse(file, b, at),
                _ => Err(malformed(file, at, format!("field {num} is not a message"))),
            })
            .transpose()
    }
}

/// One rendered event.
struct Rendered {
    ts: u64,
    cpu: u32,
    tid: i32,
    flags: String,
    body: String,
}

/// The kernel's `common_flags` as the flags column shows them (`irqs-off`, `need-resched`,
/// hardirq/softirq/NMI, preempt depth): only the context letter matters here.
fn flags_column(flags: u64) -> String {
    // TRACE_FLAG_NMI 0x40, HARDIRQ 0x08, SOFTIRQ 0x10.
    let ctx = if flags & 0x40 != 0 {
        'Z'
    } else if flags & 0x08 != 0 {
        'h'
    } else if flags & 0x10 != 0 {
        's'
    } else {
        '.'
    };
    format!("..{ctx}.")
}

/// `sched_switch` and friends: the `-R` body of one full `FtraceEvent`, or `None` for an
/// event Argus does not map (counted by name).
fn render(ev: &Message<'_>, file: &Path) -> Result<Option<(&'static str, String)>, IngestError> {
    const EVENTS: &[(u32, &str)] = &[
        (3, "print"),
        (4, "sched_switch"),
        (17, "sched_wakeup"),
        (20, "sched_waking"),
        (24, "softirq_entry"),
        (25, "softirq_exit"),
        (36, "irq_handler_entry"),
        (37, "irq_handler_exit"),
        (114, "sched_wakeup_new"),
        (235, "task_newtask"),
        (236, "task_rename"),
        (237, "sched_process_exec"),
        (238, "sched_process_exit"),
        (239, "sched_process_fork"),
        (329, "sys_enter"),
        (330, "sys_exit"),
        (353, "sched_pi_setprio"),
        (551, "hrtimer_start"),
        (553, "hrtimer_expire_entry"),
        (554, "hrtimer_expire_exit"),
    ];
    let Some((num, name)) = EVENTS.iter().find(|(n, _)| ev.get(*n).is_some()).copied() else {
        return Ok(None);
    };
    let Some(m) = ev.sub(num, file)? else {
        return Ok(None);
    };
    let s = |n: u32| m.get(n).map_or_else(String::new, Value::str);
    let i = |n: u32| m.get(n).map_or(0, |v| v.i64() as i32 as i64);
    let l = |n: u32| m.get(n).map_or(0, Value::i64);
    let u = |n: u32| m.get(n).map_or(0, Value::u64);
    let body = match name {
        "sched_switch" => format!(
            "prev_comm={} prev_pid={} prev_prio={} prev_state={} next_comm={} next_pid={} next_prio={}",
            s(1), i(2), i(3), l(4), s(5), i(6), i(7)
        ),
        "sched_waking" | "sched_wakeup" | "sched_wakeup_new" => format!(
            "comm={} pid={} prio={} success={} target_cpu={}",
            s(1), i(2), i(3), i(4), i(5)
        ),
        "sched_process_fork" => format!(
            "parent_comm={} parent_pid={} child_comm={} child_pid={}",
            s(1), i(2), s(3), i(4)
        ),
        "sched_process_exit" => format!("comm={} pid={} prio={}", s(1), i(2), i(4)),
        "sched_process_exec" => format!("filename={} pid={} old_pid={}", s(1), i(2), i(3)),
        "task_newtask" => format!(
            "pid={} comm={} clone_flags={:x} oom_score_adj={}",
            i(1), s(2), u(3), i(4)
        ),
        "task_rename" => format!(
            "pid={} oldcomm={} newcomm={} oom_score_adj={}",
            i(1), s(2), s(3), i(4)
        ),
        "sys_enter" => {
            let args = m.packed(2, file)?;
            let mut a = String::new();
            for (k, v) in args.iter().chain(std::iter::repeat(&0)).take(6).enumerate() {
                let _ = write!(a, "{}{v:x}", if k > 0 { ", " } else { "" });
            }
            format!("NR {} ({a})", l(1))
        }
        "sys_exit" => format!("NR {} = {}", l(1), l(2)),
        "sched_pi_setprio" => format!(
            "comm={} pid={} oldprio={} newprio={}",
            s(1), i(4), i(3), i(2)
        ),
        "irq_handler_entry" => format!("irq={} name={}", i(1), s(2)),
        "irq_handler_exit" => format!("irq={} ret={}", i(1), i(2)),
        "softirq_entry" | "softirq_exit" => format!("vec={}", u(1)),
        "print" => format!("ip={:#x} buf={}", u(1), s(2).trim_end_matches('\n')),
        "hrtimer_start" => format!(
            "hrtimer={:#x} function={:#x} expires={} softexpires={} mode={}",
            u(1), u(2), l(3), l(4), u(5)
        ),
        "hrtimer_expire_entry" => {
            format!("hrtimer={:#x} now={} function={:#x}", u(1), l(2), u(3))
        }
        "hrtimer_expire_exit" => format!("hrtimer={:#x}", u(1)),
        _ => return Ok(None),
    };
    Ok(Some((name, body)))
}

/// What a walk over the packets gathers.
#[derive(Default)]
struct Gathered {
    lines: Vec<Rendered>,
    procs: BTreeMap<i32, ProcEntry>,
    /// Per CPU: the current task and its priority when known (last switch's next, last full
    /// event's pid).
    current: HashMap<u32, (i32, Option<i32>)>,
    /// Per CPU: the last event time, for lost ranges.
    last_ts: HashMap<u32, u64>,
    lost_ranges: Vec<(u32, u64, u64, Option<u64>)>,
    unknown: BTreeMap<String, u64>,
    no_prev: u64,
}

/// One record of a bundle, before the bundle is put in time order.
enum Rec<'a> {
    /// A full `FtraceEvent`.
    Full {
        pid: i32,
        flags: u64,
        ev: Message<'a>,
    },
    /// A compact switch: the previous task's state, the next task, its prio and comm.
    Switch {
        state: i64,
        next: i32,
        prio: i32,
        comm: String,
    },
    /// A compact waking: the woken task, its CPU, prio, comm and the waker's flags.
    Waking {
        target: i32,
        target_cpu: i32,
        prio: i32,
        comm: String,
        flags: u64,
    },
}

/// The most characters of a task name (the kernel's `TASK_COMM_LEN` less its NUL).
const COMM_LEN: usize = 15;

/// The compact sched records of `c`: times are deltas, comms indices into its intern table.
/// A task name is at most [`COMM_LEN`] characters, as the kernel's: each record copies its
/// comm out of the table, so a long entry used by every record would be copied once per
/// record (issue 18).
fn compact_records(
    file: &Path,
    c: &Message<'_>,
    out: &mut Vec<(u64, Rec<'static>)>,
) -> Result<(), IngestError> {
    let table: Vec<String> = c
        .all(5)
        .map(|(v, _)| v.str().chars().take(COMM_LEN).collect())
        .collect();
    let name = |k: u64| table.get(k as usize).cloned().unwrap_or_default();
    let col = |n: u32| c.packed(n, file);
    let (state, pid, prio, comm) = (col(2)?, col(3)?, col(4)?, col(6)?);
    let at = |v: &[u64], k: usize| v.get(k).copied().unwrap_or(0);
    let mut t = 0u64;
    for (k, delta) in col(1)?.into_iter().enumerate() {
        t = t.wrapping_add(delta);
        out.push((
            t,
            Rec::Switch {
                state: at(&state, k) as i64,
                next: at(&pid, k) as i32,
                prio: at(&prio, k) as i32,
                comm: name(at(&comm, k)),
            },
        ));
    }
    let (pid, target, prio, comm, flags) = (col(8)?, col(9)?, col(10)?, col(11)?, col(12)?);
    let mut t = 0u64;
    for (k, delta) in col(7)?.into_iter().enumerate() {
        t = t.wrapping_add(delta);
        out.push((
            t,
            Rec::Waking {
                target: at(&pid, k) as i32,
                target_cpu: at(&target, k) as i32,
                prio: at(&prio, k) as i32,
                comm: name(at(&comm, k)),
                flags: at(&flags, k),
            },
        ));
    }
    Ok(())
}

fn bundle(file: &Path, b: &Message<'_>, g: &mut Gathered) -> Result<(), IngestError> {
    let cpu = b.get(1).map_or(0, Value::u64) as u32;
    let mut first_ts = None;
    // The time of the last line this bundle gives (all of its CPU).
    let lines_before = g.lines.len();
    let mut compact = Vec::new();
    if let Some(c) = b.sub(4, file)? {
        compact_records(file, &c, &mut compact)?;
    }
    // (time, order, record): at equal times compact records before full ones (the switch
    // that made a task current comes before what it did).
    let mut evs: Vec<(u64, u8, Rec<'_>)> = compact.into_iter().map(|(t, r)| (t, 0, r)).collect();
    for (v, at) in b.all(2) {
        let Value::Bytes(bytes) = v else { continue };
        let ev = Message::parse(file, bytes, at)?;
        let ts = ev.get(1).map_or(0, Value::u64);
        let pid = ev.get(2).map_or(0, Value::u64) as i32;
        let flags = ev.get(5).map_or(0, Value::u64);
        evs.push((ts, 1, Rec::Full { pid, flags, ev }));
    }
    evs.sort_by_key(|e| (e.0, e.1));
    for (ts, _, rec) in evs {
        first_ts.get_or_insert(ts);
        match rec {
            Rec::Full { pid, flags, ev } => {
                if g.current.get(&cpu).map(|c| c.0) != Some(pid) {
                    g.current.insert(cpu, (pid, None));
                }
                match render(&ev, file)? {
                    Some((name, body)) => {
                        if name == "sched_switch" {
                            if let Some(sw) = ev.sub(4, file)? {
                                let next = sw.get(6).map_or(0, Value::i64) as i32;
                                let prio = sw.get(7).map(|v| v.i64() as i32);
                                g.current.insert(cpu, (next, prio));
                            }
                        }
                        g.lines.push(Rendered {
                            ts,
                            cpu,
                            tid: pid,
                            flags: flags_column(flags),
                            body: format!("{name}: {body}"),
                        });
                    }
                    None => {
                        let name = ev
                            .fields
                            .iter()
                            .find(|f| ![1, 2, 5].contains(&f.0))
                            .map_or_else(
                                || "empty".to_string(),
                                |f| format!("ftrace event #{}", f.0),
                            );
                        *g.unknown.entry(name).or_default() += 1;
                    }
                }
            }
            Rec::Switch {
                state,
                next,
                prio,
                comm,
            } => {
                let Some(&(prev, prev_prio)) = g.current.get(&cpu) else {
                    g.no_prev += 1;
                    g.current.insert(cpu, (next, Some(prio)));
                    continue;
                };
                let prev_comm = g
                    .procs
                    .get(&prev)
                    .map_or_else(String::new, |p| p.comm.clone());
                // The previous task's priority is what it had when it was switched in (the
                // trace does not repeat it); Argus does not use it.
                let prev_prio = prev_prio.map_or_else(|| "-1".to_string(), |p| p.to_string());
                g.lines.push(Rendered {
                    ts,
                    cpu,
                    tid: prev,
                    flags: flags_column(0),
                    body: format!(
                        "sched_switch: prev_comm={prev_comm} prev_pid={prev} prev_prio={prev_prio} prev_state={state} next_comm={comm} next_pid={next} next_prio={prio}"
                    ),
                });
                g.procs.entry(next).or_insert_with(|| ProcEntry {
                    tid: next,
                    pid: next,
                    ppid: 0,
                    comm: comm.clone(),
                    kernel: false,
                });
                g.current.insert(cpu, (next, Some(prio)));
            }
            Rec::Waking {
                target,
                target_cpu,
                prio,
                comm,
                flags,
            } => {
                let Some(&(waker, _)) = g.current.get(&cpu) else {
                    g.no_prev += 1;
                    continue;
                };
                g.lines.push(Rendered {
                    ts,
                    cpu,
                    tid: waker,
                    flags: flags_column(flags),
                    body: format!(
                        "sched_waking: comm={comm} pid={target} prio={prio} success=1 target_cpu={target_cpu}"
                    ),
                });
            }
        }
    }
    let lost = b.get(3).is_some_and(|v| v.u64() != 0);
    if let (true, Some(first)) = (lost, first_ts) {
        let from = g.last_ts.get(&cpu).copied().unwrap_or(first).min(first);
        g.lost_ranges.push((cpu, from, first, None));
    }
    // The CPU's last line: this bundle's last, else what the CPU had (looking it up among
    // every CPU's lines was quadratic in the number of bundles, issue 18).
    if let Some(last) = g.lines[lines_before..].last().map(|l| l.ts) {
        g.last_ts.insert(cpu, last);
    }
    Ok(())
}

fn process_tree(file: &Path, t: &Message<'_>, g: &mut Gathered) -> Result<(), IngestError> {
    for (v, at) in t.all(1) {
        let Value::Bytes(b) = v else { continue };
        let p = Message::parse(file, b, at)?;
        let pid = p.get(1).map_or(0, Value::i64) as i32;
        let ppid = p.get(2).map_or(0, Value::i64) as i32;
        let cmdline = p.all(3).next().map(|(v, _)| v.str()).unwrap_or_default();
        let comm = cmdline
            .rsplit('/')
            .next()
            .unwrap_or("")
            .chars()
            .take(15)
            .collect();
        let e = g.procs.entry(pid).or_insert_with(|| ProcEntry {
            tid: pid,
            pid,
            ppid,
            comm,
            kernel: false,
        });
        e.pid = pid;
        e.ppid = ppid;
    }
    for (v, at) in t.all(2) {
        let Value::Bytes(b) = v else { continue };
        let th = Message::parse(file, b, at)?;
        let tid = th.get(1).map_or(0, Value::i64) as i32;
        let tgid = th.get(3).map_or(tid as i64, Value::i64) as i32;
        let name = th.get(2).map_or_else(String::new, Value::str);
        let e = g.procs.entry(tid).or_insert_with(|| ProcEntry {
            tid,
            pid: tgid,
            ppid: 0,
            comm: String::new(),
            kernel: false,
        });
        e.pid = tgid;
        if !name.is_empty() {
            e.comm = name;
        }
    }
    Ok(())
}

/// Whether `bytes` look like a Perfetto trace: a sequence of `packet` (field 1,
/// length-delimited) fields, the first a parseable TracePacket.
pub(super) fn looks_like(bytes: &[u8]) -> bool {
    if bytes.first() != Some(&0x0a) {
        return false;
    }
    let mut pos = 1;
    let Some(n) = varint(bytes, &mut pos) else {
        return false;
    };
    let Some(end) = (pos as u64)
        .checked_add(n)
        .filter(|&e| e <= bytes.len() as u64)
    else {
        return false;
    };
    Message::parse(Path::new(""), &bytes[pos..end as usize], 0)
        .is_ok_and(|m| !m.fields.is_empty() && m.fields.iter().all(|f| f.0 > 0))
}

/// Imports a Perfetto trace (its bytes, read by [`super::open`]).
pub(super) fn import(path: &Path, bytes: &[u8]) -> Result<Imported, IngestError> {
    let trace = Message::parse(path, bytes, 0)?;
    let mut g = Gathered::default();
    for (v, at) in trace.all(1) {
        let Value::Bytes(b) = v else {
            return Err(malformed(path, at, "a trace packet that is not a message"));
        };
        let packet = Message::parse(path, b, at)?;
        if let Some(t) = packet.sub(2, path)? {
            process_tree(path, &t, &mut g)?;
        }
        if let Some(bundle_msg) = packet.sub(1, path)? {
            bundle(path, &bundle_msg, &mut g)?;
        }
    }
    if g.lines.is_empty() {
        return Err(malformed(
            path,
            0,
            "a Perfetto trace without ftrace scheduling events (record with the linux.ftrace data source: sched/sched_switch, sched/sched_waking, raw_syscalls)",
        ));
    }
    // Each CPU's events in time order, numbered so that the text mapping's sort keeps it.
    g.lines.sort_by_key(|l| (l.cpu, l.ts));
    let comms: HashMap<i32, String> = g.procs.values().map(|p| (p.tid, p.comm.clone())).collect();
    let idle = "<idle>".to_string();
    let unknown = "<...>".to_string();
    let lines: Vec<(usize, TextLine<'_>)> = g
        .lines
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let comm = if l.tid == 0 {
                &idle
            } else {
                comms
                    .get(&l.tid)
                    .filter(|c| !c.is_empty())
                    .unwrap_or(&unknown)
            };
            (
                k + 1,
                TextLine {
                    comm,
                    tid: l.tid,
                    tgid: g.procs.get(&l.tid).map(|p| p.pid).filter(|&p| p > 0),
                    cpu: l.cpu,
                    flags: Some(&l.flags),
                    ts: l.ts,
                    body: &l.body,
                },
            )
        })
        .collect();
    let mut summary = ImportSummary {
        // Saturating: a bundle's CPU is the file's word (issue 18).
        cpus: g
            .lines
            .iter()
            .map(|l| l.cpu.saturating_add(1))
            .max()
            .unwrap_or(0),
        lost_ranges: g.lost_ranges.clone(),
        ..ImportSummary::default()
    };
    summary.unknown = g.unknown.clone();
    if g.no_prev > 0 {
        summary.notes.push(format!(
            "{} compact sched records before their CPU's current task was known were skipped",
            g.no_prev
        ));
    }
    let text = |no: usize| {
        g.lines
            .get(no - 1)
            .map_or_else(String::new, |l| format!("cpu{} {} {}", l.cpu, l.ts, l.body))
    };
    let procs: Vec<ProcEntry> = g.procs.values().filter(|p| p.pid > 0).cloned().collect();
    import_lines(path, &lines, &text, summary, ImportFormat::Perfetto, procs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint_bytes(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    /// `field` as a length-delimited field holding `body`.
    fn field(num: u32, body: &[u8]) -> Vec<u8> {
        let mut out = varint_bytes(u64::from(num) << 3 | 2);
        out.extend(varint_bytes(body.len() as u64));
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn a_length_past_the_message_names_its_offset() {
        // packet(1) claiming 1000 bytes where 3 follow, after a 5-byte valid packet.
        let mut bytes = field(1, &[0x08, 0x01, 0x10, 0x02]);
        bytes.extend([0x0a, 0xe8, 0x07, 1, 2, 3]);
        let err = match Message::parse(Path::new("t.pftrace"), &bytes, 0) {
            Ok(_) => panic!("a length past the message parses"),
            Err(e) => e,
        };
        let IngestError::Malformed { offset, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(offset, 6);
        // A varint of more than ten bytes is no number.
        assert_eq!(varint(&[0xff; 11], &mut 0), None);
    }

    #[test]
    fn compact_sched_times_are_deltas_and_comms_interned() {
        // intern_table ["a", "b"]; switches at 100 and 130 to pids 7 ("b") and 8 ("a").
        let mut c = field(5, b"a");
        c.extend(field(5, b"b"));
        let packed = |v: &[u64]| v.iter().flat_map(|&x| varint_bytes(x)).collect::<Vec<u8>>();
        c.extend(field(1, &packed(&[100, 30])));
        c.extend(field(2, &packed(&[1, 0])));
        c.extend(field(3, &packed(&[7, 8])));
        c.extend(field(4, &packed(&[120, 100])));
        c.extend(field(6, &packed(&[1, 0])));
        let m = Message::parse(Path::new("t"), &c, 0).expect("parses");
        let mut out = Vec::new();
        compact_records(Path::new("t"), &m, &mut out).expect("decodes");
        let got: Vec<(u64, i32, String)> = out
            .into_iter()
            .map(|(t, r)| match r {
                Rec::Switch { next, comm, .. } => (t, next, comm),
                _ => panic!("only switches"),
            })
            .collect();
        assert_eq!(
            got,
            vec![(100, 7, "b".to_string()), (130, 8, "a".to_string())]
        );
    }

    /// `sched_pi_setprio` (`FtraceEvent` field 353: comm 1, newprio 2, oldprio 3, pid 4, as
    /// Perfetto's `SchedPiSetprioFtraceEvent`) by a waiter names the PI futex's owner; the
    /// owner's own reset at its release, and a lowering by a waiter leaving, do not.
    #[test]
    fn a_pi_boost_is_a_lock_owner() {
        use argus_schema::EventKind;
        let vfield = |num: u32, v: u64| {
            let mut out = varint_bytes(u64::from(num) << 3);
            out.extend(varint_bytes(v));
            out
        };
        let event = |ts: u64, current: u64, owner: u64, old: u64, new: u64| {
            let mut set = field(1, b"argus-spinner");
            set.extend(vfield(2, new));
            set.extend(vfield(3, old));
            set.extend(vfield(4, owner));
            let mut ev = vfield(1, ts);
            ev.extend(vfield(2, current));
            ev.extend(field(353, &set));
            field(2, &ev)
        };
        let mut bundle = vfield(1, 0);
        bundle.extend(event(1_000, 30286, 30285, 130, 125));
        bundle.extend(event(2_000, 30285, 30285, 125, 130));
        bundle.extend(event(2_100, 30286, 30285, 125, 130));
        let trace = field(1, &field(1, &bundle));
        let imported = import(Path::new("t.pftrace"), &trace).expect("imports");
        let owners: Vec<(i32, &EventKind)> = imported
            .event_slice()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::LockOwner { .. }))
            .map(|e| (e.tid.0, &e.kind))
            .collect();
        assert_eq!(
            owners,
            vec![(
                30286,
                &EventKind::LockOwner {
                    owner: argus_schema::Tid(30285),
                    lock: 0
                }
            )]
        );
    }

    #[test]
    fn text_is_not_taken_for_a_trace() {
        assert!(!looks_like(b"\n# tracer: nop\n#\n"));
        assert!(looks_like(&field(1, &[0x08, 0x01])));
    }

    /// A compact sched intern table entry of 100 000 bytes that every switch names: each
    /// record copied it (and its rendered line again), so 64 KiB of input asked for
    /// gigabytes. Task names are cut to the kernel's 15 characters.
    // See: issue 18 (fuzzing, target import_perfetto), docs/fuzzing.md.
    #[test]
    fn gh_18_long_intern_entries_are_cut_to_a_task_name() {
        let packed = |v: &[u64]| v.iter().flat_map(|&x| varint_bytes(x)).collect::<Vec<u8>>();
        let mut c = field(5, &vec![b'x'; 100_000]);
        c.extend(field(1, &packed(&[100, 1, 1])));
        c.extend(field(3, &packed(&[7, 8, 9])));
        c.extend(field(6, &packed(&[0, 0, 0])));
        let m = Message::parse(Path::new("t"), &c, 0).expect("parses");
        let mut out = Vec::new();
        compact_records(Path::new("t"), &m, &mut out).expect("decodes");
        assert_eq!(out.len(), 3);
        for (_, r) in &out {
            let Rec::Switch { comm, .. } = r else {
                panic!("only switches")
            };
            assert_eq!(comm, &"x".repeat(COMM_LEN));
        }
    }

    /// Each bundle looked for its CPU's last line among all CPUs' lines: bundles of a CPU
    /// without lines after many lines of another CPU took quadratic time. The CPU's last line
    /// is now the bundle's own; a lost range still starts at the CPU's last line before it.
    // See: issue 18 (fuzzing, target import_perfetto), docs/fuzzing.md.
    #[test]
    fn gh_18_empty_bundles_do_not_scan_every_line() {
        let file = Path::new("t.pftrace");
        let full = |ts: u64, pid: u64| {
            let mut ev = vec![0x08];
            ev.extend(varint_bytes(ts));
            ev.push(0x10);
            ev.extend(varint_bytes(pid));
            // irq_handler_exit (37) { irq = 1 }
            ev.extend(field(37, &[0x08, 0x01]));
            field(2, &ev)
        };
        let run = |cpu: u8, body: &[u8], g: &mut Gathered| {
            let mut b = vec![0x08, cpu];
            b.extend_from_slice(body);
            let m = Message::parse(file, &b, 0).expect("parses");
            bundle(file, &m, g).expect("a bundle");
        };
        let mut g = Gathered::default();
        run(0, &full(100, 5), &mut g);
        let many: Vec<u8> = (0..20_000u64).flat_map(|k| full(200 + k, 6)).collect();
        run(1, &many, &mut g);
        for _ in 0..20_000 {
            run(0, &[], &mut g);
        }
        // lost_events, then a line at 50 000.
        let mut lost = vec![0x18, 0x01];
        lost.extend(full(50_000, 5));
        run(0, &lost, &mut g);
        assert_eq!(g.lost_ranges, vec![(0, 100, 50_000, None)]);
        assert_eq!(g.last_ts.get(&0), Some(&50_000));
        assert_eq!(g.last_ts.get(&1), Some(&20_199));
    }

    /// A bundle of CPU `u32::MAX` (the same bug as perf.data's samples, found there by
    /// the `import_perfdata` target): counting the CPUs as the highest plus one overflowed.
    // See: issue 18 (fuzzing, target import_perfetto), docs/fuzzing.md.
    #[test]
    fn gh_18_a_bundle_of_the_last_cpu_number() {
        // irq_handler_exit (37) { irq = 1 } at 100 by pid 5.
        let mut ev = vec![0x08, 100, 0x10, 5];
        ev.extend(field(37, &[0x08, 0x01]));
        let mut b = vec![0x08];
        b.extend(varint_bytes(u32::MAX.into()));
        b.extend(field(2, &ev));
        let trace = field(1, &field(1, &b));
        let imported = match import(Path::new("cpu.pftrace"), &trace) {
            Ok(i) => i,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(imported.summary().cpus, u32::MAX);
        assert_eq!(imported.event_slice().len(), 1);
    }
}
