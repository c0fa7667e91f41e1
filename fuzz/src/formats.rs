//! The format files of `fuzz/formats/`: `tracefs` `events/` of Linux 6.18 on x86-64 for every
//! event [`argus_ingest::convert::Converter`] decodes, plus `header_page` and `header_event`.

use crate::scratch::Scratch;
use argus_ingest::format::{EventFormat, FormatSet, HeaderEvent, HeaderPage};
use std::path::Path;
use std::sync::OnceLock;

/// `events/header_page`: 8-byte commit, 4096-byte pages.
pub const HEADER_PAGE: &str = include_str!("../formats/header_page");
/// `events/header_event`.
pub const HEADER_EVENT: &str = include_str!("../formats/header_event");

/// `(system, event, format text)` of every event.
pub const EVENTS: &[(&str, &str, &str)] = &[
    (
        "filelock",
        "flock_lock_inode",
        include_str!("../formats/events/filelock/flock_lock_inode/format"),
    ),
    (
        "filelock",
        "locks_remove_posix",
        include_str!("../formats/events/filelock/locks_remove_posix/format"),
    ),
    (
        "filelock",
        "posix_lock_inode",
        include_str!("../formats/events/filelock/posix_lock_inode/format"),
    ),
    (
        "ftrace",
        "kernel_stack",
        include_str!("../formats/events/ftrace/kernel_stack/format"),
    ),
    (
        "ftrace",
        "print",
        include_str!("../formats/events/ftrace/print/format"),
    ),
    (
        "ftrace",
        "user_stack",
        include_str!("../formats/events/ftrace/user_stack/format"),
    ),
    (
        "irq",
        "irq_handler_entry",
        include_str!("../formats/events/irq/irq_handler_entry/format"),
    ),
    (
        "irq",
        "irq_handler_exit",
        include_str!("../formats/events/irq/irq_handler_exit/format"),
    ),
    (
        "irq",
        "softirq_entry",
        include_str!("../formats/events/irq/softirq_entry/format"),
    ),
    (
        "irq",
        "softirq_exit",
        include_str!("../formats/events/irq/softirq_exit/format"),
    ),
    (
        "raw_syscalls",
        "sys_enter",
        include_str!("../formats/events/raw_syscalls/sys_enter/format"),
    ),
    (
        "raw_syscalls",
        "sys_exit",
        include_str!("../formats/events/raw_syscalls/sys_exit/format"),
    ),
    (
        "sched",
        "sched_process_exec",
        include_str!("../formats/events/sched/sched_process_exec/format"),
    ),
    (
        "sched",
        "sched_process_exit",
        include_str!("../formats/events/sched/sched_process_exit/format"),
    ),
    (
        "sched",
        "sched_process_fork",
        include_str!("../formats/events/sched/sched_process_fork/format"),
    ),
    (
        "sched",
        "sched_switch",
        include_str!("../formats/events/sched/sched_switch/format"),
    ),
    (
        "sched",
        "sched_wakeup",
        include_str!("../formats/events/sched/sched_wakeup/format"),
    ),
    (
        "sched",
        "sched_wakeup_new",
        include_str!("../formats/events/sched/sched_wakeup_new/format"),
    ),
    (
        "sched",
        "sched_waking",
        include_str!("../formats/events/sched/sched_waking/format"),
    ),
    (
        "signal",
        "signal_deliver",
        include_str!("../formats/events/signal/signal_deliver/format"),
    ),
    (
        "signal",
        "signal_generate",
        include_str!("../formats/events/signal/signal_generate/format"),
    ),
    (
        "sock",
        "sk_data_ready",
        include_str!("../formats/events/sock/sk_data_ready/format"),
    ),
    (
        "sock",
        "sock_recv_length",
        include_str!("../formats/events/sock/sock_recv_length/format"),
    ),
    (
        "task",
        "task_newtask",
        include_str!("../formats/events/task/task_newtask/format"),
    ),
    (
        "task",
        "task_rename",
        include_str!("../formats/events/task/task_rename/format"),
    ),
    (
        "timer",
        "hrtimer_expire_entry",
        include_str!("../formats/events/timer/hrtimer_expire_entry/format"),
    ),
    (
        "timer",
        "hrtimer_expire_exit",
        include_str!("../formats/events/timer/hrtimer_expire_exit/format"),
    ),
    (
        "timer",
        "hrtimer_start",
        include_str!("../formats/events/timer/hrtimer_start/format"),
    ),
    (
        "timer",
        "timer_expire_entry",
        include_str!("../formats/events/timer/timer_expire_entry/format"),
    ),
    (
        "timer",
        "timer_expire_exit",
        include_str!("../formats/events/timer/timer_expire_exit/format"),
    ),
    (
        "timer",
        "timer_start",
        include_str!("../formats/events/timer/timer_start/format"),
    ),
    (
        "workqueue",
        "workqueue_execute_end",
        include_str!("../formats/events/workqueue/workqueue_execute_end/format"),
    ),
    (
        "workqueue",
        "workqueue_execute_start",
        include_str!("../formats/events/workqueue/workqueue_execute_start/format"),
    ),
    (
        "workqueue",
        "workqueue_queue_work",
        include_str!("../formats/events/workqueue/workqueue_queue_work/format"),
    ),
];

/// Every format of [`EVENTS`] parsed, with the page and record headers.
pub fn format_set() -> FormatSet {
    let mut set = FormatSet {
        header_page: HeaderPage::parse(HEADER_PAGE).expect("invariant: a kernel's header_page"),
        header_event: HeaderEvent::parse(HEADER_EVENT),
        ..FormatSet::default()
    };
    for (system, _, text) in EVENTS {
        set.insert(EventFormat::parse(system, text).expect("invariant: a kernel's format file"));
    }
    set
}

/// Writes `header_page`, `header_event` and `events/SYS/EVENT/format` of every event under
/// `dir` (a trace directory's `formats/`).
pub fn write_tree(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("header_page"), HEADER_PAGE)?;
    std::fs::write(dir.join("header_event"), HEADER_EVENT)?;
    for (system, name, text) in EVENTS {
        let d = dir.join("events").join(system).join(name);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("format"), text)?;
    }
    Ok(())
}

/// Makes `dir/formats` a symbolic link to a tree written by [`write_tree`] once per process:
/// the targets that lay out a trace directory per input would otherwise write 36 files each
/// time.
pub fn link_tree(dir: &Path) -> std::io::Result<()> {
    static TREE: OnceLock<Scratch> = OnceLock::new();
    let tree = TREE.get_or_init(|| {
        // Named after the target, so that scripts/fuzz removes it with the target's.
        let exe = std::env::current_exe().ok();
        let target = exe
            .as_deref()
            .and_then(Path::file_name)
            .map_or("fuzz".into(), |n| n.to_string_lossy().into_owned());
        let s = Scratch::new(&format!("{target}-formats"));
        write_tree(s.path()).expect("invariant: the scratch base is writable");
        s
    });
    std::os::unix::fs::symlink(tree.path(), dir.join("formats"))
}

/// The natural size of an event's record: the end of its last fixed field.
pub fn record_size(ev: &EventFormat) -> usize {
    ev.fields
        .iter()
        .map(|f| f.offset as usize + f.size as usize)
        .max()
        .unwrap_or(0)
}
