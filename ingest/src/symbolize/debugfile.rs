//! Where an ELF file's separate debug information is: distributions strip their binaries and
//! ship the symbol table and DWARF in a debug file (`-dbgsym`, `-debuginfo` packages), found
//! as GDB finds it.
//!
//! ```text
//!  build id ab12…ef      ─► /usr/lib/debug/.build-id/ab/12…ef.debug
//!  .gnu_debuglink NAME   ─► DIR/NAME, DIR/.debug/NAME, /usr/lib/debug/DIR/NAME
//!                            (DIR: the binary's directory; the candidate must carry the
//!                             same build id, or without one the link's CRC-32)
//! ```
//!
//! A stripped binary keeps `.dynsym` (exported functions) and `.eh_frame` (unwinding); its
//! static functions and inlined calls are named only from the debug file.

use object::{Object, ObjectSection};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where distributions install debug files.
pub(super) const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The debug file of the ELF file `path` (parsed as `file`), under `root` for the global
/// locations; `None` when there is none or the file says nothing of one.
pub(super) fn find<'d, R: object::ReadRef<'d>>(
    path: &Path,
    file: &object::File<'d, R>,
    root: &Path,
) -> Option<PathBuf> {
    let build_id = file.build_id().ok().flatten();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let by_id = root
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        if same_build(&by_id, id) == Some(true) {
            return Some(by_id);
        }
    }
    let (name, crc) = file.gnu_debuglink().ok().flatten()?;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    // The link names a file, never a path.
    if name.components().count() != 1 {
        return None;
    }
    let dir = path.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    if let Ok(rel) = dir.strip_prefix("/") {
        candidates.push(root.join(rel).join(name));
    }
    candidates.into_iter().find(|c| {
        c.as_path() != path
            && match build_id {
                Some(id) => same_build(c, id) == Some(true),
                None => crc32_of(c) == Some(crc),
            }
    })
}

/// Whether the ELF file at `path` carries build id `id` (`None`: no such readable file).
fn same_build(path: &Path, id: &[u8]) -> Option<bool> {
    let f = File::open(path).ok()?;
    let cache = object::ReadCache::new(f);
    let file = object::File::parse(&cache).ok()?;
    // A debug file from `objcopy --only-keep-debug` keeps the note section.
    let theirs = file.build_id().ok().flatten().or_else(|| {
        file.section_by_name(".note.gnu.build-id")
            .and_then(|s| s.data().ok())
            .and_then(|d| d.get(16..))
    })?;
    Some(theirs == id)
}

/// The CRC-32 (IEEE, as `.gnu_debuglink` records it) of the file at `path`.
fn crc32_of(path: &Path) -> Option<u32> {
    let mut f = File::open(path).ok()?;
    let table = crc_table();
    let mut crc = !0u32;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            crc = table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
    }
    Some(!crc)
}

fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    table
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_ieee_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"123456789").unwrap();
        assert_eq!(crc32_of(&p), Some(0xcbf4_3926));
        std::fs::write(&p, b"").unwrap();
        assert_eq!(crc32_of(&p), Some(0));
        assert_eq!(crc32_of(&dir.path().join("none")), None);
    }
}
