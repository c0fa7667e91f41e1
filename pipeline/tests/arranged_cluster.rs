//! The oracle check of the arranged graph (`common/arranged_check.rs`) in a 2-process timely
//! cluster on loopback, the spins derived too: each process holds only its shard of the
//! arrangements, and the answer is the union over the processes (`arranged` module docs,
//! "Sharding").
//!
//! ```text
//!  test (parent) ── plan.json (epochs, questions) ──┬─► this binary, process 0 (feeds the input)
//!     ▲  free ports 127.0.0.1:p0, :p1 in the env    └─► this binary, process 1
//!     │                                                  │ one timely worker each, connected
//!     └── answers-0.json, answers-1.json ◄───────────────┘ over TCP: its shard at each epoch
//!  unites the shards, checks them against the sink and the reference at every epoch
//! ```
//!
//! The test runs its own binary again (`--exact` on its own name) with the environment
//! variables below naming the process; that run takes the child branch. A child that fails,
//! or a cluster that does not finish in [`TIMEOUT`], fails the test with the children's
//! output.

mod common;

use argus_pipeline::arranged::SliceConfig;
use common::arranged_check::{arranged, plan, verify, Answers, Epoch, Questions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The child's process index (`0` or `1`).
const PROCESS: &str = "ARGUS_TEST_CLUSTER_PROCESS";
/// The processes' addresses, `host:port` separated by commas, in index order.
const HOSTS: &str = "ARGUS_TEST_CLUSTER_HOSTS";
/// The plan the child reads (JSON: the slices' look-back, whether spins are derived, the
/// epochs and the questions).
const PLAN: &str = "ARGUS_TEST_CLUSTER_PLAN";
/// Where the child writes its workers' answers (JSON).
const ANSWERS: &str = "ARGUS_TEST_CLUSTER_ANSWERS";

/// How long the cluster may take (it takes a few seconds; the rest is for a loaded machine).
const TIMEOUT: Duration = Duration::from_secs(180);

/// The test's name, which the children are run with (a child that finds no test by it writes
/// no answers, and the parent fails reading them).
const NAME: &str =
    "arranged_graph_and_slices_equal_the_sink_and_the_reference_every_epoch_two_processes";

#[test]
fn arranged_graph_and_slices_equal_the_sink_and_the_reference_every_epoch_two_processes() {
    if let Ok(process) = std::env::var(PROCESS) {
        child(&process);
        return;
    }
    // The stream with spin loops, the spins derived: every arrangement and derived collection.
    let plan = plan(13, 4000, 173, SliceConfig::default(), true);
    let tmp = tempfile::tempdir().expect("tempdir");
    let plan_file = tmp.path().join("plan.json");
    let json = serde_json::to_vec(&(
        plan.cfg.lookback_ns,
        plan.spins,
        &*plan.epochs,
        &*plan.questions,
    ))
    .expect("plan serializes");
    std::fs::write(&plan_file, json).expect("plan written");
    let hosts = format!("127.0.0.1:{},127.0.0.1:{}", free_port(), free_port());

    let mut children: Vec<Cluster> = (0..2)
        .map(|i| Cluster::spawn(i, &hosts, &plan_file, tmp.path()))
        .collect();
    wait(&mut children);
    let seen: Vec<Vec<Answers>> = children
        .iter()
        .flat_map(|c| {
            let json = std::fs::read(&c.answers).expect("the child wrote its answers");
            let answers: Vec<Vec<Answers>> =
                serde_json::from_slice(&json).expect("the answers deserialize");
            assert_eq!(answers.len(), 1, "one worker per process");
            answers
        })
        .collect();
    let cov = verify(&plan, &seen, "2 processes");
    assert!(cov.slices > 0 && cov.largest > 10, "the slices are checked");
    assert!(
        cov.count((argus_schema::SpinClass::RepeatedYield, true, true)) > 0
            && cov.count((argus_schema::SpinClass::LongWait, false, true)) > 0,
        "the derived spins are checked on runs: {:?}",
        cov.spins.keys().collect::<Vec<_>>()
    );
    // Each process holds a shard, not a copy: the union checked above is split between them.
    let (last, whole) = (
        seen[0].len() - 1,
        plan.graphs.last().map(|g| g.segments.len()),
    );
    for (p, answers) in seen.iter().enumerate() {
        let rows = answers[last].snapshot.segments_by_id.len();
        assert!(
            rows > 0 && Some(rows) < whole,
            "process {p} holds {rows} of {whole:?} segments"
        );
    }
}

/// The child branch: runs process `process` of the cluster on the plan, writes its answers.
fn child(process: &str) {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let process: usize = process.parse().expect("the process index is a number");
    let addresses: Vec<String> = var(HOSTS).split(',').map(str::to_string).collect();
    let json = std::fs::read(var(PLAN)).expect("the plan reads");
    let (lookback_ns, spins, epochs, questions): (u64, bool, Vec<Epoch>, Vec<Questions>) =
        serde_json::from_slice(&json).expect("the plan deserializes");
    let config = timely::Config {
        communication: timely::CommunicationConfig::Cluster {
            threads: 1,
            process,
            addresses,
            report: false,
            zerocopy: false,
        },
        worker: timely::WorkerConfig::default(),
    };
    let answers = arranged(
        Arc::new(epochs),
        Arc::new(questions),
        config,
        SliceConfig { lookback_ns },
        spins,
    );
    let json = serde_json::to_vec(&answers).expect("the answers serialize");
    std::fs::write(var(ANSWERS), json).expect("the answers are written");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// One child process of the cluster, its output going to a file.
struct Cluster {
    index: usize,
    child: Child,
    output: PathBuf,
    answers: PathBuf,
}

impl Cluster {
    fn spawn(index: usize, hosts: &str, plan: &Path, dir: &Path) -> Cluster {
        let output = dir.join(format!("output-{index}.txt"));
        let answers = dir.join(format!("answers-{index}.json"));
        let out = std::fs::File::create(&output).expect("output file");
        let err = out.try_clone().expect("output file");
        let child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
            .env(PROCESS, index.to_string())
            .env(HOSTS, hosts)
            .env(PLAN, plan)
            .env(ANSWERS, &answers)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("the test binary runs");
        Cluster {
            index,
            child,
            output,
            answers,
        }
    }

    /// What the child printed (the test harness's lines and any panic).
    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_else(|e| format!("(unreadable: {e})"))
    }
}

/// Waits for every child to succeed. Fails with their output when one fails (the others are
/// killed: they would wait for it) or when [`TIMEOUT`] passes.
fn wait(children: &mut [Cluster]) {
    let start = Instant::now();
    let failure = loop {
        let mut running = 0;
        let mut failed = None;
        for c in children.iter_mut() {
            // `try_wait` keeps the status of a child that has exited.
            match c.child.try_wait().expect("waiting for a child") {
                None => running += 1,
                Some(status) if status.success() => {}
                Some(status) => {
                    failed.get_or_insert(format!("process {} failed ({status})", c.index));
                }
            }
        }
        if let Some(why) = failed {
            break why;
        }
        if running == 0 {
            return;
        }
        if start.elapsed() > TIMEOUT {
            break format!("the cluster did not finish in {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for c in children.iter_mut() {
        // Ends only these children; one that has exited already is not an error here.
        let _ = c.child.kill();
        let _ = c.child.wait();
    }
    let outputs: Vec<String> = children
        .iter()
        .map(|c| format!("--- process {} ---\n{}", c.index, c.output()))
        .collect();
    panic!("{failure}\n{}", outputs.join("\n"));
}
