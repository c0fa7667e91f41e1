//! The kdebug structures as xnu writes them, the inverse of `decode.rs`: 64-bit `kd_buf`s,
//! `kd_threadmap` entries, CPU maps, and V1/V2/V3 files. The macOS collector writes its V3
//! chunks with these (`crate::macos`), and the tests write their vectors with them.

use super::decode::{tags, KdCpu, KdEvent, KdThread, KdVersion};
use super::decode::{RAW_VERSION1, RAW_VERSION2, RAW_VERSION3};

/// Bytes of the V3 file header chunk's payload (`kd_header_v3` after its chunk header).
pub const V3_HEADER: usize = 40;
/// Bytes of a V3 chunk header (`u32 tag; u16 major; u16 minor; u64 size`).
pub const CHUNK_HEADER: usize = 16;
/// The most records the kernel puts in one V3 events chunk; [`file()`] does the same.
pub const EVENTS_PER_CHUNK: usize = 4096;

/// Appends one 64-bit `kd_buf` (64 bytes).
pub fn kd_buf(out: &mut Vec<u8>, e: &KdEvent) {
    out.extend_from_slice(&e.timestamp.to_le_bytes());
    for a in e.args {
        out.extend_from_slice(&a.to_le_bytes());
    }
    out.extend_from_slice(&e.tid.to_le_bytes());
    out.extend_from_slice(&e.debugid.to_le_bytes());
    out.extend_from_slice(&e.cpu.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
}

/// `kd_threadmap` entries (32 bytes each). A thread of process 0 is written as xnu writes
/// `kernel_task`'s threads: pid 1, command `kernel_task` (which the decoder reads back as
/// pid 0). Commands are cut to 19 bytes and a NUL.
pub fn thread_map(threads: &[KdThread]) -> Vec<u8> {
    let mut map = Vec::with_capacity(threads.len() * super::decode::THREADMAP_ENTRY);
    for t in threads {
        map.extend_from_slice(&t.tid.to_le_bytes());
        let (pid, cmd) = if t.pid == 0 {
            (1, "kernel_task")
        } else {
            (t.pid, t.command.as_str())
        };
        map.extend_from_slice(&pid.to_le_bytes());
        let mut c = [0u8; 20];
        let n = cmd.len().min(19);
        c[..n].copy_from_slice(&cmd.as_bytes()[..n]);
        map.extend_from_slice(&c);
    }
    map
}

/// A CPU map: `kd_cpumap_header` (`version`, count), then a 16-byte `kd_cpumap` per CPU
/// (names cut to 7 bytes and a NUL).
pub fn cpu_map(version: u32, cpus: &[KdCpu]) -> Vec<u8> {
    let mut m = version.to_le_bytes().to_vec();
    m.extend_from_slice(&(cpus.len() as u32).to_le_bytes());
    for c in cpus {
        m.extend_from_slice(&c.cpu_id.to_le_bytes());
        m.extend_from_slice(&c.flags.to_le_bytes());
        let mut name = [0u8; 8];
        let n = c.name.len().min(7);
        name[..n].copy_from_slice(&c.name.as_bytes()[..n]);
        m.extend_from_slice(&name);
    }
    m
}

/// Appends a V3 chunk: its header (`tag`, version 0.0, `data`'s size), `data`, and zeros to
/// the next 8-byte boundary of `out`.
pub fn v3_chunk(out: &mut Vec<u8>, tag: u32, data: &[u8]) {
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(8) * 8, 0);
}

/// Appends a V3 events chunk of raw 64-bit `kd_buf`s (`records`, a multiple of 64 bytes):
/// the 8-byte "future events" time (0) and the records.
pub fn v3_events(out: &mut Vec<u8>, records: &[u8]) {
    out.extend_from_slice(&tags::RAW_EVENTS.to_le_bytes());
    // The kernel writes its events chunks as version 1.0 (FORMATS.md §6.1).
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(8 + records.len() as u64).to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(records);
    out.resize(out.len().div_ceil(8) * 8, 0);
}

/// What a V3 file header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Header {
    /// `mach_timebase_info`: nanoseconds per `numer / denom` tick.
    pub timebase: (u32, u32),
    /// `mach_absolute_time` when the trace started.
    pub start: u64,
    /// The wall-clock time then: seconds and microseconds since the Unix epoch.
    pub walltime: (u64, u32),
}

/// Appends the V3 file header chunk (64-bit records).
pub fn v3_header(out: &mut Vec<u8>, h: &V3Header) {
    let mut data = Vec::with_capacity(V3_HEADER);
    data.extend_from_slice(&h.timebase.0.to_le_bytes());
    data.extend_from_slice(&h.timebase.1.to_le_bytes());
    data.extend_from_slice(&h.start.to_le_bytes());
    data.extend_from_slice(&h.walltime.0.to_le_bytes());
    data.extend_from_slice(&h.walltime.1.to_le_bytes());
    // tz_minuteswest, tz_dst, flags (1: 64-bit records).
    for v in [0u32, 0, 1] {
        data.extend_from_slice(&v.to_le_bytes());
    }
    v3_chunk(out, RAW_VERSION3, &data);
}

/// A whole V1, V2 or V3 file of 64-bit records. `events`' times are written as they are
/// (the file's units: V1 has no timebase and is read as nanoseconds; V2 says 24 MHz; V3
/// says `header.timebase`). V1 and V2 take the wall-clock seconds of `header`; V2 has no CPU
/// map.
pub fn file(
    version: KdVersion,
    header: &V3Header,
    threads: &[KdThread],
    cpus: &[KdCpu],
    events: &[KdEvent],
) -> Vec<u8> {
    let mut records = Vec::with_capacity(events.len() * super::decode::KD_BUF_64);
    for e in events {
        kd_buf(&mut records, e);
    }
    let map = thread_map(threads);
    let align = super::decode::EVENTS_ALIGN;
    let pad = |f: &mut Vec<u8>| f.resize(f.len().div_ceil(align) * align, 0);
    let mut f = Vec::new();
    match version {
        KdVersion::V1 => {
            f.extend_from_slice(&RAW_VERSION1.to_le_bytes());
            f.extend_from_slice(&(threads.len() as u32).to_le_bytes());
            f.extend_from_slice(&header.walltime.0.to_le_bytes());
            f.extend_from_slice(&header.walltime.1.to_le_bytes());
            f.extend_from_slice(&[0; 4]);
            f.extend(map);
            f.extend(cpu_map(RAW_VERSION1, cpus));
            pad(&mut f);
            f.extend(records);
        }
        KdVersion::V2 => {
            f.extend_from_slice(&RAW_VERSION2.to_le_bytes());
            f.extend_from_slice(&(threads.len() as u32).to_le_bytes());
            f.extend_from_slice(&0u64.to_le_bytes());
            f.extend_from_slice(&0u32.to_le_bytes());
            f.extend_from_slice(&1u32.to_le_bytes());
            f.extend_from_slice(&24_000_000u64.to_le_bytes());
            f.extend_from_slice(&[0; 256]);
            f.extend(map);
            pad(&mut f);
            f.extend(records);
        }
        KdVersion::V3 => {
            v3_header(&mut f, header);
            v3_chunk(&mut f, tags::THREAD_MAP, &map);
            v3_chunk(&mut f, tags::CPU_MAP, &cpu_map(RAW_VERSION3, cpus));
            for part in records.chunks(EVENTS_PER_CHUNK * super::decode::KD_BUF_64) {
                v3_events(&mut f, part);
            }
        }
    }
    f
}

/// A V3 file in the stream layout ([`super::V3Layout::Stream`], the layout pykdebugparser reads):
/// the magic word, the `0x1000` header chunk with `header`'s fields, a `u32` 0 and a property
/// list saying how many CPUs; a stackshot chunk holding only the kcdata field name
/// `stackshot_out_flags` (pykdebugparser finds the thread map by searching past it); the
/// thread map; the events in chunks of [`EVENTS_PER_CHUNK`] records with a null chunk
/// between two, all chunks of version 0.
pub fn stream_file(
    header: &V3Header,
    threads: &[KdThread],
    cpus: usize,
    events: &[KdEvent],
) -> Vec<u8> {
    let plist = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\"><dict>\
         <key>CPUs</key><integer>{cpus}</integer></dict></plist>\n"
    );
    let mut f = RAW_VERSION3.to_le_bytes().to_vec();
    f.extend_from_slice(&tags::HEADER.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&((V3_HEADER + 12 + plist.len()) as u64).to_le_bytes());
    f.extend_from_slice(&header.timebase.0.to_le_bytes());
    f.extend_from_slice(&header.timebase.1.to_le_bytes());
    f.extend_from_slice(&header.start.to_le_bytes());
    f.extend_from_slice(&header.walltime.0.to_le_bytes());
    f.extend_from_slice(&header.walltime.1.to_le_bytes());
    for v in [0u32, 0, 1, 0] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    f.extend_from_slice(&(plist.len() as u64).to_le_bytes());
    f.extend_from_slice(plist.as_bytes());
    f.resize(4 + (f.len() - 4).div_ceil(8) * 8 + 4, 0);
    v3_chunk(&mut f, tags::STACKSHOT, b"stackshot_out_flags\0");
    v3_chunk(&mut f, tags::THREAD_MAP, &thread_map(threads));
    let mut records = Vec::with_capacity(EVENTS_PER_CHUNK * super::decode::KD_BUF_64 + 8);
    for (i, part) in events.chunks(EVENTS_PER_CHUNK).enumerate() {
        if i > 0 {
            v3_chunk(&mut f, tags::NULL_CHUNK, &[]);
        }
        records.clear();
        records.extend_from_slice(&0u64.to_le_bytes());
        for e in part {
            kd_buf(&mut records, e);
        }
        v3_chunk(&mut f, tags::RAW_EVENTS, &records);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sample() -> (Vec<KdThread>, Vec<KdCpu>, Vec<KdEvent>) {
        let threads = vec![
            KdThread {
                tid: 101,
                pid: 0,
                command: "kernel_task".into(),
            },
            KdThread {
                tid: 5001,
                pid: 77,
                command: "a-very-long-command-name".into(),
            },
        ];
        let cpus = (0..2)
            .map(|c| KdCpu {
                cpu_id: c,
                flags: 0,
                name: format!("cpu{c}"),
            })
            .collect();
        let events = (0..(EVENTS_PER_CHUNK as u64 + 10))
            .map(|i| KdEvent {
                offset: 0,
                timestamp: 1000 + i,
                args: [i, 2, 3, 4],
                tid: 5001,
                debugid: 0x0140_0000,
                cpu: (i % 2) as u32,
            })
            .collect();
        (threads, cpus, events)
    }

    #[test]
    fn every_version_decodes_to_what_was_encoded() {
        let (threads, cpus, events) = sample();
        let header = V3Header {
            timebase: (125, 3),
            start: 1000,
            walltime: (1_764_300_000, 250),
        };
        for version in [KdVersion::V1, KdVersion::V2, KdVersion::V3] {
            let bytes = file(version, &header, &threads, &cpus, &events);
            let kd = super::super::parse(Path::new("x.ktrace"), &bytes)
                .expect("an encoded file decodes");
            assert_eq!(kd.version, version);
            let got: Vec<_> = kd
                .events
                .iter()
                .map(|e| (e.timestamp, e.args, e.tid, e.debugid, e.cpu))
                .collect();
            let want: Vec<_> = events
                .iter()
                .map(|e| (e.timestamp, e.args, e.tid, e.debugid, e.cpu))
                .collect();
            assert_eq!(got, want, "{version:?}");
            assert_eq!(kd.threads[0].pid, 0, "{version:?}: kernel_task's pid");
            assert_eq!(kd.threads[1].command, "a-very-long-command", "{version:?}");
            if version != KdVersion::V2 {
                assert_eq!(kd.cpus, cpus, "{version:?}");
            }
            if version == KdVersion::V3 {
                assert_eq!(kd.timebase, (125, 3));
                assert_eq!(kd.walltime, Some((1_764_300_000, 250)));
            }
        }
        let bytes = stream_file(&header, &threads, 2, &events);
        assert_eq!(
            super::super::v3_layout(&bytes),
            super::super::V3Layout::Stream
        );
        let kd = super::super::parse(Path::new("x.ktrace"), &bytes).expect("a stream decodes");
        let got: Vec<_> = kd
            .events
            .iter()
            .map(|e| (e.timestamp, e.args, e.debugid))
            .collect();
        let want: Vec<_> = events
            .iter()
            .map(|e| (e.timestamp, e.args, e.debugid))
            .collect();
        assert_eq!(got, want);
        assert_eq!(kd.threads.len(), 2);
        assert_eq!(
            (kd.timebase, kd.walltime),
            ((125, 3), Some((1_764_300_000, 250)))
        );
        assert_eq!(
            kd.skipped.iter().map(|s| s.0).collect::<Vec<_>>(),
            [tags::STACKSHOT]
        );
        // Every cut of it is an error naming an offset inside it.
        for cut in (0..bytes.len()).step_by(61) {
            match super::super::parse(Path::new("x.ktrace"), &bytes[..cut]) {
                Err(crate::error::IngestError::Malformed { offset, .. }) => {
                    assert!(offset <= cut as u64, "cut {cut}: offset {offset}")
                }
                Ok(kd) => assert!(kd.events.len() < events.len(), "cut {cut}"),
                Err(e) => panic!("cut {cut}: {e}"),
            }
        }
    }
}
