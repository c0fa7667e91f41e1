//! The Perfetto importer (`ingest/src/import/perfetto.rs`): the protobuf wire reader, trace
//! packets, ftrace event bundles (full `FtraceEvent`s of every mapped event, `compact_sched`
//! columns and intern table, `lost_events`), `process_tree` processes and threads, and the
//! text importer's mapping of the rendered lines, through `argus_ingest::import::open`.
//!
//! Input: the `Trace` message after a fixed first packet. Detection needs the file to start
//! with a parseable `packet` (field 1) and a byte below TAB; the importer reads the whole file
//! as one `Trace`, so the fixed packet (`0a 02 40 01`: a packet whose only field is
//! `timestamp = 1`, which the importer ignores) makes every input a Perfetto trace and every
//! byte of it further top-level fields: packets (field 1) and whatever else.
#![no_main]

use argus_fuzz::import::import_file;
use argus_fuzz::scratch::Scratch;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// `Trace.packet { timestamp: 1 }`.
const FIRST_PACKET: &[u8] = &[0x0a, 0x02, 0x40, 0x01];

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("import_perfetto"))
}

fuzz_target!(|data: &[u8]| {
    let mut file = FIRST_PACKET.to_vec();
    file.extend_from_slice(data);
    import_file(scratch(), "trace.perfetto-trace", &file);
});
