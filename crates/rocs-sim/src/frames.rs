//! Physical frames: handed out in shuffled order (Linux shuffles its free lists, so the
//! colours of a program's pages are random), or from chosen colours when asked (the pollute
//! buffer), like the per-colour free lists of ROCS's modified allocator.

use crate::rng::Rng;

/// The free frames of a simulated machine.
#[derive(Clone, Debug)]
pub struct FrameAllocator {
    colour_mask: u32,
    /// Free frames per colour, in shuffled order (popped from the end).
    free_by_colour: Vec<Vec<u32>>,
    /// Frames in the order an uncoloured request takes them; may hold frames already taken
    /// through a coloured request (skipped lazily).
    any_order: Vec<u32>,
    /// Frames given back, handed to uncoloured requests once `any_order` runs out.
    recycled: Vec<u32>,
    /// Each process's own share of the shuffle for its first touches, once split
    /// ([`FrameAllocator::split_first_touches`]); popped from the end.
    shares: Vec<Vec<u32>>,
    taken: Vec<u64>,
    /// Free frames the pollute buffer gave back: only coloured requests take them.
    stashed: Vec<u64>,
    free: u64,
    /// Round-robin position for requests over several colours (bin hopping).
    next_colour: usize,
}

impl FrameAllocator {
    /// `frames` frames (frame numbers `0..frames`), `colours` colours (a power of two).
    pub fn new(frames: u32, colours: u32, rng: &mut Rng) -> Self {
        let colours = colours.max(1);
        let mut any_order: Vec<u32> = (0..frames).collect();
        rng.shuffle(&mut any_order);
        let mut free_by_colour =
            vec![Vec::with_capacity((frames / colours) as usize); colours as usize];
        // Within each colour, the reverse of the shuffled order: a coloured request (the
        // pollute buffer, a restore to a page's home colour) takes the frames an uncoloured
        // one would reach last. Taking the next ones instead shifted every later page of the
        // program onto another frame, so one migration re-drew the colours of all the pages
        // touched after it, and a run with rocs was compared with a baseline of another
        // layout (two real programs sharing ppc970fx differ by 13% between layouts).
        for &f in any_order.iter().rev() {
            free_by_colour[(f & (colours - 1)) as usize].push(f);
        }
        FrameAllocator {
            colour_mask: colours - 1,
            free_by_colour,
            // Popped from the end: reverse so that the first frames of the shuffle go first.
            any_order,
            recycled: Vec::new(),
            shares: Vec::new(),
            taken: vec![0; (frames as usize).div_ceil(64)],
            stashed: vec![0; (frames as usize).div_ceil(64)],
            free: frames as u64,
            next_colour: 0,
        }
    }

    #[inline]
    pub fn colour_of(&self, pfn: u32) -> u32 {
        pfn & self.colour_mask
    }

    pub fn colours(&self) -> u32 {
        self.colour_mask + 1
    }

    pub fn free_frames(&self) -> u64 {
        self.free
    }

    fn is_taken(&self, pfn: u32) -> bool {
        self.taken[(pfn / 64) as usize] >> (pfn % 64) & 1 == 1
    }

    fn is_stashed(&self, pfn: u32) -> bool {
        self.stashed[(pfn / 64) as usize] >> (pfn % 64) & 1 == 1
    }

    fn set_stashed(&mut self, pfn: u32, stashed: bool) {
        let w = &mut self.stashed[(pfn / 64) as usize];
        if stashed {
            *w |= 1 << (pfn % 64);
        } else {
            *w &= !(1 << (pfn % 64));
        }
    }

    fn mark(&mut self, pfn: u32, taken: bool) {
        let w = &mut self.taken[(pfn / 64) as usize];
        if taken {
            *w |= 1 << (pfn % 64);
            self.free -= 1;
        } else {
            *w &= !(1 << (pfn % 64));
            self.free += 1;
        }
    }

    /// Any free frame, in shuffled order; frames given back once none is left unused, then
    /// what is left of the processes' shares.
    pub fn alloc_any(&mut self) -> Option<u32> {
        loop {
            let f = self
                .any_order
                .pop()
                .or_else(|| self.recycled.pop())
                .or_else(|| self.shares.iter_mut().find_map(|s| s.pop()))?;
            if self.is_free(f) {
                self.mark(f, true);
                return Some(f);
            }
        }
    }

    fn is_free(&self, pfn: u32) -> bool {
        !self.is_taken(pfn) && !self.is_stashed(pfn)
    }

    /// Give each of `n` processes its own share of the unused frames for its first
    /// touches ([`FrameAllocator::alloc_for`]): process i takes every n-th frame of the
    /// shuffle, from the i-th. Which frames a process's pages get then follows from its own
    /// order of first touches alone, not from how they interleave with the others': a run
    /// with rocs, whose sampling shifts the processes' pace, is compared with a baseline
    /// of the same layout. (Sharing one order, two real programs on ppc970fx read 0.838 of
    /// off with no page moved: bzip2's frames fell out differently, a layout and not a
    /// decision.) The colours each process gets are as random as before.
    pub fn split_first_touches(&mut self, n: usize) {
        if n < 2 {
            return;
        }
        let mut shares = vec![Vec::with_capacity(self.any_order.len() / n + 1); n];
        // `any_order` is taken from its end.
        for (i, &f) in self.any_order.iter().rev().enumerate() {
            shares[i % n].push(f);
        }
        for share in &mut shares {
            share.reverse();
        }
        self.any_order.clear();
        self.shares = shares;
    }

    /// A free frame for a first touch of process `share` (its index): from its own share
    /// while that lasts, then as [`FrameAllocator::alloc_any`].
    pub fn alloc_for(&mut self, share: usize) -> Option<u32> {
        while let Some(f) = self.shares.get_mut(share).and_then(|s| s.pop()) {
            if self.is_free(f) {
                self.mark(f, true);
                return Some(f);
            }
        }
        self.alloc_any()
    }

    fn pop_colour(&mut self, colour: u32) -> Option<u32> {
        while let Some(f) = self.free_by_colour.get_mut(colour as usize)?.pop() {
            if !self.is_taken(f) {
                self.set_stashed(f, false);
                self.mark(f, true);
                return Some(f);
            }
        }
        None
    }

    /// A free frame of one of `colours`, taking the colours in turn (bin hopping).
    pub fn alloc_in(&mut self, colours: &[u32]) -> Option<u32> {
        for _ in 0..colours.len() {
            let c = colours[self.next_colour % colours.len()];
            self.next_colour = self.next_colour.wrapping_add(1);
            if let Some(f) = self.pop_colour(c) {
                return Some(f);
            }
        }
        None
    }

    /// A free frame of a colour chosen at random among `colours`.
    pub fn alloc_random_in(&mut self, colours: &[u32], rng: &mut Rng) -> Option<u32> {
        if colours.is_empty() {
            return None;
        }
        let start = rng.below(colours.len() as u64) as usize;
        for i in 0..colours.len() {
            if let Some(f) = self.pop_colour(colours[(start + i) % colours.len()]) {
                return Some(f);
            }
        }
        None
    }

    /// Give a frame of the pollute buffer back to the buffer's own free list (rocs's shim
    /// takes the frames a restore frees into its stash): ordinary requests never get it,
    /// so restored pages do not hand their pollute colour to the next page the program
    /// touches.
    pub fn free_reserved(&mut self, pfn: u32) {
        debug_assert!(self.is_taken(pfn));
        self.mark(pfn, false);
        self.set_stashed(pfn, true);
        let c = self.colour_of(pfn) as usize;
        self.free_by_colour[c].push(pfn);
    }

    /// Give a frame back. Uncoloured requests reach it only once the unused frames run out
    /// (Linux would hand a hot frame out first): a frame freed by a migration, handed to
    /// the program's next new page, moved every later page one frame along the shuffle, a
    /// new layout, and a run with rocs was compared with a baseline of another layout.
    pub fn free(&mut self, pfn: u32) {
        debug_assert!(self.is_taken(pfn));
        self.mark(pfn, false);
        self.recycled.push(pfn);
        let c = self.colour_of(pfn) as usize;
        self.free_by_colour[c].push(pfn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_every_frame_once_in_shuffled_order() {
        let mut rng = Rng::new(3);
        let mut a = FrameAllocator::new(1024, 16, &mut rng);
        let mut got: Vec<u32> = (0..1024).map(|_| a.alloc_any().unwrap()).collect();
        assert!(a.alloc_any().is_none());
        assert_ne!(got[..16], (0..16).collect::<Vec<_>>()[..], "not shuffled");
        got.sort_unstable();
        assert_eq!(got, (0..1024).collect::<Vec<_>>());
    }

    #[test]
    fn a_process_gets_the_same_frames_however_its_first_touches_interleave() {
        let mut rng = Rng::new(8);
        let whole = FrameAllocator::new(1024, 16, &mut rng);
        let (mut a, mut b) = (whole.clone(), whole.clone());
        a.split_first_touches(2);
        b.split_first_touches(2);
        // In `a` process 0 touches 300 pages, then process 1 300; in `b` they alternate.
        let a0: Vec<u32> = (0..300).map(|_| a.alloc_for(0).unwrap()).collect();
        let a1: Vec<u32> = (0..300).map(|_| a.alloc_for(1).unwrap()).collect();
        let (mut b0, mut b1) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            b1.push(b.alloc_for(1).unwrap());
            b0.push(b.alloc_for(0).unwrap());
        }
        assert_eq!((&a0, &a1), (&b0, &b1));
        // Between them, the shuffle as one process would have taken it.
        let mut one = whole.clone();
        let first: Vec<u32> = (0..600).map(|_| one.alloc_any().unwrap()).collect();
        let mut interleaved: Vec<u32> = a0.iter().zip(&a1).flat_map(|(x, y)| [*x, *y]).collect();
        assert_eq!(interleaved, first);
        // A process that has used up its share takes what is left of the other's, and
        // every frame goes out once.
        let rest: Vec<u32> = (0..424).map(|_| a.alloc_for(0).unwrap()).collect();
        assert!(a.alloc_for(1).is_none() && a.alloc_any().is_none());
        interleaved.extend(rest);
        interleaved.sort_unstable();
        assert_eq!(interleaved, (0..1024).collect::<Vec<_>>());
    }

    #[test]
    fn a_coloured_request_leaves_the_next_uncoloured_frames_as_they_were() {
        let mut rng = Rng::new(6);
        let mut a = FrameAllocator::new(1024, 16, &mut rng);
        let mut untouched = a.clone();
        let coloured: Vec<u32> = (0..8).map(|_| a.alloc_in(&[15, 3]).unwrap()).collect();
        let next: Vec<u32> = (0..500).map(|_| a.alloc_any().unwrap()).collect();
        let expected: Vec<u32> = (0..500).map(|_| untouched.alloc_any().unwrap()).collect();
        assert_eq!(next, expected);
        assert!(coloured.iter().all(|f| !next.contains(f)));
    }

    #[test]
    fn coloured_requests_get_their_colours_and_never_a_taken_frame() {
        let mut rng = Rng::new(4);
        let mut a = FrameAllocator::new(256, 16, &mut rng);
        let first: Vec<u32> = (0..100).map(|_| a.alloc_any().unwrap()).collect();
        let mut coloured = Vec::new();
        while let Some(f) = a.alloc_in(&[15]) {
            assert_eq!(a.colour_of(f), 15);
            assert!(!first.contains(&f));
            coloured.push(f);
        }
        assert_eq!(
            first.iter().filter(|&&f| f % 16 == 15).count() + coloured.len(),
            16
        );
        a.free(coloured[0]);
        assert_eq!(a.alloc_in(&[15]), Some(coloured[0]));
        // The rest is still handed out exactly once.
        let mut rest = 0;
        while a.alloc_any().is_some() {
            rest += 1;
        }
        assert_eq!(rest + 100 + coloured.len(), 256);
    }

    #[test]
    fn frames_given_back_keep_the_layout_of_later_pages_and_the_buffers_stay_its_own() {
        let mut rng = Rng::new(5);
        let mut a = FrameAllocator::new(256, 16, &mut rng);
        let reserved = a.alloc_in(&[15]).unwrap();
        a.free_reserved(reserved);
        // An ordinary frame given back is handed out once no unused frame is left, so the
        // frames after it go to the same pages as if it had never been freed ...
        let ordinary = a.alloc_any().unwrap();
        let mut unfreed = a.clone();
        a.free(ordinary);
        let mut any = Vec::new();
        while let Some(f) = a.alloc_any() {
            any.push(f);
        }
        let mut expected = Vec::new();
        while let Some(f) = unfreed.alloc_any() {
            expected.push(f);
        }
        expected.push(ordinary);
        assert_eq!(any, expected);
        // ... and the reserved one is not handed to any ordinary request, only to the buffer.
        assert!(!any.contains(&reserved));
        assert_eq!(a.alloc_in(&[15]), Some(reserved));
        assert_eq!(a.free_frames(), 0);
    }
}
