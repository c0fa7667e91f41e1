//! A single-file packing of a trace directory, so `argus demo` carries its fallback
//! recording inside the binary (`include_bytes!`) and works from any working directory.
//!
//! `kallsyms.zst` is left out: it is most of a recording's size and the demo needs no
//! kernel symbol names (timer callbacks are then shown by address).
//!
//! Layout (then zstd-compressed as a whole): repeated
//! `u32 name length, name (UTF-8, '/'-separated relative path), u64 size, bytes`.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::Path;

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            collect(root, &path, out)?;
        } else if e.file_name() != "kallsyms.zst" {
            let rel = path
                .strip_prefix(root)
                .context("path outside the bundle root")?
                .to_string_lossy()
                .replace('\\', "/");
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            out.push((rel, bytes));
        }
    }
    Ok(())
}

/// Packs every file under `dir`.
pub fn pack(dir: &Path) -> Result<Vec<u8>> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    let mut raw = Vec::new();
    for (name, bytes) in files {
        raw.extend_from_slice(&(name.len() as u32).to_le_bytes());
        raw.extend_from_slice(name.as_bytes());
        raw.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        raw.extend_from_slice(&bytes);
    }
    Ok(zstd::encode_all(&raw[..], 19)?)
}

/// Unpacks a bundle into `dir` (which must exist).
pub fn unpack(bundle: &[u8], dir: &Path) -> Result<()> {
    let raw = zstd::decode_all(bundle).context("the bundle is not valid zstd")?;
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let end = at.checked_add(n).filter(|e| *e <= raw.len());
        match end {
            Some(end) => {
                let s = &raw[*at..end];
                *at = end;
                Ok(s)
            }
            None => bail!("bundle truncated at byte {at}"),
        }
    };
    while at < raw.len() {
        let n = u32::from_le_bytes(take(&mut at, 4)?.try_into()?) as usize;
        let name = std::str::from_utf8(take(&mut at, n)?)?.to_string();
        if name.split('/').any(|c| c == ".." || c.is_empty()) {
            bail!("bundle entry {name:?} escapes its directory");
        }
        let size = u64::from_le_bytes(take(&mut at, 8)?.try_into()?) as usize;
        let bytes = take(&mut at, size)?;
        let path = dir.join(&name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() -> Result<()> {
        let a = tempfile::tempdir()?;
        fs::create_dir_all(a.path().join("cpu0"))?;
        fs::write(a.path().join("meta.json"), b"{}")?;
        fs::write(a.path().join("cpu0/000000.chunk.zst"), [1u8, 2, 3])?;
        let packed = pack(a.path())?;
        let b = tempfile::tempdir()?;
        unpack(&packed, b.path())?;
        assert_eq!(fs::read(b.path().join("meta.json"))?, b"{}");
        assert_eq!(fs::read(b.path().join("cpu0/000000.chunk.zst"))?, [1, 2, 3]);
        assert!(unpack(&packed[..packed.len() / 2], b.path()).is_err());
        Ok(())
    }
}
