//! Call stacks (from `argus record --stacks`) of the syscalls that blocked or sent, shown in
//! questions and on every step of a report.
//!
//! The snapshot's `stacks.parquet` holds one stack per stacked event (the `sys_enter` of the
//! syscalls that block or send). For a segment the walk shows:
//! - the **blocking** stack: the last stack of the thread between the segment's start and the
//!   moment it blocked (`wait_start_ns`) — the syscall it blocked in. A segment that entered
//!   no syscall of its own (a wait re-blocked without returning) takes the thread's last
//!   earlier stack;
//! - the **sending** stack of a cause: the last stack of the source thread between its
//!   segment's start and the edge's time — the syscall that woke, wrote or signalled.
//!
//! Only a few frames are shown ([`shown`]): up to [`USER_FRAMES`] innermost user frames
//! (functions inlined into them come with them and are not counted), as `symbol (object)`, and the innermost kernel frame that is not tracing or syscall-entry
//! plumbing ([`is_plumbing`]: a stack taken at `sys_enter` has only those, so it shows no
//! kernel frame; one taken deeper shows the function that blocked, e.g. `futex_wait`).

use argus_schema::{Nanos, Segment, Tid};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Most user frames shown per stack.
pub const USER_FRAMES: usize = 4;

/// One frame of a call stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// A kernel frame (else a user frame).
    pub kernel: bool,
    /// Return address.
    pub ip: u64,
    /// Function name (demangled), when known.
    pub symbol: Option<String>,
    /// `ip` minus the function's start, when known.
    pub offset: Option<u64>,
    /// ELF file (user frames), `[kernel]` or a module name.
    pub object: Option<String>,
}

impl Frame {
    /// Whether this is a function the compiler inlined at `ip` (named from the file's DWARF,
    /// no offset of its own): the frame after it, at the same `ip`, is the function holding
    /// it. It has no entry a probe could trap.
    pub fn inlined(&self) -> bool {
        !self.kernel && self.symbol.is_some() && self.offset.is_none()
    }

    /// `symbol (object)` with the object's file name only; the address when the symbol is
    /// unknown.
    pub fn label(&self) -> String {
        let sym = match &self.symbol {
            Some(s) => s.clone(),
            None => format!("{:#x}", self.ip),
        };
        match self.object.as_deref() {
            Some(o) if !o.is_empty() => {
                let short = o.rsplit('/').next().unwrap_or(o);
                format!("{sym} ({short})")
            }
            _ => sym,
        }
    }
}

/// The stack recorded at one event of a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallStack {
    /// `seq` of the event (the `sys_enter`) it was taken at.
    pub event_seq: u64,
    /// Thread.
    pub tid: Tid,
    /// When.
    pub ts: Nanos,
    /// Kernel frames, then user frames, each innermost first.
    pub frames: Vec<Frame>,
}

/// The frames shown for a stack: up to [`USER_FRAMES`] innermost user frames, each with the
/// functions inlined into it (which come before it and are not counted: a release build's
/// stack would show only what one function inlined), then the innermost kernel frame that
/// is not plumbing.
pub fn shown(stack: &CallStack) -> Vec<Frame> {
    let mut out: Vec<Frame> = Vec::new();
    let mut calls = 0;
    for f in stack.frames.iter().filter(|f| !f.kernel) {
        if calls == USER_FRAMES {
            break;
        }
        out.push(f.clone());
        calls += usize::from(!f.inlined());
    }
    if let Some(k) = stack.frames.iter().find(|f| f.kernel && !is_plumbing(f)) {
        out.push(k.clone());
    }
    out
}

/// A kernel frame of the tracing machinery or of the syscall entry path (`__traceiter_*`,
/// `trace_*`, `perf_*`, `syscall_trace_enter`, `do_syscall_64`, `entry_SYSCALL_64*`,
/// `x64_sys_call`): it says nothing about what the thread was doing.
pub fn is_plumbing(f: &Frame) -> bool {
    let Some(sym) = f.symbol.as_deref() else {
        return false;
    };
    const PREFIXES: [&str; 10] = [
        "__traceiter_",
        "trace_",
        "__trace_",
        "perf_",
        "__perf_",
        "syscall_trace_enter",
        "do_syscall_",
        "entry_SYSCALL",
        "x64_sys_call",
        "__bpf_trace_",
    ];
    PREFIXES.iter().any(|p| sym.starts_with(p))
}

/// One line for a terminal: `read (libc.so.6) ← wait_input (app) · kernel: ksys_read`.
pub fn stack_line(frames: &[Frame]) -> String {
    let user: Vec<String> = frames
        .iter()
        .filter(|f| !f.kernel)
        .map(Frame::label)
        .collect();
    let kernel = frames.iter().find(|f| f.kernel).map(|f| match &f.symbol {
        Some(s) => s.clone(),
        None => format!("{:#x}", f.ip),
    });
    match (user.is_empty(), kernel) {
        (false, Some(k)) => format!("{} · kernel: {k}", user.join(" ← ")),
        (false, None) => user.join(" ← "),
        (true, Some(k)) => format!("kernel: {k}"),
        (true, None) => String::new(),
    }
}

/// Stacks by thread, in time order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stacks {
    by_tid: HashMap<Tid, Vec<CallStack>>,
    count: usize,
}

impl Stacks {
    pub(crate) fn new(stacks: Vec<CallStack>) -> Stacks {
        let count = stacks.len();
        let mut by_tid: HashMap<Tid, Vec<CallStack>> = HashMap::new();
        for s in stacks {
            by_tid.entry(s.tid).or_default().push(s);
        }
        for v in by_tid.values_mut() {
            v.sort_by_key(|s| (s.ts, s.event_seq));
        }
        Stacks { by_tid, count }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The last stack of `tid` taken in `[from, to]`.
    pub(crate) fn latest(&self, tid: Tid, from: Nanos, to: Nanos) -> Option<&CallStack> {
        let v = self.by_tid.get(&tid)?;
        let i = v.partition_point(|s| s.ts <= to);
        let s = v.get(i.checked_sub(1)?)?;
        (s.ts >= from).then_some(s)
    }

    /// The stack of the syscall `s` blocked in (see the module docs).
    pub(crate) fn blocking(&self, s: &Segment) -> Option<&CallStack> {
        let at = s.wait_start_ns?;
        self.latest(s.tid, s.start_ns, at).or_else(|| {
            if s.syscalls == 0 {
                self.latest(s.tid, Nanos(0), at)
            } else {
                None
            }
        })
    }

    /// The stack of the syscall `s` acted through at `ts` (a wake-up, write, signal).
    pub(crate) fn sending(&self, s: &Segment, ts: Nanos) -> Option<&CallStack> {
        self.latest(s.tid, s.start_ns, ts)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{EndCause, Pid, SegmentId, SegmentKind, StartCause};

    fn frame(kernel: bool, sym: &str, object: Option<&str>) -> Frame {
        Frame {
            kernel,
            ip: 0x1000,
            symbol: Some(sym.into()),
            offset: Some(1),
            object: object.map(str::to_string),
        }
    }

    fn at(ts: u64, user: &str) -> CallStack {
        CallStack {
            event_seq: ts,
            tid: Tid(7),
            ts: Nanos(ts),
            frames: vec![
                frame(true, "__traceiter_sys_enter", Some("[kernel]")),
                frame(true, "ksys_read", Some("[kernel]")),
                frame(true, "do_syscall_64", Some("[kernel]")),
                frame(false, "read", Some("/lib/libc.so.6")),
                frame(false, user, Some("/usr/bin/app")),
                frame(false, "b", None),
                frame(false, "c", None),
                frame(false, "main", None),
            ],
        }
    }

    fn seg(start: u64, wait: u64, syscalls: u32) -> Segment {
        Segment {
            id: SegmentId::new(Tid(7), 1),
            tid: Tid(7),
            pid: Pid(7),
            kind: SegmentKind::Task,
            start_ns: Nanos(start),
            end_ns: Nanos(wait + 100),
            start: StartCause::Woken,
            end: EndCause::Woken,
            wait_start_ns: Some(Nanos(wait)),
            wait_state: b'S',
            wait_syscall: 0,
            wait_ret: Some(0),
            wait_object: None,
            on_cpu_ns: 1,
            preemptions: 0,
            yields: 0,
            syscalls,
            events: 2,
            syscall_seq: vec![0],
        }
    }

    #[test]
    fn the_blocking_stack_is_the_last_one_before_the_wait_within_the_segment() {
        let st = Stacks::new(vec![at(50, "early"), at(120, "inside"), at(300, "later")]);
        let s = seg(100, 200, 1);
        let shown_frames = shown(st.blocking(&s).unwrap());
        assert_eq!(
            stack_line(&shown_frames),
            "read (libc.so.6) ← inside (app) ← b ← c · kernel: ksys_read"
        );
        // Nothing inside a segment that entered a syscall: no stack rather than a stale one.
        assert!(st.blocking(&seg(130, 200, 1)).is_none());
        // A segment that entered no syscall re-blocked in an earlier one.
        assert_eq!(st.blocking(&seg(130, 200, 0)).unwrap().ts, Nanos(120));
        assert_eq!(st.sending(&s, Nanos(110)), None);
        assert_eq!(st.sending(&s, Nanos(150)).unwrap().ts, Nanos(120));
        assert_eq!(st.len(), 3);
        assert!(Stacks::default()
            .latest(Tid(7), Nanos(0), Nanos(999))
            .is_none());
    }

    #[test]
    fn a_stack_of_only_entry_plumbing_shows_no_kernel_frame() {
        let st = CallStack {
            event_seq: 1,
            tid: Tid(7),
            ts: Nanos(1),
            frames: vec![
                frame(true, "__traceiter_sys_enter", Some("[kernel]")),
                frame(true, "syscall_trace_enter", Some("[kernel]")),
                frame(true, "do_syscall_64", Some("[kernel]")),
                frame(true, "entry_SYSCALL_64_after_hwframe", Some("[kernel]")),
                frame(false, "read", Some("/lib/libc.so.6")),
            ],
        };
        assert_eq!(stack_line(&shown(&st)), "read (libc.so.6)");
    }

    /// Inlined functions are shown with the function holding them, not counted among the
    /// user frames shown.
    #[test]
    fn inlined_frames_come_with_their_function_and_are_not_counted() {
        let inlined = |sym: &str| Frame {
            offset: None,
            ..frame(false, sym, Some("/usr/bin/app"))
        };
        let mut st = at(1, "a");
        // Two functions inlined into `a`, one into `c`.
        st.frames.insert(4, inlined("a_inner"));
        st.frames.insert(4, inlined("a_innermost"));
        st.frames.insert(8, inlined("c_inner"));
        let names: Vec<String> = shown(&st).iter().filter_map(|f| f.symbol.clone()).collect();
        assert_eq!(
            names,
            [
                "read",
                "a_innermost",
                "a_inner",
                "a",
                "b",
                "c_inner",
                "c",
                "ksys_read"
            ]
        );
    }

    #[test]
    fn a_frame_without_a_symbol_shows_its_address() {
        let f = Frame {
            kernel: false,
            ip: 0x7f00,
            symbol: None,
            offset: None,
            object: Some("/x/libfoo.so".into()),
        };
        assert_eq!(f.label(), "0x7f00 (libfoo.so)");
        assert_eq!(stack_line(std::slice::from_ref(&f)), "0x7f00 (libfoo.so)");
        assert_eq!(stack_line(&[]), "");
    }
}
