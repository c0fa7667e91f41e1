//! The six tables of a snapshot and the names their enum columns use.

use argus_schema::{arrow_schema, Context, EdgeKind, EndCause, SpinClass, StartCause, Strength};
use arrow::datatypes::SchemaRef;

/// One table of a snapshot: a Parquet file with a fixed Arrow schema
/// ([`argus_schema::arrow_schema`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// `events.parquet`, rows are [`argus_schema::Event`].
    Events,
    /// `segments.parquet`, rows are [`argus_schema::Segment`].
    Segments,
    /// `edges.parquet`, rows are [`argus_schema::CausalEdge`].
    Edges,
    /// `spins.parquet`, rows are [`argus_schema::Spin`].
    Spins,
    /// `threads.parquet`, rows are [`argus_schema::ThreadInfo`].
    Threads,
    /// `errors.parquet`, rows are [`argus_schema::ErrorRecord`].
    Errors,
}

impl Table {
    /// Every table, in the order they are written.
    pub const ALL: [Table; 6] = [
        Table::Events,
        Table::Segments,
        Table::Edges,
        Table::Spins,
        Table::Threads,
        Table::Errors,
    ];

    /// The file name inside the snapshot directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Table::Events => "events.parquet",
            Table::Segments => "segments.parquet",
            Table::Edges => "edges.parquet",
            Table::Spins => "spins.parquet",
            Table::Threads => "threads.parquet",
            Table::Errors => "errors.parquet",
        }
    }

    /// The Arrow schema every file of this table has.
    pub fn schema(self) -> SchemaRef {
        match self {
            Table::Events => arrow_schema::events(),
            Table::Segments => arrow_schema::segments(),
            Table::Edges => arrow_schema::edges(),
            Table::Spins => arrow_schema::spins(),
            Table::Threads => arrow_schema::threads(),
            Table::Errors => arrow_schema::errors(),
        }
    }
}

/// Parses a [`Context::name`] back.
pub fn parse_context(name: &str) -> Option<Context> {
    [
        Context::Task,
        Context::SoftIrq,
        Context::HardIrq,
        Context::Nmi,
    ]
    .into_iter()
    .find(|c| c.name() == name)
}

/// Parses a [`StartCause::name`] back.
pub fn parse_start_cause(name: &str) -> Option<StartCause> {
    [
        StartCause::FirstSeen,
        StartCause::Created,
        StartCause::Woken,
        StartCause::Interrupt,
    ]
    .into_iter()
    .find(|c| c.name() == name)
}

/// Parses an [`EndCause::name`] back.
pub fn parse_end_cause(name: &str) -> Option<EndCause> {
    [
        EndCause::Open,
        EndCause::Woken,
        EndCause::Exit,
        EndCause::HandlerDone,
    ]
    .into_iter()
    .find(|c| c.name() == name)
}

/// Parses an [`EdgeKind::name`] back ([`EdgeKind::from_name`]).
pub fn parse_edge_kind(name: &str) -> Option<EdgeKind> {
    EdgeKind::from_name(name)
}

/// Parses a [`Strength::name`] back.
pub fn parse_strength(name: &str) -> Option<Strength> {
    Strength::ALL.into_iter().find(|c| c.name() == name)
}

/// Parses a [`SpinClass::name`] back.
pub fn parse_spin_class(name: &str) -> Option<SpinClass> {
    [
        SpinClass::LongRunning,
        SpinClass::RepeatedYield,
        SpinClass::LongWait,
    ]
    .into_iter()
    .find(|c| c.name() == name)
}

/// The tag of an [`argus_schema::EventKind`] without its payload, parsed from the `kind`
/// column; [`crate::read_snapshot`] rebuilds the payload from the other columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // one variant per EventKind variant, same names
pub enum EventKindTag {
    Switch,
    Waking,
    WakeupNew,
    Fork,
    Exec,
    Exit,
    SysEnter,
    SysExit,
    IrqEntry,
    IrqExit,
    SoftirqEntry,
    SoftirqExit,
    HrtimerStart,
    HrtimerExpire,
    HrtimerExpireExit,
    Marker,
    WorkQueue,
    WorkStart,
    WorkEnd,
    TimerStart,
    TimerExpire,
    TimerExpireExit,
    SignalGenerate,
    SignalDeliver,
    Stack,
    FlagAccess,
    FileLock,
    SockReady,
    SockRecv,
    LockOwner,
}

impl EventKindTag {
    /// The tag of an event's kind.
    pub fn of(kind: &argus_schema::EventKind) -> EventKindTag {
        use argus_schema::EventKind as K;
        match kind {
            K::Switch { .. } => EventKindTag::Switch,
            K::Waking { .. } => EventKindTag::Waking,
            K::WakeupNew { .. } => EventKindTag::WakeupNew,
            K::Fork { .. } => EventKindTag::Fork,
            K::Exec => EventKindTag::Exec,
            K::Exit => EventKindTag::Exit,
            K::SysEnter { .. } => EventKindTag::SysEnter,
            K::SysExit { .. } => EventKindTag::SysExit,
            K::IrqEntry { .. } => EventKindTag::IrqEntry,
            K::IrqExit { .. } => EventKindTag::IrqExit,
            K::SoftirqEntry { .. } => EventKindTag::SoftirqEntry,
            K::SoftirqExit { .. } => EventKindTag::SoftirqExit,
            K::HrtimerStart { .. } => EventKindTag::HrtimerStart,
            K::HrtimerExpire { .. } => EventKindTag::HrtimerExpire,
            K::HrtimerExpireExit { .. } => EventKindTag::HrtimerExpireExit,
            K::Marker { .. } => EventKindTag::Marker,
            K::WorkQueue { .. } => EventKindTag::WorkQueue,
            K::WorkStart { .. } => EventKindTag::WorkStart,
            K::WorkEnd { .. } => EventKindTag::WorkEnd,
            K::TimerStart { .. } => EventKindTag::TimerStart,
            K::TimerExpire { .. } => EventKindTag::TimerExpire,
            K::TimerExpireExit { .. } => EventKindTag::TimerExpireExit,
            K::SignalGenerate { .. } => EventKindTag::SignalGenerate,
            K::SignalDeliver { .. } => EventKindTag::SignalDeliver,
            K::Stack { .. } => EventKindTag::Stack,
            K::FlagAccess { .. } => EventKindTag::FlagAccess,
            K::FileLock { .. } => EventKindTag::FileLock,
            K::SockReady { .. } => EventKindTag::SockReady,
            K::SockRecv { .. } => EventKindTag::SockRecv,
            K::LockOwner { .. } => EventKindTag::LockOwner,
        }
    }
}

/// Parses an [`argus_schema::EventKind::name`] back to its tag.
pub fn parse_event_kind(name: &str) -> Option<EventKindTag> {
    use EventKindTag::*;
    Some(match name {
        "switch" => Switch,
        "waking" => Waking,
        "wakeup_new" => WakeupNew,
        "fork" => Fork,
        "exec" => Exec,
        "exit" => Exit,
        "sys_enter" => SysEnter,
        "sys_exit" => SysExit,
        "irq_entry" => IrqEntry,
        "irq_exit" => IrqExit,
        "softirq_entry" => SoftirqEntry,
        "softirq_exit" => SoftirqExit,
        "hrtimer_start" => HrtimerStart,
        "hrtimer_expire" => HrtimerExpire,
        "hrtimer_expire_exit" => HrtimerExpireExit,
        "marker" => Marker,
        "work_queue" => WorkQueue,
        "work_start" => WorkStart,
        "work_end" => WorkEnd,
        "timer_start" => TimerStart,
        "timer_expire" => TimerExpire,
        "timer_expire_exit" => TimerExpireExit,
        "signal_generate" => SignalGenerate,
        "signal_deliver" => SignalDeliver,
        "stack" => Stack,
        "flag_access" => FlagAccess,
        "file_lock" => FileLock,
        "sock_ready" => SockReady,
        "sock_recv" => SockRecv,
        "lock_owner" => LockOwner,
        _ => return None,
    })
}

/// The tag of an [`argus_schema::SegmentKind`] without its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // one variant per SegmentKind variant, same names
pub enum SegmentKindTag {
    Task,
    HardIrq,
    SoftIrq,
    Timer,
    Interrupt,
    WorkItem,
}

/// Parses an [`argus_schema::SegmentKind::name`] back to its tag.
pub fn parse_segment_kind(name: &str) -> Option<SegmentKindTag> {
    Some(match name {
        "task" => SegmentKindTag::Task,
        "hardirq" => SegmentKindTag::HardIrq,
        "softirq" => SegmentKindTag::SoftIrq,
        "timer" => SegmentKindTag::Timer,
        "interrupt" => SegmentKindTag::Interrupt,
        "work_item" => SegmentKindTag::WorkItem,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use argus_schema::{EventKind, Pid, SegmentKind, TaskState, Tid};

    #[test]
    fn every_event_kind_name_parses() {
        let kinds = [
            EventKind::Switch {
                prev: Tid(1),
                prev_state: TaskState::SLEEPING,
                next: Tid(2),
            },
            EventKind::Waking { target: Tid(1) },
            EventKind::WakeupNew { target: Tid(1) },
            EventKind::Fork {
                child: Tid(1),
                child_pid: Pid(1),
                thread: true,
            },
            EventKind::Exec,
            EventKind::Exit,
            EventKind::SysEnter {
                nr: 0,
                args: [0; 6],
            },
            EventKind::SysExit { nr: 0, ret: 0 },
            EventKind::IrqEntry { irq: 0 },
            EventKind::IrqExit { irq: 0 },
            EventKind::SoftirqEntry { vec: 0 },
            EventKind::SoftirqExit { vec: 0 },
            EventKind::HrtimerStart {
                timer: 0,
                function: 0,
                expires: 0,
            },
            EventKind::HrtimerExpire {
                timer: 0,
                function: 0,
            },
            EventKind::HrtimerExpireExit { timer: 0 },
            EventKind::Marker {
                text: String::new(),
            },
        ];
        let mut tags = Vec::new();
        for k in &kinds {
            let tag = parse_event_kind(k.name()).expect("every name parses");
            assert!(
                !tags.contains(&tag),
                "{} parsed to a tag already used",
                k.name()
            );
            tags.push(tag);
        }
        assert_eq!(parse_event_kind("Switch"), None);
    }

    #[test]
    fn every_segment_kind_name_parses() {
        let kinds = [
            SegmentKind::Task,
            SegmentKind::HardIrq { irq: 1 },
            SegmentKind::SoftIrq { vec: 1 },
            SegmentKind::Timer {
                timer: 1,
                function: 2,
            },
            SegmentKind::Interrupt,
        ];
        let tags: Vec<_> = kinds.iter().map(|k| parse_segment_kind(k.name())).collect();
        assert_eq!(
            tags,
            [
                Some(SegmentKindTag::Task),
                Some(SegmentKindTag::HardIrq),
                Some(SegmentKindTag::SoftIrq),
                Some(SegmentKindTag::Timer),
                Some(SegmentKindTag::Interrupt)
            ]
        );
    }

    #[test]
    fn small_enums_round_trip_by_name() {
        for c in [
            Context::Task,
            Context::SoftIrq,
            Context::HardIrq,
            Context::Nmi,
        ] {
            assert_eq!(parse_context(c.name()), Some(c));
        }
        assert_eq!(parse_context("bogus"), None);
        assert_eq!(parse_spin_class("LongWait"), Some(SpinClass::LongWait));
        assert_eq!(parse_strength("strong"), Some(Strength::Strong));
        assert_eq!(parse_edge_kind("thread_order"), Some(EdgeKind::ThreadOrder));
        assert_eq!(parse_start_cause("first_seen"), Some(StartCause::FirstSeen));
        assert_eq!(parse_end_cause("handler_done"), Some(EndCause::HandlerDone));
    }
}
