//! Hangs in real software the project did not write, for the real suite
//! (`tests/real_suite.rs`): `argus workload NAME` runs one of them under `argus record` and
//! prints one JSON line with its ground truth, known by construction:
//!
//! ```json
//! {"workload": "redis-blpop", "program": "redis", "target_pid": 1234, "class": "LongWait",
//!  "root_comm": "sleep", "root_tid": null,
//!  "chain": [{"comm": "redis-server", "pid": 1200, "tid": 1200}, {"comm": "sleep"}],
//!  "allowed": []}
//! ```
//!
//! - `target_pid`: the process to diagnose (its main thread hangs);
//! - `class`: the class the hang must get (`LongWait`, `RepeatedYield`, `LongRunning`);
//! - `root_comm` / `root_tid`: the root cause's thread name, and its thread id when several
//!   threads share the name (server thread pools, Go's threads);
//! - `chain`: the threads on the true causal chain after the hung thread, root last; an
//!   entry with a `tid` is that thread, one without is the only thread of that name in the
//!   scenario (`sleep` run by a shell). `pid` names the entry's process where known;
//! - `allowed`: thread names that may appear on the path without counting as bystanders.
//!
//! The three kinds of hang the suite is about:
//! 1. *the waker's last wait was short*: the thread that releases the hung one was itself
//!    blocked for seconds, then did a few milliseconds of work with a short wait (a disk
//!    flush, a brief hand-off) before answering (`mariadb-rowlock`, `lighttpd-cgi`,
//!    `sqlite-busy`'s commit);
//! 2. *a wait made of timed-out waits*: the hung thread waits with a timeout on the same
//!    objects again and again until the reply comes (`curl`'s poll in `lighttpd-cgi`,
//!    `redis-poll`'s select, `ruby-cv`'s timed condition wait);
//! 3. *a file lock*: `fcntl` locks retried between sleeps (`sqlite-busy`, `apt-lock`) or
//!    blocking (`perl-setlkw`).
//!
//! | name | program | class | root cause |
//! |---|---|---|---|
//! | mariadb-rowlock | MariaDB: an UPDATE waits for a row another client's open transaction holds; that client's SQL arrives from `sh` after `sleep` | LongWait | `sleep` |
//! | mariadb-slowquery | MariaDB: a client waits for `SELECT BENCHMARK(…)` | LongWait | the server's connection thread (`mariadbd`, by tid) computing |
//! | lighttpd-cgi | `curl` (poll with 1 s timeouts) → lighttpd → a `sh` CGI that sleeps, then writes a file with `dd conv=fsync` | LongWait | `sleep` |
//! | redis-blpop | `redis-cli BLPOP` released by another `redis-cli LPUSH` run after `sleep` | LongWait | `sleep` |
//! | redis-poll | `python3` client waiting with `select` 0.25 s timeouts for `DEBUG SLEEP` on redis | LongWait | `redis-server`'s main thread sleeping |
//! | go-mutex | Go: the main goroutine (locked to the main thread) waits on a `sync.Mutex` a goroutine locked to another thread holds while computing | LongWait | that Go thread (by tid) |
//! | ruby-cv | Ruby: the main thread waits on a ConditionVariable with 0.25 s timeouts; the `rb-worker` thread sleeps, then signals | LongWait | `rb-worker` |
//! | sqlite-busy | sqlite3 CLI with `.timeout`: retries the database's fcntl lock between sleeps while another sqlite3 holds it in a transaction whose COMMIT comes from `sh` after `sleep` | RepeatedYield | `sleep` |
//! | apt-lock | `apt-get` (`DPkg::Lock::Timeout`, a private dpkg directory) retries the dpkg frontend lock with 1 s sleeps while a `perl` holder runs `sleep` under it | RepeatedYield | `sleep` |
//! | perl-setlkw | perl blocks in `fcntl(F_SETLKW)` on a file a `python3` holder (`py-holder`) locked before computing | LongWait | `py-holder` |
//!
//! Latency spikes for the latency suite (`tests/latency_suite.rs`, `argus debug --slow`):
//! not hangs but one slow request among fast ones; their truth adds `slow_ns` (the slow
//! request's latency as the client timed it) and `slow_requests` (how many are slow).
//!
//! | name | program | the slow request | root cause |
//! |---|---|---|---|
//! | redis-spike | a `python3` client's 21st GET of 40 waits while Redis's event loop runs another client's (`redis-cli`) Lua loop, ~0.3 s | its GET | `redis-server` on CPU |
//! | mariadb-convoy | a `mariadb` client's UPDATE, one of 40, waits ~0.3 s for a row lock another client's transaction holds through `sleep` | its UPDATE | `sleep` |
//! | java-gc | a `python3` client's 21st GET of 40 to a JDK `HttpServer` waits while the JVM's `VM Thread` runs the full collection (serial collector, ~0.3 s) another request's `System.gc()` asked for | its GET | `VM Thread` on CPU |
//!
//! Servers run in private temporary directories and are stopped on every exit path (a drop
//! guard). MariaDB is slow to create: when `ARGUS_REAL_MARIADB_SOCKET` names the socket of
//! a running server (the test suite starts one before recording), the MariaDB hangs use it;
//! otherwise they start their own.

use crate::Workload;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The real-software hangs: name, one line on what happens.
pub const HANGS: &[Workload] = &[
    Workload::real(
        "mariadb-rowlock",
        "a MariaDB UPDATE waits for a row lock held by a transaction whose COMMIT comes after sleep",
        mariadb_rowlock,
    ),
    Workload::real(
        "mariadb-slowquery",
        "a MariaDB client waits for a SELECT BENCHMARK(...) its connection thread computes",
        mariadb_slowquery,
    ),
    Workload::real(
        "lighttpd-cgi",
        "curl waits for lighttpd, which waits for a sh CGI that sleeps, then fsyncs a file",
        lighttpd_cgi,
    ),
    Workload::real(
        "redis-blpop",
        "redis-cli BLPOP waits until another redis-cli pushes, after sleep",
        redis_blpop,
    ),
    Workload::real(
        "redis-poll",
        "a python3 client selects with 0.25 s timeouts while redis-server runs DEBUG SLEEP",
        redis_poll,
    ),
    Workload::real(
        "redis-spike",
        "a python3 client's GET, one of 40, waits while redis-server runs another client's slow EVAL (latency)",
        redis_spike,
    ),
    Workload::real(
        "mariadb-convoy",
        "a mariadb client's UPDATE, one of 40, waits for a row lock another client's transaction holds through sleep (latency)",
        mariadb_convoy,
    ),
    Workload::real(
        "java-gc",
        "a python3 client's GET, one of 40, waits while a Java HTTP server's VM Thread runs a full GC another request asked for (latency)",
        java_gc,
    ),
    Workload::real(
        "go-mutex",
        "a Go main thread waits on a sync.Mutex a goroutine on another thread holds while computing",
        go_mutex,
    ),
    Workload::real(
        "ruby-cv",
        "a Ruby main thread waits on a ConditionVariable with timeouts; rb-worker sleeps, then signals",
        ruby_cv,
    ),
    Workload::real(
        "sqlite-busy",
        "sqlite3 retries a locked database between sleeps (.timeout) while another sqlite3 holds it",
        sqlite_busy,
    ),
    Workload::real(
        "apt-lock",
        "apt-get retries the dpkg frontend lock with 1 s sleeps while perl holds it running sleep",
        apt_lock,
    ),
    Workload::real(
        "perl-setlkw",
        "perl blocks in fcntl(F_SETLKW) on a file a python3 holder locked before computing",
        perl_setlkw,
    ),
];

/// The environment variable naming a running MariaDB server's socket.
pub const MARIADB_SOCKET_ENV: &str = "ARGUS_REAL_MARIADB_SOCKET";

/// Runs `f`, real hang `name`, for about `secs` seconds in a scratch directory, and prints
/// the truth it returns (with the workload's name).
pub(crate) fn run(name: &str, secs: f64, f: fn(&Path, f64) -> Result<Value>) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("argus-real-")
        .tempdir()
        .context("creating a scratch directory")?;
    let mut truth = f(dir.path(), secs)?;
    truth["workload"] = json!(name);
    println!("{truth}");
    Ok(())
}

/// One thread of the true chain.
fn thread(comm: &str, pid: Option<u32>, tid: Option<u32>) -> Value {
    let mut v = json!({ "comm": comm });
    if let Some(p) = pid {
        v["pid"] = json!(p);
    }
    if let Some(t) = tid {
        v["tid"] = json!(t);
    }
    v
}

/// A single-threaded process of the chain: its pid is its tid.
fn process(comm: &str, pid: u32) -> Value {
    thread(comm, Some(pid), Some(pid))
}

fn truth(program: &str, target: u32, class: &str, root_comm: &str, chain: Vec<Value>) -> Value {
    json!({
        "program": program,
        "target_pid": target,
        "class": class,
        "root_comm": root_comm,
        "root_tid": chain.last().and_then(|c| c.get("tid")).cloned().unwrap_or(Value::Null),
        "chain": chain,
        "allowed": [],
    })
}

fn sleep(s: f64) {
    thread::sleep(Duration::from_secs_f64(s));
}

fn spawn(c: &mut Command, what: &str) -> Result<Child> {
    c.spawn()
        .with_context(|| format!("starting {what} (is it installed?)"))
}

/// Waits for `c`, fails if it failed, and returns what it wrote on its piped stdout.
fn finish(mut c: Child, what: &str) -> Result<String> {
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        o.read_to_string(&mut out)
            .with_context(|| format!("reading the output of {what}"))?;
    }
    let st = c.wait().with_context(|| format!("waiting for {what}"))?;
    if !st.success() {
        bail!("{what} failed: {st}");
    }
    Ok(out)
}

fn run_ok(c: &mut Command, what: &str) -> Result<String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > timeout {
            bail!("{what} was not ready after {timeout:?}");
        }
        sleep(0.02);
    }
    Ok(())
}

/// A server process, killed and reaped when dropped (also on every error path).
pub struct Server {
    child: Child,
    what: &'static str,
}

impl Server {
    fn start(c: &mut Command, what: &'static str) -> Result<Server> {
        Ok(Server {
            child: spawn(c.stdin(Stdio::null()), what)?,
            what,
        })
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait().context("polling a server")? {
            bail!("{} exited early: {st}", self.what);
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first so servers shut down cleanly, then SIGKILL.
        // SAFETY: kill has no memory preconditions; the pid is our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            sleep(0.02);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// MariaDB

/// A private MariaDB server: data directory and socket under `dir`, no networking.
pub fn start_mariadb(dir: &Path) -> Result<(Server, PathBuf)> {
    let data = dir.join("data");
    let sock = dir.join("mariadb.sock");
    run_ok(
        Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]),
        "mariadb-install-db",
    )?;
    let mut server = Server::start(
        Command::new("mariadbd")
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--pid-file={}", dir.join("mariadb.pid").display()))
            .arg(format!("--log-error={}", dir.join("mariadb.err").display()))
            .args([
                "--skip-networking",
                "--performance-schema=ON",
                "--innodb-buffer-pool-size=16M",
                "--skip-log-bin",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "mariadbd",
    )?;
    let mut alive = Ok(());
    wait_until("mariadbd", Duration::from_secs(30), || {
        alive = server.check_alive();
        alive.is_err() || std::os::unix::net::UnixStream::connect(&sock).is_ok()
    })?;
    alive?;
    Ok((server, sock))
}

fn mariadb(sock: &Path) -> Command {
    let mut c = Command::new("mariadb");
    c.arg("--no-defaults")
        .arg(format!("--socket={}", sock.display()))
        .args(["-uroot", "-N", "-B"]);
    c
}

/// The server's socket: `ARGUS_REAL_MARIADB_SOCKET`, or a server of our own under `dir`.
fn mariadb_socket(dir: &Path) -> Result<(Option<Server>, PathBuf)> {
    if let Some(s) = std::env::var_os(MARIADB_SOCKET_ENV) {
        return Ok((None, PathBuf::from(s)));
    }
    let (server, sock) = start_mariadb(dir)?;
    Ok((Some(server), sock))
}

fn mariadbd_pid(sock: &Path) -> Result<u32> {
    // The server's own pid: the process holding the socket's peer end.
    let s = std::os::unix::net::UnixStream::connect(sock)
        .with_context(|| format!("connecting to {}", sock.display()))?;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes a ucred of `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 || cred.pid <= 0 {
        bail!("SO_PEERCRED on {} failed", sock.display());
    }
    Ok(cred.pid as u32)
}

/// The SQL that prints the connection thread's OS thread id.
const MARIADB_TID: &str = "SELECT THREAD_OS_ID FROM performance_schema.threads \
                           WHERE PROCESSLIST_ID = CONNECTION_ID();";

fn first_number(out: &str, what: &str) -> Result<u32> {
    out.lines()
        .find_map(|l| l.trim().parse().ok())
        .with_context(|| format!("{what} printed no thread id: {out:?}"))
}

fn mariadb_table(sock: &Path) -> Result<()> {
    run_ok(
        mariadb(sock).arg("-e").arg(
            "CREATE DATABASE IF NOT EXISTS argus; \
             CREATE TABLE IF NOT EXISTS argus.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; \
             REPLACE INTO argus.t VALUES (1, 0), (2, 0);",
        ),
        "mariadb (creating the table)",
    )?;
    Ok(())
}

/// Client A (`mariadb`, fed by `sh`) opens a transaction, updates row 1, and commits only
/// after `sleep`; client B's UPDATE of row 1 waits for the row lock. B's connection thread is
/// released by A's connection thread's commit, then commits itself (a short log write)
/// before answering B.
fn mariadb_rowlock(dir: &Path, secs: f64) -> Result<Value> {
    let (_server, sock) = mariadb_socket(dir)?;
    let server_pid = mariadbd_pid(&sock)?;
    mariadb_table(&sock)?;
    let head = 0.3;
    let mut feeder = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo \"{MARIADB_TID} BEGIN; UPDATE argus.t SET v = v + 1 WHERE id = 1;\"; \
                 sleep {}; echo 'COMMIT;'",
                secs + head
            ))
            .stdout(Stdio::piped()),
        "sh",
    )?;
    let feed = feeder.stdout.take().context("sh stdout")?;
    let a = spawn(
        mariadb(&sock)
            .stdin(Stdio::from(feed))
            .stdout(Stdio::piped()),
        "mariadb (client A)",
    )?;
    let a_pid = a.id();
    sleep(head);
    let b = spawn(
        mariadb(&sock)
            .arg("-e")
            .arg(format!(
                "{MARIADB_TID} UPDATE argus.t SET v = v + 2 WHERE id = 1;"
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "mariadb (client B)",
    )?;
    let b_pid = b.id();
    let b_tid = first_number(&finish(b, "mariadb (client B)")?, "client B")?;
    let a_tid = first_number(&finish(a, "mariadb (client A)")?, "client A")?;
    let sh_pid = feeder.id();
    finish(feeder, "sh")?;
    Ok(rowlock_truth(
        server_pid, b_pid, b_tid, a_tid, a_pid, sh_pid,
    ))
}

/// The truth of client B's wait for a row lock client A holds until `sh` feeds it COMMIT
/// after `sleep`: B's connection thread, A's, client A, its `sh`, the `sleep`.
fn rowlock_truth(
    server_pid: u32,
    b_pid: u32,
    b_tid: u32,
    a_tid: u32,
    a_pid: u32,
    sh_pid: u32,
) -> Value {
    truth(
        "MariaDB",
        b_pid,
        "LongWait",
        "sleep",
        vec![
            thread("mariadbd", Some(server_pid), Some(b_tid)),
            thread("mariadbd", Some(server_pid), Some(a_tid)),
            process("mariadb", a_pid),
            process("sh", sh_pid),
            thread("sleep", None, None),
        ],
    )
}

/// A latency spike, not a hang: client B (`mariadb`, fed by `sh`) sends 40 UPDATEs of one
/// row, 10 ms apart; meanwhile client A opens a transaction, updates the same row and commits
/// only after `sleep` (`secs` / 5, 0.3 s at the suite's 1.5): the UPDATE of B that comes
/// while A holds the row lock waits for A's COMMIT, and the others take a millisecond.
fn mariadb_convoy(dir: &Path, secs: f64) -> Result<Value> {
    let (_server, sock) = mariadb_socket(dir)?;
    let server_pid = mariadbd_pid(&sock)?;
    mariadb_table(&sock)?;
    // Commits without a log flush each: B's fast UPDATEs stay fast on a slow disk.
    run_ok(
        mariadb(&sock)
            .arg("-e")
            .arg("SET GLOBAL innodb_flush_log_at_trx_commit = 2;"),
        "mariadb (settings)",
    )?;
    let hold = (secs / 5.0).clamp(0.1, 1.0);
    let mut b_feed = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo \"{MARIADB_TID}\"; i=0; while [ $i -lt 40 ]; do \
                 echo 'UPDATE argus.t SET v = v + 1 WHERE id = 1;'; sleep 0.01; i=$((i+1)); done"
            ))
            .stdout(Stdio::piped()),
        "sh (client B's statements)",
    )?;
    let b = spawn(
        mariadb(&sock)
            .arg("-vvv")
            .stdin(Stdio::from(b_feed.stdout.take().context("sh stdout")?))
            .stdout(Stdio::piped()),
        "mariadb (client B)",
    )?;
    let b_pid = b.id();
    let mut a_feed = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sleep 0.15; echo \"{MARIADB_TID} BEGIN; UPDATE argus.t SET v = v + 1 WHERE id = 1;\"; \
                 sleep {hold}; echo 'COMMIT;'"
            ))
            .stdout(Stdio::piped()),
        "sh (client A's statements)",
    )?;
    let a = spawn(
        mariadb(&sock)
            .stdin(Stdio::from(a_feed.stdout.take().context("sh stdout")?))
            .stdout(Stdio::piped()),
        "mariadb (client A)",
    )?;
    let a_pid = a.id();
    let b_out = finish(b, "mariadb (client B)")?;
    let a_tid = first_number(&finish(a, "mariadb (client A)")?, "client A")?;
    let sh_pid = a_feed.id();
    finish(a_feed, "sh (client A's statements)")?;
    finish(b_feed, "sh (client B's statements)")?;
    // `-vvv` draws the result as a table: "|  564 |".
    let b_tid = first_number(&b_out.replace('|', " "), "client B")?;
    // `-vvv` prints each statement's time: "Query OK, 1 row affected (0.302 sec)".
    let times: Vec<f64> = b_out
        .lines()
        .filter(|l| l.starts_with("Query OK"))
        .filter_map(|l| l.rsplit_once('(')?.1.strip_suffix(" sec)")?.parse().ok())
        .collect();
    if times.len() != 40 {
        bail!(
            "client B printed {} UPDATE times, not 40: {b_out}",
            times.len()
        );
    }
    let slow = times.iter().copied().fold(0.0, f64::max);
    let mut v = rowlock_truth(server_pid, b_pid, b_tid, a_tid, a_pid, sh_pid);
    v["slow_requests"] = json!(times.iter().filter(|&&t| t >= hold / 2.0).count());
    v["slow_ns"] = json!((slow * 1e9) as u64);
    Ok(v)
}

/// A client waits for `SELECT BENCHMARK(n, SHA2(…))`, sized from a short measured run so
/// that it lasts about `secs`.
fn mariadb_slowquery(dir: &Path, secs: f64) -> Result<Value> {
    let (_server, sock) = mariadb_socket(dir)?;
    let server_pid = mariadbd_pid(&sock)?;
    // Sized from two measured runs (their difference leaves out the client's start-up).
    let time = |n: u64| -> Result<f64> {
        let t = Instant::now();
        run_ok(
            mariadb(&sock).arg("-e").arg(format!(
                "SELECT BENCHMARK({n}, SHA2(CONCAT('argus', RAND()), 256));"
            )),
            "mariadb (calibration)",
        )?;
        Ok(t.elapsed().as_secs_f64())
    };
    let probe = 300_000u64;
    let base = time(1)?;
    let per_call = (time(probe)? - base).max(1e-3) / probe as f64;
    let n = ((secs / per_call.max(1e-9)) as u64).clamp(probe, 1_000_000_000);
    let c = spawn(
        mariadb(&sock)
            .arg("-e")
            .arg(format!(
                "{MARIADB_TID} SELECT BENCHMARK({n}, SHA2(CONCAT('argus', RAND()), 256));"
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "mariadb (client)",
    )?;
    let pid = c.id();
    let tid = first_number(&finish(c, "mariadb (client)")?, "the client")?;
    let mut v = truth(
        "MariaDB",
        pid,
        "LongWait",
        "mariadbd",
        vec![thread("mariadbd", Some(server_pid), Some(tid))],
    );
    v["benchmark_n"] = json!(n);
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// lighttpd

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr().context("local address")?.port())
}

/// `curl` asks lighttpd for a CGI (`/bin/sh`) that sleeps, then writes and fsyncs a file
/// with `dd` before answering: the CGI's last wait (for `dd`) is short, its wait before it
/// (for `sleep`) is the hang. curl waits in `poll` with timeouts of at most 1 s.
fn lighttpd_cgi(dir: &Path, secs: f64) -> Result<Value> {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).context("creating the document root")?;
    std::fs::write(
        www.join("slow.sh"),
        format!(
            "sleep {secs}\n\
             dd if=/dev/zero of='{}' bs=64k count=16 conv=fsync 2>/dev/null\n\
             printf 'Content-Type: text/plain\\r\\n\\r\\nok\\n'\n",
            dir.join("out").display()
        ),
    )
    .context("writing the CGI")?;
    let port = free_port()?;
    let conf = dir.join("lighttpd.conf");
    std::fs::write(
        &conf,
        format!(
            "server.document-root = \"{}\"\n\
             server.port = {port}\n\
             server.bind = \"127.0.0.1\"\n\
             server.modules = (\"mod_cgi\")\n\
             cgi.assign = (\".sh\" => \"/bin/sh\")\n\
             server.errorlog = \"{}\"\n",
            www.display(),
            dir.join("lighttpd.err").display()
        ),
    )
    .context("writing lighttpd.conf")?;
    let mut server = Server::start(
        Command::new("lighttpd")
            .arg("-D")
            .arg("-f")
            .arg(&conf)
            .stdout(Stdio::null()),
        "lighttpd",
    )?;
    let mut alive = Ok(());
    wait_until("lighttpd", Duration::from_secs(10), || {
        alive = server.check_alive();
        alive.is_err() || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })?;
    alive?;
    let curl = spawn(
        Command::new("curl")
            .args(["-s", "-S", "--fail"])
            .arg(format!("http://127.0.0.1:{port}/slow.sh"))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "curl",
    )?;
    let pid = curl.id();
    let body = finish(curl, "curl")?;
    if body.trim() != "ok" {
        bail!("the CGI answered {body:?}");
    }
    let server_pid = server.pid();
    drop(server);
    Ok(truth(
        "lighttpd",
        pid,
        "LongWait",
        "sleep",
        vec![
            process("lighttpd", server_pid),
            thread("sh", None, None),
            thread("sleep", None, None),
        ],
    ))
}

// ---------------------------------------------------------------------------------------
// Redis

fn start_redis(dir: &Path) -> Result<(Server, PathBuf)> {
    let sock = dir.join("redis.sock");
    let mut server = Server::start(
        Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&sock)
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .args(["--enable-debug-command", "local", "--daemonize", "no"])
            .stdout(Stdio::null()),
        "redis-server",
    )?;
    let mut alive = Ok(());
    wait_until("redis-server", Duration::from_secs(10), || {
        alive = server.check_alive();
        alive.is_err() || redis_ping(&sock)
    })?;
    alive?;
    Ok((server, sock))
}

fn redis_ping(sock: &Path) -> bool {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(sock) else {
        return false;
    };
    let mut buf = [0u8; 16];
    s.write_all(b"PING\r\n").is_ok()
        && s.read(&mut buf)
            .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
}

/// `redis-cli BLPOP` waits on an empty list; `sh` sleeps, then `exec`s `redis-cli LPUSH`.
/// Redis's event loop serves the push and answers the blocked client.
fn redis_blpop(dir: &Path, secs: f64) -> Result<Value> {
    let (server, sock) = start_redis(dir)?;
    let waiter = spawn(
        Command::new("redis-cli")
            .arg("-s")
            .arg(&sock)
            .args(["BLPOP", "argus:q", "0"])
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "redis-cli (BLPOP)",
    )?;
    let pid = waiter.id();
    sleep(0.1);
    let pusher = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sleep {secs}; exec redis-cli -s '{}' LPUSH argus:q done",
                sock.display()
            ))
            .stdout(Stdio::null())
            .stdin(Stdio::null()),
        "sh",
    )?;
    let pusher_pid = pusher.id();
    let got = finish(waiter, "redis-cli (BLPOP)")?;
    finish(pusher, "sh")?;
    if !got.contains("done") {
        bail!("BLPOP returned {got:?}");
    }
    let server_pid = server.pid();
    drop(server);
    Ok(truth(
        "Redis",
        pid,
        "LongWait",
        "sleep",
        vec![
            process("redis-server", server_pid),
            // The shell that slept, then became the pushing redis-cli (same thread).
            thread("redis-cli", Some(pusher_pid), Some(pusher_pid)),
            thread("sleep", None, None),
        ],
    ))
}

/// Waits for a `python3` client of `server`, stops the server: the truth of a wait the
/// server's main thread holds, and what the client printed.
fn redis_client_truth(server: Server, client: Child) -> Result<(Value, String)> {
    let pid = client.id();
    let out = finish(client, "python3")?;
    let server_pid = server.pid();
    drop(server);
    let v = truth(
        "Redis + python3",
        pid,
        "LongWait",
        "redis-server",
        vec![process("redis-server", server_pid)],
    );
    Ok((v, out))
}

/// A `python3` client sends `DEBUG SLEEP` and waits for the reply with `select` and 0.25 s
/// timeouts on the same socket: the server's main thread sleeps through it.
fn redis_poll(dir: &Path, secs: f64) -> Result<Value> {
    let (server, sock) = start_redis(dir)?;
    let client = spawn(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                r#"import select, socket
s = socket.socket(socket.AF_UNIX)
s.connect({:?})
s.sendall(b'DEBUG SLEEP {secs}\r\n')
timeouts = 0
while not select.select([s], [], [], 0.25)[0]:
    timeouts += 1
r = s.recv(64)
assert r.startswith(b'+OK'), r
print(timeouts)
"#,
                sock.display().to_string()
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "python3",
    )?;
    let (mut v, timeouts) = redis_client_truth(server, client)?;
    v["timeouts"] = json!(timeouts.trim().parse::<u64>().unwrap_or(0));
    Ok(v)
}

/// A latency spike, not a hang: a `python3` client sends 40 GETs, 10 ms apart; just before
/// the 21st, it starts `redis-cli EVAL` of a Lua loop (~`secs` / 5 of CPU, 0.3 s at the
/// suite's 1.5) and Redis's single event loop serves that first: the 21st GET waits for it.
fn redis_spike(dir: &Path, secs: f64) -> Result<Value> {
    let (server, sock) = start_redis(dir)?;
    // The Lua loop runs about `busy` seconds: its length is calibrated on this machine first.
    let busy = (secs / 5.0).clamp(0.1, 1.0);
    let client = spawn(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                r#"import json, socket, subprocess, time
SOCK = {sock:?}
def call(s, cmd):
    s.sendall(cmd)
    return s.recv(4096)
s = socket.socket(socket.AF_UNIX)
s.connect(SOCK)
# Calibrate: how many Lua iterations take `busy` seconds here.
n = 2000000
t = time.time()
call(s, b'EVAL "local i=0 while i<tonumber(ARGV[1]) do i=i+1 end return i" 0 %d\r\n' % n)
n = int(n * {busy} / max(time.time() - t, 1e-3))
call(s, b'SET argus:k v\r\n')
time.sleep(0.2)
slow = None
for i in range(40):
    if i == 20:
        cli = subprocess.Popen(['redis-cli', '-s', SOCK, 'EVAL',
            'local i=0 while i<tonumber(ARGV[1]) do i=i+1 end return i', '0', str(n)],
            stdout=subprocess.DEVNULL)
        time.sleep(0.03)
    t = time.time()
    r = call(s, b'GET argus:k\r\n')
    assert r.startswith(b'$1'), r
    if i == 20:
        slow = time.time() - t
        cli_pid = cli.pid
        cli.wait()
    time.sleep(0.01)
print(json.dumps({{"cli_pid": cli_pid, "slow_s": slow}}))
"#,
                sock = sock.display().to_string()
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "python3",
    )?;
    let (mut v, out) = redis_client_truth(server, client)?;
    let info: Value = serde_json::from_str(out.trim()).context("the client's JSON line")?;
    v["slow_requests"] = json!(1);
    v["slow_ns"] = json!((info["slow_s"].as_f64().unwrap_or(0.0) * 1e9) as u64);
    v["input_pid"] = info["cli_pid"].clone();
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// Java

/// A JDK `HttpServer` (a pool of four handler threads) whose heap holds a large live set (a
/// session store); its `/flush` endpoint calls `System.gc()`, a stop-the-world full
/// collection under the serial collector, done by the JVM's `VM Thread`. The live set is
/// sized on the spot so one collection takes `args[1]` seconds. `/get` answers with the
/// handling thread's tid. Writes `PORT N` to `args[0]` once listening.
const JAVA_GC: &str = r#"import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.Executors;

public class GcSpike {
    static Object[] store;

    static Object[] fill(int n) {
        Object[] a = new Object[n];
        for (int i = 0; i < n; i++) a[i] = new long[] {i, i * 31L};
        return a;
    }

    static String tid() {
        try {
            return new File("/proc/thread-self").getCanonicalFile().getName();
        } catch (Exception e) {
            return "0";
        }
    }

    static void reply(HttpExchange ex, String body) throws java.io.IOException {
        byte[] b = body.getBytes();
        ex.sendResponseHeaders(200, b.length);
        try (OutputStream o = ex.getResponseBody()) {
            o.write(b);
        }
    }

    public static void main(String[] args) throws Exception {
        double pause = Double.parseDouble(args[1]);
        int n = 1_000_000;
        store = fill(n);
        System.gc();
        long t = System.nanoTime();
        System.gc();
        double took = (System.nanoTime() - t) / 1e9;
        n = (int) Math.min(n * pause / Math.max(took, 1e-3), 40_000_000);
        store = fill(n);
        System.gc();
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        s.createContext("/get", ex -> reply(ex, tid()));
        s.createContext("/flush", ex -> {
            System.gc();
            reply(ex, tid());
        });
        s.setExecutor(Executors.newFixedThreadPool(4));
        s.start();
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, s.getAddress().getPort() + " " + n + "\n");
        Files.move(tmp, Path.of(args[0]), StandardCopyOption.ATOMIC_MOVE);
    }
}
"#;

/// A latency spike: a `python3` client sends 40 GETs, 10 ms apart, over one keep-alive
/// connection to a Java HTTP server (`JAVA_GC`); before the 21st, `curl` asks the server's
/// `/flush`, whose `System.gc()` stops every Java thread for a full collection of about
/// `secs` / 5 seconds (0.3 s at the suite's 1.5). The GET that arrives meanwhile waits for
/// the `VM Thread` to finish collecting; the others take a millisecond.
fn java_gc(dir: &Path, secs: f64) -> Result<Value> {
    let src = dir.join("GcSpike.java");
    std::fs::write(&src, JAVA_GC).context("writing GcSpike.java")?;
    let port_file = dir.join("java.port");
    let pause = (secs / 5.0).clamp(0.1, 0.45);
    let mut server = Server::start(
        Command::new("java")
            .args(["-XX:+UseSerialGC", "-Xms3g", "-Xmx3g", "-XX:-UsePerfData"])
            .arg("-Dsun.net.httpserver.nodelay=true")
            .arg(&src)
            .arg(&port_file)
            .arg(pause.to_string())
            .stdout(Stdio::null()),
        "java",
    )?;
    let mut alive = Ok(());
    wait_until("the Java server", Duration::from_secs(60), || {
        alive = server.check_alive();
        alive.is_err() || port_file.exists()
    })?;
    alive?;
    let line = std::fs::read_to_string(&port_file).context("reading the Java server's port")?;
    let port: u16 = line
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("the Java server's port line {line:?}"))?;
    let client = spawn(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                r#"import http.client, json, subprocess, sys, time
PORT = {port}
# Warm up, in another process (its first requests run cold, in the interpreter): the JIT
# compiles the request path before the requests that count.
WARM = 'import http.client\nc = http.client.HTTPConnection("127.0.0.1", %d)\nfor _ in range(300):\n    c.request("GET", "/get")\n    c.getresponse().read()\n'
subprocess.run([sys.executable, '-c', WARM % PORT], check=True)
c = http.client.HTTPConnection('127.0.0.1', PORT)
def get(path):
    c.request('GET', path)
    r = c.getresponse()
    body = r.read().decode()
    assert r.status == 200, (r.status, body)
    return body
get('/get')
time.sleep(0.2)
slow = None
times = []
for i in range(40):
    if i == 20:
        flush = subprocess.Popen(['curl', '-s', 'http://127.0.0.1:%d/flush' % PORT],
            stdout=subprocess.PIPE)
        time.sleep(0.05)
    t = time.time()
    tid = get('/get')
    times.append(round((time.time() - t) * 1000, 1))
    if i == 20:
        slow = time.time() - t
        slow_tid = int(tid)
        flush_tid = int(flush.communicate()[0].decode())
    time.sleep(0.01)
print(json.dumps({{"slow_s": slow, "handler": slow_tid, "flusher": flush_tid, "curl": flush.pid, "ms": times}}))
"#
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "python3",
    )?;
    let pid = client.id();
    let out = finish(client, "python3")?;
    let info: Value = serde_json::from_str(out.trim()).context("the client's JSON line")?;
    let server_pid = server.pid();
    let tid = |k: &str| info[k].as_u64().map(|t| t as u32);
    // The handler thread's name, while the server runs.
    let handler = tid("handler")
        .and_then(|t| std::fs::read_to_string(format!("/proc/{server_pid}/task/{t}/comm")).ok())
        .map(|c| c.trim().to_string())
        .context("the slow GET's handler thread is gone")?;
    drop(server);
    let mut v = truth(
        "JDK HttpServer + python3",
        pid,
        "LongWait",
        "VM Thread",
        vec![
            thread(&handler, Some(server_pid), tid("handler")),
            thread("VM Thread", Some(server_pid), None),
        ],
    );
    // The other pool thread waits for the same collection; curl waits for it.
    v["allowed"] = json!([
        "pool-1-thread-1",
        "pool-1-thread-2",
        "pool-1-thread-3",
        "pool-1-thread-4",
        "HTTP-Dispatcher",
        "curl"
    ]);
    v["slow_requests"] = json!(1);
    v["slow_ns"] = json!((info["slow_s"].as_f64().unwrap_or(0.0) * 1e9) as u64);
    v["input_pid"] = info["curl"].clone();
    v["request_ms"] = info["ms"].clone();
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// Go

const GO_MUTEX: &str = r#"package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func init() { runtime.LockOSThread() } // main runs on the main thread

func main() {
	secs, _ := strconv.ParseFloat(os.Args[1], 64)
	var mu sync.Mutex
	locked := make(chan int)
	go func() {
		runtime.LockOSThread() // this goroutine owns its thread until it exits
		mu.Lock()
		locked <- syscall.Gettid()
		end := time.Now().Add(time.Duration(secs * float64(time.Second)))
		x := uint64(1)
		for time.Now().Before(end) {
			for i := 0; i < 100000; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		mu.Unlock()
		fmt.Fprintln(os.Stderr, x)
	}()
	worker := <-locked
	mu.Lock()
	fmt.Printf("{\"main\":%d,\"worker\":%d}\n", syscall.Gettid(), worker)
}
"#;

/// Builds a Go program offline with its caches in `dir`.
fn go_build(dir: &Path, name: &str, src: &str) -> Result<PathBuf> {
    let srcdir = dir.join("gosrc");
    std::fs::create_dir_all(&srcdir).context("creating the Go source directory")?;
    std::fs::write(srcdir.join("main.go"), src).context("writing main.go")?;
    let bin = dir.join(name);
    run_ok(
        Command::new("go")
            .arg("build")
            .arg("-o")
            .arg(&bin)
            .arg("main.go")
            .current_dir(&srcdir)
            .env("GOCACHE", dir.join("gocache"))
            .env("GOPATH", dir.join("gopath"))
            .env("GO111MODULE", "off")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "")
            .env("CGO_ENABLED", "0"),
        "go build",
    )?;
    Ok(bin)
}

fn go_mutex(dir: &Path, secs: f64) -> Result<Value> {
    let bin = go_build(dir, "gomutex", GO_MUTEX)?;
    let p = spawn(
        Command::new(&bin)
            .arg(format!("{secs}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null()),
        "the Go program",
    )?;
    let pid = p.id();
    let out = finish(p, "the Go program")?;
    let ids: Value = serde_json::from_str(out.trim())
        .with_context(|| format!("the Go program printed {out:?}"))?;
    let worker = ids["worker"].as_u64().context("worker tid")? as u32;
    Ok(truth(
        "Go",
        pid,
        "LongWait",
        "gomutex",
        vec![thread("gomutex", Some(pid), Some(worker))],
    ))
}

// ---------------------------------------------------------------------------------------
// Ruby

fn ruby_cv(_dir: &Path, secs: f64) -> Result<Value> {
    let p = spawn(
        Command::new("ruby")
            .arg("-e")
            .arg(format!(
                r#"Thread.current.name = "rb-main"
m = Mutex.new
cv = ConditionVariable.new
done = false
tid = Queue.new
w = Thread.new do
  Thread.current.name = "rb-worker"
  tid << Thread.current.native_thread_id
  sleep {secs}
  m.synchronize do
    done = true
    cv.signal
  end
end
worker = tid.pop
sleep 0.05
timeouts = 0
m.synchronize do
  until done
    cv.wait(m, 0.25)
    timeouts += 1 unless done
  end
end
w.join
puts "{{\"main\":#{{Thread.current.native_thread_id}},\"worker\":#{{worker}},\"timeouts\":#{{timeouts}}}}"
"#
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "ruby",
    )?;
    let pid = p.id();
    let out = finish(p, "ruby")?;
    let ids: Value =
        serde_json::from_str(out.trim()).with_context(|| format!("ruby printed {out:?}"))?;
    let worker = ids["worker"].as_u64().context("worker tid")? as u32;
    let mut v = truth(
        "Ruby",
        pid,
        "LongWait",
        "rb-worker",
        vec![thread("rb-worker", Some(pid), Some(worker))],
    );
    v["timeouts"] = ids["timeouts"].clone();
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// File locks

/// sqlite3 A (fed by `sh`) holds the database in `BEGIN EXCLUSIVE` until `sh` sends COMMIT
/// after `sleep`; sqlite3 B, with `.timeout`, retries its fcntl lock between sleeps (the
/// busy handler) until A commits — A's commit fsyncs the journal and the database first.
fn sqlite_busy(dir: &Path, secs: f64) -> Result<Value> {
    let db = dir.join("argus.db");
    run_ok(
        Command::new("sqlite3").arg(&db).arg(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t VALUES (1, 0);",
        ),
        "sqlite3 (creating the database)",
    )?;
    let head = 0.3;
    let mut feeder = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo 'BEGIN EXCLUSIVE; UPDATE t SET v = v + 1;'; sleep {}; echo 'COMMIT;'",
                secs + head
            ))
            .stdout(Stdio::piped()),
        "sh",
    )?;
    let feed = feeder.stdout.take().context("sh stdout")?;
    let a = spawn(
        Command::new("sqlite3")
            .arg(&db)
            .stdin(Stdio::from(feed))
            .stdout(Stdio::null()),
        "sqlite3 (holder)",
    )?;
    let a_pid = a.id();
    sleep(head);
    let b = spawn(
        Command::new("sqlite3")
            .args(["-cmd", ".timeout 20000"])
            .arg(&db)
            .arg("UPDATE t SET v = v + 2;")
            .stdout(Stdio::null())
            .stdin(Stdio::null()),
        "sqlite3 (waiter)",
    )?;
    let pid = b.id();
    finish(b, "sqlite3 (waiter)")?;
    finish(a, "sqlite3 (holder)")?;
    let sh_pid = feeder.id();
    finish(feeder, "sh")?;
    Ok(truth(
        "sqlite3",
        pid,
        "RepeatedYield",
        "sleep",
        vec![
            process("sqlite3", a_pid),
            process("sh", sh_pid),
            thread("sleep", None, None),
        ],
    ))
}

/// A `python3` holder takes a POSIX write lock on a file and computes; `perl` blocks in
/// `fcntl(F_SETLKW)` on the same file until the holder exits (which drops the lock).
fn perl_setlkw(dir: &Path, secs: f64) -> Result<Value> {
    let file = dir.join("lockfile");
    std::fs::write(&file, b"").context("creating the lock file")?;
    let mut holder = spawn(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                r#"import ctypes, fcntl, sys, time
ctypes.CDLL(None).prctl(15, b'py-holder', 0, 0, 0)
f = open({:?}, 'r+')
fcntl.lockf(f, fcntl.LOCK_EX)
print('locked', flush=True)
end = time.time() + {secs}
x = 0
while time.time() < end:
    x += 1
"#,
                file.display().to_string()
            ))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "python3 (holder)",
    )?;
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().context("holder stdout")?)
        .read_line(&mut line)
        .context("reading the holder's first line")?;
    if line.trim() != "locked" {
        bail!("the holder said {line:?}");
    }
    let holder_pid = holder.id();
    let waiter = spawn(
        Command::new("perl")
            .arg("-e")
            .arg(
                r#"use Fcntl qw(F_SETLKW F_WRLCK SEEK_SET);
open(my $fh, '+<', $ARGV[0]) or die "open: $!";
my $lk = pack('s s x4 q q i x4', F_WRLCK, SEEK_SET, 0, 0, 0);
fcntl($fh, F_SETLKW, $lk) or die "fcntl: $!";
print "got it\n";
"#,
            )
            .arg(&file)
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "perl",
    )?;
    let pid = waiter.id();
    let got = finish(waiter, "perl")?;
    finish(holder, "python3 (holder)")?;
    if got.trim() != "got it" {
        bail!("perl said {got:?}");
    }
    Ok(truth(
        "perl + python3",
        pid,
        "LongWait",
        "py-holder",
        vec![process("py-holder", holder_pid)],
    ))
}

/// `apt-get install` with a private dpkg directory and `DPkg::Lock::Timeout` finds the
/// frontend lock taken: it retries `fcntl(F_SETLK)` once a second until the `perl` holder,
/// which runs `sleep` under the lock, exits. The holder leaves a little before `secs` so the
/// one-second retries end at about `secs`.
fn apt_lock(dir: &Path, secs: f64) -> Result<Value> {
    let admin = dir.join("dpkg");
    for d in [
        admin.join("updates"),
        dir.join("cache"),
        dir.join("lists/partial"),
    ] {
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(admin.join("status"), b"").context("creating the dpkg status file")?;
    let lock = admin.join("lock-frontend");
    let mut holder = spawn(
        Command::new("perl")
            .arg("-e")
            .arg(
                r#"use Fcntl qw(F_SETLK F_WRLCK SEEK_SET);
$| = 1;
open(my $fh, '>>', $ARGV[0]) or die "open: $!";
my $lk = pack('s s x4 q q i x4', F_WRLCK, SEEK_SET, 0, 0, 0);
fcntl($fh, F_SETLK, $lk) or die "fcntl: $!";
print "locked\n";
system('sleep', $ARGV[1]) == 0 or die "sleep failed";
"#,
            )
            .arg(&lock)
            .arg(format!("{:.2}", (secs - 0.3).max(0.5)))
            .stdout(Stdio::piped())
            .stdin(Stdio::null()),
        "perl (holder)",
    )?;
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().context("holder stdout")?)
        .read_line(&mut line)
        .context("reading the holder's first line")?;
    if line.trim() != "locked" {
        bail!("the holder said {line:?}");
    }
    let holder_pid = holder.id();
    let apt = spawn(
        Command::new("apt-get")
            .arg("-o")
            .arg(format!(
                "Dir::State::status={}",
                admin.join("status").display()
            ))
            .arg("-o")
            .arg(format!("Dir::Cache={}", dir.join("cache").display()))
            .arg("-o")
            .arg(format!("Dir::State::Lists={}", dir.join("lists").display()))
            .args([
                "-o",
                "DPkg::Lock::Timeout=30",
                "-qq",
                "-y",
                "--no-download",
                "install",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .stdin(Stdio::null()),
        "apt-get",
    )?;
    let pid = apt.id();
    finish(apt, "apt-get")?;
    finish(holder, "perl (holder)")?;
    Ok(truth(
        "apt-get + perl",
        pid,
        "RepeatedYield",
        "sleep",
        vec![process("perl", holder_pid), thread("sleep", None, None)],
    ))
}
