//! Inputs that carry several files: `count - 1` sections each preceded by its length (`u32`
//! LE, cut to the bytes left), then the last section, which runs to the end. Mutations that
//! break a length still give sections (shorter or empty ones), never an unusable input.

/// The files of a snapshot, in the order of the snapshot target's sections.
pub const SNAPSHOT_FILES: [&str; 8] = [
    "manifest.json",
    "events.parquet",
    "segments.parquet",
    "edges.parquet",
    "spins.parquet",
    "threads.parquet",
    "errors.parquet",
    "stacks.parquet",
];

/// Splits `data` into exactly `count` sections (missing ones are empty).
pub fn split(mut data: &[u8], count: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(count);
    for _ in 1..count {
        let (len, rest) = match data.split_first_chunk::<4>() {
            Some((len, rest)) => (u32::from_le_bytes(*len) as usize, rest),
            None => (0, &data[data.len()..]),
        };
        let (section, rest) = rest.split_at(len.min(rest.len()));
        out.push(section);
        data = rest;
    }
    out.push(data);
    out
}

/// The inverse of [`split`]: what the seeds generator writes.
pub fn join(sections: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some((last, init)) = sections.split_last() {
        for s in init {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
        out.extend_from_slice(last);
    }
    out
}

/// Format files as one section: entries `SYS/EVENT\n<format text>` separated by NUL bytes.
pub fn parse_format_entries(section: &[u8]) -> Vec<(String, String)> {
    section
        .split(|&b| b == 0)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (path, body) = text.split_once('\n').unwrap_or((&text, ""));
            (path.to_string(), body.to_string())
        })
        .collect()
}

/// The inverse of [`parse_format_entries`].
pub fn format_entries<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, text) in entries {
        if !out.is_empty() {
            out.push(0);
        }
        out.extend_from_slice(path.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(text.as_bytes());
    }
    out
}
