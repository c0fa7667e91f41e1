//! Symbolization of recorded call stacks (`argus record --stacks`), for `argus build`'s
//! `stacks.parquet`, and symbol → address resolution for `argus record --watch SYMBOL@PID`.
//!
//! ```text
//!  user ip ─► the pid's /proc/PID/maps copy (perf/maps/PID-TS.maps) taken closest to the sample
//!          ─► mapping → file offset → PT_LOAD segment → ELF virtual address
//!          ─► .symtab (else .dynsym) of that ELF, read once per file ─► demangled name + offset
//!  kernel ip ─► the trace's kallsyms.zst ([`Kallsyms`]) ─► name + offset, object `[kernel]`
//!  user stack ─► DWARF CFI unwinding (.eh_frame) of the copied stack bytes and registers,
//!               falling back to / completed by the kernel's frame-pointer callchain
//! ```
//!
//! **Crates, and why.** ELF reading uses [`object`] (the gimli project's reader, maintained,
//! used by `std`'s backtraces and `addr2line`): it gives the symbol tables, program headers
//! and unwind sections with no copying, and nothing more — a full symbolizer such as
//! `blazesym` would also bring DWARF line tables, a C build and ~10× the dependency weight
//! for names we get from `.symtab`. Unwinding uses [`framehop`] (samply's unwinder,
//! maintained, pure Rust, built on `gimli`): frame-pointer callchains lose the caller of every
//! frameless function — e.g. glibc's `read` wrapper never pushes a frame, so the function
//! that called `read()` is missing — while `.eh_frame` unwinding of the recorded stack copy
//! finds it. Names are demangled with `rustc-demangle` and `cpp_demangle` (both small).
//!
//! **Choosing the maps copy.** A process's maps are copied when recording starts, when it
//! first appears, when it execs, and when a sample shows an address its last copy does not
//! cover (dlopen). For a sample at time `t`, the last copy taken at or before `t` is used if
//! it covers the address with an executable mapping, else the first later copy that does
//! (a copy taken before an exec may have data where the new image put its code).
//!
//! Limits: the ELF files are read at build time by the path the maps show, so the build
//! must run on the recording machine with the binaries unchanged (a `(deleted)` or replaced
//! file gives unknown symbols; a mismatch in size of the mapped segment is not detected);
//! processes in other mount namespaces (containers) resolve only if the path is the same
//! from the host; kernel module symbols come from kallsyms like the core kernel's.

use crate::kallsyms::Kallsyms;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod debugfile;
mod inlined;

/// A problem reading maps or an ELF file. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum SymbolizeError {
    /// Reading a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A maps line does not parse.
    #[error("{}: line {line}: {reason}", path.display())]
    Maps {
        /// The maps file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// An ELF file does not parse.
    #[error("{}: not a readable ELF file: {reason}", path.display())]
    Elf {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A symbol is not in any ELF mapped by the process.
    #[error("symbol {name:?} not found in the ELF files mapped by pid {pid}")]
    NoSymbol {
        /// The symbol.
        name: String,
        /// The process.
        pid: i32,
    },
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `r`, `w`, `x` permissions as four letters (`r-xp`).
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// The mapped file or pseudo-name (`[stack]`), if any.
    pub path: Option<String>,
    /// The mapped file's device (`major`, `minor`; `(0, 0)` for no file).
    pub dev: (u32, u32),
    /// The mapped file's inode (0 for no file, or unknown).
    pub inode: u64,
}

impl MapEntry {
    /// Whether the mapping is executable.
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// The mapped file, when it is a real file (absolute path, not deleted).
    pub fn file(&self) -> Option<&str> {
        self.path
            .as_deref()
            .filter(|p| p.starts_with('/') && !p.ends_with(" (deleted)"))
    }
}

/// Parses the text of `/proc/PID/maps`; `path` names it in errors.
pub fn parse_maps(path: &Path, text: &str) -> Result<Vec<MapEntry>, SymbolizeError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: &str| SymbolizeError::Maps {
            path: path.to_path_buf(),
            line: i + 1,
            reason: format!("{reason}: {line:?}"),
        };
        let mut parts = line.splitn(6, ' ');
        let range = parts.next().ok_or_else(|| bad("no address range"))?;
        let perms = parts.next().ok_or_else(|| bad("no permissions"))?;
        let offset = parts.next().ok_or_else(|| bad("no offset"))?;
        let dev = parts.next().ok_or_else(|| bad("no device"))?;
        let inode = parts.next().ok_or_else(|| bad("no inode"))?;
        let name = parts.next().map(str::trim).filter(|s| !s.is_empty());
        let (s, e) = range
            .split_once('-')
            .ok_or_else(|| bad("address range without '-'"))?;
        let hex = |t: &str| u64::from_str_radix(t, 16).map_err(|_| bad("not hexadecimal"));
        if perms.len() != 4 {
            return Err(bad("permissions are not 4 letters"));
        }
        let (start, end) = (hex(s)?, hex(e)?);
        if end < start {
            return Err(bad("range ends before it starts"));
        }
        // Only the check that a file was not replaced since reads these: one that does not
        // parse reads as unknown (0), which that check passes.
        let dev = dev
            .split_once(':')
            .and_then(|(a, b)| {
                Some((
                    u32::from_str_radix(a, 16).ok()?,
                    u32::from_str_radix(b, 16).ok()?,
                ))
            })
            .unwrap_or((0, 0));
        let inode = inode.parse().unwrap_or(0);
        out.push(MapEntry {
            start,
            end,
            perms: perms.to_string(),
            offset: hex(offset)?,
            path: name.map(str::to_string),
            dev,
            inode,
        });
    }
    Ok(out)
}

/// Demangles a Rust or C++ symbol name; other names are returned unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    name.to_string()
}

/// A `PT_LOAD` segment.
#[derive(Clone, Copy, Debug)]
struct Segment {
    vaddr: u64,
    offset: u64,
    filesz: u64,
}

/// What is read once per ELF file: function and object symbols, load segments, unwind
/// sections.
#[derive(Debug)]
pub struct ElfInfo {
    path: PathBuf,
    /// Function symbols `(start, size, raw name)`, sorted by start (names are demangled on
    /// lookup: a large library has ~10⁵ symbols and few are ever asked for).
    symbols: Vec<(u64, u64, Box<str>)>,
    /// Every defined function, object and TLS symbol `(raw name, start, size)`, for
    /// [`resolve_symbol`].
    all: Vec<(Box<str>, u64, u64)>,
    segments: Vec<Segment>,
    unwind: UnwindSections,
    /// The separate debug file its symbols (and DWARF) were also read from
    /// (`symbolize/debugfile.rs`).
    debug_file: Option<PathBuf>,
    /// The file's device (`major`, `minor`) and inode when it was read.
    identity: Option<((u32, u32), u64)>,
}

#[derive(Debug, Default)]
struct UnwindSections {
    text: Option<(Range<u64>, Arc<[u8]>)>,
    eh_frame: Option<(Range<u64>, Arc<[u8]>)>,
    eh_frame_hdr: Option<(Range<u64>, Arc<[u8]>)>,
    got: Option<Range<u64>>,
}

impl ElfInfo {
    /// Reads `path`'s symbols (`.symtab` and `.dynsym`, and the `.symtab` of its separate
    /// debug file when it has one: a stripped distribution binary names its static
    /// functions only there), segments and unwind sections.
    pub fn load(path: &Path) -> Result<ElfInfo, SymbolizeError> {
        ElfInfo::load_with_debug_root(path, Path::new(debugfile::DEBUG_ROOT))
    }

    /// [`ElfInfo::load`], looking for debug files under `root` rather than
    /// `/usr/lib/debug`.
    fn load_with_debug_root(path: &Path, root: &Path) -> Result<ElfInfo, SymbolizeError> {
        let data = std::fs::read(path).map_err(|source| SymbolizeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let file = object::File::parse(&*data).map_err(|e| SymbolizeError::Elf {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut symbols = Vec::new();
        let mut all = Vec::new();
        add_symbols(&file, &mut symbols, &mut all);
        let debug_file = debugfile::find(path, &file, root);
        if let Some(dbg) = &debug_file {
            match std::fs::File::open(dbg) {
                Ok(f) => {
                    let cache = object::ReadCache::new(f);
                    match object::File::parse(&cache) {
                        Ok(d) => add_symbols(&d, &mut symbols, &mut all),
                        Err(e) => tracing::debug!("{}: {e}", dbg.display()),
                    }
                }
                Err(e) => tracing::debug!("{}: {e}", dbg.display()),
            }
        }
        symbols.sort_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        symbols.dedup_by_key(|s| s.0);
        let segments = file
            .segments()
            .filter_map(|seg| {
                let (offset, filesz) = seg.file_range();
                (filesz > 0).then_some(Segment {
                    vaddr: seg.address(),
                    offset,
                    filesz,
                })
            })
            .collect();
        let section = |name: &str| -> Option<(Range<u64>, Arc<[u8]>)> {
            let s = file.section_by_name(name)?;
            let data = s.data().ok()?;
            Some((s.address()..s.address() + s.size(), Arc::from(data)))
        };
        let unwind = UnwindSections {
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            got: file
                .section_by_name(".got")
                .map(|s| s.address()..s.address() + s.size()),
        };
        Ok(ElfInfo {
            path: path.to_path_buf(),
            symbols,
            all,
            segments,
            unwind,
            debug_file,
            identity: file_identity(path),
        })
    }

    /// Whether the file read is the one mapping `m` mapped: `false` only when both are on
    /// the same device with different inodes (the file was replaced since the recording, a
    /// rebuilt binary say, and its addresses mean other functions now). On another device
    /// (an overlay filesystem shows the lower one's in maps) nothing can be told: `true`.
    pub fn same_file_as(&self, m: &MapEntry) -> bool {
        match self.identity {
            Some((dev, inode)) if m.inode != 0 && dev == m.dev => inode == m.inode,
            _ => true,
        }
    }

    /// The ELF virtual address of a file offset (through the `PT_LOAD` segment holding it).
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| offset >= s.offset && offset < s.offset + s.filesz)
            .map(|s| offset - s.offset + s.vaddr)
    }

    /// The function containing ELF virtual address `vaddr`: `(demangled name, vaddr -
    /// start)`. A symbol of size 0 covers addresses up to the next symbol.
    pub fn lookup(&self, vaddr: u64) -> Option<(String, u64)> {
        let i = self.symbols.partition_point(|s| s.0 <= vaddr);
        let (start, size, name) = self.symbols.get(i.checked_sub(1)?)?;
        let off = vaddr - start;
        (*size == 0 || off < *size).then(|| (demangle(name), off))
    }

    /// A symbol by raw name, or by demangled Rust path (`crate::module::NAME`): `(vaddr,
    /// size)`.
    pub fn find(&self, name: &str) -> Option<(u64, u64)> {
        self.all
            .iter()
            .find(|s| &*s.0 == name)
            .or_else(|| {
                self.all.iter().find(|s| {
                    s.0.starts_with("_ZN")
                        && rustc_demangle::try_demangle(&s.0)
                            .is_ok_and(|d| format!("{d:#}") == name)
                })
            })
            .map(|s| (s.1, s.2))
    }
}

/// The address of function `symbol` in `file`'s `.symtab` or `.dynsym`, by raw name or by
/// demangled Rust path.
#[cfg(target_os = "linux")]
pub(crate) fn function_vaddr<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    symbol: &str,
) -> Option<u64> {
    let is_fn = |s: &object::Symbol<'d, '_, R>| s.kind() == SymbolKind::Text && !s.is_undefined();
    let by_raw = |s: &object::Symbol<'d, '_, R>| s.name().is_ok_and(|n| n == symbol);
    let by_demangled = |s: &object::Symbol<'d, '_, R>| {
        s.name().is_ok_and(|n| {
            rustc_demangle::try_demangle(n).is_ok_and(|d| format!("{d:#}") == symbol)
        })
    };
    file.symbols()
        .chain(file.dynamic_symbols())
        .find(|s| is_fn(s) && by_raw(s))
        .or_else(|| {
            file.symbols()
                .chain(file.dynamic_symbols())
                .find(|s| is_fn(s) && by_demangled(s))
        })
        .map(|s| s.address())
}

/// The address of function `symbol` of the ELF file `path` (parsed as `file`) from its
/// separate debug file (`symbolize/debugfile.rs`), for a stripped binary's static functions.
#[cfg(target_os = "linux")]
pub(crate) fn debug_function_vaddr<'d, R: object::ReadRef<'d>>(
    path: &Path,
    file: &object::File<'d, R>,
    symbol: &str,
) -> Option<u64> {
    let debug = debugfile::find(path, file, Path::new(debugfile::DEBUG_ROOT))?;
    let cache = object::ReadCache::new(std::fs::File::open(debug).ok()?);
    function_vaddr(&object::File::parse(&cache).ok()?, symbol)
}

/// The device (`major`, `minor`, as maps shows them) and inode of the file at `path`.
fn file_identity(path: &Path) -> Option<((u32, u32), u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let dev = m.dev();
    // The kernel's encoding of a device number (glibc's `major`/`minor`).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    Some(((major as u32, minor as u32), m.ino()))
}

/// Adds `file`'s function symbols `(start, size, raw name)` to `symbols` and its defined
/// function, object and TLS symbols `(raw name, start, size)` to `all`.
fn add_symbols<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    symbols: &mut Vec<(u64, u64, Box<str>)>,
    all: &mut Vec<(Box<str>, u64, u64)>,
) {
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if !matches!(
            sym.kind(),
            SymbolKind::Text | SymbolKind::Data | SymbolKind::Tls
        ) || sym.is_undefined()
        {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        if sym.kind() == SymbolKind::Text {
            symbols.push((sym.address(), sym.size(), Box::<str>::from(name)));
        }
        all.push((Box::<str>::from(name), sym.address(), sym.size()));
    }
}

/// Reads ELF files once each (a file that fails to load is remembered as such).
#[derive(Debug, Default)]
pub struct ElfCache {
    files: HashMap<String, Option<Arc<ElfInfo>>>,
}

impl ElfCache {
    /// The ELF at `path`, loaded on first use; `None` when it cannot be read.
    pub fn get(&mut self, path: &str) -> Option<Arc<ElfInfo>> {
        self.files
            .entry(path.to_string())
            .or_insert_with(|| match ElfInfo::load(Path::new(path)) {
                Ok(e) => Some(Arc::new(e)),
                Err(e) => {
                    tracing::debug!("symbolization: {e}");
                    None
                }
            })
            .clone()
    }
}

/// `path`'s inlined calls (from its debug file when it has no DWARF of its own); `None` when
/// neither has DWARF or can be read (said at debug level: its frames keep the symbol table's
/// names).
fn load_inlines(path: &Path, debug_file: Option<&Path>) -> Option<inlined::Inlines> {
    let load = |p: &Path| {
        std::fs::File::open(p)
            .map_err(inlined::InlinesError::from)
            .and_then(|f| inlined::Inlines::load(&f))
            .map_err(|e| tracing::debug!("inlined functions of {}: {e}", p.display()))
            .ok()
            .flatten()
    };
    load(path).or_else(|| debug_file.and_then(load))
}

/// The ELF virtual address of runtime address `ip` in mapping `m` of `elf`.
fn vaddr_in(elf: &ElfInfo, m: &MapEntry, ip: u64) -> Option<u64> {
    elf.offset_to_vaddr(ip - m.start + m.offset)
}

/// Runtime address of ELF virtual address 0 for the file mapped by `m` (the load bias),
/// through the `PT_LOAD` segment that most of the mapping's file range belongs to. Not
/// through the mapping's own offset: it is page-aligned down, and when a segment starts
/// inside a page (lld puts the code at file offset 0xf8f200, vaddr 0xf90200) that offset
/// lies in the segment before, whose vaddr is a page off — every unwind lookup in the file
/// then missed its frame description.
fn load_bias(elf: &ElfInfo, m: &MapEntry) -> Option<u64> {
    let (lo, hi) = (m.offset, m.offset + (m.end - m.start));
    let s = elf
        .segments
        .iter()
        .filter(|s| s.offset < hi && s.offset + s.filesz > lo)
        .max_by_key(|s| (s.offset + s.filesz).min(hi) - s.offset.max(lo))?;
    // File offset `o` of the mapping runs at `m.start + o - m.offset`; in the segment it is
    // at vaddr `o - s.offset + s.vaddr`.
    Some(
        m.start
            .wrapping_sub(m.offset)
            .wrapping_add(s.offset)
            .wrapping_sub(s.vaddr),
    )
}

/// Resolves `SYMBOL` in the live process `pid` (its `/proc/PID/maps` and mapped ELF files):
/// `(runtime address, size)`. The main executable is searched first.
pub fn resolve_symbol(pid: i32, name: &str) -> Result<(u64, u64), SymbolizeError> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path).map_err(|source| SymbolizeError::Io {
        path: path.clone(),
        source,
    })?;
    let maps = parse_maps(&path, &text)?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let mut files: Vec<&str> = Vec::new();
    for m in &maps {
        if let Some(f) = m.file() {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    files.sort_by_key(|f| Some(*f) != exe.as_deref());
    let mut cache = ElfCache::default();
    for f in files {
        let Some(elf) = cache.get(f) else { continue };
        let Some((vaddr, size)) = elf.find(name) else {
            continue;
        };
        // Any mapping of this file gives the bias.
        if let Some(bias) = maps
            .iter()
            .filter(|m| m.file() == Some(f))
            .find_map(|m| load_bias(&elf, m))
        {
            return Ok((vaddr.wrapping_add(bias), size));
        }
    }
    Err(SymbolizeError::NoSymbol {
        name: name.to_string(),
        pid,
    })
}

/// A symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymFrame {
    /// Kernel frame.
    pub kernel: bool,
    /// The address.
    pub ip: u64,
    /// Demangled function name.
    pub symbol: Option<String>,
    /// `ip - symbol start` (`None` for a function inlined at `ip`, which has no start of its
    /// own, and when the symbol is unknown).
    pub offset: Option<u64>,
    /// ELF path, `[kernel]`, or `[module]`.
    pub object: Option<String>,
}

/// A copy of a process's maps.
struct MapsCopy {
    ts: u64,
    maps: Vec<MapEntry>,
    unwinder: Option<Arc<framehop::x86_64::UnwinderX86_64<Arc<[u8]>>>>,
}

/// Symbolizes the stacks of one trace directory.
#[derive(Default)]
pub struct Symbolizer {
    kallsyms: Option<Kallsyms>,
    maps: BTreeMap<i32, Vec<MapsCopy>>,
    elves: ElfCache,
    cache: Option<framehop::x86_64::CacheX86_64>,
    /// Each ELF file's inlined calls, read on first use (`None`: no DWARF, or unreadable).
    inlines: HashMap<String, Option<inlined::Inlines>>,
    /// Files replaced since the recording (said once each; their frames stay unnamed).
    replaced: std::collections::HashSet<String>,
}

impl std::fmt::Debug for MapsCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapsCopy")
            .field("ts", &self.ts)
            .field("maps", &self.maps.len())
            .finish()
    }
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("kallsyms", &self.kallsyms.as_ref().map(Kallsyms::len))
            .field("maps", &self.maps)
            .finish()
    }
}

impl Symbolizer {
    /// A symbolizer using `kallsyms` for kernel addresses and the maps copies
    /// `(pid, ts, path)` ([`crate::perffile::PerfTrace::maps_files`]). Unreadable maps files
    /// are skipped with a warning (their process's frames stay unknown).
    pub fn new(kallsyms: Option<Kallsyms>, maps_files: &[(i32, u64, PathBuf)]) -> Symbolizer {
        let mut maps: BTreeMap<i32, Vec<MapsCopy>> = BTreeMap::new();
        for (pid, ts, path) in maps_files {
            let parsed = std::fs::read_to_string(path)
                .map_err(|source| SymbolizeError::Io {
                    path: path.clone(),
                    source,
                })
                .and_then(|t| parse_maps(path, &t));
            match parsed {
                Ok(m) => maps.entry(*pid).or_default().push(MapsCopy {
                    ts: *ts,
                    maps: m,
                    unwinder: None,
                }),
                Err(e) => tracing::warn!("{e}; frames of pid {pid} at that time stay unknown"),
            }
        }
        for copies in maps.values_mut() {
            copies.sort_by_key(|c| c.ts);
        }
        Symbolizer {
            kallsyms,
            maps,
            elves: ElfCache::default(),
            cache: None,
            inlines: HashMap::new(),
            replaced: Default::default(),
        }
    }

    /// Index of the maps copy of `pid` used for address `ip` at time `ts`.
    fn copy_for(&self, pid: i32, ts: u64, ip: u64) -> Option<usize> {
        let copies = self.maps.get(&pid)?;
        // Only an executable mapping can hold a sampled ip: a copy taken before an exec may
        // have data (a thread stack, a heap arena) where the new image put its code.
        let covers = |c: &MapsCopy| {
            c.maps
                .iter()
                .any(|m| ip >= m.start && ip < m.end && m.executable())
        };
        let before = copies.partition_point(|c| c.ts <= ts);
        if let Some(i) = before.checked_sub(1) {
            if covers(&copies[i]) {
                return Some(i);
            }
        }
        (before..copies.len())
            .find(|&i| covers(&copies[i]))
            .or_else(|| (0..before).rev().find(|&i| covers(&copies[i])))
    }

    /// Symbolizes a kernel address.
    pub fn kernel_frame(&self, ip: u64, lookup_ip: u64) -> SymFrame {
        let found = self.kallsyms.as_ref().and_then(|k| k.lookup(lookup_ip));
        SymFrame {
            kernel: true,
            ip,
            symbol: found.map(|(n, _)| n.to_string()),
            offset: found.map(|(_, o)| o + (ip - lookup_ip)),
            object: Some("[kernel]".to_string()),
        }
    }

    /// Symbolizes a user address of `pid` at time `ts`. `lookup_ip` is `ip - 1` for return
    /// addresses (so a call at the very end of a function names that function).
    pub fn user_frame(&mut self, pid: i32, ts: u64, ip: u64, lookup_ip: u64) -> SymFrame {
        self.user_frame_at(pid, ts, ip, lookup_ip).0
    }

    /// [`Symbolizer::user_frame`], preceded by the functions inlined at that address
    /// (innermost first, [`SymFrame::offset`] `None`), from the file's DWARF.
    pub fn user_frames(&mut self, pid: i32, ts: u64, ip: u64, lookup_ip: u64) -> Vec<SymFrame> {
        let (frame, at) = self.user_frame_at(pid, ts, ip, lookup_ip);
        let mut frames = Vec::new();
        if let Some((elf, vaddr)) = at {
            // Keyed by the path as the maps name it (no copy once the file is known).
            let key = elf.path.to_string_lossy();
            if !self.inlines.contains_key(key.as_ref()) {
                let loaded = load_inlines(&elf.path, elf.debug_file.as_deref());
                self.inlines.insert(key.to_string(), loaded);
            }
            if let Some(inlines) = self.inlines.get_mut(key.as_ref()).and_then(Option::as_mut) {
                frames.extend(inlines.at(vaddr).iter().map(|symbol| SymFrame {
                    kernel: false,
                    ip,
                    symbol: symbol.clone(),
                    offset: None,
                    object: frame.object.clone(),
                }));
            }
        }
        frames.push(frame);
        frames
    }

    /// [`Symbolizer::user_frame`], with the ELF file and virtual address the address was
    /// looked up at.
    fn user_frame_at(
        &mut self,
        pid: i32,
        ts: u64,
        ip: u64,
        lookup_ip: u64,
    ) -> (SymFrame, Option<(Arc<ElfInfo>, u64)>) {
        let mut frame = SymFrame {
            kernel: false,
            ip,
            symbol: None,
            offset: None,
            object: None,
        };
        let Some(i) = self.copy_for(pid, ts, lookup_ip) else {
            return (frame, None);
        };
        let Some(m) = self.maps.get(&pid).and_then(|c| c.get(i)).and_then(|c| {
            c.maps
                .iter()
                .find(|m| lookup_ip >= m.start && lookup_ip < m.end)
                .cloned()
        }) else {
            return (frame, None);
        };
        frame.object = m.path.clone();
        let Some(file) = m.file() else {
            return (frame, None);
        };
        let Some(elf) = self.elves.get(file) else {
            return (frame, None);
        };
        if !self.same_file(&elf, &m) {
            return (frame, None);
        }
        let Some(vaddr) = vaddr_in(&elf, &m, lookup_ip) else {
            return (frame, None);
        };
        if let Some((name, off)) = elf.lookup(vaddr) {
            frame.symbol = Some(name);
            frame.offset = Some(off + (ip - lookup_ip));
        }
        (frame, Some((elf, vaddr)))
    }

    /// Whether `elf` is the file mapping `m` mapped ([`ElfInfo::same_file_as`]); a file
    /// replaced since the recording is said once, and its frames are left unnamed (and not
    /// unwound through) rather than named after what is at those addresses now.
    fn same_file(&mut self, elf: &ElfInfo, m: &MapEntry) -> bool {
        if elf.same_file_as(m) {
            return true;
        }
        let path = elf.path.display().to_string();
        if self.replaced.insert(path.clone()) {
            tracing::warn!(
                "{path} was replaced after the recording (inode {} then, another now): its stack frames are left unnamed",
                m.inode
            );
        }
        false
    }

    /// The framehop unwinder for a maps copy: one module per mapped ELF file.
    fn unwinder(
        &mut self,
        pid: i32,
        i: usize,
    ) -> Option<Arc<framehop::x86_64::UnwinderX86_64<Arc<[u8]>>>> {
        use framehop::Unwinder;
        let copy = self.maps.get(&pid)?.get(i)?;
        if let Some(u) = &copy.unwinder {
            return Some(u.clone());
        }
        let maps = copy.maps.clone();
        let mut unwinder = framehop::x86_64::UnwinderX86_64::new();
        let mut done: Vec<&str> = Vec::new();
        for m in maps.iter().filter(|m| m.executable()) {
            let Some(file) = m.file() else { continue };
            if done.contains(&file) {
                continue;
            }
            done.push(file);
            let Some(elf) = self.elves.get(file) else {
                continue;
            };
            if !self.same_file(&elf, m) {
                continue;
            }
            let Some(bias) = load_bias(&elf, m) else {
                continue;
            };
            let lo = maps
                .iter()
                .filter(|x| x.file() == Some(file))
                .map(|x| x.start)
                .min()
                .unwrap_or(m.start);
            let hi = maps
                .iter()
                .filter(|x| x.file() == Some(file))
                .map(|x| x.end)
                .max()
                .unwrap_or(m.end);
            let u = &elf.unwind;
            let info = framehop::ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: u.text.as_ref().map(|t| t.0.clone()),
                text: u.text.as_ref().map(|t| t.1.clone()),
                got_svma: u.got.clone(),
                eh_frame_svma: u.eh_frame.as_ref().map(|t| t.0.clone()),
                eh_frame: u.eh_frame.as_ref().map(|t| t.1.clone()),
                eh_frame_hdr_svma: u.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
                eh_frame_hdr: u.eh_frame_hdr.as_ref().map(|t| t.1.clone()),
                ..Default::default()
            };
            unwinder.add_module(framehop::Module::new(
                elf.path.display().to_string(),
                lo..hi,
                bias,
                info,
            ));
        }
        let unwinder = Arc::new(unwinder);
        if let Some(copy) = self.maps.get_mut(&pid).and_then(|c| c.get_mut(i)) {
            copy.unwinder = Some(unwinder.clone());
        }
        Some(unwinder)
    }

    /// Every frame of a perf sample, symbolized: the kernel frames, then the user frames
    /// ([`Symbolizer::unwind_user`]), each innermost first. Below the innermost frame of
    /// each part an address is a return address, looked up at `ip - 1` (so a call at the
    /// very end of a function names that function).
    pub fn sample_frames(&mut self, s: &crate::perffile::PerfSample) -> Vec<SymFrame> {
        let lookup = |depth: usize, ip: u64| if depth == 0 { ip } else { ip.saturating_sub(1) };
        let mut frames: Vec<SymFrame> = s
            .kernel_ips
            .iter()
            .enumerate()
            .map(|(depth, &ip)| self.kernel_frame(ip, lookup(depth, ip)))
            .collect();
        let user = self.unwind_user(s.pid, s.time, s.regs, &s.stack, &s.user_ips);
        for (depth, &ip) in user.iter().enumerate() {
            frames.extend(self.user_frames(s.pid, s.time, ip, lookup(depth, ip)));
        }
        frames
    }

    /// The user return addresses of a sample, innermost first: DWARF CFI unwinding of the
    /// copied stack when the sample has registers and stack bytes, completed by the kernel's
    /// frame-pointer chain `fp_ips` beyond the copy; `fp_ips` alone otherwise.
    pub fn unwind_user(
        &mut self,
        pid: i32,
        ts: u64,
        regs: Option<crate::perffile::UserRegs>,
        stack: &[u8],
        fp_ips: &[u64],
    ) -> Vec<u64> {
        use framehop::Unwinder;
        let Some(regs) = regs.filter(|r| r.ip != 0 && !stack.is_empty()) else {
            return fp_ips.to_vec();
        };
        let Some(i) = self.copy_for(pid, ts, regs.ip) else {
            return fp_ips.to_vec();
        };
        let Some(unwinder) = self.unwinder(pid, i) else {
            return fp_ips.to_vec();
        };
        let cache = self
            .cache
            .get_or_insert_with(framehop::x86_64::CacheX86_64::new);
        let sp = regs.sp;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_le_bytes(a))
        };
        let mut out = Vec::new();
        let mut it = unwinder.iter_frames(
            regs.ip,
            framehop::x86_64::UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
            cache,
            &mut read_stack,
        );
        while let Ok(Some(frame)) = it.next() {
            out.push(frame.address());
            if out.len() >= 256 {
                break;
            }
        }
        if out.len() < 2 && fp_ips.len() > out.len() {
            return fp_ips.to_vec();
        }
        // Past the copied stack, continue with the frame-pointer chain from where the two
        // agree.
        let tail: Vec<u64> = match out
            .last()
            .and_then(|l| fp_ips.iter().position(|ip| ip == l))
        {
            Some(pos) => fp_ips[pos + 1..].to_vec(),
            // No common frame (the copy ended inside a large frame): the frame-pointer
            // frames not found by the unwinder follow.
            None => fp_ips
                .iter()
                .skip(1)
                .filter(|ip| !out.contains(ip))
                .copied()
                .collect(),
        };
        out.extend(tail);
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn argus_symbolize_test_marker() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn maps_lines_parse() {
        let text = "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/x\n\
                    55d0c0001000-55d0c0005000 r-xp 00001000 08:01 123 /usr/bin/x\n\
                    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n\
                    7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n";
        let maps = parse_maps(Path::new("m"), text).unwrap();
        assert_eq!(maps.len(), 4);
        assert!(maps[1].executable());
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].file(), Some("/usr/bin/x"));
        assert_eq!((maps[1].dev, maps[1].inode), ((8, 1), 123));
        assert_eq!(maps[2].path.as_deref(), Some("[stack]"));
        assert_eq!((maps[2].dev, maps[2].inode), ((0, 0), 0));
        assert_eq!(maps[2].file(), None);
        assert_eq!(maps[3].path, None);
    }

    #[test]
    fn bad_maps_name_file_and_line() {
        let e = parse_maps(
            Path::new("perf/maps/1-2.maps"),
            "0-1 r-xp 0 0 0\nzz r-xp 0 0 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("perf/maps/1-2.maps: line 2"), "{e}");
    }

    /// Folded into its caller by every build (the test profile included).
    #[inline(always)]
    fn argus_symbolize_inlined_leaf(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3) ^ std::hint::black_box(5)
    }

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn argus_symbolize_test_inliner() -> u64 {
        argus_symbolize_inlined_leaf(std::hint::black_box(7)) + 1
    }

    /// The addresses of a function that another was inlined into give that function's frame
    /// first (no offset), then the symbol table's; the others only the symbol table's.
    #[test]
    fn inlined_functions_are_frames_of_their_own() {
        let pid = std::process::id() as i32;
        assert_eq!(argus_symbolize_test_inliner(), ((7 * 3) ^ 5) + 1);
        let (start, size) = resolve_symbol(pid, "argus_symbolize_test_inliner").unwrap();
        assert!(size > 0);
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(format!("{pid}-5.maps"));
        std::fs::copy(format!("/proc/{pid}/maps"), &copy).unwrap();
        let mut s = Symbolizer::new(None, &[(pid, 5, copy)]);
        let mut inlined = 0;
        for ip in start..start + size {
            let frames = s.user_frames(pid, 10, ip, ip);
            let outer = frames.last().unwrap();
            assert_eq!(
                outer.symbol.as_deref(),
                Some("argus_symbolize_test_inliner")
            );
            assert_eq!(outer.offset, Some(ip - start));
            // Innermost first: what the leaf inlined in turn (`u64::wrapping_mul` in the test
            // profile), then the leaf.
            let Some((leaf, inner)) = frames[..frames.len() - 1].split_last() else {
                continue;
            };
            inlined += 1;
            let name = leaf.symbol.as_deref().unwrap();
            assert!(
                name.ends_with("::argus_symbolize_inlined_leaf"),
                "{frames:?}"
            );
            for f in inner.iter().chain([leaf]) {
                assert_eq!((f.ip, f.offset), (ip, None));
                assert_eq!(f.object, outer.object);
                assert!(
                    !f.symbol.as_deref().unwrap().contains("inliner"),
                    "{frames:?}"
                );
            }
        }
        assert!(
            inlined > 0,
            "no address of the inlined call in {size} bytes"
        );
        assert!(inlined < size, "the caller has code of its own");
        // A function nothing is inlined into: its own frame only.
        let marker = argus_symbolize_test_marker as *const () as usize as u64;
        let frames = s.user_frames(pid, 10, marker, marker);
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(
            frames[0].symbol.as_deref(),
            Some("argus_symbolize_test_marker")
        );
    }

    /// A stripped binary names its static functions and inlined calls from its separate
    /// debug file, found by `.gnu_debuglink` beside it, by build id under the debug root,
    /// and by the link's CRC when it has no build id; a debug file of another build is not
    /// taken.
    #[test]
    fn stripped_binaries_are_named_from_their_debug_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = |name: &str| dir.path().join(name);
        let split = |name: &str, extra: &[&str], link: bool| {
            stripped::Split::make(dir.path(), name, extra, link)
        };
        let root = d("root");
        let empty = d("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let linked = split("linked", &[], true);
        let (vaddr, size) = ElfInfo::load(&linked.full)
            .unwrap()
            .find(stripped::HELPER)
            .unwrap();
        let named = |bin: &Path, root: &Path| {
            let elf = ElfInfo::load_with_debug_root(bin, root).unwrap();
            (elf.lookup(vaddr + 1), elf.debug_file.clone())
        };
        // Through the link, beside the binary.
        let (found, debug) = named(&linked.bin, &empty);
        assert_eq!(found, Some((stripped::HELPER.to_string(), 1)));
        assert_eq!(debug.as_ref(), Some(&linked.debug));
        // Its inlined call, from the debug file's DWARF.
        let mut inlines = load_inlines(&linked.bin, debug.as_deref()).unwrap();
        assert!(
            (vaddr..vaddr + size).any(|a| inlines.at(a) == [Some(stripped::LEAF.to_string())]),
            "no address of the helper is in the inlined leaf"
        );
        // Without the debug file: the symbol table of the stripped binary does not name it.
        std::fs::rename(&linked.debug, d("elsewhere.debug")).unwrap();
        let (found, debug) = named(&linked.bin, &empty);
        assert_ne!(found.map(|f| f.0), Some(stripped::HELPER.to_string()));
        assert_eq!(debug, None);
        assert!(load_inlines(&linked.bin, None).is_none());
        // By build id under the debug root (no link).
        let by_id = split("byid", &[], false);
        let id = {
            let data = std::fs::read(&by_id.bin).unwrap();
            let file = object::File::parse(&*data).unwrap();
            let id = file.build_id().unwrap().unwrap().to_vec();
            id.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let at = root.join(".build-id").join(&id[..2]);
        std::fs::create_dir_all(&at).unwrap();
        let by_id_debug = at.join(format!("{}.debug", &id[2..]));
        std::fs::rename(&by_id.debug, &by_id_debug).unwrap();
        let (found, debug) = named(&by_id.bin, &root);
        assert_eq!(found.map(|f| f.0), Some(stripped::HELPER.to_string()));
        assert_eq!(debug, Some(by_id_debug));
        // No build id: the link's CRC decides; another build's debug file of that name is
        // not taken.
        let no_id = split("noid", &["-Wl,--build-id=none"], true);
        let (found, _) = named(&no_id.bin, &empty);
        assert_eq!(found.map(|f| f.0), Some(stripped::HELPER.to_string()));
        let mut other = std::fs::read(&no_id.debug).unwrap();
        let last = other.len() - 1;
        other[last] ^= 0xff;
        std::fs::write(&no_id.debug, other).unwrap();
        let (_, debug) = named(&no_id.bin, &empty);
        assert_eq!(debug, None);
    }

    /// A file replaced since its maps were copied (same device, another inode) is not
    /// symbolized: its frames keep their object and get no name (the addresses would name
    /// whatever the new file has there). The same file is.
    #[test]
    fn a_file_replaced_since_the_recording_names_no_frames() {
        let pid = std::process::id() as i32;
        let marker = argus_symbolize_test_marker as *const () as usize as u64;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        // The test binary's lines with another inode.
        let other: String = maps
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.splitn(6, ' ').collect();
                if f.len() == 6 && f[5].trim() == exe {
                    let inode: u64 = f[4].parse().unwrap();
                    format!(
                        "{} {} {} {} {} {}\n",
                        f[0],
                        f[1],
                        f[2],
                        f[3],
                        inode + 1,
                        f[5]
                    )
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        assert_ne!(
            other.trim_end(),
            maps.trim_end(),
            "the test binary is mapped"
        );
        let replaced = write("replaced", &other);
        let mut s = Symbolizer::new(None, &[(pid, 5, replaced)]);
        let f = s.user_frame(pid, 10, marker + 1, marker + 1);
        assert_eq!(f.symbol, None);
        assert_eq!(f.object.as_deref(), Some(exe));
        assert!(s.replaced.contains(exe));
        let same = write("same", &maps);
        let mut s = Symbolizer::new(None, &[(pid, 5, same)]);
        let f = s.user_frame(pid, 10, marker + 1, marker + 1);
        assert_eq!(f.symbol.as_deref(), Some("argus_symbolize_test_marker"));
        assert!(s.replaced.is_empty());
    }

    #[test]
    fn symbols_of_the_test_binary_itself() {
        let pid = std::process::id() as i32;
        let marker = argus_symbolize_test_marker as *const () as usize as u64;
        // name → address through the live maps and the ELF.
        let (addr, _) = resolve_symbol(pid, "argus_symbolize_test_marker").unwrap();
        assert_eq!(addr, marker);
        // address → name through a copy of the maps.
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(format!("{pid}-5.maps"));
        std::fs::copy(format!("/proc/{pid}/maps"), &copy).unwrap();
        let mut s = Symbolizer::new(None, &[(pid, 5, copy)]);
        let f = s.user_frame(pid, 10, marker + 1, marker + 1);
        assert_eq!(f.symbol.as_deref(), Some("argus_symbolize_test_marker"));
        assert_eq!(f.offset, Some(1));
        assert!(f.object.is_some_and(|o| o.starts_with('/')));
        // Unknown pid: nothing known, no panic.
        assert_eq!(s.user_frame(-5, 0, marker, marker).symbol, None);
    }

    /// A copy taken before an exec has a thread stack where the new image's code is: the
    /// sample (after the exec) uses the later copy whose executable mapping holds it.
    #[test]
    fn a_data_mapping_of_an_earlier_copy_does_not_hold_a_sampled_ip() {
        let dir = tempfile::tempdir().unwrap();
        let before = dir.path().join("7-5.maps");
        let after = dir.path().join("7-50.maps");
        std::fs::write(
            &before,
            "7f6f00000000-7f6f80000000 rw-p 00000000 00:00 0\n\
             7f6d7c000000-7f6d7c100000 r-xp 00000000 08:01 9 /usr/lib/libc.so.6\n",
        )
        .unwrap();
        std::fs::write(
            &after,
            "7f6f3ea00000-7f6f3eb00000 r-xp 00000000 08:01 9 /usr/lib/libc.so.6\n",
        )
        .unwrap();
        let s = Symbolizer::new(None, &[(7, 5, before), (7, 50, after)]);
        // Sampled at 10, between the copies: the earlier one only has data there.
        assert_eq!(s.copy_for(7, 10, 0x7f6f_3ea9_f2ec), Some(1));
        // An ip the earlier copy's code holds still uses the earlier copy.
        assert_eq!(s.copy_for(7, 10, 0x7f6d_7c00_1000), Some(0));
        // No executable mapping anywhere: no copy.
        assert_eq!(s.copy_for(7, 10, 0x7f6f_0000_1000), None);
    }

    /// The load bias of the executable mapping of this test binary puts a function where it
    /// runs (rust-lld starts the code segment inside a page, a page after its file offset).
    #[test]
    fn the_code_mappings_bias_puts_a_function_where_it_runs() {
        let marker = argus_symbolize_test_marker as *const () as usize as u64;
        let path = Path::new("/proc/self/maps");
        let maps = parse_maps(path, &std::fs::read_to_string(path).unwrap()).unwrap();
        let m = maps
            .iter()
            .find(|m| m.executable() && marker >= m.start && marker < m.end)
            .unwrap();
        let elf = ElfInfo::load(Path::new(m.file().unwrap())).unwrap();
        let (vaddr, _) = elf.find("argus_symbolize_test_marker").unwrap();
        assert_eq!(vaddr.wrapping_add(load_bias(&elf, m).unwrap()), marker);
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("read"), "read");
    }
}

/// Test binaries split as distributions ship them: a C program built with `gcc -g -O2`, its
/// debug information moved to a separate file (`objcopy --only-keep-debug`), the binary
/// stripped.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod stripped {
    use std::path::{Path, PathBuf};

    /// A static function (no `.dynsym` entry: named only by the debug file).
    pub(crate) const HELPER: &str = "argus_helper";
    /// A function always inlined into [`HELPER`].
    pub(crate) const LEAF: &str = "argus_leaf";

    const SOURCE: &str = "#include <stdio.h>\n\
        static inline __attribute__((always_inline)) int argus_leaf(int x) { return x * 3 ^ 5; }\n\
        static __attribute__((noinline)) int argus_helper(int x) { volatile int y = x; return argus_leaf(y) + 1; }\n\
        int main(int argc, char **argv) { printf(\"%d\\n\", argus_helper(argc)); return 0; }\n";

    /// One build: unstripped, stripped, and the debug file.
    pub(crate) struct Split {
        pub(crate) full: PathBuf,
        pub(crate) bin: PathBuf,
        pub(crate) debug: PathBuf,
    }

    /// Runs `cmd`, which must succeed.
    fn sh(cmd: &[&str]) {
        let st = std::process::Command::new(cmd[0])
            .args(&cmd[1..])
            .status()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(st.success(), "{cmd:?}: {st}");
    }

    impl Split {
        /// Builds `dir/name` (with `extra` gcc flags), `dir/name.full` and `dir/name.debug`;
        /// `link`: the stripped binary gets a `.gnu_debuglink` to the debug file.
        pub(crate) fn make(dir: &Path, name: &str, extra: &[&str], link: bool) -> Split {
            let src = dir.join(format!("{name}.c"));
            std::fs::write(&src, SOURCE).unwrap();
            let s = |p: &Path| p.to_str().unwrap().to_string();
            let split = Split {
                full: dir.join(format!("{name}.full")),
                bin: dir.join(name),
                debug: dir.join(format!("{name}.debug")),
            };
            let (full, bin, debug) = (s(&split.full), s(&split.bin), s(&split.debug));
            sh(&[&["gcc", "-g", "-O2", "-o", &full, &s(&src)][..], extra].concat());
            sh(&["objcopy", "--only-keep-debug", &full, &debug]);
            std::fs::copy(&full, &bin).unwrap();
            sh(&["strip", "--strip-all", &bin]);
            if link {
                sh(&["objcopy", &format!("--add-gnu-debuglink={debug}"), &bin]);
            }
            split
        }
    }
}
