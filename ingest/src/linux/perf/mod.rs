//! Call stacks and hardware watchpoints with `perf_event_open`, recorded next to the tracefs
//! chunks in `TRACE_DIR/perf/` (layout: [`crate::perffile`], `docs/trace-dir.md`).
//!
//! ```text
//!  --stacks   one event per CPU: tracepoint raw_syscalls:sys_enter, filter "id == 0 || ...",
//!             sample TID|TIME|CPU|CALLCHAIN|RAW|REGS_USER(bp,sp,ip)|STACK_USER(1 KiB),
//!             use_clockid = CLOCK_MONOTONIC (the tracefs `mono` clock)
//!  --watch    per (thread, CPU): two breakpoints on the address, W and RW, inherited by
//!             threads created later (inherit + inherit_thread), sample IP|TID|TIME|ADDR|CPU
//!  every event ─► its mmap ring (1 + 2^n pages) ─► collector thread (poll, 20 ms at most)
//!      ─► records prefixed with their stream id ─► zstd frame appended to perf/NNNNNN.perf.zst
//!         every flush interval (fdatasync), chunks of at most 1/8 of the perf budget
//!  maps   /proc/PID/maps of every process at start, of every new pid or exec (/proc scanned
//!         every flush interval: new pid, or its executable or code start changed: exec), and whenever a sample's
//!         user ip is outside its process's last copy (dlopen) ─► perf/maps/PID-TS.maps
//! ```
//!
//! **Why perf and not tracefs `stacktrace`.** A tracefs `stacktrace` trigger gives kernel
//! stacks only, and `options/userstacktrace` applies to every event of the instance (every
//! `sched_switch` would pay a user stack walk). A perf tracepoint event with a filter on the
//! syscall `id` costs only on the chosen syscalls and gives kernel and user frames plus the
//! registers and stack bytes `argus build` needs to unwind frameless functions
//! ([`crate::symbolize`]).
//!
//! **Budget.** With a ring cap the perf directory may use [`PERF_SHARE_DIVISOR`]⁻¹ of it
//! (the tracefs ring's budget shrinks by as much); past that its oldest completed chunks are
//! deleted (maps copies are kept). The recorder's own samples are dropped.
//!
//! **Watchpoints and `@cmd`.** `--watch SPEC@cmd` spawns the command with `PTRACE_TRACEME`:
//! it stops at its `execve`, before its first instruction; the symbol is resolved in the new
//! image, the breakpoints are opened on its only thread, and it is detached. No access is
//! missed (window: none), but a symbol of a library loaded later by `dlopen` cannot be
//! resolved at that point. `--watch SPEC@PID` attaches to every thread listed in
//! `/proc/PID/task` (re-listed until no new thread appears); threads created later inherit
//! the events. x86 has 4 debug registers per CPU: each watch takes two, so at most two
//! watches are possible. x86 data breakpoints cannot watch reads alone: the W event fires on
//! writes, the RW event on both; replay reports an RW hit as a write when a W hit of the same
//! thread and instruction comes within [`crate::replay`]'s pairing window, else as a read.
//!
//! ```text
//!  options.rs    PerfConfig, StackSet, WatchSpec, PerfSummary: what to record and what was
//!                recorded (no system calls)
//!  syscalls.rs   perf_event_attr, perf_event_open, ioctls, filters, the mmap Ring
//!  recorder.rs   PerfRecorder: opens the events, starts the collector, spawns the command
//!  collector.rs  the collector thread (rings → frames) and its writer thread (perf chunks)
//!  live.rs       the tap: each drain's samples to a live consumer (`argus start`)
//!  maps.rs       the maps thread (perf/maps/PID-TS.maps)
//! ```

mod collector;
mod live;
mod maps;
mod options;
mod recorder;
mod syscalls;

pub use live::{perf_tap, PerfTap, PerfTapEnds};
pub use options::{
    default_stack_syscalls, parse_stacks, PerfConfig, PerfSummary, StackSet, WatchProcess,
    WatchSpec, WatchTarget, DEFAULT_STACK_BYTES, PERF_SHARE_DIVISOR, PROFILE_STACK_BYTES,
};
pub(crate) use recorder::{start_if_enabled, PerfRecorder};
