//! What a state machine is about ([`Key`]) and the part a key plays in an event ([`Role`]).

use super::channels::ChannelEnd;
use argus_schema::{Cpu, Pid, Tid};
use serde::{Deserialize, Serialize};

/// What a key's state machine is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Key {
    /// A task.
    Thread(Tid),
    /// Interrupt context on a CPU.
    Irq(Cpu),
    /// A `struct hrtimer` by address.
    Timer(u64),
    /// A `struct timer_list` (wheel timer) by address.
    WheelTimer(u64),
    /// A `struct work_struct` by address.
    Work(u64),
    /// A declared pipe, by index in [`UserRules::pipes`](super::UserRules::pipes).
    Pipe(u32),
    /// A pipe or one direction of a socket connection, from fd identity
    /// ([`ChannelEnd`]).
    Channel(u64),
    /// A watched data flag: process and address.
    Flag(Pid, u64),
    /// A signal generated for a thread-group leader (`kill(pid)`: process-directed), by
    /// leader and signal number: any thread of the group may take delivery.
    ProcSignal(Tid, i32),
    /// A lockable file (`flock` or `fcntl` record locks), by device and inode
    /// ([`lock_key`]).
    Lock(u64),
    /// A socket by kernel address (`struct sock *`), from the socket data records
    /// ([`SockState`](super::socket::SockState)).
    Sock(u64),
}

impl Key {
    /// A well-mixed hash, used to partition keys over workers.
    pub fn hash64(&self) -> u64 {
        let (tag, v) = match *self {
            Key::Thread(t) => (1u64, t.0 as u32 as u64),
            Key::Irq(c) => (2, c.0 as u64),
            Key::Timer(a) => (3, a),
            Key::WheelTimer(a) => (4, a),
            Key::Work(a) => (5, a),
            Key::Pipe(i) => (6, i as u64),
            Key::Channel(c) => (7, c),
            Key::Flag(p, a) => (8, a ^ ((p.0 as u32 as u64) << 40)),
            Key::ProcSignal(t, s) => (9, (t.0 as u32 as u64) | ((s as u32 as u64) << 32)),
            Key::Lock(f) => (10, f),
            Key::Sock(sk) => (11, sk),
        };
        // splitmix64 finalizer
        let mut z = v.wrapping_add(tag.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The part a key plays in an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// The key's own record (syscalls, exit, interrupt entry/exit, work items, markers).
    Own,
    /// The key acts on another key (wakes, forks, arms a timer, queues work, signals).
    Actor,
    /// The key is acted on (woken, created).
    Target,
    /// The task leaves the CPU.
    SwitchOut,
    /// The task takes the CPU.
    SwitchIn,
    /// An object key is armed (timer armed, work queued, pipe written).
    Arm,
    /// An object key fires (timer expires, work starts, pipe read).
    Fire,
    /// A signal is generated for the task.
    SignalTarget,
    /// Another task blocks on a lock the task holds ([`EventKind::LockOwner`]).
    ///
    /// [`EventKind::LockOwner`]: argus_schema::EventKind::LockOwner
    Holder,
}

/// The lock key of a file: its device and inode, and whether the lock is a `flock` (which
/// never conflicts with a POSIX record lock on the same file).
pub fn lock_key(inode: u64, dev: u32, flock: bool) -> Key {
    Key::Lock(ChannelEnd::mix(5 + u64::from(flock), inode, u64::from(dev)))
}
