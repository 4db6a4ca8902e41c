//! perf.data files (the perf tool's format, file and pipe mode, either byte order,
//! zstd-compressed or not) into the same page profile as live sampling: `perf record -d`
//! and `perf mem record` files.
//!
//! The linux-perf-data crate reads the file: header, attributes, feature sections,
//! compressed records, AUX payloads. Sample bodies are read by rocs's own record
//! parser, which knows the fields the crate skips (WEIGHT, DATA_SRC) and classifies them
//! the way live samples are.

use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use byteorder::{BigEndian, ByteOrder, LittleEndian};
use linux_perf_data::linux_perf_event_reader::{
    AttrFlags, BranchSampleFormat, PerfEventAttr, PerfEventType,
};
use linux_perf_data::{PerfFileReader, PerfFileRecord, UserRecordType};
use serde::Serialize;
use thiserror::Error;

use crate::decode::{DecodeError, Decoded, Decoder, EventKind};
use crate::perf_abi::*;
use crate::plan::SourceRule;
use crate::record::SampleFormat;
use crate::ring::RawRecord;
use rocs_core::PageProfile;

const MAGIC: &[u8; 8] = b"PERFILE2";
/// The magic as a machine of the other byte order writes it.
const MAGIC_SWAPPED: &[u8; 8] = b"2ELIFREP";
const PIPE_HEADER_SIZE: u64 = 16;
/// Offset of the data section's size in a file-mode header.
const DATA_SIZE_OFFSET: u64 = 48;
const TYPE_TRACEPOINT: u32 = 2;

#[derive(Debug, Error)]
pub enum PerfDataError {
    #[error("{path}: cannot read it: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: not a perf.data file (it starts with {found:?}, a perf.data file with \"PERFILE2\"); record one with `perf record -d` or `perf mem record`")]
    NotPerfData { path: PathBuf, found: String },
    #[error("{path}: truncated or damaged: {what} (was `perf record` interrupted? files it could not finish have a zero data size)")]
    Truncated { path: PathBuf, what: String },
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
    /// The event's name where perf wrote one (the EVENT_DESC feature section).
    pub name: Option<String>,
    /// perf_event_attr.type: 0 hardware, 1 software, 2 tracepoint, ... or a PMU's own.
    pub type_: u32,
    pub sample_type: u64,
    pub ids: Vec<u64>,
}

impl FileEvent {
    fn describe(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("an event of type {}", self.type_),
        }
    }
}

/// What the import saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ImportSummary {
    pub pipe_mode: bool,
    pub big_endian: bool,
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

/// The attr's type number (the crate parses it into kinds).
fn type_number(t: &PerfEventType) -> u32 {
    match t {
        PerfEventType::Hardware(..) => TYPE_HARDWARE,
        PerfEventType::Software(_) => TYPE_SOFTWARE,
        PerfEventType::Tracepoint(_) => TYPE_TRACEPOINT,
        PerfEventType::HwCache(..) => 3,
        PerfEventType::Breakpoint(..) => 5,
        PerfEventType::DynamicPmu(type_, ..) => *type_,
    }
}

/// How samples of an event are laid out, from its attr.
fn sample_format(attr: &PerfEventAttr) -> SampleFormat {
    let branch = attr.branch_sample_format;
    SampleFormat {
        sample_type: attr.sample_format.bits(),
        read_format: attr.read_format.bits(),
        regs_user: attr.sample_regs_user.count_ones(),
        regs_intr: attr.sample_regs_intr.count_ones(),
        branch_hw_index: branch.contains(BranchSampleFormat::HW_INDEX),
        branch_counters: branch.bits() & BRANCH_SAMPLE_COUNTERS != 0,
        sample_id_all: attr.flags.contains(AttrFlags::SAMPLE_ID_ALL),
    }
}

/// Read a perf.data file (file or pipe mode) into per-page counts. `pid` keeps only that
/// process's samples. Errors say what is wrong with the file and what to do.
pub fn read_perf_data(
    path: &Path,
    pid: Option<u32>,
    page_shift: u32,
) -> Result<(PageProfile, ImportSummary), PerfDataError> {
    let io = |err| PerfDataError::Io {
        path: path.into(),
        err,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    import(path, std::io::BufReader::new(file), pid, page_shift)
}

/// `read_perf_data` on bytes already in memory (`path` names them in messages).
pub fn parse_perf_data(
    path: &Path,
    bytes: &[u8],
    pid: Option<u32>,
    page_shift: u32,
) -> Result<(PageProfile, ImportSummary), PerfDataError> {
    import(path, Cursor::new(bytes), pid, page_shift)
}

/// What the first bytes of a file say: its byte order and whether it is a pipe.
struct Layout {
    big_endian: bool,
    pipe_mode: bool,
}

/// Check the magic and the header before the crate reads the rest, so that foreign and
/// unfinished files get their own messages.
fn layout<R: Read + Seek>(path: &Path, input: &mut R) -> Result<Layout, PerfDataError> {
    let io = |err| PerfDataError::Io {
        path: path.into(),
        err,
    };
    let mut head = Vec::with_capacity(56);
    input
        .by_ref()
        .take(DATA_SIZE_OFFSET + 8)
        .read_to_end(&mut head)
        .map_err(io)?;
    input.seek(SeekFrom::Start(0)).map_err(io)?;
    let magic = head.get(..8).unwrap_or(&head);
    let big_endian = match magic {
        m if m == MAGIC => false,
        m if m == MAGIC_SWAPPED => true,
        m => {
            return Err(PerfDataError::NotPerfData {
                path: path.into(),
                found: String::from_utf8_lossy(m).into_owned(),
            })
        }
    };
    let u64_at = |off: u64| {
        let b = head.get(off as usize..off as usize + 8)?;
        Some(if big_endian {
            BigEndian::read_u64(b)
        } else {
            LittleEndian::read_u64(b)
        })
    };
    let pipe_mode = u64_at(8) == Some(PIPE_HEADER_SIZE);
    if !pipe_mode && u64_at(DATA_SIZE_OFFSET) == Some(0) {
        return Err(PerfDataError::Truncated {
            path: path.into(),
            what: "the data section is empty (perf record did not finish writing the file)".into(),
        });
    }
    Ok(Layout {
        big_endian,
        pipe_mode,
    })
}

/// A failure of the crate reading the file, in rocs's terms.
fn crate_error(path: &Path, err: linux_perf_data::Error) -> PerfDataError {
    use linux_perf_data::Error as E;
    let what = err.to_string();
    match err {
        E::IoError(_) | E::Read(_) | E::InvalidPerfEventSize | E::SectionSizeTooBig => {
            PerfDataError::Truncated {
                path: path.into(),
                what,
            }
        }
        E::NoAttributes => PerfDataError::Truncated {
            path: path.into(),
            what: "no event descriptions (attributes) in the file".into(),
        },
        _ => PerfDataError::Unsupported {
            path: path.into(),
            what,
        },
    }
}

fn import<R: Read + Seek>(
    path: &Path,
    mut input: R,
    pid: Option<u32>,
    page_shift: u32,
) -> Result<(PageProfile, ImportSummary), PerfDataError> {
    let layout = layout(path, &mut input)?;
    let reader = if layout.pipe_mode {
        PerfFileReader::parse_pipe(input)
    } else {
        PerfFileReader::parse_file(input)
    }
    .map_err(|e| crate_error(path, e))?;
    let mut summary = ImportSummary {
        pipe_mode: layout.pipe_mode,
        big_endian: layout.big_endian,
        ..Default::default()
    };
    let table = if layout.big_endian {
        ingest::<BigEndian, R>(path, reader, pid, page_shift, &mut summary)?
    } else {
        ingest::<LittleEndian, R>(path, reader, pid, page_shift, &mut summary)?
    };
    check_profile(path, table, summary, pid)
}

/// Count every sample of the file into a page table, samples in byte order `O`.
fn ingest<O: ByteOrder, R: Read>(
    path: &Path,
    reader: PerfFileReader<R>,
    pid: Option<u32>,
    page_shift: u32,
    summary: &mut ImportSummary,
) -> Result<PageProfile, PerfDataError> {
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = reader;
    let mut decoder = Decoder::new();
    for desc in perf_file.event_attributes() {
        let event = FileEvent {
            name: desc.name.clone(),
            type_: type_number(&desc.attr.type_),
            sample_type: desc.attr.sample_format.bits(),
            ids: desc.event_ids.clone(),
        };
        if event.sample_type & !SAMPLE_KNOWN != 0 {
            return Err(PerfDataError::Unsupported {
                path: path.into(),
                what: format!(
                    "sample_type {:#x} of {} has fields this reader does not know (a newer perf?)",
                    event.sample_type,
                    event.describe()
                ),
            });
        }
        let source = if event.sample_type & SAMPLE_DATA_SRC != 0 {
            SourceRule::DataSrc
        } else {
            SourceRule::None
        };
        let index = decoder.add_kind(EventKind {
            format: sample_format(&desc.attr),
            source,
            drop_kernel_addresses: false,
        });
        for &id in &event.ids {
            decoder.add_id(id, index);
        }
        summary.events.push(event);
    }
    let damaged = |what: String| PerfDataError::Truncated {
        path: path.into(),
        what,
    };
    let mut table = PageProfile::new(page_shift);
    while let Some(record) = record_iter
        .next_record(&mut perf_file)
        .map_err(|e| crate_error(path, e))?
    {
        let record = match record {
            PerfFileRecord::EventRecord { record, .. } => record,
            PerfFileRecord::UserRecord(user) => {
                if user.record_type == UserRecordType::PERF_AUXTRACE {
                    summary.auxtrace_records += 1;
                }
                continue;
            }
        };
        let type_ = record.record_type.0;
        if type_ == RECORD_SAMPLE {
            summary.sample_records += 1;
        }
        let body = record.data.as_slice();
        let rec = RawRecord {
            type_,
            misc: record.misc,
            body: &body,
        };
        match decoder.decode_in::<O>(rec, pid) {
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
                return Err(damaged(format!(
                    "a sample of event id {id}, which no attribute lists"
                )));
            }
            Err(DecodeError::Truncated(t)) => {
                return Err(damaged(format!(
                    "a sample record ends inside its {} field",
                    t.field
                )));
            }
        }
    }
    Ok(table)
}

/// The profile, or why the file holds none (with what to do).
fn check_profile(
    path: &Path,
    table: PageProfile,
    mut summary: ImportSummary,
    pid: Option<u32>,
) -> Result<(PageProfile, ImportSummary), PerfDataError> {
    // Software and tracepoint events fill DATA_SRC with "not available".
    summary.has_data_source = summary.events.iter().any(|e| {
        e.sample_type & SAMPLE_DATA_SRC != 0
            && e.type_ != TYPE_SOFTWARE
            && e.type_ != TYPE_TRACEPOINT
    });
    if summary
        .events
        .iter()
        .all(|e| e.sample_type & SAMPLE_ADDR == 0)
    {
        let events = summary
            .events
            .iter()
            .map(FileEvent::describe)
            .collect::<Vec<_>>()
            .join(", ");
        if summary.auxtrace_records > 0 {
            return Err(PerfDataError::Unsupported {
                path: path.into(),
                what: "the samples are in an AUX trace (Arm SPE or Intel PT) that rocs does not read from perf.data; on the recording machine turn it into memory samples with `perf inject --itrace=M -i FILE -o samples.data` and import that".into(),
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
