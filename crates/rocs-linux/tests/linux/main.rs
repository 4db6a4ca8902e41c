//! The Linux platform's integration tests, one binary: linked once, and its tests share the two threads the
//! test harness runs, so a long test no longer leaves a core idle.

mod perf_record;
mod perfdata;
mod period;
mod plans;
mod prefetch_models;
