//! rocsd on the sim platform with two tenants sharing the LLC (noisy-neighbour): their
//! controllers take turns. One says it waits for the other's search, and their profile and
//! search stretches never overlap.

use crate::common;

use std::time::Duration;

use serde_json::{json, Value};

/// The knobs of the simulated evaluation (rocs-sim's `sim_knobs`) and its window (baseline
/// cycles / 200); the workload runs twice its built-in length so that both turns fit in
/// one run.
const CONFIG: &str = r#"
platform = "sim"
[knobs]
sample_period = 100
sample_cpu_budget = 0.25
profile_windows = 3
profile_max_windows = 10
[sim]
machine = "ppc970fx"
window_cycles = 3_600_000
pause_ms = 1
cpu_share = 1.0
[[sim.workload]]
name = "noisy-neighbour"
scale = 2.0
seed = 1
"#;

const POLICY: &str = r#"
name = "tenants"
[match]
comm = ["victim", "neighbour"]
"#;

/// The windows (first, last) in which a target was profiling or searching, from its
/// history; a stretch still going ends at `u64::MAX`.
fn busy_stretches(history: &Value) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut start = None;
    for e in history["events"].as_array().unwrap() {
        let d = &e["detail"];
        if d["event"] != "transition" {
            continue;
        }
        let busy = |s: &Value| s == "profile" || s == "search";
        let w = d["window"].as_u64().unwrap();
        match (busy(&d["from"]), busy(&d["to"])) {
            (false, true) => start = Some(w),
            (true, false) => {
                if let Some(s) = start.take() {
                    out.push((s, w));
                }
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, u64::MAX));
    }
    out
}

#[test]
fn tenants_sharing_the_llc_take_turns() {
    let d = common::start(CONFIG, &[("10-tenants.toml", POLICY)]);
    let histories = d.wait(
        Duration::from_secs(120),
        "a tenant waits for the other's search, which ends",
        |d| {
            let ts = d.ok(json!({"request": "targets"}));
            let ts = ts.as_array()?;
            let pid_of = |comm: &str| ts.iter().find(|t| t["comm"] == comm)?["pid"].as_u64();
            let (victim, neighbour) = (pid_of("victim")?, pid_of("neighbour")?);
            let h = |pid: u64| d.ok(json!({"request": "history", "target": pid.to_string()}));
            let (hv, hn) = (h(victim), h(neighbour));
            let waited = [&hv, &hn].iter().any(|h| {
                h["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e["detail"]["event"] == "waiting")
            });
            // Both stretches of the holder are over: it reached steady after its search.
            let done = [&hv, &hn]
                .iter()
                .any(|h| busy_stretches(h).iter().any(|&(_, end)| end != u64::MAX));
            (waited && done).then_some(((victim, hv), (neighbour, hn)))
        },
    );
    let ((victim, hv), (neighbour, hn)) = histories;
    // The waiting one names the other, and says why.
    for (me, other, h) in [(victim, neighbour, &hv), (neighbour, victim, &hn)] {
        for e in h["events"].as_array().unwrap() {
            if e["detail"]["event"] == "waiting" {
                let text = e["text"].as_str().unwrap();
                assert!(
                    text.contains(&format!("waiting for pid {other}'s search to finish")),
                    "{me}: {text}"
                );
            }
        }
    }
    // Both were attached together, so their window counts agree: their busy stretches
    // must not overlap.
    let (sv, sn) = (busy_stretches(&hv), busy_stretches(&hn));
    assert!(!sv.is_empty() || !sn.is_empty());
    for &(a0, a1) in &sv {
        for &(b0, b1) in &sn {
            assert!(
                a1 <= b0 || b1 <= a0,
                "victim busy {a0}..{a1} overlaps the neighbour's {b0}..{b1}"
            );
        }
    }
}
