//! The macOS/iOS kdebug importer (`ingest/src/import/kdebug/`): `RAW_VERSION1` and
//! `RAW_VERSION2` headers, thread maps, CPU maps, V3 chunks (header, thread map, CPU map,
//! event chunks, unknown chunks skipped), 64- and 32-bit `kd_buf`s, and their mapping to
//! Argus events (switches, wake-ups, syscalls, Mach messages, strings), through
//! `argus_ingest::import::open`.
//!
//! Input: a kdebug file; the V3 magic (`0x55aa0300`) is put in front when the input does not
//! start with one of the three versions', so every input reaches the kdebug reader.
#![no_main]

use argus_fuzz::import::import_file;
use argus_fuzz::scratch::Scratch;
use argus_ingest::import::kdebug::{looks_like, RAW_VERSION3};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("import_kdebug"))
}

fuzz_target!(|data: &[u8]| {
    if looks_like(data) {
        import_file(scratch(), "trace.ktrace", data);
    } else {
        let mut file = RAW_VERSION3.to_le_bytes().to_vec();
        file.extend_from_slice(data);
        import_file(scratch(), "trace.ktrace", &file);
    }
});
