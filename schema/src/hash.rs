//! FNV-1a (64-bit), the one stable hash of the project: ids derived from names (a dispatch
//! callout's `function`, a callback printed by name in others' traces) and digests that must
//! not change between runs or builds (unlike `std`'s randomly seeded hashers).
//!
//! ```
//! assert_eq!(argus_schema::hash::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
//! assert_eq!(argus_schema::hash::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
//! ```

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    Fnv1a::new().update(bytes).finish()
}

/// FNV-1a fed in pieces.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(OFFSET)
    }
}

impl Fnv1a {
    /// The hash of nothing.
    pub fn new() -> Fnv1a {
        Fnv1a::default()
    }

    /// Feeds `bytes`.
    pub fn update(mut self, bytes: &[u8]) -> Fnv1a {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
        }
        self
    }

    /// The hash so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_hash_as_the_whole() {
        let whole = fnv1a(b"argus:dispatch-begin");
        let parts = Fnv1a::new()
            .update(b"argus:")
            .update(b"dispatch-begin")
            .finish();
        assert_eq!(whole, parts);
        // The published test vector for "foobar".
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
