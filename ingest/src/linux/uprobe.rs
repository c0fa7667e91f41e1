//! User-space dispatch probes (`argus record --dispatch BINARY:SYMBOL[@N]`), enqueue probes
//! (`--enqueue BINARY:SYMBOL[@N]`) and call probes (`--probe BINARY:SYMBOL`).
//!
//! Each spec becomes tracefs uprobe events in a group private to this recorder
//! (`argus_<pid>`, `argus_<pid>_<n>` for further recorders of the same process):
//!
//! ```text
//!  p:argus_<pid>/dispatch_<i>     BINARY:0xOFFSET [item=%di:u64]  entry  (probe_<i> for --probe)
//!  r:argus_<pid>/dispatch_<i>_ret BINARY:0xOFFSET                 return (probe_<i>_ret)
//!  p:argus_<pid>/enqueue_<i>      BINARY:0xOFFSET item=%di:u64    entry only
//! ```
//!
//! `@N` (1 to 6; `--enqueue` without it: 1) fetches the function's `N`th integer argument at
//! entry (the System V / AAPCS64 argument register: `%di %si %dx %cx %r8 %r9` on x86-64,
//! `%x0`…`%x5` on aarch64) as field `item`: the identity of the work item queued or run
//! (a pointer to the job, a request id). The converter makes an enqueue record with a non-zero
//! item a `work_queue { work: item }` event and a dispatch entry with one a
//! `work_start { work: item }`, so the graph rules join each run to the segment that queued
//! it by a queue edge, as for kernel work items.
//!
//! `OFFSET` is the symbol's file offset (`st_value - p_vaddr + p_offset` of the `PT_LOAD`
//! segment holding it). The events are enabled in the recorder's instance and their format
//! files copied like any other; next to each, the trace gets a one-line
//! [`crate::format::MARKER_FILE`] (`formats/events/argus_<pid>/dispatch_<i>/argus_marker`)
//! holding the marker text every record of the event stands for: `argus:dispatch-begin
//! SYMBOL` for the entry probe, `argus:dispatch-end SYMBOL` for the return probe
//! (`argus:call-begin` / `argus:call-end` for a call probe: counted, no segment). The
//! converter turns each record of such an event into `EventKind::Marker` with that text, in
//! the thread that hit the probe. (The symbol cannot travel in the records: an immediate
//! string argument of a uprobe reads as `(fault)` on 6.18, it is fetched as user memory.)
//!
//! `uprobe_events` is global: definitions are appended (never truncated, which would delete
//! every other tool's probes) and removed with `-:GROUP/EVENT` once the recorder's instance
//! (where they are enabled) is gone. Groups of dead recorders are removed at the start of
//! the next recording ([`remove_stale_groups`]).

use super::error::{DispatchError, RecordError};
use super::tracefs;
use object::{Object, ObjectSegment};
use std::fs;
use std::path::{Path, PathBuf};

/// The prefix of every uprobe group this recorder creates (`argus_<pid>[_<n>]`).
pub(crate) const GROUP_PREFIX: &str = "argus_";
/// Marker text of a dispatch entry (then a space and the symbol).
pub const DISPATCH_BEGIN: &str = "argus:dispatch-begin";
/// Marker text of a dispatch return (then a space and the symbol).
pub const DISPATCH_END: &str = "argus:dispatch-end";
/// The field of an item-fetching probe's record that holds the item.
pub use crate::format::ITEM_FIELD;
/// The highest argument `@N` can fetch (the integer argument registers of the ABI).
pub const MAX_ITEM_ARG: u8 = 6;

/// A user-space function whose every call is a dispatched callout:
/// `argus record --dispatch BINARY:SYMBOL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchSpec {
    /// The ELF file as given: a path, or a bare name looked up in `PATH` when recording
    /// starts.
    pub binary: PathBuf,
    /// The symbol (raw `.symtab`/`.dynsym` name, or a demangled Rust path such as
    /// `mycrate::event_loop::dispatch`).
    pub symbol: String,
    /// `@N`: the 1-based integer argument that identifies the work item, fetched at entry.
    pub item_arg: Option<u8>,
}

impl DispatchSpec {
    /// Parses `BINARY:SYMBOL[@N]` (split at the first `:`, so a demangled Rust path such as
    /// `app:crate::module::f` keeps its `::`; `@N`, 1 to 6, names the argument
    /// that identifies the work item).
    pub fn parse(spec: &str) -> Result<DispatchSpec, DispatchError> {
        let bad = || DispatchError::BadSpec {
            spec: spec.to_string(),
        };
        let (binary, rest) = spec.split_once(':').ok_or_else(bad)?;
        // `@` then digits: the item's argument (a versioned `.dynsym` name such as
        // `memcpy@GLIBC_2.14` stays whole).
        let (symbol, item_arg) = match rest
            .rsplit_once('@')
            .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            Some((symbol, n)) => {
                let n: u8 = n.parse().map_err(|_| bad())?;
                if !(1..=MAX_ITEM_ARG).contains(&n) {
                    return Err(bad());
                }
                (symbol, Some(n))
            }
            None => (rest, None),
        };
        if binary.is_empty() || symbol.is_empty() {
            return Err(bad());
        }
        Ok(DispatchSpec {
            binary: PathBuf::from(binary),
            symbol: symbol.to_string(),
            item_arg,
        })
    }

    /// An `--enqueue` spec: the item is the first argument unless `@N` says otherwise.
    pub fn parse_enqueue(spec: &str) -> Result<DispatchSpec, DispatchError> {
        let mut s = DispatchSpec::parse(spec)?;
        s.item_arg.get_or_insert(1);
        Ok(s)
    }

    /// The file: the path as given when it contains a `/`, else the first executable file of
    /// that name in `PATH`.
    pub fn binary_path(&self) -> Result<PathBuf, DispatchError> {
        let missing = |searched_path| DispatchError::NoBinary {
            binary: self.binary.clone(),
            symbol: self.symbol.clone(),
            searched_path,
        };
        let text = self.binary.to_string_lossy();
        if text.contains('/') {
            return if self.binary.is_file() {
                Ok(fs::canonicalize(&self.binary).unwrap_or_else(|_| self.binary.clone()))
            } else {
                Err(missing(false))
            };
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(&self.binary);
            if is_executable(&candidate) {
                return Ok(fs::canonicalize(&candidate).unwrap_or(candidate));
            }
        }
        Err(missing(true))
    }

    /// Resolves the symbol: `(file, file offset)`.
    pub fn resolve(&self) -> Result<(PathBuf, u64), DispatchError> {
        let path = self.binary_path()?;
        let elf_err = |reason: String| DispatchError::Elf {
            binary: self.binary.clone(),
            path: path.clone(),
            symbol: self.symbol.clone(),
            reason,
        };
        let data = fs::read(&path).map_err(|e| elf_err(e.to_string()))?;
        let offset =
            symbol_file_offset_of(&data, &self.symbol, Some(&path)).map_err(|e| match e {
                OffsetError::Parse(reason) => elf_err(reason),
                OffsetError::NoSymbol => DispatchError::NoSymbol {
                    binary: self.binary.clone(),
                    path: path.clone(),
                    symbol: self.symbol.clone(),
                },
                OffsetError::NotMapped(vaddr) => DispatchError::NotMapped {
                    binary: self.binary.clone(),
                    path: path.clone(),
                    symbol: self.symbol.clone(),
                    vaddr,
                },
            })?;
        Ok((path, offset))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The uprobe fetch-argument of integer argument `n` (1-based) at function entry:
/// `item=REG:u64`; `None` on an architecture whose registers this does not know.
pub fn item_fetch(n: u8) -> Option<String> {
    const REGS: [&str; MAX_ITEM_ARG as usize] = if cfg!(target_arch = "x86_64") {
        ["%di", "%si", "%dx", "%cx", "%r8", "%r9"]
    } else if cfg!(target_arch = "aarch64") {
        ["%x0", "%x1", "%x2", "%x3", "%x4", "%x5"]
    } else {
        [""; MAX_ITEM_ARG as usize]
    };
    let reg = REGS.get(usize::from(n).checked_sub(1)?)?;
    (!reg.is_empty()).then(|| format!("{ITEM_FIELD}={reg}:u64"))
}

/// Why [`symbol_file_offset`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetError {
    /// Not a readable ELF file.
    Parse(String),
    /// No defined function of that name.
    NoSymbol,
    /// The symbol's address (given) is in no `PT_LOAD` segment with file contents.
    NotMapped(u64),
}

/// The file offset of function `symbol` in ELF image `data`: found in `.symtab`, then
/// `.dynsym`, by raw name or by demangled Rust path; `st_value - p_vaddr + p_offset` of the
/// `PT_LOAD` segment that holds it.
pub fn symbol_file_offset(data: &[u8], symbol: &str) -> Result<u64, OffsetError> {
    symbol_file_offset_of(data, symbol, None)
}

/// [`symbol_file_offset`], and for a stripped binary at `path` (when given) also in its
/// separate debug file, as a distribution ships it: its static functions are named only
/// there.
pub(crate) fn symbol_file_offset_of(
    data: &[u8],
    symbol: &str,
    path: Option<&Path>,
) -> Result<u64, OffsetError> {
    let file = object::File::parse(data).map_err(|e| OffsetError::Parse(e.to_string()))?;
    let vaddr = crate::symbolize::function_vaddr(&file, symbol)
        .or_else(|| path.and_then(|p| crate::symbolize::debug_function_vaddr(p, &file, symbol)))
        .ok_or(OffsetError::NoSymbol)?;
    file.segments()
        .find_map(|seg| {
            let (offset, filesz) = seg.file_range();
            let start = seg.address();
            (vaddr >= start && vaddr < start + filesz).then(|| vaddr - start + offset)
        })
        .ok_or(OffsetError::NotMapped(vaddr))
}

/// The uprobe group of a recorder instance: `argus-123-2` → `argus_123_2`.
/// A custom instance name not starting with a letter gets a `g_` prefix (group names must).
pub(crate) fn group_name(instance: &str) -> String {
    let name: String = instance
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name
    } else {
        format!("g_{name}")
    }
}

/// The probes of one recording; dropping it removes them from `uprobe_events` (the instance
/// that enables them must be gone first, or the kernel refuses with `EBUSY`).
#[derive(Debug)]
pub(crate) struct Uprobes {
    control: PathBuf,
    group: String,
    /// `GROUP/EVENT` names, entry and return probe of each spec.
    events: Vec<String>,
    /// The marker text of each event, in `events` order.
    markers: Vec<String>,
}

impl Uprobes {
    /// Resolves every spec and defines its entry and return probe in group `group`.
    pub(crate) fn create(
        tracefs: &Path,
        group: &str,
        specs: &[DispatchSpec],
        enqueues: &[DispatchSpec],
        calls: &[DispatchSpec],
    ) -> Result<Uprobes, RecordError> {
        let control = tracefs.join("uprobe_events");
        let mut probes = Uprobes {
            control,
            group: group.to_string(),
            events: Vec::new(),
            markers: Vec::new(),
        };
        if specs.is_empty() && enqueues.is_empty() && calls.is_empty() {
            return Ok(probes);
        }
        if !probes.control.exists() {
            return Err(DispatchError::NoUprobes {
                path: probes.control.clone(),
            }
            .into());
        }
        // Resolve everything before touching the kernel.
        let mut defs = Vec::new();
        // (spec, event name, entry marker, return marker: none for an enqueue, item?)
        let kinds = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let name = format!("dispatch_{i}");
                (s, name, DISPATCH_BEGIN, Some(DISPATCH_END), s.item_arg)
            })
            .chain(enqueues.iter().enumerate().map(|(i, s)| {
                let name = format!("enqueue_{i}");
                let arg = Some(s.item_arg.unwrap_or(1));
                (s, name, argus_schema::markers::ENQUEUE, None, arg)
            }))
            .chain(calls.iter().enumerate().map(|(i, s)| {
                (
                    s,
                    format!("probe_{i}"),
                    argus_schema::markers::CALL_BEGIN,
                    Some(argus_schema::markers::CALL_END),
                    None,
                )
            }));
        for (spec, name, begin_marker, end_marker, item_arg) in kinds {
            let (path, offset) = spec.resolve()?;
            if path.to_string_lossy().chars().any(char::is_whitespace) {
                return Err(DispatchError::UnusablePath {
                    binary: spec.binary.clone(),
                    path,
                    symbol: spec.symbol.clone(),
                }
                .into());
            }
            if spec.symbol.contains(['\n', '\r']) {
                return Err(DispatchError::BadSpec {
                    spec: format!("{}:{}", spec.binary.display(), spec.symbol),
                }
                .into());
            }
            let target = format!("{}:{offset:#x}", path.display());
            let fetch = match item_arg {
                Some(n) => {
                    let f = item_fetch(n).ok_or_else(|| DispatchError::NoItemArgument {
                        spec: format!("{}:{}@{n}", spec.binary.display(), spec.symbol),
                        arch: std::env::consts::ARCH,
                    })?;
                    format!(" {f}")
                }
                None => String::new(),
            };
            let begin = name.clone();
            defs.push((
                begin.clone(),
                format!("p:{group}/{begin} {target}{fetch}"),
                format!("{begin_marker} {}", spec.symbol),
            ));
            if let Some(end_marker) = end_marker {
                let end = format!("{name}_ret");
                defs.push((
                    end.clone(),
                    format!("r:{group}/{end} {target}"),
                    format!("{end_marker} {}", spec.symbol),
                ));
            }
            tracing::info!(binary = %path.display(), symbol = %spec.symbol, offset, "dispatch probe");
        }
        for (event, def, marker) in defs {
            tracefs::append(&probes.control, &format!("{def}\n"))?;
            probes.events.push(format!("{group}/{event}"));
            probes.markers.push(marker);
        }
        Ok(probes)
    }

    /// The `GROUP/EVENT` names to record (entry, return, entry, return, ..., an enqueue's
    /// entry alone).
    pub(crate) fn events(&self) -> &[String] {
        &self.events
    }

    /// Writes each event's marker text next to its copied format file
    /// (`formats/events/GROUP/EVENT/argus_marker`).
    pub(crate) fn write_markers(&self, trace_dir: &Path) -> Result<(), RecordError> {
        let events = crate::tracedir::formats_dir(trace_dir).join("events");
        for (event, marker) in self.events.iter().zip(&self.markers) {
            let dir = events.join(event);
            super::sysinfo::create_dir_private(&dir)?;
            super::sysinfo::write_private(
                &dir.join(crate::format::MARKER_FILE),
                format!("{marker}\n").as_bytes(),
            )?;
        }
        Ok(())
    }
}

impl Drop for Uprobes {
    fn drop(&mut self) {
        if self.events.is_empty() {
            return;
        }
        for event in self.events.drain(..) {
            if let Err(err) = tracefs::append(&self.control, &format!("-:{event}\n")) {
                tracing::warn!(event = %event, error = %err, "cannot remove uprobe; remove it with `echo '-:{event}' >> {}`", self.control.display());
            }
        }
        tracing::debug!(group = %self.group, "removed dispatch uprobes");
    }
}

/// Removes the uprobe events of groups `argus_<pid>[_n]` whose recorder is dead (call after
/// the stale instances that enabled them are gone). Other tools' probes are left alone.
pub(crate) fn remove_stale_groups(tracefs_dir: &Path) {
    let control = tracefs_dir.join("uprobe_events");
    let Ok(text) = tracefs::read(&control) else {
        return;
    };
    let own = std::process::id() as i32;
    for line in text.lines() {
        // "p:argus_123/dispatch_0 /path:0x... args"
        let Some(name) = line
            .split_whitespace()
            .next()
            .and_then(|first| first.split_once(':'))
            .map(|(_, name)| name)
        else {
            continue;
        };
        let Some((group, _)) = name.split_once('/') else {
            continue;
        };
        let Some(pid) = group_owner(group) else {
            continue;
        };
        if pid == own || tracefs::pid_alive(pid) {
            continue;
        }
        match tracefs::append(&control, &format!("-:{name}\n")) {
            Ok(()) => tracing::info!(event = %name, pid, "removed stale uprobe"),
            Err(err) => {
                tracing::warn!(event = %name, pid, error = %err, "cannot remove stale uprobe")
            }
        }
    }
}

/// The pid in a group name `argus_<pid>` or `argus_<pid>_<n>`.
fn group_owner(group: &str) -> Option<i32> {
    let rest = group.strip_prefix(GROUP_PREFIX)?;
    let digits = rest.split('_').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = DispatchSpec::parse("/bin/app:handle").expect("spec");
        assert_eq!(s.binary, PathBuf::from("/bin/app"));
        assert_eq!(s.symbol, "handle");
        let s = DispatchSpec::parse("app:krate::loop_::f").expect("rust path");
        assert_eq!(s.binary, PathBuf::from("app"));
        assert_eq!(s.symbol, "krate::loop_::f");
        assert_eq!(s.item_arg, None);
        let s = DispatchSpec::parse("/bin/app:run_job@2").expect("item argument");
        assert_eq!((s.symbol.as_str(), s.item_arg), ("run_job", Some(2)));
        let s = DispatchSpec::parse_enqueue("/bin/app:push").expect("enqueue");
        assert_eq!(
            s.item_arg,
            Some(1),
            "an enqueue's item is its first argument"
        );
        for bad in [
            "app",
            ":f",
            "app:",
            "",
            "app:f@0",
            "app:f@7",
            "app:f@300",
            "app:@1",
        ] {
            assert!(DispatchSpec::parse(bad).is_err(), "{bad:?}");
        }
        let s = DispatchSpec::parse("libc.so.6:memcpy@GLIBC_2.14").expect("versioned");
        assert_eq!((s.symbol.as_str(), s.item_arg), ("memcpy@GLIBC_2.14", None));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(item_fetch(1).as_deref(), Some("item=%di:u64"));
            assert_eq!(item_fetch(6).as_deref(), Some("item=%r9:u64"));
        }
        assert_eq!(item_fetch(0), None);
        assert_eq!(item_fetch(7), None);
    }

    #[test]
    fn groups() {
        assert_eq!(group_name("argus-12"), "argus_12");
        assert_eq!(group_name("argus-12-3"), "argus_12_3");
        assert_eq!(group_name("7.x"), "g_7_x");
        assert_eq!(group_owner("argus_12"), Some(12));
        assert_eq!(group_owner("argus_12_3"), Some(12));
        assert_eq!(group_owner("argus_x"), None);
        assert_eq!(group_owner("other_12"), None);
    }

    /// A stripped binary's static function resolves through its debug file, to the offset
    /// the unstripped build gives; without the path (no debug file looked for) it is not
    /// found.
    #[test]
    fn a_stripped_binarys_static_function_resolves_through_its_debug_file() {
        use crate::symbolize::stripped::{Split, HELPER};
        let dir = tempfile::tempdir().expect("tempdir");
        let split = Split::make(dir.path(), "prog", &[], true);
        let full = fs::read(&split.full).expect("read");
        let bin = fs::read(&split.bin).expect("read");
        let want = symbol_file_offset(&full, HELPER).expect("unstripped");
        assert_eq!(
            symbol_file_offset_of(&bin, HELPER, Some(&split.bin)),
            Ok(want)
        );
        assert_eq!(symbol_file_offset(&bin, HELPER), Err(OffsetError::NoSymbol));
        assert_eq!(
            symbol_file_offset_of(&bin, "no_such_symbol_argus", Some(&split.bin)),
            Err(OffsetError::NoSymbol)
        );
    }

    #[test]
    fn own_binary_resolves() {
        let exe = std::env::current_exe().expect("exe");
        let data = fs::read(&exe).expect("read exe");
        // A function every Rust test binary has.
        let off = symbol_file_offset(&data, "main").expect("main");
        assert!(off > 0 && (off as usize) < data.len());
        assert_eq!(
            symbol_file_offset(&data, "no_such_symbol_argus"),
            Err(OffsetError::NoSymbol)
        );
        assert!(matches!(
            symbol_file_offset(b"not elf", "main"),
            Err(OffsetError::Parse(_))
        ));
        let spec = DispatchSpec {
            binary: PathBuf::from("/nonexistent/argus-bin"),
            symbol: "f".into(),
            item_arg: None,
        };
        let msg = spec.resolve().expect_err("missing").to_string();
        assert!(
            msg.contains("/nonexistent/argus-bin") && msg.contains('f'),
            "{msg}"
        );
        let spec = DispatchSpec {
            binary: exe,
            symbol: "no_such_symbol_argus".into(),
            item_arg: None,
        };
        let msg = spec.resolve().expect_err("no symbol").to_string();
        assert!(msg.contains("no_such_symbol_argus"), "{msg}");
    }
}
