//! What the tests that trace real programs share.

use std::process::{Command, Stdio};

/// Run `program args` under valgrind with `tool_args` (the tool and its options), in the C
/// locale, its output discarded; panics with valgrind's messages if it fails.
pub fn valgrind(tool_args: &[String], program: &str, args: &[&str]) {
    let out = Command::new("valgrind")
        .args(tool_args)
        .arg(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("valgrind runs");
    assert!(
        out.status.success(),
        "valgrind {tool_args:?} {program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `tool --version` runs and succeeds.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
