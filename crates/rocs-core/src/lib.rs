//! rocs-core: the pure part of rocs.
//!
//! Nothing in this crate performs I/O or reads a clock. The simulator (`rocs-sim`), the
//! real machine (`rocs-linux`), the daemon and the tests all drive the same types and the
//! same controller, feeding observations in and carrying actions out.

pub mod geometry;
pub mod platform;
pub mod profile;
pub mod sample;
pub mod stack;

pub use geometry::{CacheGeometry, GeometryError};
pub use platform::{
    CounterDelta, Counters, PageResult, Remapper, SampleLoss, Sampler, SamplingPlan,
};
pub use profile::{PageCounts, PageProfile};
pub use sample::{Colour, DataSource, Errno, MemSample, Pid, Placement, VirtPage};
pub use stack::{MissRateStack, StackEntry};
