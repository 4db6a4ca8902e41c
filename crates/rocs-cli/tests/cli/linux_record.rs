//! `rocsctl record` on real processes, against the real perf tool, and its errors.

use std::collections::HashMap;
use std::process::{Child, Command as StdCommand, Stdio};

use assert_cmd::Command;
use serde_json::Value;

use crate::svg_check;

fn rocsctl() -> Command {
    Command::cargo_bin("rocsctl").unwrap()
}

/// `rocsctl record` of `pid`'s page faults for at most `duration` seconds.
fn record(pid: u32, duration: &str) -> Command {
    let mut cmd = rocsctl();
    cmd.args(["record", "--pid", &pid.to_string(), "--duration", duration])
        .args(["--event", "page-faults"]);
    cmd
}

/// Wait until process `pid` runs `comm` and has taken no page fault for 150 ms: its
/// start-up (exec, the dynamic loader) is over, however loaded the machine is, and a
/// recorder attached now sees only what the process does next.
fn wait_until_idle(pid: u32, comm: &str) {
    let minor_faults = || -> Option<(String, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, tail) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_string();
        // After the command: state is field 3 of proc(5), minflt field 10.
        let minflt = tail.split_whitespace().nth(7)?.parse().ok()?;
        Some((name, minflt))
    };
    let t0 = std::time::Instant::now();
    let (mut last, mut quiet) = (None, 0);
    while quiet < 3 {
        assert!(t0.elapsed().as_secs() < 20, "{comm} ({pid}) did not settle");
        std::thread::sleep(std::time::Duration::from_millis(50));
        match minor_faults() {
            Some((name, faults)) if name == comm => {
                quiet = if last == Some(faults) { quiet + 1 } else { 0 };
                last = Some(faults);
            }
            _ => (quiet, last) = (0, None),
        }
    }
}

/// The same run each time: address randomisation off, wait (so the recorder is attached),
/// then dd reads 16 MiB from /dev/zero into a fresh buffer twice. perl execs dd, so the pid
/// stays the same.
fn workload(delay_s: u32) -> Child {
    let child = StdCommand::new("setarch")
        .args(["-R", "perl", "-e"])
        .arg(format!(
            r#"sleep {delay_s}; exec "dd", "if=/dev/zero", "of=/dev/null", "bs=16M", "count=2", "status=none""#
        ))
        .spawn()
        .expect("setarch and perl run");
    // Attach only once setarch has become perl and perl's start-up faults are over, so
    // that both recorders see the same part of the run.
    wait_until_idle(child.id(), "perl");
    child
}

fn pages_of(json: &Value) -> HashMap<u64, u64> {
    json["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["vaddr"].as_u64().unwrap(), p["samples"].as_u64().unwrap()))
        .collect()
}

#[test]
fn live_page_fault_counts_agree_with_perf_record() {
    assert!(
        StdCommand::new("perf")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs the perf tool (Debian: linux-perf; tests/all.sh installs it)"
    );
    // One run recorded by both at once, both attached during perl's sleep, before it
    // execs dd: rocsctl record, following it to its end, and perf record, every fault
    // sampled. (Two runs, one for each, differed by more than 1% in a CI run: 4,381
    // faults against 4,172.)
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pf.data");
    let mut child = workload(3);
    let mut perf = StdCommand::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "-d",
            "-p",
            &child.id().to_string(),
            "-o",
        ])
        .arg(&data)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let out = record(child.id(), "30")
        .args(["--cpu-budget", "1", "--json"])
        .output()
        .unwrap();
    child.wait().unwrap();
    assert!(perf.wait().unwrap().success());
    assert_eq!(
        out.status.code(),
        Some(2),
        "the target exits before 30 s: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ours["measures_llc"], false);
    // What the sampler says of its run (records lost, throttling, the period), for the
    // messages below: a count short of perf's is read with it.
    let sampling = ours["sampling"].to_string();
    let ours = pages_of(&ours);

    // perf script's addresses.
    let script = StdCommand::new("perf")
        .args(["script", "-F", "addr", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let mut theirs: HashMap<u64, u64> = HashMap::new();
    for line in String::from_utf8(script.stdout).unwrap().lines() {
        let addr = u64::from_str_radix(line.trim(), 16).unwrap();
        *theirs.entry(addr & !0xfff).or_default() += 1;
    }
    let total = |m: &HashMap<u64, u64>| m.values().sum::<u64>();
    let (a, b) = (total(&ours), total(&theirs));
    assert!(
        b >= 4096,
        "perf saw {b} faults (16 MiB buffer = 4096 pages)"
    );
    // The same faults, but for a recorder attached late (1%).
    assert!(
        a.abs_diff(b) * 100 <= b,
        "rocsctl {a} samples, perf {b}; rocsctl's sampling: {sampling}"
    );
    let agree = theirs
        .iter()
        .filter(|(p, n)| ours.get(p) == Some(n))
        .count();
    assert!(
        agree * 100 >= theirs.len() * 99,
        "{agree} of {} pages agree",
        theirs.len()
    );
}

#[test]
fn record_text_and_svg_show_the_pictures() {
    let mut child = workload(2);
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("p.svg");
    let out = record(child.id(), "30")
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    child.wait().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(text.contains("does NOT measure cache misses"), "{text}");
    assert!(text.contains("address space, compacted"), "{text}");
    assert!(
        err.contains("record:") && err.contains("samples"),
        "a progress line per second: {err}"
    );
    assert!(err.contains("exited after"), "{err}");
    // The picture holds what the text says: "N samples on P pages".
    let line = text.lines().find(|l| l.contains(" samples on ")).unwrap();
    let words: Vec<&str> = line.split(' ').collect();
    let (samples, pages) = (words[0].parse().unwrap(), words[3].parse().unwrap());
    let picture = std::fs::read_to_string(&svg).unwrap();
    svg_check::assert_no_llc_picture(&svg_check::parse(&picture), samples, pages);
}

#[test]
fn record_of_a_missing_process_fails_clearly() {
    let out = record(999999999, "1").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no process with pid 999999999"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn record_without_permission_says_what_to_do() {
    // An unprivileged user may not sample a root process (perf_event_paranoid, ptrace).
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return; // needs root to switch to `nobody`; CI runs as root
    }
    let mut sleeper = StdCommand::new("sleep").arg("30").spawn().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("rocsctl");
    let out = StdCommand::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(&bin)
        .args([
            "record",
            "--pid",
            &sleeper.id().to_string(),
            "--duration",
            "1",
            "--event",
            "page-faults",
        ])
        .output()
        .unwrap();
    sleeper.kill().ok();
    sleeper.wait().ok();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no permission"), "{err}");
    assert!(err.contains("CAP_PERFMON") || err.contains("root"), "{err}");
}

#[test]
fn record_of_an_idle_process_is_an_error_not_an_empty_profile() {
    let mut sleeper = StdCommand::new("sleep").arg("30").spawn().unwrap();
    wait_until_idle(sleeper.id(), "sleep");
    let out = record(sleeper.id(), "0.5").arg("--json").output().unwrap();
    sleeper.kill().ok();
    sleeper.wait().ok();
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("no samples recorded"));
}
