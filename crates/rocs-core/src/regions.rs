//! From a page profile to a miss-rate stack, through regions.
//!
//! ROCS Fig. 3 shows that programs are made of a few regions of uniform cache behaviour.
//! Sampling gives each page only a handful of samples, so a page's own miss rate is a noisy
//! estimate. Like DAMON, we merge address-adjacent pages of similar miss rate into regions,
//! rank the regions by miss rate, and expand them into pages in stack order: a page with too
//! few samples is never ranked alone, it takes its region's rate.

use serde::{Deserialize, Serialize};

use crate::{MissRateStack, PageProfile, StackEntry, VirtPage};

/// How regions are formed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionParams {
    /// LLC samples a page needs to stand on its own.
    pub min_samples: u32,
    /// Miss rates closer than this (plus the sampling error) merge.
    pub tolerance: f64,
    /// Unsampled pages in a row that may lie inside one region.
    pub max_gap: u32,
}

impl Default for RegionParams {
    fn default() -> Self {
        RegionParams {
            min_samples: 4,
            tolerance: 0.10,
            max_gap: 4,
        }
    }
}

/// A run of address-adjacent pages with one miss rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Region {
    /// First and last page (inclusive).
    pub first: VirtPage,
    pub last: VirtPage,
    /// Pages of the region that have samples.
    pub sampled_pages: u64,
    pub hits: u64,
    pub misses: u64,
    /// The rate the region is ranked by.
    pub miss_rate: f64,
}

impl Region {
    /// Pages covered, sampled or not.
    pub fn pages(&self) -> u64 {
        self.last.0 - self.first.0 + 1
    }

    fn samples(&self) -> u64 {
        self.hits + self.misses
    }

    fn raw_rate(&self) -> f64 {
        self.misses as f64 / self.samples().max(1) as f64
    }
}

/// Two standard errors: differences within this are not evidence of different rates.
const MERGE_Z: f64 = 2.0;

/// Whether two estimated miss rates may be the same underlying rate.
fn similar(a: &Region, b: &Region, tol: f64) -> bool {
    similar_rates((a.misses, a.samples()), (b.misses, b.samples()), tol)
}

/// `similar` on (misses, samples) counts.
fn similar_rates(a: (u64, u64), b: (u64, u64), tol: f64) -> bool {
    let (na, nb) = (a.1.max(1) as f64, b.1.max(1) as f64);
    let (ra, rb) = (a.0 as f64 / na, b.0 as f64 / nb);
    let pooled = (a.0 + b.0) as f64 / (na + nb);
    let se = (pooled * (1.0 - pooled) * (1.0 / na + 1.0 / nb)).sqrt();
    (ra - rb).abs() <= tol + MERGE_Z * se
}

fn merge(a: &Region, b: &Region) -> Region {
    Region {
        first: a.first.min(b.first),
        last: a.last.max(b.last),
        sampled_pages: a.sampled_pages + b.sampled_pages,
        hits: a.hits + b.hits,
        misses: a.misses + b.misses,
        miss_rate: 0.0,
    }
}

/// The stack and the regions it was built from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StackBuild {
    pub stack: MissRateStack,
    /// Regions ordered by address.
    pub regions: Vec<Region>,
}

impl StackBuild {
    /// Whether `page` is in the stack: the stack is the pages of the regions, every one.
    pub fn contains(&self, page: VirtPage) -> bool {
        self.region_of(page).is_some()
    }

    /// The region `page` lies in, if any.
    pub fn region_of(&self, page: VirtPage) -> Option<&Region> {
        let i = self.regions.partition_point(|r| r.last < page);
        self.regions.get(i).filter(|r| r.first <= page)
    }
}

/// Address-ordered regions that sampling cannot tell apart, taken together: what a bound
/// on the whole region (how much of it the LLC can hold) must count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionPool {
    /// The regions' pages, and the unsampled gaps between them that sampling explains.
    pub pages: u64,
    pub hits: u64,
    pub misses: u64,
}

impl RegionPool {
    fn of(r: &Region) -> Self {
        RegionPool {
            pages: r.pages(),
            hits: r.hits,
            misses: r.misses,
        }
    }

    pub fn samples(&self) -> u64 {
        self.hits + self.misses
    }

    pub fn miss_rate(&self) -> f64 {
        self.misses as f64 / self.samples().max(1) as f64
    }
}

/// `regions` (ordered by address) pooled where each next region's miss rate is within
/// sampling error of the pool's so far and the unsampled gap before it is one that sampling
/// leaves. A region sampled about once a page is cut wherever a few pages in a row drew no
/// sample, and its pieces' rates and samples per page scatter: a bound that fills the LLC
/// with the densest pieces first would take that scatter for pieces that fit.
pub fn pool_regions(regions: &[Region], params: &RegionParams) -> Vec<RegionPool> {
    let longest_gap = sampling_gap(regions, params);
    let rates = |p: &RegionPool| (p.misses, p.samples());
    // (pool, its first page, its last page). Regions without samples (a stream's mapping
    // beyond its profile's reach) tell nothing of how the program uses its pages.
    let mut pools: Vec<(RegionPool, VirtPage, VirtPage)> = regions
        .iter()
        .filter(|r| r.samples() > 0)
        .map(|r| (RegionPool::of(r), r.first, r.last))
        .collect();
    // As build_stack's second pass: a pool's rate firms up as it grows, so a piece that
    // stopped one may join it later; merge until nothing changes.
    loop {
        let mut merged: Vec<(RegionPool, VirtPage, VirtPage)> = Vec::with_capacity(pools.len());
        let mut changed = false;
        for (next, first, last) in pools {
            if let Some((pool, _, pool_last)) = merged.last_mut() {
                let gap = first.0.saturating_sub(pool_last.0 + 1);
                if gap <= longest_gap && similar_rates(rates(pool), rates(&next), params.tolerance)
                {
                    pool.pages += gap + next.pages;
                    pool.hits += next.hits;
                    pool.misses += next.misses;
                    *pool_last = last;
                    changed = true;
                    continue;
                }
            }
            merged.push((next, first, last));
        }
        pools = merged;
        if !changed {
            break;
        }
    }
    pools.into_iter().map(|(pool, _, _)| pool).collect()
}

/// The longest run of unsampled pages that sampling leaves inside a region (at least
/// `max_gap`). Were samples to fall on pages at random, d per page, a page would go
/// unsampled with probability e^-d, and the S gaps after S sampled pages would all be
/// shorter than ln(100 S) / d pages but one time in a hundred. d is what makes the sampled
/// pages' mean samples, n / S, equal d / (1 - e^-d), its mean given at least one.
fn sampling_gap(regions: &[Region], params: &RegionParams) -> u64 {
    let samples: u64 = regions.iter().map(Region::samples).sum();
    let sampled: u64 = regions.iter().map(|r| r.sampled_pages).sum();
    let floor = u64::from(params.max_gap);
    if sampled < 2 {
        return floor;
    }
    let per_sampled_page = samples as f64 / sampled as f64;
    let mean_given_one = |d: f64| d / -(-d).exp_m1();
    // Bisection: mean_given_one rises from 1 (d -> 0) without bound.
    let (mut lo, mut hi) = (1e-6, 64.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if mean_given_one(mid) < per_sampled_page {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let gap = (100.0 * sampled as f64).ln() / lo;
    let pages: u64 = regions.iter().map(Region::pages).sum();
    (gap.min(pages as f64) as u64).max(floor)
}

/// Build regions from `profile` and expand them into a miss-rate stack.
///
/// Every page with at least one LLC sample is in the stack exactly once, and so is every
/// unsampled page lying inside a region (a hole of at most `max_gap` pages between sampled
/// pages of similar rate). Pages of one region are contiguous in the stack.
pub fn build_stack(profile: &PageProfile, params: &RegionParams) -> StackBuild {
    let pages: Vec<Region> = profile
        .sorted()
        .into_iter()
        .filter(|(_, c)| c.llc_samples() > 0)
        .map(|(p, c)| Region {
            first: p,
            last: p,
            sampled_pages: 1,
            hits: c.hits as u64,
            misses: c.misses as u64,
            miss_rate: 0.0,
        })
        .collect();
    if pages.is_empty() {
        return StackBuild::default();
    }
    let adjacent = |a: &Region, b: &Region| b.first.0 - a.last.0 <= params.max_gap as u64 + 1;
    let min = params.min_samples as u64;

    // Pass 1: left to right, grow a region while the next page is adjacent and either
    // similar or too thinly sampled to say otherwise.
    let mut regions: Vec<Region> = Vec::new();
    for p in pages {
        match regions.last_mut() {
            Some(r)
                if adjacent(r, &p)
                    && (p.samples() < min
                        || r.samples() < min
                        || similar(r, &p, params.tolerance)) =>
            {
                *r = merge(r, &p);
            }
            _ => regions.push(p),
        }
    }
    // Pass 2: merge adjacent regions that turned out similar (a running mean can split a
    // uniform region early), until nothing changes.
    loop {
        let mut merged = Vec::with_capacity(regions.len());
        let mut changed = false;
        for r in regions {
            match merged.last_mut() {
                Some(prev) if adjacent(prev, &r) && similar(prev, &r, params.tolerance) => {
                    *prev = merge(prev, &r);
                    changed = true;
                }
                _ => merged.push(r),
            }
        }
        regions = merged;
        if !changed {
            break;
        }
    }

    // Rates: a region with enough samples has its own; a thin isolated one is pulled
    // towards the profile's overall rate, so a page seen once or twice never tops the stack.
    let (all_hits, all_misses) = regions
        .iter()
        .fold((0, 0), |(h, m), r| (h + r.hits, m + r.misses));
    let global = all_misses as f64 / (all_hits + all_misses).max(1) as f64;
    for r in &mut regions {
        let n = r.samples();
        r.miss_rate = if n >= min {
            r.raw_rate()
        } else {
            (r.misses as f64 + (min - n) as f64 * global) / min as f64
        };
    }

    // Expand: every page of the region (sampled or in a hole) gets the region's rate; the
    // stack orders by rate, then more misses, then address, so a region stays contiguous
    // unless two regions have exactly the same rate.
    let mut entries = Vec::new();
    for r in &regions {
        for page in r.first.0..=r.last.0 {
            let c = profile.get(VirtPage(page)).unwrap_or_default();
            entries.push(StackEntry {
                page: VirtPage(page),
                hits: c.hits as u64,
                misses: c.misses as u64,
                miss_rate: r.miss_rate,
            });
        }
    }
    StackBuild {
        stack: MissRateStack::from_entries(entries),
        regions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataSource::*;

    fn record(p: &mut PageProfile, page: u64, hits: u32, misses: u32) {
        for _ in 0..hits {
            p.record(page << 12, LlcHit);
        }
        for _ in 0..misses {
            p.record(page << 12, LlcMiss);
        }
    }

    #[test]
    fn uniform_regions_merge_and_rank_by_rate() {
        // An art-like profile: pages 100..110 streamed (80% miss), 120..125 reused (40%).
        let mut p = PageProfile::new(12);
        for page in 100..110 {
            record(&mut p, page, 2, 8);
        }
        for page in 120..126 {
            record(&mut p, page, 6, 4);
        }
        let b = build_stack(&p, &RegionParams::default());
        assert_eq!(b.regions.len(), 2, "{:?}", b.regions);
        assert_eq!(
            (b.regions[0].first, b.regions[0].last),
            (VirtPage(100), VirtPage(109))
        );
        let order: Vec<u64> = b.stack.top(16).map(|v| v.0).collect();
        assert!(order[..10].iter().all(|p| (100..110).contains(p)));
        assert!(order[10..].iter().all(|p| (120..126).contains(p)));
        // The stack is exactly the regions' pages.
        for page in 90..140 {
            let in_stack = b.stack.top(usize::MAX).any(|v| v.0 == page);
            assert_eq!(b.contains(VirtPage(page)), in_stack, "page {page}");
        }
    }

    #[test]
    fn thin_pages_are_not_ranked_alone() {
        // One sample, a miss, on an isolated page: its own rate would be 100% and put it on
        // top. It is pulled towards the overall rate instead.
        let mut p = PageProfile::new(12);
        for page in 0..10 {
            record(&mut p, page, 1, 9);
        }
        for page in 100..110 {
            record(&mut p, page, 9, 1);
        }
        record(&mut p, 1000, 0, 1);
        let b = build_stack(&p, &RegionParams::default());
        let pos = b.stack.top(21).position(|v| v == VirtPage(1000)).unwrap();
        assert_eq!(pos, 10, "after the 90% region, before the 10% one");
        // A thin page inside a region takes the region's rate.
        let mut p = PageProfile::new(12);
        for page in 0..20 {
            if page == 7 {
                record(&mut p, page, 1, 0);
            } else {
                record(&mut p, page, 1, 9);
            }
        }
        let b = build_stack(&p, &RegionParams::default());
        assert_eq!(b.regions.len(), 1);
        assert_eq!(b.stack.len(), 20);
    }

    #[test]
    fn holes_inside_a_region_are_filled_but_not_across_a_gap() {
        let mut p = PageProfile::new(12);
        for page in [0u64, 2, 4, 6, 20, 22] {
            record(&mut p, page, 1, 9);
        }
        let b = build_stack(&p, &RegionParams::default());
        assert_eq!(b.regions.len(), 2);
        assert_eq!(b.stack.len(), 7 + 3);
    }

    /// Samples of a random walk over `pages` pages from `first`: `samples` of them, on pages
    /// a hash picks, a hit one time in three.
    fn sparse(p: &mut PageProfile, first: u64, pages: u64, samples: u64) {
        for i in 0..samples {
            let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let page = first + (x ^ (x >> 29)) % pages;
            if i % 3 == 0 {
                record(p, page, 1, 0);
            } else {
                record(p, page, 0, 1);
            }
        }
    }

    #[test]
    fn a_sparsely_sampled_region_pools_into_one_with_its_gaps() {
        // 600 samples over 2048 pages: a third of the pages unsampled, in runs long enough
        // to cut the region into pieces.
        let mut p = PageProfile::new(12);
        sparse(&mut p, 0, 2048, 600);
        let params = RegionParams::default();
        let b = build_stack(&p, &params);
        assert!(b.regions.len() > 10, "{} regions", b.regions.len());
        let pools = pool_regions(&b.regions, &params);
        assert_eq!(pools.len(), 1, "{pools:?}");
        assert!(pools[0].pages > 2000 && pools[0].pages <= 2048, "{pools:?}");
        assert_eq!(pools[0].samples(), 600);
    }

    #[test]
    fn pools_keep_apart_what_sampling_tells_apart() {
        // Two regions side by side, sampled as densely, one missing on nine loads in ten and
        // the other on one in ten; and a third like the second beyond a gap of 200 pages,
        // longer than any the sampling leaves.
        let mut p = PageProfile::new(12);
        for page in 0..32 {
            record(&mut p, page, 1, 9);
            record(&mut p, 32 + page, 9, 1);
            record(&mut p, 264 + page, 9, 1);
        }
        let params = RegionParams::default();
        let b = build_stack(&p, &params);
        let pools = pool_regions(&b.regions, &params);
        let pages: Vec<u64> = pools.iter().map(|p| p.pages).collect();
        assert_eq!(pages, [32, 32, 32], "{pools:?}");
    }
}
