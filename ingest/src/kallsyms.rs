//! `/proc/kallsyms` parsing and address → symbol lookup, to name kernel callbacks such as the
//! `function` of `hrtimer_start` (`hrtimer_wakeup`, `tick_nohz_handler`, ...).
//!
//! Lines are `ADDRESS TYPE NAME [MODULE]`. Only text symbols (`t`/`T`, plus weak `w`/`W`)
//! are kept; all-zero addresses (what unprivileged readers see) are dropped.

use std::io::Read;

/// The most `kallsyms.zst` may decompress to: `/proc/kallsyms` of a distribution kernel with
/// its modules is 10–20 MB.
pub const MAX_TEXT: u64 = 128 << 20;

/// A sorted symbol table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kallsyms {
    /// `(address, name)` sorted by address.
    syms: Vec<(u64, String)>,
}

impl Kallsyms {
    /// Parses kallsyms text. Malformed lines are skipped (the file is advisory).
    pub fn parse(text: &str) -> Kallsyms {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut it = line.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let ty = it.next()?;
                let name = it.next()?;
                (addr != 0 && matches!(ty, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
            })
            .collect();
        syms.sort_unstable();
        syms.dedup_by_key(|s| s.0);
        Kallsyms { syms }
    }

    /// Reads a zstd-compressed kallsyms (`kallsyms.zst` of a trace directory). More than
    /// [`MAX_TEXT`] bytes of text is an `InvalidData` error: no kernel's is that large, and
    /// a crafted file must not decompress without bound (issue 18).
    pub fn from_zstd(reader: impl Read) -> std::io::Result<Kallsyms> {
        let mut text = String::new();
        zstd::stream::read::Decoder::new(reader)?
            .take(MAX_TEXT + 1)
            .read_to_string(&mut text)?;
        if text.len() as u64 > MAX_TEXT {
            return Err(crate::inflate::too_large(MAX_TEXT));
        }
        Ok(Kallsyms::parse(&text))
    }

    /// Every `(address, name)`, by address.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &str)> + '_ {
        self.syms.iter().map(|(a, n)| (*a, n.as_str()))
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol containing `addr` (the closest one at or below it) and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        let (a, name) = self.syms.get(i.checked_sub(1)?)?;
        Some((name.as_str(), addr - a))
    }

    /// The name of the function at exactly `addr` (callbacks are function starts).
    pub fn name(&self, addr: u64) -> Option<&str> {
        self.lookup(addr)
            .filter(|(_, off)| *off == 0)
            .map(|(n, _)| n)
    }

    /// `name` or `name+0xoff`, or the hex address when unknown.
    pub fn describe(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some((n, 0)) => n.to_string(),
            Some((n, off)) => format!("{n}+{off:#x}"),
            None => format!("{addr:#x}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `kallsyms.zst` decompressing past [`MAX_TEXT`] is an error, not a read into memory
    /// without end; a real one reads.
    // See: issue 18 (resource limits), docs/fuzzing.md.
    #[test]
    fn gh_18_zstd_bomb_kallsyms_is_refused() {
        let bomb = argus_testkit::zstd_rle_bomb(MAX_TEXT + (1 << 20), b'a');
        let err = Kallsyms::from_zstd(&bomb[..]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            err.to_string(),
            format!("decompresses to more than {MAX_TEXT} bytes: not a file Argus wrote")
        );
        let z = zstd::bulk::compress(b"ffffffff81000000 T _stext\n", 1).unwrap();
        assert_eq!(Kallsyms::from_zstd(&z[..]).unwrap().len(), 1);
    }

    #[test]
    fn lookup_by_address() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81100000 t hrtimer_wakeup\n\
             ffffffff81100100 T tick_nohz_handler\n\
             ffffffff81200000 D some_data\n\
             0000000000000000 T hidden\n\
             garbage\n\
             ffffffffc0000000 t mod_fn\t[kvm]\n",
        );
        assert_eq!(k.len(), 4);
        assert_eq!(k.name(0xffffffff81100000), Some("hrtimer_wakeup"));
        assert_eq!(k.name(0xffffffff81100100), Some("tick_nohz_handler"));
        assert_eq!(k.describe(0xffffffff81100010), "hrtimer_wakeup+0x10");
        assert_eq!(k.name(0xffffffffc0000000), Some("mod_fn"));
        assert_eq!(k.lookup(0x10), None);
        assert_eq!(k.describe(0x10), "0x10");
    }

    #[test]
    fn this_machine_kallsyms() {
        let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
            eprintln!("SKIP: /proc/kallsyms not readable");
            return;
        };
        let k = Kallsyms::parse(&text);
        if k.is_empty() {
            eprintln!("SKIP: /proc/kallsyms addresses are hidden (kptr_restrict)");
            return;
        }
        let addr = text
            .lines()
            .find(|l| l.ends_with(" hrtimer_wakeup"))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok());
        if let Some(a) = addr {
            assert_eq!(k.name(a), Some("hrtimer_wakeup"));
        }
    }
}
