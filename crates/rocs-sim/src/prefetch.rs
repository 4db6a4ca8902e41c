//! An L2 stream/stride prefetcher, trained per 4 KiB page like Intel's L2 streamer (Intel
//! 64 and IA-32 Architectures Optimization Reference Manual: it tracks up to 32 streams,
//! one per 4 KiB page and direction, runs up to 20 lines ahead of the loads, and never
//! crosses a 4 KiB page). It sees the L2's demand references (the L1's misses) by physical
//! line and says which lines to fetch; the hierarchy fetches them.

use crate::spec::PrefetchSpec;

/// The most lines one access may prefetch.
pub const MAX_DEGREE: usize = 16;
/// Streams are trained per 4 KiB page whatever the page size (prefetchers do not know it).
const TRAIN_PAGE: u64 = 4096;
const NO_PAGE: u64 = u64::MAX;

/// Page keys are compared in chunks of this many (see [`Prefetcher::find`]).
const CHUNK: usize = 16;
/// Slots of the filter of tracked pages.
const FILTER: usize = 256;

#[derive(Clone, Copy)]
struct Stream {
    /// Line index within the page of the last access.
    last: i64,
    stride: i64,
    /// Accesses in a row with this stride (the first access of a page counts one).
    run: u32,
    /// Next line index to prefetch.
    next: i64,
}

/// One core's L2 prefetcher.
#[derive(Clone)]
pub struct Prefetcher {
    streams: Vec<Stream>,
    /// The page each stream tracks (`NO_PAGE` for none yet).
    pages: Vec<u64>,
    /// `key(page)` of each stream's page, padded to a multiple of `CHUNK`: compared
    /// first, 32 bits at a time, apart from the rest so that a lookup scans a few cache
    /// lines; a match is then checked against the page itself.
    keys: Vec<u32>,
    /// How many tracked pages have each value of `key(page) % FILTER`: a page whose count
    /// is 0 is tracked by no stream, which spares most new pages the search.
    filter: Box<[u16; FILTER]>,
    /// For each filter slot, the stream that last took or was found tracking a page of
    /// that slot: checked first, so that a tracked page is mostly found without a search.
    /// Only a hint (a stream may have moved to another page since): a match is checked
    /// against the page itself.
    hint: Box<[u16; FILTER]>,
    /// The streams in order of use, a doubly linked list: `older[i]` was used just before
    /// stream i, `newer[i]` just after. Streams never used yet are the oldest, in index
    /// order, so the least recently used (the one a new page replaces) is the first of
    /// them, then the one used longest ago.
    older: Vec<u32>,
    newer: Vec<u32>,
    /// The least and the most recently used stream.
    oldest: usize,
    newest: usize,
    degree: u32,
    distance: i64,
    train: u32,
    /// log2 of lines per 4 KiB page.
    page_lines_shift: u32,
}

impl Prefetcher {
    /// A prefetcher for lines of `line_size` bytes (validated spec: at least one stream,
    /// degree <= MAX_DEGREE).
    pub fn new(spec: &PrefetchSpec, line_size: u64) -> Prefetcher {
        let blank = Stream {
            last: 0,
            stride: 0,
            run: 0,
            next: 0,
        };
        let n = spec.streams;
        Prefetcher {
            streams: vec![blank; n],
            pages: vec![NO_PAGE; n],
            keys: vec![key(NO_PAGE); n.next_multiple_of(CHUNK)],
            filter: Box::new([0; FILTER]),
            hint: Box::new([0; FILTER]),
            // The ends point at themselves; nothing reads them.
            older: (0..n as u32).map(|i| i.saturating_sub(1)).collect(),
            newer: (0..n as u32).map(|i| (i + 1).min(n as u32 - 1)).collect(),
            oldest: 0,
            newest: n - 1,
            degree: spec.degree.min(MAX_DEGREE as u32),
            distance: spec.distance as i64,
            train: spec.train,
            page_lines_shift: (TRAIN_PAGE / line_size.min(TRAIN_PAGE)).trailing_zeros(),
        }
    }

    /// Make stream `i` the most recently used.
    #[inline]
    fn touch(&mut self, i: usize) {
        if i == self.newest {
            return;
        }
        let (older, newer) = (self.older[i], self.newer[i]);
        if i == self.oldest {
            self.oldest = newer as usize;
        } else {
            self.newer[older as usize] = newer;
        }
        self.older[newer as usize] = older;
        self.older[i] = self.newest as u32;
        self.newer[self.newest] = i as u32;
        self.newest = i;
    }

    /// The stream that tracks `page`, if one does (at most one does): keys are compared a
    /// chunk at a time into a bit mask, without a branch per key (the compiler turns that
    /// into vector compares), and the pages of the keys that match are checked.
    #[inline]
    fn find(&mut self, page: u64) -> Option<usize> {
        let k = key(page);
        let slot = k as usize % FILTER;
        if self.filter[slot] == 0 {
            return None;
        }
        let hinted = self.hint[slot] as usize;
        if self.pages.get(hinted) == Some(&page) {
            return Some(hinted);
        }
        let found = self.search(page, k);
        if let Some(i) = found {
            self.hint[slot] = i as u16;
        }
        found
    }

    /// [`Prefetcher::find`]'s search of every stream's key `k` for `page`.
    #[inline]
    fn search(&self, page: u64, k: u32) -> Option<usize> {
        for (c, chunk) in self.keys.chunks_exact(CHUNK).enumerate() {
            let mut mask = 0u32;
            for (j, &v) in chunk.iter().enumerate() {
                mask |= ((v == k) as u32) << j;
            }
            while mask != 0 {
                let i = c * CHUNK + mask.trailing_zeros() as usize;
                if self.pages.get(i) == Some(&page) {
                    return Some(i);
                }
                mask &= mask - 1;
            }
        }
        None
    }

    /// The L2 saw a demand reference to `line`: the lines to prefetch.
    #[inline]
    pub fn on_access(&mut self, line: u64) -> Prefetches {
        let none = Prefetches {
            next: 0,
            stride: 0,
            left: 0,
        };
        let page = line >> self.page_lines_shift;
        let at = (line & ((1 << self.page_lines_shift) - 1)) as i64;
        // Most accesses continue the stream of the access before, or of the one before
        // that (two streams interleaved); else search them all.
        let before = self.older[self.newest] as usize;
        let i = if self.pages[self.newest] == page {
            self.newest
        } else if self.pages[before] == page {
            before
        } else if let Some(i) = self.find(page) {
            i
        } else {
            // A new page: replace the least recently used stream.
            let i = self.oldest;
            self.streams[i] = Stream {
                last: at,
                stride: 0,
                run: 1,
                next: at,
            };
            let old = std::mem::replace(&mut self.pages[i], page);
            if old != NO_PAGE {
                self.filter[key(old) as usize % FILTER] -= 1;
            }
            self.filter[key(page) as usize % FILTER] += 1;
            self.hint[key(page) as usize % FILTER] = i as u16;
            self.keys[i] = key(page);
            self.touch(i);
            return none;
        };
        self.touch(i);
        let s = &mut self.streams[i];
        let delta = at - s.last;
        if delta == 0 {
            return none;
        }
        if delta == s.stride {
            s.run += 1;
        } else {
            s.stride = delta;
            s.run = 2;
            s.next = at + delta;
        }
        s.last = at;
        if s.run < self.train {
            return none;
        }
        let lines = 1i64 << self.page_lines_shift;
        let limit = at + s.stride * self.distance;
        let ahead = |p: i64| if s.stride > 0 { p <= limit } else { p >= limit };
        // Never behind the access itself.
        let mut p = if s.stride > 0 {
            s.next.max(at + s.stride)
        } else {
            s.next.min(at + s.stride)
        };
        let first = p;
        let mut n = 0;
        while n < self.degree as usize && ahead(p) && (0..lines).contains(&p) {
            n += 1;
            p += s.stride;
        }
        s.next = p;
        Prefetches {
            next: (page << self.page_lines_shift) | first as u64,
            stride: s.stride,
            left: n,
        }
    }
}

/// The lines one access prefetches: `left` lines from `next` on, `stride` lines apart, all
/// in one page (the prefetcher's answer as it is, instead of a list to fill and read).
#[derive(Clone, Copy)]
pub struct Prefetches {
    next: u64,
    stride: i64,
    left: usize,
}

impl Iterator for Prefetches {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        let line = self.next;
        self.next = self.next.wrapping_add_signed(self.stride);
        self.left -= 1;
        Some(line)
    }
}

/// A page's 32-bit key: its low bits, the bits that tell nearby pages apart, folded with
/// its high ones.
#[inline(always)]
fn key(page: u64) -> u32 {
    (page ^ page >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(degree: u32, distance: u32, train: u32) -> PrefetchSpec {
        PrefetchSpec {
            streams: 4,
            degree,
            distance,
            train,
            off_while_sampling: false,
        }
    }

    /// Feed lines, return (accesses the prefetcher had not fetched ahead, prefetches).
    fn run(p: &mut Prefetcher, lines: impl Iterator<Item = u64>) -> (u64, u64) {
        let mut fetched: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let (mut uncovered, mut issued) = (0, 0);
        for l in lines {
            if !fetched.contains(&l) {
                uncovered += 1;
            }
            let out: Vec<u64> = p.on_access(l).collect();
            issued += out.len() as u64;
            fetched.extend(out);
        }
        (uncovered, issued)
    }

    #[test]
    fn a_forward_stream_is_covered_after_training_and_stops_at_the_page() {
        // 64 B lines, 64 per page. A scan of 10 pages: per page, the `train` first lines
        // are not covered, every other line is prefetched, and nothing beyond the page.
        for train in [2, 3] {
            let mut p = Prefetcher::new(&spec(2, 20, train), 64);
            let (uncovered, issued) = run(&mut p, 0..640);
            assert_eq!(uncovered, 10 * train as u64, "train {train}");
            assert_eq!(issued, 10 * (64 - train as u64), "train {train}");
        }
    }

    #[test]
    fn backward_and_strided_streams_are_followed() {
        let mut p = Prefetcher::new(&spec(4, 16, 2), 64);
        // Backward through one page, every third line: 22 accesses, 2 to train.
        let lines: Vec<u64> = (0..64u64).rev().step_by(3).collect();
        let (uncovered, issued) = run(&mut p, lines.iter().copied());
        assert_eq!((uncovered, issued), (2, lines.len() as u64 - 2));
    }

    #[test]
    fn distance_bounds_how_far_ahead() {
        // Degree 8 but distance 3: never more than 3 lines ahead of the access.
        let mut p = Prefetcher::new(&spec(8, 3, 2), 64);
        assert_eq!(p.on_access(0).count(), 0);
        assert_eq!(p.on_access(1).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(p.on_access(2).collect::<Vec<_>>(), [5]);
    }

    proptest::proptest! {
        /// The streams track the pages a plain model says: a page not tracked replaces the
        /// least recently used stream, streams never used first, lowest index first.
        #[test]
        fn streams_are_replaced_least_recently_used_first(
            pages in proptest::collection::vec(0u64..12, 1..300),
            streams in 1usize..6,
        ) {
            let spec = PrefetchSpec { streams, ..spec(2, 20, 2) };
            let mut p = Prefetcher::new(&spec, 64);
            let mut model: Vec<(u64, u64)> = vec![(NO_PAGE, 0); streams];
            for (tick, &page) in (1u64..).zip(&pages) {
                // Pages far apart in the address, so that their keys differ in high bits.
                let page = page << 31 | page;
                p.on_access(page << 6);
                let i = match model.iter().position(|&(pg, _)| pg == page) {
                    Some(i) => i,
                    None => {
                        let oldest = model.iter().map(|&(_, used)| used).min().unwrap();
                        model.iter().position(|&(_, used)| used == oldest).unwrap()
                    }
                };
                model[i] = (page, tick);
                let tracked: Vec<u64> = model.iter().map(|&(pg, _)| pg).collect();
                proptest::prop_assert_eq!(&p.pages, &tracked);
            }
        }
    }

    #[test]
    fn random_lines_prefetch_almost_nothing() {
        let mut p = Prefetcher::new(&spec(2, 20, 2), 64);
        let mut x = 12345u64;
        let lines = (0..20_000).map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 20) % (1 << 20)
        });
        let (_, issued) = run(&mut p, lines);
        assert!(issued < 100, "{issued}");
    }
}
