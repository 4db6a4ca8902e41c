//! The miss-rate stack built from a page profile: ordered, complete, regions kept together.

use std::collections::HashSet;

use crate::common::SHIFT;
use proptest::prelude::*;
use rocs_core::{build_stack, DataSource, PageProfile, RegionParams};

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The stack is ordered by miss rate, holds every page with LLC samples once, and
    /// keeps each region's pages together.
    #[test]
    fn stack_order_invariant(pages in prop::collection::vec((0u64..400, 0u32..20, 0u32..20), 1..300),
                             tol in 0.0f64..0.5, min_samples in 1u32..10, gap in 0u32..8) {
        let mut p = PageProfile::new(SHIFT);
        for &(page, h, m) in &pages {
            for _ in 0..h { p.record(page << SHIFT, DataSource::LlcHit); }
            for _ in 0..m { p.record(page << SHIFT, DataSource::LlcMiss); }
        }
        let b = build_stack(&p, &RegionParams { min_samples, tolerance: tol, max_gap: gap });
        let e = b.stack.entries();
        for w in e.windows(2) {
            prop_assert!(w[0].miss_rate >= w[1].miss_rate);
        }
        let in_stack: HashSet<u64> = e.iter().map(|x| x.page.0).collect();
        prop_assert_eq!(in_stack.len(), e.len(), "a page appears twice");
        for (page, c) in p.iter() {
            if c.llc_samples() > 0 {
                prop_assert!(in_stack.contains(&page.0));
            }
        }
        // Regions are disjoint, ordered, and cover exactly the stack's pages.
        let covered: u64 = b.regions.iter().map(|r| r.pages()).sum();
        prop_assert_eq!(covered as usize, e.len());
        for w in b.regions.windows(2) {
            prop_assert!(w[0].last < w[1].first);
        }
    }
}
