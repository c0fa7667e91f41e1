//! Whole-file zstd decompression, bounded by the file's size (issue 18).
//!
//! A few kilobytes of crafted zstd decompress to gigabytes: an RLE block is 4 bytes for
//! 128 KiB of output. The readers that decompress a whole file into memory (file identity,
//! perf chunks, kallsyms) stop at [`limit_for`] its compressed size and report the file
//! instead of allocating without bound. Argus's own files compress 5–40 times (level 1:
//! JSON lines, perf records, symbol text; `linux/chunks.rs`), far below [`MAX_RATIO`]; the
//! ring-buffer chunks are not read whole (replay decompresses them page by page).

/// Decompressed bytes allowed per compressed byte.
pub(crate) const MAX_RATIO: u64 = 1000;
/// Decompressed bytes allowed whatever the file's size (small files of repeated lines).
pub(crate) const MIN_LIMIT: u64 = 64 << 20;

/// The most a file of `compressed` bytes may decompress to.
pub(crate) fn limit_for(compressed: u64) -> u64 {
    compressed.saturating_mul(MAX_RATIO).max(MIN_LIMIT)
}

/// The complaint about a file that decompresses past `limit`.
pub(crate) fn too_large(limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("decompresses to more than {limit} bytes: not a file Argus wrote"),
    )
}
