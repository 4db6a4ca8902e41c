//! rocs-sim: the simulated machine.
//!
//! Private L1 caches (and an optional L2) per process, a shared LLC, a frame allocator that
//! knows page colours, a timing model and a PMU model; workloads generated from TOML
//! descriptions or replayed from traces of real programs (valgrind lackey's text or rocs's
//! binary format). [`Machine`] implements the
//! platform traits of rocs-core (`Sampler`, `Counters`, `Remapper`), so the controller runs
//! against it exactly as against a real machine.

pub mod cache;
pub mod closed_loop;
pub mod error;
pub mod frames;
pub mod machine;
pub mod prefetch;
pub mod rng;
pub mod size;
pub mod spec;
pub mod tlb;
pub mod trace;
pub mod workload;

pub use cache::{Cache, Policy};
pub use error::SimError;
pub use machine::{
    Machine, ProcessStats, RegionStats, RunStats, TraceFormat, TraceInput, TraceSpec, FIRST_PID,
};
pub use size::ByteSize;
pub use spec::{builtin_machines, Fill, LevelSpec, MachineSpec, PmuSpec, PrefetchSpec, TlbSpec};
pub use trace::{BinaryReader, BinaryWriter, LackeyReader, TraceEvent, TraceKind, TraceReader};
pub use workload::{
    builtin_workloads, Pattern, PhaseSpec, ProcessSpec, RegionSpec, Scale, Workload,
};
