//! What a precise memory sample says, and the small value types around it.

use serde::{Deserialize, Serialize};

/// A process id (the target). Threads of a target report their own `tid` in samples.
pub type Pid = u32;

/// A virtual page of a target, identified by its page number (virtual address >> page shift).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VirtPage(pub u64);

impl VirtPage {
    /// The page holding `vaddr`, for pages of `1 << page_shift` bytes.
    #[inline]
    pub fn containing(vaddr: u64, page_shift: u32) -> Self {
        VirtPage(vaddr >> page_shift)
    }

    /// The first virtual address of this page.
    #[inline]
    pub fn addr(self, page_shift: u32) -> u64 {
        self.0 << page_shift
    }
}

/// A cache colour: the set-index bits of a physical address above the page offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Colour(pub u32);

/// Where a page should live: in the pollute buffer, or back among the ordinary colours
/// (on the colour it had before it was confined, where the platform can: the shim and the
/// simulator do, so that a search that confines nothing leaves the layout as it was), or on
/// one ordinary colour the caller chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Pollute,
    Restore,
    /// Out of the pollute buffer onto this ordinary colour, or onto any ordinary colour
    /// when it has no free frame (the page's new colour says which). A page the allocator
    /// put in the buffer has no colour to go back to: the controller sends it where its
    /// program has room, not at random onto a colour its reused pages already fill.
    Ordinary(Colour),
}

/// A per-page error number, as move_pages(2) reports it (positive errno value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(1);
    pub const ENOENT: Errno = Errno(2);
    pub const ESRCH: Errno = Errno(3);
    pub const EFAULT: Errno = Errno(14);
    pub const EBUSY: Errno = Errno(16);
    pub const EINVAL: Errno = Errno(22);
    pub const ENOMEM: Errno = Errno(12);
    pub const EACCES: Errno = Errno(13);
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "errno {}", self.0)
    }
}

/// Where the sampled load found its data, as far as rocs cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSource {
    /// Served by the last-level cache.
    LlcHit,
    /// Missed the last-level cache (served by memory or a remote cache).
    LlcMiss,
    /// Anything else, or unknown (e.g. a software event carries no data source).
    Other,
}

/// One precise memory sample of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemSample {
    pub pid: Pid,
    pub tid: u32,
    pub vaddr: u64,
    pub paddr: Option<u64>,
    pub source: DataSource,
    /// Load latency in cycles where the hardware reports it, else 0.
    pub weight: u32,
    /// Timestamp in the platform's unit (ns on Linux, cycles in simulation).
    pub time: u64,
}
