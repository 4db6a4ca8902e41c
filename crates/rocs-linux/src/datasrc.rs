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
            // A cache of this cache domain, no hop away: AMD's "local cache" (this CCX's
            // L3) as the kernel decodes IBS on Zen before Zen 4's extended sources.
            LVLNUM_ANY_CACHE => DataSource::LlcHit,
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

/// Which encoding of IBS_OP_DATA2's DataSrc field a CPU uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IbsDataSrcEncoding {
    /// Families 10h-16h (BKDG): 1 = the local L3, 2 = another core's cache, 3 = DRAM.
    PreZen,
    /// Families 17h and later (PPR): 2 = local cache (this CCX's L3), 3 = DRAM, 4 = a
    /// remote cache (another CCX or socket), 7 = I/O. Samples whose caps word has
    /// IBS_CAPS_ZEN4 widen the field to 5 bits (DataSrcHi): 1 = local cache, 2 = a near
    /// CCX's cache, 3 = DRAM, 5 = a far CCX's cache, 6 = PMEM, 7 = I/O, 8 = extension
    /// memory (CXL), 12 = peer agent memory.
    Zen {
        /// Family 19h models 00h-0Fh: erratum 1293 leaves DataSrc invalid on software
        /// prefetches and on misses that allocated no MAB.
        erratum_1293: bool,
    },
}

impl IbsDataSrcEncoding {
    pub fn for_cpu(family: u32, model: u32) -> Self {
        if family < 0x17 {
            IbsDataSrcEncoding::PreZen
        } else {
            IbsDataSrcEncoding::Zen {
                erratum_1293: family == 0x19 && model <= 0x0f,
            }
        }
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

/// IBS_CAPS_ZEN4 in the caps word the kernel puts before the registers.
const IBS_CAPS_ZEN4: u32 = 1 << 11;

/// Decode the PERF_SAMPLE_RAW payload of an `ibs_op` sample (kernels before 6.1):
/// a u32 of capabilities, then IBS_OP_CTL, OP_RIP, OP_DATA, OP_DATA2, OP_DATA3,
/// DC_LINADDR, DC_PHYSADDR as u64s.
pub fn decode_ibs_op_raw(raw: &[u8], encoding: IbsDataSrcEncoding) -> Option<IbsOp> {
    let caps = u32::from_le_bytes(raw.get(..4)?.try_into().expect("4 bytes"));
    let data2 = le64(raw, 4 + 3 * 8)?;
    let data3 = le64(raw, 4 + 4 * 8)?;
    let lin = le64(raw, 4 + 5 * 8)?;
    let phys = le64(raw, 4 + 6 * 8).unwrap_or(0);
    let is_load = data3 & 1 == 1;
    let lin_valid = data3 >> 17 & 1 == 1;
    let phys_valid = data3 >> 18 & 1 == 1;
    let source = if is_load {
        ibs_load_source(data2, data3, caps, encoding)
    } else {
        DataSource::Other
    };
    Some(IbsOp {
        vaddr: lin_valid.then_some(lin),
        paddr: phys_valid.then_some(phys),
        is_load,
        source,
    })
}

/// Where a load IBS sampled found its data, from IBS_OP_DATA2 and IBS_OP_DATA3.
fn ibs_load_source(data2: u64, data3: u64, caps: u32, encoding: IbsDataSrcEncoding) -> DataSource {
    let dc_miss = data3 >> 7 & 1 == 1;
    let l2_miss = data3 >> 20 & 1 == 1;
    let dc_miss_no_mab_alloc = data3 >> 16 & 1 == 1;
    let sw_prefetch = data3 >> 21 & 1 == 1;
    let remote_node = data2 >> 4 & 1 == 1;
    if !dc_miss {
        return DataSource::Other;
    }
    match encoding {
        IbsDataSrcEncoding::PreZen => match data2 & 0x7 {
            1 if !remote_node => DataSource::LlcHit,
            1..=3 => DataSource::LlcMiss,
            _ => DataSource::Other,
        },
        IbsDataSrcEncoding::Zen { erratum_1293 } => {
            let data2_invalid = erratum_1293 && (sw_prefetch || dc_miss_no_mab_alloc);
            if data2_invalid || !l2_miss {
                // An L2 hit, or a source the CPU did not record.
                return DataSource::Other;
            }
            if caps & IBS_CAPS_ZEN4 != 0 {
                match (data2 >> 6 & 0x3) << 3 | data2 & 0x7 {
                    1 => DataSource::LlcHit,
                    2 | 3 | 5 | 6 | 8 | 12 => DataSource::LlcMiss,
                    _ => DataSource::Other,
                }
            } else {
                match data2 & 0x7 {
                    2 => DataSource::LlcHit,
                    3 | 4 => DataSource::LlcMiss,
                    _ => DataSource::Other,
                }
            }
        }
    }
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

    /// perf_mem_data_src words as the kernel's IBS driver writes them
    /// (arch/x86/events/amd/ibs.c, g_data_src and g_zen4_data_src), built from the
    /// numbers of include/uapi/linux/perf_event.h: mem_op LOAD = 0x02 at bit 0, mem_lvl
    /// at bit 5 (HIT 0x02, L3 0x40, LOC_RAM 0x80, REM_CCE1 0x400, REM_CCE2 0x800),
    /// mem_lvl_num at bit 33 (L3 0x03, ANY_CACHE 0x0b, RAM 0x0d), remote at bit 37,
    /// hops at bit 43.
    #[test]
    fn classifies_what_the_kernel_writes_for_amd_ibs() {
        let load = 0x02u64;
        let lvl = |bits: u64| (bits | 0x02) << 5;
        let num = |n: u64| n << 33;
        let remote = 1u64 << 37;
        let hops = |h: u64| h << 43;
        // Zen 1-3 local cache: L(L3) | L(REM_CCE1) | LN(ANY_CACHE) | HOPS(0).
        let zen3_local = load | lvl(0x40) | lvl(0x400) | num(0x0b) | hops(0);
        assert_eq!(classify_data_src(zen3_local), DataSource::LlcHit);
        // Zen 1-3 remote cache: L(REM_CCE2) | LN(ANY_CACHE) | REM | HOPS(1).
        let zen3_remote = load | lvl(0x800) | num(0x0b) | remote | hops(1);
        assert_eq!(classify_data_src(zen3_remote), DataSource::LlcMiss);
        // DRAM: L(LOC_RAM) | LN(RAM).
        assert_eq!(
            classify_data_src(load | lvl(0x80) | num(0x0d)),
            DataSource::LlcMiss
        );
        // Zen 4 local cache: L(L3) | LN(L3); near CCX: L(REM_CCE1) | LN(ANY_CACHE) | REM.
        assert_eq!(
            classify_data_src(load | lvl(0x40) | num(0x03)),
            DataSource::LlcHit
        );
        assert_eq!(
            classify_data_src(load | lvl(0x400) | num(0x0b) | remote | hops(0)),
            DataSource::LlcMiss
        );
    }

    /// A raw `ibs_op` sample: the caps word, then IBS_OP_CTL, OP_RIP, OP_DATA, OP_DATA2,
    /// OP_DATA3, DC_LINADDR, DC_PHYSADDR (struct perf_ibs_data, asm/amd-ibs.h).
    fn raw_ibs(caps: u32, data2: u64, data3: u64, linaddr: u64) -> Vec<u8> {
        let mut raw = caps.to_le_bytes().to_vec();
        for reg in [0, 0, 0, data2, data3, linaddr, 0] {
            raw.extend_from_slice(&reg.to_le_bytes());
        }
        raw
    }

    // IBS_OP_DATA3 bits (union ibs_op_data3 in arch/x86/include/asm/amd-ibs.h).
    const LD_OP: u64 = 1 << 0;
    const DC_MISS: u64 = 1 << 7;
    const DC_MISS_NO_MAB_ALLOC: u64 = 1 << 16;
    const DC_LIN_ADDR_VALID: u64 = 1 << 17;
    const L2_MISS: u64 = 1 << 20;
    // IBS_OP_DATA2: data_src_lo bits 0-2, rmt_node bit 4, data_src_hi bits 6-7.
    const RMT_NODE: u64 = 1 << 4;
    // IBS_CAPS_ZEN4 (arch/x86/include/asm/perf_event.h).
    const CAPS_ZEN4: u32 = 1 << 11;

    fn source(caps: u32, data2: u64, data3: u64, enc: IbsDataSrcEncoding) -> DataSource {
        decode_ibs_op_raw(&raw_ibs(caps, data2, data3, 0), enc)
            .unwrap()
            .source
    }

    #[test]
    fn zen_raw_ibs_data_sources_follow_the_ppr() {
        // Family 19h model 01h (Zen 3, PPR 55898): IBS_DATA_SRC_LOC_CACHE 2,
        // IBS_DATA_SRC_DRAM 3, IBS_DATA_SRC_REM_CACHE 4, IBS_DATA_SRC_IO 7.
        let zen3 = IbsDataSrcEncoding::for_cpu(0x19, 0x01);
        let miss = LD_OP | DC_MISS | L2_MISS | DC_LIN_ADDR_VALID;
        let raw = raw_ibs(0, 2, miss, 0x7f00_1234_5008);
        let op = decode_ibs_op_raw(&raw, zen3).unwrap();
        assert_eq!(op.vaddr, Some(0x7f00_1234_5008));
        assert_eq!(op.paddr, None);
        assert_eq!(op.source, DataSource::LlcHit, "L3 hits are not misses");
        assert_eq!(source(0, 3, miss, zen3), DataSource::LlcMiss);
        assert_eq!(source(0, 3 | RMT_NODE, miss, zen3), DataSource::LlcMiss);
        assert_eq!(
            source(0, 4, miss, zen3),
            DataSource::LlcMiss,
            "remote hits count"
        );
        assert_eq!(source(0, 7, miss, zen3), DataSource::Other, "I/O");
        // An L1 or L2 hit says nothing about the LLC.
        assert_eq!(source(0, 2, LD_OP, zen3), DataSource::Other);
        assert_eq!(source(0, 2, LD_OP | DC_MISS, zen3), DataSource::Other);
        // Erratum 1293 (family 19h models 00h-0Fh): DataSrc is not valid here.
        let no_mab = miss | DC_MISS_NO_MAB_ALLOC;
        assert_eq!(source(0, 3, no_mab, zen3), DataSource::Other);
        let zen3_later = IbsDataSrcEncoding::for_cpu(0x19, 0x21);
        assert_eq!(source(0, 3, no_mab, zen3_later), DataSource::LlcMiss);
        // Zen 4 extended sources (caps IBS_CAPS_ZEN4): IBS_DATA_SRC_EXT_LOC_CACHE 1,
        // NEAR_CCX_CACHE 2, DRAM 3, FAR_CCX_CACHE 5, PMEM 6, IO 7, EXT_MEM 8,
        // PEER_AGENT_MEM 12 (= data_src_hi 1, data_src_lo 4).
        let zen4 = IbsDataSrcEncoding::for_cpu(0x19, 0x11);
        assert_eq!(source(CAPS_ZEN4, 1, miss, zen4), DataSource::LlcHit);
        for ext in [2u64, 3, 5, 6, 8, 12] {
            let data2 = (ext >> 3) << 6 | ext & 7;
            assert_eq!(
                source(CAPS_ZEN4, data2, miss, zen4),
                DataSource::LlcMiss,
                "{ext}"
            );
        }
        assert_eq!(source(CAPS_ZEN4, 7, miss, zen4), DataSource::Other);
        // Stores are not ranked; a short payload is no sample.
        assert_eq!(source(0, 3, miss & !LD_OP, zen3), DataSource::Other);
        assert!(decode_ibs_op_raw(&raw[..20], zen3).is_none());
    }

    #[test]
    fn pre_zen_raw_ibs_keeps_the_bkdg_encoding() {
        // Family 10h BKDG (31116), IbsOpData2 NbIbsReqSrc: 1 = local L3, 2 = another
        // core's cache, 3 = DRAM, 7 = other; NbIbsReqDstProc (bit 4) = remote node.
        let fam10h = IbsDataSrcEncoding::for_cpu(0x10, 0x04);
        assert_eq!(fam10h, IbsDataSrcEncoding::PreZen);
        let miss = LD_OP | DC_MISS;
        assert_eq!(source(0, 1, miss, fam10h), DataSource::LlcHit);
        assert_eq!(source(0, 1 | RMT_NODE, miss, fam10h), DataSource::LlcMiss);
        assert_eq!(source(0, 2, miss, fam10h), DataSource::LlcMiss);
        assert_eq!(source(0, 3, miss, fam10h), DataSource::LlcMiss);
        assert_eq!(source(0, 7, miss, fam10h), DataSource::Other);
        assert_eq!(source(0, 1, LD_OP, fam10h), DataSource::Other);
    }
}
