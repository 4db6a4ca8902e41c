//! `rocsctl sim`: listing, running, replaying traces, and every kind of bad input getting a
//! clear error (never a panic).

use assert_cmd::Command;

fn rocsctl() -> Command {
    Command::cargo_bin("rocsctl").unwrap()
}

/// Run and return (success, stdout, stderr); a panic is always a failure of the test.
fn run(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut c = rocsctl();
    c.args(args);
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "rocsctl panicked: {stderr}");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        stderr,
    )
}

#[test]
fn list_shows_builtins() {
    let (ok, out, _) = run(&["sim", "list", "--json"], None);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names = |k: &str| -> Vec<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap().to_string())
            .collect()
    };
    for m in ["ppc970fx", "xeon-like", "tiny"] {
        assert!(names("machines").contains(&m.to_string()), "{m}");
    }
    for w in [
        "art-like",
        "swim-like",
        "cg-like",
        "mgrid-like",
        "mcf-like",
        "twolf-like",
        "phased",
        "noisy-neighbour",
    ] {
        assert!(names("workloads").contains(&w.to_string()), "{w}");
    }
    let (ok, out, _) = run(&["sim", "list"], None);
    assert!(ok && out.contains("art-like"));
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let (ok, out, err) = run(args, None);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn run_reports_every_field_and_the_same_seed_gives_the_same_numbers() {
    let args = [
        "sim",
        "run",
        "--workload",
        "art-like",
        "--scale",
        "0.02",
        "--seed",
        "5",
        "--json",
    ];
    let a = run_json(&args);
    for k in ["workload", "machine", "seed", "sim_accesses_per_sec"] {
        assert!(!a[k].is_null(), "missing {k}");
    }
    assert_eq!(a["machine"], "ppc970fx");
    assert_eq!(a["seed"], 5);
    assert!(a["sim_accesses_per_sec"].as_f64().unwrap() > 0.0);
    let m = &a["modes"]["baseline"];
    for k in [
        "instructions",
        "cycles",
        "ipc",
        "llc_accesses",
        "llc_misses",
        "llc_mpki",
        "l1d_accesses",
        "l1d_misses",
    ] {
        assert!(m[k].is_number(), "missing {k}");
    }
    assert!(m["llc_misses"].as_u64().unwrap() > 0);
    let b = run_json(&args);
    for k in ["instructions", "cycles", "llc_misses", "l1d_misses"] {
        assert_eq!(m[k], b["modes"]["baseline"][k], "{k} differs between runs");
    }
    let c = run_json(&[
        "sim",
        "run",
        "--workload",
        "art-like",
        "--scale",
        "0.02",
        "--seed",
        "6",
        "--json",
    ]);
    assert_ne!(m["llc_misses"], c["modes"]["baseline"]["llc_misses"]);
}

/// `--timeline`: the rocs run window by window adds up to the run's own counts, and its
/// events are what the run reports it did (the search's measured points), in the words of
/// `rocsctl history`.
#[test]
fn the_timeline_adds_up_to_the_run_and_names_what_the_controller_did() {
    let args = [
        "sim",
        "run",
        "--workload",
        "art-like",
        "--scale",
        "0.2",
        "--mode",
        "rocs",
        "--timeline",
    ];
    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("timeline.svg");
    let json_args: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--json", "--timeline-svg", svg_path.to_str().unwrap()])
        .collect();
    let v = run_json(&json_args);
    let rocs = &v["modes"]["rocs"];
    let t = &v["timeline"];
    let windows = t["windows"].as_array().unwrap();
    let sum = |k: &str| windows.iter().map(|w| w[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("instructions"), rocs["instructions"].as_u64().unwrap());
    assert_eq!(sum("cycles"), rocs["cycles"].as_u64().unwrap());
    assert_eq!(sum("llc_misses"), rocs["llc_misses"].as_u64().unwrap());
    assert_eq!(
        sum("llc_references"),
        rocs["llc_accesses"].as_u64().unwrap()
    );
    assert_eq!(t["window_cycles"], rocs["window_cycles"]);
    for (i, w) in windows.iter().enumerate() {
        assert_eq!(
            w["window"].as_u64().unwrap(),
            i as u64,
            "one process: a row a window"
        );
    }
    let events = t["events"].as_array().unwrap();
    let of = |what: &'static str| events.iter().filter(move |e| e["what"] == what);
    // Every measured point of the search, in order, is a search step of the timeline.
    let points: Vec<(u64, f64)> = rocs["profile_points"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s[0].as_u64().unwrap(), s[1].as_f64().unwrap()))
        .collect();
    assert!(points.len() >= 3, "the search measured {points:?}");
    let steps: Vec<(u64, f64)> = of("search")
        .filter(|e| e["event"] == "search_step")
        .map(|e| (e["k"].as_u64().unwrap(), e["ipc"].as_f64().unwrap()))
        .collect();
    assert_eq!(steps, points);
    assert_eq!(
        of("profile").count() as u64,
        rocs["profiles"].as_u64().unwrap()
    );
    let first = &events[0];
    assert_eq!(first["from"], "observe");
    assert_eq!(first["to"], "profile");
    assert!(first["text"]
        .as_str()
        .unwrap()
        .starts_with("observe -> profile: "));
    // A window's state is the controller's once it had seen that window: profiling from the
    // window whose end moved it there.
    let at = first["window"].as_u64().unwrap() as usize;
    assert_eq!(windows[at]["state"], "profile");

    // The picture: the IPC line has a point per window, and the state band a window per
    // window, in the states of the JSON.
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let with_class = |c: &str| -> Vec<roxmltree::Node> {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(c))
            .collect()
    };
    let ipc = with_class("ipc");
    assert_eq!(ipc.len(), 1, "one process, one line");
    assert_eq!(
        ipc[0].attribute("points").unwrap().split(' ').count(),
        windows.len()
    );
    let states: Vec<&str> = with_class("state")
        .iter()
        .map(|n| n.attribute("data-state").unwrap())
        .collect();
    let expected: Vec<&str> = windows
        .iter()
        .map(|w| w["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, expected);
    assert!(states.contains(&"search"));

    let (ok, text, err) = run(&args, None);
    assert!(ok, "{err}");
    assert!(text.contains("rocs, window by window"), "{text}");
    assert!(text.contains(&format!("state    {}", first["text"].as_str().unwrap())));
    assert!(
        text.lines()
            .filter(|l| l.contains("pid 1000 search   k = "))
            .count()
            == points.len(),
        "{text}"
    );

    // Without a rocs run there is nothing to show: said, not ignored.
    for flag in [&["--timeline"][..], &["--timeline-svg", "t.svg"]] {
        let mut baseline = vec!["sim", "run", "--workload", "art-like"];
        baseline.extend_from_slice(flag);
        let (ok, _, err) = run(&baseline, None);
        assert!(!ok);
        assert!(
            err.contains(flag[0]) && err.contains("--mode rocs"),
            "{err}"
        );
    }
}

#[test]
fn unknown_names_list_the_known_ones() {
    let (ok, _, err) = run(&["sim", "run", "--workload", "gcc-like"], None);
    assert!(!ok);
    assert!(
        err.contains("unknown workload 'gcc-like'") && err.contains("art-like"),
        "{err}"
    );
    let (ok, _, err) = run(
        &["sim", "run", "--workload", "art-like", "--machine", "vax"],
        None,
    );
    assert!(!ok);
    assert!(
        err.contains("unknown machine 'vax'") && err.contains("ppc970fx"),
        "{err}"
    );
}

#[test]
fn malformed_toml_says_file_line_column_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("w.toml");
    std::fs::write(
        &f,
        "name = \"w\"\n[[process]]\nname = \"p\"\naccesses = 100\n[[process.region]]\nname = \"r\"\nsize = \"4KiB\"\npattern = \"zigzag\"\nshare = 1.0\n",
    )
    .unwrap();
    let path = f.to_str().unwrap();
    let (ok, _, err) = run(&["sim", "run", "--workload", path], None);
    assert!(!ok);
    assert!(err.contains(&format!("{path}:8:")), "{err}");
    assert!(err.contains("sequential"), "says what was expected: {err}");

    std::fs::write(&f, "name = \"w\"\n[[process]]\nname = \"p\"\naccesses = 100\n[[process.region]]\nname = \"r\"\nsize = \"4KiB\"\npattern = \"strided\"\nshare = 1.0\n").unwrap();
    let (ok, _, err) = run(&["sim", "run", "--workload", path], None);
    assert!(!ok && err.contains("stride"), "{err}");

    let (ok, _, err) = run(&["sim", "run", "--workload", "/nonexistent/w.toml"], None);
    assert!(!ok && err.contains("/nonexistent/w.toml"), "{err}");
}

#[test]
fn impossible_geometry_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.toml");
    let base = "name = \"m\"\nclock_ghz = 2.0\nbase_cpi = 1.0\npage_size = \"4KiB\"\nmemory = \"64MiB\"\nmemory_latency = 100\n[l1d]\nsize = \"32KiB\"\nline = 64\nways = 8\n";
    for (llc, reason) in [
        (
            "[llc]\nsize = \"384KiB\"\nline = 64\nways = 8\n",
            "sets_per_slice must be a power of two",
        ),
        (
            "[llc]\nsize = \"512KiB\"\nline = 8192\nways = 8\n",
            "smaller than the line size",
        ),
        (
            "[llc]\nsize = \"512KiB\"\nline = 96\nways = 8\n",
            "line_size must be a power of two",
        ),
        (
            "[llc]\nsize = \"512KiB\"\nline = 64\nways = 0\n",
            "is not ways * sets",
        ),
    ] {
        std::fs::write(&f, format!("{base}{llc}")).unwrap();
        let (ok, _, err) = run(
            &[
                "sim",
                "run",
                "--workload",
                "art-like",
                "--machine",
                f.to_str().unwrap(),
            ],
            None,
        );
        assert!(!ok);
        assert!(
            err.contains("llc: impossible cache geometry") && err.contains(reason),
            "{err}"
        );
    }
}

#[test]
fn trace_replays_from_stdin_and_a_bad_line_reports_its_number() {
    let trace = "==1== Lackey\nI  00400000,4\n L 00001000,8\n S 00001008,8\n M 00002000,4\nI  00400004,4\n L 0000103c,8\n";
    let (ok, out, err) = run(
        &[
            "sim",
            "trace",
            "--format",
            "lackey",
            "-",
            "--machine",
            "tiny",
            "--identity-map",
            "--json",
        ],
        Some(trace),
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = &v["modes"]["baseline"];
    assert_eq!(m["instructions"], 2);
    assert_eq!(m["l1d_accesses"], 4);
    // 0x1000 (miss), 0x1008 (hit), 0x2000 (miss), 0x103c..0x1043 straddles into a new line (miss).
    assert_eq!(m["l1d_misses"], 3);

    let bad = "I  00400000,4\n L 00001000,8\n L nothex,8\n";
    let (ok, _, err) = run(&["sim", "trace", "-", "--machine", "tiny"], Some(bad));
    assert!(!ok);
    assert!(err.contains("trace line 3"), "{err}");

    let (ok, _, err) = run(&["sim", "trace", "-", "--repeat", "2"], Some(trace));
    assert!(!ok && err.contains("repeat"), "{err}");
}

#[test]
fn trace_file_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.lackey");
    std::fs::write(&f, "I  00400000,4\n L 00001000,8\n").unwrap();
    let p = f.to_str().unwrap();
    let v: serde_json::Value = serde_json::from_str(
        &run(
            &[
                "sim",
                "trace",
                p,
                "--repeat",
                "3",
                "--json",
                "--machine",
                "tiny",
            ],
            None,
        )
        .1,
    )
    .unwrap();
    assert_eq!(v["modes"]["baseline"]["instructions"], 3);
    assert_eq!(v["modes"]["baseline"]["l1d_misses"], 1);
}

#[test]
fn eval_draws_each_speedup_as_a_bar_of_its_height() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("eval");
    let (ok, _, err) = run(
        &[
            "sim",
            "eval",
            "--machines",
            "tiny",
            "--scale",
            "0.01",
            "--oracle-grid",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "{err}");
    let eval: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("evaluation.json")).unwrap())
            .unwrap();
    let svg = std::fs::read_to_string(out.join("speedup-tiny.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert!(doc
        .root_element()
        .has_tag_name(("http://www.w3.org/2000/svg", "svg")));
    // Each bar is a rect whose <title> names its workload, mode and speedup.
    let bar = |name: &str| -> (f64, f64) {
        let rect = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect"))
            .find(|n| {
                n.children().any(|c| {
                    c.has_tag_name("title") && c.text().is_some_and(|t| t.starts_with(name))
                })
            })
            .unwrap_or_else(|| panic!("no bar titled {name:?}"));
        let title = rect.children().find_map(|c| c.text()).unwrap();
        let value: f64 = title.rsplit(": ").next().unwrap().parse().unwrap();
        (value, rect.attribute("height").unwrap().parse().unwrap())
    };
    let rows = eval["rows"].as_array().unwrap();
    assert!(rows.len() >= 5, "{eval}");
    for row in rows {
        let w = row["workload"].as_str().unwrap();
        let (one, unit) = bar(&format!("{w} baseline: "));
        assert_eq!(one, 1.0);
        let speedup = row["adaptive"]["speedup"].as_f64().unwrap();
        let (shown, height) = bar(&format!("{w} rocs (adaptive): "));
        assert!(
            (shown - speedup).abs() < 0.0005,
            "{w}: {shown} vs {speedup}"
        );
        assert!(
            (height / unit - speedup).abs() < 0.01,
            "{w}: bar {height} of {unit} for {speedup}"
        );
    }
}

#[test]
fn eval_runs_only_the_workloads_asked_for_and_says_so_in_its_command() {
    let eval = run_json(&[
        "sim",
        "eval",
        "--machines",
        "tiny",
        "--workloads",
        "mcf-like,art-like",
        "--scale",
        "0.01",
        "--oracle-grid",
        "2",
        "--json",
    ]);
    let rows: Vec<&str> = eval["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["mcf-like", "art-like"]);
    let command = eval["command"].as_str().unwrap();
    assert!(
        command.contains("--workloads mcf-like,art-like"),
        "{command}"
    );
    let (ok, _, err) = run(
        &[
            "sim",
            "eval",
            "--suite",
            "random",
            "--workloads",
            "art-like",
        ],
        None,
    );
    assert!(!ok && err.contains("--workloads"), "{err}");
}

#[test]
fn a_random_campaign_writes_each_workload_so_that_its_run_replays() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("random");
    let campaign = run_json(&[
        "sim",
        "eval",
        "--suite",
        "random",
        "--machines",
        "tiny",
        "--count",
        "2",
        "--length",
        "30",
        "--windows",
        "50",
        "--oracle-grid",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let page = std::fs::read_to_string(out.join("random.md")).unwrap();
    assert!(
        page.contains("rocsctl sim eval --suite random --machines tiny"),
        "{page}"
    );
    let rows = campaign["rows"].as_array().unwrap();
    let at_window_costs = campaign["rows_at_window_costs"].as_array().unwrap();
    assert_eq!((rows.len(), at_window_costs.len()), (2, 2));
    assert_eq!(campaign["summary"]["runs"], 2);
    assert_eq!(campaign["summary_at_window_costs"]["runs"], 2);
    // Each run replays from the page's command, the one at the window's costs with its
    // scale.
    for row in rows.iter().chain(at_window_costs) {
        let file = out.join(format!("random/{}.toml", row["workload"].as_str().unwrap()));
        let seed = row["seed"].as_u64().unwrap().to_string();
        let scale = row["cost_scale"].as_f64().unwrap().to_string();
        let again = run_json(&[
            "sim",
            "run",
            "--workload",
            file.to_str().unwrap(),
            "--machine",
            "tiny",
            "--cost-scale",
            &scale,
            "--seed",
            &seed,
            "--mode",
            "rocs",
            "--windows",
            "50",
            "--json",
        ]);
        let speedup = again["speedup"].as_f64().unwrap();
        assert_eq!(
            speedup,
            row["speedup"].as_f64().unwrap(),
            "{file:?} x{scale}"
        );
    }
    assert!(at_window_costs
        .iter()
        .all(|r| r["cost_scale"].as_f64().unwrap() < 0.01));
    // The page renders again from its JSON alone, the same.
    let again = dir.path().join("again");
    let (ok, _, err) = run(
        &[
            "sim",
            "eval",
            "--suite",
            "random",
            "--from",
            out.join("random.json").to_str().unwrap(),
            "--out",
            again.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read_to_string(again.join("random.md")).unwrap(),
        page
    );
    let (ok, _, err) = run(&["sim", "eval", "--suite", "random", "--count", "0"], None);
    assert!(!ok && err.contains("--count"), "{err}");
    let (ok, _, err) = run(
        &["sim", "run", "--workload", "art-like", "--cost-scale", "0"],
        None,
    );
    assert!(
        !ok && err.contains("--cost-scale") && err.contains("positive"),
        "{err}"
    );
}

/// A small binary trace of a loop over an array larger than `tiny`'s LLC, next to a
/// reused table.
fn write_trace(dir: &std::path::Path, name: &str) {
    let mut t = String::new();
    for i in 0..30_000u64 {
        t.push_str(&format!("I  {:08x},4\n", 0x40_0000 + (i % 16) * 4));
        t.push_str(&format!(" L {:08x},8\n", 0x100_0000 + (i * 64) % (1 << 20)));
        t.push_str(&format!(
            " L {:08x},8\n",
            0x20_0000 + (i * 2_654_435_761) % (96 << 10)
        ));
    }
    let text = dir.join(format!("{name}.lackey"));
    std::fs::write(&text, t).unwrap();
    let bin = dir.join(format!("{name}.rtrace"));
    let (ok, _, err) = run(
        &[
            "sim",
            "trace",
            "convert",
            text.to_str().unwrap(),
            bin.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "{err}");
}

#[test]
fn the_real_suite_runs_programs_alone_and_in_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path();
    write_trace(traces, "loop");
    std::fs::write(
        traces.join("manifest.toml"),
        "[[program]]\nname = \"loop\"\ntrace = \"loop.rtrace\"\nwhat = \"a loop and a table\"\n\
         [[program]]\nname = \"loop2\"\ntrace = \"loop.rtrace\"\nwhat = \"the same\"\n\
         [[pair]]\nname = \"loop+loop2\"\ntenants = [\"loop\", \"loop2\"]\n",
    )
    .unwrap();
    let suite = run_json(&[
        "sim",
        "eval",
        "--suite",
        "real",
        "--traces",
        traces.to_str().unwrap(),
        "--machines",
        "tiny",
        "--windows",
        "50",
        "--oracle-grid",
        "2",
        "--json",
    ]);
    let rows = suite["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{suite}");
    for row in rows {
        assert!(row["speedup"].as_f64().unwrap() > 0.5, "{suite}");
        assert!(row.get("not_run").is_none(), "{suite}");
    }
    assert_eq!(rows[2]["tenant_speedups"].as_array().unwrap().len(), 2);
    // Each case again at the costs its window stands for: far below the machine's.
    let at_window = suite["rows_at_window_costs"].as_array().unwrap();
    assert_eq!(at_window.len(), 3, "{suite}");
    for (row, own) in at_window.iter().zip(rows) {
        assert_eq!(row["case"], own["case"]);
        let scale = row["cost_scale"].as_f64().unwrap();
        assert!(scale > 0.0 && scale < 0.1, "{suite}");
        assert_eq!(own["cost_scale"].as_f64(), Some(1.0));
    }
    let page = std::fs::read_to_string(traces.join("real.md")).unwrap();
    assert!(
        page.contains("| loop | a loop and a table | window's (x"),
        "{page}"
    );
    assert!(
        page.contains("| loop | a loop and a table | machine's |"),
        "{page}"
    );
    assert!(page.contains("real-speedup-tiny.svg"), "{page}");
    roxmltree::Document::parse(
        &std::fs::read_to_string(traces.join("real-pages-tiny.svg")).unwrap(),
    )
    .expect("well-formed SVG");
    std::fs::write(
        traces.join("manifest.toml"),
        "[[program]]\nname = \"loop\"\ntrace = \"loop.rtrace\"\nwhat = \"x\"\nsize = 1\n",
    )
    .unwrap();
    let (ok, _, err) = run(
        &[
            "sim",
            "eval",
            "--suite",
            "real",
            "--traces",
            traces.to_str().unwrap(),
        ],
        None,
    );
    assert!(!ok && err.contains("manifest.toml:5"), "{err}");
}

/// [`run`] with owned arguments and no input.
fn run_owned(args: &[String]) -> (bool, String, String) {
    run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
}

/// The rows of the page JSON `name` in `dir`, without their wall-clock times (the one
/// thing two runs of the same evaluation may differ in).
fn page_rows(dir: &std::path::Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut page: serde_json::Value = serde_json::from_str(&text).unwrap();
    for row in page["rows"].as_array_mut().unwrap() {
        if let Some(row) = row.as_object_mut() {
            row.remove("wall_seconds");
        }
    }
    page["rows"].clone()
}

/// Run rocsctl with `args` and kill it (as a closed terminal or a shutdown would) once
/// `journal` has `lines` lines; the lines it has then.
fn stopped_once_the_journal_has(args: &[String], journal: &std::path::Path, lines: usize) -> usize {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rocsctl"))
        .args(args)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let count = || std::fs::read_to_string(journal).map_or(0, |t| t.lines().count());
    while count() < lines {
        assert!(
            child.try_wait().unwrap().is_none(),
            "it ended before it was stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    count()
}

#[test]
fn an_evaluation_stopped_part_way_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &std::path::Path| -> Vec<String> {
        [
            "sim",
            "eval",
            "--suite",
            "random",
            "--machines",
            "tiny",
            "--count",
            "2",
            "--length",
            "1000",
            "--oracle-grid",
            "2",
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([out.to_str().unwrap().to_string()])
        .collect()
    };
    let out = dir.path().join("out");
    let journal = out.join("random.journal");
    // Stopped once the first case is in the journal: its header and one case.
    let lines = stopped_once_the_journal_has(&args(&out), &journal, 2);
    assert_eq!(lines, 2, "the second case was still running");
    assert!(!out.join("random.md").exists());

    // The same command runs only the case that had not finished...
    let (ok, _, err) = run_owned(&args(&out));
    assert!(ok, "{err}");
    assert!(
        err.contains("resuming: 1 of 2 cases finished before"),
        "{err}"
    );
    assert!(err.contains("[2/2]") && !err.contains("[1/2]"), "{err}");
    assert!(
        !journal.exists(),
        "the journal goes once the page is written"
    );
    // ...and its page has the rows a run from scratch gives.
    let fresh = dir.path().join("fresh");
    let (ok, _, err) = run_owned(&args(&fresh));
    assert!(ok && !err.contains("resuming"), "{err}");
    assert_eq!(
        page_rows(&out, "random.json"),
        page_rows(&fresh, "random.json")
    );
}

#[test]
fn the_pollute_buffer_takes_the_colours_asked_for_and_refuses_all_of_them() {
    let run_with = |colours: &str, json: bool| {
        let mut args = vec![
            "sim",
            "run",
            "--workload",
            "art-like",
            "--scale",
            "0.05",
            "--mode",
            "rocs",
            "--pollute-colours",
            colours,
        ];
        args.extend(json.then_some("--json"));
        run(&args, None)
    };
    let rocs_cycles = |colours: &str| {
        let (ok, out, err) = run_with(colours, true);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["modes"]["rocs"]["cycles"].as_u64().unwrap()
    };
    // ppc970fx's LLC has 16 colours; a buffer of 2 is not the default's 1.
    assert_ne!(rocs_cycles("1"), rocs_cycles("2"));
    let (ok, _, err) = run_with("16", false);
    assert!(!ok);
    let why = "pollute_colours covers all 16 colours";
    assert_eq!(err.matches(why).count(), 1, "{err}");
    // Refused before the baseline runs, not after it.
    assert!(!err.contains("baseline"), "{err}");
}

#[test]
fn the_committed_evaluation_pages_are_what_their_json_renders_to() {
    // docs/evaluation's paper, modern and real pages, rendered again from their JSON by
    // the code as it is: the same page, the same JSON (a renderer change means running
    // `sim eval --from` again, never editing the page by hand).
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/evaluation");
    let out = tempfile::tempdir().unwrap();
    for (suite, json, page) in [
        ("paper", "evaluation.json", "README.md"),
        ("modern", "modern.json", "modern.md"),
        ("real", "real.json", "real.md"),
    ] {
        let from = docs.join(json);
        let (ok, _, err) = run(
            &[
                "sim",
                "eval",
                "--suite",
                suite,
                "--from",
                from.to_str().unwrap(),
                "--out",
                out.path().to_str().unwrap(),
            ],
            None,
        );
        assert!(ok, "{err}");
        for name in [json, page] {
            let committed = std::fs::read_to_string(docs.join(name)).unwrap();
            let rendered = std::fs::read_to_string(out.path().join(name)).unwrap();
            assert!(
                committed == rendered,
                "docs/evaluation/{name} differs from what `sim eval --suite {suite} --from \
                 {json}` renders"
            );
        }
    }
    // A page of the other suite is refused, naming the right one.
    let (ok, _, err) = run(
        &[
            "sim",
            "eval",
            "--suite",
            "paper",
            "--from",
            docs.join("modern.json").to_str().unwrap(),
        ],
        None,
    );
    assert!(!ok && err.contains("use --suite modern"), "{err}");
    // What to run is the JSON's: an option that would choose it is refused, not ignored.
    let (ok, _, err) = run(
        &[
            "sim",
            "eval",
            "--suite",
            "modern",
            "--from",
            docs.join("modern.json").to_str().unwrap(),
            "--oracle-grid",
            "2",
        ],
        None,
    );
    assert!(!ok && err.contains("--oracle-grid"), "{err}");
}

/// A machine shaped like the modern built-ins (victim LLC with DRRIP, a prefetcher
/// switched off while sampling), small enough for a test, written into `dir`.
fn small_modern_machine(dir: &std::path::Path) -> String {
    let machine = dir.join("small-modern.toml");
    std::fs::write(
        &machine,
        "name = \"small-modern\"\nclock_ghz = 3.0\nbase_cpi = 0.4\npage_size = \"4KiB\"\n\
         memory = \"256MiB\"\nmemory_latency = 300\n\
         [l1d]\nsize = \"8KiB\"\nline = 64\nways = 8\n\
         [l2]\nsize = \"32KiB\"\nline = 64\nways = 8\nlatency = 14\n\
         [llc]\nsize = \"256KiB\"\nline = 64\nways = 16\nlatency = 50\npolicy = \"drrip\"\n\
         fill = \"exclusive-victim\"\n\
         [prefetch]\nstreams = 16\ndegree = 2\ndistance = 20\noff_while_sampling = true\n\
         [pmu]\nsample_cost_cycles = 400\n",
    )
    .unwrap();
    machine.to_str().unwrap().to_string()
}

/// The options of the small modern machine's evaluation and runs.
const SMALL_MODERN: [&str; 6] = [
    "--scale",
    "auto:0.03",
    "--windows",
    "100",
    "--oracle-grid",
    "4",
];

#[test]
fn sim_run_gives_each_column_of_a_modern_row_again() {
    // Each rocs column of a modern.md row is what `sim run --mode rocs` prints with the
    // matching options.
    let dir = tempfile::tempdir().unwrap();
    let machine = small_modern_machine(dir.path());
    let machine = machine.as_str();
    let common = SMALL_MODERN;
    let out = dir.path().join("eval");
    let mut eval = vec![
        "sim",
        "eval",
        "--suite",
        "modern",
        "--machines",
        machine,
        "--workloads",
        "noisy-neighbour",
        "--out",
        out.to_str().unwrap(),
    ];
    eval.extend(common);
    let (ok, _, err) = run(&eval, None);
    assert!(ok, "{err}");
    let page: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("modern.json")).unwrap()).unwrap();
    let row = &page["rows"][0];
    let masks: Vec<String> = row["cat"]["masks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{:#x}", m.as_u64().unwrap()))
        .collect();
    let masks = masks.join(",");
    for (options, column) in [
        (vec![], &row["adaptive"]["speedup"]),
        (
            vec!["--prefetch-on-while-profiling"],
            &row["prefetch_on_speedup"],
        ),
        (
            vec!["--cat-masks", masks.as_str()],
            &row["cat"]["both_speedup"],
        ),
    ] {
        let mut args = vec![
            "sim",
            "run",
            "--workload",
            "noisy-neighbour",
            "--machine",
            machine,
            "--mode",
            "rocs",
            "--pollute-colours",
            "1",
            "--json",
        ];
        args.extend(common);
        args.extend(options.iter().copied());
        let v = run_json(&args);
        assert_eq!(&v["speedup"], column, "sim run {options:?}");
    }
}

#[test]
fn a_modern_row_stopped_part_way_resumes_from_its_finished_runs() {
    // A modern row is many runs (a full-length one, hours): stopped part way, the same
    // command makes only the runs it had not finished, and writes the page a run from
    // scratch writes.
    let dir = tempfile::tempdir().unwrap();
    let machine = small_modern_machine(dir.path());
    let args = |out: &std::path::Path| -> Vec<String> {
        let mut args = vec!["sim", "eval", "--suite", "modern", "--machines", &machine];
        args.extend(["--workloads", "noisy-neighbour", "--out"]);
        args.push(out.to_str().unwrap());
        args.extend(SMALL_MODERN);
        args.iter().map(|s| s.to_string()).collect()
    };
    let out = dir.path().join("out");
    let journal = out.join("modern.journal");
    // Stopped once the header and four runs (the baseline and the first oracle runs) are
    // in the journal.
    stopped_once_the_journal_has(&args(&out), &journal, 5);
    assert!(!out.join("modern.md").exists());

    let (ok, _, err) = run_owned(&args(&out));
    assert!(ok, "{err}");
    assert!(
        err.contains("resuming: 0 of 1 cases finished before, and"),
        "{err}"
    );
    assert!(err.contains("baseline (made before)"), "{err}");
    assert!(
        !journal.exists(),
        "the journal goes once the page is written"
    );
    let fresh = dir.path().join("fresh");
    let (ok, _, err) = run_owned(&args(&fresh));
    assert!(ok && !err.contains("made before"), "{err}");
    assert_eq!(
        page_rows(&out, "modern.json"),
        page_rows(&fresh, "modern.json")
    );
}
