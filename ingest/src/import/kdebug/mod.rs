//! macOS/iOS kdebug traces (issue 19): `RAW_VERSION1`, `RAW_VERSION2` and V3 ("ktrace")
//! files decoded without I/O (`decode.rs`), their events mapped to Argus events
//! (`map.rs`, the table in `docs/kdebug.md`) by the codes of [`codes`], whose names are
//! checked against xnu's. `dir.rs` reads the trace directories of the macOS collector
//! (`crate::macos`); `encode.rs` writes the structures back.

pub mod codes;
mod decode;
mod dir;
pub mod encode;
mod map;

pub use decode::*;
pub use dir::is_recording;
#[cfg(test)]
pub(crate) use dir::read as dir_read;

use super::{ImportFormat, Imported};
use crate::error::IngestError;
use std::path::Path;

/// Imports a kdebug file (its bytes, read by [`super::open`]).
pub(super) fn import(path: &Path, bytes: &[u8]) -> Result<Imported, IngestError> {
    imported(path, parse(path, bytes)?)
}

/// Imports a macOS recording's trace directory ([`is_recording`]).
pub(super) fn import_dir(dir: &Path) -> Result<Imported, IngestError> {
    imported(dir, dir::read(dir)?)
}

fn imported(path: &Path, kd: KdFile) -> Result<Imported, IngestError> {
    let mapped = map::map(&kd);
    let mut summary = mapped.summary;
    summary.notes.extend(kd.notes.iter().cloned());
    if !kd.skipped.is_empty() {
        let mut tags: Vec<String> = kd.skipped.iter().map(|(t, _)| format!("{t:#x}")).collect();
        tags.dedup();
        summary.notes.push(format!(
            "{} chunks not read (tags {})",
            kd.skipped.len(),
            tags.join(", ")
        ));
    }
    Ok(Imported {
        path: path.to_path_buf(),
        format: ImportFormat::Kdebug,
        events: mapped.events,
        threads: mapped.threads,
        errors: Vec::new(),
        summary,
        kallsyms: None,
    })
}
