//! Setting up the models beyond the paper's machines: each process's page tables for its
//! TLB, and whether the prefetcher is switched off while profiling.

use super::generator::GenProc;
use super::{Machine, FP};
use crate::error::SimError;
use crate::tlb::Tlb;

impl Machine {
    /// The TLB of a generated process, if the machine has one: its leaf page tables get
    /// frames from the allocator (shuffled like the data's, so they compete for the LLC
    /// like any page), one per `page_size / 8` pages of the process's address range.
    pub(super) fn tlb_for(&mut self, gen: &GenProc) -> Result<Option<Tlb>, SimError> {
        let Some(spec) = self.spec.tlb.clone() else {
            return Ok(None);
        };
        let shift = self.page_shift;
        let first = gen.regions.first().map_or(0, |r| r.base_va >> shift);
        let last = gen
            .regions
            .iter()
            .map(|r| (r.base_va + r.size.max(1) - 1) >> shift)
            .max()
            .unwrap_or(first);
        let needed = Tlb::tables_needed(shift, first, last);
        let mut tables = Vec::with_capacity(needed);
        for _ in 0..needed {
            tables.push(self.frames.alloc_any().ok_or_else(|| {
                SimError::OutOfFrames(format!(
                    "no frame left for the page tables on '{}' ({} of memory)",
                    self.spec.name, self.spec.memory
                ))
            })?);
        }
        let walk_fp = spec.walk_cycles as u64 * FP;
        Ok(Some(Tlb::new(&spec, shift, first, tables, walk_fp)))
    }

    /// Whether a process's L2 prefetcher is switched off while its PMU samples (the
    /// spec's `prefetch.off_while_sampling` sets the default). Applies from the next
    /// `Sampler::start`.
    pub fn set_prefetch_off_while_sampling(&mut self, off: bool) {
        self.prefetch_off_while_sampling = off;
    }

    /// Whether sampling switches a prefetcher off (see
    /// [`Machine::set_prefetch_off_while_sampling`]): a profile's windows then make another
    /// mix of LLC references than unsampled ones.
    pub fn pauses_prefetch_while_sampling(&self) -> bool {
        self.prefetch_off_while_sampling && self.spec.prefetch.is_some()
    }
}
