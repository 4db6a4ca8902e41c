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

/// Streams are looked up in chunks of this many (see [`first_equal`]).
const CHUNK: usize = 8;

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
    /// The page each stream tracks, and when it was last used (for LRU replacement), apart
    /// from the rest so that a lookup scans a few cache lines. Padded to a multiple of
    /// `CHUNK` with entries that never match a page and are never least recently used.
    pages: Vec<u64>,
    used: Vec<u64>,
    degree: u32,
    distance: i64,
    train: u32,
    /// log2 of lines per 4 KiB page.
    page_lines_shift: u32,
    tick: u64,
    /// The stream of the previous access (most accesses hit it again).
    recent: usize,
}

impl Prefetcher {
    /// A prefetcher for lines of `line_size` bytes (validated spec: degree <= MAX_DEGREE).
    pub fn new(spec: &PrefetchSpec, line_size: u64) -> Prefetcher {
        let blank = Stream {
            last: 0,
            stride: 0,
            run: 0,
            next: 0,
        };
        let padded = spec.streams.next_multiple_of(CHUNK);
        let mut used = vec![0; spec.streams];
        used.resize(padded, u64::MAX);
        Prefetcher {
            streams: vec![blank; spec.streams],
            pages: vec![NO_PAGE; padded],
            used,
            degree: spec.degree.min(MAX_DEGREE as u32),
            distance: spec.distance as i64,
            train: spec.train,
            page_lines_shift: (TRAIN_PAGE / line_size.min(TRAIN_PAGE)).trailing_zeros(),
            tick: 0,
            recent: 0,
        }
    }

    /// The L2 saw a demand reference to `line`: write the lines to prefetch into `out`,
    /// return how many.
    #[inline]
    pub fn on_access(&mut self, line: u64, out: &mut [u64; MAX_DEGREE]) -> usize {
        let page = line >> self.page_lines_shift;
        let at = (line & ((1 << self.page_lines_shift) - 1)) as i64;
        self.tick += 1;
        let i = if self.pages[self.recent] == page {
            self.recent
        } else if let Some(i) = first_equal(&self.pages, page) {
            i
        } else {
            // A new page: replace the least recently used stream (the first of them).
            let oldest = *self.used.iter().min().expect("at least one stream");
            let i = first_equal(&self.used, oldest).expect("the minimum is there");
            self.streams[i] = Stream {
                last: at,
                stride: 0,
                run: 1,
                next: at,
            };
            self.pages[i] = page;
            self.used[i] = self.tick;
            self.recent = i;
            return 0;
        };
        self.recent = i;
        self.used[i] = self.tick;
        let s = &mut self.streams[i];
        let delta = at - s.last;
        if delta == 0 {
            return 0;
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
            return 0;
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
        let mut n = 0;
        while n < self.degree as usize && ahead(p) && (0..lines).contains(&p) {
            out[n] = (page << self.page_lines_shift) | p as u64;
            n += 1;
            p += s.stride;
        }
        s.next = p;
        n
    }
}

/// Index of the first of `values` (a multiple of `CHUNK` long) equal to `x`: compared a
/// chunk at a time into a bit mask, without a branch per value, which the compiler turns
/// into vector compares.
#[inline]
fn first_equal(values: &[u64], x: u64) -> Option<usize> {
    for (c, chunk) in values.chunks_exact(CHUNK).enumerate() {
        let mut mask = 0u32;
        for (j, &v) in chunk.iter().enumerate() {
            mask |= ((v == x) as u32) << j;
        }
        if mask != 0 {
            return Some(c * CHUNK + mask.trailing_zeros() as usize);
        }
    }
    None
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
        let mut out = [0; MAX_DEGREE];
        let (mut uncovered, mut issued) = (0, 0);
        for l in lines {
            if !fetched.contains(&l) {
                uncovered += 1;
            }
            let n = p.on_access(l, &mut out);
            issued += n as u64;
            fetched.extend(&out[..n]);
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
        let mut out = [0; MAX_DEGREE];
        assert_eq!(p.on_access(0, &mut out), 0);
        let n = p.on_access(1, &mut out);
        assert_eq!(&out[..n], &[2, 3, 4]);
        let n = p.on_access(2, &mut out);
        assert_eq!(&out[..n], &[5]);
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
