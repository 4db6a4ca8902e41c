//! rocs-linux: the real machine.
//!
//! perf_event sampling and counting, cache geometry from /sys, perf.data import, and the
//! client of the kernel shim (`kmod-shim/`); each implements a platform trait of rocs-core.

pub mod counters;
pub mod cpu;
pub mod datasrc;
pub mod decode;
pub mod doctor;
pub mod events;
pub mod geometry;
pub mod perf_abi;
pub mod perfdata;
pub mod plan;
pub mod platform;
pub mod pmu;
pub mod prefetch;
pub mod procs;
pub mod record;
pub mod replay;
pub mod ring;
pub mod sampler;
pub mod shim;
pub mod spe;
pub mod target;

pub use counters::{CounterEvents, CountersError, LinuxCounters};
pub use cpu::{CpuInfo, KernelVersion, Vendor};
pub use geometry::{detect_geometry, detect_geometry_here, DetectedGeometry, GeometryDetectError};
pub use perfdata::{parse_perf_data, read_perf_data, ImportSummary, PerfDataError};
pub use plan::{
    machine_plan, select_plan, EventChoice, EventPlan, EventSpec, NoPlan, PlanKind, SourceRule,
};
pub use platform::{
    domain_of, llc_domains, mapped_ranges, present_pages, process_cpus, LinuxPlatform,
    LinuxPlatformError,
};
pub use pmu::{PmuDevice, PmuInventory};
pub use prefetch::{L2PrefetchSwitch, PrefetchError};
pub use replay::{ReplayError, ReplayPmu, ReplayScript};
pub use sampler::{LinuxSampler, SamplerError, SamplingStats};
