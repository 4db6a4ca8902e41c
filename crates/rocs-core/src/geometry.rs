//! Cache geometry and page colours.
//!
//! A colour is the part of a physical address's set index that lies above the page offset:
//! two frames of the same colour compete for the same cache sets. On a sliced LLC the slice
//! hash picks the slice and the set inside a slice comes from plain address bits, so colours
//! are counted per slice: `colours = sets_per_slice * line_size / page_size`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The shape of one cache level, plus the page size that colours are counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheGeometry {
    /// Bytes per cache line.
    pub line_size: u64,
    /// Sets in one slice.
    pub sets_per_slice: u64,
    /// Associativity.
    pub ways: u64,
    /// Number of slices (1 for an unsliced cache; need not be a power of two: a slice hash
    /// spreads lines over them).
    pub slices: u64,
    /// Bytes per page (the unit the OS maps).
    pub page_size: u64,
}

/// Why a geometry cannot exist.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GeometryError {
    #[error("{field} must be a power of two greater than zero, got {value}")]
    NotPowerOfTwo { field: &'static str, value: u64 },
    #[error("ways must be at least 1, got {0}")]
    NoWays(u64),
    #[error("slices must be at least 1, got {0}")]
    NoSlices(u64),
    #[error("page size {page} is smaller than the line size {line}")]
    PageSmallerThanLine { page: u64, line: u64 },
    #[error("cache size {size} is not ways * sets * line * slices for any power-of-two sets")]
    SizeMismatch { size: u64 },
}

impl CacheGeometry {
    /// Build and validate a geometry.
    pub fn new(
        line_size: u64,
        sets_per_slice: u64,
        ways: u64,
        slices: u64,
        page_size: u64,
    ) -> Result<Self, GeometryError> {
        let g = CacheGeometry {
            line_size,
            sets_per_slice,
            ways,
            slices,
            page_size,
        };
        g.validate()?;
        Ok(g)
    }

    /// Build from a total size (all slices), as /sys and data sheets state it.
    pub fn from_size(
        size: u64,
        line_size: u64,
        ways: u64,
        slices: u64,
        page_size: u64,
    ) -> Result<Self, GeometryError> {
        let per_set = line_size
            .checked_mul(ways)
            .and_then(|v| v.checked_mul(slices))
            .filter(|&v| v > 0)
            .ok_or(GeometryError::SizeMismatch { size })?;
        if !size.is_multiple_of(per_set) {
            return Err(GeometryError::SizeMismatch { size });
        }
        Self::new(line_size, size / per_set, ways, slices, page_size)
    }

    /// Check that every field describes a cache that can exist and that colours make sense.
    pub fn validate(&self) -> Result<(), GeometryError> {
        for (field, value) in [
            ("line_size", self.line_size),
            ("sets_per_slice", self.sets_per_slice),
            ("page_size", self.page_size),
        ] {
            if value == 0 || !value.is_power_of_two() {
                return Err(GeometryError::NotPowerOfTwo { field, value });
            }
        }
        if self.ways == 0 {
            return Err(GeometryError::NoWays(self.ways));
        }
        if self.slices == 0 {
            return Err(GeometryError::NoSlices(self.slices));
        }
        if self.page_size < self.line_size {
            return Err(GeometryError::PageSmallerThanLine {
                page: self.page_size,
                line: self.line_size,
            });
        }
        Ok(())
    }

    /// Total capacity in bytes, all slices.
    pub fn size(&self) -> u64 {
        self.line_size * self.sets_per_slice * self.ways * self.slices
    }

    /// Bytes of one way of one slice: the span of addresses that maps onto every set once.
    pub fn way_span(&self) -> u64 {
        self.line_size * self.sets_per_slice
    }

    /// Number of page colours (at least 1: a cache whose way is smaller than a page has one).
    pub fn colours(&self) -> u32 {
        (self.way_span() / self.page_size).max(1) as u32
    }

    /// log2 of the page size.
    pub fn page_shift(&self) -> u32 {
        self.page_size.trailing_zeros()
    }

    /// Colour of the physical frame with frame number `pfn`.
    #[inline]
    pub fn colour_of_frame(&self, pfn: u64) -> crate::Colour {
        crate::Colour((pfn & (self.colours() as u64 - 1)) as u32)
    }

    /// Colour of a physical address.
    #[inline]
    pub fn colour_of_paddr(&self, paddr: u64) -> crate::Colour {
        self.colour_of_frame(paddr >> self.page_shift())
    }
}

/// Where pages leaving the pollute colours go (each with [`crate::Placement::Ordinary`]):
/// each onto the colour of `ordinary` that holds the fewest reused pages so far, then the
/// fewest pages, then the lowest. `staying` are the colours of the program's pages that
/// stay outside the buffer, each with whether it looks reused (a stream's page passes
/// through its colour, a reused page stays in it); `pages` the pages leaving, each with
/// the same, counted on its colour once sent. Pages the allocator put in the buffer have
/// no colour of their own to go back to, and sent at random, a few of them can over-fill
/// a colour whose pages the program reuses. Returns the pages by colour; nothing when
/// there is no ordinary colour.
pub fn spread_over_colours(
    ordinary: &[crate::Colour],
    staying: impl IntoIterator<Item = (crate::Colour, bool)>,
    pages: &[(crate::VirtPage, bool)],
) -> std::collections::BTreeMap<crate::Colour, Vec<crate::VirtPage>> {
    use std::collections::BTreeMap;
    // Per colour: reused pages, all pages.
    let mut held: BTreeMap<crate::Colour, (usize, usize)> =
        ordinary.iter().map(|&c| (c, (0, 0))).collect();
    let count = |held: &mut (usize, usize), reused: bool| {
        held.0 += usize::from(reused);
        held.1 += 1;
    };
    for (colour, reused) in staying {
        if let Some(n) = held.get_mut(&colour) {
            count(n, reused);
        }
    }
    let mut sent: BTreeMap<crate::Colour, Vec<crate::VirtPage>> = BTreeMap::new();
    for &(page, reused) in pages {
        let Some((&colour, n)) = held.iter_mut().min_by_key(|(c, n)| (**n, **c)) else {
            break;
        };
        count(n, reused);
        sent.entry(colour).or_default().push(page);
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_leaving_the_buffer_fill_the_emptiest_colours_first() {
        use crate::{Colour, VirtPage};
        // Colour 3 is the buffer. Colour 0 holds two reused pages staying, colour 1 one
        // reused and two streamed, colour 2 one reused (colour 3's and 9's pages count
        // for none).
        let staying = [
            (0, true),
            (0, true),
            (1, true),
            (1, false),
            (1, false),
            (2, true),
        ]
        .map(|(c, reused)| (Colour(c), reused))
        .into_iter()
        .chain([(Colour(3), true), (Colour(9), true)]);
        let pages: Vec<(VirtPage, bool)> = [(10, true), (11, false), (12, true), (13, true)]
            .map(|(p, reused)| (VirtPage(p), reused))
            .to_vec();
        let sent = spread_over_colours(&[Colour(0), Colour(1), Colour(2)], staying.clone(), &pages);
        let by_colour: Vec<(u32, Vec<u64>)> = sent
            .into_iter()
            .map(|(c, p)| (c.0, p.into_iter().map(|p| p.0).collect()))
            .collect();
        // 10: colours 1 and 2 hold the fewest reused pages (one), 2 the fewest pages.
        // 11: 1 now holds the fewest reused pages. 12: still 1 (a stream's page does not
        // count as reused). 13: 0 and 2 tie at two reused pages of two, 0 is lower.
        assert_eq!(
            by_colour,
            vec![(0, vec![13]), (1, vec![11, 12]), (2, vec![10])]
        );
        assert!(spread_over_colours(&[], staying, &pages).is_empty());
    }

    #[test]
    fn ppc970fx_l2_has_sixteen_colours() {
        // ROCS Table 1: 512 KB, 8-way, 128 B lines, 4 KB pages -> 512 sets, 16 colours.
        let g = CacheGeometry::from_size(512 << 10, 128, 8, 1, 4096).unwrap();
        assert_eq!(g.sets_per_slice, 512);
        assert_eq!(g.colours(), 16);
        assert_eq!(g.colour_of_frame(0x13), crate::Colour(3));
        assert_eq!(g.colour_of_paddr(0x13_000 + 5), crate::Colour(3));
    }

    #[test]
    fn sliced_llc_counts_colours_per_slice() {
        // 2048 sets per slice, 64 B lines, 4 KB pages: 32 colours whatever the slice count.
        let g = CacheGeometry::new(64, 2048, 11, 28, 4096).unwrap();
        assert_eq!(g.colours(), 32);
        assert_eq!(g.size(), 64 * 2048 * 11 * 28);
    }

    #[test]
    fn small_way_has_one_colour() {
        let g = CacheGeometry::new(64, 32, 8, 1, 4096).unwrap();
        assert_eq!(g.colours(), 1);
    }

    #[test]
    fn impossible_geometries_are_refused_with_reason() {
        assert_eq!(
            CacheGeometry::new(64, 1000, 8, 1, 4096),
            Err(GeometryError::NotPowerOfTwo {
                field: "sets_per_slice",
                value: 1000
            })
        );
        assert_eq!(
            CacheGeometry::new(8192, 64, 8, 1, 4096),
            Err(GeometryError::PageSmallerThanLine {
                page: 4096,
                line: 8192
            })
        );
        assert_eq!(
            CacheGeometry::new(64, 64, 0, 1, 4096),
            Err(GeometryError::NoWays(0))
        );
        assert!(CacheGeometry::from_size(1000, 64, 8, 1, 4096).is_err());
    }
}
