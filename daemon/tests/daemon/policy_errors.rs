//! A broken policy file is reported by rocsd in one log line that names the file, the line
//! and the column, at start and on reload.

use crate::common;

use serde_json::json;

const CONFIG: &str = r#"
platform = "sim"
[sim]
machine = "tiny"
window_cycles = 100_000
pause_ms = 200
[[sim.workload]]
name = "twolf-like"
"#;

/// The array of line 4 is never closed: toml notices at the table of line 6.
const UNCLOSED: &str =
    "name = \"art\"\n[match]\ncomm = \"art\"\nexe = [\"/opt/a\",\n\n[knobs]\npollute_colours = 1\n";

/// The log lines that report an error (rocsd logs without colours when not on a terminal).
fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("ERROR")).collect()
}

#[test]
fn at_start_the_error_is_one_line_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let policy_dir = dir.path().join("policy.d");
    std::fs::create_dir(&policy_dir).unwrap();
    let bad = policy_dir.join("10-bad.toml");
    std::fs::write(&bad, UNCLOSED).unwrap();
    let out = common::check_with_policies(CONFIG, &policy_dir);
    assert!(!out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    let errors = error_lines(&log);
    assert_eq!(errors.len(), 1, "{log}");
    assert!(
        errors[0].contains(&format!("{}:4:7: this array is not closed", bad.display())),
        "{log}"
    );
}

#[test]
fn on_reload_the_error_is_one_line_with_file_line_and_column() {
    let d = common::start(CONFIG, &[("10-art.toml", "[match]\ncomm = \"art\"\n")]);
    let bad = d.policy_dir.join("20-bad.toml");
    std::fs::write(&bad, UNCLOSED).unwrap();
    let r = d.raw(json!({"request": "reload"}));
    assert_eq!(r["error"]["code"], "reload_failed", "{r}");
    let at = format!("{}:4:7: this array is not closed", bad.display());
    assert!(r["error"]["message"].as_str().unwrap().contains(&at), "{r}");
    // The log is written by another thread: wait for the line.
    let log = d.wait(
        std::time::Duration::from_secs(10),
        "the refusal is logged",
        |d| {
            let log = d.log();
            (!error_lines(&log).is_empty()).then_some(log)
        },
    );
    let errors = error_lines(&log);
    assert_eq!(errors.len(), 1, "{log}");
    assert!(errors[0].contains(&at), "{log}");
    // An empty file is refused with its place too.
    std::fs::write(&bad, "").unwrap();
    let r = d.raw(json!({"request": "reload"}));
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{}:1:1: the policy file is empty", bad.display())),
        "{r}"
    );
}
