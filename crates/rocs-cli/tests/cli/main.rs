//! rocsctl's integration tests in one binary: linked once, and its tests share the two
//! threads the test harness runs, so a long test no longer leaves a core idle.

mod svg_check;

mod client_daemon;
mod linux_doctor;
mod linux_profile;
mod linux_record;
mod sim_cli;
mod sim_trace;
