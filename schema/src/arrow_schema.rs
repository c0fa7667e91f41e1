//! Arrow schemas of the snapshot tables. Column names, types and units are the notebook
//! interface and are documented in `docs/snapshot.md`; change them only with
//! [`crate::SCHEMA_VERSION`].
//!
//! Conventions: times are `UInt64` nanoseconds on the trace clock with the suffix `_ns`;
//! segment ids are `UInt64` ([`crate::SegmentId`]: tid in the high 32 bits, ordinal in the
//! low 32); enums are lowercase `Utf8` names (`EventKind::name`, `EdgeKind::name`, ...).

use arrow_schema::{DataType, Field, Schema};
use std::sync::Arc;

fn u64f(name: &str) -> Field {
    Field::new(name, DataType::UInt64, false)
}
fn i32f(name: &str) -> Field {
    Field::new(name, DataType::Int32, false)
}
fn strf(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}

/// `events.parquet`: one row per decoded record.
pub fn events() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        u64f("ts_ns"),
        u64f("seq"),
        Field::new("cpu", DataType::UInt32, false),
        i32f("pid"),
        i32f("tid"),
        strf("ctx"),
        strf("kind"),
        // Kind-specific payload, see docs/snapshot.md: target tid, syscall nr, irq, vec...
        Field::new("target", DataType::Int32, true),
        Field::new("nr", DataType::Int32, true),
        Field::new("arg0", DataType::UInt64, true),
        Field::new("arg1", DataType::UInt64, true),
        Field::new("arg2", DataType::UInt64, true),
        Field::new("arg3", DataType::UInt64, true),
        Field::new("arg4", DataType::UInt64, true),
        Field::new("arg5", DataType::UInt64, true),
        Field::new("ret", DataType::Int64, true),
        Field::new("state", DataType::Utf8, true),
        Field::new("text", DataType::Utf8, true),
    ]))
}

/// `segments.parquet`: one row per segment.
pub fn segments() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        u64f("id"),
        i32f("tid"),
        i32f("pid"),
        strf("kind"),
        Field::new("irq", DataType::Int64, true),
        u64f("start_ns"),
        u64f("end_ns"),
        strf("start_cause"),
        strf("end_cause"),
        Field::new("wait_start_ns", DataType::UInt64, true),
        Field::new("wait_state", DataType::Utf8, true),
        i32f("wait_syscall"),
        Field::new("wait_ret", DataType::Int64, true),
        Field::new("wait_object", DataType::UInt64, true),
        u64f("on_cpu_ns"),
        Field::new("preemptions", DataType::UInt32, false),
        Field::new("yields", DataType::UInt32, false),
        Field::new("syscalls", DataType::UInt32, false),
        Field::new("events", DataType::UInt32, false),
        Field::new(
            "syscall_seq",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, false))),
            false,
        ),
        Field::new("timer_function", DataType::UInt64, true),
    ]))
}

/// `edges.parquet`: one row per causal edge.
pub fn edges() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        u64f("src"),
        u64f("dst"),
        strf("kind"),
        strf("strength"),
        u64f("ts_ns"),
        i32f("src_syscall"),
    ]))
}

/// `spins.parquet`: one row per spinning vertex.
pub fn spins() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        u64f("segment"),
        u64f("last"),
        i32f("tid"),
        i32f("pid"),
        strf("class"),
        u64f("start_ns"),
        u64f("end_ns"),
        Field::new("open", DataType::Boolean, false),
        u64f("on_cpu_ns"),
        u64f("wait_ns"),
        Field::new("segments", DataType::UInt32, false),
        i32f("wait_syscall"),
        Field::new("timeouts", DataType::UInt32, false),
    ]))
}

/// `threads.parquet`: one row per thread.
pub fn threads() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        i32f("tid"),
        i32f("pid"),
        strf("comm"),
        strf("process"),
        Field::new("parent", DataType::Int32, true),
        Field::new("start_ns", DataType::UInt64, true),
        Field::new("exit_ns", DataType::UInt64, true),
        Field::new("kernel", DataType::Boolean, false),
    ]))
}

/// `errors.parquet`: one row per record that could not be used.
pub fn errors() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        strf("source"),
        Field::new("offset", DataType::UInt64, true),
        Field::new("ts_ns", DataType::UInt64, true),
        strf("message"),
    ]))
}
