//! Live tests of `argus record --stacks` and `--watch`: call stacks symbolized into
//! `stacks.parquet`, watchpoint hits merged into the events as `flag_access`.

use crate::common::{live_or_skip, record_with, Recorded};
use argus_schema::{EventKind, Tid};
use std::path::Path;

/// Records `argus workload NAME --secs 1` with `extra` record flags, builds it, and returns
/// the recording (trace, snapshot, the workload's JSON line).
fn record_and_build(extra: &[&str], workload: &str) -> Recorded {
    let exe = env!("CARGO_BIN_EXE_argus");
    let rec = record_with(extra, &[exe, "workload", workload, "--secs", "1"], &[]);
    assert!(
        rec.trace.join("perf/streams.json").is_file(),
        "perf/ written"
    );
    rec
}

fn events(snap: &Path) -> Vec<argus_schema::Event> {
    argus_sinks::read_events(snap)
        .expect("events")
        .collect::<Result<Vec<_>, _>>()
        .expect("events decode")
}

#[test]
fn stacks_name_the_function_that_blocks_in_read() {
    if !live_or_skip("stacks_name_the_function_that_blocks_in_read") {
        return;
    }
    let Recorded {
        _dir,
        snapshot: snap,
        truth,
        ..
    } = record_and_build(&["--stacks", "read"], "stacks");
    let reader = truth["reader_tid"].as_i64().expect("reader_tid") as i32;
    // The events: the reader's read() sys_enter is followed by its stack events.
    let evs = events(&snap);
    let enter = evs
        .iter()
        .position(|e| e.tid == Tid(reader) && matches!(e.kind, EventKind::SysEnter { nr: 0, .. }))
        .expect("the reader's read() was recorded");
    assert!(
        matches!(evs[enter + 1].kind, EventKind::Stack { .. })
            && evs[enter + 1].tid == Tid(reader)
            && evs[enter + 1].ts == evs[enter].ts,
        "a stack event follows the sys_enter: {:?}",
        &evs[enter..enter + 2]
    );
    let stacks = argus_sinks::read_stacks(&snap).expect("stacks.parquet");
    let st = stacks
        .iter()
        .find(|s| s.event_seq == evs[enter].seq)
        .unwrap_or_else(|| panic!("no stack row for seq {}", evs[enter].seq));
    assert_eq!(st.tid, reader);
    assert_eq!(st.ts, evs[enter].ts.0);
    let show = |kernel: bool| -> Vec<String> {
        st.frames
            .iter()
            .filter(|f| f.kernel == kernel)
            .map(|f| f.symbol.clone().unwrap_or_else(|| format!("{:#x}", f.ip)))
            .collect()
    };
    let user = show(false);
    assert!(
        user.iter().any(|s| s == "argus_stack_blocking_read"),
        "the blocking function is a user frame: {user:?}"
    );
    // At syscall entry the kernel frames would only be the entry path: the per-syscall
    // mode records user frames only.
    assert!(show(true).is_empty(), "no kernel frames: {:?}", show(true));
    // Depths count from 0 separately for kernel and user frames.
    let user_depths: Vec<u16> = st
        .frames
        .iter()
        .filter(|f| !f.kernel)
        .map(|f| f.depth)
        .collect();
    assert_eq!(
        user_depths,
        (0..user_depths.len() as u16).collect::<Vec<_>>()
    );
}

/// The stack attached to event `i` of `evs` (which must be followed by a `stack` event of
/// the same thread and time): (user symbols, kernel symbols).
fn stack_at(
    evs: &[argus_schema::Event],
    stacks: &[argus_sinks::EventStack],
    i: usize,
) -> (Vec<String>, Vec<String>) {
    assert!(
        matches!(evs[i + 1].kind, EventKind::Stack { .. })
            && evs[i + 1].tid == evs[i].tid
            && evs[i + 1].ts == evs[i].ts,
        "a stack event follows: {:?}",
        &evs[i..i + 2]
    );
    let st = stacks
        .iter()
        .find(|s| s.event_seq == evs[i].seq)
        .unwrap_or_else(|| panic!("no stack row for seq {}", evs[i].seq));
    assert_eq!((st.tid, st.ts), (evs[i].tid.0, evs[i].ts.0));
    let show = |kernel: bool| -> Vec<String> {
        st.frames
            .iter()
            .filter(|f| f.kernel == kernel)
            .map(|f| f.symbol.clone().unwrap_or_else(|| format!("{:#x}", f.ip)))
            .collect()
    };
    (show(false), show(true))
}

#[test]
fn default_stacks_are_the_blocking_and_the_waking_stack() {
    if !live_or_skip("default_stacks_are_the_blocking_and_the_waking_stack") {
        return;
    }
    let Recorded {
        _dir,
        snapshot: snap,
        truth,
        ..
    } = record_and_build(&["--stacks"], "stacks");
    let reader = truth["reader_tid"].as_i64().expect("reader_tid") as i32;
    let writer = truth["writer_tid"].as_i64().expect("writer_tid") as i32;
    let evs = events(&snap);
    let stacks = argus_sinks::read_stacks(&snap).expect("stacks.parquet");
    // No sys_enter has a stack in this mode.
    assert!(evs
        .windows(2)
        .all(|w| !(matches!(w[0].kind, EventKind::SysEnter { .. })
            && matches!(w[1].kind, EventKind::Stack { .. }))));
    // The reader blocks in read(): its switch-out (prev = reader, state S) carries the
    // blocking stack, user frames at the read() call, kernel frames in the pipe read.
    let block = (0..evs.len().saturating_sub(1))
        .find(|&i| {
            evs[i].tid == Tid(reader)
                && matches!(evs[i].kind, EventKind::Switch { prev, prev_state, .. }
                    if prev == Tid(reader) && prev_state.letter() == 'S')
                && matches!(evs[i + 1].kind, EventKind::Stack { .. })
                && stack_at(&evs, &stacks, i)
                    .0
                    .iter()
                    .any(|s| s == "argus_stack_blocking_read")
        })
        .expect("the reader's blocking switch has a stack naming argus_stack_blocking_read");
    let (_, kernel) = stack_at(&evs, &stacks, block);
    assert!(
        kernel.iter().any(|s| s.contains("pipe_read"))
            && kernel.iter().any(|s| s.contains("schedule")),
        "kernel frames show where it blocked: {kernel:?}"
    );
    // The main thread's write wakes it: the waking (tid = writer, target = reader) carries
    // the waker's stack.
    let wake = evs
        .iter()
        .position(|e| {
            e.tid == Tid(writer)
                && matches!(e.kind, EventKind::Waking { target } if target == Tid(reader))
        })
        .expect("the writer wakes the reader");
    let (user, kernel) = stack_at(&evs, &stacks, wake);
    assert!(
        user.iter().any(|s| s == "argus_stack_waking_write"),
        "the waker's user frames: {user:?}"
    );
    assert!(
        kernel.iter().any(|s| s.contains("pipe_write")),
        "the waker's kernel frames: {kernel:?}"
    );
}

#[test]
fn watchpoint_reports_the_setters_write_and_the_pollers_reads() {
    if !live_or_skip("watchpoint_reports_the_setters_write_and_the_pollers_reads") {
        return;
    }
    let Recorded {
        _dir,
        snapshot: snap,
        truth,
        ..
    } = record_and_build(&["--watch", "ARGUS_WATCH_FLAG@cmd"], "flag");
    let setter = truth["setter_tid"].as_i64().expect("setter_tid") as i32;
    let poller = truth["poller_tid"].as_i64().expect("poller_tid") as i32;
    let polls = truth["polls"].as_u64().expect("polls");
    let hits: Vec<(i32, bool)> = events(&snap)
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::FlagAccess { write, .. } => Some((e.tid.0, write)),
            _ => None,
        })
        .collect();
    let writes: Vec<i32> = hits.iter().filter(|h| h.1).map(|h| h.0).collect();
    assert_eq!(writes, vec![setter], "one write, by the setter: {hits:?}");
    let reads = hits.iter().filter(|h| !h.1 && h.0 == poller).count() as u64;
    assert!(
        reads >= polls / 2 && reads > 0,
        "the poller's reads ({reads} of {polls} polls) are hits"
    );
    assert!(
        hits.iter().all(|h| h.0 == setter || h.0 == poller),
        "no other thread touches the flag: {hits:?}"
    );
}
