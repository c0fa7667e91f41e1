//! Ring-buffer records → events: [`Converter`] turns a [`RawRecord`] into a [`Decoded`] (an
//! [`argus_schema::Event`] plus what the record says about threads: [`Comm`]s, the
//! [`ForkSource`] of a fork), using field offsets looked up once per event id from the
//! [`FormatSet`]. Sans-IO, and the one converter of the live collector, replay and the
//! importers of raw pages; [`crate::page`] parses the pages, [`crate::merge`] orders the
//! converted records of every CPU.
//!
//! ```text
//!  formats/ ──► FormatSet ──► Converter::new: a handler + field offsets per event id
//!  RawRecord ──► Converter::convert (one table lookup, the reads its event needs) ──► Decoded
//! ```

use crate::format::StateTable;
use crate::format::{
    EventFormat, FieldFormat, FieldOutOfBounds, FormatError, FormatSet, HeaderPage,
};
use crate::page::{parse_page, PageError, PageErrorKind, PageHeader, RawRecord};
use argus_schema::{Context, Cpu, Event, EventKind, Nanos, Pid, TaskState, Tid};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// `CLONE_THREAD`.
const CLONE_THREAD: u64 = 0x0001_0000;

/// A task name as the kernel stores it: up to 16 bytes, NUL-padded. Kept inline so decoding a
/// `sched_switch` does not allocate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Comm {
    bytes: [u8; 16],
    len: u8,
}

impl Comm {
    /// From raw bytes (cut at the first NUL, at most 16 bytes).
    pub fn new(raw: &[u8]) -> Comm {
        let raw = raw.iter().position(|&c| c == 0).map_or(raw, |n| &raw[..n]);
        let n = raw.len().min(16);
        let mut bytes = [0u8; 16];
        bytes[..n].copy_from_slice(&raw[..n]);
        Comm {
            bytes,
            len: n as u8,
        }
    }

    /// From a kernel `char[16]` field (cut at the first NUL).
    #[inline]
    pub fn from_array(raw: &[u8; 16]) -> Comm {
        let len = raw.iter().position(|&c| c == 0).unwrap_or(16);
        let mut bytes = *raw;
        bytes[len..].fill(0);
        Comm {
            bytes,
            len: len as u8,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Lossy UTF-8 text.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

/// Where a `Fork` event's `thread` flag came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForkSource {
    /// Not a fork.
    #[default]
    None,
    /// `task:task_newtask`: `thread` is `clone_flags & CLONE_THREAD`, authoritative.
    NewTask,
    /// `sched:sched_process_fork` alone: the record does not say; `thread` is false unless the
    /// thread table knows the child's process already.
    ProcessFork,
}

/// A converted record: the event (if the record maps to one) plus what it says about threads.
/// `event.seq` is 0 and `event.pid` equals `event.tid`: both are assigned by the merge
/// ([`crate::merge`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Record time.
    pub ts: Nanos,
    /// CPU whose buffer held it.
    pub cpu: Cpu,
    /// The event, or `None` for records that only carry thread names (`task_rename`, the
    /// `sched_process_fork` twin of a `task_newtask`).
    pub event: Option<Event>,
    /// Up to two `(tid, comm)` observations.
    pub comms: [Option<(Tid, Comm)>; 2],
    /// For a `Fork`: how sure its `thread` flag is.
    pub fork_source: ForkSource,
    /// For an `Exec` by a non-leader thread: the tid it had before (`old_pid`), which is gone.
    pub exec_old_tid: Option<Tid>,
}

/// How a precomputed integer field is read (size and signedness, from the format file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
}

/// An integer field looked up once, read per record with a reader specialized for its width.
#[derive(Clone, Copy, Debug)]
struct Field {
    offset: usize,
    width: Width,
}

/// Copies `N` bytes at `at`, or reports where the record is too short.
#[inline(always)]
fn bytes_at<const N: usize>(p: &[u8], at: usize) -> Result<[u8; N], FieldOutOfBounds> {
    match p.get(at..at.wrapping_add(N)) {
        Some(s) => {
            let mut a = [0u8; N];
            a.copy_from_slice(s);
            Ok(a)
        }
        None => Err(FieldOutOfBounds {
            offset: at,
            size: N,
            len: p.len(),
        }),
    }
}

impl Field {
    fn of<'a>(ev: &'a EventFormat, name: &'static str) -> Result<&'a FieldFormat, FormatError> {
        ev.field(name).ok_or_else(|| FormatError::MissingField {
            event: ev.name.clone(),
            field: name,
        })
    }

    fn int(ev: &EventFormat, name: &'static str) -> Result<Field, FormatError> {
        let f = Field::of(ev, name)?;
        let width = match (f.size, f.signed) {
            (1, false) => Width::U8,
            (1, true) => Width::I8,
            (2, false) => Width::U16,
            (2, true) => Width::I16,
            (4, false) => Width::U32,
            (4, true) => Width::I32,
            (8, _) => Width::U64,
            (size, _) => {
                return Err(FormatError::BadFieldSize {
                    event: ev.name.clone(),
                    field: name.to_string(),
                    size,
                })
            }
        };
        Ok(Field {
            offset: f.offset as usize,
            width,
        })
    }

    /// The value, sign-extended to 64 bits when the field is signed.
    #[inline(always)]
    fn u64(&self, p: &[u8]) -> Result<u64, FieldOutOfBounds> {
        let o = self.offset;
        Ok(match self.width {
            Width::U64 => u64::from_le_bytes(bytes_at::<8>(p, o)?),
            Width::U32 => u32::from_le_bytes(bytes_at::<4>(p, o)?) as u64,
            Width::I32 => i32::from_le_bytes(bytes_at::<4>(p, o)?) as i64 as u64,
            Width::U16 => u16::from_le_bytes(bytes_at::<2>(p, o)?) as u64,
            Width::I16 => i16::from_le_bytes(bytes_at::<2>(p, o)?) as i64 as u64,
            Width::U8 => bytes_at::<1>(p, o)?[0] as u64,
            Width::I8 => bytes_at::<1>(p, o)?[0] as i8 as i64 as u64,
        })
    }

    #[inline(always)]
    fn i32(&self, p: &[u8]) -> Result<i32, FieldOutOfBounds> {
        self.u64(p).map(|v| v as i32)
    }
}

/// A fixed array of 4- or 8-byte integers (`unsigned long args[6]`, `caller[8]`).
#[derive(Clone, Copy, Debug)]
struct ArrayField {
    offset: usize,
    /// Bytes per element (4 or 8).
    each: usize,
    /// Elements the format declares.
    len: usize,
}

impl ArrayField {
    fn of(ev: &EventFormat, name: &'static str, len: usize) -> Result<ArrayField, FormatError> {
        let f = Field::of(ev, name)?;
        let each = match f.kind {
            crate::format::FieldKind::Array { len: Some(n) } if n > 0 => f.size / n,
            // Old kernels write `unsigned long caller; size:0` (a flexible tail): the element
            // is a kernel long, 8 bytes where the field is 8-aligned, else 4 (32-bit kernels).
            crate::format::FieldKind::Flexible => {
                if f.decl.contains("long") && f.offset % 8 == 0 || f.decl.contains("64") {
                    8
                } else {
                    4
                }
            }
            _ => f.size / len.max(1) as u32,
        };
        if each != 4 && each != 8 {
            return Err(FormatError::BadFieldSize {
                event: ev.name.clone(),
                field: name.to_string(),
                size: f.size,
            });
        }
        Ok(ArrayField {
            offset: f.offset as usize,
            each: each as usize,
            len: (f.size / each) as usize,
        })
    }

    /// Element `i` (zero-extended).
    #[inline(always)]
    fn get(&self, p: &[u8], i: usize) -> Result<u64, FieldOutOfBounds> {
        let at = self.offset + i * self.each;
        if self.each == 8 {
            Ok(u64::from_le_bytes(bytes_at::<8>(p, at)?))
        } else {
            Ok(u32::from_le_bytes(bytes_at::<4>(p, at)?) as u64)
        }
    }

    /// How many elements the record actually holds (a flexible tail may be shorter).
    #[inline]
    fn available(&self, p: &[u8]) -> usize {
        p.len().saturating_sub(self.offset) / self.each
    }
}

/// A string field: fixed `char[N]`, `__data_loc`/`__rel_loc` or a flexible array.
#[derive(Clone, Debug)]
struct StrField(FieldFormat);

impl StrField {
    fn of(ev: &EventFormat, name: &'static str) -> Result<StrField, FormatError> {
        Field::of(ev, name).cloned().map(StrField)
    }

    #[inline]
    fn read<'a>(&self, p: &'a [u8]) -> Result<&'a [u8], FieldOutOfBounds> {
        self.0.read_str(p)
    }

    /// The string as a task name (at most 16 bytes, cut at the first NUL).
    #[inline]
    fn comm(&self, p: &[u8]) -> Result<Comm, FieldOutOfBounds> {
        if let (crate::format::FieldKind::Array { .. }, 16) = (self.0.kind, self.0.size) {
            return Ok(Comm::from_array(&bytes_at::<16>(
                p,
                self.0.offset as usize,
            )?));
        }
        self.read(p).map(Comm::new)
    }
}

/// What to do with each event id.
#[derive(Clone, Debug)]
enum Handler {
    Switch {
        prev_pid: Field,
        prev_state: Field,
        next_pid: Field,
        prev_comm: StrField,
        next_comm: StrField,
        states: StateLetters,
    },
    Waking {
        pid: Field,
        comm: Option<StrField>,
        new: bool,
    },
    ProcessFork {
        child_pid: Field,
        child_comm: Option<StrField>,
    },
    NewTask {
        pid: Field,
        comm: Option<StrField>,
        clone_flags: Field,
    },
    Exec {
        filename: Option<StrField>,
        pid: Option<Field>,
        old_pid: Option<Field>,
    },
    Exit,
    Rename {
        pid: Field,
        newcomm: StrField,
    },
    SysEnter {
        id: Field,
        args: ArrayField,
    },
    SysExit {
        id: Field,
        ret: Field,
    },
    Irq {
        irq: Field,
        exit: bool,
    },
    Softirq {
        vec: Field,
        exit: bool,
    },
    HrStart {
        timer: Field,
        function: Field,
        expires: Field,
    },
    HrExpire {
        timer: Field,
        function: Field,
    },
    HrExpireExit {
        timer: Field,
    },
    Print {
        buf: StrField,
    },
    WorkQueue {
        work: Field,
        function: Field,
    },
    WorkStart {
        work: Field,
        function: Field,
    },
    WorkEnd {
        work: Field,
    },
    TimerStart {
        timer: Field,
        function: Field,
        expires: Field,
    },
    TimerExpire {
        timer: Field,
        function: Field,
    },
    TimerExpireExit {
        timer: Field,
    },
    SignalGenerate {
        sig: Field,
        pid: Field,
    },
    SignalDeliver {
        sig: Field,
    },
    /// `filelock/posix_lock_inode`, `filelock/locks_remove_posix` (`flock: false`) and
    /// `filelock/flock_lock_inode` (`flock: true`).
    FileLock {
        ino: Field,
        dev: Field,
        lock_type: Field,
        ret: Field,
        flock: bool,
    },
    /// `sched/sched_pi_setprio`: a priority-inheritance owner's priority raised by another
    /// task (a waiter blocking on its PI futex). Set by the owner itself (its release), or
    /// lowered (a waiter leaving: a timeout, a signal), skipped.
    PiSetprio {
        pid: Field,
        oldprio: Field,
        newprio: Field,
    },
    /// `sock/sk_data_ready`.
    SockReady {
        sk: Field,
    },
    /// `sock/sock_recv_length`.
    SockRecv {
        sk: Field,
        ret: Field,
    },
    /// `ftrace/kernel_stack` (`size` = number of entries, `caller` a flexible tail) and
    /// `ftrace/user_stack` (`caller[8]`, unused entries zero).
    Stack {
        kernel: bool,
        size: Option<Field>,
        caller: ArrayField,
    },
    /// An event whose every record is a marker with this text ([`EventFormat::marker`]:
    /// the `--dispatch`/`--enqueue`/`--probe` uprobes, `linux/uprobe.rs`). With an `item`
    /// field (fetched by `@N`), a non-zero item makes a dispatch entry a `work_start` and an
    /// enqueue a `work_queue` of that item ([`ItemProbe`], decided once per format).
    Marker {
        text: String,
        item: Option<(Field, ItemProbe)>,
    },
    /// A known format Argus does not map (counted).
    Ignored,
}

/// `prev_state` → letter, tabulated for the small values every switch carries.
#[derive(Clone, Debug)]
struct StateLetters {
    table: StateTable,
    /// `letter(v)` for every `v < cache.len()`.
    cache: Vec<u8>,
}

impl StateLetters {
    fn new(table: StateTable) -> StateLetters {
        let n = (table.preempt.saturating_mul(2)).clamp(1, 8192) as usize;
        let cache = (0..n as u64).map(|v| table.letter(v)).collect();
        StateLetters { table, cache }
    }

    #[inline(always)]
    fn letter(&self, v: u64) -> u8 {
        match self.cache.get(v as usize) {
            Some(&c) => c,
            None => self.table.letter(v),
        }
    }
}

/// Whether the event belongs to `system` (format sets parsed from text alone have no system).
fn in_system(ev: &EventFormat, system: &str) -> bool {
    ev.system.is_empty() || ev.system == system
}

/// What a marker probe's record with a non-zero work item stands for, with `function` the
/// probed name's [`dispatch_id`](argus_schema::markers::dispatch_id).
#[derive(Clone, Copy, Debug)]
enum ItemProbe {
    /// A dispatch entry: the item starts (`work_start`).
    Start { function: u64 },
    /// An enqueue: the item is queued (`work_queue`).
    Queue { function: u64 },
}

impl ItemProbe {
    /// The item kind of a marker event with an item field: by its marker text.
    fn of(text: &str) -> Option<ItemProbe> {
        use argus_schema::markers::{dispatch_id, parse, Marker};
        match parse(text)? {
            Marker::DispatchBegin(name) => Some(ItemProbe::Start {
                function: dispatch_id(name),
            }),
            Marker::Enqueue(name) => Some(ItemProbe::Queue {
                function: dispatch_id(name),
            }),
            _ => None,
        }
    }

    fn event(self, work: u64) -> EventKind {
        match self {
            ItemProbe::Start { function } => EventKind::WorkStart { work, function },
            ItemProbe::Queue { function } => EventKind::WorkQueue { work, function },
        }
    }
}

impl Handler {
    fn build(ev: &EventFormat) -> Result<Handler, FormatError> {
        if let Some(text) = &ev.marker {
            let item = match (ev.field(crate::format::ITEM_FIELD), ItemProbe::of(text)) {
                (Some(_), Some(kind)) => Some((Field::int(ev, crate::format::ITEM_FIELD)?, kind)),
                _ => None,
            };
            return Ok(Handler::Marker {
                text: text.clone(),
                item,
            });
        }
        let opt = |name| StrField::of(ev, name).ok();
        let int = |name| Field::int(ev, name);
        Ok(match ev.name.as_str() {
            "sched_switch" => Handler::Switch {
                prev_pid: int("prev_pid")?,
                prev_state: int("prev_state")?,
                next_pid: int("next_pid")?,
                prev_comm: StrField::of(ev, "prev_comm")?,
                next_comm: StrField::of(ev, "next_comm")?,
                states: StateLetters::new(StateTable::from_print_fmt(&ev.print_fmt)),
            },
            // sched_wakeup is mapped to Waking too: on kernels (or captures) without
            // sched_waking it is the only wake-up record; it is emitted by the waker's CPU
            // slightly later than sched_waking would be.
            "sched_waking" | "sched_wakeup" => Handler::Waking {
                pid: int("pid")?,
                comm: opt("comm"),
                new: false,
            },
            "sched_wakeup_new" => Handler::Waking {
                pid: int("pid")?,
                comm: opt("comm"),
                new: true,
            },
            "sched_pi_setprio" => Handler::PiSetprio {
                pid: int("pid")?,
                oldprio: int("oldprio")?,
                newprio: int("newprio")?,
            },
            "sched_process_fork" => Handler::ProcessFork {
                child_pid: int("child_pid")?,
                child_comm: opt("child_comm"),
            },
            "task_newtask" => Handler::NewTask {
                pid: int("pid")?,
                comm: opt("comm"),
                clone_flags: int("clone_flags")?,
            },
            "sched_process_exec" => Handler::Exec {
                filename: opt("filename"),
                pid: int("pid").ok(),
                old_pid: int("old_pid").ok(),
            },
            "sched_process_exit" => Handler::Exit,
            "task_rename" => Handler::Rename {
                pid: int("pid")?,
                newcomm: StrField::of(ev, "newcomm")?,
            },
            "sys_enter" if in_system(ev, "raw_syscalls") => Handler::SysEnter {
                id: int("id")?,
                args: ArrayField::of(ev, "args", 6)?,
            },
            "sys_exit" if in_system(ev, "raw_syscalls") => Handler::SysExit {
                id: int("id")?,
                ret: int("ret")?,
            },
            "irq_handler_entry" | "irq_handler_exit" => Handler::Irq {
                irq: int("irq")?,
                exit: ev.name == "irq_handler_exit",
            },
            "softirq_entry" | "softirq_exit" => Handler::Softirq {
                vec: int("vec")?,
                exit: ev.name == "softirq_exit",
            },
            "hrtimer_start" => Handler::HrStart {
                timer: int("hrtimer")?,
                function: int("function")?,
                expires: int("expires")?,
            },
            "hrtimer_expire_entry" => Handler::HrExpire {
                timer: int("hrtimer")?,
                function: int("function")?,
            },
            "hrtimer_expire_exit" => Handler::HrExpireExit {
                timer: int("hrtimer")?,
            },
            "print" if in_system(ev, "ftrace") => Handler::Print {
                buf: StrField::of(ev, "buf")?,
            },
            "workqueue_queue_work" => Handler::WorkQueue {
                work: int("work")?,
                function: int("function")?,
            },
            "workqueue_execute_start" => Handler::WorkStart {
                work: int("work")?,
                function: int("function")?,
            },
            "workqueue_execute_end" => Handler::WorkEnd { work: int("work")? },
            "timer_start" if in_system(ev, "timer") => Handler::TimerStart {
                timer: int("timer")?,
                function: int("function")?,
                expires: int("expires")?,
            },
            "timer_expire_entry" => Handler::TimerExpire {
                timer: int("timer")?,
                function: int("function")?,
            },
            "timer_expire_exit" => Handler::TimerExpireExit {
                timer: int("timer")?,
            },
            "signal_generate" => Handler::SignalGenerate {
                sig: int("sig")?,
                pid: int("pid")?,
            },
            "signal_deliver" => Handler::SignalDeliver { sig: int("sig")? },
            "posix_lock_inode" | "locks_remove_posix" | "flock_lock_inode"
                if in_system(ev, "filelock") =>
            {
                Handler::FileLock {
                    ino: int("i_ino")?,
                    dev: int("s_dev")?,
                    // `fl_type` before Linux 6.9 (file_lock_core).
                    lock_type: int("type").or_else(|_| int("fl_type"))?,
                    ret: int("ret")?,
                    flock: ev.name == "flock_lock_inode",
                }
            }
            "sk_data_ready" if in_system(ev, "sock") => Handler::SockReady { sk: int("skaddr")? },
            "sock_recv_length" if in_system(ev, "sock") => Handler::SockRecv {
                sk: int("sk")?,
                ret: int("ret")?,
            },
            "kernel_stack" if in_system(ev, "ftrace") => Handler::Stack {
                kernel: true,
                size: Some(int("size")?),
                caller: ArrayField::of(ev, "caller", 8)?,
            },
            "user_stack" if in_system(ev, "ftrace") => Handler::Stack {
                kernel: false,
                size: None,
                caller: ArrayField::of(ev, "caller", 8)?,
            },
            _ => Handler::Ignored,
        })
    }
}

/// Per-id tables.
#[derive(Clone, Debug)]
struct Slot {
    handler: Handler,
    common_flags: Field,
    common_pid: Field,
}

/// Converts raw records to [`Event`]s. One per CPU stream (it keeps a little per-CPU state:
/// the `task_newtask` children whose `sched_process_fork` twin is still to come).
///
/// Field offsets and widths are looked up once per event id from the format files; each
/// record costs one table lookup and the reads its event needs.
///
/// Fork de-duplication: one `clone()` fires `task:task_newtask` (inside `copy_process`) and
/// then `sched:sched_process_fork` (in `kernel_clone`), both on the parent's CPU. When
/// `task_newtask` is decoded the `Fork` is emitted with `thread` from `CLONE_THREAD`
/// ([`ForkSource::NewTask`]) and the child remembered; the later `sched_process_fork` for that
/// child then only contributes the child's comm. When only `sched_process_fork` is enabled it
/// emits the `Fork` itself with [`ForkSource::ProcessFork`] and the merge's thread table
/// decides `thread` (see [`crate::merge::ThreadTable`]).
///
/// Stacks: with the tracefs `stacktrace` / `userstacktrace` options on, the kernel writes an
/// `ftrace/kernel_stack` / `ftrace/user_stack` record right after each event on the same CPU;
/// they become [`EventKind::Stack`] events of the same task (decode needs their format files,
/// `formats/events/ftrace/{kernel,user}_stack/format`, like any other event).
#[derive(Clone, Debug)]
pub struct Converter {
    /// Per event id, shared by the clones (one per CPU): a format with a high id makes them
    /// long, and a crafted file of many CPUs must not copy them once each (issue 18).
    slots: Arc<Vec<Option<Slot>>>,
    names: Arc<Vec<Option<String>>>,
    counts_unknown: BTreeMap<u16, u64>,
    counts_ignored: BTreeMap<u16, u64>,
    /// Children announced by `task_newtask` whose `sched_process_fork` is pending.
    pending_forks: Vec<i32>,
}

/// An event format Argus maps lacks what the converter needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{event}: {source}")]
pub struct ConverterError {
    /// `system/name` of the event.
    pub event: String,
    /// What is missing.
    pub source: FormatError,
}

/// Records the converter did not turn into events, by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Records whose id has no format file, by id.
    pub unknown_ids: BTreeMap<u16, u64>,
    /// Records of known events Argus does not use, by `system/name`.
    pub ignored: BTreeMap<String, u64>,
}

impl Skipped {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Skipped) {
        for (k, v) in &other.unknown_ids {
            *self.unknown_ids.entry(*k).or_default() += v;
        }
        for (k, v) in &other.ignored {
            *self.ignored.entry(k.clone()).or_default() += v;
        }
    }
}

impl Converter {
    /// Builds the per-id tables from `formats`. Fails when an event Argus maps lacks a field
    /// it needs.
    pub fn new(formats: &FormatSet) -> Result<Converter, ConverterError> {
        let max = formats
            .events
            .keys()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1);
        let mut slots = vec![None; max];
        let mut names = vec![None; max];
        for (&id, ev) in &formats.events {
            let fail = |source| ConverterError {
                event: ev.full_name(),
                source,
            };
            let handler = Handler::build(ev).map_err(fail)?;
            let common = |name| Field::int(ev, name).map_err(fail);
            slots[id as usize] = Some(Slot {
                handler,
                common_flags: common("common_flags")?,
                common_pid: common("common_pid")?,
            });
            names[id as usize] = Some(if ev.system.is_empty() {
                ev.name.clone()
            } else {
                ev.full_name()
            });
        }
        Ok(Converter {
            counts_ignored: BTreeMap::new(),
            slots: Arc::new(slots),
            names: Arc::new(names),
            counts_unknown: BTreeMap::new(),
            pending_forks: Vec::new(),
        })
    }

    /// What was skipped so far.
    pub fn skipped(&self) -> Skipped {
        let mut s = Skipped {
            unknown_ids: self.counts_unknown.clone(),
            ..Skipped::default()
        };
        for (&id, &n) in &self.counts_ignored {
            if let Some(Some(name)) = self.names.get(id as usize) {
                s.ignored.insert(name.clone(), n);
            }
        }
        s
    }

    /// Converts one record. `Ok(None)` for records that are skipped (unknown id or an event
    /// Argus does not use: counted, see [`Converter::skipped`]).
    #[inline]
    pub fn convert(&mut self, cpu: Cpu, rec: &RawRecord<'_>) -> Result<Option<Decoded>, PageError> {
        let p = rec.payload;
        let err = |kind| PageError {
            offset: rec.offset,
            kind,
        };
        let id = rec
            .id()
            .ok_or(err(PageErrorKind::ShortRecord { len: p.len() }))?;
        let Some(Some(slot)) = self.slots.get(id as usize) else {
            *self.counts_unknown.entry(id).or_default() += 1;
            return Ok(None);
        };
        let oob = |source| err(PageErrorKind::FieldOutOfBounds { id, source });
        let ts = Nanos(rec.ts);
        let mut comms = [None, None];
        let mut fork_source = ForkSource::None;
        let mut exec_old_tid = None;
        let names_only = |comms| {
            Ok(Some(Decoded {
                ts,
                cpu,
                event: None,
                comms,
                fork_source: ForkSource::None,
                exec_old_tid: None,
            }))
        };
        let kind = match &slot.handler {
            Handler::Ignored => {
                *self.counts_ignored.entry(id).or_default() += 1;
                return Ok(None);
            }
            Handler::Switch {
                prev_pid,
                prev_state,
                next_pid,
                prev_comm,
                next_comm,
                states,
            } => {
                let prev = Tid(prev_pid.i32(p).map_err(oob)?);
                let next = Tid(next_pid.i32(p).map_err(oob)?);
                let state = prev_state.u64(p).map_err(oob)?;
                comms[0] = Some((prev, prev_comm.comm(p).map_err(oob)?));
                comms[1] = Some((next, next_comm.comm(p).map_err(oob)?));
                EventKind::Switch {
                    prev,
                    prev_state: TaskState(states.letter(state)),
                    next,
                }
            }
            Handler::Waking { pid, comm, new } => {
                let target = Tid(pid.i32(p).map_err(oob)?);
                if let Some(c) = comm {
                    comms[0] = Some((target, c.comm(p).map_err(oob)?));
                }
                if *new {
                    EventKind::WakeupNew { target }
                } else {
                    EventKind::Waking { target }
                }
            }
            Handler::ProcessFork {
                child_pid,
                child_comm,
            } => {
                let child = Tid(child_pid.i32(p).map_err(oob)?);
                if let Some(c) = child_comm {
                    comms[0] = Some((child, c.comm(p).map_err(oob)?));
                }
                if let Some(i) = self.pending_forks.iter().position(|&c| c == child.0) {
                    self.pending_forks.swap_remove(i);
                    return names_only(comms);
                }
                fork_source = ForkSource::ProcessFork;
                EventKind::Fork {
                    child,
                    child_pid: Pid(child.0),
                    thread: false,
                }
            }
            Handler::NewTask {
                pid,
                comm,
                clone_flags,
            } => {
                let child = Tid(pid.i32(p).map_err(oob)?);
                let thread = clone_flags.u64(p).map_err(oob)? & CLONE_THREAD != 0;
                if let Some(c) = comm {
                    comms[0] = Some((child, c.comm(p).map_err(oob)?));
                }
                // Bounded: a lost sched_process_fork must not grow this forever.
                if self.pending_forks.len() >= 256 {
                    self.pending_forks.remove(0);
                }
                self.pending_forks.push(child.0);
                fork_source = ForkSource::NewTask;
                EventKind::Fork {
                    child,
                    child_pid: Pid(child.0),
                    thread,
                }
            }
            Handler::Exec {
                filename,
                pid,
                old_pid,
            } => {
                let tid = Tid(slot.common_pid.i32(p).map_err(oob)?);
                if let Some(f) = filename {
                    // The kernel sets comm to the basename of the file, cut to 15 bytes
                    // (`begin_new_exec` → `__set_task_comm(kbasename(bprm->filename))`).
                    let path = f.read(p).map_err(oob)?;
                    let base = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
                    comms[0] = Some((tid, Comm::new(&base[..base.len().min(15)])));
                }
                if let (Some(pid), Some(old)) = (pid, old_pid) {
                    let (pid, old) = (pid.i32(p).map_err(oob)?, old.i32(p).map_err(oob)?);
                    if pid != old {
                        exec_old_tid = Some(Tid(old));
                    }
                }
                EventKind::Exec
            }
            Handler::Exit => EventKind::Exit,
            Handler::Rename { pid, newcomm } => {
                let who = Tid(pid.i32(p).map_err(oob)?);
                comms[0] = Some((who, newcomm.comm(p).map_err(oob)?));
                return names_only(comms);
            }
            Handler::SysEnter { id: nr, args } => {
                let mut a = [0u64; 6];
                if args.len >= 6 {
                    for (i, slot) in a.iter_mut().enumerate() {
                        *slot = args.get(p, i).map_err(oob)?;
                    }
                }
                EventKind::SysEnter {
                    nr: nr.i32(p).map_err(oob)?,
                    args: a,
                }
            }
            Handler::SysExit { id: nr, ret } => EventKind::SysExit {
                nr: nr.i32(p).map_err(oob)?,
                ret: ret.u64(p).map_err(oob)? as i64,
            },
            Handler::Irq { irq, exit } => {
                let irq = irq.i32(p).map_err(oob)?;
                if *exit {
                    EventKind::IrqExit { irq }
                } else {
                    EventKind::IrqEntry { irq }
                }
            }
            Handler::Softirq { vec, exit } => {
                let vec = vec.u64(p).map_err(oob)? as u32;
                if *exit {
                    EventKind::SoftirqExit { vec }
                } else {
                    EventKind::SoftirqEntry { vec }
                }
            }
            Handler::HrStart {
                timer,
                function,
                expires,
            } => EventKind::HrtimerStart {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
                expires: expires.u64(p).map_err(oob)?,
            },
            Handler::HrExpire { timer, function } => EventKind::HrtimerExpire {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::HrExpireExit { timer } => EventKind::HrtimerExpireExit {
                timer: timer.u64(p).map_err(oob)?,
            },
            Handler::Print { buf } => {
                let b = buf.read(p).map_err(oob)?;
                let b = b.strip_suffix(b"\n").unwrap_or(b);
                EventKind::Marker {
                    text: String::from_utf8_lossy(b).into_owned(),
                }
            }
            Handler::Marker { text, item } => match item {
                Some((f, kind)) => match f.u64(p).map_err(oob)? {
                    0 => EventKind::Marker { text: text.clone() },
                    work => kind.event(work),
                },
                None => EventKind::Marker { text: text.clone() },
            },
            Handler::WorkQueue { work, function } => EventKind::WorkQueue {
                work: work.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::WorkStart { work, function } => EventKind::WorkStart {
                work: work.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::WorkEnd { work } => EventKind::WorkEnd {
                work: work.u64(p).map_err(oob)?,
            },
            Handler::TimerStart {
                timer,
                function,
                expires,
            } => EventKind::TimerStart {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
                expires: expires.u64(p).map_err(oob)?,
            },
            Handler::TimerExpire { timer, function } => EventKind::TimerExpire {
                timer: timer.u64(p).map_err(oob)?,
                function: function.u64(p).map_err(oob)?,
            },
            Handler::TimerExpireExit { timer } => EventKind::TimerExpireExit {
                timer: timer.u64(p).map_err(oob)?,
            },
            Handler::SignalGenerate { sig, pid } => EventKind::SignalGenerate {
                sig: sig.i32(p).map_err(oob)?,
                target: Tid(pid.i32(p).map_err(oob)?),
            },
            Handler::PiSetprio {
                pid,
                oldprio,
                newprio,
            } => {
                let owner = Tid(pid.i32(p).map_err(oob)?);
                let raised = newprio.i32(p).map_err(oob)? < oldprio.i32(p).map_err(oob)?;
                if !raised || owner.0 == slot.common_pid.i32(p).map_err(oob)? {
                    *self.counts_ignored.entry(id).or_default() += 1;
                    return Ok(None);
                }
                EventKind::LockOwner { owner, lock: 0 }
            }
            Handler::SignalDeliver { sig } => EventKind::SignalDeliver {
                sig: sig.i32(p).map_err(oob)?,
            },
            Handler::FileLock {
                ino,
                dev,
                lock_type,
                ret,
                flock,
            } => EventKind::FileLock {
                inode: ino.u64(p).map_err(oob)?,
                dev: dev.u64(p).map_err(oob)? as u32,
                flock: *flock,
                lock_type: lock_type.u64(p).map_err(oob)? as u8,
                ret: ret.i32(p).map_err(oob)?,
            },
            Handler::SockReady { sk } => EventKind::SockReady {
                sk: sk.u64(p).map_err(oob)?,
            },
            Handler::SockRecv { sk, ret } => EventKind::SockRecv {
                sk: sk.u64(p).map_err(oob)?,
                ret: ret.i32(p).map_err(oob)?,
            },
            Handler::Stack {
                kernel,
                size,
                caller,
            } => {
                // Newer kernels write only the `size` entries they have (the format still
                // says `caller[8]`); user stacks pad unused entries with zeros, old kernels
                // end both with ULONG_MAX.
                let avail = caller.available(p);
                let n = match size {
                    Some(s) => (s.u64(p).map_err(oob)? as usize).min(avail),
                    None => caller.len.min(avail),
                };
                let mut ips = Vec::with_capacity(n);
                for i in 0..n {
                    let ip = caller.get(p, i).map_err(oob)?;
                    let end = if caller.each == 8 {
                        u64::MAX
                    } else {
                        u32::MAX as u64
                    };
                    if ip == end || (ip == 0 && !kernel) {
                        break;
                    }
                    ips.push(ip);
                }
                EventKind::Stack {
                    kernel: *kernel,
                    ips,
                }
            }
        };
        let flags = slot.common_flags.u64(p).map_err(oob)? as u8;
        let ctx = match slot.handler {
            // Uprobe handlers run in the task that hit the probe (on its way back to user
            // mode), and their `common_flags` cannot be trusted: 6.18 writes 0xff (the
            // context word is taken with `tracing_gen_ctx_dec()`, whose decrement of a zero
            // preempt count borrows into the flags; seen as `DBZff` in `trace`).
            Handler::Marker { .. } => Context::Task,
            _ => Context::from_common_flags(flags),
        };
        let tid = Tid(slot.common_pid.i32(p).map_err(oob)?);
        Ok(Some(Decoded {
            ts,
            cpu,
            event: Some(Event {
                ts,
                seq: 0,
                cpu,
                pid: Pid(tid.0),
                tid,
                ctx,
                kind,
            }),
            comms,
            fork_source,
            exec_old_tid,
        }))
    }
}

/// Decodes a whole page through `conv`, appending results to `out` and returning the header.
/// Convenience for callers that work page by page (replay, the live collector).
pub fn decode_page(
    layout: &HeaderPage,
    conv: &mut Converter,
    cpu: Cpu,
    page: &[u8],
    out: &mut Vec<Decoded>,
) -> Result<PageHeader, PageError> {
    let recs = parse_page(layout, page)?;
    let header = recs.header();
    for r in recs {
        if let Some(d) = conv.convert(cpu, &r?)? {
            out.push(d);
        }
    }
    Ok(header)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A format with the highest event id makes the per-id tables 65 536 entries long: the
    /// clones a recording of many CPUs makes (one per CPU) share them instead of copying
    /// them each, and count what they skip apart.
    // See: issue 18 (fuzzing, target `import_tracedat`: 3500 CPUs of a 61 KB trace.dat
    // with an `ID: 65535` format copied 20 MB of tables per CPU), docs/fuzzing.md.
    #[test]
    fn gh_18_converter_clones_share_their_id_tables() {
        let text = "name: cpu_idle\nID: 65535\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:u32 state;\toffset:8;\tsize:4;\tsigned:0;\n";
        let mut set = FormatSet::default();
        set.insert(EventFormat::parse("power", text).expect("format"));
        let conv = Converter::new(&set).expect("converter");
        assert_eq!(conv.slots.len(), 65_536);
        let mut a = conv.clone();
        let b = conv.clone();
        assert!(Arc::ptr_eq(&a.slots, &b.slots) && Arc::ptr_eq(&a.names, &conv.names));
        let mut p = vec![0u8; 12];
        p[0..2].copy_from_slice(&65_535u16.to_le_bytes());
        let rec = RawRecord {
            ts: 5,
            offset: 0,
            payload: &p,
        };
        assert_eq!(a.convert(Cpu(0), &rec).expect("a record"), None);
        assert_eq!(a.skipped().ignored.get("power/cpu_idle"), Some(&1));
        assert!(b.skipped().ignored.is_empty(), "each clone counts its own");
    }

    #[test]
    fn comm_is_inline_and_cut_at_nul() {
        let c = Comm::new(b"sleep\0r/0\0\0\0\0\0\0\0");
        assert_eq!(c.as_bytes(), b"sleep");
        assert_eq!(Comm::new(&[b'a'; 20]).as_bytes().len(), 16);
    }

    /// A `--dispatch` return probe as 6.18 writes its format, with its marker text: each
    /// record becomes that marker in the task that hit the probe.
    #[test]
    fn marker_events_become_markers() {
        let text = "name: dispatch_0_ret\nID: 2400\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n\n\
print fmt: \"(%lx <- %lx)\", REC->__probe_func, REC->__probe_ret_ip\n";
        let mut ev = EventFormat::parse("argus_1", text).expect("format");
        let mut set = FormatSet::default();
        set.insert(ev.clone());
        let mut p = vec![0u8; 24];
        p[0..2].copy_from_slice(&2400u16.to_le_bytes());
        p[4..8].copy_from_slice(&77i32.to_le_bytes());
        // common_flags and preempt count as 6.18 writes them for uprobes.
        p[2] = 0xff;
        p[3] = 0xff;
        let rec = RawRecord {
            ts: 5,
            offset: 16,
            payload: &p,
        };
        // Without the marker file the probe is an event Argus does not use.
        let mut conv = Converter::new(&set).expect("converter");
        assert!(conv.convert(Cpu(0), &rec).expect("ok").is_none());
        ev.marker = Some("argus:dispatch-end krate::f".into());
        set.insert(ev);
        let mut conv = Converter::new(&set).expect("converter");
        let d = conv.convert(Cpu(0), &rec).expect("ok").expect("mapped");
        let e = d.event.expect("event");
        assert_eq!(e.tid, Tid(77));
        assert_eq!(e.ctx, Context::Task);
        assert_eq!(
            e.kind,
            EventKind::Marker {
                text: "argus:dispatch-end krate::f".into()
            }
        );
    }

    /// `--enqueue …@1` and `--dispatch …@1` entry probes as 6.18 writes their formats (an
    /// `item` field after `__probe_ip`): a non-zero item makes a `work_queue` and a
    /// `work_start` of that item; item 0 leaves the marker.
    #[test]
    fn item_probes_become_work_events() {
        let format = |name: &str, id: u16| {
            format!(
                "name: {name}\nID: {id}\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:u64 item;\toffset:16;\tsize:8;\tsigned:0;\n\n\
print fmt: \"(%lx) item=%llu\", REC->__probe_ip, REC->item\n"
            )
        };
        let mut set = FormatSet::default();
        for (name, id, marker) in [
            ("enqueue_0", 2500u16, "argus:enqueue push_job"),
            ("dispatch_0", 2501, "argus:dispatch-begin run_job"),
        ] {
            let mut ev = EventFormat::parse("argus_1", &format(name, id)).expect("format");
            ev.marker = Some(marker.into());
            set.insert(ev);
        }
        let mut conv = Converter::new(&set).expect("converter");
        let mut convert = |id: u16, item: u64| {
            let mut p = vec![0u8; 24];
            p[0..2].copy_from_slice(&id.to_le_bytes());
            p[4..8].copy_from_slice(&77i32.to_le_bytes());
            p[16..24].copy_from_slice(&item.to_le_bytes());
            let rec = RawRecord {
                ts: 5,
                offset: 16,
                payload: &p,
            };
            let d = conv.convert(Cpu(0), &rec).expect("ok").expect("mapped");
            d.event.expect("event").kind
        };
        let push = argus_schema::markers::dispatch_id("push_job");
        let run = argus_schema::markers::dispatch_id("run_job");
        assert_eq!(
            convert(2500, 0x7f00_1000),
            EventKind::WorkQueue {
                work: 0x7f00_1000,
                function: push
            }
        );
        assert_eq!(
            convert(2501, 0x7f00_1000),
            EventKind::WorkStart {
                work: 0x7f00_1000,
                function: run
            }
        );
        assert_eq!(
            convert(2501, 0),
            EventKind::Marker {
                text: "argus:dispatch-begin run_job".into()
            }
        );
    }
}
