//! Churn on the linux platform: 1,000 short-lived real processes matching a policy each
//! become a target whose perf events really open (observe-only on the page-fault plan and
//! software counters, which work on any Linux), and leave no file descriptors, threads,
//! targets or memory behind once they are gone.

use crate::common;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::json;

/// File descriptors, threads and resident memory (KiB) of a process.
fn usage(pid: u32) -> (usize, usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (fds, field("Threads:") as usize, field("VmRSS:"))
}

/// `usage` at rest: the least seen over a second. A /proc scan (every 50 ms) briefly holds a
/// blocking-pool thread and a directory fd; what leaks stays, what is transient does not.
fn usage_at_rest(pid: u32) -> (usize, usize, u64) {
    let mut u = usage(pid);
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        let v = usage(pid);
        u = (u.0.min(v.0), u.1.min(v.1), u.2.min(v.2));
    }
    u
}

/// Start `n` processes named `rocschurn` (a symlink to sleep: the command name comes from
/// the link) that live `life` seconds, `batch` at a time; return the peak fd count of rocsd
/// seen while they ran.
fn churn(d: &common::Rocsd, link: &std::path::Path, n: usize, batch: usize, life: &str) -> usize {
    let mut peak = 0;
    let mut started = 0;
    while started < n {
        let k = batch.min(n - started);
        let mut kids: Vec<Child> = (0..k)
            .map(|_| Command::new(link).arg(life).spawn().unwrap())
            .collect();
        started += k;
        // Half-way through their lives, the targets are attached.
        std::thread::sleep(Duration::from_millis(300));
        peak = peak.max(usage(d.pid()).0);
        for kid in &mut kids {
            kid.wait().unwrap();
        }
    }
    peak
}

/// Wait until rocsd has let go of every target and reports them gone.
fn settle(d: &common::Rocsd, seen_at_least: u64) -> serde_json::Value {
    d.wait(Duration::from_secs(30), "every target released", |d| {
        let s = d.ok(json!({"request": "status"}));
        (s["targets"] == 0
            && s["targets_seen"].as_u64()? >= seen_at_least
            && s["targets_seen"] == s["targets_exited"])
            .then_some(s)
    })
}

#[test]
fn a_thousand_short_lived_targets_leave_nothing_behind() {
    let config = r#"
platform = "linux"
allow_observe_only = true
scan_interval_ms = 50
window_ms = 20
"#;
    let policy = "name = \"churn\"\n[match]\ncomm = \"rocschurn\"\n";
    let d = common::start(config, &[("10-churn.toml", policy)]);
    let link = d.dir.path().join("rocschurn");
    let sleep = ["/bin/sleep", "/usr/bin/sleep"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("sleep(1) is installed");
    std::os::unix::fs::symlink(sleep, &link).unwrap();

    // Warm up (the allocator's arenas, the runtime's blocking pool), then measure.
    churn(&d, &link, 100, 100, "0.6");
    let warm = settle(&d, 100);
    std::thread::sleep(Duration::from_secs(2));
    let before = usage_at_rest(d.pid());

    let t0 = Instant::now();
    let peak = churn(&d, &link, 1000, 100, "0.6");
    let after_status = settle(&d, 1100);
    let churn_time = t0.elapsed();
    // The runtime's idle blocking threads go after their keep-alive (1 s).
    std::thread::sleep(Duration::from_secs(2));
    let after = usage_at_rest(d.pid());

    let seen =
        after_status["targets_seen"].as_u64().unwrap() - warm["targets_seen"].as_u64().unwrap();
    let measured = after_status["targets_measured"].as_u64().unwrap()
        - warm["targets_measured"].as_u64().unwrap();
    eprintln!(
        "1000 processes in {churn_time:?}: {seen} targets attached, {measured} measured; \
         rocsd fds {} -> peak {peak} -> {}, threads {} -> {}, RSS {} KiB -> {} KiB",
        before.0, after.0, before.1, after.1, before.2, after.2
    );
    assert_eq!(seen, 1000, "every process became a target");
    // A target whose process exits before its first window never reads its counters; with
    // 600 ms lives and 20 ms windows that is rare.
    assert!(
        measured >= 990,
        "only {measured} targets opened and read their events"
    );
    assert!(
        peak > before.0 + 50,
        "perf events were open while targets lived (peak {peak})"
    );
    assert_eq!(after.0, before.0, "file descriptors left behind");
    assert!(
        after.1 <= before.1,
        "threads left behind: {} -> {}",
        before.1,
        after.1
    );
    assert!(
        after.2 <= before.2 + 4096,
        "memory left behind: RSS {} KiB -> {} KiB",
        before.2,
        after.2
    );
}

#[test]
fn without_a_pmu_rocsd_refuses_unless_observe_only_is_allowed() {
    let has_pmu = std::path::Path::new("/sys/bus/event_source/devices/cpu").exists()
        || std::path::Path::new("/sys/bus/event_source/devices/cpu_core").exists();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("rocsd.toml");
    std::fs::write(
        &conf,
        format!(
            "platform = \"linux\"\nsocket = {:?}\npolicy_dir = {:?}\n",
            dir.path().join("s.sock").display().to_string(),
            dir.path().display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .arg("--config")
        .arg(&conf)
        .arg("--check")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if has_pmu {
        assert!(out.status.success(), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("no hardware PMU") && err.contains("allow_observe_only = true"),
            "{err}"
        );
    }
}
