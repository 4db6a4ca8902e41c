//! From raw perf records to rocs samples: which event a record came from, its layout,
//! and how its data source reads. Shared by live rings and perf.data files.

use byteorder::{ByteOrder, LittleEndian};
use rocs_core::{DataSource, MemSample};

use crate::datasrc::{classify_data_src, decode_ibs_op_raw};
use crate::perf_abi::*;
use crate::plan::SourceRule;
use crate::record::{parse_sample_in, sample_id_in, SampleFormat, Truncated};
use crate::ring::RawRecord;

/// One kind of event the decoder knows: its layout and how its samples are classified.
#[derive(Clone, Copy, Debug)]
pub struct EventKind {
    pub format: SampleFormat,
    pub source: SourceRule,
    /// Drop samples whose address is in the kernel half (PMUs that cannot exclude the
    /// kernel).
    pub drop_kernel_addresses: bool,
}

/// What one record means for rocs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decoded {
    Sample(MemSample),
    /// A sample rocs cannot place: no data address (or a kernel address), or another
    /// process (a child followed by inherit).
    SampleWithoutAddress,
    SampleOfOtherProcess,
    /// PERF_RECORD_LOST / LOST_SAMPLES: this many samples were dropped.
    Lost(u64),
    Throttle,
    Unthrottle,
    Exit {
        pid: u32,
        tid: u32,
    },
    Fork {
        pid: u32,
        tid: u32,
    },
    Other,
}

/// Why a record could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The sample's id belongs to no known event.
    UnknownId(u64),
    Truncated(Truncated),
}

/// Maps event ids to kinds. With one kind, ids are not needed.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    kinds: Vec<EventKind>,
    /// (id, index into kinds), sorted by id.
    ids: Vec<(u64, u16)>,
}

impl Decoder {
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Register a kind; returns its index.
    pub fn add_kind(&mut self, kind: EventKind) -> usize {
        self.kinds.push(kind);
        self.kinds.len() - 1
    }

    /// Samples carrying `id` belong to kind `index`.
    pub fn add_id(&mut self, id: u64, index: usize) {
        let pos = self.ids.partition_point(|&(i, _)| i < id);
        if self.ids.get(pos).map(|e| e.0) != Some(id) {
            self.ids.insert(pos, (id, index as u16));
        }
    }

    /// Forget sample-type bits the kernel refused after the kinds were registered.
    pub fn strip_sample_bits(&mut self, bits: u64) {
        for k in &mut self.kinds {
            k.format.sample_type &= !bits;
        }
    }

    pub fn kinds(&self) -> &[EventKind] {
        &self.kinds
    }

    #[inline]
    fn kind_of(&self, id: Option<u64>) -> Result<&EventKind, DecodeError> {
        if self.kinds.len() == 1 {
            return Ok(&self.kinds[0]);
        }
        let id = id.ok_or(DecodeError::UnknownId(0))?;
        match self.ids.binary_search_by_key(&id, |&(i, _)| i) {
            Ok(pos) => Ok(&self.kinds[self.ids[pos].1 as usize]),
            Err(_) => Err(DecodeError::UnknownId(id)),
        }
    }

    /// Decode one record. `target` keeps only samples of that process (None: all).
    #[inline]
    pub fn decode(&self, rec: RawRecord<'_>, target: Option<u32>) -> Result<Decoded, DecodeError> {
        self.decode_in::<LittleEndian>(rec, target)
    }

    /// `decode` of a record in byte order `O` (perf.data files of big-endian machines).
    #[inline]
    pub fn decode_in<O: ByteOrder>(
        &self,
        rec: RawRecord<'_>,
        target: Option<u32>,
    ) -> Result<Decoded, DecodeError> {
        match rec.type_ {
            RECORD_SAMPLE => {
                let first = self.kinds.first().ok_or(DecodeError::UnknownId(0))?;
                let id = if self.kinds.len() == 1 {
                    None
                } else {
                    sample_id_in::<O>(first.format.sample_type, rec.body)
                };
                let kind = self.kind_of(id)?;
                let s =
                    parse_sample_in::<O>(&kind.format, rec.body).map_err(DecodeError::Truncated)?;
                if target.is_some_and(|p| p != s.pid) {
                    return Ok(Decoded::SampleOfOtherProcess);
                }
                let (vaddr, paddr, source) = match kind.source {
                    SourceRule::Fixed(src) => (s.addr, s.phys_addr, src),
                    SourceRule::DataSrc => (
                        s.addr,
                        s.phys_addr,
                        s.data_src.map_or(DataSource::Other, classify_data_src),
                    ),
                    SourceRule::None => (s.addr, s.phys_addr, DataSource::Other),
                    SourceRule::IbsRaw(enc) => {
                        match s.raw.and_then(|r| decode_ibs_op_raw(r, enc)) {
                            Some(op) if op.is_load => (op.vaddr, op.paddr, op.source),
                            _ => (None, None, DataSource::Other),
                        }
                    }
                };
                let Some(vaddr) = vaddr else {
                    return Ok(Decoded::SampleWithoutAddress);
                };
                if kind.drop_kernel_addresses && (vaddr >> 63) == 1 {
                    return Ok(Decoded::SampleWithoutAddress);
                }
                Ok(Decoded::Sample(MemSample {
                    pid: s.pid,
                    tid: s.tid,
                    vaddr,
                    paddr: paddr.filter(|&p| p != 0),
                    source,
                    weight: s.weight.min(u32::MAX as u64) as u32,
                    time: s.time,
                }))
            }
            RECORD_LOST => Ok(Decoded::Lost(rec.body.get(8..16).map_or(0, O::read_u64))),
            RECORD_LOST_SAMPLES => Ok(Decoded::Lost(rec.body.get(0..8).map_or(0, O::read_u64))),
            RECORD_THROTTLE => Ok(Decoded::Throttle),
            RECORD_UNTHROTTLE => Ok(Decoded::Unthrottle),
            RECORD_EXIT | RECORD_FORK => {
                let b = rec.body;
                if b.len() < 16 {
                    return Ok(Decoded::Other);
                }
                let pid = O::read_u32(&b[0..4]);
                let tid = O::read_u32(&b[8..12]);
                Ok(if rec.type_ == RECORD_EXIT {
                    Decoded::Exit { pid, tid }
                } else {
                    Decoded::Fork { pid, tid }
                })
            }
            _ => Ok(Decoded::Other),
        }
    }
}
