//! `argus debug --slow`: a client's requests to a server process over loopback TCP, one of
//! them far slower (the server computes 300 ms instead of 5): that one is found, no fast one
//! is, and what it waited for is the server's CPU time.

use crate::common::{debug_json_with, live_or_skip, record_command, run};

const SCRIPT: &str = r#"
import json, os, socket, time
def burn(s):
    t = time.time()
    while time.time() - t < s:
        pass
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
server = os.fork()
if server == 0:
    c, _ = srv.accept()
    while True:
        req = c.recv(16)
        if not req or req == b"q":
            os._exit(0)
        burn(0.3 if req == b"slow" else 0.005)
        c.send(b"done")
cl = socket.create_connection(("127.0.0.1", port))
for i in range(30):
    cl.send(b"slow" if i == 12 else b"fast")
    cl.recv(16)
    time.sleep(0.01)
cl.send(b"q")
os.waitpid(server, 0)
print(json.dumps({"client_pid": os.getpid(), "server_pid": server, "slow_index": 12}))
"#;

#[test]
fn the_slow_request_among_thirty_is_found_and_blamed_on_the_server() {
    if !live_or_skip("the_slow_request_among_thirty_is_found_and_blamed_on_the_server") {
        return;
    }
    let rec = record_command(&["python3", "-c", SCRIPT]);
    let client = rec.truth["client_pid"].as_i64().expect("client_pid");
    let server = rec.truth["server_pid"].as_i64().expect("server_pid");
    let (code, j) = debug_json_with(&rec.snapshot, client as i32, &["--slow"]);
    assert_eq!(code, 1, "{j:#}");
    let group = j["groups"]
        .as_array()
        .and_then(|g| {
            g.iter()
                .find(|g| g["syscall"] == "recvfrom" || g["syscall"] == "read")
        })
        .unwrap_or_else(|| panic!("the client's group: {:#}", j["groups"]));
    assert!(group["requests"].as_u64() >= Some(25), "{group:#}");
    // Exactly the slow one: no fast request reported as slow.
    assert_eq!(j["found"], 1, "{:#}", j["groups"]);
    let slow = &j["requests"][0];
    let wait = slow["request"]["wait_ns"].as_u64().expect("wait_ns");
    assert!(
        (250_000_000..2_000_000_000).contains(&wait),
        "the 300 ms request: {wait} ns"
    );
    assert!(
        slow["fast"]["wait_ns"].as_u64() < Some(100_000_000),
        "{:#}",
        slow["fast"]
    );
    // What it waited for that the fast one did not: the server on CPU.
    let extra = &slow["extra"][0];
    assert_eq!(extra["tid"].as_i64(), Some(server), "{:#}", slow["extra"]);
    assert_eq!(extra["state"], "on_cpu", "{extra:#}");
    let root = slow["report"]["root_causes"]
        .as_array()
        .and_then(|r| r.last())
        .expect("a root cause");
    assert_eq!(root["tid"].as_i64(), Some(server), "{:#}", slow["report"]);
}

#[test]
fn slow_needs_the_threads_to_watch() {
    if !live_or_skip("slow_needs_the_threads_to_watch") {
        return;
    }
    let rec = crate::common::chain();
    let snap = rec.snapshot.to_str().expect("utf-8");
    let out = run(&["debug", snap, "--slow"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--pid"), "{err}");
    let out = run(&[
        "debug",
        snap,
        "--pid",
        "1",
        "--slow",
        "--slow-factor",
        "0.5",
    ]);
    assert_eq!(out.status.code(), Some(2));
}
