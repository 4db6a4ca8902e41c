//! One set-associative, physically indexed, write-allocate cache level.
//!
//! Tags are kept in one flat array (`sets * ways` line numbers), with power-of-two masks for
//! the set index, so a lookup is a few loads and compares and never allocates. Replacement
//! is true LRU (each set kept in most-recently-used-first order, the way cachegrind does it,
//! so that trace replays match cachegrind exactly) or the RRIP family (SRRIP, BRRIP and
//! set-dueling DRRIP with 2-bit re-reference prediction values).
//!
//! An RRIP-family cache whose line numbers are known to be small keeps each way in one
//! 32-bit word instead ([`Cache::with_line_limit`], see `Packed`): the large LLCs of the
//! modern machines then take less than half the host memory, a set one 64-byte host line.

use rocs_core::CacheGeometry;
use serde::{Deserialize, Serialize};

/// Replacement policy of one cache level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// True least-recently-used.
    Lru,
    /// Static RRIP: insert with a long re-reference prediction (RRPV 2 of 3).
    Srrip,
    /// Bimodal RRIP: insert distant (RRPV 3), long only every 32nd insertion.
    Brrip,
    /// Dynamic RRIP: SRRIP and BRRIP leader sets duel, followers take the winner.
    Drrip,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Lru => "lru",
            Policy::Srrip => "srrip",
            Policy::Brrip => "brrip",
            Policy::Drrip => "drrip",
        }
    }
}

/// A tag slot that holds no line.
const INVALID: u64 = u64::MAX;
const RRPV_MAX: u8 = 3;
const PSEL_MAX: u32 = 1023;
/// Every 64 sets, one SRRIP leader and one BRRIP leader.
const DUEL_PERIOD: usize = 64;
/// A way mask that allows every way.
const ALL_WAYS: u64 = u64::MAX;

/// An RRIP cache's sets with each way in one 32-bit word: the way's tag (its line number
/// above the set index, which is all that tells the lines of one set apart) shifted left by
/// two, and its RRPV in the low two bits; an empty way is all ones (a tag no line has, RRPV
/// 3). Why: on the modern machines the LLC's 8-byte tags and byte of RRPV per way (4.5 MiB
/// for 32 MiB of simulated LLC) do not stay in the host's caches, and about a third of the
/// time waited on an LLC set's first host line (docs/simulator-speed.md). Here a 32 MiB LLC
/// is 2 MiB, and a set of up to 16 ways is one aligned host line (8 ways, half of one): one
/// host miss per lookup at most, and 32-bit compares, four to an SSE2 instruction.
///
/// Sets of fewer ways than their array are padded with empty ways that no fill is allowed
/// into (the way mask is cut to the cache's ways) and that no lookup matches.
#[derive(Clone, Debug)]
enum Packed {
    /// 8-byte tags in `Cache::tags` (and RRPVs in `Cache::rrpv` for RRIP): LRU caches,
    /// caches of more than 16 ways, and those whose tags may not fit.
    No,
    Ways8(Vec<Set8>),
    Ways16(Vec<Set16>),
}

#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct Set8([u32; 8]);

#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Set16([u32; 16]);

const EMPTY: u32 = u32::MAX;
const RRPV_BITS: u32 = 3;
/// Tags must stay below this: the all-ones tag marks an empty way.
const TAG_LIMIT: u64 = (EMPTY >> 2) as u64;

/// The slot of a packed set that holds the line of tag word `key`, if one does.
#[inline(always)]
fn packed_slot<const N: usize>(set: &mut [u32; N], key: u32) -> Option<&mut u32> {
    let hits = packed_hits(set, key);
    (hits != 0).then(|| &mut set[hits.trailing_zeros() as usize])
}

/// Bit i set where `f(set[i])`: a loop over a fixed-size array, which the compiler turns into
/// a few vector compares and a mask (no early exit, no branch per way).
#[inline(always)]
fn ways_where<const N: usize>(set: &[u32; N], f: impl Fn(u32) -> bool) -> u32 {
    let mut m = 0;
    for (i, &w) in set.iter().enumerate() {
        m |= (f(w) as u32) << i;
    }
    m
}

/// The ways of a packed set holding the line of tag word `key`.
#[inline(always)]
fn packed_hits<const N: usize>(set: &[u32; N], key: u32) -> u32 {
    ways_where(set, |w| w & !RRPV_BITS == key)
}

/// [`Cache::access_rrip`] on a packed set: the same hits, victims and RRPVs. `allowed`: the
/// way mask cut to the cache's ways; `insert` gives a miss's RRPV (and counts the miss).
/// Returns whether it hit and the word evicted (`EMPTY` for none).
#[inline(always)]
fn packed_access<const N: usize>(
    set: &mut [u32; N],
    key: u32,
    allowed: u32,
    insert: impl FnOnce() -> u8,
) -> (bool, u32) {
    let hits = packed_hits(set, key);
    if hits != 0 {
        set[hits.trailing_zeros() as usize] &= !RRPV_BITS;
        return (true, EMPTY);
    }
    let empty = ways_where(set, |w| w == EMPTY) & allowed;
    let victim = if empty != 0 {
        empty.trailing_zeros()
    } else {
        // The first allowed way of the highest RRPV among them; aging every allowed way until
        // one reaches RRPV_MAX, as the flat layout does step by step, adds the same amount
        // to each, what brings that highest value to RRPV_MAX.
        let mut rrpv = u32::from(RRPV_MAX);
        loop {
            let at = ways_where(set, |w| w & RRPV_BITS == rrpv) & allowed;
            if at != 0 {
                let age = u32::from(RRPV_MAX) - rrpv;
                if age != 0 {
                    for (i, w) in set.iter_mut().enumerate() {
                        if allowed >> i & 1 == 1 {
                            *w += age;
                        }
                    }
                }
                break at.trailing_zeros();
            }
            rrpv -= 1;
        }
    };
    let word = key | u32::from(insert());
    (false, std::mem::replace(&mut set[victim as usize], word))
}

/// The RRPV a miss in `set_index` inserts with; `VOTE`: a demand miss, counted by DRRIP's
/// leader sets.
#[inline(always)]
fn insert_rrpv<const VOTE: bool>(
    policy: Policy,
    psel: &mut u32,
    brrip_count: &mut u32,
    set_index: usize,
) -> u8 {
    let use_brrip = match policy {
        Policy::Srrip => false,
        Policy::Brrip => true,
        _ => {
            if VOTE {
                vote(psel, set_index);
            }
            match set_index % DUEL_PERIOD {
                0 => false,
                1 => true,
                _ => *psel > PSEL_MAX / 2,
            }
        }
    };
    if use_brrip {
        *brrip_count = brrip_count.wrapping_add(1);
        if brrip_count.is_multiple_of(32) {
            RRPV_MAX - 1
        } else {
            RRPV_MAX
        }
    } else {
        RRPV_MAX - 1
    }
}

/// DRRIP: a miss in `set_index`, if it is a leader set, moves the policy selector `psel`
/// towards the other policy.
#[inline(always)]
fn vote(psel: &mut u32, set_index: usize) {
    match set_index % DUEL_PERIOD {
        // SRRIP leader missed: vote for BRRIP.
        0 => *psel = (*psel + 1).min(PSEL_MAX),
        1 => *psel = psel.saturating_sub(1),
        _ => {}
    }
}

/// One cache level.
#[derive(Clone, Debug)]
pub struct Cache {
    geometry: CacheGeometry,
    policy: Policy,
    line_shift: u32,
    set_mask: u64,
    set_bits: u32,
    ways: usize,
    slices: u64,
    /// `sets_per_slice * slices * ways` line numbers; for LRU each set is MRU first. Empty
    /// if the sets are packed.
    tags: Vec<u64>,
    /// RRIP only: one prediction value per slot. Empty if the sets are packed.
    rrpv: Vec<u8>,
    /// RRIP only, if every tag fits: the sets in 32-bit words instead of `tags` and `rrpv`.
    packed: Packed,
    /// The mask of every way, for packed sets (at most 16 ways).
    packed_ways: u32,
    /// DRRIP policy selector: high means BRRIP is winning.
    psel: u32,
    /// BRRIP: counts insertions so that every 32nd is long (deterministic, no RNG).
    brrip_count: u32,
}

impl Cache {
    /// An empty cache of the given (already validated) geometry, for any line numbers.
    pub fn new(geometry: CacheGeometry, policy: Policy) -> Self {
        Cache::with_line_limit(geometry, policy, u64::MAX)
    }

    /// An empty cache that will only see line numbers below `lines` (a physically indexed
    /// cache: the machine's memory bounds them). An RRIP-family cache of at most 16 ways
    /// whose tags (line numbers above the set index) then all fit in 30 bits packs its sets
    /// (`Packed`); any other cache keeps 8-byte tags.
    pub fn with_line_limit(geometry: CacheGeometry, policy: Policy, lines: u64) -> Self {
        let sets = (geometry.sets_per_slice * geometry.slices) as usize;
        let ways = geometry.ways as usize;
        let rrip = policy != Policy::Lru;
        let set_bits = geometry.sets_per_slice.trailing_zeros();
        let fits = lines.saturating_sub(1) >> set_bits < TAG_LIMIT;
        let packed = match ways {
            _ if !rrip || !fits => Packed::No,
            1..=8 => Packed::Ways8(vec![Set8([EMPTY; 8]); sets]),
            9..=16 => Packed::Ways16(vec![Set16([EMPTY; 16]); sets]),
            _ => Packed::No,
        };
        let flat = matches!(packed, Packed::No);
        Cache {
            geometry,
            policy,
            line_shift: geometry.line_size.trailing_zeros(),
            set_mask: geometry.sets_per_slice - 1,
            set_bits,
            ways,
            slices: geometry.slices,
            tags: if flat {
                vec![INVALID; sets * ways]
            } else {
                Vec::new()
            },
            rrpv: if rrip && flat {
                vec![RRPV_MAX; sets * ways]
            } else {
                Vec::new()
            },
            packed,
            // Only packed sets (at most 16 ways) use it.
            packed_ways: (1u32 << ways.min(16)) - 1,
            psel: PSEL_MAX / 2,
            brrip_count: 0,
        }
    }

    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// log2 of the line size.
    #[inline(always)]
    pub fn line_shift(&self) -> u32 {
        self.line_shift
    }

    /// Index of the first slot of the set holding `line`.
    #[inline(always)]
    fn set_base(&self, line: u64) -> usize {
        self.set_of(line) * self.ways
    }

    /// The set (over all slices) that holds `line`.
    #[inline(always)]
    fn set_of(&self, line: u64) -> usize {
        let set_in_slice = line & self.set_mask;
        let set = if self.slices == 1 {
            set_in_slice
        } else {
            // The slice comes from a hash of the bits above the set index (like Intel's
            // undocumented XOR hash): it depends on the frame, never on the colour bits.
            let mut h = line >> self.set_bits;
            h ^= h >> 17;
            h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            h ^= h >> 29;
            // Map the mixed hash onto 0..slices by multiply-shift (no division; slice
            // counts need not be powers of two).
            let slice = ((h as u128 * self.slices as u128) >> 64) as u64;
            slice * (self.set_mask + 1) + set_in_slice
        };
        set as usize
    }

    /// Reference one line: true on a hit. On a miss the line is installed.
    #[inline(always)]
    pub fn access_line(&mut self, line: u64) -> bool {
        match self.policy {
            Policy::Lru => self.access_lru::<true>(self.set_base(line), line).0,
            _ => self.access_line_rrip(line),
        }
    }

    /// [`Cache::access_line`] for the generator's loop, which looks up an L1 line for
    /// every access: the LRU set is sliced without range checks (see `lru_set`). The trace
    /// replay keeps the checked slice: its decoding loop, into which this is inlined, ran
    /// 4% slower without them (docs/simulator-speed.md).
    #[inline(always)]
    pub fn access_line_generated(&mut self, line: u64) -> bool {
        match self.policy {
            Policy::Lru => self.access_lru::<false>(self.set_base(line), line).0,
            _ => self.access_line_rrip(line),
        }
    }

    /// [`Cache::access_line`] of an RRIP-family cache, out of line: the L1s that the
    /// generator's loop inlines are LRU, and the loop keeps more in registers without it.
    #[inline(never)]
    fn access_line_rrip(&mut self, line: u64) -> bool {
        self.access_rrip::<true>(self.set_of(line), line, ALL_WAYS)
            .0
    }

    /// The tag word of `line` in a packed set.
    #[inline(always)]
    fn packed_key(&self, line: u64) -> u32 {
        let tag = line >> self.set_bits;
        debug_assert!(
            matches!(self.packed, Packed::No) || tag < TAG_LIMIT,
            "line {line:#x} beyond the cache's line limit"
        );
        (tag as u32) << 2
    }

    /// Reference one line, installing it on a miss into one of the ways of `way_mask` (bit
    /// i = way i, as a resctrl capacity bitmask: a hit may be in any way, a fill only goes
    /// where the mask allows). Returns whether it hit and the line it evicted, if any.
    /// A mask other than all ways needs an RRIP-family policy (the LRU layout keeps no way
    /// identity; profiles refuse that combination).
    #[inline(always)]
    pub fn access_line_evicting(&mut self, line: u64, way_mask: u64) -> (bool, Option<u64>) {
        self.install_evicting::<true>(line, way_mask)
    }

    /// A victim cache's fill: `line`, evicted from the level above, goes into one of the
    /// ways of `way_mask` (or, already here, is predicted re-referenced). Not a demand
    /// reference, so DRRIP's leader sets take no vote from it: every line the level above
    /// evicts fills the victim cache whatever its policy, and votes counted on fills would
    /// be the same for both leaders, a random walk of the selector. Their votes come from
    /// [`Cache::demand_missed`].
    #[inline(always)]
    pub fn fill_line_evicting(&mut self, line: u64, way_mask: u64) -> (bool, Option<u64>) {
        self.install_evicting::<false>(line, way_mask)
    }

    /// [`Cache::access_line_evicting`]; `VOTE`: a miss is a demand miss, which DRRIP's
    /// leader sets count.
    #[inline(always)]
    fn install_evicting<const VOTE: bool>(
        &mut self,
        line: u64,
        way_mask: u64,
    ) -> (bool, Option<u64>) {
        let (hit, evicted) = match self.policy {
            Policy::Lru => {
                debug_assert!(way_mask & self.all_ways() == self.all_ways());
                self.access_lru::<true>(self.set_base(line), line)
            }
            _ => self.access_rrip::<VOTE>(self.set_of(line), line, way_mask),
        };
        (hit, (evicted != INVALID).then_some(evicted))
    }

    /// A demand reference to `line` missed this (victim) cache, which looked it up without
    /// installing it: DRRIP's set dueling counts the miss if `line`'s set is a leader (Jaleel
    /// et al., ISCA 2010: the policy selector counts the leader sets' misses).
    #[inline(always)]
    pub fn demand_missed(&mut self, line: u64) {
        if self.policy == Policy::Drrip {
            let set_index = self.set_of(line);
            vote(&mut self.psel, set_index);
        }
    }

    /// The mask of every way of this cache.
    pub fn all_ways(&self) -> u64 {
        if self.ways >= 64 {
            u64::MAX
        } else {
            (1u64 << self.ways) - 1
        }
    }

    /// Reference `size` bytes at `addr` the way cachegrind does: an access that straddles
    /// two lines touches both and counts as one access, a miss if either line missed.
    /// `size` must not exceed the line size (callers clamp).
    #[inline(always)]
    pub fn access(&mut self, addr: u64, size: u64) -> bool {
        let first = addr >> self.line_shift;
        let last = addr.saturating_add(size.max(1) - 1) >> self.line_shift;
        if first == last {
            self.access_line(first)
        } else {
            // Always reference both: the second line's state changes even if the first missed.
            let a = self.access_line(first);
            let b = self.access_line(last);
            a && b
        }
    }

    /// Whether `line` is the most recently used of its set in an LRU cache: an access to it
    /// would hit and change nothing. False for other policies.
    #[inline(always)]
    pub fn is_lru_mru(&self, line: u64) -> bool {
        self.tags.get(self.set_base(line)) == Some(&line) && self.policy == Policy::Lru
    }

    /// Bit i set where `lines[i]` is the most recently used line of its set in an LRU
    /// cache (none for other policies): without a branch per line.
    #[inline(always)]
    pub fn lru_mru_mask<const N: usize>(&self, lines: &[u64; N]) -> u32 {
        if self.policy != Policy::Lru {
            return 0;
        }
        let mut mask = 0;
        for (i, &line) in lines.iter().enumerate() {
            let mru = self.tags[self.set_base(line)] == line && line != INVALID;
            mask |= (mru as u32) << i;
        }
        mask
    }

    /// The ways of the set whose first slot is `base`, an index `set_base` gave, sliced
    /// without range checks.
    #[inline(always)]
    fn lru_set(&mut self, base: usize) -> &mut [u64] {
        debug_assert!(base.is_multiple_of(self.ways) && base + self.ways <= self.tags.len());
        // SAFETY: `base` is `set_of(line) * ways`, and `set_of` is below the number of
        // sets: the set within the slice is masked by `set_mask`, and the slice, from a
        // multiply-shift by `slices`, is below `slices`; `tags` holds `ways` slots for
        // each of them. Unchecked because every generated access looks up its L1 set here,
        // and the range checks cost several instructions each time.
        unsafe { self.tags.get_unchecked_mut(base..base + self.ways) }
    }

    /// (hit, the line that fell off the LRU end or INVALID); `CHECKED`: the set is sliced
    /// with range checks.
    #[inline(always)]
    fn access_lru<const CHECKED: bool>(&mut self, base: usize, line: u64) -> (bool, u64) {
        let set = if CHECKED {
            &mut self.tags[base..base + self.ways]
        } else {
            self.lru_set(base)
        };
        let mut prev = set[0];
        if prev == line {
            return (true, INVALID);
        }
        // Shift towards the LRU end while scanning; stop where the line was found.
        for slot in set[1..].iter_mut() {
            let cur = std::mem::replace(slot, prev);
            if cur == line {
                set[0] = line;
                return (true, INVALID);
            }
            prev = cur;
        }
        set[0] = line;
        (false, prev)
    }

    /// (hit, the line evicted or INVALID); fills only go to the ways of `way_mask`.
    /// Takes the set's index, not its first slot's, so that the dueling below needs no
    /// division by the number of ways. `VOTE`: a miss is a demand miss, which DRRIP's
    /// leader sets count.
    #[inline(always)]
    fn access_rrip<const VOTE: bool>(
        &mut self,
        set_index: usize,
        line: u64,
        way_mask: u64,
    ) -> (bool, u64) {
        let key = self.packed_key(line);
        let allowed = way_mask as u32 & self.packed_ways;
        let policy = self.policy;
        let (psel, count) = (&mut self.psel, &mut self.brrip_count);
        let insert = || insert_rrpv::<VOTE>(policy, psel, count, set_index);
        let (hit, evicted) = match &mut self.packed {
            Packed::No => return self.access_rrip_flat::<VOTE>(set_index, line, way_mask),
            Packed::Ways8(sets) => packed_access(&mut sets[set_index].0, key, allowed, insert),
            Packed::Ways16(sets) => packed_access(&mut sets[set_index].0, key, allowed, insert),
        };
        if evicted == EMPTY {
            return (hit, INVALID);
        }
        // The evicted line: its tag above the set index, which is the set's within its slice.
        let set_in_slice = set_index as u64 & self.set_mask;
        (hit, u64::from(evicted >> 2) << self.set_bits | set_in_slice)
    }

    /// [`Cache::access_rrip`] on 8-byte tags and a separate array of RRPVs.
    #[inline(always)]
    fn access_rrip_flat<const VOTE: bool>(
        &mut self,
        set_index: usize,
        line: u64,
        way_mask: u64,
    ) -> (bool, u64) {
        let ways = self.ways;
        let base = set_index * ways;
        let set = &mut self.tags[base..base + ways];
        let rrpv = &mut self.rrpv[base..base + ways];
        if let Some(i) = set.iter().position(|&t| t == line) {
            rrpv[i] = 0;
            return (true, INVALID);
        }
        let allowed = |i: usize| way_mask >> i & 1 == 1;
        // Victim among the allowed ways: an empty slot, else the first slot predicted
        // re-referenced most distantly (age the allowed ways until one is).
        let victim = if let Some(i) = (0..ways).find(|&i| allowed(i) && set[i] == INVALID) {
            i
        } else {
            loop {
                if let Some(i) = (0..ways).find(|&i| allowed(i) && rrpv[i] >= RRPV_MAX) {
                    break i;
                }
                for (i, r) in rrpv.iter_mut().enumerate() {
                    if allowed(i) {
                        *r += 1;
                    }
                }
            }
        };
        let insert = insert_rrpv::<VOTE>(
            self.policy,
            &mut self.psel,
            &mut self.brrip_count,
            set_index,
        );
        let evicted = std::mem::replace(&mut set[victim], line);
        rrpv[victim] = insert;
        (false, evicted)
    }

    /// Drop `line` if present (its frame changed). True if it was cached.
    #[inline(always)]
    pub fn invalidate_line(&mut self, line: u64) -> bool {
        let set_index = self.set_of(line);
        let key = self.packed_key(line);
        let word = match &mut self.packed {
            Packed::No => return self.invalidate_flat(line),
            Packed::Ways8(sets) => packed_slot(&mut sets[set_index].0, key),
            Packed::Ways16(sets) => packed_slot(&mut sets[set_index].0, key),
        };
        word.map(|w| *w = EMPTY).is_some()
    }

    /// [`Cache::invalidate_line`] on 8-byte tags.
    #[inline(always)]
    fn invalidate_flat(&mut self, line: u64) -> bool {
        let base = self.set_base(line);
        let ways = self.ways;
        let set = &mut self.tags[base..base + ways];
        let Some(i) = set.iter().position(|&t| t == line) else {
            return false;
        };
        if self.policy == Policy::Lru {
            // Keep MRU order: the freed slot becomes the least recently used.
            set[i..].rotate_left(1);
            set[ways - 1] = INVALID;
        } else {
            set[i] = INVALID;
            self.rrpv[base + i] = RRPV_MAX;
        }
        true
    }

    /// Drop every line of the physical range `[start, start + len)`.
    pub fn invalidate_range(&mut self, start: u64, len: u64) {
        let first = start >> self.line_shift;
        let last = start.saturating_add(len.max(1) - 1) >> self.line_shift;
        for line in first..=last {
            self.invalidate_line(line);
        }
    }

    /// True if `line` is cached (no state change).
    #[inline(always)]
    pub fn contains_line(&self, line: u64) -> bool {
        let set_index = self.set_of(line);
        let key = self.packed_key(line);
        match &self.packed {
            Packed::No => {
                let base = set_index * self.ways;
                self.tags[base..base + self.ways].contains(&line)
            }
            Packed::Ways8(sets) => packed_hits(&sets[set_index].0, key) != 0,
            Packed::Ways16(sets) => packed_hits(&sets[set_index].0, key) != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(policy: Policy) -> Cache {
        // 4 sets, 2 ways, 64 B lines.
        Cache::new(CacheGeometry::new(64, 4, 2, 1, 4096).unwrap(), policy)
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut c = small(Policy::Lru);
        // Lines 0, 4, 8 all map to set 0.
        assert!(!c.access_line(0));
        assert!(!c.access_line(4));
        assert!(c.access_line(0)); // 0 is now MRU, 4 LRU
        assert!(!c.access_line(8)); // evicts 4
        assert!(c.access_line(0));
        assert!(!c.access_line(4));
        assert!(!c.contains_line(8) || !c.contains_line(0));
    }

    #[test]
    fn straddling_access_touches_both_lines_and_counts_one_miss() {
        let mut c = small(Policy::Lru);
        assert!(!c.access(60, 8)); // lines 0 and 1
        assert!(c.contains_line(0) && c.contains_line(1));
        assert!(c.access(60, 8));
        assert!(c.invalidate_line(1));
        assert!(!c.access(60, 8), "one line missing is a miss");
    }

    #[test]
    fn invalidate_frees_a_slot_without_evicting_others() {
        let mut c = small(Policy::Lru);
        c.access_line(0);
        c.access_line(4);
        c.invalidate_range(0, 64);
        assert!(!c.contains_line(0));
        c.access_line(8);
        assert!(c.contains_line(4), "the invalid slot is reused first");
    }

    #[test]
    fn srrip_protects_reused_lines_from_a_scan() {
        // 1 set of 4 ways: two reused lines survive a long scan under SRRIP but not LRU.
        let g = CacheGeometry::new(64, 1, 4, 1, 64).unwrap();
        for (policy, expect_survive) in [(Policy::Srrip, true), (Policy::Lru, false)] {
            let mut c = Cache::new(g, policy);
            for _ in 0..3 {
                c.access_line(1);
                c.access_line(2);
            }
            let mut hits = 0;
            for scan in 100..180u64 {
                c.access_line(scan);
                if scan % 4 == 0 {
                    hits += c.access_line(1) as u32 + c.access_line(2) as u32;
                }
            }
            assert_eq!(hits > 30, expect_survive, "{policy:?}: {hits}");
        }
    }

    proptest::proptest! {
        /// The flat-array LRU agrees with a plain list-per-set model on every access,
        /// invalidations included.
        #[test]
        fn lru_matches_a_reference_model(
            ops in proptest::collection::vec((0u64..64, proptest::bool::weighted(0.1)), 1..400),
            ways in 1u64..5,
        ) {
            let sets = 4u64;
            let mut c = Cache::new(CacheGeometry::new(64, sets, ways, 1, 4096).unwrap(), Policy::Lru);
            let mut model: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); sets as usize];
            for (line, invalidate) in ops {
                let set = &mut model[(line % sets) as usize];
                let pos = set.iter().position(|&l| l == line);
                if invalidate {
                    proptest::prop_assert_eq!(c.invalidate_line(line), pos.is_some());
                    if let Some(i) = pos {
                        set.remove(i);
                    }
                    continue;
                }
                let hit = c.access_line(line);
                proptest::prop_assert_eq!(hit, pos.is_some());
                if let Some(i) = pos {
                    set.remove(i);
                } else if set.len() == ways as usize {
                    set.pop_back();
                }
                set.push_front(line);
            }
        }
    }

    #[test]
    fn rrip_caches_pack_their_sets_when_every_tag_fits() {
        let packed = |mib: u64, ways, slices, policy, lines| {
            let g = CacheGeometry::from_size(mib << 20, 64, ways, slices, 4096).unwrap();
            !matches!(Cache::with_line_limit(g, policy, lines).packed, Packed::No)
        };
        // zen4-like's, neoverse-like's and spr-like's LLCs with 8 GiB of memory; 16 and 15
        // ways fill a 16-word set, 8 ways an 8-word one.
        let memory = (8u64 << 30) / 64;
        assert!(packed(32, 16, 1, Policy::Drrip, memory));
        assert!(packed(32, 16, 16, Policy::Drrip, memory));
        assert!(packed(15, 15, 8, Policy::Drrip, memory));
        assert!(packed(32, 8, 4, Policy::Srrip, memory));
        // Not: LRU, more than 16 ways, lines without a known bound, tags of 30 bits (a
        // 32 MiB cache of 16 ways has 15 set bits).
        assert!(!packed(32, 16, 1, Policy::Lru, memory));
        assert!(!packed(32, 32, 1, Policy::Drrip, memory));
        assert!(!packed(32, 16, 1, Policy::Brrip, u64::MAX));
        assert!(!packed(32, 16, 1, Policy::Drrip, TAG_LIMIT << 15 | 1));
        assert!(packed(32, 16, 1, Policy::Drrip, TAG_LIMIT << 15));
    }

    proptest::proptest! {
        /// Packed sets give every answer the flat layout gives (hits, evicted lines,
        /// invalidations, lookups) under every RRIP policy, way count up to 16, way mask
        /// and number of slices, on lines up to the tag limit.
        #[test]
        fn packed_sets_match_the_flat_layout(
            ops in proptest::collection::vec((0u8..5, 0u64..400, 1u64..u64::MAX), 1..600),
            ways in 1u64..17,
            sets_bits in 0u32..3,
            slices in 1u64..4,
            policy in proptest::sample::select(vec![Policy::Srrip, Policy::Brrip, Policy::Drrip]),
        ) {
            let g = CacheGeometry::new(64, 1 << sets_bits, ways, slices, 4096).unwrap();
            let mut flat = Cache::new(g, policy);
            let lines = TAG_LIMIT << sets_bits;
            let mut packed = Cache::with_line_limit(g, policy, lines);
            proptest::prop_assert!(matches!(flat.packed, Packed::No));
            proptest::prop_assert!(!matches!(packed.packed, Packed::No));
            for (op, line, mask) in ops {
                // Lines near 0 and near the limit, so that the tags' top bits are used too.
                let line = if line % 2 == 0 { line } else { lines - 1 - line };
                let mask = mask & flat.all_ways();
                let mask = if mask == 0 { flat.all_ways() } else { mask };
                match op {
                    0 => proptest::prop_assert_eq!(flat.access_line(line), packed.access_line(line)),
                    1 => proptest::prop_assert_eq!(
                        flat.access_line_evicting(line, mask),
                        packed.access_line_evicting(line, mask)
                    ),
                    2 => proptest::prop_assert_eq!(
                        flat.fill_line_evicting(line, mask),
                        packed.fill_line_evicting(line, mask)
                    ),
                    3 => proptest::prop_assert_eq!(flat.invalidate_line(line), packed.invalidate_line(line)),
                    _ => {
                        flat.demand_missed(line);
                        packed.demand_missed(line);
                    }
                }
                proptest::prop_assert_eq!(flat.contains_line(line), packed.contains_line(line));
                proptest::prop_assert_eq!(flat.psel, packed.psel);
            }
        }
    }

    #[test]
    fn disjoint_way_masks_make_private_caches() {
        // What a capacity bitmask means (Intel SDM Vol. 3B, 18.19): a fill only goes to a
        // way of the filler's mask. Two processes with disjoint masks therefore each see a
        // private cache of their ways: every hit and miss is the one they would have alone
        // in a cache of that many ways.
        let geometry = |ways| CacheGeometry::new(64, 4, ways, 1, 4096).unwrap();
        let mut shared = Cache::new(geometry(8), Policy::Srrip);
        let mut alone = [
            Cache::new(geometry(3), Policy::Srrip),
            Cache::new(geometry(5), Policy::Srrip),
        ];
        let masks = [0b0000_0111, 0b1111_1000];
        let mut x = 3u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let who = (x >> 63) as usize;
            let line = 1000 * who as u64 + (x >> 20) % 40;
            let (hit, evicted) = shared.access_line_evicting(line, masks[who]);
            assert_eq!(hit, alone[who].access_line(line), "line {line}");
            assert!(
                evicted.is_none_or(|e| e / 1000 == who as u64),
                "only its own lines"
            );
        }
    }

    #[test]
    fn brrip_and_drrip_keep_part_of_a_thrashing_loop_where_lru_keeps_none() {
        // A loop over twice the cache's lines (Jaleel et al., "High Performance Cache
        // Replacement Using Re-Reference Interval Prediction", ISCA 2010, Sec. 3): LRU
        // evicts every line just before its reuse and never hits. BRRIP inserts all but
        // one fill in 32 at the distant interval, where the next fill replaces it: one
        // way of each set churns and the other `ways - 1` keep lines of the loop, which
        // hit, (ways - 1) / (2 ways) of the accesses, 3/8 here. DRRIP's set dueling picks
        // BRRIP for its follower sets; its SRRIP leader sets (one in 64) hit nothing:
        // 3/8 x 63/64 = 0.369.
        let geometry = CacheGeometry::new(64, 128, 4, 1, 4096).unwrap();
        let lines = 2 * 128 * 4;
        for (policy, at_least, at_most) in [
            (Policy::Lru, 0.0, 0.0),
            (Policy::Brrip, 0.36, 0.38),
            (Policy::Drrip, 0.36, 0.37),
        ] {
            let mut c = Cache::new(geometry, policy);
            let (mut hits, mut accesses) = (0u32, 0u32);
            for round in 0..40 {
                for line in 0..lines {
                    let hit = c.access_line(line);
                    // Past the warm-up rounds.
                    if round >= 8 {
                        hits += hit as u32;
                        accesses += 1;
                    }
                }
            }
            let rate = f64::from(hits) / f64::from(accesses);
            assert!(
                (at_least..=at_most).contains(&rate),
                "{policy:?}: hit rate {rate:.3}, expected {at_least}..={at_most}"
            );
        }
    }
}
