//! What the tests that trace real programs share.

use std::path::Path;
use std::process::{Command, Stdio};

/// Run `program args` under valgrind with `tool_args` (the tool and its options), in `dir`
/// with only `PATH=/usr/bin:/bin`, the C locale and `env` in its environment, its output
/// discarded; panics with valgrind's messages if it fails. The program's stack starts with
/// its arguments and environment, so the addresses it touches, and with them which of its
/// data share a page, would otherwise move with the paths in its arguments and with
/// whoever runs the tests (bzip2's trace, its input named by a path holding the test's
/// pid, read 0.988 of off on ppc970fx here and passed in CI).
pub fn valgrind(
    tool_args: &[String],
    dir: &Path,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) {
    let out = Command::new("valgrind")
        .args(tool_args)
        .arg(program)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .envs(env.iter().copied())
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
