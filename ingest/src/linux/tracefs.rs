//! tracefs control files and the recorder's own instance (`instances/argus-<pid>`).

use super::error::RecordError;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The prefix of every instance this recorder creates; stale ones are recognised by it.
pub(crate) const INSTANCE_PREFIX: &str = "argus-";

/// Writes `value` to a tracefs control file (truncating: replaces the setting).
pub(crate) fn write(path: &Path, value: &str) -> Result<(), RecordError> {
    fs::write(path, value).map_err(|source| RecordError::TracefsWrite {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

/// Appends `value` to a tracefs list file (`O_APPEND` keeps the entries already there:
/// `set_event_notrace_pid` is cleared by a write without it, see `kernel/trace/trace_events.c`
/// `event_pid_write`).
pub(crate) fn append(path: &Path, value: &str) -> Result<(), RecordError> {
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|source| RecordError::TracefsWrite {
            path: path.to_path_buf(),
            value: value.to_string(),
            source,
        })?;
    file.write_all(value.as_bytes())
        .map_err(|source| RecordError::TracefsWrite {
            path: path.to_path_buf(),
            value: value.to_string(),
            source,
        })
}

/// Reads a control file as text.
pub(crate) fn read(path: &Path) -> Result<String, RecordError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|_| RecordError::Parse {
        path: path.to_path_buf(),
        reason: "not utf-8".to_string(),
    })
}

/// Reads a tracefs file with large reads. Some tracefs files answer only the first `read`:
/// `events/header_page` and `header_event` return 0 for any read at a non-zero offset
/// (`kernel/trace/trace_events.c` `show_header_page_file`: `if (*ppos) return 0;`), so the
/// 32-byte probe read that `std::fs::read` starts with for a file of size 0 gets the first
/// 32 bytes and then end-of-file (seen on 6.18).
pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>, RecordError> {
    let mut file =
        fs::File::open(path).map_err(|source| RecordError::io("opening", path, source))?;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(bytes),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(RecordError::io("reading", path, source)),
        }
    }
}

/// Writes `value` and checks the file reads it back (first token, or the `[selected]` one of a
/// choice list such as `trace_clock`).
pub(crate) fn write_checked(path: &Path, value: &str) -> Result<(), RecordError> {
    write(path, value)?;
    let actual = read(path)?;
    let selected = selected_choice(&actual).unwrap_or_else(|| actual.trim().to_string());
    if selected != value {
        return Err(RecordError::TracefsMismatch {
            path: path.to_path_buf(),
            expected: value.to_string(),
            actual: actual.trim().to_string(),
        });
    }
    Ok(())
}

/// `local global [mono] boot` → `mono`.
fn selected_choice(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

/// Whether process `pid` exists.
pub(crate) fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid encoded in an instance name `argus-<pid>` or `argus-<pid>-<n>`.
pub(crate) fn instance_owner(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    let digits: &str = rest.split('-').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Removes `argus-<pid>[-n]` instances left behind by recorders that died without cleaning up
/// (SIGKILL, power loss). Instances of live processes, including this one, are left alone.
pub(crate) fn remove_stale_instances(tracefs: &Path) {
    let instances = tracefs.join("instances");
    let Ok(entries) = fs::read_dir(&instances) else {
        return;
    };
    let own = std::process::id() as i32;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = instance_owner(&name) else {
            continue;
        };
        if pid == own || pid_alive(pid) {
            continue;
        }
        match fs::remove_dir(entry.path()) {
            Ok(()) => tracing::info!(instance = %name, pid, "removed stale tracefs instance"),
            Err(err) => tracing::warn!(
                instance = %name,
                pid,
                error = %err,
                "cannot remove stale tracefs instance"
            ),
        }
    }
}

/// The recorder's tracefs instance. Dropping it removes the directory, which disables its
/// events and frees its ring buffers (all file descriptors into it must be closed first, or
/// `rmdir` fails with `EBUSY`; the guard retries for a short while).
#[derive(Debug)]
pub(crate) struct Instance {
    path: PathBuf,
    name: String,
}

impl Instance {
    /// `mkdir instances/<name>` and switch tracing off in it straight away (a new instance
    /// starts with `tracing_on` = 1, so `trace_marker` writes would already land in it).
    pub(crate) fn create(tracefs: &Path, name: &str) -> Result<Instance, RecordError> {
        let path = tracefs.join("instances").join(name);
        if path.exists() {
            return Err(RecordError::InstanceExists { path });
        }
        fs::create_dir(&path).map_err(|source| RecordError::io("creating", &path, source))?;
        let instance = Instance {
            path,
            name: name.to_string(),
        };
        write(&instance.file("tracing_on"), "0")?;
        Ok(instance)
    }

    /// The instance directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A file inside the instance.
    pub(crate) fn file(&self, relative: &str) -> PathBuf {
        self.path.join(relative)
    }

    fn remove(&self) -> std::io::Result<()> {
        let mut last = Ok(());
        for _ in 0..50 {
            match fs::remove_dir(&self.path) {
                Ok(()) => return Ok(()),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(err) => last = Err(err),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        last
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Best effort: stop the buffer first so nothing keeps writing while we retry.
        let _ = fs::write(self.path.join("tracing_on"), "0");
        match self.remove() {
            Ok(()) => tracing::debug!(instance = %self.name, "removed tracefs instance"),
            Err(err) => tracing::warn!(
                instance = %self.name,
                error = %err,
                "cannot remove tracefs instance {}; remove it with rmdir",
                self.path.display()
            ),
        }
    }
}

/// Online CPUs from `/sys/devices/system/cpu/online` (`0-3,6`).
pub(crate) fn online_cpus() -> Result<Vec<u32>, RecordError> {
    let path = Path::new("/sys/devices/system/cpu/online");
    let text = read(path)?;
    parse_cpu_list(text.trim()).ok_or_else(|| RecordError::Parse {
        path: path.to_path_buf(),
        reason: format!("not a cpu list: {:?}", text.trim()),
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Lost events of one CPU from `per_cpu/cpuN/stats`: `overrun` (overwritten when the buffer
/// was full) + `dropped events` (refused when the buffer was full in no-overwrite mode).
pub(crate) fn lost_events(stats_path: &Path) -> Result<u64, RecordError> {
    let text = read(stats_path)?;
    let mut lost = 0u64;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() == "overrun" || key.trim() == "dropped events" {
            let n: u64 = value.trim().parse().map_err(|_| RecordError::Parse {
                path: stats_path.to_path_buf(),
                reason: format!("bad number in line {line:?}"),
            })?;
            lost += n;
        }
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list("3-1"), None);
    }

    #[test]
    fn instance_owners() {
        assert_eq!(instance_owner("argus-42"), Some(42));
        assert_eq!(instance_owner("argus-42-3"), Some(42));
        assert_eq!(instance_owner("argus-"), None);
        assert_eq!(instance_owner("argus-x1"), None);
        assert_eq!(instance_owner("other-42"), None);
    }

    #[test]
    fn choices() {
        assert_eq!(
            selected_choice("[local] global mono\n").as_deref(),
            Some("local")
        );
        assert_eq!(selected_choice("1\n"), None);
    }
}
