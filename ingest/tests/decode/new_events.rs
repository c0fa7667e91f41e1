//! The schema-v2 event families (work items, wheel timers, signals, stacks, renames) decoded
//! from records built on this machine's own format files: offsets come from the files, the
//! test writes the values at those offsets and checks what comes out.

use argus_ingest::convert::{Converter, Decoded};
use argus_ingest::format::{EventFormat, FormatSet};
use argus_ingest::page::RawRecord;
use argus_schema::{Context, Cpu, EventKind, Tid};
use std::path::Path;

fn tracefs_formats() -> Option<FormatSet> {
    let tracefs = Path::new("/sys/kernel/tracing");
    if !tracefs
        .join("events/workqueue/workqueue_queue_work/format")
        .exists()
    {
        println!("SKIP: no tracefs at /sys/kernel/tracing; new event families not checked on this kernel");
        return None;
    }
    Some(FormatSet::load_tracefs(tracefs).expect("this machine's formats parse"))
}

/// A record of `ev` with `values` written at their fields' offsets (little-endian, the
/// field's size), `common_type` and `common_pid` filled, `len` bytes long.
fn record(ev: &EventFormat, len: usize, pid: i32, flags: u8, values: &[(&str, u64)]) -> Vec<u8> {
    let mut p = vec![0u8; len];
    let mut put = |name: &str, v: u64| {
        let f = ev
            .field(name)
            .unwrap_or_else(|| panic!("{} has {name}", ev.name));
        let (o, n) = (f.offset as usize, f.size as usize);
        p[o..o + n.min(8)].copy_from_slice(&v.to_le_bytes()[..n.min(8)]);
    };
    put("common_type", ev.id as u64);
    put("common_flags", flags as u64);
    put("common_pid", pid as u32 as u64);
    for &(name, v) in values {
        put(name, v);
    }
    p
}

fn full_len(ev: &EventFormat) -> usize {
    ev.fields
        .iter()
        .map(|f| (f.offset + f.size) as usize)
        .max()
        .unwrap_or(8)
}

fn convert(set: &FormatSet, payload: &[u8]) -> Decoded {
    let mut conv = Converter::new(set).expect("converter");
    let rec = RawRecord {
        ts: 1000,
        offset: 16,
        payload,
    };
    conv.convert(Cpu(1), &rec)
        .expect("record converts")
        .expect("record maps")
}

fn kind(set: &FormatSet, sys: &str, name: &str, pid: i32, values: &[(&str, u64)]) -> EventKind {
    let ev = set.by_name(sys, name).expect("event exists");
    let p = record(ev, full_len(ev), pid, 0, values);
    let d = convert(set, &p);
    let ev = d.event.expect("an event");
    assert_eq!((ev.tid, ev.cpu, ev.ts.0), (Tid(pid), Cpu(1), 1000));
    ev.kind
}

#[test]
fn work_items_timers_and_signals() {
    let Some(set) = tracefs_formats() else { return };
    let (work, func) = (0xffff_8880_1234_5600u64, 0xffff_ffff_8110_2030u64);
    assert_eq!(
        kind(
            &set,
            "workqueue",
            "workqueue_queue_work",
            7,
            &[("work", work), ("function", func)]
        ),
        EventKind::WorkQueue {
            work,
            function: func
        }
    );
    assert_eq!(
        kind(
            &set,
            "workqueue",
            "workqueue_execute_start",
            8,
            &[("work", work), ("function", func)]
        ),
        EventKind::WorkStart {
            work,
            function: func
        }
    );
    assert_eq!(
        kind(
            &set,
            "workqueue",
            "workqueue_execute_end",
            8,
            &[("work", work)]
        ),
        EventKind::WorkEnd { work }
    );
    let timer = 0xffff_c900_0001_0008u64;
    assert_eq!(
        kind(
            &set,
            "timer",
            "timer_start",
            9,
            &[
                ("timer", timer),
                ("function", func),
                ("expires", 4_295_000_123)
            ]
        ),
        EventKind::TimerStart {
            timer,
            function: func,
            expires: 4_295_000_123
        }
    );
    assert_eq!(
        kind(
            &set,
            "timer",
            "timer_expire_entry",
            0,
            &[("timer", timer), ("function", func)]
        ),
        EventKind::TimerExpire {
            timer,
            function: func
        }
    );
    assert_eq!(
        kind(&set, "timer", "timer_expire_exit", 0, &[("timer", timer)]),
        EventKind::TimerExpireExit { timer }
    );
    assert_eq!(
        kind(
            &set,
            "signal",
            "signal_generate",
            100,
            &[("sig", 10), ("pid", 4242)]
        ),
        EventKind::SignalGenerate {
            sig: 10,
            target: Tid(4242)
        }
    );
    assert_eq!(
        kind(&set, "signal", "signal_deliver", 4242, &[("sig", 10)]),
        EventKind::SignalDeliver { sig: 10 }
    );
    // Interrupt context from common_flags (softirq for a timer expiry).
    let ev = set.by_name("timer", "timer_expire_entry").expect("exists");
    let p = record(
        ev,
        full_len(ev),
        0,
        0x10,
        &[("timer", timer), ("function", func)],
    );
    assert_eq!(
        convert(&set, &p).event.expect("event").ctx,
        Context::SoftIrq
    );
}

#[test]
fn stacks_and_renames() {
    let Some(set) = tracefs_formats() else { return };
    // kernel_stack: `size` entries, the record only as long as they are (flexible tail).
    let ks = set
        .by_name("ftrace", "kernel_stack")
        .expect("kernel_stack format");
    let caller = ks.field("caller").expect("caller").offset as usize;
    let mut p = record(ks, caller + 3 * 8, 5, 0, &[("size", 3)]);
    for (i, ip) in [
        0xffff_ffff_8100_0010u64,
        0xffff_ffff_8100_0020,
        0xffff_ffff_8100_0030,
    ]
    .iter()
    .enumerate()
    {
        p[caller + 8 * i..caller + 8 * i + 8].copy_from_slice(&ip.to_le_bytes());
    }
    assert_eq!(
        convert(&set, &p).event.expect("event").kind,
        EventKind::Stack {
            kernel: true,
            ips: vec![
                0xffff_ffff_8100_0010,
                0xffff_ffff_8100_0020,
                0xffff_ffff_8100_0030
            ]
        }
    );
    // A `size` larger than the record is clamped to what is there.
    let mut q = p.clone();
    let size_at = ks.field("size").expect("size").offset as usize;
    q[size_at..size_at + 4].copy_from_slice(&50u32.to_le_bytes());
    let EventKind::Stack { ips, .. } = convert(&set, &q).event.expect("event").kind else {
        panic!("not a stack")
    };
    assert_eq!(ips.len(), 3);
    // user_stack: caller[8], unused entries zero.
    let us = set
        .by_name("ftrace", "user_stack")
        .expect("user_stack format");
    let caller = us.field("caller").expect("caller").offset as usize;
    let mut p = record(us, full_len(us), 5, 0, &[]);
    p[caller..caller + 8].copy_from_slice(&0x55d0_0000_1234u64.to_le_bytes());
    p[caller + 8..caller + 16].copy_from_slice(&0x7f00_0000_5678u64.to_le_bytes());
    assert_eq!(
        convert(&set, &p).event.expect("event").kind,
        EventKind::Stack {
            kernel: false,
            ips: vec![0x55d0_0000_1234, 0x7f00_0000_5678]
        }
    );
    // task_rename: no event, a comm observation for the renamed task.
    let tr = set.by_name("task", "task_rename").expect("task_rename");
    let mut p = record(tr, full_len(tr), 77, 0, &[("pid", 77)]);
    let nc = tr.field("newcomm").expect("newcomm").offset as usize;
    p[nc..nc + 6].copy_from_slice(b"worker");
    let d = convert(&set, &p);
    assert!(d.event.is_none());
    let (tid, comm) = d.comms[0].expect("a comm");
    assert_eq!((tid, comm.as_bytes()), (Tid(77), &b"worker"[..]));
}

#[test]
fn short_records_are_errors_not_panics() {
    let Some(set) = tracefs_formats() else { return };
    let ev = set.by_name("signal", "signal_generate").expect("exists");
    let p = record(ev, full_len(ev), 1, 0, &[("sig", 9)]);
    let mut conv = Converter::new(&set).expect("converter");
    let pid = ev.field("pid").expect("pid");
    let need = (pid.offset + pid.size) as usize;
    for len in 2..need {
        let rec = RawRecord {
            ts: 0,
            offset: 0,
            payload: &p[..len],
        };
        let r = conv.convert(Cpu(0), &rec);
        assert!(r.is_err(), "a {len}-byte signal_generate is too short");
    }
    assert!(conv
        .convert(
            Cpu(0),
            &RawRecord {
                ts: 0,
                offset: 0,
                payload: &p[..need]
            }
        )
        .expect("long enough")
        .is_some());
}

#[test]
fn file_locks_granted_refused_and_released() {
    let Some(set) = tracefs_formats() else { return };
    let dev = (8u64 << 20) | 3;
    assert_eq!(
        kind(
            &set,
            "filelock",
            "posix_lock_inode",
            21,
            &[
                ("i_ino", 4242),
                ("s_dev", dev),
                ("type", 1),
                ("ret", (-11i32) as u32 as u64)
            ]
        ),
        EventKind::FileLock {
            inode: 4242,
            dev: dev as u32,
            flock: false,
            lock_type: 1,
            ret: -11
        }
    );
    assert_eq!(
        kind(
            &set,
            "filelock",
            "flock_lock_inode",
            22,
            &[("i_ino", 7), ("s_dev", dev), ("type", 2), ("ret", 0)]
        ),
        EventKind::FileLock {
            inode: 7,
            dev: dev as u32,
            flock: true,
            lock_type: 2,
            ret: 0
        }
    );
    assert_eq!(
        kind(
            &set,
            "filelock",
            "locks_remove_posix",
            23,
            &[("i_ino", 4242), ("s_dev", dev), ("type", 2), ("ret", 0)]
        ),
        EventKind::FileLock {
            inode: 4242,
            dev: dev as u32,
            flock: false,
            lock_type: 2,
            ret: 0
        }
    );
}

#[test]
fn socket_data_deliveries_and_receives() {
    let Some(set) = tracefs_formats() else { return };
    let sk = 0xffff_8881_2345_6780u64;
    assert_eq!(
        kind(
            &set,
            "sock",
            "sk_data_ready",
            31,
            &[("skaddr", sk), ("family", 2), ("protocol", 6)]
        ),
        EventKind::SockReady { sk }
    );
    assert_eq!(
        kind(
            &set,
            "sock",
            "sock_recv_length",
            32,
            &[("sk", sk), ("family", 1), ("ret", 38)]
        ),
        EventKind::SockRecv { sk, ret: 38 }
    );
    assert_eq!(
        kind(
            &set,
            "sock",
            "sock_recv_length",
            32,
            &[("sk", sk), ("ret", (-11i32) as u32 as u64)]
        ),
        EventKind::SockRecv { sk, ret: -11 }
    );
}

/// `sched_pi_setprio` raising a PI futex owner's priority, recorded in the waiter's context,
/// names the owner (`LockOwner`); a priority lowered (a waiter leaving: a timeout, a signal)
/// or set by the owner itself (its release) names no lock waited for and is skipped.
#[test]
fn pi_boosts_name_lock_owners_and_other_priority_changes_do_not() {
    let Some(set) = tracefs_formats() else {
        return;
    };
    assert_eq!(
        kind(
            &set,
            "sched",
            "sched_pi_setprio",
            100,
            &[("pid", 200), ("oldprio", 125), ("newprio", 120)]
        ),
        EventKind::LockOwner {
            owner: Tid(200),
            lock: 0
        }
    );
    let ev = set
        .by_name("sched", "sched_pi_setprio")
        .expect("event exists");
    let mut conv = Converter::new(&set).expect("converter");
    for (current, old, new) in [(100, 120, 125), (200, 125, 120), (200, 120, 125)] {
        let p = record(
            ev,
            full_len(ev),
            current,
            0,
            &[("pid", 200), ("oldprio", old), ("newprio", new)],
        );
        let rec = RawRecord {
            ts: 1000,
            offset: 16,
            payload: &p,
        };
        assert!(
            conv.convert(Cpu(1), &rec).expect("converts").is_none(),
            "current {current}, {old} -> {new}"
        );
    }
}
