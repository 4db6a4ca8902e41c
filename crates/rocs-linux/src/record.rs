//! Reading perf records in place: the same code parses a live mmap ring and a perf.data
//! file (in the byte order of the machine that wrote it). Nothing here allocates.

use byteorder::{ByteOrder, LittleEndian};

use crate::perf_abi::*;

/// How the samples of one event are laid out, from its perf_event_attr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleFormat {
    pub sample_type: u64,
    pub read_format: u64,
    /// Registers in sample_regs_user / sample_regs_intr (popcount of the masks).
    pub regs_user: u32,
    pub regs_intr: u32,
    /// branch_sample_type has HW_INDEX (an extra u64 per branch stack).
    pub branch_hw_index: bool,
    /// branch_sample_type has COUNTERS (a u64 per branch entry).
    pub branch_counters: bool,
    pub sample_id_all: bool,
}

impl SampleFormat {
    /// The format of an event rocs opened itself (no registers, no branch stacks).
    pub fn simple(sample_type: u64) -> Self {
        SampleFormat {
            sample_type,
            read_format: 0,
            regs_user: 0,
            regs_intr: 0,
            branch_hw_index: false,
            branch_counters: false,
            sample_id_all: true,
        }
    }

    /// Bytes of the `sample_id` trailer of non-sample records (sample_id_all).
    pub fn id_trailer_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        let t = self.sample_type;
        8 * [
            SAMPLE_TID,
            SAMPLE_TIME,
            SAMPLE_ID,
            SAMPLE_STREAM_ID,
            SAMPLE_CPU,
            SAMPLE_IDENTIFIER,
        ]
        .iter()
        .filter(|&&b| t & b != 0)
        .count()
    }

    fn read_len(&self) -> usize {
        let f = self.read_format;
        let times = (f & FORMAT_TOTAL_TIME_ENABLED != 0) as usize
            + (f & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
        let per_value = 1 + (f & FORMAT_ID != 0) as usize + (f & FORMAT_LOST != 0) as usize;
        if f & FORMAT_GROUP != 0 {
            usize::MAX // variable: nr comes first; handled by the parser
        } else {
            8 * (times + per_value)
        }
    }
}

/// The fields of a sample rocs uses. Absent fields are 0 / None.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    pub id: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub addr: Option<u64>,
    pub weight: u64,
    pub data_src: Option<u64>,
    pub phys_addr: Option<u64>,
    pub raw: Option<&'a [u8]>,
}

/// A sample record ended early or had an impossible length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated {
    /// The field being read.
    pub field: &'static str,
}

#[inline(always)]
fn u64_at<O: ByteOrder>(b: &[u8], off: usize, field: &'static str) -> Result<u64, Truncated> {
    match b.get(off..off + 8) {
        Some(s) => Ok(O::read_u64(s)),
        None => Err(Truncated { field }),
    }
}

#[inline(always)]
fn u32_at<O: ByteOrder>(b: &[u8], off: usize, field: &'static str) -> Result<u32, Truncated> {
    match b.get(off..off + 4) {
        Some(s) => Ok(O::read_u32(s)),
        None => Err(Truncated { field }),
    }
}

/// The sample id of a PERF_RECORD_SAMPLE body: IDENTIFIER (first word) or ID (at its
/// place after IP, TID, TIME, ADDR). None when the format has neither.
#[inline]
pub fn sample_id(sample_type: u64, body: &[u8]) -> Option<u64> {
    sample_id_in::<LittleEndian>(sample_type, body)
}

/// `sample_id` of a record in byte order `O`.
#[inline]
pub fn sample_id_in<O: ByteOrder>(sample_type: u64, body: &[u8]) -> Option<u64> {
    if sample_type & SAMPLE_IDENTIFIER != 0 {
        return u64_at::<O>(body, 0, "identifier").ok();
    }
    if sample_type & SAMPLE_ID != 0 {
        let off = 8 * [SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR]
            .iter()
            .filter(|&&b| sample_type & b != 0)
            .count();
        return u64_at::<O>(body, off, "id").ok();
    }
    None
}

/// Parse the body (after the 8-byte header) of a PERF_RECORD_SAMPLE.
#[inline]
pub fn parse_sample<'a>(fmt: &SampleFormat, b: &'a [u8]) -> Result<Sample<'a>, Truncated> {
    parse_sample_in::<LittleEndian>(fmt, b)
}

/// `parse_sample` of a record in byte order `O`: the fields in the kernel's order (see
/// perf_event_open(2), PERF_RECORD_SAMPLE), skipping those rocs does not use.
#[inline]
pub fn parse_sample_in<'a, O: ByteOrder>(
    fmt: &SampleFormat,
    b: &'a [u8],
) -> Result<Sample<'a>, Truncated> {
    let t = fmt.sample_type;
    let mut s = Sample::default();
    let mut o = parse_leading_fields::<O>(t, b, &mut s)?;
    // Fields past this point are rare in rocs's own events: stop early when none is set.
    const LATER: u64 = SAMPLE_READ
        | SAMPLE_CALLCHAIN
        | SAMPLE_RAW
        | SAMPLE_BRANCH_STACK
        | SAMPLE_REGS_USER
        | SAMPLE_STACK_USER
        | SAMPLE_WEIGHT
        | SAMPLE_WEIGHT_STRUCT
        | SAMPLE_DATA_SRC
        | SAMPLE_TRANSACTION
        | SAMPLE_REGS_INTR
        | SAMPLE_PHYS_ADDR;
    if t & LATER != 0 {
        o = skip_variable_blocks::<O>(fmt, b, o, &mut s)?;
        o = parse_memory_fields::<O>(fmt, b, o, &mut s)?;
    }
    if o > b.len() {
        return Err(Truncated { field: "sample" });
    }
    Ok(s)
}

/// IDENTIFIER up to PERIOD: the fixed-size fields every sample starts with. Returns the
/// offset after them.
#[inline(always)]
fn parse_leading_fields<O: ByteOrder>(
    t: u64,
    b: &[u8],
    s: &mut Sample<'_>,
) -> Result<usize, Truncated> {
    let mut o = 0usize;
    if t & SAMPLE_IDENTIFIER != 0 {
        s.id = u64_at::<O>(b, o, "identifier")?;
        o += 8;
    }
    if t & SAMPLE_IP != 0 {
        o += 8;
    }
    if t & SAMPLE_TID != 0 {
        s.pid = u32_at::<O>(b, o, "pid")?;
        s.tid = u32_at::<O>(b, o + 4, "tid")?;
        o += 8;
    }
    if t & SAMPLE_TIME != 0 {
        s.time = u64_at::<O>(b, o, "time")?;
        o += 8;
    }
    if t & SAMPLE_ADDR != 0 {
        s.addr = Some(u64_at::<O>(b, o, "addr")?);
        o += 8;
    }
    if t & SAMPLE_ID != 0 {
        s.id = u64_at::<O>(b, o, "id")?;
        o += 8;
    }
    o += 8 * [SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD]
        .iter()
        .filter(|&&x| t & x != 0)
        .count();
    Ok(o)
}

/// READ up to STACK_USER: blocks whose length is in the record (only RAW is kept). Returns
/// the offset after them.
#[inline(always)]
fn skip_variable_blocks<'a, O: ByteOrder>(
    fmt: &SampleFormat,
    b: &'a [u8],
    mut o: usize,
    s: &mut Sample<'a>,
) -> Result<usize, Truncated> {
    let t = fmt.sample_type;
    if t & SAMPLE_READ != 0 {
        o = skip_read::<O>(fmt, b, o)?;
    }
    if t & SAMPLE_CALLCHAIN != 0 {
        let nr = u64_at::<O>(b, o, "callchain.nr")? as usize;
        o = nr
            .checked_mul(8)
            .and_then(|n| n.checked_add(o + 8))
            .ok_or(Truncated { field: "callchain" })?;
    }
    if t & SAMPLE_RAW != 0 {
        let size = u32_at::<O>(b, o, "raw.size")? as usize;
        let start = o + 4;
        s.raw = Some(
            b.get(start..start + size)
                .ok_or(Truncated { field: "raw" })?,
        );
        // The raw block is padded so that the record stays u64-aligned.
        o = start + size;
        o = (o + 7) & !7;
    }
    if t & SAMPLE_BRANCH_STACK != 0 {
        let nr = u64_at::<O>(b, o, "branch.nr")? as usize;
        o += 8;
        if fmt.branch_hw_index {
            o += 8;
        }
        let per = 24 + if fmt.branch_counters { 8 } else { 0 };
        o = nr
            .checked_mul(per)
            .and_then(|n| n.checked_add(o))
            .ok_or(Truncated {
                field: "branch_stack",
            })?;
    }
    if t & SAMPLE_REGS_USER != 0 {
        let abi = u64_at::<O>(b, o, "regs_user.abi")?;
        o += 8;
        if abi != 0 {
            o += 8 * fmt.regs_user as usize;
        }
    }
    if t & SAMPLE_STACK_USER != 0 {
        let size = u64_at::<O>(b, o, "stack_user.size")? as usize;
        o = size.checked_add(o + 8).ok_or(Truncated {
            field: "stack_user",
        })?;
        if size != 0 {
            o += 8; // dyn_size
        }
    }
    Ok(o)
}

/// The READ block at `o`: its length follows from the read_format, or, for a group, from
/// the number of values it starts with. Returns the offset after it.
#[inline(always)]
fn skip_read<O: ByteOrder>(fmt: &SampleFormat, b: &[u8], o: usize) -> Result<usize, Truncated> {
    let len = fmt.read_len();
    if len != usize::MAX {
        return Ok(o + len);
    }
    let nr = u64_at::<O>(b, o, "read.nr")? as usize;
    let f = fmt.read_format;
    let times = (f & FORMAT_TOTAL_TIME_ENABLED != 0) as usize
        + (f & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
    let per = 1 + (f & FORMAT_ID != 0) as usize + (f & FORMAT_LOST != 0) as usize;
    o.checked_add(8 * (1 + times))
        .and_then(|o| nr.checked_mul(8 * per).and_then(|n| o.checked_add(n)))
        .ok_or(Truncated { field: "read" })
}

/// WEIGHT up to PHYS_ADDR: what the PMU says of the access. Returns the offset after them.
#[inline(always)]
fn parse_memory_fields<O: ByteOrder>(
    fmt: &SampleFormat,
    b: &[u8],
    mut o: usize,
    s: &mut Sample<'_>,
) -> Result<usize, Truncated> {
    let t = fmt.sample_type;
    if t & (SAMPLE_WEIGHT | SAMPLE_WEIGHT_STRUCT) != 0 {
        let w = u64_at::<O>(b, o, "weight")?;
        // WEIGHT_STRUCT: var1 (the latency) is the low 32 bits.
        s.weight = if t & SAMPLE_WEIGHT_STRUCT != 0 {
            w & 0xffff_ffff
        } else {
            w
        };
        o += 8;
    }
    if t & SAMPLE_DATA_SRC != 0 {
        s.data_src = Some(u64_at::<O>(b, o, "data_src")?);
        o += 8;
    }
    if t & SAMPLE_TRANSACTION != 0 {
        o += 8;
    }
    if t & SAMPLE_REGS_INTR != 0 {
        let abi = u64_at::<O>(b, o, "regs_intr.abi")?;
        o += 8;
        if abi != 0 {
            o += 8 * fmt.regs_intr as usize;
        }
    }
    if t & SAMPLE_PHYS_ADDR != 0 {
        s.phys_addr = Some(u64_at::<O>(b, o, "phys_addr")?);
        o += 8;
    }
    Ok(o)
}

/// Write the body of a sample record as the kernel would (for tests and benchmarks).
pub fn encode_sample(sample_type: u64, s: &Sample<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    let p = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    if sample_type & SAMPLE_IDENTIFIER != 0 {
        p(out, s.id);
    }
    if sample_type & SAMPLE_IP != 0 {
        p(out, 0x40_1000);
    }
    if sample_type & SAMPLE_TID != 0 {
        p(out, s.pid as u64 | (s.tid as u64) << 32);
    }
    if sample_type & SAMPLE_TIME != 0 {
        p(out, s.time);
    }
    if sample_type & SAMPLE_ADDR != 0 {
        p(out, s.addr.unwrap_or(0));
    }
    if sample_type & SAMPLE_ID != 0 {
        p(out, s.id);
    }
    if sample_type & SAMPLE_WEIGHT != 0 {
        p(out, s.weight);
    }
    if sample_type & SAMPLE_DATA_SRC != 0 {
        p(out, s.data_src.unwrap_or(0));
    }
    if sample_type & SAMPLE_PHYS_ADDR != 0 {
        p(out, s.phys_addr.unwrap_or(0));
    }
    let size = (out.len() - start) as u16;
    out[start..start + 4].copy_from_slice(&RECORD_SAMPLE.to_le_bytes());
    out[start + 4..start + 6].copy_from_slice(&0u16.to_le_bytes());
    out[start + 6..start + 8].copy_from_slice(&size.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_truncation() {
        let st = SAMPLE_IDENTIFIER
            | SAMPLE_IP
            | SAMPLE_TID
            | SAMPLE_TIME
            | SAMPLE_ADDR
            | SAMPLE_WEIGHT
            | SAMPLE_DATA_SRC
            | SAMPLE_PHYS_ADDR;
        let s = Sample {
            id: 7,
            pid: 10,
            tid: 11,
            time: 99,
            addr: Some(0x7fff_0000_1008),
            weight: 250,
            data_src: Some(0x1234),
            phys_addr: Some(0x1_0000),
            raw: None,
        };
        let mut buf = Vec::new();
        encode_sample(st, &s, &mut buf);
        let fmt = SampleFormat::simple(st);
        assert_eq!(parse_sample(&fmt, &buf[8..]).unwrap(), s);
        assert_eq!(sample_id(st, &buf[8..]), Some(7));
        assert!(parse_sample(&fmt, &buf[8..buf.len() - 4]).is_err());
        let st2 = SAMPLE_TID | SAMPLE_ID | SAMPLE_ADDR;
        let mut buf = Vec::new();
        encode_sample(st2, &s, &mut buf);
        assert_eq!(sample_id(st2, &buf[8..]), Some(7));
    }
}
