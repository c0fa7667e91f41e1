//! File-identity records (`ingest/src/files.rs`, written by `ingest/src/linux/fds/`):
//! `files/NNNNNN.jsonl.zst`, zstd frames of JSON lines (`snapshot`, `fd`, `unknown`,
//! `fork`, `lost`, unknown types), frames cut short, garbage, lines without their newline;
//! read for a complete trace and for one still recording, then looked up as the graph does.
//!
//! Input, by its first byte:
//! - odd: structure-aware: files of frames of lines built from [`LineSpec`];
//! - even: sections: the decompressed text of `files/000000.jsonl.zst`, then
//!   `files/000001.jsonl.zst` as bytes; bit 1 of the first byte: recording.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use argus_fuzz::scratch::Scratch;
use argus_fuzz::sections;
use argus_ingest::files::{FileTable, FilesError};
use argus_ingest::tracedir::FileLine;
use argus_schema::{Nanos, Pid};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

#[derive(Arbitrary, Debug)]
struct FilesSpec {
    recording: bool,
    files: Vec<FileSpec>,
}

#[derive(Arbitrary, Debug)]
struct FileSpec {
    /// Frames of lines.
    frames: Vec<Vec<LineSpec>>,
    /// Bytes cut off the end.
    cut: u16,
    /// The file name's number (files are read in number order).
    seq: u8,
}

#[derive(Arbitrary, Debug)]
enum LineSpec {
    Snapshot {
        seq: u32,
        ts: u64,
    },
    Fd {
        ts: u64,
        pid: i32,
        fd: i32,
        kind: u8,
        ino: u64,
        peer: Option<u64>,
        target: String,
    },
    Unknown {
        ts: u64,
        pid: i32,
        fd: i32,
    },
    Fork {
        ts: u64,
        parent: i32,
        child: i32,
    },
    Lost {
        ts: u64,
        messages: u64,
    },
    Text(String),
    Blank,
}

impl LineSpec {
    /// The line as the recorder writes it (`FileLine`'s own serialization), or free text.
    fn text(&self) -> String {
        let kinds = ["pipe", "socket", "regular", "anon", "other", "device"];
        let line = match self {
            LineSpec::Snapshot { seq, ts } => FileLine::Snapshot { seq: *seq, ts: *ts },
            LineSpec::Fd {
                ts,
                pid,
                fd,
                kind,
                ino,
                peer,
                target,
            } => FileLine::Fd {
                ts: *ts,
                pid: *pid,
                fd: *fd,
                kind: kinds[*kind as usize % kinds.len()].into(),
                ino: *ino,
                peer: *peer,
                target: target.clone(),
                src: "syscall".into(),
            },
            LineSpec::Unknown { ts, pid, fd } => FileLine::Unknown {
                ts: *ts,
                pid: *pid,
                fd: *fd,
            },
            LineSpec::Fork { ts, parent, child } => FileLine::Fork {
                ts: *ts,
                parent: *parent,
                child: *child,
            },
            LineSpec::Lost { ts, messages } => FileLine::Lost {
                ts: *ts,
                messages: *messages,
            },
            LineSpec::Text(t) => return t.clone(),
            LineSpec::Blank => return String::new(),
        };
        serde_json::to_string(&line).expect("invariant: a FileLine serializes")
    }
}

fn scratch() -> &'static Scratch {
    static S: OnceLock<Scratch> = OnceLock::new();
    S.get_or_init(|| Scratch::new("files"))
}

fn compress(bytes: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(bytes, 1).expect("invariant: compressing into a Vec")
}

fn read(recording: bool) {
    let table = match FileTable::read(scratch().path(), recording) {
        Ok(t) => t,
        Err(e) => {
            assert!(e.file().starts_with("files"), "{e}: names the file");
            if let FilesError::BadLine { reason, .. } = &e {
                assert!(!reason.is_empty());
            }
            return;
        }
    };
    let records: Vec<(Pid, i32, Nanos)> = table
        .entries()
        .map(|(pid, fd, ts, _)| (pid, fd, ts))
        .take(256)
        .collect();
    for (pid, fd, ts) in records {
        let _ = table.lookup(pid, fd, ts);
        let _ = table.lookup(pid, fd, Nanos(ts.0.saturating_add(1)));
    }
    for (_, parent, child) in table.forks().into_iter().take(64) {
        let _ = table.lookup(child, 0, Nanos(u64::MAX));
        let _ = table.lookup(parent, 0, Nanos(0));
    }
    let _ = (
        table.len(),
        table.lost(),
        table.files(),
        table.recovered_tails(),
    );
}

fn built(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(spec) = FilesSpec::arbitrary(&mut u) else {
        return;
    };
    let s = scratch();
    s.reset();
    std::fs::create_dir_all(s.path().join("files")).expect("invariant: writable scratch");
    for f in spec.files.iter().take(4) {
        let mut bytes = Vec::new();
        for frame in f.frames.iter().take(4) {
            let mut text = String::new();
            for line in frame.iter().take(64) {
                text.push_str(&line.text());
                text.push('\n');
            }
            bytes.extend_from_slice(&compress(text.as_bytes()));
        }
        let cut = usize::from(f.cut) % (bytes.len() + 1);
        bytes.truncate(bytes.len() - cut);
        s.write(&format!("files/{:06}.jsonl.zst", f.seq), &bytes);
    }
    read(spec.recording);
}

fn raw(recording: bool, data: &[u8]) {
    let parts = sections::split(data, 2);
    let s = scratch();
    s.reset();
    s.write("files/000000.jsonl.zst", &compress(parts[0]));
    if !parts[1].is_empty() {
        s.write("files/000001.jsonl.zst", parts[1]);
    }
    read(recording);
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 1 => built(rest),
        Some((mode, rest)) => raw(mode & 2 != 0, rest),
        None => {}
    }
});
