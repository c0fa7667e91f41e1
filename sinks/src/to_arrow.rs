//! Rows → Arrow arrays, one column builder per schema column. Builders are reused batch
//! after batch so a table is written in bounded memory whatever its length.

use crate::table::{EventKindTag, Table};
use argus_schema::{
    CausalEdge, Context, ErrorRecord, Event, EventKind, Segment, SegmentKind, Spin, ThreadInfo,
};
use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Int32Builder, ListBuilder, PrimitiveArray, StringArray,
    StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, Int32Type, Int64Type, UInt32Type, UInt64Type,
};
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

/// A fixed-width column with nulls being filled for one batch: the values (zero where null)
/// and one validity byte per row, packed into Arrow's bitmap (LSB first) when the batch is
/// finished, and dropped when no row is null. Cheaper per row than arrow's builders: pushing
/// is branch-free and the values become the array without a copy.
struct Column<T: ArrowPrimitiveType> {
    values: Vec<T::Native>,
    valid: Vec<u8>,
}

impl<T: ArrowPrimitiveType> Column<T> {
    fn with_capacity(n: usize) -> Self {
        Column {
            values: Vec::with_capacity(n),
            valid: Vec::with_capacity(n),
        }
    }

    #[inline]
    fn push_option(&mut self, v: Option<T::Native>) {
        self.valid.push(u8::from(v.is_some()));
        self.values.push(v.unwrap_or_default());
    }

    fn finish(&mut self) -> ArrayRef {
        let cap = self.values.capacity();
        let values = std::mem::replace(&mut self.values, Vec::with_capacity(cap));
        let len = values.len();
        let nulls = if self.valid.iter().all(|&v| v == 1) {
            None
        } else {
            let mut bits = vec![0u8; len.div_ceil(8)];
            for (byte, valid) in bits.iter_mut().zip(self.valid.chunks(8)) {
                *byte = valid
                    .iter()
                    .enumerate()
                    .fold(0u8, |b, (i, &v)| b | (v << i));
            }
            Some(NullBuffer::new(BooleanBuffer::new(
                Buffer::from_vec(bits),
                0,
                len,
            )))
        };
        self.valid.clear();
        Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls))
    }
}

/// A string column of short names (never null) being filled for one batch.
struct Names {
    offsets: Vec<i32>,
    bytes: Vec<u8>,
}

impl Names {
    fn with_capacity(n: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        Names {
            offsets,
            bytes: Vec::with_capacity(bytes),
        }
    }

    #[inline]
    fn push(&mut self, s: &str) {
        self.bytes.extend_from_slice(s.as_bytes());
        // A batch holds far fewer than 2 GiB of names.
        self.offsets.push(self.bytes.len() as i32);
    }

    fn finish(&mut self) -> ArrayRef {
        let (n, b) = (self.offsets.capacity(), self.bytes.capacity());
        let offsets = std::mem::replace(&mut self.offsets, Vec::with_capacity(n));
        self.offsets.push(0);
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(b));
        // Valid by construction (monotonic offsets over whole `&str`s); `try_new`'s checks
        // are linear in the batch, as building it was.
        let names = StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(bytes),
            None,
        )
        .expect("invariant: names appended as &str make valid UTF-8 with monotonic offsets");
        Arc::new(names)
    }
}

/// Which of the events table's optional columns a row fills (bits of [`Tag::present`]).
mod has {
    pub const TARGET: u8 = 1;
    pub const NR: u8 = 1 << 1;
    pub const ARG0: u8 = 1 << 2;
    pub const ARG1: u8 = 1 << 3;
    /// `arg2`..`arg5`: only system calls fill them, all four at once.
    pub const ARGS2_5: u8 = 1 << 4;
    pub const RET: u8 = 1 << 5;
    pub const STATE: u8 = 1 << 6;
    pub const TEXT: u8 = 1 << 7;
}

/// One events row's small fields: its context and kind (indices into [`CONTEXTS`] and
/// the [`EventKindTag`]s), its state letter, and which optional columns it fills. One store per
/// row where the names and nine validity flags were a dozen; the columns are built from the
/// tags when the batch is finished.
#[derive(Clone, Copy, Default)]
struct Tag {
    ctx: u8,
    kind: u8,
    state: u8,
    present: u8,
}

/// Contexts by their `as u8` number (declaration order).
const CONTEXTS: [Context; 4] = [
    Context::Task,
    Context::SoftIrq,
    Context::HardIrq,
    Context::Nmi,
];

/// A never-null fixed-width column: the values become the array without a copy.
struct Plain<T: ArrowPrimitiveType> {
    values: Vec<T::Native>,
}

impl<T: ArrowPrimitiveType> Plain<T> {
    fn with_capacity(n: usize) -> Self {
        Plain {
            values: Vec::with_capacity(n),
        }
    }

    #[inline]
    fn push(&mut self, v: T::Native) {
        self.values.push(v);
    }

    /// The array (with the rows' validity, if any row is null); starts the next batch.
    fn finish_with(&mut self, nulls: Option<NullBuffer>) -> ArrayRef {
        let cap = self.values.capacity();
        let values = std::mem::replace(&mut self.values, Vec::with_capacity(cap));
        Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls))
    }

    fn finish(&mut self) -> ArrayRef {
        self.finish_with(None)
    }
}

/// The validity of each optional column (bit `b` of [`Tag::present`] at index `b`), in one
/// pass over the tags; `None` for a column no row leaves null.
fn validities(tags: &[Tag]) -> [Option<NullBuffer>; 8] {
    let words = tags.len().div_ceil(64);
    let mut planes: [Vec<u64>; 8] = std::array::from_fn(|_| Vec::with_capacity(words));
    for chunk in tags.chunks(64) {
        let mut w = [0u64; 8];
        for (i, t) in chunk.iter().enumerate() {
            let p = u64::from(t.present);
            for (b, word) in w.iter_mut().enumerate() {
                *word |= ((p >> b) & 1) << i;
            }
        }
        for (plane, word) in planes.iter_mut().zip(w) {
            plane.push(word);
        }
    }
    planes.map(|words| {
        let bits = BooleanBuffer::new(Buffer::from_vec(words), 0, tags.len());
        let nulls = NullBuffer::new(bits);
        (nulls.null_count() > 0).then_some(nulls)
    })
}

/// A small table of names, each padded to 32 bytes so that copying one into a column is a
/// fixed-size move rather than a call to `memcpy` (two per event, for `ctx` and `kind`).
struct NameTable {
    padded: Vec<[u8; 32]>,
    len: Vec<usize>,
    longest: usize,
}

impl NameTable {
    fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> NameTable {
        let (mut padded, mut len) = (Vec::new(), Vec::new());
        for name in names {
            let b = name.as_bytes();
            assert!(b.len() <= 32, "name {name:?} longer than 32 bytes");
            let mut p = [0u8; 32];
            p[..b.len()].copy_from_slice(b);
            padded.push(p);
            len.push(b.len());
        }
        let longest = len.iter().copied().max().unwrap_or(0);
        NameTable {
            padded,
            len,
            longest,
        }
    }

    /// A never-null string column holding name `code` for each row.
    fn column(&self, rows: usize, codes: impl Iterator<Item = u8>) -> ArrayRef {
        let mut offsets = Vec::with_capacity(rows + 1);
        // Room for the padding of the last copy too.
        let mut data = Vec::with_capacity(rows * self.longest + 32);
        offsets.push(0i32);
        for code in codes {
            let code = usize::from(code);
            let start = data.len();
            data.extend_from_slice(&self.padded[code]);
            data.truncate(start + self.len[code]);
            // A batch holds far fewer than 2 GiB of names.
            offsets.push(data.len() as i32);
        }
        strings(offsets, data, None)
    }
}

pub(crate) struct EventEncoder {
    ts: Plain<UInt64Type>,
    seq: Plain<UInt64Type>,
    cpu: Plain<UInt32Type>,
    pid: Plain<Int32Type>,
    tid: Plain<Int32Type>,
    tags: Vec<Tag>,
    // The optional columns: a value per row (zero where the row has none, see `Tag`).
    target: Plain<Int32Type>,
    nr: Plain<Int32Type>,
    arg0: Plain<UInt64Type>,
    arg1: Plain<UInt64Type>,
    arg2: Plain<UInt64Type>,
    arg3: Plain<UInt64Type>,
    arg4: Plain<UInt64Type>,
    arg5: Plain<UInt64Type>,
    ret: Plain<Int64Type>,
    /// Marker and stack texts, back to back, with `(row, end offset)` of each.
    text: Vec<u8>,
    text_rows: Vec<(u32, u32)>,
    contexts: NameTable,
    /// The name of each kind (by its [`EventKindTag`] number) seen so far, from
    /// [`EventKind::name`]; empty for kinds not seen yet.
    kind_names: Vec<&'static str>,
}

impl EventEncoder {
    /// The number of an event's kind, its name learnt on first sight.
    #[inline]
    fn kind_code(&mut self, kind: &EventKind) -> u8 {
        let code = EventKindTag::of(kind) as usize;
        if self.kind_names.get(code).is_none_or(|n| n.is_empty()) {
            if self.kind_names.len() <= code {
                self.kind_names.resize(code + 1, "");
            }
            self.kind_names[code] = kind.name();
        }
        // One tag per `EventKind` variant: a few dozen.
        code as u8
    }
}

impl Encoder for EventEncoder {
    type Row = Event;
    const TABLE: Table = Table::Events;

    fn with_capacity(n: usize) -> Self {
        EventEncoder {
            ts: Plain::with_capacity(n),
            seq: Plain::with_capacity(n),
            cpu: Plain::with_capacity(n),
            pid: Plain::with_capacity(n),
            tid: Plain::with_capacity(n),
            tags: Vec::with_capacity(n),
            target: Plain::with_capacity(n),
            nr: Plain::with_capacity(n),
            arg0: Plain::with_capacity(n),
            arg1: Plain::with_capacity(n),
            arg2: Plain::with_capacity(n),
            arg3: Plain::with_capacity(n),
            arg4: Plain::with_capacity(n),
            arg5: Plain::with_capacity(n),
            ret: Plain::with_capacity(n),
            text: Vec::new(),
            text_rows: Vec::new(),
            contexts: NameTable::new(CONTEXTS.iter().map(|c| c.name())),
            kind_names: Vec::new(),
        }
    }

    fn push(&mut self, e: &Event) {
        self.ts.push(e.ts.0);
        self.seq.push(e.seq);
        self.cpu.push(e.cpu.0);
        self.pid.push(e.pid.0);
        self.tid.push(e.tid.0);
        // The payload columns, see docs/snapshot.md. Signed values stored in UInt64 columns
        // (tids, pids) are sign-extended; unsigned values in signed columns are bit casts.
        let mut present = 0u8;
        let (mut target, mut nr, mut arg0, mut arg1, mut ret) = (0, 0, 0, 0, 0);
        let mut rest = [0u64; 4];
        let mut state = 0u8;
        let mut text: Option<std::borrow::Cow<'_, str>> = None;
        match &e.kind {
            EventKind::Switch {
                prev,
                prev_state,
                next,
            } => {
                present = has::TARGET | has::ARG0 | has::STATE;
                target = next.0;
                arg0 = prev.0 as i64 as u64;
                state = prev_state.0;
            }
            EventKind::Waking { target: t } | EventKind::WakeupNew { target: t } => {
                present = has::TARGET;
                target = t.0;
            }
            EventKind::Fork {
                child,
                child_pid,
                thread,
            } => {
                present = has::TARGET | has::ARG0 | has::ARG1;
                target = child.0;
                arg0 = child_pid.0 as i64 as u64;
                arg1 = u64::from(*thread);
            }
            EventKind::Exec | EventKind::Exit => {}
            EventKind::SysEnter { nr: n, args } => {
                present = has::NR | has::ARG0 | has::ARG1 | has::ARGS2_5;
                nr = *n;
                arg0 = args[0];
                arg1 = args[1];
                rest = [args[2], args[3], args[4], args[5]];
            }
            EventKind::SysExit { nr: n, ret: r } => {
                present = has::NR | has::RET;
                nr = *n;
                ret = *r;
            }
            EventKind::IrqEntry { irq } | EventKind::IrqExit { irq } => {
                present = has::NR;
                nr = *irq;
            }
            EventKind::SoftirqEntry { vec } | EventKind::SoftirqExit { vec } => {
                present = has::NR;
                nr = *vec as i32;
            }
            EventKind::HrtimerStart {
                timer,
                function,
                expires,
            }
            | EventKind::TimerStart {
                timer,
                function,
                expires,
            } => {
                present = has::ARG0 | has::ARG1 | has::RET;
                arg0 = *timer;
                arg1 = *function;
                ret = *expires as i64;
            }
            EventKind::HrtimerExpire { timer, function }
            | EventKind::TimerExpire { timer, function } => {
                present = has::ARG0 | has::ARG1;
                arg0 = *timer;
                arg1 = *function;
            }
            EventKind::HrtimerExpireExit { timer } | EventKind::TimerExpireExit { timer } => {
                present = has::ARG0;
                arg0 = *timer;
            }
            EventKind::Marker { text: t } => {
                present = has::TEXT;
                text = Some(std::borrow::Cow::Borrowed(t.as_str()));
            }
            EventKind::WorkQueue { work, function } | EventKind::WorkStart { work, function } => {
                present = has::ARG0 | has::ARG1;
                arg0 = *work;
                arg1 = *function;
            }
            EventKind::WorkEnd { work } => {
                present = has::ARG0;
                arg0 = *work;
            }
            EventKind::SignalGenerate { sig, target: t } => {
                present = has::NR | has::TARGET;
                nr = *sig;
                target = t.0;
            }
            EventKind::SignalDeliver { sig } => {
                present = has::NR;
                nr = *sig;
            }
            EventKind::Stack { kernel, ips } => {
                present = has::STATE | has::TEXT;
                state = if *kernel { b'k' } else { b'u' };
                let hex: Vec<String> = ips.iter().map(|ip| format!("{ip:x}")).collect();
                text = Some(std::borrow::Cow::Owned(hex.join(",")));
            }
            EventKind::FlagAccess { addr, write } => {
                present = has::ARG0 | has::STATE;
                arg0 = *addr;
                state = if *write { b'w' } else { b'r' };
            }
            EventKind::FileLock {
                inode,
                dev,
                flock,
                lock_type,
                ret: r,
            } => {
                present = has::ARG0 | has::ARG1 | has::NR | has::RET | has::STATE;
                arg0 = *inode;
                arg1 = u64::from(*dev);
                nr = i32::from(*lock_type);
                ret = i64::from(*r);
                state = if *flock { b'f' } else { b'p' };
            }
            EventKind::SockReady { sk } => {
                present = has::ARG0;
                arg0 = *sk;
            }
            EventKind::SockRecv { sk, ret: r } => {
                present = has::ARG0 | has::RET;
                arg0 = *sk;
                ret = i64::from(*r);
            }
            EventKind::LockOwner { owner, lock } => {
                present = has::ARG0 | has::TARGET;
                arg0 = *lock;
                target = owner.0;
            }
        }
        if let Some(t) = text {
            self.text.extend_from_slice(t.as_bytes());
            // A batch holds far fewer than 4 GiB of text (the writer cuts batches by rows).
            self.text_rows
                .push((self.tags.len() as u32, self.text.len() as u32));
        }
        let kind = self.kind_code(&e.kind);
        self.tags.push(Tag {
            ctx: e.ctx as u8,
            kind,
            state,
            present,
        });
        self.target.push(target);
        self.nr.push(nr);
        self.arg0.push(arg0);
        self.arg1.push(arg1);
        self.arg2.push(rest[0]);
        self.arg3.push(rest[1]);
        self.arg4.push(rest[2]);
        self.arg5.push(rest[3]);
        self.ret.push(ret);
    }

    fn len(&self) -> usize {
        self.tags.len()
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        let cap = self.tags.capacity();
        let tags = std::mem::replace(&mut self.tags, Vec::with_capacity(cap));
        let n = tags.len();
        let [target, nr, arg0, arg1, args2_5, ret, state_valid, text_valid] = validities(&tags);
        let ctx = self.contexts.column(n, tags.iter().map(|t| t.ctx));
        let kind =
            NameTable::new(self.kind_names.iter().copied()).column(n, tags.iter().map(|t| t.kind));
        let state = {
            let mut offsets = Vec::with_capacity(n + 1);
            let mut data = Vec::new();
            offsets.push(0i32);
            for t in &tags {
                if t.present & has::STATE != 0 {
                    data.extend_from_slice(state_letter(t.state, &mut [0; 4]).as_bytes());
                }
                offsets.push(data.len() as i32);
            }
            strings(offsets, data, state_valid)
        };
        let text = {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let mut rows = self.text_rows.drain(..).peekable();
            let mut end = 0u32;
            for i in 0..n as u32 {
                if let Some(&(row, e)) = rows.peek() {
                    if row == i {
                        end = e;
                        rows.next();
                    }
                }
                offsets.push(end as i32);
            }
            drop(rows);
            strings(offsets, std::mem::take(&mut self.text), text_valid)
        };
        vec![
            self.ts.finish(),
            self.seq.finish(),
            self.cpu.finish(),
            self.pid.finish(),
            self.tid.finish(),
            ctx,
            kind,
            self.target.finish_with(target),
            self.nr.finish_with(nr),
            self.arg0.finish_with(arg0),
            self.arg1.finish_with(arg1),
            self.arg2.finish_with(args2_5.clone()),
            self.arg3.finish_with(args2_5.clone()),
            self.arg4.finish_with(args2_5.clone()),
            self.arg5.finish_with(args2_5),
            self.ret.finish_with(ret),
            state,
            text,
        ]
    }
}

/// A string array from its parts (offsets monotonic over whole UTF-8 strings).
fn strings(offsets: Vec<i32>, data: Vec<u8>, nulls: Option<NullBuffer>) -> ArrayRef {
    Arc::new(
        StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(data),
            nulls,
        )
        .expect("invariant: whole UTF-8 strings with monotonic offsets make a valid string array"),
    )
}

pub(crate) struct SegmentEncoder {
    rows: usize,
    id: Plain<UInt64Type>,
    tid: Plain<Int32Type>,
    pid: Plain<Int32Type>,
    kind: Names,
    irq: Column<Int64Type>,
    start_ns: Plain<UInt64Type>,
    end_ns: Plain<UInt64Type>,
    start_cause: Names,
    end_cause: Names,
    wait_start_ns: Column<UInt64Type>,
    wait_state: StringBuilder,
    wait_syscall: Plain<Int32Type>,
    wait_ret: Column<Int64Type>,
    wait_object: Column<UInt64Type>,
    on_cpu_ns: Plain<UInt64Type>,
    preemptions: Plain<UInt32Type>,
    yields: Plain<UInt32Type>,
    syscalls: Plain<UInt32Type>,
    events: Plain<UInt32Type>,
    syscall_seq: ListBuilder<Int32Builder>,
    timer_function: Column<UInt64Type>,
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
            id: Plain::with_capacity(n),
            tid: Plain::with_capacity(n),
            pid: Plain::with_capacity(n),
            kind: Names::with_capacity(n, n * 8),
            irq: Column::with_capacity(n),
            start_ns: Plain::with_capacity(n),
            end_ns: Plain::with_capacity(n),
            start_cause: Names::with_capacity(n, n * 8),
            end_cause: Names::with_capacity(n, n * 8),
            wait_start_ns: Column::with_capacity(n),
            wait_state: StringBuilder::with_capacity(n, n),
            wait_syscall: Plain::with_capacity(n),
            wait_ret: Column::with_capacity(n),
            wait_object: Column::with_capacity(n),
            on_cpu_ns: Plain::with_capacity(n),
            preemptions: Plain::with_capacity(n),
            yields: Plain::with_capacity(n),
            syscalls: Plain::with_capacity(n),
            events: Plain::with_capacity(n),
            syscall_seq: ListBuilder::with_capacity(Int32Builder::with_capacity(n * 4), n)
                .with_field(syscall_seq_item()),
            timer_function: Column::with_capacity(n),
        }
    }

    fn push(&mut self, s: &Segment) {
        self.rows += 1;
        self.id.push(s.id.0);
        self.tid.push(s.tid.0);
        self.pid.push(s.pid.0);
        self.kind.push(s.kind.name());
        let (irq, function) = match s.kind {
            SegmentKind::Task | SegmentKind::Interrupt => (None, None),
            SegmentKind::HardIrq { irq } => (Some(i64::from(irq)), None),
            SegmentKind::SoftIrq { vec } => (Some(i64::from(vec)), None),
            SegmentKind::Timer { timer, function } => (Some(timer as i64), Some(function)),
            SegmentKind::WorkItem { work, function } => (Some(work as i64), Some(function)),
        };
        self.irq.push_option(irq);
        self.start_ns.push(s.start_ns.0);
        self.end_ns.push(s.end_ns.0);
        self.start_cause.push(s.start.name());
        self.end_cause.push(s.end.name());
        self.wait_start_ns.push_option(s.wait_start_ns.map(|n| n.0));
        if s.wait_state == 0 {
            self.wait_state.append_null();
        } else {
            self.wait_state
                .append_value(state_letter(s.wait_state, &mut [0; 4]));
        }
        self.wait_syscall.push(s.wait_syscall);
        self.wait_ret.push_option(s.wait_ret);
        self.wait_object.push_option(s.wait_object);
        self.on_cpu_ns.push(s.on_cpu_ns);
        self.preemptions.push(s.preemptions);
        self.yields.push(s.yields);
        self.syscalls.push(s.syscalls);
        self.events.push(s.events);
        self.syscall_seq.values().append_slice(&s.syscall_seq);
        self.syscall_seq.append(true);
        self.timer_function.push_option(function);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            self.id.finish(),
            self.tid.finish(),
            self.pid.finish(),
            self.kind.finish(),
            self.irq.finish(),
            self.start_ns.finish(),
            self.end_ns.finish(),
            self.start_cause.finish(),
            self.end_cause.finish(),
            self.wait_start_ns.finish(),
            fin(&mut self.wait_state),
            self.wait_syscall.finish(),
            self.wait_ret.finish(),
            self.wait_object.finish(),
            self.on_cpu_ns.finish(),
            self.preemptions.finish(),
            self.yields.finish(),
            self.syscalls.finish(),
            self.events.finish(),
            fin(&mut self.syscall_seq),
            self.timer_function.finish(),
        ]
    }
}

pub(crate) struct EdgeEncoder {
    rows: usize,
    src: Plain<UInt64Type>,
    dst: Plain<UInt64Type>,
    kind: Names,
    strength: Names,
    ts: Plain<UInt64Type>,
    src_syscall: Plain<Int32Type>,
}

impl Encoder for EdgeEncoder {
    type Row = CausalEdge;
    const TABLE: Table = Table::Edges;

    fn with_capacity(n: usize) -> Self {
        EdgeEncoder {
            rows: 0,
            src: Plain::with_capacity(n),
            dst: Plain::with_capacity(n),
            kind: Names::with_capacity(n, n * 8),
            strength: Names::with_capacity(n, n * 6),
            ts: Plain::with_capacity(n),
            src_syscall: Plain::with_capacity(n),
        }
    }

    fn push(&mut self, e: &CausalEdge) {
        self.rows += 1;
        self.src.push(e.src.0);
        self.dst.push(e.dst.0);
        self.kind.push(e.kind.name());
        self.strength.push(e.strength.name());
        self.ts.push(e.ts.0);
        self.src_syscall.push(e.src_syscall);
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        self.rows = 0;
        vec![
            self.src.finish(),
            self.dst.finish(),
            self.kind.finish(),
            self.strength.finish(),
            self.ts.finish(),
            self.src_syscall.finish(),
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
    timeouts: UInt32Builder,
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
            timeouts: UInt32Builder::with_capacity(n),
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
        self.timeouts.append_value(s.timeouts);
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
            fin(&mut self.timeouts),
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    /// The one-pass bitmaps equal arrow's, bit by bit, at lengths around word boundaries.
    #[test]
    fn validities_equal_one_bitmap_per_column() {
        for n in [0usize, 1, 63, 64, 65, 130, 1000] {
            let tags: Vec<Tag> = (0..n)
                .map(|i| Tag {
                    present: ((i * 2_654_435_761) >> 7) as u8,
                    ..Tag::default()
                })
                .collect();
            let ours = validities(&tags);
            for (b, got) in ours.iter().enumerate() {
                let want = NullBuffer::new(BooleanBuffer::collect_bool(n, |i| {
                    tags[i].present & (1 << b) != 0
                }));
                let want = (want.null_count() > 0).then_some(want);
                assert_eq!(got.as_ref(), want.as_ref(), "n={n} bit {b}");
            }
        }
        let all = vec![
            Tag {
                present: 0xff,
                ..Tag::default()
            };
            70
        ];
        assert!(validities(&all).iter().all(Option::is_none));
    }

    #[test]
    fn name_tables_copy_whole_names() {
        // Every kind's name, as the encoder learns them (empty for a code not seen).
        let names: Vec<&str> = vec![
            "switch",
            "",
            "hrtimer_expire_exit",
            "x",
            "thirty_two_bytes_of_kind_name_ab",
        ];
        let t = NameTable::new(names.iter().copied());
        let codes = [0u8, 2, 4, 3, 2, 1, 0];
        let col = t.column(codes.len(), codes.iter().copied());
        let want: ArrayRef = Arc::new(StringArray::from(
            codes
                .iter()
                .map(|&c| names[usize::from(c)])
                .collect::<Vec<_>>(),
        ));
        assert_eq!(&col, &want);
    }

    #[test]
    fn context_codes_are_declaration_order() {
        for (i, c) in CONTEXTS.iter().enumerate() {
            assert_eq!(*c as usize, i, "{c:?}");
        }
    }

    /// The hand-made columns equal arrow's builders for every pattern of nulls: none, the
    /// first null late and off a byte boundary, runs across bytes, and reuse after finish.
    #[test]
    fn columns_match_arrows_builders() {
        let patterns: Vec<Vec<Option<u64>>> = vec![
            (0..20).map(Some).collect(),
            (0..21).map(|i| (i != 13).then_some(i)).collect(),
            (0..40).map(|i| (i % 3 == 0).then_some(i)).collect(),
            vec![None; 9],
            Vec::new(),
        ];
        let mut col = Column::<UInt64Type>::with_capacity(4);
        for p in &patterns {
            let mut b = UInt64Builder::new();
            for v in p {
                col.push_option(*v);
                b.append_option(*v);
            }
            let ours = col.finish();
            let theirs: ArrayRef = Arc::new(b.finish());
            assert_eq!(ours.len(), p.len());
            assert_eq!(ours.null_count(), p.iter().filter(|v| v.is_none()).count());
            assert_eq!(&ours, &theirs, "pattern {p:?}");
        }
        let mut names = Names::with_capacity(2, 4);
        for n in ["switch", "", "sys_enter", "x"] {
            names.push(n);
        }
        let a = names.finish();
        let b: ArrayRef = Arc::new(StringArray::from(vec!["switch", "", "sys_enter", "x"]));
        assert_eq!(&a, &b);
        assert_eq!(names.finish().len(), 0);
    }
}
