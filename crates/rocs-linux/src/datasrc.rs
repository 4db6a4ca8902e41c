//! Where a sampled load found its data: perf's `perf_mem_data_src` word (Intel PEBS
//! load latency, AMD IBS on Linux >= 6.1, Arm SPE) and raw AMD IBS op registers.

use rocs_core::DataSource;

// mem_lvl (bits 5..18)
const LVL_SHIFT: u32 = 5;
const LVL_HIT: u64 = 0x02;
const LVL_MISS: u64 = 0x04;
const LVL_L1: u64 = 0x08;
const LVL_LFB: u64 = 0x10;
const LVL_L2: u64 = 0x20;
const LVL_L3: u64 = 0x40;
const LVL_LOC_RAM: u64 = 0x80;
const LVL_REM_RAM1: u64 = 0x100;
const LVL_REM_RAM2: u64 = 0x200;
const LVL_REM_CCE1: u64 = 0x400;
const LVL_REM_CCE2: u64 = 0x800;
// mem_lvl_num (bits 33..36)
const LVLNUM_SHIFT: u32 = 33;
const LVLNUM_L1: u64 = 0x01;
const LVLNUM_L2: u64 = 0x02;
const LVLNUM_L3: u64 = 0x03;
const LVLNUM_L4: u64 = 0x04;
const LVLNUM_L2_MHB: u64 = 0x05;
const LVLNUM_MSC: u64 = 0x06;
const LVLNUM_CXL: u64 = 0x09;
const LVLNUM_IO: u64 = 0x0a;
const LVLNUM_ANY_CACHE: u64 = 0x0b;
const LVLNUM_LFB: u64 = 0x0c;
const LVLNUM_RAM: u64 = 0x0d;
const LVLNUM_PMEM: u64 = 0x0e;
const LVLNUM_NA: u64 = 0x0f;
const REMOTE_BIT: u32 = 37;
const HOPS_SHIFT: u32 = 43;
// mem_op (bits 0..4)
const OP_LOAD: u64 = 0x02;

/// Classify a `perf_mem_data_src` word. The LLC is the L3 (x86) or the last level the
/// CPU reports as L3 (Arm system cache); anything served from beyond it (DRAM, a remote
/// or other-CCX cache, PMEM, CXL) is a miss; hits above it (L1, L2, fill buffers) and
/// unknown sources are `Other`, as are stores.
#[inline]
pub fn classify_data_src(word: u64) -> DataSource {
    let op = word & 0x1f;
    if op != 0 && op & OP_LOAD == 0 && op != 1 {
        // A store, prefetch or instruction fetch: not a load we rank pages by.
        return DataSource::Other;
    }
    let lvl = (word >> LVL_SHIFT) & 0x3fff;
    let num = (word >> LVLNUM_SHIFT) & 0xf;
    let remote = (word >> REMOTE_BIT) & 1 == 1;
    let hops = (word >> HOPS_SHIFT) & 0x7;
    if num != 0 && num != LVLNUM_NA {
        return match num {
            LVLNUM_L3 if lvl & LVL_MISS != 0 && lvl & LVL_HIT == 0 => DataSource::LlcMiss,
            LVLNUM_L3 if remote || hops > 0 => DataSource::LlcMiss,
            LVLNUM_L3 => DataSource::LlcHit,
            LVLNUM_ANY_CACHE if remote || hops > 0 => DataSource::LlcMiss,
            LVLNUM_L4 | LVLNUM_MSC | LVLNUM_CXL | LVLNUM_RAM | LVLNUM_PMEM => DataSource::LlcMiss,
            LVLNUM_L1 | LVLNUM_L2 | LVLNUM_L2_MHB | LVLNUM_LFB | LVLNUM_IO => DataSource::Other,
            _ => DataSource::Other,
        };
    }
    if lvl & LVL_L3 != 0 {
        if lvl & LVL_MISS != 0 {
            DataSource::LlcMiss
        } else {
            DataSource::LlcHit
        }
    } else if lvl & (LVL_LOC_RAM | LVL_REM_RAM1 | LVL_REM_RAM2 | LVL_REM_CCE1 | LVL_REM_CCE2) != 0 {
        DataSource::LlcMiss
    } else {
        let _ = (LVL_L1, LVL_LFB, LVL_L2);
        DataSource::Other
    }
}

/// A decoded raw IBS op sample: the load's linear address (when valid) and its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbsOp {
    pub vaddr: Option<u64>,
    pub paddr: Option<u64>,
    pub is_load: bool,
    pub source: DataSource,
}

fn le64(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

/// Decode the PERF_SAMPLE_RAW payload of an `ibs_op` sample (kernels before 6.1):
/// a u32 of capabilities, then IBS_OP_CTL, OP_RIP, OP_DATA, OP_DATA2, OP_DATA3,
/// DC_LINADDR, DC_PHYSADDR as u64s.
pub fn decode_ibs_op_raw(raw: &[u8]) -> Option<IbsOp> {
    let data2 = le64(raw, 4 + 3 * 8)?;
    let data3 = le64(raw, 4 + 4 * 8)?;
    let lin = le64(raw, 4 + 5 * 8)?;
    let phys = le64(raw, 4 + 6 * 8).unwrap_or(0);
    let is_load = data3 & 1 == 1;
    let dc_miss = data3 >> 7 & 1 == 1;
    let lin_valid = data3 >> 17 & 1 == 1;
    let phys_valid = data3 >> 18 & 1 == 1;
    let data_src = data2 & 0x7;
    let remote_node = data2 >> 4 & 1 == 1;
    let source = if !is_load || !dc_miss {
        DataSource::Other
    } else {
        match data_src {
            1 if !remote_node => DataSource::LlcHit,
            1..=3 => DataSource::LlcMiss,
            _ => DataSource::Other,
        }
    };
    Some(IbsOp {
        vaddr: lin_valid.then_some(lin),
        paddr: phys_valid.then_some(phys),
        is_load,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(op: u64, lvl: u64, num: u64) -> u64 {
        op | lvl << LVL_SHIFT | num << LVLNUM_SHIFT
    }

    #[test]
    fn classifies_levels() {
        // Intel load latency: L3 hit, L1 hit, local DRAM (legacy mem_lvl only).
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT | LVL_L3, 0)),
            DataSource::LlcHit
        );
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT | LVL_L1, 0)),
            DataSource::Other
        );
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT | LVL_LOC_RAM, 0)),
            DataSource::LlcMiss
        );
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_MISS | LVL_L3, 0)),
            DataSource::LlcMiss
        );
        // mem_lvl_num wins where present.
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT, LVLNUM_L3)),
            DataSource::LlcHit
        );
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT, LVLNUM_RAM)),
            DataSource::LlcMiss
        );
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT, LVLNUM_L2)),
            DataSource::Other
        );
        // AMD: a cache in another CCX (any cache, one hop) is beyond this LLC.
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT, LVLNUM_ANY_CACHE) | 1 << HOPS_SHIFT),
            DataSource::LlcMiss
        );
        assert_eq!(
            classify_data_src(w(OP_LOAD, LVL_HIT, LVLNUM_L3) | 1 << REMOTE_BIT),
            DataSource::LlcMiss
        );
        // Stores and "not available" are not ranked.
        assert_eq!(
            classify_data_src(w(0x04, LVL_HIT | LVL_L3, LVLNUM_L3)),
            DataSource::Other
        );
        assert_eq!(classify_data_src(w(1, 1, LVLNUM_NA)), DataSource::Other);
        assert_eq!(classify_data_src(0), DataSource::Other);
    }

    #[test]
    fn decodes_raw_ibs() {
        let mut raw = vec![0u8; 4 + 7 * 8];
        let put = |raw: &mut Vec<u8>, i: usize, v: u64| {
            raw[4 + i * 8..12 + i * 8].copy_from_slice(&v.to_le_bytes())
        };
        put(&mut raw, 3, 3); // OP_DATA2: DRAM
        put(&mut raw, 4, 1 | 1 << 7 | 1 << 17); // load, dc miss, linear address valid
        put(&mut raw, 5, 0x7f00_1234_5000);
        let op = decode_ibs_op_raw(&raw).unwrap();
        assert_eq!(op.vaddr, Some(0x7f00_1234_5000));
        assert_eq!(op.source, DataSource::LlcMiss);
        assert_eq!(op.paddr, None);
        put(&mut raw, 3, 1); // local L3
        assert_eq!(decode_ibs_op_raw(&raw).unwrap().source, DataSource::LlcHit);
        put(&mut raw, 4, 1 | 1 << 17); // L1 hit
        assert_eq!(decode_ibs_op_raw(&raw).unwrap().source, DataSource::Other);
        assert!(decode_ibs_op_raw(&raw[..20]).is_none());
    }
}
