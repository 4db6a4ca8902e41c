//! Intel's Cache Allocation Technology as resctrl exposes it: each process gets a capacity
//! bitmask of LLC ways. A fill may only take a way of the filling process's mask; a lookup
//! hits in any way (Intel SDM Vol. 3B, 18.19 "Intel Resource Director Technology"). The
//! bitmask must be one contiguous run of set bits, as on Intel's L3 CAT.

use rocs_core::Pid;

use super::Machine;
use crate::cache::Policy;
use crate::error::SimError;

impl Machine {
    /// Ways of the LLC (the width of a capacity bitmask).
    pub fn llc_ways(&self) -> u32 {
        self.llc.geometry().ways as u32
    }

    /// Give process `pid` the LLC ways of `mask` (bit i = way i).
    pub fn set_way_mask(&mut self, pid: Pid, mask: u64) -> Result<(), SimError> {
        let all = self.llc.all_ways();
        if mask == 0 || mask & !all != 0 {
            return Err(SimError::Unsupported(format!(
                "way mask {mask:#x} must be non-empty and within the LLC's {} ways ({all:#x})",
                self.llc_ways()
            )));
        }
        let run = mask >> mask.trailing_zeros();
        if run & (run + 1) != 0 {
            return Err(SimError::Unsupported(format!(
                "way mask {mask:#x} must be one contiguous run of ways (resctrl's rule)"
            )));
        }
        if mask != all && self.llc.policy() == Policy::Lru {
            return Err(SimError::Unsupported(
                "CAT needs an RRIP-family LLC policy (the LRU model keeps no way identity)".into(),
            ));
        }
        let i = self.proc_index(pid)?;
        self.procs[i].st.core.modern.llc_mask = mask;
        Ok(())
    }

    /// The LLC ways process `pid` may fill.
    pub fn way_mask(&self, pid: Pid) -> Result<u64, SimError> {
        Ok(self.procs[self.proc_index(pid)?].st.core.modern.llc_mask)
    }
}
