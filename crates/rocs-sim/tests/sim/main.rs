//! The simulator's integration tests in one binary: linked once, and its tests share the
//! two threads the test harness runs, so a long test no longer leaves a core idle.

mod common;

mod cachegrind_fidelity;
mod calibration;
mod closed_loop;
mod machine_api;
mod modern_models;
mod modern_suite;
mod random_campaign;
mod real_programs;
mod trace_modern;
mod trace_tenants;
