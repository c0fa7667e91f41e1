//! Programs started where users start them relative to a load (issue 42): in a session of
//! their own (with `sched_autogroup`, a scheduling group of their own, as from another
//! terminal) or in a cgroup of their own (a service, a container), and the saturating load
//! of `../shared/loads/saturate.c` to run beside them.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `../shared/loads/saturate.c` built into `dir` with gcc; panics naming what is missing.
pub fn saturate(dir: &Path) -> PathBuf {
    let src = crate::shared().join("loads/saturate.c");
    assert!(
        src.is_file(),
        "the saturating load is missing: {} (clone the project beside ../shared)",
        src.display()
    );
    let exe = dir.join("saturate");
    let out = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("gcc runs (needed to build {}): {e}", src.display()));
    assert!(out.status.success(), "gcc {}: {out:?}", src.display());
    exe
}

/// Makes `cmd` start in a session of its own and, with `cgroup_tasks` (a cgroup's `tasks`
/// or `cgroup.procs` file), in that cgroup, before it runs.
pub fn own_session(cmd: &mut Command, cgroup_tasks: Option<&Path>) {
    let tasks = cgroup_tasks.map(|t| {
        std::ffi::CString::new(t.as_os_str().as_encoded_bytes()).expect("a path without NUL")
    });
    // SAFETY: only async-signal-safe calls (setsid, open, write, close) between fork and
    // exec, on memory made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(tasks) = &tasks {
                let fd = libc::open(tasks.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0": the writing process itself.
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if !ok {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
