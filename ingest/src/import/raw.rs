//! A directory of tracefs format files plus raw per-CPU ring-buffer files (what
//! `per_cpu/cpuN/trace_pipe_raw` gives), as SchedViz collections store them:
//!
//! ```text
//! DIR/formats/header_page          DIR/formats/events/header_page
//! DIR/formats/SYS/EVENT/format  or DIR/formats/events/SYS/EVENT/format  or DIR/events/...
//! DIR/traces/cpuN                  DIR/cpuN    DIR/per_cpu/cpuN/trace_pipe_raw
//! ```
//!
//! The page size is the end of `header_page`'s `data` field (4096 when absent).

use super::{ImportFormat, ImportSummary, Imported};
use crate::convert::{Converter, Decoded};
use crate::error::IngestError;
use crate::format::{FormatSet, HeaderPage, LoadError};
use crate::merge::{Merge, ThreadTable};
use crate::page::{parse_page, Missed};
use argus_schema::{Cpu, Event, Nanos, ThreadInfo};
use std::path::{Path, PathBuf};

/// Where the format files are: the directory holding `SYS/EVENT/format`, and `header_page`.
struct Formats {
    events: PathBuf,
    header_page: Option<PathBuf>,
}

fn find_formats(dir: &Path) -> Option<Formats> {
    for base in [dir.join("formats"), dir.to_path_buf()] {
        let ev = base.join("events");
        if ev.is_dir() {
            let hp = [ev.join("header_page"), base.join("header_page")]
                .into_iter()
                .find(|p| p.is_file());
            return Some(Formats {
                events: ev,
                header_page: hp,
            });
        }
        if base != dir && base.join("header_page").is_file() {
            return Some(Formats {
                header_page: Some(base.join("header_page")),
                events: base,
            });
        }
    }
    None
}

fn cpu_number(name: &str) -> Option<u32> {
    let n = name.strip_prefix("cpu")?;
    (!n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// The raw per-CPU files, by CPU.
fn cpu_files(dir: &Path) -> Vec<(u32, PathBuf)> {
    let mut out = Vec::new();
    for base in [dir.join("traces"), dir.to_path_buf(), dir.join("per_cpu")] {
        let Ok(rd) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            let Some(cpu) = cpu_number(&e.file_name().to_string_lossy()) else {
                continue;
            };
            let p = e.path();
            if p.is_file() {
                out.push((cpu, p));
            } else if p.join("trace_pipe_raw").is_file() {
                out.push((cpu, p.join("trace_pipe_raw")));
            }
        }
        if !out.is_empty() {
            break;
        }
    }
    out.sort();
    out
}

/// Whether `dir` has format files and raw per-CPU files.
pub(super) fn looks_raw(dir: &Path) -> bool {
    find_formats(dir).is_some() && !cpu_files(dir).is_empty()
}

fn rel(dir: &Path, p: &Path) -> PathBuf {
    p.strip_prefix(dir).unwrap_or(p).to_path_buf()
}

/// Imports a formats + raw pages directory.
pub(super) fn open(dir: &Path) -> Result<Imported, IngestError> {
    let missing = |what: &str| IngestError::Missing {
        file: dir.join(what),
    };
    let found = find_formats(dir).ok_or_else(|| missing("formats/header_page"))?;
    let files = cpu_files(dir);
    if files.is_empty() {
        return Err(missing("traces/cpu0"));
    }
    let mut formats = FormatSet::load_dir(&found.events).map_err(|e| match e {
        LoadError::Io { path, source } => IngestError::Io {
            file: rel(dir, &path),
            source,
        },
        LoadError::Parse { path, source } => IngestError::Format {
            file: rel(dir, &path),
            source,
        },
    })?;
    let mut page_size = 4096;
    if let Some(hp) = &found.header_page {
        let text = std::fs::read_to_string(hp).map_err(|source| IngestError::Io {
            file: rel(dir, hp),
            source,
        })?;
        formats.header_page = HeaderPage::parse(&text).map_err(|source| IngestError::Format {
            file: rel(dir, hp),
            source,
        })?;
        page_size = HeaderPage::page_size_of(&text)
            .filter(|&n| n > formats.header_page.data_offset)
            .unwrap_or(4096);
    }
    let conv = Converter::new(&formats).map_err(|e| IngestError::Format {
        file: rel(dir, &found.events).join(e.event).join("format"),
        source: e.source,
    })?;

    let mut datas = Vec::with_capacity(files.len());
    for (cpu, path) in &files {
        let file = rel(dir, path);
        let data = std::fs::read(path).map_err(|source| IngestError::Io {
            file: file.clone(),
            source,
        })?;
        datas.push((*cpu, file, data));
    }
    let cpus = datas
        .iter()
        .map(|(cpu, file, data)| CpuPages {
            cpu: *cpu,
            file: file.clone(),
            base: 0,
            data,
        })
        .collect();
    let pages = Pages {
        formats: &formats,
        conv,
        page_size,
        ts_offset: 0,
    };
    let (events, threads, errors, summary) = pages.import(cpus, ThreadTable::new())?;
    Ok(Imported {
        path: dir.to_path_buf(),
        format: ImportFormat::RawPages,
        events,
        threads,
        errors,
        summary,
        kallsyms: None,
    })
}

/// One CPU's ring-buffer pages, whole pages back to back.
pub(super) struct CpuPages<'a> {
    /// The CPU.
    pub cpu: u32,
    /// The file errors name.
    pub file: PathBuf,
    /// Offset of `data` in `file`, added to the offsets errors give.
    pub base: u64,
    /// The pages.
    pub data: &'a [u8],
}

/// How to decode the pages of one recording.
pub(super) struct Pages<'a> {
    /// The formats (page header layout and events).
    pub formats: &'a FormatSet,
    /// A converter built from them.
    pub conv: Converter,
    /// Bytes per page.
    pub page_size: usize,
    /// Added to every record's time (trace-cmd's `OFFSET` option).
    pub ts_offset: i64,
}

/// What [`Pages::import`] gives: events in time order, threads, skipped pages, statistics.
type PagesOut = (Vec<Event>, Vec<ThreadInfo>, Vec<IngestError>, ImportSummary);

impl Pages<'_> {
    /// Decodes every CPU's pages, merges them in time order through `table` (seeded with what
    /// the recording knows of its threads) and counts what was lost, unknown or skipped. A
    /// malformed page or record is an error in the list (the rest of that page is skipped);
    /// a CPU whose time goes backwards stops there.
    pub fn import(
        self,
        cpus: Vec<CpuPages<'_>>,
        table: ThreadTable,
    ) -> Result<PagesOut, IngestError> {
        let page_size = self.page_size;
        let mut summary = ImportSummary {
            cpus: cpus.len() as u32,
            ..ImportSummary::default()
        };
        let mut errors = Vec::new();
        let mut streams = Vec::new();
        let mut skipped = crate::convert::Skipped::default();
        for cp in &cpus {
            let (cpu, file) = (cp.cpu, &cp.file);
            if cp.data.len() % page_size != 0 {
                errors.push(IngestError::PartialPage {
                    file: file.clone(),
                    size: cp.data.len() as u64,
                    page_size: page_size as u32,
                });
            }
            let mut conv = self.conv.clone();
            let mut out: Vec<Decoded> = Vec::new();
            let mut last: Option<Nanos> = None;
            for (i, page) in cp.data.chunks_exact(page_size).enumerate() {
                let base = cp.base + (i * page_size) as u64;
                let page_err = |kind, offset: usize| IngestError::Page {
                    file: file.clone(),
                    page: i as u64,
                    offset: base + offset as u64,
                    kind,
                };
                let recs = match parse_page(&self.formats.header_page, page) {
                    Ok(r) => r,
                    Err(e) => {
                        errors.push(page_err(e.kind, e.offset));
                        continue;
                    }
                };
                let header = recs.header();
                let count = match header.missed {
                    Missed::None => None,
                    Missed::Unknown => Some(None),
                    Missed::Count(n) => Some(Some(n)),
                };
                if let Some(n) = count {
                    // Saturating: the counts are the file's word (issue 18).
                    summary.lost = summary.lost.saturating_add(n.unwrap_or(0));
                    // Lost between this CPU's last record and the start of this page.
                    let to = header.ts.saturating_add_signed(self.ts_offset);
                    let from = last.map_or(to, |l| l.0.min(to));
                    summary.lost_ranges.push((cpu, from, to, n));
                }
                for r in recs {
                    let mut r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            errors.push(page_err(e.kind, e.offset));
                            break;
                        }
                    };
                    r.ts = r.ts.saturating_add_signed(self.ts_offset);
                    let ts = Nanos(r.ts);
                    if let Some(prev) = last.filter(|&p| ts < p) {
                        errors.push(IngestError::NotMonotonic {
                            cpu: Cpu(cpu),
                            file: file.clone(),
                            offset: base + r.offset as u64,
                            ts,
                            prev,
                        });
                        break;
                    }
                    last = Some(ts);
                    match conv.convert(Cpu(cpu), &r) {
                        Ok(Some(d)) => out.push(d),
                        Ok(None) => {}
                        Err(e) => {
                            errors.push(page_err(e.kind, e.offset));
                            break;
                        }
                    }
                }
            }
            skipped.merge(&conv.skipped());
            streams.push(out.into_iter().map(Ok::<Decoded, IngestError>));
        }
        for (id, n) in skipped.unknown_ids {
            summary.unknown.insert(format!("#{id}"), n);
        }
        summary.unknown.extend(skipped.ignored);
        let mut merge = Merge::new(streams, table);
        let events = (&mut merge).collect::<Result<Vec<_>, _>>()?;
        summary.start_ns = events.first().map(|e| e.ts);
        summary.end_ns = events.last().map(|e| e.ts);
        let (_, table) = merge.into_parts();
        Ok((events, table.threads(), errors, summary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages flagged with lost-events counts that add up past `u64::MAX` (the count is the
    /// file's word, trace.dat's or a raw directory's): the summary saturates, each page is
    /// still a lost range with its own count, and the records are all kept.
    // See: issue 18 (fuzzing), docs/fuzzing.md.
    #[test]
    fn gh_18_page_lost_counts_saturate() {
        use crate::live::tests::{waking_formats, waking_page};
        let formats = waking_formats();
        let mut data = Vec::new();
        for ts in [1_000u64, 2_000] {
            data.extend(waking_page(ts, Some(u64::MAX), &[(ts, 7)]));
        }
        let pages = Pages {
            formats: &formats,
            conv: Converter::new(&formats).expect("a converter"),
            page_size: 4096,
            ts_offset: 0,
        };
        let cpu = CpuPages {
            cpu: 0,
            file: PathBuf::from("cpu0"),
            base: 0,
            data: &data,
        };
        let (events, _, errors, summary) = pages
            .import(vec![cpu], ThreadTable::new())
            .expect("the pages import");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(events.len(), 2);
        assert_eq!(summary.lost, u64::MAX);
        let counts: Vec<Option<u64>> = summary.lost_ranges.iter().map(|r| r.3).collect();
        assert_eq!(counts, vec![Some(u64::MAX), Some(u64::MAX)]);
    }
}
