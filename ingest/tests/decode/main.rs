//! Integration tests of argus-ingest against real trace material
//! (`../shared/realtraces`, see its MANIFEST.txt) and hand-built trace directories.
#![allow(clippy::unwrap_used)]

mod common;
mod formats;
mod live;
mod live_events;
mod new_events;
mod perfdata;
mod perfetto;
mod replay;
mod schedviz;
mod tracedat;
