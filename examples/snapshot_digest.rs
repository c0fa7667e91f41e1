//! Prints the digest of every table of a snapshot, one `table rows digest` line each
//! (`argus_sinks::digest`: order-independent, so two builds of one trace with any number of
//! workers print the same lines), or with `--rows TABLE` that table's rows as sorted text
//! (diff two of those to see what changed).
//!
//! ```text
//! cargo run --release --example snapshot_digest -- SNAPSHOT [--rows TABLE]
//! ```
//!
//! `scripts/same-snapshots` runs it on two builds of the same traces.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, rows) = match args.as_slice() {
        [dir] => (PathBuf::from(dir), None),
        [dir, flag, table] if flag == "--rows" => (PathBuf::from(dir), Some(table.clone())),
        _ => {
            eprintln!("usage: snapshot_digest SNAPSHOT [--rows TABLE]");
            return ExitCode::from(2);
        }
    };
    let result = match rows {
        None => argus_sinks::digest::table_digests(&dir).map(|tables| {
            for t in tables {
                println!("{t}");
            }
        }),
        Some(table) => argus_sinks::digest::table_rows(&dir.join(format!("{table}.parquet"))).map(
            |(schema, rows)| {
                println!("{schema}");
                for r in rows {
                    println!("{r}");
                }
            },
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("snapshot_digest: error: {e}");
            ExitCode::from(2)
        }
    }
}
