//! rocs-core: the pure part of rocs.
//!
//! Nothing in this crate performs I/O or reads a clock. The simulator (`rocs-sim`), the
//! real machine (`rocs-linux`), the daemon and the tests all drive the same types and the
//! same controller, feeding observations in and carrying actions out.

pub mod controller;
pub mod driver;
pub mod engine;
pub mod geometry;
pub mod knobs;
pub mod phase;
pub mod platform;
pub mod profile;
pub mod regions;
pub mod sample;
pub mod sampling;
pub mod search;
pub mod stack;

pub use controller::{
    Action, ColourReport, Command, Controller, Event, EventKind, MemberWindow, MigrationReport,
    Observation, SharerPace, State, Stats, Turn, WindowContext,
};
pub use driver::{Driver, DriverError, Outcome};
pub use engine::Engine;
pub use geometry::{CacheGeometry, GeometryError};
pub use knobs::{KnobError, Knobs, PolluteColours, SearchMode};
pub use phase::{PhaseDetector, PhaseVerdict};
pub use platform::{
    CounterDelta, Counters, Mapping, PageResult, Remapper, SampleLoss, Sampler, SamplingPlan,
};
pub use profile::{PageCounts, PageProfile};
pub use regions::{build_stack, Region, RegionParams, StackBuild};
pub use sample::{Colour, DataSource, Errno, MemSample, Pid, Placement, VirtPage};
pub use sampling::{next_period, period_check_due};
pub use search::{Measured, Measurements, Next, Search};
pub use stack::{MissRateStack, StackEntry};
