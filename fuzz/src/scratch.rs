//! A scratch directory per fuzzing process, for the readers that take a path. Under
//! `$ARGUS_FUZZ_SCRATCH` (`scripts/fuzz` points it at `/dev/shm` when it can, and removes
//! what is left after each run), else the system temporary directory.

use std::path::{Path, PathBuf};

/// `BASE/argus-fuzz-NAME-PID`, emptied by [`Scratch::reset`] before each input.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// The scratch directory of target `name` in this process (created empty).
    pub fn new(name: &str) -> Scratch {
        let base = std::env::var_os("ARGUS_FUZZ_SCRATCH")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("argus-fuzz-{name}-{}", std::process::id()));
        let s = Scratch { dir };
        s.reset();
        s
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Empties the directory.
    pub fn reset(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("invariant: the scratch base is writable");
    }

    /// Writes `bytes` to `rel` (parents created) and returns the path.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("invariant: the scratch base is writable");
        }
        std::fs::write(&path, bytes).expect("invariant: the scratch base is writable");
        path
    }
}
