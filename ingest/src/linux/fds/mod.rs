//! File identity while recording: what every file descriptor refers to, written to
//! `files/NNNNNN.jsonl.zst` (`docs/trace-dir.md`, "File identity"; read back by
//! [`crate::files::FileTable`]).
//!
//! ```text
//!  reader cpuN ── PageScan::page (ids + 2-3 fields per record) ──┐ sys_exit of fd-creating
//!    per thread: args of the last close/close_range/fcntl        │ syscalls (ret >= 0), exec,
//!    sys_enter, paired with its sys_exit on this CPU             │ task_newtask, process exit,
//!                                                                │ close, close_range,
//!                                                                │ fcntl(F_DUPFD*)
//!                                  bounded channel, try_send ────┘ (full: counted, `lost`)
//!                                             │
//!  FdTracker thread ◄─────────────────────────┘
//!     start: every /proc/PID/fd/* (ts = start_ns), unix peers by one sock_diag dump
//!     Fd{tid, fd, ts}  → readlink /proc/TID/fd/FD (+ stat, fdinfo, peer)  → `fd` line at ts
//!     Scan{tid, ts}    → pipe/pipe2/socketpair/recvmsg/recvmmsg/connect/exec: rescan
//!                        /proc/PID/fd (at most one per pid per 50 ms), changed entries at ts
//!     Close{tid, fd, ts}, CloseRange → `unknown` line at ts for each descriptor closed
//!     NewTask          → `fork` line (the child starts with a copy of the parent's table)
//!     Exit             → forget the process
//!     every flush interval: one zstd frame appended + fdatasync
//! ```
//!
//! ```text
//!  scan.rs     PageScan, Msg: the readers' part (hot path, never blocks)
//!  tracker.rs  FdTracker: the tracker thread and its table of processes and descriptors
//!  procfs.rs   /proc: processes, threads, descriptor numbers, what a descriptor is
//!  peers.rs    the socket at the other end: NETLINK_SOCK_DIAG (unix), /proc/net (TCP/UDP)
//!  writer.rs   FilesWriter: files/NNNNNN.jsonl.zst, its share of the ring
//!  live.rs     FilesTap: the lines as written and the bound they are complete to, for a
//!              live consumer (`argus start`)
//! ```
//!
//! Peers: unix sockets through `NETLINK_SOCK_DIAG` (`unix_diag_req` for one inode with
//! `UDIAG_SHOW_PEER`), TCP/UDP through `/proc/net/{tcp,tcp6,udp,udp6}` (the socket whose
//! local address is my remote one and whose remote is my local one): loopback connections
//! only, as a remote peer has no inode here.
//!
//! **Closes.** `close` and `close_range` end a descriptor's identity at the syscall's exit
//! (an `unknown` line), so a closed descriptor is not taken for its old file. Their
//! arguments are only in `sys_enter`: each reader keeps them per thread (`MAX_ENTERED`
//! threads) until the thread's exit of the same syscall on that CPU. A creation that the
//! tracker knows was closed again (in the same batch, or a close already read) is `unknown`
//! from its creation: `/proc` cannot show that file any more.
//!
//! **The race.** Without kprobes (not built into the 6.18 kernel this was written on) nothing
//! runs at the moment a descriptor is created: the tracker reads `/proc` after the reader
//! thread has passed it the page holding the syscall's exit, up to ~100 ms later (the
//! readers' poll timeout). A descriptor closed in between cannot be read: it is recorded as
//! `unknown` from its creation. A descriptor closed and its number reused in between would
//! be read as the newer file; the tracker detects the case where both creations are in the
//! notifications it holds (the earlier one becomes `unknown`), not one whose second creation
//! it has not yet been told about. Rescans stamp what they find with the time of the syscall
//! that triggered them (the earliest one pending for that process), or just after the
//! descriptor's latest record when that is later: notifications from different CPUs arrive
//! out of order, and the table keeps each descriptor's latest record in trace time.
//!
//! **The ring.** The files get a fixed share of `--ring-size` ([`files_reserve`]). A new file
//! starts (with the whole table restated as `snapshot` lines) when the current one reaches a
//! quarter of the share; the oldest files are deleted when the share is full, so the table
//! can always be rebuilt from the files that remain.

mod live;
mod peers;
mod procfs;
mod scan;
mod tracker;
mod writer;

pub use live::{files_tap, FilesTap, FilesTapEnds};
pub use scan::scan_pages;
pub(crate) use scan::PageScan;
pub(crate) use tracker::{FdStats, FdTracker};
pub(crate) use writer::files_reserve;
