//! The allocator and its settings, shared with the benches that measure the product's
//! memory-bound paths (`#[path]`-included there), so they measure it as it runs.

/// mimalloc, not glibc malloc: see the comment on the dependency in Cargo.toml.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One-shot commands (`argus build`) never return freed memory to the kernel.
pub const NEVER_PURGE: i64 = -1;

/// The continuous job (`argus start`) returns freed memory after 2 s.
#[cfg(target_os = "linux")]
pub const START_PURGE_MS: i64 = 2000;

/// Memory settings for commands that churn through large buffers, where every fresh page
/// costs the kernel a zeroing (and, on a VM, the host a fault):
///
/// - mimalloc keeps freed memory for `purge_delay_ms` before returning it to the kernel
///   (its default is 10 ms; -1: never): returned memory came back as fresh pages, ~17% of a
///   build's CPU.
/// - no transparent huge pages: mimalloc asks for them on its arenas, and a fresh 2 MB page
///   cost 1.2–2.9 ms to fault on the test VM (its host reclaims freed guest memory) against
///   0.5 ms for 512 small pages. A 17.2M-event build spent 1.5 s of system time with them
///   and 0.5 s without (5 s apart so no run reuses another's pages; user time unchanged).
///
/// One-shot commands (`argus build`) never return memory. The continuous job (`argus
/// start`) returns it after 2 s, so its RSS still falls when the load does: with the 10 ms
/// default, a 25 s profile of its soak at 340k events/s (`cargo bench --bench soak`) spent
/// 23% of the job's CPU zeroing fresh huge pages (14% in the collectors, whose merges
/// allocate and free large runs, 7% in the live graphs' arrangements).
pub fn tune(purge_delay_ms: i64) {
    // mimalloc's `mi_option_purge_delay` (the same number in its v2 and v3 headers).
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets a process-wide allocator option; mimalloc reads it at each purge and
    // documents -1 as "never purge". No memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, purge_delay_ms as std::ffi::c_long) };
    // SAFETY: PR_SET_THP_DISABLE takes no pointer; it sets a flag of this process's memory
    // map that the kernel checks at each fault (mappings made earlier are covered too).
    // Failure (a kernel without THP) leaves nothing to undo.
    #[cfg(target_os = "linux")]
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}
