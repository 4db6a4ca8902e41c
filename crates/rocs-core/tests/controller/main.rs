//! The controller's integration tests in one binary: linked once, and its tests share the
//! two threads the test harness runs, so a long test no longer leaves a core idle.

mod common;

mod budget;
mod engine;
mod ledger;
mod lifecycle;
mod phase;
mod robustness;
mod search;
mod stack;
