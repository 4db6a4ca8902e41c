//! A reader of perf.data files (the perf tool's format, file and pipe mode) that feeds
//! the same page profile as live sampling: `perf record -d` and `perf mem record` files.
//!
//! Layout (tools/perf/Documentation/perf.data-file-format.txt): a header with the magic
//! "PERFILE2", the attribute section (each perf_event_attr followed by a section of its
//! sample ids) and the data section of records. In pipe mode the header is 16 bytes and
//! the attributes arrive as PERF_RECORD_HEADER_ATTR records in the stream.

use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::abi::*;
use crate::decode::{DecodeError, Decoded, Decoder, EventKind};
use crate::plan::SourceRule;
use crate::record::SampleFormat;
use crate::ring::RawRecord;
use rocs_core::PageProfile;

const MAGIC: &[u8; 8] = b"PERFILE2";
const MAGIC_SWAPPED: &[u8; 8] = b"2ELIFREP";
const FILE_HEADER_SIZE: u64 = 104;
const PIPE_HEADER_SIZE: u64 = 16;
const RECORD_HEADER_TRACING_DATA: u32 = 66;

#[derive(Debug, Error)]
pub enum PerfDataError {
    #[error("{path}: cannot read it: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: not a perf.data file (it starts with {found:?}, a perf.data file with \"PERFILE2\"); record one with `perf record -d` or `perf mem record`")]
    NotPerfData { path: PathBuf, found: String },
    #[error("{path}: a big-endian perf.data file; rocs reads little-endian files only (convert it on the machine that wrote it with `perf inject`)")]
    BigEndian { path: PathBuf },
    #[error("{path}: truncated or damaged at byte {offset}: {what} (was `perf record` interrupted? files it could not finish have a zero data size)")]
    Truncated {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{path}: compressed records (perf record -z); write an uncompressed copy with `perf inject -i {path} -o plain.data`")]
    Compressed { path: PathBuf },
    #[error("{path}: the samples carry no data addresses (sample_type of {events} lacks ADDR); record with `perf record -d` or `perf mem record`")]
    NoAddresses { path: PathBuf, events: String },
    #[error("{path}: no samples{filter}; {hint}")]
    NoSamples {
        path: PathBuf,
        filter: String,
        hint: String,
    },
    #[error("{path}: {what}")]
    Unsupported { path: PathBuf, what: String },
}

/// One perf_event_attr of the file.
#[derive(Clone, Debug, Serialize)]
pub struct FileEvent {
    pub type_: u32,
    pub config: u64,
    pub sample_type: u64,
    pub ids: Vec<u64>,
}

/// What the import saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ImportSummary {
    pub pipe_mode: bool,
    pub events: Vec<FileEvent>,
    /// Sample records in the file (all processes).
    pub sample_records: u64,
    /// Samples counted into the profile.
    pub imported: u64,
    /// Samples without a data address (address 0).
    pub without_address: u64,
    /// Samples of other processes than the --pid filter.
    pub other_processes: u64,
    /// PERF_RECORD_LOST totals.
    pub lost: u64,
    /// True when a hardware event of the file samples DATA_SRC (software events fill it
    /// with "not available").
    pub has_data_source: bool,
    pub auxtrace_records: u64,
}

fn u64_at(b: &[u8], off: u64) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    b.get(off..off.checked_add(8)?)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

fn u32_at(b: &[u8], off: u64) -> Option<u32> {
    let off = usize::try_from(off).ok()?;
    b.get(off..off.checked_add(4)?)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
}

/// Parse a perf_event_attr at the start of `a` (its own `size` says how long it is).
fn parse_attr(a: &[u8]) -> Option<(FileEvent, SampleFormat)> {
    let type_ = u32_at(a, 0)?;
    let config = u64_at(a, 8)?;
    let sample_type = u64_at(a, 24)?;
    let read_format = u64_at(a, 32)?;
    let flags = u64_at(a, 40)?;
    let branch_sample_type = u64_at(a, 72).unwrap_or(0);
    let regs_user = u64_at(a, 80).unwrap_or(0);
    let regs_intr = u64_at(a, 96).unwrap_or(0);
    Some((
        FileEvent {
            type_,
            config,
            sample_type,
            ids: Vec::new(),
        },
        SampleFormat {
            sample_type,
            read_format,
            regs_user: regs_user.count_ones(),
            regs_intr: regs_intr.count_ones(),
            branch_hw_index: branch_sample_type & BRANCH_SAMPLE_HW_INDEX != 0,
            branch_counters: branch_sample_type & BRANCH_SAMPLE_COUNTERS != 0,
            sample_id_all: flags & ATTR_FLAG_SAMPLE_ID_ALL != 0,
        },
    ))
}

struct Reader<'a> {
    path: &'a Path,
    decoder: Decoder,
    formats: Vec<(FileEvent, SampleFormat)>,
}

impl Reader<'_> {
    fn truncated(&self, offset: u64, what: impl Into<String>) -> PerfDataError {
        PerfDataError::Truncated {
            path: self.path.into(),
            offset,
            what: what.into(),
        }
    }

    fn add_event(&mut self, event: FileEvent, format: SampleFormat) -> Result<(), PerfDataError> {
        if event.sample_type & !SAMPLE_KNOWN != 0 {
            return Err(PerfDataError::Unsupported {
                path: self.path.into(),
                what: format!(
                    "sample_type {:#x} has fields this reader does not know (a newer perf?)",
                    event.sample_type
                ),
            });
        }
        let source = if event.sample_type & SAMPLE_DATA_SRC != 0 {
            SourceRule::DataSrc
        } else {
            SourceRule::None
        };
        let index = self.decoder.add_kind(EventKind {
            format,
            source,
            drop_kernel_addresses: false,
        });
        for &id in &event.ids {
            self.decoder.add_id(id, index);
        }
        self.formats.push((event, format));
        Ok(())
    }
}

/// Read a perf.data file (file or pipe mode) into per-page counts. `pid` keeps only that
/// process's samples. Errors say what is wrong with the file and what to do.
pub fn read_perf_data(
    path: &Path,
    pid: Option<u32>,
    page_shift: u32,
) -> Result<(PageProfile, ImportSummary), PerfDataError> {
    let bytes = std::fs::read(path).map_err(|err| PerfDataError::Io {
        path: path.into(),
        err,
    })?;
    parse_perf_data(path, &bytes, pid, page_shift)
}

/// `read_perf_data` on bytes already in memory (`path` names them in messages).
pub fn parse_perf_data(
    path: &Path,
    bytes: &[u8],
    pid: Option<u32>,
    page_shift: u32,
) -> Result<(PageProfile, ImportSummary), PerfDataError> {
    let magic = bytes.get(..8).unwrap_or(bytes);
    if magic == MAGIC_SWAPPED {
        return Err(PerfDataError::BigEndian { path: path.into() });
    }
    if magic != MAGIC {
        return Err(PerfDataError::NotPerfData {
            path: path.into(),
            found: String::from_utf8_lossy(magic).into_owned(),
        });
    }
    let mut r = Reader {
        path,
        decoder: Decoder::new(),
        formats: Vec::new(),
    };
    let header_size = u64_at(bytes, 8).ok_or_else(|| r.truncated(8, "the header ends early"))?;
    let mut summary = ImportSummary::default();
    let (data_start, data_end) = match header_size {
        PIPE_HEADER_SIZE => {
            summary.pipe_mode = true;
            (PIPE_HEADER_SIZE, bytes.len() as u64)
        }
        FILE_HEADER_SIZE => {
            let field = |off: u64| {
                u64_at(bytes, off).ok_or_else(|| r.truncated(off, "the header ends early"))
            };
            let attr_size = field(16)?;
            let (attrs_off, attrs_size) = (field(24)?, field(32)?);
            let (data_off, data_size) = (field(40)?, field(48)?);
            if attr_size < 16 + 64 || attrs_size % attr_size != 0 {
                return Err(r.truncated(
                    16,
                    format!("attribute entries of {attr_size} bytes in a section of {attrs_size}"),
                ));
            }
            let end = attrs_off
                .checked_add(attrs_size)
                .filter(|&e| e <= bytes.len() as u64);
            if end.is_none() {
                return Err(r.truncated(attrs_off, format!("the attribute section ({attrs_size} bytes at {attrs_off}) runs past the end of the file ({} bytes)", bytes.len())));
            }
            for i in 0..attrs_size / attr_size {
                let at = attrs_off + i * attr_size;
                let entry = &bytes[at as usize..(at + attr_size) as usize];
                let (mut event, format) =
                    parse_attr(entry).ok_or_else(|| r.truncated(at, "a short perf_event_attr"))?;
                let ids_off = u64_at(entry, attr_size - 16).unwrap_or(0);
                let ids_size = u64_at(entry, attr_size - 8).unwrap_or(0);
                if ids_off
                    .checked_add(ids_size)
                    .is_none_or(|e| e > bytes.len() as u64)
                {
                    return Err(r.truncated(
                        ids_off,
                        "the id list of an event runs past the end of the file",
                    ));
                }
                for k in 0..ids_size / 8 {
                    event
                        .ids
                        .push(u64_at(bytes, ids_off + 8 * k).expect("checked above"));
                }
                r.add_event(event, format)?;
            }
            if data_size == 0 {
                return Err(r.truncated(
                    48,
                    "the data section is empty (perf record did not finish writing the file)",
                ));
            }
            let end = data_off
                .checked_add(data_size)
                .filter(|&e| e <= bytes.len() as u64)
                .ok_or_else(|| {
                    r.truncated(
                        bytes.len() as u64,
                        format!(
                            "the data section should end at byte {} but the file has {} bytes",
                            data_off.saturating_add(data_size),
                            bytes.len()
                        ),
                    )
                })?;
            (data_off, end)
        }
        other => {
            return Err(r.truncated(
                8,
                format!("header size {other} is neither a file (104) nor a pipe (16) header"),
            ));
        }
    };

    let mut table = PageProfile::new(page_shift);
    let mut pos = data_start;
    while pos < data_end {
        if data_end - pos < 8 {
            return Err(r.truncated(pos, "a record header is cut off"));
        }
        let type_ = u32_at(bytes, pos).expect("in range");
        let misc = u32_at(bytes, pos + 4).expect("in range") as u16;
        let size = (u32_at(bytes, pos + 4).expect("in range") >> 16) as u64;
        if size < 8 || pos + size > data_end {
            return Err(r.truncated(pos, format!("a record of type {type_} claims {size} bytes")));
        }
        let body = &bytes[(pos + 8) as usize..(pos + size) as usize];
        let mut skip_after = 0u64;
        match type_ {
            RECORD_HEADER_ATTR => {
                let attr_len = u32_at(body, 4).unwrap_or(0) as usize;
                if attr_len < 64 || attr_len > body.len() {
                    return Err(r.truncated(pos, "a HEADER_ATTR record with a bad attr size"));
                }
                let (mut event, format) = parse_attr(&body[..attr_len])
                    .ok_or_else(|| r.truncated(pos, "a short attr"))?;
                event.ids = body[attr_len..]
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
                    .collect();
                r.add_event(event, format)?;
            }
            RECORD_COMPRESSED | RECORD_COMPRESSED2 => {
                return Err(PerfDataError::Compressed { path: path.into() });
            }
            RECORD_AUXTRACE => {
                summary.auxtrace_records += 1;
                skip_after = u64_at(body, 0).unwrap_or(0);
            }
            RECORD_HEADER_TRACING_DATA => {
                skip_after = (u32_at(body, 0).unwrap_or(0) as u64 + 7) & !7;
            }
            t if t >= 64 => {}
            _ => {
                if type_ == RECORD_SAMPLE {
                    summary.sample_records += 1;
                    if r.formats.is_empty() {
                        return Err(r.truncated(pos, "a sample before any event description"));
                    }
                }
                let rec = RawRecord { type_, misc, body };
                match r.decoder.decode(rec, pid) {
                    Ok(Decoded::Sample(s)) => {
                        if s.vaddr == 0 {
                            summary.without_address += 1;
                        } else {
                            table.record(s.vaddr, s.source);
                            summary.imported += 1;
                        }
                    }
                    Ok(Decoded::SampleWithoutAddress) => summary.without_address += 1,
                    Ok(Decoded::SampleOfOtherProcess) => summary.other_processes += 1,
                    Ok(Decoded::Lost(n)) => summary.lost += n,
                    Ok(_) => {}
                    Err(DecodeError::UnknownId(id)) => {
                        return Err(r.truncated(
                            pos,
                            format!("a sample of event id {id}, which no attribute lists"),
                        ));
                    }
                    Err(DecodeError::Truncated(t)) => {
                        return Err(r.truncated(
                            pos,
                            format!("a sample record ends inside its {} field", t.field),
                        ));
                    }
                }
            }
        }
        pos += size;
        if skip_after > 0 {
            pos = pos
                .checked_add(skip_after)
                .filter(|&p| p <= data_end)
                .ok_or_else(|| r.truncated(pos, "an AUX/tracing payload runs past the end"))?;
        }
    }
    summary.events = r.formats.iter().map(|(e, _)| e.clone()).collect();
    // Software and tracepoint events fill DATA_SRC with "not available".
    summary.has_data_source = summary
        .events
        .iter()
        .any(|e| e.sample_type & SAMPLE_DATA_SRC != 0 && e.type_ != TYPE_SOFTWARE && e.type_ != 2);
    if summary.events.is_empty() {
        return Err(r.truncated(data_start, "no event descriptions (attributes) in the file"));
    }
    if summary
        .events
        .iter()
        .all(|e| e.sample_type & SAMPLE_ADDR == 0)
    {
        let events = summary
            .events
            .iter()
            .map(|e| format!("type {} config {:#x}", e.type_, e.config))
            .collect::<Vec<_>>()
            .join(", ");
        if summary.auxtrace_records > 0 {
            return Err(PerfDataError::Unsupported {
                path: path.into(),
                what: "the samples are in an AUX trace (Arm SPE or Intel PT) that rocs does not decode; on the recording machine run `perf inject --itrace=i1i -i FILE -o samples.data` and import that".into(),
            });
        }
        return Err(PerfDataError::NoAddresses {
            path: path.into(),
            events,
        });
    }
    if table.is_empty() {
        let filter = pid.map(|p| format!(" of pid {p}")).unwrap_or_default();
        let hint = if summary.other_processes > 0 {
            format!("{} samples belong to other processes: check --pid (`perf script -F pid | sort -u`)", summary.other_processes)
        } else if summary.without_address > 0 {
            format!("{} samples have no data address", summary.without_address)
        } else {
            "the recorded program made no sampled accesses; record longer or a busier program"
                .into()
        };
        return Err(PerfDataError::NoSamples {
            path: path.into(),
            filter,
            hint,
        });
    }
    Ok((table, summary))
}
