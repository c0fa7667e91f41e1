//! Hangs in real programs, for the hang suite (`tests/hang_suite.rs`): `argus workload NAME`
//! runs one of them under `argus record` and prints one JSON line with its ground truth — the
//! process to diagnose (`target_pid`), the expected class, the thread name of the root cause
//! and the thread names on the true causal chain.
//!
//! The programs are the machine's own (`flock`, `sleep`, `sh`, `cat`, `mkfifo`, `python3`);
//! the Python snippets use only the standard library. Each hang lasts `secs` seconds.
//!
//! | name | pattern | class | root cause |
//! |---|---|---|---|
//! | flock-sleep | lock held by another process | LongWait | `sleep` run under the lock |
//! | flock-convoy | lock convoy: 3 waiters behind a CPU-bound holder | LongWait | `python3` burning CPU under the lock |
//! | pipe-sleep | `cat` reads a pipe fed after a sleep | LongWait | `sleep` |
//! | py-timer | a wake-up by a timer thread | LongWait | the timer thread `py-timer` |
//! | py-reply | a reply from another thread (socketpair) | LongWait | the server thread `py-server` computing |
//! | py-batch | a batching server loop (selectors) | LongWait | the loop thread `py-loop` busy with another client |
//! | py-yield | polling a flag another thread sets | RepeatedYield | the setter `py-setter` computing |
//! | lockf-retry | `fcntl` lock retried (`F_SETLK`, `EAGAIN`) between 20 ms sleeps while another process holds it | RepeatedYield | `sleep` the holder waits for |
//! | py-flagfile | polling a file another process creates, marked `argus:flag-set` | RepeatedYield | `sleep` in the setter's shell |
//! | py-longrun | a long computation started by input on stdin | LongRunning | `python3` itself, input from `sh` |
//! | fifo-open | a FIFO whose writer stopped; the trace ends mid-hang | LongWait (open) | `sleep` the writer's shell waits for |
//! | flag-watch | polling the static [`ARGUS_HANG_FLAG`] (for `argus record --watch`) while a decoy thread burns CPU | RepeatedYield | `argus-flagger`, which sleeps, then sets it |

use crate::Workload;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// The real-program hangs: name, one line on what happens.
pub const HANGS: &[Workload] = &[
    Workload::suite(
        "flock-sleep",
        "flock waits for a lock another flock holds while running sleep",
        flock_sleep,
    ),
    Workload::suite(
        "flock-convoy",
        "three flock waiters queue behind a holder running a CPU-bound python3",
        flock_convoy,
    ),
    Workload::suite(
        "pipe-sleep",
        "cat reads a pipe that sh writes after sleep",
        pipe_sleep,
    ),
    Workload::suite(
        "late-sleep",
        "cat reads a pipe that sh writes after sleep, which sh starts only after 0.2 s of its own work",
        late_sleep,
    ),
    Workload::suite(
        "py-timer",
        "python3 main thread waits on an event a threading.Timer sets",
        py_timer,
    ),
    Workload::suite(
        "py-reply",
        "python3 main thread waits for a reply from a server thread that computes",
        py_reply,
    ),
    Workload::suite(
        "py-batch",
        "python3 main thread's request waits in a selectors loop busy with another client",
        py_batch,
    ),
    Workload::suite(
        "py-yield",
        "python3 main thread polls a flag with short sleeps; a worker computes, then sets it",
        py_yield,
    ),
    Workload::suite(
        "lockf-retry",
        "python3 retries fcntl.lockf(LOCK_NB) every 20 ms; another python3 holds the lock while it runs sleep",
        lockf_retry,
    ),
    Workload::suite(
        "py-flagfile",
        "python3 polls for a file that a shell creates after sleep (argus:flag-set marker)",
        py_flagfile,
    ),
    Workload::suite(
        "py-longrun",
        "python3 computes after reading a line sh writes to its stdin",
        py_longrun,
    ),
    Workload::suite(
        "fifo-open",
        "python3 reads a FIFO whose writer shell is stuck in sleep; the trace ends first",
        fifo_open,
    ),
    Workload::plain(
        "flag-watch",
        "the main thread polls ARGUS_HANG_FLAG with 1 ms sleeps; argus-flagger sleeps, then sets it, while argus-decoy burns CPU",
        flag_watch,
    ),
];

/// The data flag of the `flag-watch` hang, a named symbol of the `argus` binary so that
/// `argus record --watch ARGUS_HANG_FLAG@cmd -- argus workload flag-watch` can watch it.
#[no_mangle]
pub static ARGUS_HANG_FLAG: AtomicU64 = AtomicU64::new(0);

/// `flag-watch`: the main thread polls [`ARGUS_HANG_FLAG`]; the setter sleeps `secs` first
/// while a decoy thread computes all along, so the busiest-thread guess is wrong and only a
/// watchpoint on the flag names the setter.
fn flag_watch(secs: f64) -> Result<()> {
    ARGUS_HANG_FLAG.store(0, Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let decoy = thread::Builder::new()
        .name("argus-decoy".into())
        .spawn(move || {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            while !stop2.load(Ordering::Relaxed) {
                for _ in 0..10_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
            }
            x
        })
        .context("starting argus-decoy")?;
    let setter = thread::Builder::new()
        .name("argus-flagger".into())
        .spawn(move || {
            sleep(secs);
            ARGUS_HANG_FLAG.store(1, Ordering::SeqCst);
        })
        .context("starting argus-flagger")?;
    let mut polls = 0u64;
    while ARGUS_HANG_FLAG.load(Ordering::SeqCst) == 0 {
        thread::sleep(Duration::from_millis(1));
        polls += 1;
    }
    stop.store(true, Ordering::Relaxed);
    setter
        .join()
        .map_err(|_| anyhow::anyhow!("argus-flagger panicked"))?;
    decoy
        .join()
        .map_err(|_| anyhow::anyhow!("argus-decoy panicked"))?;
    tracing::debug!(polls, "flag-watch: flag seen");
    truth(
        "flag-watch",
        std::process::id(),
        "RepeatedYield",
        "argus-flagger",
        &["argus-flagger"],
    );
    Ok(())
}

/// Names the calling Python thread (comm) through prctl(PR_SET_NAME).
const PY_NAME: &str = r#"import ctypes
def name(n):
    ctypes.CDLL(None).prctl(15, n.encode(), 0, 0, 0)
def burn(s):
    import time
    t = time.time() + s
    x = 0
    while time.time() < t:
        x += 1
    return x
"#;

fn python(script: &str) -> Command {
    let mut c = Command::new("python3");
    c.arg("-c").arg(format!("{PY_NAME}{script}"));
    c
}

fn spawn(c: &mut Command, what: &str) -> Result<Child> {
    c.spawn().with_context(|| format!("starting {what}"))
}

fn wait(mut c: Child, what: &str) -> Result<()> {
    let st = c.wait().with_context(|| format!("waiting for {what}"))?;
    if !st.success() {
        bail!("{what} failed: {st}");
    }
    Ok(())
}

fn scratch() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("argus-hang-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// The recorder's `trace_marker` (the recorder is our parent: `argus record -- CMD`).
fn marker_path() -> PathBuf {
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    let own = PathBuf::from(format!(
        "/sys/kernel/tracing/instances/argus-{ppid}/trace_marker"
    ));
    if own.exists() {
        return own;
    }
    PathBuf::from("/sys/kernel/tracing/trace_marker")
}

fn truth(name: &str, target: u32, class: &str, root: &str, chain: &[&str]) {
    let chain: Vec<String> = chain.iter().map(|c| format!("{c:?}")).collect();
    println!(
        "{{\"workload\":{name:?},\"target_pid\":{target},\"class\":{class:?},\"root_comm\":{root:?},\"chain\":[{}]}}",
        chain.join(",")
    );
}

fn sleep(s: f64) {
    thread::sleep(Duration::from_secs_f64(s));
}

/// A hang of the suite about to run: its name (for the truth line), its length and its
/// scratch directory (removed afterwards).
#[derive(Clone, Copy)]
pub struct Hang<'a> {
    /// The workload's name.
    pub name: &'static str,
    /// How long the hang lasts, in seconds.
    pub secs: f64,
    /// A scratch directory of its own.
    pub dir: &'a Path,
}

/// Runs `f`, hang `name`, for about `secs` seconds in a scratch directory.
pub(crate) fn run(name: &'static str, secs: f64, f: fn(&Hang<'_>) -> Result<()>) -> Result<()> {
    let dir = scratch()?;
    let r = f(&Hang {
        name,
        secs,
        dir: &dir,
    });
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn flock_sleep(h: &Hang<'_>) -> Result<()> {
    let Hang { name, .. } = *h;
    let s = format!("{}", h.secs);
    let lock = h.dir.join("lock");
    let holder = spawn(
        Command::new("flock").arg(&lock).args(["sleep", &s]),
        "flock holder",
    )?;
    sleep(0.2);
    let waiter = spawn(Command::new("flock").arg(&lock).arg("true"), "flock waiter")?;
    let pid = waiter.id();
    wait(holder, "flock holder")?;
    wait(waiter, "flock waiter")?;
    truth(name, pid, "LongWait", "sleep", &["flock", "sleep"]);
    Ok(())
}

fn flock_convoy(h: &Hang<'_>) -> Result<()> {
    let Hang { name, secs, .. } = *h;
    let lock = h.dir.join("lock");
    let holder = spawn(
        Command::new("flock")
            .arg(&lock)
            .arg("python3")
            .arg("-c")
            .arg(format!(
                "import time\nt=time.time()+{secs}\nwhile time.time()<t: pass"
            )),
        "flock holder",
    )?;
    sleep(0.2);
    let mut waiters = Vec::new();
    for _ in 0..3 {
        waiters.push(spawn(
            Command::new("flock").arg(&lock).args(["sleep", "0.02"]),
            "flock waiter",
        )?);
        sleep(0.05);
    }
    let pid = waiters.last().map_or(0, |w| w.id());
    wait(holder, "flock holder")?;
    for w in waiters {
        wait(w, "flock waiter")?;
    }
    truth(name, pid, "LongWait", "python3", &["flock", "python3"]);
    Ok(())
}

fn pipe_sleep(h: &Hang<'_>) -> Result<()> {
    sh_into_cat(h, &format!("sleep {}; echo done", h.secs))
}

/// `cat` reads a pipe that `sh -c SCRIPT` writes to once the script is done: the truth of a
/// wait for the script's `sleep`.
fn sh_into_cat(h: &Hang<'_>, script: &str) -> Result<()> {
    let mut sh = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdout(Stdio::piped()),
        "sh",
    )?;
    let out = sh.stdout.take().context("sh stdout")?;
    let cat = spawn(
        Command::new("cat")
            .stdin(Stdio::from(out))
            .stdout(Stdio::null()),
        "cat",
    )?;
    let pid = cat.id();
    wait(sh, "sh")?;
    wait(cat, "cat")?;
    truth(h.name, pid, "LongWait", "sleep", &["sh", "sleep"]);
    Ok(())
}

/// The issue's "last culprit taken for the main one": the sleep starts late (sh counts to
/// 300,000 first, ~0.2 s on CPU), so a walk that explains why it started late ends at sh's
/// work; yet the sleep holds most of the wait.
fn late_sleep(h: &Hang<'_>) -> Result<()> {
    sh_into_cat(
        h,
        &format!(
            "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep {}; echo done",
            h.secs
        ),
    )
}

fn py_timer(h: &Hang<'_>) -> Result<()> {
    let Hang { name, secs, .. } = *h;
    let p = spawn(
        &mut python(&format!(
            r#"import threading
ev = threading.Event()
def fire():
    ev.set()
class T(threading.Timer):
    def run(self):
        name('py-timer')
        threading.Timer.run(self)
T({secs}, fire).start()
ev.wait()
"#
        )),
        "python3",
    )?;
    let pid = p.id();
    wait(p, "python3")?;
    truth(name, pid, "LongWait", "py-timer", &["py-timer"]);
    Ok(())
}

fn py_reply(h: &Hang<'_>) -> Result<()> {
    let Hang { name, secs, .. } = *h;
    let p = spawn(
        &mut python(&format!(
            r#"import socket, threading
a, b = socket.socketpair()
def server():
    name('py-server')
    b.recv(16)
    burn({secs})
    b.send(b'reply')
threading.Thread(target=server).start()
import time
time.sleep(0.1)
a.send(b'request')
a.recv(16)
"#
        )),
        "python3",
    )?;
    let pid = p.id();
    wait(p, "python3")?;
    truth(name, pid, "LongWait", "py-server", &["py-server"]);
    Ok(())
}

fn py_batch(h: &Hang<'_>) -> Result<()> {
    let Hang { name, secs, .. } = *h;
    let p = spawn(
        &mut python(&format!(
            r#"import socket, threading, selectors, time
c1, s1 = socket.socketpair()
c2, s2 = socket.socketpair()
def loop():
    name('py-loop')
    sel = selectors.DefaultSelector()
    sel.register(s1, selectors.EVENT_READ)
    sel.register(s2, selectors.EVENT_READ)
    served = 0
    while served < 2:
        for key, _ in sel.select():
            req = key.fileobj.recv(16)
            if req == b'slow':
                burn({secs})
            key.fileobj.send(b'ok')
            served += 1
def client_a():
    name('client-a')
    c1.send(b'slow')
    c1.recv(16)
threading.Thread(target=loop).start()
time.sleep(0.05)
threading.Thread(target=client_a).start()
time.sleep(0.1)
c2.send(b'fast')
c2.recv(16)
"#
        )),
        "python3",
    )?;
    let pid = p.id();
    wait(p, "python3")?;
    truth(name, pid, "LongWait", "py-loop", &["py-loop"]);
    Ok(())
}

fn py_yield(h: &Hang<'_>) -> Result<()> {
    let Hang { name, secs, .. } = *h;
    let p = spawn(
        &mut python(&format!(
            r#"import threading, time
done = False
def setter():
    global done
    name('py-setter')
    burn({secs})
    done = True
threading.Thread(target=setter).start()
while not done:
    time.sleep(0.002)
"#
        )),
        "python3",
    )?;
    let pid = p.id();
    wait(p, "python3")?;
    truth(name, pid, "RepeatedYield", "py-setter", &["py-setter"]);
    Ok(())
}

fn lockf_retry(h: &Hang<'_>) -> Result<()> {
    let Hang { name, .. } = *h;
    let s = format!("{}", h.secs);
    let lock = h.dir.join("lock");
    let path = lock.display().to_string();
    // The waiter starts (Python and its imports) first and begins retrying only when the
    // holder says it holds the lock: two Python start-ups on a busy machine differ by more
    // than the hang's margin over the threshold, and the hang is `secs` by construction.
    let mut waiter = spawn(
        python(&format!(
            r#"import fcntl, sys, time
f = open({path:?}, 'a')
sys.stdin.readline()
while True:
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
    except OSError:
        time.sleep(0.02)
"#
        ))
        .stdin(Stdio::piped()),
        "python3 waiter",
    )?;
    let mut holder = spawn(
        python(&format!(
            r#"import fcntl, subprocess
f = open({path:?}, 'a')
fcntl.lockf(f, fcntl.LOCK_EX)
print('locked', flush=True)
subprocess.run(['sleep', '{s}'])
"#
        ))
        .stdout(Stdio::piped()),
        "python3 holder",
    )?;
    let mut said = String::new();
    let out = holder.stdout.take().context("holder stdout")?;
    let mut out = std::io::BufReader::new(out);
    std::io::BufRead::read_line(&mut out, &mut said).context("reading the holder")?;
    if said.trim() != "locked" {
        bail!("python3 holder did not take the lock: {said:?}");
    }
    let mut go = waiter.stdin.take().context("waiter stdin")?;
    std::io::Write::write_all(&mut go, b"go\n").context("starting the waiter")?;
    drop(go);
    let pid = waiter.id();
    wait(holder, "python3 holder")?;
    wait(waiter, "python3 waiter")?;
    drop(out);
    truth(name, pid, "RepeatedYield", "sleep", &["python3", "sleep"]);
    Ok(())
}

fn py_flagfile(h: &Hang<'_>) -> Result<()> {
    let Hang {
        name, secs, dir, ..
    } = *h;
    let flag = dir.join("flag");
    let marker = marker_path();
    let poller = spawn(
        &mut python(&format!(
            r#"import os, time
while not os.path.exists({:?}):
    time.sleep(0.005)
"#,
            flag.display().to_string()
        )),
        "python3",
    )?;
    let pid = poller.id();
    sleep(0.1);
    let setter = spawn(
        Command::new("sh").arg("-c").arg(format!(
            "sleep {secs}; touch '{}'; echo '{} {}' > '{}'",
            flag.display(),
            argus_schema::markers::FLAG_SET,
            flag.display(),
            marker.display()
        )),
        "sh",
    )?;
    wait(setter, "sh")?;
    wait(poller, "python3")?;
    truth(name, pid, "RepeatedYield", "sleep", &["sh", "sleep"]);
    Ok(())
}

fn py_longrun(h: &Hang<'_>) -> Result<()> {
    let Hang { name, secs, .. } = *h;
    let mut sh = spawn(
        Command::new("sh")
            .arg("-c")
            .arg("sleep 0.5; echo go")
            .stdout(Stdio::piped()),
        "sh",
    )?;
    let out = sh.stdout.take().context("sh stdout")?;
    let p = spawn(
        python(&format!(
            r#"import sys
sys.stdin.readline()
burn({secs})
"#
        ))
        .stdin(Stdio::from(out)),
        "python3",
    )?;
    let pid = p.id();
    wait(sh, "sh")?;
    wait(p, "python3")?;
    truth(name, pid, "LongRunning", "python3", &["python3", "sh"]);
    Ok(())
}

fn fifo_open(h: &Hang<'_>) -> Result<()> {
    let Hang {
        name, secs, dir, ..
    } = *h;
    let fifo = dir.join("fifo");
    let st = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .context("running mkfifo")?;
    if !st.success() {
        bail!("mkfifo failed: {st}");
    }
    let linger = secs + 6.0;
    let reader = spawn(
        &mut python(&format!(
            r#"import signal
signal.alarm({})
f = open({:?})
while f.readline():
    pass
"#,
            linger.ceil() as u64 + 2,
            fifo.display().to_string()
        )),
        "python3",
    )?;
    let out = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .with_context(|| format!("opening {}", fifo.display()))?;
    let writer = spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "i=0; while [ $i -lt 12 ]; do echo tick; sleep 0.04; i=$((i+1)); done; sleep {linger}"
            ))
            .stdout(Stdio::from(out)),
        "sh",
    )?;
    let (rpid, wpid) = (reader.id(), writer.id());
    // The ticks take about 0.6 s; the reader then waits for good. Stop recording
    // while it still waits, and clean up a moment later (after the trace ended).
    sleep(0.6 + secs);
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sleep 1; pkill -KILL -P {wpid}; kill -KILL {wpid} {rpid} 2>/dev/null"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the cleanup shell")?;
    truth(name, rpid, "LongWait", "sleep", &["sh", "sleep"]);
    // Leave the children running (dropping a Child neither waits nor kills): the
    // trace must end mid-hang; the cleanup shell ends them a second later.
    drop((reader, writer));
    Ok(())
}
