//! The Linux platform's integration tests in one binary: linked once, and its tests share the
//! two threads the test harness runs, so a long test no longer leaves a core idle.
//!
//! Two stay binaries of their own: `live.rs` samples its own process, which other tests'
//! threads would disturb, and `shim_abi.rs` is the binary tests/vm/run.sh runs in the guest.

mod perf_record;
mod perfdata;
mod period;
mod plans;
mod prefetch_models;
