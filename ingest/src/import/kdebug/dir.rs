//! A macOS recording: the trace directory the kdebug collector writes (`crate::macos`),
//! `meta.json` and `kdebug/NNNNNN.ktrace.zst`, each chunk file zstd frames that decompress
//! to a whole V3 file (header, CPU map, thread map, then events chunks).
//!
//! The files are read in sequence order and joined into one [`KdFile`]: the first file's
//! timebase and CPU map, every file's threads (the first entry of a thread id wins), the
//! events in order. The last file, if a crash cut its last frame, is read up to its last
//! complete V3 chunk, and says so (a cut in an earlier file is an error); chunk files the
//! ring deleted are simply absent.

use super::decode::{parse, KdFile};
use crate::error::IngestError;
use crate::tracedir;
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Whether `dir` holds a macOS recording (a `kdebug/` directory).
pub fn is_recording(dir: &Path) -> bool {
    tracedir::kdebug_dir(dir).is_dir()
}

/// The chunk files of `dir`, in sequence order.
fn chunk_files(dir: &Path) -> Result<Vec<PathBuf>, IngestError> {
    let kdir = tracedir::kdebug_dir(dir);
    let entries = std::fs::read_dir(&kdir).map_err(|source| IngestError::Io {
        file: kdir.clone(),
        source,
    })?;
    let mut files: Vec<(u32, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| IngestError::Io {
            file: kdir.clone(),
            source,
        })?;
        let name = entry.file_name();
        let seq = name
            .to_str()
            .and_then(|n| n.strip_suffix(".ktrace.zst"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(seq) = seq {
            files.push((seq, entry.path()));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(IngestError::Missing {
            file: tracedir::kdebug_path(dir, 0),
        });
    }
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// The bytes up to the end of the last whole V3 chunk of `data`.
fn whole_chunks(data: &[u8]) -> usize {
    let mut at = 0usize;
    let mut end = 0usize;
    while let Some(head) = data.get(at..at + 16) {
        let mut size = [0u8; 8];
        size.copy_from_slice(&head[8..16]);
        let Some(stop) = usize::try_from(u64::from_le_bytes(size))
            .ok()
            .and_then(|s| (at + 16).checked_add(s))
            .filter(|&s| s <= data.len())
        else {
            break;
        };
        end = stop;
        at = stop.div_ceil(8) * 8;
    }
    end
}

/// One chunk file decompressed (bounded by its size); `Some(why)` when its last frame is
/// torn (what came before is kept).
fn inflate(path: &Path) -> Result<(Vec<u8>, Option<String>), IngestError> {
    let io = |source| IngestError::Io {
        file: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let limit = crate::inflate::limit_for(f.metadata().map_or(0, |m| m.len()));
    let mut data = Vec::new();
    let read = zstd::stream::read::Decoder::new(f)
        .map_err(io)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut data);
    if data.len() as u64 > limit {
        return Err(io(crate::inflate::too_large(limit)));
    }
    Ok((data, read.err().map(|e| e.to_string())))
}

/// Reads every chunk file of `dir` into one [`KdFile`], with notes on what was cut.
pub(crate) fn read(dir: &Path) -> Result<KdFile, IngestError> {
    let mut all: Option<KdFile> = None;
    let mut seen = HashSet::new();
    let mut notes = Vec::new();
    let files = chunk_files(dir)?;
    let last = files.len() - 1;
    for (i, path) in files.into_iter().enumerate() {
        let (data, torn) = inflate(&path)?;
        let data = match &torn {
            // The writer completes (and syncs) a file before starting the next: only the
            // last can end in a frame cut by a crash.
            Some(why) if i < last => {
                return Err(IngestError::Malformed {
                    file: path,
                    offset: data.len() as u64,
                    what: format!(
                        "zstd: {why} (offset in the decompressed file; a file before the \
                         last must be whole)"
                    ),
                })
            }
            Some(why) => {
                let keep = whole_chunks(&data);
                notes.push(format!(
                    "{}: its last frame is cut ({why}): read up to byte {keep} of {} \
                     decompressed (the recorder was killed?)",
                    path.display(),
                    data.len()
                ));
                &data[..keep]
            }
            None => &data[..],
        };
        if data.is_empty() {
            continue;
        }
        // Offsets in errors are in the decompressed chunk.
        let kd = parse(&path, data).map_err(|e| match e {
            IngestError::Malformed { file, offset, what } => IngestError::Malformed {
                file,
                offset,
                what: format!("{what} (offset in the decompressed file)"),
            },
            other => other,
        })?;
        let all = all.get_or_insert_with(|| KdFile {
            lp64: kd.lp64,
            walltime: kd.walltime,
            cpus: kd.cpus.clone(),
            ..KdFile::new(kd.version, kd.timebase)
        });
        for t in kd.threads {
            if seen.insert(t.tid) {
                all.threads.push(t);
            }
        }
        all.events.extend(kd.events);
        all.skipped.extend(kd.skipped);
        all.notes.extend(kd.notes);
    }
    let mut kd = all.ok_or_else(|| IngestError::Malformed {
        file: tracedir::kdebug_dir(dir),
        offset: 0,
        what: "every chunk file is empty".into(),
    })?;
    if let Ok(bytes) = std::fs::read(tracedir::meta_path(dir)) {
        if let Ok(meta) = serde_json::from_slice::<tracedir::TraceMeta>(&bytes) {
            if meta.status != "complete" {
                notes.push(format!(
                    "meta.json says {:?}: the recorder did not close this recording",
                    meta.status
                ));
            }
        }
        if let Some(ring) = tracedir::MetaExt::from_meta_json(&bytes)
            .ok()
            .and_then(|e| e.ring)
        {
            let deleted: u32 = ring.dropped.values().map(|d| d.chunks).sum();
            if deleted > 0 {
                notes.push(format!(
                    "the ring ({} bytes) deleted the {deleted} oldest chunk files",
                    ring.size
                ));
            }
        }
    }
    kd.notes.extend(notes);
    Ok(kd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::kdebug::encode;

    #[test]
    fn whole_chunks_stops_before_a_cut_chunk() {
        let mut f = Vec::new();
        encode::v3_chunk(&mut f, 0x1d00, &[7; 32]);
        let first = f.len();
        encode::v3_chunk(&mut f, 0x1e00, &[1; 72]);
        assert_eq!(whole_chunks(&f), f.len());
        for cut in first..f.len() {
            assert_eq!(whole_chunks(&f[..cut]), first, "cut at {cut}");
        }
        assert_eq!(whole_chunks(&f[..first - 1]), 0);
        // A size past the end of memory is a cut, not an overflow.
        let mut huge = f[..first].to_vec();
        huge.extend_from_slice(&0x1e00u32.to_le_bytes());
        huge.extend_from_slice(&0u32.to_le_bytes());
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(whole_chunks(&huge), first);
    }
}
