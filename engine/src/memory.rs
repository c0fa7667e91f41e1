//! The allocator and its settings: the binary and the benches that measure the product's
//! memory-bound paths turn on the `allocator` feature, so they measure it as it runs.

/// mimalloc, not glibc malloc: see the comment on the dependency in Cargo.toml.
#[cfg(feature = "allocator")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How freed memory goes back to the kernel.
#[derive(Clone, Copy, Debug)]
pub struct Purge {
    /// mimalloc's purge delay in milliseconds (-1: never purge).
    pub delay_ms: i64,
    /// Purge with `MADV_FREE` (the pages stay mapped and the kernel takes them only when
    /// memory is short) instead of decommitting them (`MADV_DONTNEED`: gone at once, and
    /// faulted in as fresh zeroed pages when the memory is used again).
    pub lazy: bool,
}

/// One-shot commands (`argus build`) never return freed memory to the kernel.
pub const NEVER_PURGE: Purge = Purge {
    delay_ms: -1,
    lazy: false,
};

/// The continuous job (`argus start`) gives freed memory back after 2 s, lazily.
#[cfg(target_os = "linux")]
pub const START_PURGE: Purge = Purge {
    delay_ms: 2000,
    lazy: true,
};

/// Memory settings for commands that churn through large buffers, where every fresh page
/// costs the kernel a zeroing (and, on a VM, the host a fault):
///
/// - mimalloc keeps freed memory for `purge.delay_ms` before returning it to the kernel
///   (its default is 10 ms; -1: never): returned memory came back as fresh pages, ~17% of a
///   build's CPU.
/// - no transparent huge pages: mimalloc asks for them on its arenas, and a fresh 2 MB page
///   cost 1.2–2.9 ms to fault on the test VM (its host reclaims freed guest memory) against
///   0.5 ms for 512 small pages. A 17.2M-event build spent 1.5 s of system time with them
///   and 0.5 s without (5 s apart so no run reuses another's pages; user time unchanged).
///
/// One-shot commands (`argus build`) never return memory. The continuous job (`argus
/// start`) returns it after 2 s, so the system gets it back when the load falls: with the 10 ms
/// default, a 25 s profile of its soak at 340k events/s (`cargo bench --bench soak`) spent
/// 23% of the job's CPU zeroing fresh huge pages (14% in the collectors, whose merges
/// allocate and free large runs, 7% in the live graphs' arrangements).
///
/// It returns it *lazily* (`MADV_FREE`, mimalloc's `purge_decommits` off). mimalloc 3 keeps
/// one purge deadline per arena: when it passes (or a thread exits after it, as the
/// snapshot encoders do every few seconds), every range freed since is purged, including
/// ranges freed a moment before and about to be used again. Decommitted, each came back as
/// fresh zeroed pages: in the soak at 300k events/s the live graph's worker alone took
/// 4–12k page faults a second, `clear_page` was half of its CPU and ~15% of the job's. A
/// lazily freed page used again is just written: once the job's memory has all been
/// touched (about three minutes into the soak) the whole job takes ~60 faults a second. The
/// kernel takes lazily freed pages back whenever memory is short; until then they count in
/// the job's RSS (`LazyFree` in `/proc/PID/smaps_rollup` says how much of it they are).
pub fn tune(purge: Purge) {
    // mimalloc's `mi_option_purge_decommits` and `mi_option_purge_delay` (the same numbers
    // in its v2 and v3 headers).
    const PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets process-wide allocator options; mimalloc reads them at each purge
    // (-1: "never purge"; decommits 0: purge by reset, `MADV_FREE`). No memory is touched.
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DECOMMITS, std::ffi::c_long::from(!purge.lazy));
        libmimalloc_sys::mi_option_set(PURGE_DELAY, purge.delay_ms as std::ffi::c_long);
    }
    // SAFETY: PR_SET_THP_DISABLE takes no pointer; it sets a flag of this process's memory
    // map that the kernel checks at each fault (mappings made earlier are covered too).
    // Failure (a kernel without THP) leaves nothing to undo.
    #[cfg(target_os = "linux")]
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}
