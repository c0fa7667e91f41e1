//! The functions the compiler inlined at an address, from the file's DWARF
//! (`DW_TAG_inlined_subroutine`), read with `addr2line`.
//!
//! An optimized build folds small functions, closures and iterator adaptors into their
//! callers: the symbol table then names only the function they were inlined into, and a
//! profile of a release binary loses exactly the application's own small functions (`argus
//! dig` compares functions between the hung and the normal runs). Each return address (or
//! sampled address) is therefore expanded into the inlined calls it is inside, innermost
//! first, before the function the symbol table names.
//!
//! ```text
//!  ip ─► ELF vaddr ─► .symtab: outer function              (SymFrame, offset from its start)
//!               └──► DWARF: inlined b inside inlined a     (SymFrames b, a: no offset)
//!  frames: b, a, outer
//! ```
//!
//! A file without `.debug_info` (stripped, or built without debug info) has none and keeps
//! the symbol table's frames. The names are the DWARF's: linkage names (demangled, with
//! their path) where the file has them, bare names with `debug = "line-tables-only"` (our
//! own release profile: `{closure#1}`, `mix_for`). Compressed debug sections are read as
//! absent.

use gimli::{EndianArcSlice, RunTimeEndian};
use object::{CompressionFormat, Object, ObjectSection};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

type Slice = EndianArcSlice<RunTimeEndian>;

/// One ELF file's inlined calls, and those of the addresses asked so far (a recording's
/// stacks repeat the same return addresses many times).
pub(super) struct Inlines {
    ctx: addr2line::Context<Slice>,
    seen: HashMap<u64, Vec<Option<String>>>,
}

/// Why a file's inlined calls cannot be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum InlinesError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a readable ELF file: {0}")]
    Elf(#[from] object::Error),
    #[error("DWARF: {0}")]
    Dwarf(#[from] gimli::Error),
}

impl Inlines {
    /// Reads the DWARF of the ELF file `f`: `None` when it has none. Only the headers and
    /// the debug sections are read (a release binary's are ~100 MB of its 150).
    pub(super) fn load(f: &File) -> Result<Option<Inlines>, InlinesError> {
        let cache = object::ReadCache::new(f);
        let file = object::File::parse(&cache)?;
        if file.section_by_name(".debug_info").is_none() {
            return Ok(None);
        }
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let len = f.metadata()?.len();
        let dwarf = gimli::Dwarf::load(|id| -> Result<Slice, InlinesError> {
            // A compressed section is read as absent (no inlined calls named from it), as is
            // one the file is too short to hold.
            let range = file
                .section_by_name(id.name())
                .and_then(|s| s.compressed_file_range().ok())
                .filter(|r| r.format == CompressionFormat::None)
                .filter(|r| {
                    r.offset
                        .checked_add(r.compressed_size)
                        .is_some_and(|e| e <= len)
                });
            let mut bytes = Vec::new();
            if let Some(r) = range {
                bytes.resize(usize::try_from(r.compressed_size).unwrap_or(0), 0);
                f.read_exact_at(&mut bytes, r.offset)?;
            }
            Ok(EndianArcSlice::new(Arc::from(bytes), endian))
        })?;
        Ok(Some(Inlines {
            ctx: addr2line::Context::from_dwarf(dwarf)?,
            seen: HashMap::new(),
        }))
    }

    /// The functions inlined at ELF virtual address `vaddr`, innermost first, without the
    /// function that holds them (the symbol table names it); their names demangled (`None`:
    /// the DWARF names none). Empty when nothing is inlined there or the DWARF does not
    /// cover the address.
    pub(super) fn at(&mut self, vaddr: u64) -> &[Option<String>] {
        let ctx = &self.ctx;
        self.seen
            .entry(vaddr)
            .or_insert_with(|| inlined_at(ctx, vaddr))
    }
}

/// [`Inlines::at`], read from the DWARF.
fn inlined_at(ctx: &addr2line::Context<Slice>, vaddr: u64) -> Vec<Option<String>> {
    let Ok(mut frames) = ctx.find_frames(vaddr).skip_all_loads() else {
        return Vec::new();
    };
    let mut names = Vec::new();
    while let Ok(Some(f)) = frames.next() {
        names.push(
            f.function
                .as_ref()
                .and_then(|n| n.raw_name().ok())
                .map(|n| super::demangle(n.as_ref())),
        );
    }
    // The outermost frame is the function itself.
    names.pop();
    names
}
