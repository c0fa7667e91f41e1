//! Slow requests: one request of many took far longer; it is found, compared with a fast
//! one, and what it waited for is named.

use crate::builder::{ms, B};
use argus_diagnose::slow::{slow_requests, SlowConfig};
use argus_diagnose::{AutoOracle, BlameState, DiagnoseConfig};
use argus_schema::{Cpu, EdgeKind, SegmentKind, Strength, Tid};

/// A client sends 12 requests to a server process; the server computes 5 ms for each and
/// replies, except request 7, for which it first waits 400 ms for the disk (an fsync ended
/// by a device interrupt).
fn client_and_server() -> B {
    let mut b = B::new(10_000.0);
    b.thread(10, 10, "client", "client");
    b.thread(20, 20, "server", "server");
    let mut t = 0.0;
    b.task(20, 0.0, 0.01, 0.1, "recvfrom", 0.01);
    let mut client = b.task(10, 0.0, 0.1, 0.0, "recvfrom", 0.05);
    for k in 0..12 {
        let ask = t + 0.05;
        let got = t + 0.1;
        // The server is woken by the request.
        let served = if k == 7 {
            let a = b.task(20, got, got + 0.5, got + 400.5, "fsync", 0.5);
            let disk = b.irq(
                1,
                SegmentKind::HardIrq { irq: 36 },
                got + 400.4,
                got + 400.5,
            );
            let a2 = b.task(20, got + 400.5, got + 400.7, got + 1000.0, "recvfrom", 0.2);
            b.wake(disk, a2, got + 400.5, "");
            (a, a2, got + 400.6)
        } else {
            let a = b.task(20, got, got + 5.05, got + 1000.0, "recvfrom", 5.0);
            (a, a, got + 5.0)
        };
        let (first, replier, reply) = served;
        b.edge(
            client,
            first,
            EdgeKind::Message,
            Strength::Strong,
            ask,
            "sendto",
        );
        b.edge(
            client,
            first,
            EdgeKind::Wakeup,
            Strength::Strong,
            ask,
            "sendto",
        );
        // The client's wait ends with the reply.
        if let Some(s) = b.segments.iter_mut().find(|s| s.id == client) {
            s.end_ns = ms(reply);
            s.wait_start_ns = Some(ms(t + 0.06));
        }
        let next = b.task(10, reply, reply + 0.06, 0.0, "recvfrom", 0.05);
        b.edge(
            replier,
            next,
            EdgeKind::Message,
            Strength::Strong,
            reply,
            "sendto",
        );
        b.edge(
            replier,
            next,
            EdgeKind::Wakeup,
            Strength::Strong,
            reply,
            "sendto",
        );
        client = next;
        // The client thinks 20 ms before its next request.
        t = reply + 20.0;
    }
    // Each segment of a thread ends where its next begins.
    let mut by_tid: Vec<usize> = (0..b.segments.len())
        .filter(|i| b.segments[*i].tid == Tid(20))
        .collect();
    by_tid.sort_by_key(|i| b.segments[*i].start_ns);
    for w in by_tid.windows(2) {
        let next_start = b.segments[w[1]].start_ns;
        b.segments[w[0]].end_ns = next_start;
    }
    let mut c: Vec<usize> = (0..b.segments.len())
        .filter(|i| b.segments[*i].tid == Tid(10))
        .collect();
    c.sort_by_key(|i| b.segments[*i].start_ns);
    for w in c.windows(2) {
        let next_start = b.segments[w[1]].start_ns;
        b.segments[w[0]].end_ns = next_start;
        let s = &mut b.segments[w[0]];
        if s.wait_start_ns.is_some_and(|ws| ws > s.end_ns) {
            s.wait_start_ns = Some(s.start_ns);
        }
    }
    b
}

#[test]
fn the_one_slow_request_is_found_and_what_it_waited_for_named() {
    let b = client_and_server();
    let g = b.graph();
    let cfg = DiagnoseConfig::default();
    let slow = SlowConfig {
        min_ns: ms(50.0).0,
        ..SlowConfig::default()
    };
    let found = slow_requests(&g, &[Tid(10)], &mut AutoOracle, &cfg, &slow).unwrap();
    let group = found
        .groups
        .iter()
        .find(|gr| gr.comm == "client")
        .unwrap_or_else(|| panic!("{:#?}", found.groups));
    assert!(group.requests >= 10, "{group:#?}");
    // Only the slow one: no fast request is reported as slow.
    assert_eq!(found.found, 1, "{:#?}", found.groups);
    let s = &found.requests[0];
    assert!(s.request.wait_ns > ms(390.0).0, "{:#?}", s.request);
    assert!(s.ratio > 20.0);
    let fast = s.fast.as_ref().expect("a fast one compared");
    assert!(fast.wait_ns < ms(10.0).0);
    // What it waited for that the fast one did not: the disk.
    let top = &s.extra[0];
    assert_eq!(
        (top.tid, top.state),
        (Tid::irq(Cpu(1)), BlameState::Device),
        "{:#?}",
        s.extra
    );
    assert!(top.slow_ns > ms(390.0).0 && top.fast_ns == 0);
    // The server's own CPU time is alike in both: not extra.
    assert!(
        s.extra.iter().all(|x| x.state != BlameState::OnCpu),
        "{:#?}",
        s.extra
    );
    let root = s.report.root_causes.last().expect("a root cause");
    assert_eq!(root.tid, Tid::irq(Cpu(1)), "{:#?}", s.report.root_causes);
}
