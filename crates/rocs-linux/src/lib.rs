//! rocs-linux: the real machine.
//!
//! perf_event sampling and counting, cache geometry from /sys, perf.data import, and the
//! client of the kernel shim (`kmod-shim/`); each implements a platform trait of rocs-core.

pub mod shim;
