//! Cluster mode: `argus build` split over two timely processes on loopback gives the same
//! graph as one process. Runs on the bundled recording, so it needs no tracing rights.

use crate::common::{bundled_trace, run};
use argus_sinks::read_snapshot_tables;
use std::path::Path;
use std::process::Stdio;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn graph(
    snapshot: &Path,
) -> (
    Vec<argus_schema::Segment>,
    Vec<argus_schema::CausalEdge>,
    Vec<argus_schema::Spin>,
) {
    let mut s = read_snapshot_tables(snapshot, false).expect("snapshot reads");
    s.segments.sort();
    s.edges.sort();
    s.spins.sort();
    (s.segments, s.edges, s.spins)
}

#[test]
fn two_processes_on_loopback_build_the_same_snapshot_as_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let trace = bundled_trace(tmp.path());
    let trace = trace.to_str().expect("utf-8");

    let one = tmp.path().join("one");
    let out = run(&["build", trace, "-o", one.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let hosts = tmp.path().join("hosts");
    std::fs::write(
        &hosts,
        format!(
            "# process 0 feeds the input\n127.0.0.1:{}\n127.0.0.1:{}\n",
            free_port(),
            free_port()
        ),
    )
    .expect("hosts file");
    let two = tmp.path().join("two");
    let unused = tmp.path().join("unused");
    let cluster = |id: &str, out: &Path| {
        crate::common::argus()
            .args(["build", trace, "-o"])
            .arg(out)
            .args([
                "--workers",
                "2",
                "--processes",
                "2",
                "--process-id",
                id,
                "--hosts",
            ])
            .arg(&hosts)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("argus build runs")
    };
    let p1 = cluster("1", &unused);
    let p0 = cluster("0", &two);
    let o0 = p0.wait_with_output().expect("process 0 exits");
    let o1 = p1.wait_with_output().expect("process 1 exits");
    assert!(
        o0.status.success(),
        "process 0: {}",
        String::from_utf8_lossy(&o0.stderr)
    );
    assert!(
        o1.status.success(),
        "process 1: {}",
        String::from_utf8_lossy(&o1.stderr)
    );
    assert!(!unused.exists(), "only process 0 writes a snapshot");

    let (s1, e1, p1) = graph(&one);
    let (s2, e2, p2) = graph(&two);
    assert!(!s1.is_empty() && !e1.is_empty() && !p1.is_empty());
    assert_eq!(s1, s2, "segments");
    assert_eq!(e1, e2, "edges");
    assert_eq!(p1, p2, "spins");
}

#[test]
fn cluster_flags_are_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hosts = tmp.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1:1\n").expect("hosts");
    let h = hosts.to_str().expect("utf-8");
    for (args, want) in [
        (
            vec!["--processes", "2"],
            "--processes > 1 needs --hosts FILE",
        ),
        (
            vec!["--processes", "2", "--hosts", h],
            "lists 1 addresses for --processes 2",
        ),
        (
            vec!["--processes", "2", "--process-id", "2", "--hosts", h],
            "must be below",
        ),
    ] {
        let mut all = vec!["build", "/nonexistent", "-o", "/nonexistent-out"];
        all.extend(args);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{want:?} in {stderr}");
    }
}
