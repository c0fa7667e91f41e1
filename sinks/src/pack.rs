//! [`Pack`]: the compact byte form in which a [`crate::CollectionSink`] keeps its sorted runs.
//!
//! A build collects every segment and edge of the graph before writing them sorted: 3M
//! segments of a 17M-event trace were ~490 MB as `(Segment, i64)` (152-byte structs, a heap
//! block for each `syscall_seq`), 3M edges ~150 MB, most of a build's peak memory — and
//! every fresh page of it is zeroed by the kernel on first touch, which on a VM costs more
//! CPU than the rest of the collector. Packed, a segment takes ~30 bytes and an edge ~15.
//!
//! The form: LEB128 varints, signed values zigzag-coded, and fields expressed as
//! differences from what the record or its predecessor in the run already says (a sorted
//! run goes through each thread's segments in order, so ids step by one and start times by
//! a few microseconds):
//!
//! ```text
//!  segment: Δid  tid−id.tid  pid−tid  flags kind [kind fields]  Δstart  end−start
//!           [wait_start−start] wait_state wait_syscall [wait_ret] [wait_object]
//!           on_cpu preemptions yields syscalls events  n syscall_seq[n]
//!  edge:    Δsrc  dst−src  kind·4+strength  Δts  src_syscall
//! ```
//!
//! An edge's `kind` is [`EdgeKind::code`] (the edge-kind table of `argus-schema` keeps the
//! codes below 64, so kind and strength share a byte).
//!
//! Runs are private to the sink and read back only by it; a run that does not decode is a
//! bug of this module (the round-trip tests below cover every variant and extreme value).

use argus_schema::{
    CausalEdge, EdgeKind, EndCause, Nanos, Pid, Segment, SegmentId, SegmentKind, Spin, SpinClass,
    StartCause, Strength, Tid,
};

/// A record the sink can keep as bytes. `unpack` reads exactly what `pack` wrote, given the
/// same sequence of predecessors (`prev` carries what deltas are taken against).
pub trait Pack: Sized {
    /// What a record leaves for the next one of its run (starts at `Default`).
    type Prev: Default;
    /// Appends the record.
    fn pack(&self, prev: &mut Self::Prev, out: &mut Vec<u8>);
    /// Reads one record from the front of `input`; `None` when the bytes end early.
    fn unpack(prev: &mut Self::Prev, input: &mut &[u8]) -> Option<Self>;
}

#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, ((v << 1) ^ (v >> 63)) as u64);
}

#[inline]
pub(crate) fn get_u64(input: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let (&b, rest) = input.split_first()?;
        *input = rest;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[inline]
pub(crate) fn get_i64(input: &mut &[u8]) -> Option<i64> {
    let z = get_u64(input)?;
    Some((z >> 1) as i64 ^ -((z & 1) as i64))
}

#[inline]
fn get_u8(input: &mut &[u8]) -> Option<u8> {
    let (&b, rest) = input.split_first()?;
    *input = rest;
    Some(b)
}

fn get_u32(input: &mut &[u8]) -> Option<u32> {
    u32::try_from(get_u64(input)?).ok()
}

fn get_i32(input: &mut &[u8]) -> Option<i32> {
    i32::try_from(get_i64(input)?).ok()
}

impl Pack for u64 {
    type Prev = u64;
    fn pack(&self, prev: &mut u64, out: &mut Vec<u8>) {
        put_u64(out, self.wrapping_sub(*prev));
        *prev = *self;
    }
    fn unpack(prev: &mut u64, input: &mut &[u8]) -> Option<u64> {
        *prev = prev.wrapping_add(get_u64(input)?);
        Some(*prev)
    }
}

impl Pack for u32 {
    type Prev = ();
    fn pack(&self, _: &mut (), out: &mut Vec<u8>) {
        put_u64(out, u64::from(*self));
    }
    fn unpack(_: &mut (), input: &mut &[u8]) -> Option<u32> {
        get_u32(input)
    }
}

impl Pack for i32 {
    type Prev = ();
    fn pack(&self, _: &mut (), out: &mut Vec<u8>) {
        put_i64(out, i64::from(*self));
    }
    fn unpack(_: &mut (), input: &mut &[u8]) -> Option<i32> {
        get_i32(input)
    }
}

impl Pack for String {
    type Prev = ();
    fn pack(&self, _: &mut (), out: &mut Vec<u8>) {
        put_u64(out, self.len() as u64);
        out.extend_from_slice(self.as_bytes());
    }
    fn unpack(_: &mut (), input: &mut &[u8]) -> Option<String> {
        let n = usize::try_from(get_u64(input)?).ok()?;
        if input.len() < n {
            return None;
        }
        let (s, rest) = input.split_at(n);
        *input = rest;
        String::from_utf8(s.to_vec()).ok()
    }
}

fn start_code(c: StartCause) -> u8 {
    match c {
        StartCause::FirstSeen => 0,
        StartCause::Created => 1,
        StartCause::Woken => 2,
        StartCause::Interrupt => 3,
    }
}

fn start_from(b: u8) -> StartCause {
    match b & 3 {
        0 => StartCause::FirstSeen,
        1 => StartCause::Created,
        2 => StartCause::Woken,
        _ => StartCause::Interrupt,
    }
}

fn end_code(c: EndCause) -> u8 {
    match c {
        EndCause::Open => 0,
        EndCause::Woken => 1,
        EndCause::Exit => 2,
        EndCause::HandlerDone => 3,
    }
}

fn end_from(b: u8) -> EndCause {
    match b & 3 {
        0 => EndCause::Open,
        1 => EndCause::Woken,
        2 => EndCause::Exit,
        _ => EndCause::HandlerDone,
    }
}

const HAS_WAIT_START: u8 = 1 << 4;
const HAS_WAIT_RET: u8 = 1 << 5;
const HAS_WAIT_OBJECT: u8 = 1 << 6;

/// Deltas of a segment run: the previous id and start.
#[derive(Default)]
pub struct SegmentPrev {
    id: u64,
    start: u64,
}

impl Pack for Segment {
    type Prev = SegmentPrev;

    fn pack(&self, prev: &mut SegmentPrev, out: &mut Vec<u8>) {
        put_u64(out, self.id.0.wrapping_sub(prev.id));
        put_i64(out, i64::from(self.tid.0) - i64::from(self.id.tid().0));
        put_i64(out, i64::from(self.pid.0) - i64::from(self.tid.0));
        let mut flags = start_code(self.start) | end_code(self.end) << 2;
        if self.wait_start_ns.is_some() {
            flags |= HAS_WAIT_START;
        }
        if self.wait_ret.is_some() {
            flags |= HAS_WAIT_RET;
        }
        if self.wait_object.is_some() {
            flags |= HAS_WAIT_OBJECT;
        }
        out.push(flags);
        match self.kind {
            SegmentKind::Task => out.push(0),
            SegmentKind::HardIrq { irq } => {
                out.push(1);
                put_i64(out, i64::from(irq));
            }
            SegmentKind::SoftIrq { vec } => {
                out.push(2);
                put_u64(out, u64::from(vec));
            }
            SegmentKind::Timer { timer, function } => {
                out.push(3);
                put_u64(out, timer);
                put_u64(out, function);
            }
            SegmentKind::Interrupt => out.push(4),
            SegmentKind::WorkItem { work, function } => {
                out.push(5);
                put_u64(out, work);
                put_u64(out, function);
            }
        }
        let start = self.start_ns.0;
        put_i64(out, start.wrapping_sub(prev.start) as i64);
        put_u64(out, self.end_ns.0.wrapping_sub(start));
        if let Some(w) = self.wait_start_ns {
            put_u64(out, w.0.wrapping_sub(start));
        }
        out.push(self.wait_state);
        put_i64(out, i64::from(self.wait_syscall));
        if let Some(r) = self.wait_ret {
            put_i64(out, r);
        }
        if let Some(o) = self.wait_object {
            put_u64(out, o);
        }
        put_u64(out, self.on_cpu_ns);
        put_u64(out, u64::from(self.preemptions));
        put_u64(out, u64::from(self.yields));
        put_u64(out, u64::from(self.syscalls));
        put_u64(out, u64::from(self.events));
        put_u64(out, self.syscall_seq.len() as u64);
        for &nr in &self.syscall_seq {
            put_i64(out, i64::from(nr));
        }
        prev.id = self.id.0;
        prev.start = start;
    }

    fn unpack(prev: &mut SegmentPrev, input: &mut &[u8]) -> Option<Segment> {
        let id = SegmentId(prev.id.wrapping_add(get_u64(input)?));
        let tid = i32::try_from(i64::from(id.tid().0) + get_i64(input)?).ok()?;
        let pid = i32::try_from(i64::from(tid) + get_i64(input)?).ok()?;
        let flags = get_u8(input)?;
        let kind = match get_u8(input)? {
            0 => SegmentKind::Task,
            1 => SegmentKind::HardIrq {
                irq: get_i32(input)?,
            },
            2 => SegmentKind::SoftIrq {
                vec: get_u32(input)?,
            },
            3 => SegmentKind::Timer {
                timer: get_u64(input)?,
                function: get_u64(input)?,
            },
            4 => SegmentKind::Interrupt,
            5 => SegmentKind::WorkItem {
                work: get_u64(input)?,
                function: get_u64(input)?,
            },
            _ => return None,
        };
        let start = prev.start.wrapping_add(get_i64(input)? as u64);
        let end = start.wrapping_add(get_u64(input)?);
        let wait_start_ns = if flags & HAS_WAIT_START != 0 {
            Some(Nanos(start.wrapping_add(get_u64(input)?)))
        } else {
            None
        };
        let wait_state = get_u8(input)?;
        let wait_syscall = get_i32(input)?;
        let wait_ret = if flags & HAS_WAIT_RET != 0 {
            Some(get_i64(input)?)
        } else {
            None
        };
        let wait_object = if flags & HAS_WAIT_OBJECT != 0 {
            Some(get_u64(input)?)
        } else {
            None
        };
        let on_cpu_ns = get_u64(input)?;
        let preemptions = get_u32(input)?;
        let yields = get_u32(input)?;
        let syscalls = get_u32(input)?;
        let events = get_u32(input)?;
        let n = usize::try_from(get_u64(input)?).ok()?;
        // Never more than one byte per value: a corrupt length cannot allocate much.
        let mut syscall_seq = Vec::with_capacity(n.min(input.len()));
        for _ in 0..n {
            syscall_seq.push(get_i32(input)?);
        }
        prev.id = id.0;
        prev.start = start;
        Some(Segment {
            id,
            tid: Tid(tid),
            pid: Pid(pid),
            kind,
            start_ns: Nanos(start),
            end_ns: Nanos(end),
            start: start_from(flags),
            end: end_from(flags >> 2),
            wait_start_ns,
            wait_state,
            wait_syscall,
            wait_ret,
            wait_object,
            on_cpu_ns,
            preemptions,
            yields,
            syscalls,
            events,
            syscall_seq,
        })
    }
}

fn strength_code(s: Strength) -> u8 {
    match s {
        Strength::Weak => 0,
        Strength::Boosted => 1,
        Strength::Strong => 2,
    }
}

/// Deltas of an edge run: the previous source and time.
#[derive(Default)]
pub struct EdgePrev {
    src: u64,
    ts: u64,
}

impl Pack for CausalEdge {
    type Prev = EdgePrev;

    fn pack(&self, prev: &mut EdgePrev, out: &mut Vec<u8>) {
        put_u64(out, self.src.0.wrapping_sub(prev.src));
        put_i64(out, self.dst.0.wrapping_sub(self.src.0) as i64);
        out.push(self.kind.code() << 2 | strength_code(self.strength));
        put_i64(out, self.ts.0.wrapping_sub(prev.ts) as i64);
        put_i64(out, i64::from(self.src_syscall));
        prev.src = self.src.0;
        prev.ts = self.ts.0;
    }

    fn unpack(prev: &mut EdgePrev, input: &mut &[u8]) -> Option<CausalEdge> {
        let src = prev.src.wrapping_add(get_u64(input)?);
        let dst = src.wrapping_add(get_i64(input)? as u64);
        let code = get_u8(input)?;
        let kind = EdgeKind::from_code(code >> 2)?;
        let strength = match code & 3 {
            0 => Strength::Weak,
            1 => Strength::Boosted,
            2 => Strength::Strong,
            _ => return None,
        };
        let ts = prev.ts.wrapping_add(get_i64(input)? as u64);
        let src_syscall = get_i32(input)?;
        prev.src = src;
        prev.ts = ts;
        Some(CausalEdge {
            src: SegmentId(src),
            dst: SegmentId(dst),
            kind,
            strength,
            ts: Nanos(ts),
            src_syscall,
        })
    }
}

impl Pack for Spin {
    type Prev = ();

    fn pack(&self, _: &mut (), out: &mut Vec<u8>) {
        put_u64(out, self.segment.0);
        put_u64(out, self.last.0);
        put_i64(out, i64::from(self.tid.0));
        put_i64(out, i64::from(self.pid.0));
        out.push(
            match self.class {
                SpinClass::LongRunning => 0,
                SpinClass::RepeatedYield => 1,
                SpinClass::LongWait => 2,
            } | u8::from(self.open) << 2,
        );
        put_u64(out, self.start_ns.0);
        put_u64(out, self.end_ns.0);
        put_u64(out, self.on_cpu_ns);
        put_u64(out, self.wait_ns);
        put_u64(out, u64::from(self.segments));
        put_i64(out, i64::from(self.wait_syscall));
        put_u64(out, u64::from(self.timeouts));
    }

    fn unpack(_: &mut (), input: &mut &[u8]) -> Option<Spin> {
        let segment = SegmentId(get_u64(input)?);
        let last = SegmentId(get_u64(input)?);
        let tid = Tid(get_i32(input)?);
        let pid = Pid(get_i32(input)?);
        let code = get_u8(input)?;
        let class = match code & 3 {
            0 => SpinClass::LongRunning,
            1 => SpinClass::RepeatedYield,
            2 => SpinClass::LongWait,
            _ => return None,
        };
        Some(Spin {
            segment,
            last,
            tid,
            pid,
            class,
            open: code & 4 != 0,
            start_ns: Nanos(get_u64(input)?),
            end_ns: Nanos(get_u64(input)?),
            on_cpu_ns: get_u64(input)?,
            wait_ns: get_u64(input)?,
            segments: get_u32(input)?,
            wait_syscall: get_i32(input)?,
            timeouts: get_u32(input)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<T: Pack + PartialEq + std::fmt::Debug>(records: &[T]) -> usize {
        let mut out = Vec::new();
        let mut prev = T::Prev::default();
        for r in records {
            r.pack(&mut prev, &mut out);
        }
        let bytes = out.len();
        let mut input = out.as_slice();
        let mut prev = T::Prev::default();
        for r in records {
            assert_eq!(T::unpack(&mut prev, &mut input).as_ref(), Some(r));
        }
        assert!(input.is_empty(), "{} bytes left over", input.len());
        // Cut anywhere, the last record does not decode (no panic, no made-up record).
        for cut in (0..bytes).filter(|_| records.len() <= 100) {
            let mut input = &out[..cut];
            let mut prev = T::Prev::default();
            let n = std::iter::from_fn(|| T::unpack(&mut prev, &mut input)).count();
            assert!(
                n < records.len(),
                "cut at {cut} of {bytes} still gave every record"
            );
        }
        bytes
    }

    fn segment(tid: i32, seq: u32, start: u64) -> Segment {
        Segment::starting(
            SegmentId::new(Tid(tid), seq),
            Pid(tid),
            SegmentKind::Task,
            Nanos(start),
            StartCause::Woken,
        )
    }

    #[test]
    fn varints_round_trip_at_the_extremes() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_u64(&mut out, v);
            assert!(out.len() <= 10);
            assert_eq!(get_u64(&mut out.as_slice()), Some(v));
        }
        for v in [
            0i64,
            -1,
            1,
            -64,
            64,
            i64::from(i32::MIN),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            put_i64(&mut out, v);
            assert_eq!(get_i64(&mut out.as_slice()), Some(v));
        }
        // Eleven continuation bytes are no varint.
        assert_eq!(get_u64(&mut [0xffu8; 11].as_slice()), None);
    }

    #[test]
    fn segments_of_every_kind_and_cause_round_trip_small() {
        let mut run = Vec::new();
        let kinds = [
            SegmentKind::Task,
            SegmentKind::HardIrq { irq: -3 },
            SegmentKind::SoftIrq { vec: u32::MAX },
            SegmentKind::Timer {
                timer: u64::MAX,
                function: 0xffff_ffff_8100_0000,
            },
            SegmentKind::Interrupt,
            SegmentKind::WorkItem {
                work: 0xffff_8880_0000_1000,
                function: 1,
            },
        ];
        let starts = StartCause::ALL;
        let ends = EndCause::ALL;
        for (i, kind) in kinds.iter().enumerate() {
            for (j, start) in starts.iter().enumerate() {
                let mut s = segment(-7 + i as i32, j as u32, 1_700_000_000_000_000_000);
                s.kind = *kind;
                s.start = *start;
                s.end = ends[(i + j) % 4];
                s.pid = Pid(i32::MAX - j as i32);
                s.end_ns = Nanos(s.start_ns.0 - j as u64); // even an end before the start
                s.wait_start_ns = (j % 2 == 0).then_some(Nanos(u64::MAX));
                s.wait_ret = (i % 2 == 0).then_some(i64::MIN + j as i64);
                s.wait_object = (j % 3 != 1).then_some(u64::MAX - j as u64);
                s.wait_state = b'D';
                s.wait_syscall = i32::MIN;
                s.on_cpu_ns = u64::MAX;
                s.preemptions = u32::MAX;
                s.yields = 1;
                s.syscalls = 2;
                s.events = 3;
                s.syscall_seq = vec![0, -1, i32::MAX, i32::MIN, 202];
                run.push(s);
            }
        }
        // A tid that is not the id's (pseudo-threads), and equal ids in a row.
        let mut odd = segment(5, 9, 10);
        odd.tid = Tid(-1);
        run.push(odd.clone());
        run.push(odd);
        roundtrip(&run);

        // A thread's run of ordinary segments packs to a few bytes each.
        let typical: Vec<Segment> = (0..1000u32)
            .map(|k| {
                let mut s = segment(4242, k, 1_700_000_000_000_000_000 + u64::from(k) * 35_000);
                s.end_ns = Nanos(s.start_ns.0 + 30_000);
                s.wait_start_ns = Some(Nanos(s.start_ns.0 + 9_000));
                s.wait_state = b'S';
                s.wait_syscall = 0;
                s.wait_ret = Some(1);
                s.on_cpu_ns = 8_000;
                s.syscalls = 2;
                s.events = 9;
                s.syscall_seq = vec![1, 0];
                s
            })
            .collect();
        let bytes = roundtrip(&typical);
        assert!(bytes < 1000 * 32, "{bytes} bytes for 1000 segments");
    }

    #[test]
    fn edges_of_every_kind_and_strength_round_trip_small() {
        let mut run = Vec::new();
        for (i, kind) in EdgeKind::ALL.iter().enumerate() {
            for (j, strength) in [Strength::Weak, Strength::Boosted, Strength::Strong]
                .iter()
                .enumerate()
            {
                run.push(CausalEdge {
                    src: SegmentId::new(Tid(100 + i as i32), j as u32),
                    dst: SegmentId::new(Tid(-(i as i32)), u32::MAX),
                    kind: *kind,
                    strength: *strength,
                    ts: Nanos(if j == 1 { 0 } else { u64::MAX - i as u64 }),
                    src_syscall: if j == 2 { i32::MIN } else { -1 },
                });
            }
        }
        roundtrip(&run);
        let typical: Vec<CausalEdge> = (0..1000u32)
            .map(|k| CausalEdge {
                src: SegmentId::new(Tid(4242), k),
                dst: SegmentId::new(Tid(4243), k + 1),
                kind: EdgeKind::Message,
                strength: Strength::Strong,
                ts: Nanos(1_700_000_000_000_000_000 + u64::from(k) * 35_000),
                src_syscall: 1,
            })
            .collect();
        let bytes = roundtrip(&typical);
        assert!(bytes < 1000 * 16, "{bytes} bytes for 1000 edges");
    }

    #[test]
    fn spins_and_plain_values_round_trip() {
        let spins: Vec<Spin> = [
            SpinClass::LongRunning,
            SpinClass::RepeatedYield,
            SpinClass::LongWait,
        ]
        .iter()
        .enumerate()
        .map(|(i, class)| Spin {
            segment: SegmentId::new(Tid(9), i as u32),
            last: SegmentId::new(Tid(9), 7),
            tid: Tid(9),
            pid: Pid(-2),
            class: *class,
            start_ns: Nanos(5),
            end_ns: Nanos(u64::MAX),
            open: i == 1,
            on_cpu_ns: 1,
            wait_ns: 0,
            segments: u32::MAX,
            wait_syscall: -1,
            timeouts: u32::MAX - i as u32,
        })
        .collect();
        roundtrip(&spins);
        roundtrip(&[3u64, 1, u64::MAX, 0, 0]);
        roundtrip(&[0u32, u32::MAX, 7]);
        roundtrip(&[i32::MIN, 0, i32::MAX]);
        roundtrip(&["".to_string(), "segments ✓".to_string()]);
    }
}
