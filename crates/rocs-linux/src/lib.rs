//! rocs-linux: the real machine.
//!
//! perf_event sampling and counting, cache geometry from /sys, perf.data import, and the
//! client of the kernel shim (`kmod-shim/`); each implements a platform trait of rocs-core.

pub mod abi;
pub mod cpu;
pub mod doctor;
pub mod events;
pub mod geometry;
pub mod plan;
pub mod pmu;
pub mod shim;

pub use cpu::{CpuInfo, KernelVersion, Vendor};
pub use geometry::{detect_geometry, DetectedGeometry, GeometryDetectError};
pub use plan::{select_plan, EventChoice, EventPlan, EventSpec, NoPlan, PlanKind, SourceRule};
pub use pmu::{PmuDevice, PmuInventory};
