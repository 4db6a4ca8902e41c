//! rocsd end to end on the sim platform: targets reach Steady with pages confined; status,
//! targets, profile, stack and history answer; pause, resume and restore act; a broken policy
//! is refused on reload with its file and line while the old policy stays; SIGTERM stops
//! rocsd cleanly and removes the socket.

use crate::common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// art-like on the ROCS machine: its weight arrays stream past a reused layer, so confining
/// them pays (about +20% IPC). No rest between windows keeps the test quick; art runs sixteen
/// times its built-in length so that it outlives the test (at four times, it once finished
/// in the instant between SIGTERM and the stop, leaving no pages to restore); mcf runs as built.
const CONFIG: &str = r#"
platform = "sim"
restore_on_exit = true
[knobs]
sample_period = 50
search_max_repeats = 2
min_llc_miss_rate = 0.1
[sim]
machine = "ppc970fx"
window_cycles = 50_000_000
pause_ms = 1
cpu_share = 1.0
[[sim.workload]]
name = "art-like"
scale = 16.0
seed = 1
[[sim.workload]]
name = "mcf-like"
"#;

const POLICY: &str = r#"
name = "spec"
[match]
comm = ["art", "mcf"]
"#;

fn target<'a>(targets: &'a Value, comm: &str) -> Option<&'a Value> {
    targets.as_array()?.iter().find(|t| t["comm"] == comm)
}

#[test]
fn sim_targets_reach_steady_and_answer_every_request() {
    let t_start = Instant::now();
    let mut d = common::start(CONFIG, &[("10-spec.toml", POLICY)]);

    let status = d.ok(json!({"request": "status"}));
    assert_eq!(status["platform"], "sim");
    assert_eq!(status["capability"], "full");
    assert_eq!(status["protocol"], 1);
    assert_eq!(status["colours"], 16, "ppc970fx: 512 KB 8-way, 128 B lines");
    assert_eq!(status["policies"][0]["name"], "spec");

    eprintln!("{:?}: art reaches Steady", t_start.elapsed());
    // art reaches Steady with pages in the pollute buffer.
    let art = d.wait(
        Duration::from_secs(120),
        "art steady with pages confined",
        |d| {
            let ts = d.ok(json!({"request": "targets"}));
            let t = target(&ts, "art")?.clone();
            (t["state"] == "steady" && t["pages_confined"].as_u64()? > 0).then_some(t)
        },
    );
    let pid = art["pid"].as_u64().unwrap();
    assert_eq!(art["policy"], "spec");
    assert!(art["samples"].as_u64().unwrap() > 0);
    assert!(art["ipc"].as_f64().unwrap() > 0.0);

    eprintln!("{:?}: The profile has pages", t_start.elapsed());
    profile_stack_and_history_answer(&mut d, pid);
    eprintln!("{:?}: Pause and resume", t_start.elapsed());
    pause_resume_and_restore_act(&mut d, pid);
    eprintln!("{:?}: A broken policy", t_start.elapsed());
    a_broken_policy_is_refused_and_a_fixed_one_applies(&mut d);

    // Under its new policy art searches again and confines pages again.
    let confined = d.wait(
        Duration::from_secs(120),
        "art confined under art-only",
        |d| {
            let ts = d.ok(json!({"request": "targets"}));
            let t = target(&ts, "art")?;
            let n = t["pages_confined"].as_u64()?;
            (t["state"] == "steady" && n > 0).then_some(n)
        },
    );
    eprintln!("{:?}: SIGTERM:", t_start.elapsed());
    sigterm_stops_cleanly_and_restores(&mut d, confined);
}

/// The profile has pages, with the confined ones marked; the stack's top k are confined;
/// the history tells the way there.
fn profile_stack_and_history_answer(d: &mut common::Rocsd, pid: u64) {
    // The profile has pages, with the confined ones marked; the stack's top k are confined.
    let profile = d.ok(json!({"request": "profile", "target": pid.to_string()}));
    let pages = profile["pages"].as_array().unwrap();
    assert!(!pages.is_empty());
    assert!(pages.iter().any(|p| p["confined"] == true));
    let stack = d.ok(json!({"request": "stack", "target": "art", "limit": 5}));
    assert!(stack["k"].as_u64().unwrap() > 0, "{stack}");
    assert!(stack["entries"].as_array().unwrap().len() <= 5);
    assert!(stack["total"].as_u64().unwrap() >= stack["k"].as_u64().unwrap());
    let rates: Vec<f64> = stack["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["miss_rate"].as_f64().unwrap())
        .collect();
    assert!(
        rates.windows(2).all(|w| w[0] >= w[1]),
        "stack not ordered: {rates:?}"
    );

    // The history tells the way there: profile, search steps, the choice, steady.
    let history = d.ok(json!({"request": "history", "target": "art"}));
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in ["state", "profile", "search"] {
        assert!(kinds.contains(&k), "no {k} event in {kinds:?}");
    }
    assert!(history["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["text"].as_str().unwrap().contains("-> steady")));
}

/// Pause and resume one target; restore moves every page back out of the pollute buffer.
fn pause_resume_and_restore_act(d: &mut common::Rocsd, pid: u64) {
    let r = d.ok(json!({"request": "pause", "target": "art"}));
    assert_eq!(r["targets"], json!([pid]));
    d.wait(Duration::from_secs(10), "art paused", |d| {
        let ts = d.ok(json!({"request": "targets"}));
        (target(&ts, "art")?["state"] == "paused").then_some(())
    });
    d.ok(json!({"request": "resume", "target": pid.to_string()}));
    d.wait(Duration::from_secs(10), "art resumed", |d| {
        let ts = d.ok(json!({"request": "targets"}));
        (target(&ts, "art")?["state"] != "paused").then_some(())
    });

    d.wait(Duration::from_secs(120), "art confined again", |d| {
        let ts = d.ok(json!({"request": "targets"}));
        (target(&ts, "art")?["pages_confined"].as_u64()? > 0).then_some(())
    });
    // Restore says how many pages went back: here all of them before the reply (fewer
    // than page_budget), so none is still confined.
    let r = d.ok(json!({"request": "restore", "target": "art"}));
    assert_eq!(r["targets"], json!([pid]));
    assert!(r["pages_restored"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["pages_still_confined"], 0, "{r}");
    let ts = d.ok(json!({"request": "targets"}));
    let art = target(&ts, "art").unwrap();
    assert_eq!(art["pages_confined"], 0, "{art}");
    // The restored target is paused, and status says so (the daemon as a whole is not).
    assert_eq!(art["state"], "paused", "{art}");
    let status = d.ok(json!({"request": "status"}));
    assert_eq!(status["paused"], false);
    assert_eq!(status["paused_targets"], json!([pid]));
    // It stays paused, with nothing confined, until resumed.
    std::thread::sleep(Duration::from_millis(500));
    let ts = d.ok(json!({"request": "targets"}));
    let art = target(&ts, "art").unwrap();
    assert!(
        art["state"] == "paused" && art["pages_confined"] == 0,
        "{art}"
    );
    let r = d.ok(json!({"request": "resume", "target": "art"}));
    assert!(r.get("pages_restored").is_none(), "{r}");
    let status = d.ok(json!({"request": "status"}));
    assert_eq!(status["paused_targets"], json!([]));

    // Unknown and ambiguous targets are refused with a reason.
    let r = d.raw(json!({"request": "profile", "target": "nosuch"}));
    assert_eq!(r["error"]["code"], "no_such_target");
}

/// A broken policy: the reload is refused, names file and line, the old policy stays.
/// SIGHUP re-reads too: fixed, the new policy applies and mcf is let go.
fn a_broken_policy_is_refused_and_a_fixed_one_applies(d: &mut common::Rocsd) {
    std::fs::write(
        d.policy_dir.join("20-broken.toml"),
        "[match]\ncomm = \"x\"\n[knobs]\nsample_period = \"often\"\n",
    )
    .unwrap();
    let r = d.raw(json!({"request": "reload"}));
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["code"], "reload_failed");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("20-broken.toml:4:1"), "{msg}");
    let status = d.ok(json!({"request": "status"}));
    assert_eq!(status["policies"].as_array().unwrap().len(), 1);
    assert_eq!(status["policies"][0]["name"], "spec");
    assert!(status["last_reload_error"]
        .as_str()
        .unwrap()
        .contains("20-broken.toml:4:1"));
    let ts = d.ok(json!({"request": "targets"}));
    assert!(
        target(&ts, "art").is_some(),
        "the old policy still holds art"
    );

    std::fs::remove_file(d.policy_dir.join("20-broken.toml")).unwrap();
    std::fs::write(
        d.policy_dir.join("10-spec.toml"),
        "name = \"art-only\"\n[match]\ncomm = \"art\"\n",
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    d.wait(Duration::from_secs(10), "SIGHUP reload applied", |d| {
        let ts = d.ok(json!({"request": "targets"}));
        let art = target(&ts, "art")?;
        (art["policy"] == "art-only" && target(&ts, "mcf").is_none()).then_some(())
    });
}

/// SIGTERM: a clean exit within 5 s, pages restored (restore_on_exit), the socket gone.
fn sigterm_stops_cleanly_and_restores(d: &mut common::Rocsd, confined: u64) {
    let t0 = Instant::now();
    let status = d.terminate(Duration::from_secs(10));
    assert!(status.success(), "rocsd exit: {status}\n{}", d.log());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    assert!(!d.socket.exists(), "the socket is still there");
    assert!(d.log().contains("SIGTERM: stopping"));
    // "restored N of M confined pages": every page came back (M is the count at the stop,
    // which a late phase change could have moved away from `confined`).
    let log = d.log();
    let counts: Vec<u64> = log
        .lines()
        .find_map(|l| {
            let rest = l.split_once("restored ")?.1;
            rest.split_once(" confined pages")
                .map(|(c, _)| c.to_string())
        })
        .unwrap_or_else(|| panic!("no pages restored at stop ({confined} were confined):\n{log}"))
        .split(" of ")
        .map(|n| n.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 2);
    assert!(
        counts[0] > 0 && counts[0] == counts[1],
        "restored {counts:?}"
    );
}

#[test]
fn a_bad_workload_name_stops_rocsd_at_start_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("rocsd.toml");
    std::fs::write(
        &conf,
        format!(
            "platform = \"sim\"\nsocket = {:?}\npolicy_dir = {:?}\n[[sim.workload]]\nname = \"gcc-like\"\n",
            dir.path().join("s.sock").display().to_string(),
            dir.path().display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .arg("--config")
        .arg(&conf)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rocsd.toml:5:8") && err.contains("gcc-like"),
        "{err}"
    );
}
