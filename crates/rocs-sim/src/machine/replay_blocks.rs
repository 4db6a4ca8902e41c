//! A version 5 trace's blocks replayed whole, each stream apart (docs/traces.md).
//!
//! On the cachegrind path (LRU L1s of 64-byte lines, sizes clamped to them, no TLB, no
//! prefetcher) with the PMU off, an L1 sees its own stream only and nothing below it
//! reaches back into it. So each stream's references can go through its L1 by
//! themselves, and only the misses need the levels the streams share, in the trace's
//! order. A group's references after its first are hits on the most recent line of their
//! set that change nothing (`trace::columns`): only its head goes through the L1. The
//! counts, the clock and the first touches of pages come out as the references one by one
//! would give them: the clock only adds each reference's cost, and a page is first
//! touched by an access that misses its L1.

use super::{translate, Env, PageMap};
use crate::cache::{Cache, Policy};
use crate::error::SimError;
use crate::machine::hierarchy::{cachegrind_below_l1, Served};
use crate::machine::{ProcState, FP};
use crate::trace::columns::{Block, ColumnReader, Heads, GROUP_LINE_SHIFT};

/// What became of the next block.
pub(super) enum Taken {
    /// Replayed whole: its references.
    Whole(u64),
    /// It could take the clock to the stretch's limit, or holds more references than the
    /// process may still replay: to be replayed one by one.
    DoesNotFit,
    /// The trace is over.
    End,
}

/// An L1 miss of one stream: the reference's index in its stream's references of the
/// block, its first line and whether it ends in the next, and, if it is sent below the L1
/// part by part (split across two pages that need not be adjacent frames), bit 0 (its
/// first line) and bit 1 (the next) set for the parts that missed; 0 otherwise.
#[derive(Clone, Copy)]
struct Miss {
    index: u32,
    straddles: bool,
    parts: u8,
    line: u64,
}

impl Miss {
    #[inline(always)]
    fn new(index: u64, line: u64, straddles: bool, parts: u8) -> Miss {
        Miss {
            index: index as u32,
            straddles,
            parts,
            line,
        }
    }
}

/// `Miss::parts` of a fetch on a core without an L1I: its pages are only translated.
const TRANSLATE_ONLY: u8 = 4;

/// Bytes in a line of the L1s this replay runs on.
const LINE: u64 = 1 << GROUP_LINE_SHIFT;

/// Scratch space kept between blocks.
#[derive(Default)]
pub(super) struct Scratch {
    misses: [Vec<Miss>; 2],
}

/// Whether blocks can be replayed whole for `st`, whose accesses are clamped to
/// `max_size` bytes: LRU L1s of 64-byte lines (or no L1I), the cachegrind path below them,
/// and the PMU off.
pub(super) fn apply(st: &ProcState, max_size: u64) -> bool {
    let lru_lines = |c: &Cache| c.policy() == Policy::Lru && c.line_shift() == GROUP_LINE_SHIFT;
    lru_lines(&st.core.l1d)
        && st.core.l1i.as_ref().is_none_or(lru_lines)
        && max_size == LINE
        && !st.core.modern.any()
        && !st.pmu.enabled
}

/// Replay the next block of `reader` whole if it fits before `limit_fp` and within
/// `left` references.
pub(super) fn take_block<R: std::io::Read>(
    reader: &mut ColumnReader<R>,
    map: &mut PageMap,
    st: &mut ProcState,
    env: &mut Env,
    scratch: &mut Scratch,
    left: u64,
    limit_fp: u64,
) -> Result<Taken, SimError> {
    let Some(block) = reader.peek_block()? else {
        return Ok(Taken::End);
    };
    let t = env.t;
    let refs = block.refs as u64;
    let data_refs: u64 = (0..block.refs.div_ceil(64))
        .map(|w| block.bits(w).count_ones() as u64)
        .sum();
    let fetches = refs - data_refs;
    // Only a group's first reference can miss, and none costs more than memory.
    let groups = (block.groups[0] + block.groups[1]) as u64;
    let worst = fetches * t.base_per_instr + refs * t.l1 + groups * (t.mem - t.l1.min(t.mem));
    if refs > left || st.clock_fp.saturating_add(worst) >= limit_fp {
        return Ok(Taken::DoesNotFit);
    }
    // A reference that ends in the next line and whose frames may not follow each other
    // (pages mapped by the allocator) is sent below the L1 part by part, a line each.
    let split_pages = !env.identity;
    let lines_per_page_shift = env.page_shift - GROUP_LINE_SHIFT;
    let lines_per_page_mask = (1u64 << lines_per_page_shift) - 1;
    for (s, stream_refs) in [fetches, data_refs].into_iter().enumerate() {
        let misses = &mut scratch.misses[s];
        misses.clear();
        let mut heads = block.heads(s);
        let l1 = if s == 0 {
            st.core.l1i.as_mut()
        } else {
            Some(&mut st.core.l1d)
        };
        let read = match l1 {
            Some(l1) => through_l1(
                l1,
                &mut heads,
                block.groups[s],
                misses,
                split_pages,
                lines_per_page_mask,
            ),
            None => fetches_without_l1i(&mut heads, block.groups[s], misses, lines_per_page_shift),
        };
        if read != Some(stream_refs) || !heads.done() {
            return Err(bad(
                &block,
                "its heads are cut short or do not match its stream bits",
            ));
        }
    }
    // The misses in the trace's order: fetch i comes before data access j if fewer than
    // i fetches precede j, that is i < (j's position) - j.
    let (fetch_misses, data_misses) = (&scratch.misses[0], &scratch.misses[1]);
    let (mut a, mut b) = (0, 0);
    let mut select = Select::default();
    let mut cost = fetches * t.base_per_instr + refs * t.l1;
    let mut l1_misses = [0u64; 2];
    while a < fetch_misses.len() || b < data_misses.len() {
        let fetch_first = b == data_misses.len()
            || (a < fetch_misses.len()
                && (fetch_misses[a].index as u64)
                    < select.position(&block, data_misses[b].index as u64)
                        - data_misses[b].index as u64);
        let (m, data) = if fetch_first {
            a += 1;
            (fetch_misses[a - 1], false)
        } else {
            b += 1;
            (data_misses[b - 1], true)
        };
        // As `Cache::access` takes an address and a size: the line, or the line and the
        // next (sizes are clamped to a line).
        let (addr, size) = (m.line << GROUP_LINE_SHIFT, 1 + m.straddles as u64 * LINE);
        if m.parts == TRANSLATE_ONLY {
            translate(map, env.frames, st, addr, env.page_shift)?;
            if m.straddles {
                translate(map, env.frames, st, addr + LINE, env.page_shift)?;
            }
            continue;
        }
        let served = if m.parts == 0 {
            l1_misses[data as usize] += 1;
            let paddr = translate(map, env.frames, st, addr, env.page_shift)?;
            cachegrind_below_l1(&mut st.core, env.llc, &mut st.c, paddr, size, data)
        } else {
            // Both pages are translated first, as `reference` does, and each line that
            // missed goes below on its own.
            let p1 = translate(map, env.frames, st, addr, env.page_shift)?;
            let p2 = translate(map, env.frames, st, addr + LINE, env.page_shift)?;
            let mut served = Served::L1;
            for (part, paddr) in [(1, p1), (2, p2)] {
                if m.parts & part != 0 {
                    l1_misses[data as usize] += 1;
                    let below =
                        cachegrind_below_l1(&mut st.core, env.llc, &mut st.c, paddr, 1, data);
                    served = served.max(below);
                }
            }
            served
        };
        cost += match served {
            Served::L1 => t.l1,
            Served::L2 => t.l2,
            Served::Llc => t.llc,
            Served::Mem => t.mem,
        } - t.l1;
    }
    let counted_fetches = if st.core.l1i.is_some() { fetches } else { 0 };
    let c = &mut st.c;
    c.accesses += counted_fetches + data_refs;
    c.l1i_accesses += counted_fetches;
    c.l1i_misses += l1_misses[0];
    c.l1d_accesses += data_refs;
    c.l1d_misses += l1_misses[1];
    st.instr_fp += fetches * FP;
    st.clock_fp += cost;
    reader.take_block();
    Ok(Taken::Whole(refs))
}

/// Send `groups` heads of a stream through its L1, noting the misses; the references
/// they stand for, `None` if a head is cut short. A reference that ends in the next line
/// and crosses into another page is sent below part by part if `split_pages`.
#[inline(always)]
fn through_l1(
    l1: &mut Cache,
    heads: &mut Heads,
    groups: usize,
    misses: &mut Vec<Miss>,
    split_pages: bool,
    lines_per_page_mask: u64,
) -> Option<u64> {
    let mut index = 0u64;
    for _ in 0..groups {
        let h = heads.read()?;
        if !h.straddles {
            if !l1.access_line_generated(h.line) {
                misses.push(Miss::new(index, h.line, false, 0));
            }
        } else {
            let a = l1.access_line(h.line);
            let b = l1.access_line(h.line + 1);
            if !(a && b) {
                let split = split_pages && (h.line + 1) & lines_per_page_mask == 0;
                let parts = if split { !a as u8 | (!b as u8) << 1 } else { 0 };
                misses.push(Miss::new(index, h.line, true, parts));
            }
        }
        index += h.count;
    }
    Some(index)
}

/// Without an L1I a fetch is a hit that nothing counts, but its pages still get their
/// frames when first touched: a fetch in another page than the fetch before is noted, to
/// be translated in the merge. The references the heads stand for, as `through_l1`.
fn fetches_without_l1i(
    heads: &mut Heads,
    groups: usize,
    misses: &mut Vec<Miss>,
    lines_per_page_shift: u32,
) -> Option<u64> {
    let (mut index, mut page) = (0u64, u64::MAX);
    for _ in 0..groups {
        let h = heads.read()?;
        let last_page = h.group_line() >> lines_per_page_shift;
        if h.line >> lines_per_page_shift != page || last_page != page {
            misses.push(Miss::new(index, h.line, h.straddles, TRANSLATE_ONLY));
            page = last_page;
        }
        index += h.count;
    }
    Some(index)
}

fn bad(block: &Block, what: &str) -> SimError {
    SimError::BinaryTrace {
        offset: block.offset,
        message: format!("a block: {what}"),
    }
}

/// Positions of data accesses in a block's stream bits, asked in increasing order.
#[derive(Default)]
struct Select {
    /// The word looked at, and the data accesses before it.
    word: usize,
    before: u64,
}

impl Select {
    /// The position in the block of data access `j` (0-based).
    fn position(&mut self, block: &Block, j: u64) -> u64 {
        loop {
            let bits = block.bits(self.word);
            let ones = bits.count_ones() as u64;
            if self.before + ones > j {
                let mut x = bits;
                for _ in 0..j - self.before {
                    x &= x - 1;
                }
                return 64 * self.word as u64 + x.trailing_zeros() as u64;
            }
            self.before += ones;
            self.word += 1;
        }
    }
}
