//! rocsd's integration tests in one binary: linked once, and its tests share the two
//! threads the test harness runs, so a long test no longer leaves a core idle.

mod common;
mod scrape;

mod churn_linux;
mod e2e_sim;
mod e2e_sim_llc_group;
mod metrics;
mod policy_errors;
mod prefetch_linux;
mod prometheus;
mod protocol;
mod service;
mod socket_access;
