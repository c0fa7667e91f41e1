//! Rows → Arrow arrays, one column builder per schema column. Builders are reused batch
//! after batch so a table is written in bounded memory whatever its length.

use crate::table::Table;
use argus_schema::{
    CausalEdge, ErrorRecord, Event, EventKind, Segment, SegmentKind, Spin, ThreadInfo,
};
use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field};
use std::sync::Arc;

/// Accumulates rows of one table into column builders.
pub(crate) trait Encoder {
    /// The row type.
    type Row;
    /// The table it encodes.
    const TABLE: Table;
    /// A fresh encoder with room for `capacity` rows.
    fn with_capacity(capacity: usize) -> Self;
    /// Appends one row.
    fn push(&mut self, row: &Self::Row);
    /// Rows appended since the last `finish`.
    fn len(&self) -> usize;
    /// The columns of the rows appended since the last `finish`, in schema order; resets.
    fn finish(&mut self) -> Vec<ArrayRef>;
}

fn fin(b: &mut dyn ArrayBuilder) -> ArrayRef {
    b.finish()
}

/// A `TaskState` letter as a one-character string (`u8` read as Latin-1).
pub(crate) fn state_letter(state: u8, buf: &mut [u8; 4]) -> &str {
    char::from(state).encode_utf8(buf)
}

pub(crate) struct EventEncoder {
    rows: usize,
    ts: UInt64Builder,
    seq: UInt64Builder,
    cpu: UInt32Builder,
    pid: Int32Builder,
    tid: Int32Builder,
    ctx: StringBuilder,
    kind: StringBuilder,
    target: Int32Builder,
    nr: Int32Builder,
    arg0: UInt64Builder,
    arg1: UInt64Builder,
    arg2: UInt64Builder,
    arg3: UInt64Builder,
    arg4: UInt64Builder,
    arg5: UInt64Builder,
    ret: Int64Builder,
    state: StringBuilder,
    text: StringBuilder,
}

impl Encoder for EventEncoder {
    type Row = Event;
    const TABLE: Table = Table::Events;

    fn with_capacity(n: usize) -> Self {
        EventEncoder {
            rows: 0,
            ts: UInt64Builder::with_capacity(n),
            seq: UInt64Builder::with_capacity(n),
            cpu: UInt32Builder::with_capacity(n),
            pid: Int32Builder::with_capacity(n),
            tid: Int32Builder::with_capacity(n),
            ctx: StringBuilder::with_capacity(n, n * 4),
            kind: StringBuilder::with_capacity(n, n * 8),
            target: Int32Builder::with_capacity(n),
            nr: Int32Builder::with_capacity(n),
            arg0: UInt64Builder::with_capacity(n),
            arg1: UInt64Builder::with_capacity(n),
            arg2: UInt64Builder::with_capacity(n),
            arg3: UInt64Builder::with_capacity(n),
            arg4: UInt64Builder::with_capacity(n),
            arg5: UInt64Builder::with_capacity(n),
            ret: Int64Builder::with_capacity(n),
            state: StringBuilder::with_capacity(n, n),
            text: StringBuilder::new(),
        }
    }

    fn push(&mut self, e: &Event) {
        self.rows += 1;
        self.ts.append_value(e.ts.0);
        self.seq.append_value(e.seq);
        self.cpu.append_value(e.cpu.0);
        self.pid.append_value(e.pid.0);
        self.tid.append_value(e.tid.0);
        self.ctx.append_value(e.ctx.name());
        self.kind.append_value(e.kind.name());
        // The payload columns, see docs/snapshot.md. Signed values stored in UInt64 columns
        // (tids, pids) are sign-extended; unsigned values in signed columns are bit casts.
        let mut target = None;
        let mut nr = None;
        let mut arg0 = None;
        let mut arg1 = None;
        let mut rest: Option<[u64; 4]> = None;
        let mut ret = None;
        let stack_text;
        let mut state = None;
        let mut text = None;
        match &e.kind {
            EventKind::Switch {
                prev,
                prev_state,
                next,
            } => {
                target = Some(next.0);
                arg0 = Some(prev.0 as i64 as u64);
                state = Some(prev_state.0);
            }
            EventKind::Waking { target: t } | EventKind::WakeupNew { target: t } => {
                target = Some(t.0)
            }
            EventKind::Fork {
                child,
                child_pid,
                thread,
            } => {
                target = Some(child.0);
                arg0 = Some(child_pid.0 as i64 as u64);
                arg1 = Some(u64::from(*thread));
            }
            EventKind::Exec | EventKind::Exit => {}
            EventKind::SysEnter { nr: n, args } => {
                nr = Some(*n);
                arg0 = Some(args[0]);
                arg1 = Some(args[1]);
                rest = Some([args[2], args[3], args[4], args[5]]);
            }
            EventKind::SysExit { nr: n, ret: r } => {
                nr = Some(*n);
                ret = Some(*r);
            }
            EventKind::IrqEntry { irq } | EventKind::IrqExit { irq } => nr = Some(*irq),
            EventKind::SoftirqEntry { vec } | EventKind::SoftirqExit { vec } => {
                nr = Some(*vec as i32)
            }
            EventKind::HrtimerStart {
                timer,
                function,
                expires,
            } => {
                arg0 = Some(*timer);
                arg1 = Some(*function);
                ret = Some(*expires as i64);
            }
            EventKind::HrtimerExpire { timer, function } => {
                arg0 = Some(*timer);
                arg1 = Some(*function);
            }
            EventKind::HrtimerExpireExit { timer } => arg0 = Some(*timer),
            EventKind::Marker { text: t } => text = Some(t.as_str()),
            EventKind::WorkQueue { work, function } | EventKind::WorkStart { work, function } => {
                arg0 = Some(*work);
                arg1 = Some(*function);
            }
            EventKind::WorkEnd { work } => arg0 = Some(*work),
            EventKind::TimerStart {
                timer,
                function,
                expires,
            } => {
                arg0 = Some(*timer);
                arg1 = Some(*function);
                ret = Some(*expires as i64);
            }
            EventKind::TimerExpire { timer, function } => {
                arg0 = Some(*timer);
                arg1 = Some(*function);
            }
            EventKind::TimerExpireExit { timer } => arg0 = Some(*timer),
            EventKind::SignalGenerate { sig, target: t } => {
                nr = Some(*sig);
                target = Some(t.0);
            }
            EventKind::SignalDeliver { sig } => nr = Some(*sig),
            EventKind::Stack { kernel, ips } => {
                state = Some(if *kernel { b'k' } else { b'u' });
                stack_text = ips
                    .iter()
                    .map(|ip| format!("{ip:x}"))
                    .collect::<Vec<_>>()
                    .join(",");
                text = Some(stack_text.as_str());
            }
            EventKind::FlagAccess { addr, write } => {
                arg0 = Some(*addr);
                state = Some(if *write { b'w' } else { b'r' });
            }
        }
        self.target.append_option(target);
        self.nr.append_option(nr);
        self.arg0.append_option(arg0);
        self.arg1.append_option(arg1);
        self.arg2.append_option(rest.map(|r| r[0]));
        self.arg3.append_option(rest.map(|r| r[1]));
        self.arg4.append_option(rest.map(|r| r[2]));
        self.arg5.append_option(rest.map(|r| r[3]));
        self.ret.append_option(ret);
        match state {
            Some(s) => self.state.append_value(state_letter(s, &mut [0; 4])),
            None => self.state.append_null(),
        }
        self.text.append_option(text);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            fin(&mut self.ts),
            fin(&mut self.seq),
            fin(&mut self.cpu),
            fin(&mut self.pid),
            fin(&mut self.tid),
            fin(&mut self.ctx),
            fin(&mut self.kind),
            fin(&mut self.target),
            fin(&mut self.nr),
            fin(&mut self.arg0),
            fin(&mut self.arg1),
            fin(&mut self.arg2),
            fin(&mut self.arg3),
            fin(&mut self.arg4),
            fin(&mut self.arg5),
            fin(&mut self.ret),
            fin(&mut self.state),
            fin(&mut self.text),
        ]
    }
}

pub(crate) struct SegmentEncoder {
    rows: usize,
    id: UInt64Builder,
    tid: Int32Builder,
    pid: Int32Builder,
    kind: StringBuilder,
    irq: Int64Builder,
    start_ns: UInt64Builder,
    end_ns: UInt64Builder,
    start_cause: StringBuilder,
    end_cause: StringBuilder,
    wait_start_ns: UInt64Builder,
    wait_state: StringBuilder,
    wait_syscall: Int32Builder,
    wait_ret: Int64Builder,
    on_cpu_ns: UInt64Builder,
    preemptions: UInt32Builder,
    yields: UInt32Builder,
    syscalls: UInt32Builder,
    events: UInt32Builder,
    syscall_seq: ListBuilder<Int32Builder>,
    timer_function: UInt64Builder,
}

/// The item field of `segments.syscall_seq`, as the schema declares it.
fn syscall_seq_item() -> Arc<Field> {
    match Table::Segments
        .schema()
        .field_with_name("syscall_seq")
        .map(|f| f.data_type().clone())
    {
        Ok(DataType::List(item)) => item,
        // The schema crate defines the column as a list; keep the documented item field if
        // that ever changes so the writer still produces a well-formed batch (and the
        // schema check of RecordBatch::try_new reports the mismatch).
        _ => Arc::new(Field::new("item", DataType::Int32, false)),
    }
}

impl Encoder for SegmentEncoder {
    type Row = Segment;
    const TABLE: Table = Table::Segments;

    fn with_capacity(n: usize) -> Self {
        SegmentEncoder {
            rows: 0,
            id: UInt64Builder::with_capacity(n),
            tid: Int32Builder::with_capacity(n),
            pid: Int32Builder::with_capacity(n),
            kind: StringBuilder::with_capacity(n, n * 8),
            irq: Int64Builder::with_capacity(n),
            start_ns: UInt64Builder::with_capacity(n),
            end_ns: UInt64Builder::with_capacity(n),
            start_cause: StringBuilder::with_capacity(n, n * 8),
            end_cause: StringBuilder::with_capacity(n, n * 8),
            wait_start_ns: UInt64Builder::with_capacity(n),
            wait_state: StringBuilder::with_capacity(n, n),
            wait_syscall: Int32Builder::with_capacity(n),
            wait_ret: Int64Builder::with_capacity(n),
            on_cpu_ns: UInt64Builder::with_capacity(n),
            preemptions: UInt32Builder::with_capacity(n),
            yields: UInt32Builder::with_capacity(n),
            syscalls: UInt32Builder::with_capacity(n),
            events: UInt32Builder::with_capacity(n),
            syscall_seq: ListBuilder::with_capacity(Int32Builder::with_capacity(n * 4), n)
                .with_field(syscall_seq_item()),
            timer_function: UInt64Builder::with_capacity(n),
        }
    }

    fn push(&mut self, s: &Segment) {
        self.rows += 1;
        self.id.append_value(s.id.0);
        self.tid.append_value(s.tid.0);
        self.pid.append_value(s.pid.0);
        self.kind.append_value(s.kind.name());
        let (irq, function) = match s.kind {
            SegmentKind::Task | SegmentKind::Interrupt => (None, None),
            SegmentKind::HardIrq { irq } => (Some(i64::from(irq)), None),
            SegmentKind::SoftIrq { vec } => (Some(i64::from(vec)), None),
            SegmentKind::Timer { timer, function } => (Some(timer as i64), Some(function)),
            SegmentKind::WorkItem { work, function } => (Some(work as i64), Some(function)),
        };
        self.irq.append_option(irq);
        self.start_ns.append_value(s.start_ns.0);
        self.end_ns.append_value(s.end_ns.0);
        self.start_cause.append_value(s.start.name());
        self.end_cause.append_value(s.end.name());
        self.wait_start_ns
            .append_option(s.wait_start_ns.map(|n| n.0));
        if s.wait_state == 0 {
            self.wait_state.append_null();
        } else {
            self.wait_state
                .append_value(state_letter(s.wait_state, &mut [0; 4]));
        }
        self.wait_syscall.append_value(s.wait_syscall);
        self.wait_ret.append_option(s.wait_ret);
        self.on_cpu_ns.append_value(s.on_cpu_ns);
        self.preemptions.append_value(s.preemptions);
        self.yields.append_value(s.yields);
        self.syscalls.append_value(s.syscalls);
        self.events.append_value(s.events);
        self.syscall_seq.values().append_slice(&s.syscall_seq);
        self.syscall_seq.append(true);
        self.timer_function.append_option(function);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            fin(&mut self.id),
            fin(&mut self.tid),
            fin(&mut self.pid),
            fin(&mut self.kind),
            fin(&mut self.irq),
            fin(&mut self.start_ns),
            fin(&mut self.end_ns),
            fin(&mut self.start_cause),
            fin(&mut self.end_cause),
            fin(&mut self.wait_start_ns),
            fin(&mut self.wait_state),
            fin(&mut self.wait_syscall),
            fin(&mut self.wait_ret),
            fin(&mut self.on_cpu_ns),
            fin(&mut self.preemptions),
            fin(&mut self.yields),
            fin(&mut self.syscalls),
            fin(&mut self.events),
            fin(&mut self.syscall_seq),
            fin(&mut self.timer_function),
        ]
    }
}

pub(crate) struct EdgeEncoder {
    rows: usize,
    src: UInt64Builder,
    dst: UInt64Builder,
    kind: StringBuilder,
    strength: StringBuilder,
    ts: UInt64Builder,
    src_syscall: Int32Builder,
}

impl Encoder for EdgeEncoder {
    type Row = CausalEdge;
    const TABLE: Table = Table::Edges;

    fn with_capacity(n: usize) -> Self {
        EdgeEncoder {
            rows: 0,
            src: UInt64Builder::with_capacity(n),
            dst: UInt64Builder::with_capacity(n),
            kind: StringBuilder::with_capacity(n, n * 8),
            strength: StringBuilder::with_capacity(n, n * 6),
            ts: UInt64Builder::with_capacity(n),
            src_syscall: Int32Builder::with_capacity(n),
        }
    }

    fn push(&mut self, e: &CausalEdge) {
        self.rows += 1;
        self.src.append_value(e.src.0);
        self.dst.append_value(e.dst.0);
        self.kind.append_value(e.kind.name());
        self.strength.append_value(e.strength.name());
        self.ts.append_value(e.ts.0);
        self.src_syscall.append_value(e.src_syscall);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            fin(&mut self.src),
            fin(&mut self.dst),
            fin(&mut self.kind),
            fin(&mut self.strength),
            fin(&mut self.ts),
            fin(&mut self.src_syscall),
        ]
    }
}

pub(crate) struct SpinEncoder {
    rows: usize,
    segment: UInt64Builder,
    last: UInt64Builder,
    tid: Int32Builder,
    pid: Int32Builder,
    class: StringBuilder,
    start_ns: UInt64Builder,
    end_ns: UInt64Builder,
    open: BooleanBuilder,
    on_cpu_ns: UInt64Builder,
    wait_ns: UInt64Builder,
    segments: UInt32Builder,
    wait_syscall: Int32Builder,
}

impl Encoder for SpinEncoder {
    type Row = Spin;
    const TABLE: Table = Table::Spins;

    fn with_capacity(n: usize) -> Self {
        SpinEncoder {
            rows: 0,
            segment: UInt64Builder::with_capacity(n),
            last: UInt64Builder::with_capacity(n),
            tid: Int32Builder::with_capacity(n),
            pid: Int32Builder::with_capacity(n),
            class: StringBuilder::with_capacity(n, n * 12),
            start_ns: UInt64Builder::with_capacity(n),
            end_ns: UInt64Builder::with_capacity(n),
            open: BooleanBuilder::with_capacity(n),
            on_cpu_ns: UInt64Builder::with_capacity(n),
            wait_ns: UInt64Builder::with_capacity(n),
            segments: UInt32Builder::with_capacity(n),
            wait_syscall: Int32Builder::with_capacity(n),
        }
    }

    fn push(&mut self, s: &Spin) {
        self.rows += 1;
        self.segment.append_value(s.segment.0);
        self.last.append_value(s.last.0);
        self.tid.append_value(s.tid.0);
        self.pid.append_value(s.pid.0);
        self.class.append_value(s.class.name());
        self.start_ns.append_value(s.start_ns.0);
        self.end_ns.append_value(s.end_ns.0);
        self.open.append_value(s.open);
        self.on_cpu_ns.append_value(s.on_cpu_ns);
        self.wait_ns.append_value(s.wait_ns);
        self.segments.append_value(s.segments);
        self.wait_syscall.append_value(s.wait_syscall);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            fin(&mut self.segment),
            fin(&mut self.last),
            fin(&mut self.tid),
            fin(&mut self.pid),
            fin(&mut self.class),
            fin(&mut self.start_ns),
            fin(&mut self.end_ns),
            fin(&mut self.open),
            fin(&mut self.on_cpu_ns),
            fin(&mut self.wait_ns),
            fin(&mut self.segments),
            fin(&mut self.wait_syscall),
        ]
    }
}

pub(crate) struct ThreadEncoder {
    rows: usize,
    tid: Int32Builder,
    pid: Int32Builder,
    comm: StringBuilder,
    process: StringBuilder,
    parent: Int32Builder,
    start_ns: UInt64Builder,
    exit_ns: UInt64Builder,
    kernel: BooleanBuilder,
}

impl Encoder for ThreadEncoder {
    type Row = ThreadInfo;
    const TABLE: Table = Table::Threads;

    fn with_capacity(n: usize) -> Self {
        ThreadEncoder {
            rows: 0,
            tid: Int32Builder::with_capacity(n),
            pid: Int32Builder::with_capacity(n),
            comm: StringBuilder::with_capacity(n, n * 16),
            process: StringBuilder::with_capacity(n, n * 16),
            parent: Int32Builder::with_capacity(n),
            start_ns: UInt64Builder::with_capacity(n),
            exit_ns: UInt64Builder::with_capacity(n),
            kernel: BooleanBuilder::with_capacity(n),
        }
    }

    fn push(&mut self, t: &ThreadInfo) {
        self.rows += 1;
        self.tid.append_value(t.tid.0);
        self.pid.append_value(t.pid.0);
        self.comm.append_value(&t.comm);
        self.process.append_value(&t.process);
        self.parent.append_option(t.parent.map(|p| p.0));
        self.start_ns.append_option(t.start_ns.map(|n| n.0));
        self.exit_ns.append_option(t.exit_ns.map(|n| n.0));
        self.kernel.append_value(t.kernel);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            fin(&mut self.tid),
            fin(&mut self.pid),
            fin(&mut self.comm),
            fin(&mut self.process),
            fin(&mut self.parent),
            fin(&mut self.start_ns),
            fin(&mut self.exit_ns),
            fin(&mut self.kernel),
        ]
    }
}

pub(crate) struct ErrorEncoder {
    rows: usize,
    source: StringBuilder,
    offset: UInt64Builder,
    ts: UInt64Builder,
    message: StringBuilder,
}

impl Encoder for ErrorEncoder {
    type Row = ErrorRecord;
    const TABLE: Table = Table::Errors;

    fn with_capacity(n: usize) -> Self {
        ErrorEncoder {
            rows: 0,
            source: StringBuilder::with_capacity(n, n * 32),
            offset: UInt64Builder::with_capacity(n),
            ts: UInt64Builder::with_capacity(n),
            message: StringBuilder::with_capacity(n, n * 32),
        }
    }

    fn push(&mut self, e: &ErrorRecord) {
        self.rows += 1;
        self.source.append_value(&e.source);
        self.offset.append_option(e.offset);
        self.ts.append_option(e.ts.map(|n| n.0));
        self.message.append_value(&e.message);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            fin(&mut self.source),
            fin(&mut self.offset),
            fin(&mut self.ts),
            fin(&mut self.message),
        ]
    }
}
