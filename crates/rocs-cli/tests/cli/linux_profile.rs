//! `rocsctl profile --perf-data` against files written by the real perf tool.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command as StdCommand;

use assert_cmd::Command;
use serde_json::Value;

use crate::svg_check;

fn rocsctl() -> Command {
    Command::cargo_bin("rocsctl").unwrap()
}

fn need_perf() {
    assert!(
        StdCommand::new("perf")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs the perf tool (Debian: linux-perf; tests/all.sh installs it)"
    );
}

/// perf record of a command, every page fault sampled with its address (`-d`).
fn perf_record(out: &Path, extra: &[&str], cmd: &[&str]) {
    let st = StdCommand::new("perf")
        .args(["record", "-q", "-e", "page-faults", "-c", "1"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(cmd)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Per-page counts from `perf script -F <fields>` lines "[pid] addr", optionally for one pid.
fn perf_script_pages(data: &Path, pid: Option<u32>) -> HashMap<u64, u64> {
    let fields = if pid.is_some() { "pid,addr" } else { "addr" };
    let out = StdCommand::new("perf")
        .args(["script", "-F", fields, "-i"])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut pages = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut parts = line.split_whitespace();
        if let Some(p) = pid {
            let this: u32 = parts.next().unwrap().parse().unwrap();
            if this != p {
                continue;
            }
        }
        let addr = u64::from_str_radix(parts.next().unwrap(), 16).unwrap();
        *pages.entry(addr & !0xfff).or_insert(0) += 1;
    }
    pages
}

fn rocs_pages(data: &Path, pid: Option<u32>) -> (Value, HashMap<u64, u64>) {
    let mut cmd = rocsctl();
    cmd.args(["profile", "--json", "--perf-data"]).arg(data);
    if let Some(p) = pid {
        cmd.args(["--pid", &p.to_string()]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pages = v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["vaddr"].as_u64().unwrap(), p["samples"].as_u64().unwrap()))
        .collect();
    (v, pages)
}

const DD: &[&str] = &[
    "dd",
    "if=/dev/zero",
    "of=/dev/null",
    "bs=8M",
    "count=2",
    "status=none",
];

#[test]
fn import_gives_exactly_perf_scripts_page_counts() {
    need_perf();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pf.data");
    perf_record(&data, &["-d"], DD);
    let (v, ours) = rocs_pages(&data, None);
    let theirs = perf_script_pages(&data, None);
    assert!(
        theirs.len() >= 2048,
        "an 8 MiB buffer is 2048 pages: {}",
        theirs.len()
    );
    assert_eq!(ours, theirs);
    assert_eq!(
        v["samples_total"].as_u64().unwrap(),
        theirs.values().sum::<u64>()
    );
    // Page faults carry no data source: hits, misses and miss rate are null.
    let p = &v["pages"][0];
    assert!(
        p["hits"].is_null() && p["misses"].is_null() && p["miss_rate"].is_null(),
        "{p}"
    );
    assert_eq!(v["measures_llc"], false);
}

#[test]
fn pipe_mode_files_import_the_same() {
    need_perf();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pipe.data");
    let file = std::fs::File::create(&data).unwrap();
    let st = StdCommand::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "-d",
            "-o",
            "-",
            "--",
        ])
        .args(DD)
        .stdout(file)
        .status()
        .unwrap();
    assert!(st.success());
    let (v, ours) = rocs_pages(&data, None);
    assert_eq!(v["import"]["pipe_mode"], true);
    assert_eq!(ours, perf_script_pages(&data, None));
}

#[test]
fn pid_filter_matches_perf_script_for_that_process() {
    need_perf();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("two.data");
    // A shell running dd twice: three processes in one file.
    perf_record(
        &data,
        &["-d"],
        &["sh", "-c", "dd if=/dev/zero of=/dev/null bs=4M count=1 status=none; dd if=/dev/zero of=/dev/null bs=2M count=1 status=none"],
    );
    let out = StdCommand::new("perf")
        .args(["script", "-F", "pid", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let mut pids: Vec<u32> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    assert!(pids.len() >= 3, "{pids:?}");
    for &pid in &pids {
        let (v, ours) = rocs_pages(&data, Some(pid));
        assert_eq!(ours, perf_script_pages(&data, Some(pid)), "pid {pid}");
        assert!(v["import"]["other_processes"].as_u64().unwrap() > 0);
    }
}

fn profile_err(data: &Path) -> String {
    let out = rocsctl()
        .args(["profile", "--perf-data"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "must fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.stdout.is_empty(), "no partial output on error");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_files_are_clear_errors() {
    need_perf();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.data");
    perf_record(&good, &["-d"], DD);
    let bytes = std::fs::read(&good).unwrap();

    // Truncated: cut inside the data section, and inside the header.
    for len in [bytes.len() / 2, 50] {
        let cut = dir.path().join(format!("cut{len}.data"));
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let err = profile_err(&cut);
        assert!(err.contains("truncated"), "{err}");
    }
    // Foreign file.
    let foreign = dir.path().join("foreign.data");
    std::fs::write(
        &foreign,
        b"\x7fELF\x02\x01\x01\x00 this is not perf data at all",
    )
    .unwrap();
    let err = profile_err(&foreign);
    assert!(err.contains("not a perf.data file"), "{err}");
    // Empty file.
    let empty = dir.path().join("empty.data");
    std::fs::write(&empty, b"").unwrap();
    assert!(profile_err(&empty).contains("not a perf.data file"));
    // Recorded without -d: no addresses.
    let noaddr = dir.path().join("noaddr.data");
    perf_record(&noaddr, &[], DD);
    let err = profile_err(&noaddr);
    assert!(
        err.contains("no data addresses") && err.contains("perf record -d"),
        "{err}"
    );
    // Missing file.
    let err = profile_err(&dir.path().join("missing.data"));
    assert!(err.contains("cannot read"), "{err}");
    // A pid with no samples in the file.
    let out = rocsctl()
        .args(["profile", "--pid", "1", "--perf-data"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("no samples of pid 1"));
}

#[test]
fn svg_and_text_pictures_from_a_file() {
    need_perf();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pf.data");
    perf_record(&data, &["-d"], DD);
    let svg = dir.path().join("out.svg");
    let out = rocsctl()
        .args(["profile", "--perf-data"])
        .arg(&data)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("address space, compacted") && text.contains("no data source"),
        "{text}"
    );
    let (samples, pages) = samples_and_pages(&text);
    let picture = std::fs::read_to_string(&svg).unwrap();
    svg_check::assert_no_llc_picture(&svg_check::parse(&picture), samples, pages);
}

/// "N samples on P pages" of the text output.
fn samples_and_pages(text: &str) -> (u64, usize) {
    let line = text
        .lines()
        .find(|l| l.contains(" samples on "))
        .unwrap_or_else(|| panic!("no 'samples on' line: {text}"));
    let mut words = line.split(' ');
    let samples = words.next().unwrap().parse().unwrap();
    let pages = words.nth(2).unwrap().parse().unwrap();
    (samples, pages)
}
