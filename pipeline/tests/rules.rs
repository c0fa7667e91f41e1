//! One small hand-made stream per rule: the reference graph has the segments and edges the
//! rule promises, and the dataflow (1 and 2 workers, batches of one event and of all)
//! equals it.

use argus_pipeline::dataflow::{collect_epochs, Batch, DataflowConfig};
use argus_pipeline::reference;
use argus_pipeline::rules::{
    route, ChannelEnd, ChannelMap, CondvarRule, Counter, Key, KeyState, Output, Pair, PipeRule,
    PoolRule, RulesConfig, SplitAt, SplitRule,
};
use argus_pipeline::Graph;
use argus_schema::{
    CausalEdge, Context, Cpu, EdgeKind, EndCause, Event, EventKind, Nanos, Pid, SegmentId,
    SegmentKind, SpinClass, Strength, Tid,
};

const READ: i32 = 0;
const WRITE: i32 = 1;
const FUTEX: i32 = 202;
const EPOLL_WAIT: i32 = 232;
const WAIT4: i32 = 61;
const EXIT_GROUP: i32 = 231;
const KILL: i32 = 62;

/// The rules' hand-made streams (`argus_pipeline::rules::testing`).
use argus_pipeline::rules::testing::Trace as S;

/// The reference graph; asserts the dataflow equals it at every epoch.
fn graph(evs: &[Event], rules: &RulesConfig) -> Graph {
    let want = reference::compute(evs, evs.last().map(|e| e.ts).unwrap_or_default(), rules);
    for workers in [1, 2] {
        for size in [1, evs.len().max(1)] {
            let batches: Vec<Batch> = evs
                .chunks(size)
                .map(|c| Batch {
                    events: c.to_vec(),
                    watermark: c.last().map(|e| e.ts).unwrap_or_default(),
                })
                .collect();
            let cfg = DataflowConfig {
                workers,
                rules: rules.clone(),
                ..DataflowConfig::default()
            };
            let got = collect_epochs(&cfg, batches).expect("dataflow runs");
            let mut upto = 0;
            for (i, (wm, g)) in got.iter().enumerate() {
                upto = (upto + size).min(evs.len());
                let r = reference::compute(&evs[..upto], *wm, rules);
                assert_eq!(g, &r, "epoch {i}, batch {size}, {workers} workers");
            }
            assert_eq!(got.last().map(|x| &x.1), Some(&want));
        }
    }
    want
}

fn seg(tid: i32, n: u32) -> SegmentId {
    SegmentId::new(Tid(tid), n)
}

fn edges_between(g: &Graph, src_tid: i32, dst_tid: i32) -> Vec<&CausalEdge> {
    g.edges
        .iter()
        .filter(|e| e.src.tid() == Tid(src_tid) && e.dst.tid() == Tid(dst_tid))
        .collect()
}

fn edge(g: &Graph, src: SegmentId, dst: SegmentId) -> Option<&CausalEdge> {
    g.edges.iter().find(|e| e.src == src && e.dst == dst)
}

#[test]
fn work_items_are_segments_joined_to_their_queuer_and_waits_inside_do_not_split() {
    let mut s = S::default();
    s.run(10);
    s.task(
        10,
        EventKind::WorkQueue {
            work: 0xa0,
            function: 0xf1,
        },
    );
    s.wake(10, 50);
    s.run(50);
    s.task(
        50,
        EventKind::WorkStart {
            work: 0xa0,
            function: 0xf1,
        },
    );
    s.block(50); // blocks inside the item (callout_level > 0)
    s.run(11);
    s.wake(11, 50);
    s.run(50);
    s.task(50, EventKind::WorkEnd { work: 0xa0 });
    s.block(50);
    s.wake(10, 50);
    s.run(50);
    let g = graph(&s.evs, &RulesConfig::default());
    let kw: Vec<_> = g.segments.iter().filter(|x| x.tid == Tid(50)).collect();
    // woken-for-the-item, the item, after the item (woken again: a fourth).
    assert_eq!(kw.len(), 4, "{kw:#?}");
    assert_eq!(
        kw[1].kind,
        SegmentKind::WorkItem {
            work: 0xa0,
            function: 0xf1
        }
    );
    assert_eq!(kw[1].end, EndCause::HandlerDone);
    let q = edge(&g, seg(10, 0), seg(50, 1)).expect("queue edge");
    assert_eq!((q.kind, q.strength), (EdgeKind::Queue, Strength::Strong));
    // The wake-up in the middle of the item points into the item.
    let w = edge(&g, seg(11, 0), seg(50, 1)).expect("wake-up into the item");
    assert_eq!(w.kind, EdgeKind::Wakeup);
    // No thread order into or out of the item.
    assert!(edge(&g, seg(50, 0), seg(50, 1)).is_none());
    assert!(edge(&g, seg(50, 1), seg(50, 2)).is_none());
    assert!(g.counts.get(Counter::PrunedOrder) >= 2);
    assert!(g.counts.get(Counter::SplitCallout) >= 2);
}

#[test]
fn nested_work_items_split_and_the_outer_parts_are_boosted() {
    let mut s = S::default();
    s.run(50);
    let start = |s: &mut S, w| {
        s.task(
            50,
            EventKind::WorkStart {
                work: w,
                function: 0xf0 + w,
            },
        )
    };
    start(&mut s, 1);
    start(&mut s, 2);
    s.task(50, EventKind::WorkEnd { work: 2 });
    s.task(50, EventKind::WorkEnd { work: 1 });
    let g = graph(&s.evs, &RulesConfig::default());
    let kinds: Vec<_> = g
        .segments
        .iter()
        .filter(|x| x.tid == Tid(50))
        .map(|x| x.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            SegmentKind::Task,
            SegmentKind::WorkItem {
                work: 1,
                function: 0xf1
            },
            SegmentKind::WorkItem {
                work: 2,
                function: 0xf2
            },
            SegmentKind::WorkItem {
                work: 1,
                function: 0xf1
            },
            SegmentKind::Task,
        ]
    );
    let b = edge(&g, seg(50, 1), seg(50, 3)).expect("outer parts linked");
    assert_eq!(
        (b.kind, b.strength),
        (EdgeKind::ThreadOrder, Strength::Boosted)
    );
}

/// One server thread (20) serving clients 30 and 31 in one run: the segment that received
/// 30's request does not also send 31's reply.
#[test]
fn message_peer_sets_split_a_batching_server_loop() {
    let mut s = S::default();
    s.run(20);
    s.enter(20, EPOLL_WAIT, 3);
    s.block(20);
    for (client, fd) in [(30, 5), (31, 6)] {
        s.run(client);
        s.enter(client, WRITE, 3);
        if client == 30 {
            s.wake(30, 20);
        }
        s.exit(client, WRITE, 8);
        s.enter(client, READ, 3);
        s.block(client);
        let _ = fd;
    }
    s.run(20);
    s.exit(20, EPOLL_WAIT, 2);
    for round in 0..2 {
        for (client, fd) in [(30, 5u64), (31, 6)] {
            s.enter(20, READ, fd);
            s.exit(20, READ, 8);
            s.enter(20, WRITE, 1); // a log line: not a connection
            s.exit(20, WRITE, 20);
            s.enter(20, WRITE, fd);
            s.wake(20, client);
            s.exit(20, WRITE, 8);
            if round == 0 {
                s.run(client);
                s.exit(client, READ, 8);
                s.enter(client, READ, 3);
                s.block(client);
            }
        }
    }
    let g = graph(&s.evs, &RulesConfig::default());
    // Round 0: fd 6 is not known as a connection until its write wakes 31: split there.
    // Round 1: both known: split at the read of fd 6, then at the read of fd 5 and fd 6.
    assert_eq!(g.counts.get(Counter::SplitPeer), 3, "{:#?}", g.segments);
    let server: Vec<_> = g.segments.iter().filter(|x| x.tid == Tid(20)).collect();
    assert_eq!(server.len(), 5);
    let m = edge(&g, seg(30, 0), seg(20, 1)).expect("request edge");
    assert_eq!((m.kind, m.strength), (EdgeKind::Message, Strength::Strong));
    // The segment woken by 30 replies to 30 only.
    let out: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.src == seg(20, 1) && e.kind != EdgeKind::ThreadOrder)
        .map(|e| e.dst.tid())
        .collect();
    assert_eq!(out, vec![Tid(30)]);
    let to31 = edges_between(&g, 20, 31);
    assert!(to31.iter().all(|e| e.src != seg(20, 1)));
    assert_eq!(to31[0].kind, EdgeKind::Message);
    // Splits leave a weak thread-order edge, in case they were wrong.
    let t = edge(&g, seg(20, 1), seg(20, 2)).expect("thread order");
    assert_eq!(t.strength, Strength::Weak);
    // The split segment starts at the entry of the write.
    assert!(server[1].end_ns == server[2].start_ns);
}

/// The epoll wait is ended by client 31's request, but the loop serves client 30 first:
/// once the replies have shown which descriptor leads to which client, the wake-up's part
/// is split off before 30's read, so no segment takes 31's wake-up and answers 30.
#[test]
fn a_readiness_wake_stays_with_its_waker_when_another_client_is_served_first() {
    let mut s = S::default();
    s.run(20);
    s.enter(20, EPOLL_WAIT, 3);
    s.block(20);
    let requests = |s: &mut S, order: [i32; 2], first_round: bool| {
        for client in order {
            s.run(client);
            if !first_round {
                s.exit(client, READ, 8);
            }
            s.enter(client, WRITE, 3);
            if client == order[0] {
                s.wake(client, 20);
            }
            s.exit(client, WRITE, 8);
            s.enter(client, READ, 3);
            s.block(client);
        }
    };
    let serve = |s: &mut S| {
        s.run(20);
        s.exit(20, EPOLL_WAIT, 2);
        for (client, fd) in [(30, 5u64), (31, 6)] {
            s.enter(20, READ, fd);
            s.exit(20, READ, 8);
            s.enter(20, WRITE, fd);
            s.wake(20, client);
            s.exit(20, WRITE, 8);
        }
        s.enter(20, EPOLL_WAIT, 3);
        s.block(20);
    };
    // Round 0: 30 wakes the server and is served first; the replies teach fd 5 → 30 and
    // fd 6 → 31. Round 1: 31 wakes it, 30 is served first.
    requests(&mut s, [30, 31], true);
    serve(&mut s);
    requests(&mut s, [31, 30], false);
    serve(&mut s);
    let g = graph(&s.evs, &RulesConfig::default());
    let woken: Vec<SegmentId> = edges_between(&g, 31, 20)
        .iter()
        .filter(|e| e.kind != EdgeKind::ThreadOrder)
        .map(|e| e.dst)
        .collect();
    assert!(!woken.is_empty(), "{:#?}", g.edges);
    for w in &woken {
        let to: Vec<Tid> = g
            .edges
            .iter()
            .filter(|e| e.src == *w && e.kind != EdgeKind::ThreadOrder)
            .map(|e| e.dst.tid())
            .collect();
        assert!(
            to.iter().all(|t| *t == Tid(31)),
            "{w} took 31's wake-up and answered {to:?}: {:#?}",
            g.segments
        );
    }
    // 30's reply in round 1 comes from a segment of its own, after the wake-up's part.
    let replies_to_30: Vec<SegmentId> = edges_between(&g, 20, 30).iter().map(|e| e.src).collect();
    assert!(replies_to_30.iter().all(|r| !woken.contains(r)));
    // Round 0: at the write to fd 6 (not yet known as a connection before it woke 31).
    // Round 1: before the read of fd 5 (the new split), and at the read of fd 6.
    assert_eq!(g.counts.get(Counter::SplitPeer), 3, "{:#?}", g.segments);
}

#[test]
fn futex_hand_offs_are_weak_unless_a_condvar_or_a_pool_says_otherwise() {
    let build = || {
        let mut s = S::default();
        s.run(112);
        s.enter(112, FUTEX, 0x1000);
        s.block(112);
        s.run(111);
        s.enter(111, FUTEX, 0x1000);
        s.wake(111, 112);
        s.exit(111, FUTEX, 1);
        s.run(112);
        s.exit(112, FUTEX, 0);
        s.evs
    };
    let evs = build();
    let g = graph(&evs, &RulesConfig::default());
    let e = edges_between(&g, 111, 112);
    assert_eq!(
        (e[0].kind, e[0].strength),
        (EdgeKind::Wakeup, Strength::Weak)
    );

    let mut cv = RulesConfig::default();
    cv.user.condvars.push(CondvarRule {
        pid: Pid(110),
        addr: 0x1000,
        len: 48,
    });
    let g = graph(&evs, &cv);
    let e = edges_between(&g, 111, 112);
    assert_eq!(
        (e[0].kind, e[0].strength),
        (EdgeKind::Rule, Strength::Strong)
    );

    let mut pool = RulesConfig::default();
    pool.user.pools.push(PoolRule {
        tids: [Tid(111), Tid(112)].into_iter().collect(),
    });
    let g = graph(&evs, &pool);
    let e = edges_between(&g, 111, 112);
    assert_eq!(e[0].strength, Strength::Boosted);
}

#[test]
fn a_childs_exit_ending_wait4_is_an_exit_edge() {
    let mut s = S::default();
    s.run(40);
    s.enter(40, WAIT4, u64::MAX);
    s.block(40);
    s.run(41);
    s.enter(41, EXIT_GROUP, 0);
    s.task(41, EventKind::Exit);
    s.wake(41, 40);
    s.run(40);
    s.exit(40, WAIT4, 41);
    let g = graph(&s.evs, &RulesConfig::default());
    let e = edges_between(&g, 41, 40);
    assert_eq!(
        (e[0].kind, e[0].strength),
        (EdgeKind::Exit, Strength::Strong)
    );
}

#[test]
fn a_wait_interrupted_and_retried_boosts_the_thread_order_edge() {
    for (ret, next, want) in [
        (-4, FUTEX, Strength::Boosted),
        (-512, FUTEX, Strength::Boosted),
        (0, FUTEX, Strength::Weak),
        (-4, READ, Strength::Weak),
    ] {
        let mut s = S::default();
        s.run(12);
        s.enter(12, FUTEX, 0x2000);
        s.block(12);
        s.wake(13, 12);
        s.run(12);
        s.exit(12, FUTEX, ret);
        s.enter(12, next, 0x2000);
        let g = graph(&s.evs, &RulesConfig::default());
        let t = edge(&g, seg(12, 0), seg(12, 1)).expect("thread order");
        assert_eq!(t.strength, want, "ret {ret}, next {next}");
    }
}

#[test]
fn wheel_timers_link_the_armer_to_the_expiry_and_on_to_the_wakee() {
    let mut s = S::default();
    s.run(10);
    s.task(
        10,
        EventKind::TimerStart {
            timer: 0x77,
            function: 0x99,
            expires: 5,
        },
    );
    s.block(12);
    s.irq(
        1,
        Context::SoftIrq,
        EventKind::TimerExpire {
            timer: 0x77,
            function: 0x99,
        },
    );
    s.irq(1, Context::SoftIrq, EventKind::Waking { target: Tid(12) });
    s.irq(
        1,
        Context::SoftIrq,
        EventKind::TimerExpireExit { timer: 0x77 },
    );
    let g = graph(&s.evs, &RulesConfig::default());
    let irq = Tid::irq(Cpu(1));
    let t = g
        .edges
        .iter()
        .find(|e| e.src.tid() == Tid(10) && e.dst.tid() == irq)
        .expect("timer edge");
    assert_eq!((t.kind, t.strength), (EdgeKind::Timer, Strength::Strong));
    let w = g
        .edges
        .iter()
        .find(|e| e.src.tid() == irq && e.dst.tid() == Tid(12))
        .expect("wake-up from the expiry");
    assert_eq!(w.strength, Strength::Strong);
}

#[test]
fn maintenance_callbacks_and_threads_are_culled() {
    let mut s = S::default();
    s.block(12);
    s.irq(
        0,
        Context::HardIrq,
        EventKind::HrtimerExpire {
            timer: 0x55,
            function: 0xdead,
        },
    );
    s.irq(0, Context::HardIrq, EventKind::Waking { target: Tid(12) });
    s.irq(
        0,
        Context::HardIrq,
        EventKind::HrtimerExpireExit { timer: 0x55 },
    );
    s.run(9);
    s.wake(9, 13); // an RCU thread waking somebody
    let mut cfg = RulesConfig::default();
    let added = cfg.cull_symbols([(0xdead, "tick_nohz_handler"), (0xbeef, "hrtimer_wakeup")]);
    assert_eq!(added, 1);
    cfg.classify_threads([(Tid(9), "rcu_preempt", true), (Tid(8), "kworker/0:1", true)]);
    assert!(cfg.kernel_threads.contains(&Tid(8)) && cfg.cull_threads.contains(&Tid(9)));
    let g = graph(&s.evs, &cfg);
    assert!(edges_between(&g, Tid::irq(Cpu(0)).0, 12).is_empty());
    assert!(edges_between(&g, 9, 13).is_empty());
    assert_eq!(g.counts.get(Counter::Culled), 3);
    let g = graph(&s.evs, &RulesConfig::default());
    assert_eq!(edges_between(&g, Tid::irq(Cpu(0)).0, 12).len(), 1);
    assert_eq!(g.counts.get(Counter::Culled), 0);
}

#[test]
fn signals_link_the_sender_to_the_handler_segment() {
    let mut s = S::default();
    s.run(12);
    s.enter(12, 39, 0); // getpid: busy
    s.exit(12, 39, 12);
    s.run(10);
    s.enter(10, KILL, 12);
    s.task(
        10,
        EventKind::SignalGenerate {
            sig: 10,
            target: Tid(12),
        },
    );
    s.exit(10, KILL, 0);
    s.task(12, EventKind::SignalDeliver { sig: 10 });
    let g = graph(&s.evs, &RulesConfig::default());
    let e = edge(&g, seg(10, 0), seg(12, 1)).expect("signal edge");
    assert_eq!((e.kind, e.strength), (EdgeKind::Signal, Strength::Strong));
    assert_eq!(g.counts.get(Counter::SplitSignal), 1);
}

#[test]
fn a_process_directed_signal_links_to_whichever_thread_takes_it() {
    // 700 sends kill(610): generated for the leader 610, delivered in its thread 611.
    let mut s = S::default();
    s.run(610);
    s.block(610);
    s.run(611);
    s.enter(611, 39, 0);
    s.exit(611, 39, 610);
    s.run(700);
    s.enter(700, KILL, 610);
    s.task(
        700,
        EventKind::SignalGenerate {
            sig: 15,
            target: Tid(610),
        },
    );
    s.exit(700, KILL, 0);
    s.task(611, EventKind::SignalDeliver { sig: 15 });
    s.enter(611, 39, 0);
    s.exit(611, 39, 610);
    // A later thread-directed signal to 611 still pairs directly, not with the old one.
    s.task(
        700,
        EventKind::SignalGenerate {
            sig: 10,
            target: Tid(611),
        },
    );
    s.task(611, EventKind::SignalDeliver { sig: 10 });
    let g = graph(&s.evs, &RulesConfig::default());
    let sig: Vec<&CausalEdge> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::Signal)
        .collect();
    assert_eq!(sig.len(), 2, "{:#?}", g.edges);
    assert!(edge(&g, seg(700, 0), seg(611, 1)).is_some_and(|e| e.kind == EdgeKind::Signal));
    let ends: Vec<_> = sig
        .iter()
        .map(|e| (e.src.tid(), e.src.seq(), e.dst.tid(), e.dst.seq()))
        .collect();
    assert!(
        edge(&g, seg(700, 0), seg(611, 2)).is_some_and(|e| e.kind == EdgeKind::Signal),
        "{ends:?}"
    );
    assert!(edges_between(&g, 700, 610).is_empty());
}

#[test]
fn a_device_softirq_is_the_bottom_half_of_the_hard_interrupt_before_it() {
    for (vec, linked) in [(3u32, true), (1, false)] {
        let mut s = S::default();
        s.irq(0, Context::HardIrq, EventKind::IrqEntry { irq: 19 });
        s.irq(0, Context::HardIrq, EventKind::IrqExit { irq: 19 });
        s.irq(0, Context::SoftIrq, EventKind::SoftirqEntry { vec });
        s.irq(0, Context::SoftIrq, EventKind::Waking { target: Tid(12) });
        s.irq(0, Context::SoftIrq, EventKind::SoftirqExit { vec });
        let g = graph(&s.evs, &RulesConfig::default());
        let irq = Tid::irq(Cpu(0));
        let e = edge(&g, SegmentId::new(irq, 0), SegmentId::new(irq, 1));
        assert_eq!(e.is_some(), linked, "vec {vec}");
        if let Some(e) = e {
            assert_eq!((e.kind, e.strength), (EdgeKind::Queue, Strength::Boosted));
        }
    }
}

#[test]
fn a_declared_pipe_links_a_write_to_a_later_read_that_did_not_block() {
    let mut cfg = RulesConfig::default();
    cfg.user.pipes.push(PipeRule {
        pid: Pid(600),
        write_fd: 4,
        read_fd: 3,
    });
    let mut s = S::default();
    s.run(601);
    s.enter(601, WRITE, 4);
    s.exit(601, WRITE, 5);
    s.run(602);
    s.enter(602, READ, 3);
    s.exit(602, READ, 5);
    // A read that finds nothing (EAGAIN) is no dependency.
    s.enter(602, READ, 3);
    s.exit(602, READ, -11);
    let g = graph(&s.evs, &cfg);
    let e = edges_between(&g, 601, 602);
    assert_eq!(e.len(), 1, "{:#?}", g.edges);
    assert_eq!(
        (e[0].kind, e[0].strength),
        (EdgeKind::Message, Strength::Strong)
    );
    // Without the declaration there is nothing to go on.
    assert!(edges_between(&graph(&s.evs, &RulesConfig::default()), 601, 602).is_empty());
}

#[test]
fn fd_identity_links_pipe_and_socket_data_dependencies_across_processes() {
    // Process 610 writes into a pipe (its fd 4) and on a socket (fd 5, inode 51, peer 52);
    // process 620 reads the pipe (its fd 3, inherited through fork from 600) and the other
    // end of the socket (fd 7, inode 52); fd 8 of 620 is an unrelated socket.
    let mut cfg = RulesConfig::default();
    cfg.channels
        .insert(Pid(610), 4, Nanos(0), ChannelEnd::pipe(777));
    cfg.channels
        .insert(Pid(610), 5, Nanos(0), ChannelEnd::socket(51, 52));
    cfg.channels
        .insert(Pid(600), 3, Nanos(0), ChannelEnd::pipe(777));
    cfg.channels.set_parent(Pid(620), Pid(600), Nanos(500));
    cfg.channels
        .insert(Pid(620), 7, Nanos(600), ChannelEnd::socket(52, 51));
    cfg.channels
        .insert(Pid(620), 8, Nanos(600), ChannelEnd::socket(91, 92));
    let mut s = S::default();
    s.run(611);
    s.enter(611, WRITE, 4);
    s.exit(611, WRITE, 5);
    s.run(621);
    s.enter(621, READ, 3);
    s.exit(621, READ, 5);
    s.block(621);
    s.run(611);
    s.enter(611, WRITE, 5);
    s.exit(611, WRITE, 9);
    s.block(611);
    s.run(621);
    s.enter(621, READ, 8);
    s.exit(621, READ, 9);
    s.enter(621, READ, 7);
    s.exit(621, READ, 9);
    let g = graph(&s.evs, &cfg);
    let e = edges_between(&g, 611, 621);
    assert_eq!(e.len(), 2, "{:#?}", g.edges);
    assert!(e
        .iter()
        .all(|e| (e.kind, e.strength) == (EdgeKind::Message, Strength::Strong)));
    // 611 never blocked between its writes (one segment); the pipe read is in 621's first
    // segment, the socket read in its second.
    assert!(
        edge(&g, seg(611, 0), seg(621, 0)).is_some(),
        "{:#?}",
        g.edges
    );
    assert!(
        edge(&g, seg(611, 0), seg(621, 1)).is_some(),
        "{:#?}",
        g.edges
    );
    // Without fd identity there is nothing to go on.
    assert!(edges_between(&graph(&s.evs, &RulesConfig::default()), 611, 621).is_empty());
}

/// Socket `sk` queued data in `tid`'s context (`ctx`: its own, or a softirq it ran).
fn sock_ready(s: &mut S, tid: i32, ctx: Context, sk: u64) -> u64 {
    s.push(0, tid, ctx, EventKind::SockReady { sk })
}

/// `tid` read `ret` bytes from socket `sk` through its descriptor `fd`, without blocking.
fn sock_read(s: &mut S, tid: i32, fd: u64, sk: u64, ret: i32) {
    s.enter(tid, READ, fd);
    s.task(tid, EventKind::SockRecv { sk, ret });
    s.exit(tid, READ, i64::from(ret));
}

#[test]
fn socket_data_events_link_a_send_to_a_receive_without_fd_identity() {
    const SK: u64 = 0xffff_8881_0000_4000;
    // 611 sends on its fd 5; loopback TCP delivers to the peer socket SK in the softirq
    // the send runs. 621 (another process, running since its timer woke it) reads SK
    // through its fd 7 without blocking: a data dependency although neither descriptor
    // has an identity (both closed before the tracker could read /proc).
    let mut s = S::default();
    s.run(611);
    s.enter(611, WRITE, 5);
    let fed = sock_ready(&mut s, 611, Context::SoftIrq, SK);
    s.exit(611, WRITE, 9);
    s.run(621);
    sock_read(&mut s, 621, 7, SK, 9);
    let g = graph(&s.evs, &RulesConfig::default());
    let e = edges_between(&g, 611, 621);
    assert_eq!(e.len(), 1, "{:#?}", g.edges);
    assert_eq!(
        (
            e[0].src,
            e[0].dst,
            e[0].kind,
            e[0].strength,
            e[0].src_syscall
        ),
        (
            seg(611, 0),
            seg(621, 0),
            EdgeKind::Message,
            Strength::Strong,
            WRITE
        )
    );
    assert_eq!(e[0].ts, s.evs[fed as usize].ts, "from the delivery");
    // With fd identity too (the socket pair known) it is still one edge.
    let mut cfg = RulesConfig::default();
    cfg.channels
        .insert(Pid(610), 5, Nanos(0), ChannelEnd::socket(51, 52));
    cfg.channels
        .insert(Pid(620), 7, Nanos(0), ChannelEnd::socket(52, 51));
    assert_eq!(edges_between(&graph(&s.evs, &cfg), 611, 621).len(), 1);
}

#[test]
fn socket_data_queued_outside_a_send_or_read_back_by_its_sender_is_no_dependency() {
    const SK: u64 = 0xffff_8881_0000_4000;
    let mut s = S::default();
    // A packet from elsewhere processed in the softirq of a thread that is not sending
    // (611 is in a read of another socket): new data on SK, but not 611's.
    s.run(611);
    s.enter(611, READ, 3);
    sock_ready(&mut s, 611, Context::SoftIrq, SK);
    s.exit(611, READ, -11);
    s.run(621);
    sock_read(&mut s, 621, 7, SK, 9);
    // A receive that found nothing, and one by the thread that queued the data itself.
    s.enter(611, WRITE, 4);
    sock_ready(&mut s, 611, Context::Task, SK + 64);
    s.exit(611, WRITE, 3);
    s.task(
        621,
        EventKind::SockRecv {
            sk: SK + 64,
            ret: -11,
        },
    );
    sock_read(&mut s, 611, 4, SK + 64, 3);
    let g = graph(&s.evs, &RulesConfig::default());
    assert!(
        g.edges.iter().all(|e| e.kind != EdgeKind::Message),
        "{:#?}",
        g.edges
    );
}

#[test]
fn a_socket_receive_that_blocked_is_linked_by_its_wake_up_only() {
    const SK: u64 = 0xffff_8881_0000_4000;
    let mut s = S::default();
    s.run(621);
    s.enter(621, READ, 7);
    s.block(621);
    s.run(611);
    s.enter(611, WRITE, 5);
    sock_ready(&mut s, 611, Context::Task, SK);
    s.wake(611, 621);
    s.exit(611, WRITE, 9);
    s.run(621);
    s.task(621, EventKind::SockRecv { sk: SK, ret: 9 });
    s.exit(621, READ, 9);
    let g = graph(&s.evs, &RulesConfig::default());
    let e: Vec<_> = edges_between(&g, 611, 621)
        .into_iter()
        .filter(|e| e.kind != EdgeKind::WaitWake)
        .collect();
    assert_eq!(e.len(), 1, "{:#?}", g.edges);
    assert_eq!(
        (e[0].dst, e[0].kind, e[0].strength),
        (seg(621, 1), EdgeKind::Message, Strength::Strong)
    );
}

#[test]
fn one_write_read_many_times_by_one_thread_is_one_edge() {
    let mut cfg = RulesConfig::default();
    cfg.channels
        .insert(Pid(610), 4, Nanos(0), ChannelEnd::pipe(5));
    cfg.channels
        .insert(Pid(620), 3, Nanos(0), ChannelEnd::pipe(5));
    let mut s = S::default();
    s.run(611);
    s.enter(611, WRITE, 4);
    s.exit(611, WRITE, 100);
    s.run(621);
    for _ in 0..3 {
        s.enter(621, READ, 3);
        s.exit(621, READ, 10);
    }
    s.block(621);
    s.run(621);
    s.enter(621, READ, 3);
    s.exit(621, READ, 10);
    let g = graph(&s.evs, &cfg);
    assert_eq!(edges_between(&g, 611, 621).len(), 1, "{:#?}", g.edges);
    // A new write is a new dependency.
    s.enter(611, WRITE, 4);
    s.exit(611, WRITE, 100);
    s.enter(621, READ, 3);
    s.exit(621, READ, 10);
    let g = graph(&s.evs, &cfg);
    assert_eq!(edges_between(&g, 611, 621).len(), 2, "{:#?}", g.edges);
}

#[test]
fn a_wake_up_that_ends_a_wait_has_its_weak_wait_wake_pair() {
    // 13 blocks, 14 wakes it: 13's first segment (ended by the wait) → 14's segment, weak.
    // A wake-up of a thread that was not waiting (its first record) has no pair.
    let mut s = S::default();
    s.run(13);
    s.block(13);
    s.run(14);
    s.wake(14, 13);
    s.wake(14, 15);
    let g = graph(&s.evs, &RulesConfig::default());
    let pairs: Vec<&CausalEdge> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::WaitWake)
        .collect();
    assert_eq!(pairs.len(), 1, "{:#?}", g.edges);
    assert_eq!((pairs[0].src, pairs[0].dst), (seg(13, 0), seg(14, 0)));
    assert_eq!(pairs[0].strength, Strength::Weak);
    assert!(edge(&g, seg(14, 0), seg(13, 1)).is_some_and(|e| e.kind == EdgeKind::Wakeup));
}

#[test]
fn each_user_space_dispatch_is_a_callout_segment_and_waits_inside_do_not_split_it() {
    let marker = |s: &mut S, text: &str| {
        s.task(
            12,
            EventKind::Marker {
                text: text.to_string(),
            },
        );
    };
    let mut s = S::default();
    s.run(12);
    s.enter(12, EPOLL_WAIT, 3);
    s.exit(12, EPOLL_WAIT, 1);
    marker(&mut s, "argus:dispatch-begin on_job");
    s.enter(12, READ, 5);
    s.block(12); // a wait inside the callback
    s.wake(10, 12);
    s.run(12);
    s.exit(12, READ, 8);
    marker(&mut s, "argus:dispatch-end on_job");
    marker(&mut s, "argus:dispatch-begin on_job");
    s.enter(12, WRITE, 5);
    s.exit(12, WRITE, 8);
    // An end of another name (its begin was before the trace) closes nothing.
    marker(&mut s, "argus:dispatch-end other");
    marker(&mut s, "argus:dispatch-end on_job");
    s.enter(12, EPOLL_WAIT, 3);
    let g = graph(&s.evs, &RulesConfig::default());
    let mine: Vec<_> = g.segments.iter().filter(|x| x.tid == Tid(12)).collect();
    let id = argus_pipeline::rules::dispatch_id("on_job");
    let items: Vec<_> = mine
        .iter()
        .filter(|x| {
            x.kind
                == SegmentKind::WorkItem {
                    work: 0,
                    function: id,
                }
        })
        .collect();
    assert_eq!(items.len(), 2, "{mine:#?}");
    // The first callback blocked in read and stayed one segment; the wake-up points into it.
    assert!(items[0].syscalls >= 1);
    assert!(edges_between(&g, 10, 12)
        .iter()
        .any(|e| e.dst == items[0].id && e.kind == EdgeKind::Wakeup));
    // Loop, callback, the loop between the callbacks, callback, loop.
    assert_eq!(mine.len(), 5, "{mine:#?}");
    // No thread-order edge into or out of a callback (each serves another request).
    assert!(g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::ThreadOrder)
        .all(|e| items.iter().all(|i| e.src != i.id && e.dst != i.id)));
}

/// Item-fetching probes (`--enqueue …@1`, `--dispatch …@1`): the enqueue's `work_queue` and
/// the dispatch's `work_start` carry the item, and the callout is joined to the segment that
/// queued it by a strong queue edge; the dispatch's end marker closes it.
#[test]
fn a_probed_enqueue_joins_its_dispatch_by_a_queue_edge() {
    let run_job = argus_pipeline::rules::dispatch_id("run_job");
    let enqueue = argus_pipeline::rules::dispatch_id("enqueue_job");
    let mut s = S::default();
    s.run(20);
    s.task(
        20,
        EventKind::WorkQueue {
            work: 0x5000,
            function: enqueue,
        },
    );
    s.run(12);
    s.task(
        12,
        EventKind::WorkStart {
            work: 0x5000,
            function: run_job,
        },
    );
    s.enter(12, WRITE, 5);
    s.exit(12, WRITE, 1);
    s.task(
        12,
        EventKind::Marker {
            text: "argus:dispatch-end run_job".into(),
        },
    );
    s.enter(12, EPOLL_WAIT, 3);
    let g = graph(&s.evs, &RulesConfig::default());
    let item = g
        .segments
        .iter()
        .find(|x| {
            x.kind
                == SegmentKind::WorkItem {
                    work: 0x5000,
                    function: run_job,
                }
        })
        .expect("the dispatch is a work item");
    assert_eq!(item.tid, Tid(12));
    assert_eq!(item.syscalls, 1, "{item:#?}");
    let queued: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::Queue && e.dst == item.id)
        .collect();
    assert_eq!(queued.len(), 1, "{:#?}", g.edges);
    assert_eq!(queued[0].src.tid(), Tid(20));
    assert_eq!(queued[0].strength, Strength::Strong);
    // Closed by the end marker: the loop goes on in a task segment of its own.
    let after = g
        .segments
        .iter()
        .rfind(|x| x.tid == Tid(12))
        .expect("the loop");
    assert_eq!(after.kind, SegmentKind::Task, "{:#?}", g.segments);
}

#[test]
fn a_thread_reading_back_its_own_write_is_no_dependency() {
    let mut cfg = RulesConfig::default();
    cfg.channels
        .insert(Pid(610), 4, Nanos(0), ChannelEnd::pipe(5));
    cfg.channels
        .insert(Pid(610), 3, Nanos(0), ChannelEnd::pipe(5));
    let mut s = S::default();
    s.run(611);
    s.enter(611, WRITE, 4);
    s.exit(611, WRITE, 1);
    s.enter(611, READ, 3);
    s.exit(611, READ, 1);
    let g = graph(&s.evs, &cfg);
    assert!(
        g.edges.iter().all(|e| e.kind != EdgeKind::Message),
        "{:#?}",
        g.edges
    );
}

#[test]
fn channel_map_lookup_follows_fd_reuse_and_fork_inheritance() {
    let mut m = ChannelMap::default();
    m.insert(Pid(1), 3, Nanos(100), ChannelEnd::pipe(9));
    m.insert(Pid(1), 3, Nanos(300), ChannelEnd::socket(4, 5));
    m.set_parent(Pid(2), Pid(1), Nanos(200));
    assert_eq!(m.lookup(Pid(1), 3, Nanos(50)), None);
    assert_eq!(m.lookup(Pid(1), 3, Nanos(150)), Some(ChannelEnd::pipe(9)));
    assert_eq!(
        m.lookup(Pid(1), 3, Nanos(300)),
        Some(ChannelEnd::socket(4, 5))
    );
    // The child sees the parent's table as it was at the fork, not later changes.
    assert_eq!(m.lookup(Pid(2), 3, Nanos(400)), Some(ChannelEnd::pipe(9)));
    assert_eq!(m.lookup(Pid(2), 4, Nanos(400)), None);
    m.insert(Pid(2), 3, Nanos(350), ChannelEnd::pipe(10));
    assert_eq!(m.lookup(Pid(2), 3, Nanos(400)), Some(ChannelEnd::pipe(10)));
    assert_eq!(m.len(), 3);
    // Pid 2 reused by a later process: it does not see the old process's fd 3, but its
    // new parent's table at its own fork.
    m.set_parent(Pid(2), Pid(7), Nanos(1000));
    assert_eq!(m.lookup(Pid(2), 3, Nanos(1100)), None);
    m.insert(Pid(7), 3, Nanos(900), ChannelEnd::pipe(11));
    assert_eq!(m.lookup(Pid(2), 3, Nanos(1100)), Some(ChannelEnd::pipe(11)));
    assert_eq!(m.lookup(Pid(2), 3, Nanos(400)), Some(ChannelEnd::pipe(10)));
    // A socket's writes feed exactly what its peer reads.
    let (a, b) = (ChannelEnd::socket(4, 5), ChannelEnd::socket(5, 4));
    assert_eq!(a.send, b.recv);
    assert_eq!(b.send, a.recv);
    assert_ne!(a.send, a.recv);
    assert_ne!(ChannelEnd::pipe(4).send, a.send);
}

#[test]
fn a_watched_flag_write_links_to_the_reads_of_other_threads() {
    const FLAG: u64 = 0x5000;
    let mut s = S::default();
    s.run(611);
    s.task(
        612,
        EventKind::FlagAccess {
            addr: FLAG,
            write: false,
        },
    );
    s.task(
        611,
        EventKind::FlagAccess {
            addr: FLAG,
            write: true,
        },
    );
    // The writer reading its own flag back is no edge; another process's same address is
    // another flag.
    s.task(
        611,
        EventKind::FlagAccess {
            addr: FLAG,
            write: false,
        },
    );
    s.task(
        621,
        EventKind::FlagAccess {
            addr: FLAG,
            write: false,
        },
    );
    s.task(
        612,
        EventKind::FlagAccess {
            addr: FLAG,
            write: false,
        },
    );
    let g = graph(&s.evs, &RulesConfig::default());
    let flags: Vec<&CausalEdge> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::Flag)
        .collect();
    assert_eq!(flags.len(), 1, "{:#?}", g.edges);
    assert_eq!(
        (flags[0].src.tid(), flags[0].dst.tid()),
        (Tid(611), Tid(612))
    );
    assert_eq!(flags[0].strength, Strength::Strong);
}

#[test]
fn user_rules_split_at_a_syscall_or_a_marker() {
    let mut s = S::default();
    s.run(12);
    s.enter(12, 39, 0);
    s.exit(12, 39, 12);
    s.task(
        12,
        EventKind::Marker {
            text: "frame 2".into(),
        },
    );
    s.enter(12, 39, 0);
    s.exit(12, 39, 12);
    let mut cfg = RulesConfig::default();
    cfg.user.splits.push(SplitRule {
        pid: Some(Pid(12)),
        at: SplitAt::Syscall(39),
    });
    cfg.user.splits.push(SplitRule {
        pid: None,
        at: SplitAt::Marker("frame".into()),
    });
    let g = graph(&s.evs, &cfg);
    assert_eq!(g.segments.iter().filter(|x| x.tid == Tid(12)).count(), 4);
    assert_eq!(g.counts.get(Counter::SplitUser), 3);
    assert!(edge(&g, seg(12, 2), seg(12, 3)).is_some_and(|e| e.strength == Strength::Weak));
    let other = SplitRule {
        pid: Some(Pid(99)),
        at: SplitAt::Syscall(39),
    };
    cfg.user.splits = vec![other];
    let g = graph(&s.evs, &cfg);
    assert_eq!(g.segments.iter().filter(|x| x.tid == Tid(12)).count(), 1);
}

#[test]
fn kernel_delegate_threads_have_no_thread_order_edges() {
    let mut s = S::default();
    for _ in 0..3 {
        s.run(8);
        s.block(8);
        s.wake(10, 8);
    }
    s.run(8);
    let g = graph(&s.evs, &RulesConfig::default());
    assert_eq!(edges_between(&g, 8, 8).len(), 3);
    let mut cfg = RulesConfig::default();
    cfg.kernel_threads.insert(Tid(8));
    let g = graph(&s.evs, &cfg);
    assert!(edges_between(&g, 8, 8).is_empty());
    assert_eq!(g.counts.get(Counter::PrunedOrder), 3);
}

/// User call chains of an event loop (innermost first; `ips[0]` is the instruction in the
/// syscall wrapper): thread entry `0x10`, loop `0x20`; the loop calls poll at `0x50`,
/// callback A at `0x51`, callback B at `0x52` and a handler at `0x53`, which blocks at `0x61`
/// and then at `0x62`. With the base `[0x10, 0x20]`, the work frames (call sites inside it
/// but the innermost, the call of the wrapper) are: none for poll, `0x51` for A, `0x52` for
/// B, `0x53` for both waits of the handler.
const POLL: &[u64] = &[0x7f00, 0x50, 0x20, 0x10];
const CB_A: &[u64] = &[0x7f01, 0x71, 0x51, 0x20, 0x10];
const CB_B: &[u64] = &[0x7f01, 0x72, 0x52, 0x20, 0x10];
const H_FIRST: &[u64] = &[0x7f01, 0x61, 0x53, 0x20, 0x10];
const H_SECOND: &[u64] = &[0x7f02, 0x62, 0x53, 0x20, 0x10];

/// Thread 50 blocks once per stack in `stacks` (`None`: no stack recorded), woken by 13 each
/// time; returns the stream.
fn event_loop(stacks: &[Option<&[u64]>]) -> Vec<Event> {
    let mut s = S::default();
    s.run(50);
    for (i, st) in stacks.iter().enumerate() {
        let nr = if i == 0 { EPOLL_WAIT } else { READ };
        s.enter(50, nr, 7);
        s.block(50);
        if let Some(ips) = st {
            s.stack(50, ips);
        }
        s.run(13);
        s.wake(13, 50);
        s.run(50);
        s.exit(50, nr, 8);
    }
    s.evs
}

fn order(g: &Graph, tid: i32, from: u32) -> Option<Strength> {
    edge(g, seg(tid, from), seg(tid, from + 1)).map(|e| {
        assert_eq!(e.kind, EdgeKind::ThreadOrder);
        e.strength
    })
}

#[test]
fn stacks_prune_thread_order_between_unrelated_callbacks_and_boost_one_handler() {
    let evs = event_loop(&[
        Some(POLL),
        Some(CB_A),
        Some(CB_B),
        Some(H_FIRST),
        Some(H_SECOND),
        Some(POLL),
        Some(POLL),
        Some(CB_A),
    ]);
    let g = graph(&evs, &RulesConfig::default());
    // Poll → A: the loop's own wait has no work frame: unchanged.
    assert_eq!(order(&g, 50, 0), Some(Strength::Weak));
    // A → B, B → the handler: no call site in common, pruned.
    assert_eq!(order(&g, 50, 1), None, "{:#?}", g.edges);
    assert_eq!(order(&g, 50, 2), None, "{:#?}", g.edges);
    // The handler's two waits share its call site 0x53: one piece of work, boosted.
    assert_eq!(order(&g, 50, 3), Some(Strength::Boosted));
    // Handler → poll, poll → poll (two turns of the loop, both blocking at its poll call
    // site) and poll → A: unchanged.
    for from in 4..7 {
        assert_eq!(order(&g, 50, from), Some(Strength::Weak), "{from}");
    }
    // The last segment has not ended: its edge waits (weak, mutable).
    assert_eq!(order(&g, 50, 7), Some(Strength::Weak));
    assert_eq!(g.counts.get(Counter::PrunedStacks), 2);
    assert_eq!(g.counts.get(Counter::BoostedStacks), 1);
    // The wake-ups are untouched.
    assert_eq!(edges_between(&g, 13, 50).len(), 8);
}

#[test]
fn without_stacks_thread_order_is_unchanged() {
    let with = graph(
        &event_loop(&[Some(POLL), Some(CB_A), Some(CB_B), Some(POLL)]),
        &RulesConfig::default(),
    );
    let without = graph(&event_loop(&[None; 4]), &RulesConfig::default());
    for from in 0..4 {
        assert_eq!(order(&without, 50, from), Some(Strength::Weak));
    }
    assert_eq!(without.counts.get(Counter::PrunedStacks), 0);
    assert_eq!(without.counts.get(Counter::BoostedStacks), 0);
    // Stacks change thread-order edges only (and the event counts of the segments that
    // carry them).
    let rest = |g: &Graph| -> Vec<CausalEdge> {
        g.edges
            .iter()
            .filter(|e| e.kind != EdgeKind::ThreadOrder)
            .cloned()
            .collect()
    };
    assert_eq!(rest(&with), rest(&without));
    let bounds = |g: &Graph| -> Vec<(SegmentId, Nanos, Nanos)> {
        g.segments
            .iter()
            .map(|s| (s.id, s.start_ns, s.end_ns))
            .collect()
    };
    assert_eq!(bounds(&with), bounds(&without));
}

#[test]
fn stacks_without_a_verdict_leave_thread_order_weak() {
    // The first stack is the whole base (no work frames yet); a stack with no call site,
    // a derailed walk (another outermost frame) and a missing stack give no verdict.
    let g = graph(
        &event_loop(&[
            Some(CB_A),
            Some(CB_B),
            Some(&[0x7f00]),
            Some(CB_A),
            Some(&[0x7f00, 0xdead, 0xbeef]),
            Some(CB_B),
            None,
            Some(CB_A),
            Some(&[0x7f00, 0x20, 0x10]),
            Some(CB_B),
        ]),
        &RulesConfig::default(),
    );
    // CB_A then CB_B: the base became [0x10, 0x20] at CB_B, so that edge is decided.
    assert_eq!(order(&g, 50, 0), None);
    for from in 1..9 {
        assert_eq!(
            order(&g, 50, from),
            Some(Strength::Weak),
            "{from}: {:#?}",
            g.edges
        );
    }
    assert_eq!(g.counts.get(Counter::PrunedStacks), 1);
}

#[test]
fn a_retried_wait_stays_boosted_whatever_the_stacks() {
    // 50 blocks in futex at callback A, the wait is interrupted and retried at callback B's
    // stack (which alone would prune): the retry boost wins.
    let mut s = S::default();
    s.run(50);
    s.enter(50, FUTEX, 0x2000);
    s.block(50);
    s.stack(50, CB_A);
    s.wake(13, 50);
    s.run(50);
    s.exit(50, FUTEX, -4);
    s.enter(50, FUTEX, 0x2000);
    s.block(50);
    s.stack(50, CB_B);
    s.wake(13, 50);
    s.run(50);
    s.exit(50, FUTEX, 0);
    let g = graph(&s.evs, &RulesConfig::default());
    assert_eq!(order(&g, 50, 0), Some(Strength::Boosted));
    assert_eq!(g.counts.get(Counter::PrunedStacks), 0);
}

#[test]
fn syscall_entry_stacks_end_segments_too() {
    // `--stacks read,epoll_wait`: the stack follows the sys_enter, not the switch.
    let mut s = S::default();
    s.run(50);
    for ips in [POLL, H_FIRST, H_SECOND, CB_A] {
        s.enter(50, READ, 7);
        s.stack(50, ips);
        s.block(50);
        s.wake(13, 50);
        s.run(50);
        s.exit(50, READ, 8);
    }
    let g = graph(&s.evs, &RulesConfig::default());
    assert_eq!(order(&g, 50, 0), Some(Strength::Weak));
    assert_eq!(order(&g, 50, 1), Some(Strength::Boosted));
    assert_eq!(order(&g, 50, 2), None);
}

/// A server thread (20) reads a request from client 30 on fd 5 and replies in one run; fd
/// 5 is then reused for client 31's connection (its old connection closed unseen, e.g. by
/// `dup2`), and the same run serves 31.
fn fd_reuse(close: bool) -> Vec<Event> {
    let mut s = S::default();
    s.run(20);
    s.enter(20, READ, 5);
    s.block(20);
    s.run(30);
    s.enter(30, WRITE, 3);
    s.wake(30, 20);
    s.exit(30, WRITE, 8);
    s.run(20);
    s.exit(20, READ, 8);
    s.enter(20, WRITE, 5);
    s.wake(20, 30);
    s.exit(20, WRITE, 8);
    if close {
        s.enter(20, 3, 5);
        s.exit(20, 3, 0);
    }
    s.ts = 10_000_000;
    s.enter(20, READ, 5);
    s.exit(20, READ, 8);
    s.enter(20, WRITE, 5);
    s.wake(20, 31);
    s.exit(20, WRITE, 8);
    s.evs
}

#[test]
fn peer_sets_follow_the_connection_not_the_descriptor_number() {
    let mut cfg = RulesConfig::default();
    // Server fd 5: client 30's socket until 5 ms, then client 31's.
    cfg.channels
        .insert(Pid(20), 5, Nanos(0), ChannelEnd::socket(51, 52));
    cfg.channels
        .insert(Pid(20), 5, Nanos(5_000_000), ChannelEnd::socket(61, 62));
    // The clients' ends: the other direction of the same connections.
    cfg.channels
        .insert(Pid(30), 3, Nanos(0), ChannelEnd::socket(52, 51));
    let evs = fd_reuse(false);
    let g = graph(&evs, &cfg);
    assert_eq!(g.counts.get(Counter::SplitPeer), 1, "{:#?}", g.segments);
    // The segment that answered 30 does not also answer 31.
    let to31 = edges_between(&g, 20, 31);
    assert_eq!(to31.len(), 1);
    assert_eq!(to31[0].src, seg(20, 2));
    assert!(edges_between(&g, 20, 30)
        .iter()
        .filter(|e| e.kind != EdgeKind::WaitWake)
        .all(|e| e.src == seg(20, 1)));
    // By descriptor number alone the two connections are one peer: no split.
    let g = graph(&evs, &RulesConfig::default());
    assert_eq!(g.counts.get(Counter::SplitPeer), 0);
    // Unless the thread closed the number in between: then it no longer stands for the
    // first connection.
    let g = graph(&fd_reuse(true), &RulesConfig::default());
    assert_eq!(g.counts.get(Counter::SplitPeer), 1);
}

#[test]
fn both_directions_of_a_connection_are_one_peer() {
    // The server reads a socket's requests on fd 5 and writes replies on fd 6, a dup of
    // the same socket: one connection, no split. With fd numbers alone they would be two
    // peers (fd 6 is known as a connection once a write on it woke the client).
    let mut cfg = RulesConfig::default();
    cfg.channels
        .insert(Pid(20), 5, Nanos(0), ChannelEnd::socket(51, 52));
    cfg.channels
        .insert(Pid(20), 6, Nanos(0), ChannelEnd::socket(51, 52));
    let mut s = S::default();
    s.run(20);
    for _ in 0..2 {
        s.enter(20, READ, 5);
        s.block(20);
        s.run(30);
        s.wake(30, 20);
        s.run(20);
        s.exit(20, READ, 8);
        s.enter(20, WRITE, 6);
        s.wake(20, 30);
        s.exit(20, WRITE, 8);
        s.enter(20, READ, 5);
        s.exit(20, READ, 8);
    }
    let g = graph(&s.evs, &cfg);
    assert_eq!(g.counts.get(Counter::SplitPeer), 0, "{:#?}", g.segments);
    assert_eq!(
        ChannelEnd::socket(51, 52).connection(),
        ChannelEnd::socket(52, 51).connection()
    );
    assert_ne!(
        ChannelEnd::socket(51, 52).connection(),
        ChannelEnd::socket(51, 53).connection()
    );
}

/// What one object key outputs for `evs`: its pairs and its hints to the joins.
fn object_outputs(evs: &[Event], key: Key) -> Vec<Output> {
    let cfg = RulesConfig::default();
    let mut state = KeyState::new(key);
    let mut out = Vec::new();
    for ev in evs {
        route(ev, &cfg, |k, role| {
            if k == key {
                state.on_event(ev, role, &cfg, &mut out);
            }
        });
    }
    out
}

#[test]
fn object_keys_tell_the_joins_which_actions_and_effects_can_pair_no_more() {
    // A timer re-armed before it expires: the first arming can pair no more; the expiry
    // pairs with the second, which is then done; an expiry with nothing armed pairs with
    // nothing.
    let mut s = S::default();
    let timer = |s: &mut S| {
        s.task(
            10,
            EventKind::HrtimerStart {
                timer: 0x5,
                function: 0x9,
                expires: 1,
            },
        )
    };
    let expiry = |s: &mut S| {
        s.irq(
            0,
            Context::HardIrq,
            EventKind::HrtimerExpire {
                timer: 0x5,
                function: 0x9,
            },
        )
    };
    let a1 = timer(&mut s);
    let a2 = timer(&mut s);
    let f1 = expiry(&mut s);
    let f2 = expiry(&mut s);
    assert_eq!(
        object_outputs(&s.evs, Key::Timer(0x5)),
        vec![
            Output::ArmDone(a1),
            Output::Pair(Pair { arm: a2, fire: f1 }),
            Output::ArmDone(a2),
            Output::NoEffect(f2),
        ]
    );

    // A watched flag (sticky): each reader pairs once per write, a repeated read and the
    // writer reading back pair with nothing, and a new write ends the old one.
    let mut s = S::default();
    let access =
        |s: &mut S, tid: i32, write: bool| s.task(tid, EventKind::FlagAccess { addr: 0x40, write });
    let w1 = access(&mut s, 100, true);
    let r1 = access(&mut s, 101, false);
    let r2 = access(&mut s, 101, false);
    let r3 = access(&mut s, 100, false);
    let w2 = access(&mut s, 100, true);
    let r4 = access(&mut s, 101, false);
    assert_eq!(
        object_outputs(&s.evs, Key::Flag(Pid(100), 0x40)),
        vec![
            Output::Pair(Pair { arm: w1, fire: r1 }),
            Output::NoEffect(r2),
            Output::NoEffect(r3),
            Output::ArmDone(w1),
            Output::Pair(Pair { arm: w2, fire: r4 }),
        ]
    );

    // A process-directed signal's generating event also has a direct target: its arming
    // is never reported done.
    let mut s = S::default();
    for _ in 0..2 {
        s.task(
            10,
            EventKind::SignalGenerate {
                sig: 10,
                target: Tid(20),
            },
        );
    }
    assert!(object_outputs(&s.evs, Key::ProcSignal(Tid(20), 10))
        .iter()
        .all(|o| !matches!(o, Output::ArmDone(_))));
}

const POLL_NR: i32 = 7;
const NANOSLEEP: i32 = 35;

/// A thread that waits in `poll` on one set, timing out `timeouts` times, until the thread
/// 51 writes and wakes it (`None`: never woken, it gives up and exits).
fn poll_loop(timeouts: usize, woken: bool, set_of: impl Fn(usize) -> u64) -> Vec<Event> {
    let mut s = S::default();
    s.run(50);
    for i in 0..timeouts {
        s.task(
            50,
            EventKind::SysEnter {
                nr: POLL_NR,
                args: [set_of(i), 1, 200, 0, 0, 0],
            },
        );
        s.block(50);
        s.run(50);
        s.exit(50, POLL_NR, 0);
    }
    if woken {
        s.task(
            50,
            EventKind::SysEnter {
                nr: POLL_NR,
                args: [set_of(timeouts), 1, 200, 0, 0, 0],
            },
        );
        s.block(50);
        s.run(51);
        s.enter(51, WRITE, 9);
        s.wake(51, 50);
        s.exit(51, WRITE, 1);
        s.run(50);
        s.exit(50, POLL_NR, 1);
        s.enter(50, READ, 3);
        s.exit(50, READ, 1);
    }
    s.enter(50, EXIT_GROUP, 0);
    s.task(50, EventKind::Exit);
    s.evs
}

fn short_threshold() -> RulesConfig {
    RulesConfig {
        spin_threshold_ns: 10_000,
        ..RulesConfig::default()
    }
}

#[test]
fn timed_out_waits_on_one_object_until_a_real_wake_up_are_one_logical_long_wait() {
    let g = graph(&poll_loop(4, true, |_| 0x7ffd_0000), &short_threshold());
    let spins: Vec<_> = g.spins.iter().filter(|x| x.tid == Tid(50)).collect();
    assert_eq!(
        spins.len(),
        1,
        "one logical wait, no yield loop: {spins:#?}"
    );
    let sp = spins[0];
    assert_eq!(sp.class, argus_schema::SpinClass::LongWait);
    assert_eq!((sp.segment, sp.last), (seg(50, 0), seg(50, 4)));
    assert_eq!((sp.segments, sp.timeouts), (5, 4));
    assert_eq!(sp.wait_syscall, POLL_NR);
    // The segments name the set they waited on.
    let objects: Vec<_> = g
        .segments
        .iter()
        .filter(|x| x.tid == Tid(50) && x.wait_syscall == POLL_NR)
        .map(|x| x.wait_object)
        .collect();
    assert_eq!(objects.len(), 5);
    assert!(objects.iter().all(|o| o.is_some() && *o == objects[0]));
    // The wake-up that ended it comes from the writer.
    let into_next: Vec<_> = edges_between(&g, 51, 50)
        .into_iter()
        .filter(|e| e.dst == seg(50, 5))
        .collect();
    assert!(
        into_next
            .iter()
            .any(|e| matches!(e.kind, EdgeKind::Wakeup | EdgeKind::Message)),
        "{into_next:#?} {:#?}",
        g.edges
    );
}

#[test]
fn timeouts_on_changing_objects_or_sleeps_are_no_logical_wait() {
    // Another set each time: no two waits are on the same object.
    let g = graph(
        &poll_loop(4, true, |i| 0x7ffd_0000 + 64 * i as u64),
        &short_threshold(),
    );
    assert!(
        g.spins
            .iter()
            .all(|x| x.timeouts == 0 && x.class != argus_schema::SpinClass::LongWait),
        "{:#?}",
        g.spins
    );
    // A sleep loop waits on nothing: a yield loop, as before.
    let mut s = S::default();
    s.run(50);
    for _ in 0..5 {
        s.enter(50, NANOSLEEP, 0x1000);
        s.block(50);
        s.run(50);
        s.exit(50, NANOSLEEP, 0);
    }
    s.enter(50, EXIT_GROUP, 0);
    s.task(50, EventKind::Exit);
    let g = graph(&s.evs, &short_threshold());
    let spins: Vec<_> = g.spins.iter().filter(|x| x.tid == Tid(50)).collect();
    assert_eq!(spins.len(), 1, "{spins:#?}");
    assert_eq!(spins[0].class, argus_schema::SpinClass::RepeatedYield);
    assert_eq!(spins[0].timeouts, 0);
}

#[test]
fn a_logical_wait_that_only_times_out_is_still_one_long_wait() {
    let g = graph(&poll_loop(5, false, |_| 0x7ffd_0000), &short_threshold());
    let spins: Vec<_> = g.spins.iter().filter(|x| x.tid == Tid(50)).collect();
    assert_eq!(spins.len(), 1, "{spins:#?}");
    assert_eq!(spins[0].class, argus_schema::SpinClass::LongWait);
    assert_eq!((spins[0].segments, spins[0].timeouts), (5, 5));
}

const FCNTL: i32 = 72;
const FLOCK: i32 = 73;
const F_WRLCK: u8 = 1;
const F_UNLCK: u8 = 2;

/// File-lock records on top of the shared stream builder.
trait Locks {
    fn lock(&mut self, tid: i32, ino: u64, flock: bool, lock_type: u8, ret: i32);
    fn try_lock_sleep(&mut self, tid: i32);
    fn try_lock(&mut self, tid: i32, ret: i32);
}

impl Locks for S {
    /// The kernel's record of a lock operation of `tid` on inode `ino` of device 8:1
    /// (`filelock:posix_lock_inode`, or `flock_lock_inode` when `flock`).
    fn lock(&mut self, tid: i32, ino: u64, flock: bool, lock_type: u8, ret: i32) {
        self.task(
            tid,
            EventKind::FileLock {
                inode: ino,
                dev: (8 << 20) | 1,
                flock,
                lock_type,
                ret,
            },
        );
    }
    /// The short sleep after a refused attempt.
    fn try_lock_sleep(&mut self, tid: i32) {
        self.enter(tid, NANOSLEEP, 0);
        self.block(tid);
        self.irq(0, Context::HardIrq, EventKind::IrqEntry { irq: 0 });
        self.irq(0, Context::HardIrq, EventKind::Waking { target: Tid(tid) });
        self.irq(0, Context::HardIrq, EventKind::IrqExit { irq: 0 });
        self.run(tid);
        self.exit(tid, NANOSLEEP, 0);
    }
    /// One turn of a lock retry loop of `tid` on inode 5: `fcntl(F_SETLK)` answered `ret`,
    /// then, when refused, a short sleep.
    fn try_lock(&mut self, tid: i32, ret: i32) {
        self.enter(tid, FCNTL, 4);
        self.lock(tid, 5, false, F_WRLCK, ret);
        self.exit(tid, FCNTL, i64::from(ret));
        if ret != 0 {
            self.enter(tid, NANOSLEEP, 0);
            self.block(tid);
            self.irq(0, Context::HardIrq, EventKind::IrqEntry { irq: 0 });
            self.irq(0, Context::HardIrq, EventKind::Waking { target: Tid(tid) });
            self.irq(0, Context::HardIrq, EventKind::IrqExit { irq: 0 });
            self.run(tid);
            self.exit(tid, NANOSLEEP, 0);
        }
    }
}

#[test]
fn a_refused_lock_retry_loop_links_to_the_holder_and_its_success_to_the_release() {
    let cfg = RulesConfig::default();
    let mut s = S::default();
    // 701 takes the lock, 801 retries three times, 701 releases, 801 gets it.
    s.run(701);
    s.lock(701, 5, false, F_WRLCK, 0);
    s.enter(701, NANOSLEEP, 0);
    s.block(701);
    s.run(801);
    for ret in [-11, -13, -11] {
        s.try_lock(801, ret);
    }
    // 901's refused attempt on another file (inode 6) meets nobody's lock here; a flock
    // of 901 on inode 5 never conflicts with the record locks.
    s.run(901);
    s.lock(901, 6, false, F_WRLCK, -11);
    s.lock(901, 5, true, F_WRLCK, -11);
    s.irq(0, Context::HardIrq, EventKind::Waking { target: Tid(701) });
    s.run(701);
    s.exit(701, NANOSLEEP, 0);
    s.lock(701, 5, false, F_UNLCK, 0);
    s.run(801);
    s.try_lock(801, 0);
    let g = graph(&s.evs, &cfg);
    let lock: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::LockFile)
        .map(|e| (e.src, e.dst, e.strength))
        .collect();
    // The three refusals meet 701's lock (its first segment); the success follows its
    // unlock (its second segment). 801's segments: one per refused attempt and sleep.
    assert_eq!(
        lock,
        vec![
            (seg(701, 0), seg(801, 0), Strength::Boosted),
            (seg(701, 0), seg(801, 1), Strength::Boosted),
            (seg(701, 0), seg(801, 2), Strength::Boosted),
            (seg(701, 1), seg(801, 3), Strength::Boosted),
        ],
        "{:#?}",
        g.edges
    );
    assert!(edges_between(&g, 701, 901).is_empty() && edges_between(&g, 801, 901).is_empty());
}

#[test]
fn a_release_at_exit_links_from_the_holders_last_segment() {
    let mut s = S::default();
    s.run(701);
    s.lock(701, 5, false, F_WRLCK, 0);
    s.run(801);
    s.try_lock(801, -11);
    s.run(701);
    s.enter(701, EXIT_GROUP, 0);
    s.task(701, EventKind::Exit);
    // The files are closed after the exit record: the kernel releases the lock.
    s.lock(701, 5, false, F_UNLCK, 0);
    s.run(801);
    s.try_lock(801, 0);
    let g = graph(&s.evs, &RulesConfig::default());
    let lock: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::LockFile)
        .map(|e| (e.src, e.dst))
        .collect();
    assert_eq!(
        lock,
        vec![(seg(701, 0), seg(801, 0)), (seg(701, 0), seg(801, 1))],
        "{:#?}",
        g.edges
    );
}

#[test]
fn a_blocked_flock_is_woken_by_the_unlock_as_a_strong_lock_edge() {
    let mut s = S::default();
    s.run(701);
    s.enter(701, FLOCK, 3);
    s.lock(701, 5, true, F_WRLCK, 0);
    s.exit(701, FLOCK, 0);
    s.run(801);
    s.enter(801, FLOCK, 4);
    s.lock(801, 5, true, F_WRLCK, 1);
    s.block(801);
    s.run(701);
    s.enter(701, FLOCK, 3);
    s.lock(701, 5, true, F_UNLCK, 0);
    s.wake(701, 801);
    s.exit(701, FLOCK, 0);
    s.run(801);
    s.lock(801, 5, true, F_WRLCK, 0);
    s.exit(801, FLOCK, 0);
    let g = graph(&s.evs, &RulesConfig::default());
    let e: Vec<_> = edges_between(&g, 701, 801)
        .into_iter()
        .filter(|e| e.kind != EdgeKind::WaitWake)
        .map(|e| (e.kind, e.strength, e.dst))
        .collect();
    // Only the wake-up: the lock granted after blocking is no retry.
    assert_eq!(
        e,
        vec![(EdgeKind::LockFile, Strength::Strong, seg(801, 1))],
        "{:#?}",
        g.edges
    );
}

#[test]
fn a_known_unlock_is_no_holder_once_someone_else_locked() {
    // 700 locks and unlocks, 800 locks, then 700 tries again and is refused: the holder is
    // 800, not 700's own unlock or anything before it.
    let mut s = S::default();
    s.run(701);
    s.lock(701, 5, true, F_WRLCK, 0);
    s.lock(701, 5, true, F_UNLCK, 0);
    s.run(801);
    s.lock(801, 5, true, F_WRLCK, 0);
    s.run(701);
    s.lock(701, 5, true, F_WRLCK, -11);
    let g = graph(&s.evs, &RulesConfig::default());
    let lock: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::LockFile)
        .map(|e| (e.src.tid(), e.dst.tid()))
        .collect();
    assert_eq!(lock, vec![(Tid(801), Tid(701))], "{:#?}", g.edges);
}

#[test]
fn a_lock_retry_loop_with_long_sleeps_is_one_repeated_yield() {
    let cfg = RulesConfig {
        spin_threshold_ns: 1_000_000_000,
        ..RulesConfig::default()
    };
    let mut s = S::default();
    s.run(701);
    s.lock(701, 5, false, F_WRLCK, 0);
    s.run(801);
    // Two refused attempts, each followed by a 1.2 s sleep (longer than the threshold),
    // then the lock.
    for _ in 0..2 {
        s.enter(801, FCNTL, 4);
        s.lock(801, 5, false, F_WRLCK, -11);
        s.exit(801, FCNTL, -11);
        s.enter(801, NANOSLEEP, 0);
        s.block(801);
        s.ts += 1_200_000_000;
        s.irq(0, Context::HardIrq, EventKind::Waking { target: Tid(801) });
        s.run(801);
        s.exit(801, NANOSLEEP, 0);
    }
    s.try_lock(801, 0);
    let g = graph(&s.evs, &cfg);
    let runs: Vec<_> = g
        .spins
        .iter()
        .filter(|x| x.tid == Tid(801) && x.class == SpinClass::RepeatedYield)
        .map(|x| (x.segment, x.last, x.segments))
        .collect();
    assert_eq!(runs, vec![(seg(801, 0), seg(801, 1), 2)], "{:#?}", g.spins);
    // The same sleeps without refused attempts are two long sleeps, no loop.
    let mut evs: Vec<Event> = s
        .evs
        .iter()
        .filter(|e| !matches!(e.kind, EventKind::FileLock { .. }))
        .cloned()
        .collect();
    for (i, e) in evs.iter_mut().enumerate() {
        e.seq = i as u64;
    }
    let plain = graph(
        &evs,
        &RulesConfig {
            spin_threshold_ns: 1_000_000_000,
            ..RulesConfig::default()
        },
    );
    assert!(plain
        .spins
        .iter()
        .all(|x| x.class != SpinClass::RepeatedYield));
}

#[test]
fn a_close_by_a_process_that_holds_nothing_is_no_release() {
    // 700 locks; its child 710 closes the inherited descriptor at exec (the kernel records
    // a release by 710, which held nothing); 800 is refused, then gets the lock after 700's
    // real release. Every lock-file edge comes from 700.
    let mut s = S::default();
    s.run(701);
    s.lock(701, 5, false, F_WRLCK, 0);
    s.run(711);
    s.lock(711, 5, false, F_UNLCK, 0);
    s.run(801);
    // Each refused attempt of 800 is followed by its own closes (releases of nothing).
    for _ in 0..2 {
        s.enter(801, FCNTL, 4);
        s.lock(801, 5, false, F_WRLCK, -11);
        s.exit(801, FCNTL, -11);
        s.lock(801, 5, false, F_UNLCK, 0);
        s.lock(801, 5, false, F_UNLCK, 0);
        s.try_lock_sleep(801);
    }
    s.run(701);
    s.lock(701, 5, false, F_UNLCK, 0);
    s.run(801);
    s.try_lock(801, 0);
    let g = graph(&s.evs, &RulesConfig::default());
    let lock: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::LockFile)
        .map(|e| (e.src.tid(), e.dst))
        .collect();
    assert_eq!(
        lock,
        vec![
            (Tid(701), seg(801, 0)),
            (Tid(701), seg(801, 1)),
            (Tid(701), seg(801, 2))
        ],
        "{:#?}",
        g.edges
    );
}

/// Some kernels do not trace the switch from a secondary CPU's idle task: a woken task's
/// own records (here a syscall's exit) say it runs, and its time on CPU counts from there.
#[test]
fn a_task_running_without_a_recorded_switch_in_is_on_cpu_from_its_first_own_record() {
    let mut s = S::default();
    s.run(50);
    s.enter(50, FUTEX, 0x10);
    s.block(50);
    s.wake(51, 50);
    // No switch to 50 is recorded; it returns from the futex and computes 5 ms.
    s.exit(50, FUTEX, 0);
    s.ts += 5_000_000;
    s.enter(50, FUTEX, 0x10);
    s.block(50);
    let g = graph(&s.evs, &RulesConfig::default());
    let second = g
        .segments
        .iter()
        .find(|x| x.id == seg(50, 1))
        .expect("the segment after the wake-up");
    assert!(
        (5_000_000..5_010_000).contains(&second.on_cpu_ns),
        "{second:#?}"
    );
}

/// Lock owners the kernel names (`lock_owner` records, docs/rules.md "Lock owners"): a strong
/// edge from the owner's segment at that moment — blocked in a wait of its own, or running —
/// to the segment the waiter's wait ends. None for an owner never seen, nor for the waiter
/// itself. (`graph` checks the dataflow against the reference, 1 and 2 workers.)
#[test]
fn a_lock_owner_record_links_the_owners_segment_to_the_waiters() {
    let owner = |s: &mut S, tid: i32, of: i32| {
        s.task(
            tid,
            EventKind::LockOwner {
                owner: Tid(of),
                lock: 0,
            },
        )
    };
    let mut s = S::default();
    s.run(902);
    s.run(901);
    s.enter(901, FUTEX, 0);
    owner(&mut s, 901, 902);
    s.block(901);
    s.run(900);
    s.enter(900, FUTEX, 0);
    owner(&mut s, 900, 901);
    owner(&mut s, 900, 777);
    owner(&mut s, 900, 900);
    s.block(900);
    s.run(902);
    let g = graph(&s.evs, &RulesConfig::default());
    let mut owners: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::LockOwner)
        .map(|e| (e.src, e.dst, e.strength))
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        vec![
            (seg(901, 0), seg(900, 0), Strength::Strong),
            (seg(902, 0), seg(901, 0), Strength::Strong),
        ],
        "{:#?}",
        g.edges
    );
}
