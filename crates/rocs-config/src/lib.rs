//! rocs-config: rocsd.toml and the policy files, read and checked with errors that name the
//! file, line and column; the control socket's wire format, which rocsd and rocsctl both
//! read; and the words for the controller's events, which rocsd's journal and history and
//! rocsctl's simulated runs share (both depend on this crate; nothing may depend on the
//! daemon or the CLI).

pub mod daemon;
pub mod error;
pub mod knobs;
pub mod policy;
pub mod protocol;
pub mod report;

pub use daemon::{DaemonConfig, GeometryOverride, Platform, SimConfig, SimWorkload};
pub use error::{ConfigError, Location};
pub use knobs::{KnobEntry, KnobTable};
pub use policy::{
    glob_match, parse_proc_cgroup, CgroupEntry, CgroupPattern, Matcher, Policy, PolicyErrors,
    PolicySet, ProcessInfo,
};
