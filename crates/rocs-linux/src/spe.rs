//! Arm Statistical Profiling Extension records, as the `arm_spe` PMU writes them into its
//! AUX buffer: a stream of packets, each record closed by an End or a Timestamp packet.
//!
//! The packet format is architectural (Arm ARM, "Statistical Profiling Extension",
//! chapter D10): a one-byte header, or a two-byte extended one, whose bits 5:4 give the
//! payload size (1 << n bytes) and whose low bits give the packet's index. rocs keeps
//! what it ranks pages by: the data address of loads, and whether the load reached the
//! last-level cache and missed it (the architected LLC access, LLC miss and remote
//! access events), which unlike the data source packet do not depend on the CPU model.

use rocs_core::DataSource;

// Header bytes and masks.
const PAD: u8 = 0x00;
const END: u8 = 0x01;
const TIMESTAMP: u8 = 0x71;
/// Events and data source: bits 7:6 and 3:0 fixed, 5:4 the size.
const MASK_EVENTS_SOURCE: u8 = 0xcf;
const EVENTS: u8 = 0x42;
const SOURCE: u8 = 0x43;
/// Context and operation type: bits 7:2 fixed, 1:0 the index or class.
const MASK_CONTEXT_OP: u8 = 0xfc;
const CONTEXT: u8 = 0x64;
const OP_TYPE: u8 = 0x48;
/// An extended header: 0b001000xx, then a second header byte.
const EXTENDED: u8 = 0x20;
/// Address and counter: bits 7:3 fixed, 2:0 the index.
const MASK_ADDRESS_COUNTER: u8 = 0xf8;
const ADDRESS: u8 = 0xb0;
const COUNTER: u8 = 0x98;

// Address packet indexes.
const ADDR_DATA_VIRTUAL: u8 = 2;
const ADDR_DATA_PHYSICAL: u8 = 3;
// Counter packet index of the total latency.
const COUNTER_TOTAL_LATENCY: u8 = 0;
// Operation type class of loads, stores and atomics; payload bit 0 set for a store.
const OP_CLASS_LOAD_STORE: u8 = 1;

// Bits of the events packet.
const EVENT_LLC_ACCESS: u64 = 1 << 8;
const EVENT_LLC_MISS: u64 = 1 << 9;
const EVENT_REMOTE_ACCESS: u64 = 1 << 10;

/// What an SPE record sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpeOp {
    Load,
    Store,
    /// A branch or another operation.
    #[default]
    Other,
}

/// One sampled operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeRecord {
    pub op: SpeOp,
    /// The data's virtual address (tag byte removed; kernel addresses sign-extended).
    pub vaddr: Option<u64>,
    pub paddr: Option<u64>,
    /// CONTEXTIDR_EL1: the pid of the sampled task where the kernel writes it there.
    pub context: Option<u32>,
    /// The events packet (bit 8 LLC access, 9 LLC miss, 10 remote access, ...).
    pub events: u64,
    /// Cycles from dispatch to completion.
    pub total_latency: Option<u16>,
    pub timestamp: Option<u64>,
}

impl SpeRecord {
    /// The load's source for ranking pages: a miss when it missed the LLC or went to
    /// another socket, a hit when it reached the LLC and hit; stores and loads served
    /// above the LLC are `Other`.
    pub fn source(&self) -> DataSource {
        if self.op != SpeOp::Load {
            DataSource::Other
        } else if self.events & (EVENT_LLC_MISS | EVENT_REMOTE_ACCESS) != 0 {
            DataSource::LlcMiss
        } else if self.events & EVENT_LLC_ACCESS != 0 {
            DataSource::LlcHit
        } else {
            DataSource::Other
        }
    }
}

/// What one pass over a buffer found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeStats {
    pub records: u64,
    /// Bytes that were no valid packet (skipped one at a time until a header fits).
    pub bad_bytes: u64,
    /// Bytes of a packet cut off at the end of the buffer.
    pub cut_bytes: u64,
}

fn le(payload: &[u8]) -> u64 {
    payload
        .iter()
        .rev()
        .fold(0u64, |acc, &b| acc << 8 | u64::from(b))
}

/// The virtual address of a data address packet's payload: bits 55:0, with the top byte
/// (a pointer tag) dropped, or set when bits 55:48 are all ones (a kernel address).
fn virtual_address(payload: u64) -> u64 {
    let low = payload & ((1 << 56) - 1);
    if low >> 48 == 0xff {
        low | 0xff << 56
    } else {
        low
    }
}

/// Decode every complete record in `buf` (an AUX buffer's bytes from a record
/// boundary) and hand each to `f`.
pub fn decode_records(buf: &[u8], mut f: impl FnMut(&SpeRecord)) -> SpeStats {
    let mut stats = SpeStats::default();
    let mut record = SpeRecord::default();
    let mut pos = 0;
    while pos < buf.len() {
        let h0 = buf[pos];
        // The header that says the type (the second byte of an extended header), the
        // index bits from the first byte, and where the payload starts.
        let (header, index_high, start) = if h0 & MASK_CONTEXT_OP == EXTENDED {
            let Some(&h1) = buf.get(pos + 1) else {
                stats.cut_bytes += 1;
                break;
            };
            if h1 == 0 {
                // Alignment: padding up to the next multiple of 2 << (h0 & 0xf).
                let align = 2usize << (h0 & 0xf);
                pos = (pos / align + 1) * align;
                continue;
            }
            (h1, (h0 & 0x3) << 3, pos + 2)
        } else {
            (h0, 0, pos + 1)
        };
        let size = match header {
            PAD | END => 0,
            _ => 1usize << (header >> 4 & 0x3),
        };
        let Some(payload) = buf.get(start..start + size) else {
            stats.cut_bytes += (buf.len() - pos) as u64;
            break;
        };
        let value = le(payload);
        let index = index_high | header & 0x7;
        match header {
            PAD => {}
            END | TIMESTAMP => {
                if header == TIMESTAMP {
                    record.timestamp = Some(value);
                }
                f(&record);
                stats.records += 1;
                record = SpeRecord::default();
            }
            h if h & MASK_EVENTS_SOURCE == EVENTS => record.events = value,
            h if h & MASK_EVENTS_SOURCE == SOURCE => {}
            h if h & MASK_CONTEXT_OP == CONTEXT => record.context = Some(value as u32),
            h if h & MASK_CONTEXT_OP == OP_TYPE => {
                record.op = match (h & 0x3, value & 1) {
                    (OP_CLASS_LOAD_STORE, 0) => SpeOp::Load,
                    (OP_CLASS_LOAD_STORE, _) => SpeOp::Store,
                    _ => SpeOp::Other,
                }
            }
            h if h & MASK_ADDRESS_COUNTER == ADDRESS => match index {
                ADDR_DATA_VIRTUAL => record.vaddr = Some(virtual_address(value)),
                ADDR_DATA_PHYSICAL => record.paddr = Some(value & ((1 << 56) - 1)),
                _ => {}
            },
            h if h & MASK_ADDRESS_COUNTER == COUNTER => {
                if index == COUNTER_TOTAL_LATENCY {
                    record.total_latency = Some(value as u16);
                }
            }
            _ => {
                stats.bad_bytes += 1;
                pos += 1;
                continue;
            }
        }
        pos = start + size;
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load record as SPE writes it (Arm ARM D10, "Statistical Profiling Extension
    /// packets"; the same encodings as the kernel tree's
    /// tools/perf/util/arm-spe-decoder/arm-spe-pkt-decoder.h).
    fn load_record(events: u16, vaddr: u64, end: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        // Address packet, index 0 (PC): header 0b10110_000, 8-byte payload; EL0 code.
        r.push(0xb0);
        r.extend_from_slice(&0x0000_aaaa_0000_1234u64.to_le_bytes());
        // Counter packet, index 0 (total latency): header 0b10011_000, 2 bytes.
        r.push(0x98);
        r.extend_from_slice(&57u16.to_le_bytes());
        // Context packet: header 0b011001_00, 4 bytes of CONTEXTIDR_EL1.
        r.push(0x64);
        r.extend_from_slice(&4242u32.to_le_bytes());
        // Operation type packet, class 1 (load/store/atomic): header 0b010010_01;
        // payload 0x00 = a general-purpose load.
        r.extend_from_slice(&[0x49, 0x00]);
        // Events packet with a 2-byte payload: header 0b01_01_0010.
        r.push(0x52);
        r.extend_from_slice(&events.to_le_bytes());
        // Address packet, index 2 (data virtual address), with a pointer tag 0x5a in
        // the top byte.
        r.push(0xb2);
        r.extend_from_slice(&(0x5a << 56 | vaddr).to_le_bytes());
        // Address packet, index 3 (data physical address), NS bit 63 set.
        r.push(0xb3);
        r.extend_from_slice(&(1u64 << 63 | 0x8_8000_1000).to_le_bytes());
        r.extend_from_slice(end);
        r
    }

    // Events packet bits: 1 retired, 2 L1D access, 3 L1D refill, 8 LLC access,
    // 9 LLC miss, 10 remote access.
    const RETIRED_L1_HIT: u16 = 1 << 1 | 1 << 2;
    const LLC_HIT: u16 = RETIRED_L1_HIT | 1 << 3 | 1 << 8;
    const LLC_MISS: u16 = LLC_HIT | 1 << 9;
    const REMOTE: u16 = LLC_HIT | 1 << 10;

    fn timestamp(t: u64) -> Vec<u8> {
        // Timestamp packet: header 0x71, 8 bytes; it ends the record.
        let mut p = vec![0x71];
        p.extend_from_slice(&t.to_le_bytes());
        p
    }

    fn decode(buf: &[u8]) -> (Vec<SpeRecord>, SpeStats) {
        let mut out = Vec::new();
        let stats = decode_records(buf, |r| out.push(*r));
        (out, stats)
    }

    #[test]
    fn decodes_load_records_and_classifies_them() {
        let mut buf = load_record(LLC_MISS, 0x7f00_1234_5008, &timestamp(99));
        buf.extend(load_record(LLC_HIT, 0x7f00_1234_6000, &[0x01])); // End packet
        buf.extend([0x00, 0x00]); // padding
        buf.extend(load_record(RETIRED_L1_HIT, 0x7f00_1234_7000, &[0x01]));
        buf.extend(load_record(REMOTE, 0x7f00_1234_8000, &[0x01]));
        let (records, stats) = decode(&buf);
        assert_eq!(
            stats,
            SpeStats {
                records: 4,
                bad_bytes: 0,
                cut_bytes: 0
            }
        );
        let r = records[0];
        assert_eq!(r.op, SpeOp::Load);
        assert_eq!(r.vaddr, Some(0x7f00_1234_5008), "the tag byte is dropped");
        assert_eq!(r.paddr, Some(0x8_8000_1000));
        assert_eq!(r.context, Some(4242));
        assert_eq!(r.total_latency, Some(57));
        assert_eq!(r.timestamp, Some(99));
        let sources: Vec<_> = records.iter().map(SpeRecord::source).collect();
        assert_eq!(
            sources,
            [
                DataSource::LlcMiss,
                DataSource::LlcHit,
                DataSource::Other,
                DataSource::LlcMiss
            ]
        );
        assert_eq!(records[1].timestamp, None);
    }

    #[test]
    fn stores_extended_headers_alignment_and_damage() {
        // A store: operation type class 1 with payload bit 0 set.
        let mut store = load_record(LLC_MISS, 0x1000, &[0x01]);
        let at = store.iter().position(|&b| b == 0x49).unwrap();
        store[at + 1] = 0x01;
        let (records, _) = decode(&store);
        assert_eq!(records[0].op, SpeOp::Store);
        assert_eq!(records[0].source(), DataSource::Other);

        // An extended header: 0b001000_00 then the address header with index 2; and an
        // alignment packet (0x21, 0x00: pad to a multiple of 4 bytes) before it.
        let mut buf = vec![0x21, 0x00, 0x00, 0x00];
        buf.extend([0x49, 0x00, 0x20, 0xb2]);
        buf.extend_from_slice(&0xffff_8000_0000_1000u64.to_le_bytes());
        buf.push(0x01);
        let (records, stats) = decode(&buf);
        assert_eq!(stats.records, 1);
        assert_eq!(
            records[0].vaddr,
            Some(0xffff_8000_0000_1000),
            "kernel addresses are sign-extended"
        );

        // A byte that is no header is skipped; a packet cut at the end is counted.
        let mut buf = vec![0xff];
        buf.extend(load_record(LLC_HIT, 0x2000, &[0x01]));
        buf.extend([0xb2, 0x01, 0x02]);
        let (records, stats) = decode(&buf);
        assert_eq!(records.len(), 1);
        assert_eq!((stats.bad_bytes, stats.cut_bytes), (1, 3));
    }
}
