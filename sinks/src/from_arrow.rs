//! Arrow batches → rows: the inverse of `encode`. Every value that cannot be turned back
//! (unknown name, missing payload, out-of-range number) is a [`SinkError::BadValue`] naming
//! the file, the row and the column.

use crate::error::SinkError;
use crate::table::{
    parse_context, parse_edge_kind, parse_end_cause, parse_event_kind, parse_segment_kind,
    parse_spin_class, parse_start_cause, parse_strength, EventKindTag, SegmentKindTag,
};
use argus_schema::{
    CausalEdge, Cpu, ErrorRecord, Event, EventKind, Nanos, Pid, Segment, SegmentId, SegmentKind,
    Spin, TaskState, ThreadInfo, Tid,
};
use arrow::array::{
    Array, AsArray, BooleanArray, GenericListArray, PrimitiveArray, RecordBatch, StringArray,
};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Int32Type, Int64Type, UInt32Type, UInt64Type,
};
use std::path::Path;

/// Where decoding is: the file and the file row number of the batch's first row.
pub(crate) struct At<'a> {
    pub path: &'a Path,
    pub first_row: u64,
}

impl At<'_> {
    fn bad(&self, i: usize, column: &'static str, problem: impl Into<String>) -> SinkError {
        SinkError::BadValue {
            path: self.path.to_path_buf(),
            row: self.first_row + i as u64,
            column,
            problem: problem.into(),
        }
    }

    fn missing(&self, i: usize, column: &'static str, kind: &str) -> SinkError {
        self.bad(i, column, format!("null, but kind '{kind}' needs a value"))
    }

    fn wrong_type(
        &self,
        batch: &RecordBatch,
        column: &'static str,
        expected: DataType,
    ) -> SinkError {
        match batch.column_by_name(column) {
            Some(a) => SinkError::ColumnType {
                path: self.path.to_path_buf(),
                column: column.to_string(),
                found: a.data_type().clone(),
                expected,
            },
            None => SinkError::ColumnName {
                path: self.path.to_path_buf(),
                index: batch.num_columns(),
                found: String::new(),
                expected: column.to_string(),
            },
        }
    }

    fn prim<'b, T: ArrowPrimitiveType>(
        &self,
        batch: &'b RecordBatch,
        column: &'static str,
    ) -> Result<&'b PrimitiveArray<T>, SinkError> {
        batch
            .column_by_name(column)
            .and_then(|a| a.as_primitive_opt::<T>())
            .ok_or_else(|| self.wrong_type(batch, column, T::DATA_TYPE))
    }

    /// A column added after snapshots were first written: absent in older snapshots (the
    /// caller uses its default), an error only when present with the wrong type.
    fn prim_added<'b, T: ArrowPrimitiveType>(
        &self,
        batch: &'b RecordBatch,
        column: &'static str,
    ) -> Result<Option<&'b PrimitiveArray<T>>, SinkError> {
        match batch.column_by_name(column) {
            None => Ok(None),
            Some(a) => a
                .as_primitive_opt::<T>()
                .map(Some)
                .ok_or_else(|| self.wrong_type(batch, column, T::DATA_TYPE)),
        }
    }

    fn string<'b>(
        &self,
        batch: &'b RecordBatch,
        column: &'static str,
    ) -> Result<&'b StringArray, SinkError> {
        batch
            .column_by_name(column)
            .and_then(|a| a.as_string_opt::<i32>())
            .ok_or_else(|| self.wrong_type(batch, column, DataType::Utf8))
    }

    fn boolean<'b>(
        &self,
        batch: &'b RecordBatch,
        column: &'static str,
    ) -> Result<&'b BooleanArray, SinkError> {
        batch
            .column_by_name(column)
            .and_then(|a| a.as_boolean_opt())
            .ok_or_else(|| self.wrong_type(batch, column, DataType::Boolean))
    }

    fn list<'b>(
        &self,
        batch: &'b RecordBatch,
        column: &'static str,
    ) -> Result<&'b GenericListArray<i32>, SinkError> {
        batch
            .column_by_name(column)
            .and_then(|a| a.as_list_opt::<i32>())
            .ok_or_else(|| {
                self.wrong_type(batch, column, DataType::new_list(DataType::Int32, false))
            })
    }
}

fn opt<T: ArrowPrimitiveType>(a: &PrimitiveArray<T>, i: usize) -> Option<T::Native> {
    a.is_valid(i).then(|| a.value(i))
}

fn opt_str(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// A one-letter task state back to its byte (the letter was written as Latin-1).
fn parse_state(s: &str) -> Option<u8> {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => u8::try_from(u32::from(c)).ok(),
        _ => None,
    }
}

/// A tid or pid stored sign-extended in a `UInt64` column.
fn tid_from_u64(v: u64) -> Option<i32> {
    i32::try_from(v as i64).ok()
}

pub(crate) fn decode_events(
    batch: &RecordBatch,
    at: &At<'_>,
    out: &mut Vec<Event>,
) -> Result<(), SinkError> {
    let ts = at.prim::<UInt64Type>(batch, "ts_ns")?;
    let seq = at.prim::<UInt64Type>(batch, "seq")?;
    let cpu = at.prim::<UInt32Type>(batch, "cpu")?;
    let pid = at.prim::<Int32Type>(batch, "pid")?;
    let tid = at.prim::<Int32Type>(batch, "tid")?;
    let ctx = at.string(batch, "ctx")?;
    let kind = at.string(batch, "kind")?;
    let target = at.prim::<Int32Type>(batch, "target")?;
    let nr = at.prim::<Int32Type>(batch, "nr")?;
    let arg0 = at.prim::<UInt64Type>(batch, "arg0")?;
    let arg1 = at.prim::<UInt64Type>(batch, "arg1")?;
    let arg2 = at.prim::<UInt64Type>(batch, "arg2")?;
    let arg3 = at.prim::<UInt64Type>(batch, "arg3")?;
    let arg4 = at.prim::<UInt64Type>(batch, "arg4")?;
    let arg5 = at.prim::<UInt64Type>(batch, "arg5")?;
    let ret = at.prim::<Int64Type>(batch, "ret")?;
    let state = at.string(batch, "state")?;
    let text = at.string(batch, "text")?;
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        let name = kind.value(i);
        let tag = parse_event_kind(name)
            .ok_or_else(|| at.bad(i, "kind", format!("unknown event kind '{name}'")))?;
        let need_target = || opt(target, i).ok_or_else(|| at.missing(i, "target", name));
        let need_nr = || opt(nr, i).ok_or_else(|| at.missing(i, "nr", name));
        let need_arg0 = || opt(arg0, i).ok_or_else(|| at.missing(i, "arg0", name));
        let need_arg1 = || opt(arg1, i).ok_or_else(|| at.missing(i, "arg1", name));
        let need_ret = || opt(ret, i).ok_or_else(|| at.missing(i, "ret", name));
        let kind = match tag {
            EventKindTag::Switch => {
                let prev = need_arg0()?;
                let letter = opt_str(state, i).ok_or_else(|| at.missing(i, "state", name))?;
                EventKind::Switch {
                    prev: Tid(tid_from_u64(prev).ok_or_else(|| {
                        at.bad(i, "arg0", format!("previous tid {prev} is out of range"))
                    })?),
                    prev_state: TaskState(parse_state(letter).ok_or_else(|| {
                        at.bad(
                            i,
                            "state",
                            format!("'{letter}' is not a one-letter task state"),
                        )
                    })?),
                    next: Tid(need_target()?),
                }
            }
            EventKindTag::Waking => EventKind::Waking {
                target: Tid(need_target()?),
            },
            EventKindTag::WakeupNew => EventKind::WakeupNew {
                target: Tid(need_target()?),
            },
            EventKindTag::Fork => {
                let child_pid = need_arg0()?;
                let thread = need_arg1()?;
                EventKind::Fork {
                    child: Tid(need_target()?),
                    child_pid: Pid(tid_from_u64(child_pid).ok_or_else(|| {
                        at.bad(i, "arg0", format!("child pid {child_pid} is out of range"))
                    })?),
                    thread: match thread {
                        0 => false,
                        1 => true,
                        v => {
                            return Err(at.bad(i, "arg1", format!("thread flag {v} is not 0 or 1")))
                        }
                    },
                }
            }
            EventKindTag::Exec => EventKind::Exec,
            EventKindTag::Exit => EventKind::Exit,
            EventKindTag::SysEnter => EventKind::SysEnter {
                nr: need_nr()?,
                args: [
                    need_arg0()?,
                    need_arg1()?,
                    opt(arg2, i).ok_or_else(|| at.missing(i, "arg2", name))?,
                    opt(arg3, i).ok_or_else(|| at.missing(i, "arg3", name))?,
                    opt(arg4, i).ok_or_else(|| at.missing(i, "arg4", name))?,
                    opt(arg5, i).ok_or_else(|| at.missing(i, "arg5", name))?,
                ],
            },
            EventKindTag::SysExit => EventKind::SysExit {
                nr: need_nr()?,
                ret: need_ret()?,
            },
            EventKindTag::IrqEntry => EventKind::IrqEntry { irq: need_nr()? },
            EventKindTag::IrqExit => EventKind::IrqExit { irq: need_nr()? },
            EventKindTag::SoftirqEntry => EventKind::SoftirqEntry {
                vec: need_nr()? as u32,
            },
            EventKindTag::SoftirqExit => EventKind::SoftirqExit {
                vec: need_nr()? as u32,
            },
            EventKindTag::HrtimerStart => EventKind::HrtimerStart {
                timer: need_arg0()?,
                function: need_arg1()?,
                expires: need_ret()? as u64,
            },
            EventKindTag::HrtimerExpire => EventKind::HrtimerExpire {
                timer: need_arg0()?,
                function: need_arg1()?,
            },
            EventKindTag::HrtimerExpireExit => EventKind::HrtimerExpireExit {
                timer: need_arg0()?,
            },
            EventKindTag::Marker => EventKind::Marker {
                text: opt_str(text, i)
                    .ok_or_else(|| at.missing(i, "text", name))?
                    .to_string(),
            },
            EventKindTag::WorkQueue => EventKind::WorkQueue {
                work: need_arg0()?,
                function: need_arg1()?,
            },
            EventKindTag::WorkStart => EventKind::WorkStart {
                work: need_arg0()?,
                function: need_arg1()?,
            },
            EventKindTag::WorkEnd => EventKind::WorkEnd { work: need_arg0()? },
            EventKindTag::TimerStart => EventKind::TimerStart {
                timer: need_arg0()?,
                function: need_arg1()?,
                expires: need_ret()? as u64,
            },
            EventKindTag::TimerExpire => EventKind::TimerExpire {
                timer: need_arg0()?,
                function: need_arg1()?,
            },
            EventKindTag::TimerExpireExit => EventKind::TimerExpireExit {
                timer: need_arg0()?,
            },
            EventKindTag::SignalGenerate => EventKind::SignalGenerate {
                sig: need_nr()?,
                target: Tid(need_target()?),
            },
            EventKindTag::SignalDeliver => EventKind::SignalDeliver { sig: need_nr()? },
            EventKindTag::Stack => {
                let letter = opt_str(state, i).ok_or_else(|| at.missing(i, "state", name))?;
                let kernel = match letter {
                    "k" => true,
                    "u" => false,
                    _ => {
                        return Err(at.bad(
                            i,
                            "state",
                            format!("stack kind '{letter}' is not k or u"),
                        ))
                    }
                };
                let list = opt_str(text, i).ok_or_else(|| at.missing(i, "text", name))?;
                let mut ips = Vec::new();
                for part in list.split(',').filter(|p| !p.is_empty()) {
                    ips.push(u64::from_str_radix(part, 16).map_err(|_| {
                        at.bad(i, "text", format!("'{part}' is not a hexadecimal address"))
                    })?);
                }
                EventKind::Stack { kernel, ips }
            }
            EventKindTag::FlagAccess => {
                let letter = opt_str(state, i).ok_or_else(|| at.missing(i, "state", name))?;
                EventKind::FlagAccess {
                    addr: need_arg0()?,
                    write: match letter {
                        "w" => true,
                        "r" => false,
                        _ => {
                            return Err(at.bad(
                                i,
                                "state",
                                format!("access '{letter}' is not r or w"),
                            ))
                        }
                    },
                }
            }
            EventKindTag::FileLock => {
                let letter = opt_str(state, i).ok_or_else(|| at.missing(i, "state", name))?;
                let flock = match letter {
                    "f" => true,
                    "p" => false,
                    _ => {
                        return Err(at.bad(
                            i,
                            "state",
                            format!("lock kind '{letter}' is not f (flock) or p (posix)"),
                        ))
                    }
                };
                let dev = need_arg1()?;
                let lock_type = need_nr()?;
                let ret = need_ret()?;
                EventKind::FileLock {
                    inode: need_arg0()?,
                    dev: u32::try_from(dev)
                        .map_err(|_| at.bad(i, "arg1", format!("device {dev} is not 32-bit")))?,
                    flock,
                    lock_type: u8::try_from(lock_type)
                        .ok()
                        .filter(|t| *t <= 2)
                        .ok_or_else(|| {
                            at.bad(i, "nr", format!("lock type {lock_type} is not 0, 1 or 2"))
                        })?,
                    ret: i32::try_from(ret).map_err(|_| {
                        at.bad(i, "ret", format!("lock result {ret} is not 32-bit"))
                    })?,
                }
            }
            EventKindTag::SockReady => EventKind::SockReady { sk: need_arg0()? },
            EventKindTag::LockOwner => EventKind::LockOwner {
                owner: Tid(need_target()?),
                lock: need_arg0()?,
            },
            EventKindTag::SockRecv => {
                let ret = need_ret()?;
                EventKind::SockRecv {
                    sk: need_arg0()?,
                    ret: i32::try_from(ret).map_err(|_| {
                        at.bad(i, "ret", format!("receive result {ret} is not 32-bit"))
                    })?,
                }
            }
        };
        let ctx_name = ctx.value(i);
        out.push(Event {
            ts: Nanos(ts.value(i)),
            seq: seq.value(i),
            cpu: Cpu(cpu.value(i)),
            pid: Pid(pid.value(i)),
            tid: Tid(tid.value(i)),
            ctx: parse_context(ctx_name)
                .ok_or_else(|| at.bad(i, "ctx", format!("unknown context '{ctx_name}'")))?,
            kind,
        });
    }
    Ok(())
}

pub(crate) fn decode_segments(
    batch: &RecordBatch,
    at: &At<'_>,
    out: &mut Vec<Segment>,
) -> Result<(), SinkError> {
    let id = at.prim::<UInt64Type>(batch, "id")?;
    let tid = at.prim::<Int32Type>(batch, "tid")?;
    let pid = at.prim::<Int32Type>(batch, "pid")?;
    let kind = at.string(batch, "kind")?;
    let irq = at.prim::<Int64Type>(batch, "irq")?;
    let start_ns = at.prim::<UInt64Type>(batch, "start_ns")?;
    let end_ns = at.prim::<UInt64Type>(batch, "end_ns")?;
    let start_cause = at.string(batch, "start_cause")?;
    let end_cause = at.string(batch, "end_cause")?;
    let wait_start_ns = at.prim::<UInt64Type>(batch, "wait_start_ns")?;
    let wait_state = at.string(batch, "wait_state")?;
    let wait_syscall = at.prim::<Int32Type>(batch, "wait_syscall")?;
    let wait_ret = at.prim::<Int64Type>(batch, "wait_ret")?;
    let wait_object = at.prim_added::<UInt64Type>(batch, "wait_object")?;
    let on_cpu_ns = at.prim::<UInt64Type>(batch, "on_cpu_ns")?;
    let preemptions = at.prim::<UInt32Type>(batch, "preemptions")?;
    let yields = at.prim::<UInt32Type>(batch, "yields")?;
    let syscalls = at.prim::<UInt32Type>(batch, "syscalls")?;
    let events = at.prim::<UInt32Type>(batch, "events")?;
    let syscall_seq = at.list(batch, "syscall_seq")?;
    let seq_values = syscall_seq
        .values()
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| {
            at.wrong_type(
                batch,
                "syscall_seq",
                DataType::new_list(DataType::Int32, false),
            )
        })?;
    let offsets = syscall_seq.value_offsets();
    let timer_function = at.prim::<UInt64Type>(batch, "timer_function")?;
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        let name = kind.value(i);
        let tag = parse_segment_kind(name)
            .ok_or_else(|| at.bad(i, "kind", format!("unknown segment kind '{name}'")))?;
        let need_irq = || opt(irq, i).ok_or_else(|| at.missing(i, "irq", name));
        let kind = match tag {
            SegmentKindTag::Task => SegmentKind::Task,
            SegmentKindTag::Interrupt => SegmentKind::Interrupt,
            SegmentKindTag::HardIrq => {
                let v = need_irq()?;
                SegmentKind::HardIrq {
                    irq: i32::try_from(v)
                        .map_err(|_| at.bad(i, "irq", format!("irq line {v} is out of range")))?,
                }
            }
            SegmentKindTag::SoftIrq => {
                let v = need_irq()?;
                SegmentKind::SoftIrq {
                    vec: u32::try_from(v).map_err(|_| {
                        at.bad(i, "irq", format!("softirq vector {v} is out of range"))
                    })?,
                }
            }
            SegmentKindTag::Timer => SegmentKind::Timer {
                timer: need_irq()? as u64,
                function: opt(timer_function, i)
                    .ok_or_else(|| at.missing(i, "timer_function", name))?,
            },
            SegmentKindTag::WorkItem => SegmentKind::WorkItem {
                work: need_irq()? as u64,
                function: opt(timer_function, i)
                    .ok_or_else(|| at.missing(i, "timer_function", name))?,
            },
        };
        let sc = start_cause.value(i);
        let ec = end_cause.value(i);
        let ws = match opt_str(wait_state, i) {
            None => 0,
            Some(letter) => match parse_state(letter) {
                Some(0) | None => {
                    return Err(at.bad(
                        i,
                        "wait_state",
                        format!("'{letter}' is not a one-letter task state"),
                    ))
                }
                Some(b) => b,
            },
        };
        // Offsets are monotonic and within the values array (arrow validates list arrays
        // read from Parquet); slice defensively anyway.
        let (lo, hi) = (offsets[i] as usize, offsets[i + 1] as usize);
        let seq = seq_values
            .values()
            .get(lo..hi)
            .ok_or_else(|| {
                at.bad(
                    i,
                    "syscall_seq",
                    format!("list offsets {lo}..{hi} out of range"),
                )
            })?
            .to_vec();
        out.push(Segment {
            id: SegmentId(id.value(i)),
            tid: Tid(tid.value(i)),
            pid: Pid(pid.value(i)),
            kind,
            start_ns: Nanos(start_ns.value(i)),
            end_ns: Nanos(end_ns.value(i)),
            start: parse_start_cause(sc)
                .ok_or_else(|| at.bad(i, "start_cause", format!("unknown start cause '{sc}'")))?,
            end: parse_end_cause(ec)
                .ok_or_else(|| at.bad(i, "end_cause", format!("unknown end cause '{ec}'")))?,
            wait_start_ns: opt(wait_start_ns, i).map(Nanos),
            wait_state: ws,
            wait_syscall: wait_syscall.value(i),
            wait_ret: opt(wait_ret, i),
            wait_object: wait_object.and_then(|a| opt(a, i)),
            on_cpu_ns: on_cpu_ns.value(i),
            preemptions: preemptions.value(i),
            yields: yields.value(i),
            syscalls: syscalls.value(i),
            events: events.value(i),
            syscall_seq: seq,
        });
    }
    Ok(())
}

pub(crate) fn decode_edges(
    batch: &RecordBatch,
    at: &At<'_>,
    out: &mut Vec<CausalEdge>,
) -> Result<(), SinkError> {
    let src = at.prim::<UInt64Type>(batch, "src")?;
    let dst = at.prim::<UInt64Type>(batch, "dst")?;
    let kind = at.string(batch, "kind")?;
    let strength = at.string(batch, "strength")?;
    let ts = at.prim::<UInt64Type>(batch, "ts_ns")?;
    let src_syscall = at.prim::<Int32Type>(batch, "src_syscall")?;
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        let k = kind.value(i);
        let s = strength.value(i);
        out.push(CausalEdge {
            src: SegmentId(src.value(i)),
            dst: SegmentId(dst.value(i)),
            kind: parse_edge_kind(k)
                .ok_or_else(|| at.bad(i, "kind", format!("unknown edge kind '{k}'")))?,
            strength: parse_strength(s)
                .ok_or_else(|| at.bad(i, "strength", format!("unknown strength '{s}'")))?,
            ts: Nanos(ts.value(i)),
            src_syscall: src_syscall.value(i),
        });
    }
    Ok(())
}

pub(crate) fn decode_spins(
    batch: &RecordBatch,
    at: &At<'_>,
    out: &mut Vec<Spin>,
) -> Result<(), SinkError> {
    let segment = at.prim::<UInt64Type>(batch, "segment")?;
    let last = at.prim::<UInt64Type>(batch, "last")?;
    let tid = at.prim::<Int32Type>(batch, "tid")?;
    let pid = at.prim::<Int32Type>(batch, "pid")?;
    let class = at.string(batch, "class")?;
    let start_ns = at.prim::<UInt64Type>(batch, "start_ns")?;
    let end_ns = at.prim::<UInt64Type>(batch, "end_ns")?;
    let open = at.boolean(batch, "open")?;
    let on_cpu_ns = at.prim::<UInt64Type>(batch, "on_cpu_ns")?;
    let wait_ns = at.prim::<UInt64Type>(batch, "wait_ns")?;
    let segments = at.prim::<UInt32Type>(batch, "segments")?;
    let wait_syscall = at.prim::<Int32Type>(batch, "wait_syscall")?;
    let timeouts = at.prim_added::<UInt32Type>(batch, "timeouts")?;
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        let c = class.value(i);
        out.push(Spin {
            segment: SegmentId(segment.value(i)),
            last: SegmentId(last.value(i)),
            tid: Tid(tid.value(i)),
            pid: Pid(pid.value(i)),
            class: parse_spin_class(c)
                .ok_or_else(|| at.bad(i, "class", format!("unknown spin class '{c}'")))?,
            start_ns: Nanos(start_ns.value(i)),
            end_ns: Nanos(end_ns.value(i)),
            open: open.value(i),
            on_cpu_ns: on_cpu_ns.value(i),
            wait_ns: wait_ns.value(i),
            segments: segments.value(i),
            wait_syscall: wait_syscall.value(i),
            timeouts: timeouts.map_or(0, |a| a.value(i)),
        });
    }
    Ok(())
}

pub(crate) fn decode_threads(
    batch: &RecordBatch,
    at: &At<'_>,
    out: &mut Vec<ThreadInfo>,
) -> Result<(), SinkError> {
    let tid = at.prim::<Int32Type>(batch, "tid")?;
    let pid = at.prim::<Int32Type>(batch, "pid")?;
    let comm = at.string(batch, "comm")?;
    let process = at.string(batch, "process")?;
    let parent = at.prim::<Int32Type>(batch, "parent")?;
    let start_ns = at.prim::<UInt64Type>(batch, "start_ns")?;
    let exit_ns = at.prim::<UInt64Type>(batch, "exit_ns")?;
    let kernel = at.boolean(batch, "kernel")?;
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        out.push(ThreadInfo {
            tid: Tid(tid.value(i)),
            pid: Pid(pid.value(i)),
            comm: comm.value(i).to_string(),
            process: process.value(i).to_string(),
            parent: opt(parent, i).map(Tid),
            start_ns: opt(start_ns, i).map(Nanos),
            exit_ns: opt(exit_ns, i).map(Nanos),
            kernel: kernel.value(i),
        });
    }
    Ok(())
}

pub(crate) fn decode_errors(
    batch: &RecordBatch,
    at: &At<'_>,
    out: &mut Vec<ErrorRecord>,
) -> Result<(), SinkError> {
    let source = at.string(batch, "source")?;
    let offset = at.prim::<UInt64Type>(batch, "offset")?;
    let ts = at.prim::<UInt64Type>(batch, "ts_ns")?;
    let message = at.string(batch, "message")?;
    out.reserve(batch.num_rows());
    for i in 0..batch.num_rows() {
        out.push(ErrorRecord {
            source: source.value(i).to_string(),
            offset: opt(offset, i),
            ts: opt(ts, i).map(Nanos),
            message: message.value(i).to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_letters_round_trip_through_latin1() {
        for b in 0..=255u8 {
            let mut buf = [0; 4];
            let s = crate::to_arrow::state_letter(b, &mut buf);
            assert_eq!(parse_state(s), Some(b));
        }
        assert_eq!(parse_state("RS"), None);
        assert_eq!(parse_state(""), None);
        assert_eq!(parse_state("€"), None);
    }

    #[test]
    fn tids_are_sign_extended() {
        assert_eq!(tid_from_u64(-3i64 as u64), Some(-3));
        assert_eq!(tid_from_u64(42), Some(42));
        assert_eq!(tid_from_u64(1 << 40), None);
    }
}
