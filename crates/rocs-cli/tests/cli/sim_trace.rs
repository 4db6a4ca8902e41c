//! `rocsctl sim trace`: the binary format gives the numbers the lackey text gives, bad
//! binary traces are refused with their byte offset, `--record` streams a real program
//! (when valgrind is installed), and nothing but the report is written when standard error
//! is not a terminal.

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

/// Run and return (success, stdout, stderr); a panic is always a failure of the test.
fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::cargo_bin("rocsctl")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "rocsctl panicked: {stderr}");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        stderr,
    )
}

fn baseline(args: &[&str]) -> Value {
    let (ok, out, err) = run(args);
    assert!(ok, "{args:?}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["modes"]["baseline"].clone()
}

/// A lackey trace of a loop over an array larger than `tiny`'s caches, with valgrind's
/// own lines in it.
fn write_lackey(path: &Path) {
    let mut t = String::from("==42== Lackey, an example Valgrind tool\n");
    for round in 0..3u64 {
        for i in 0..2000u64 {
            t.push_str(&format!("I  {:08x},4\n", 0x400000 + (i % 16) * 4));
            t.push_str(&format!(" L {:08x},8\n", 0x10_0000 + i * 24));
            if i % 3 == 0 {
                t.push_str(&format!(" S {:08x},8\n", 0x7ff0_0000 - (i % 64) * 8));
            }
            if i % 7 == round {
                t.push_str(&format!(" M {:08x},4\n", 0x20_0000 + i * 4));
            }
        }
    }
    t.push_str("==42== \n");
    std::fs::write(path, t).unwrap();
}

const COUNTS: [&str; 7] = [
    "instructions",
    "cycles",
    "l1d_accesses",
    "l1d_misses",
    "l1i_misses",
    "llc_misses",
    "llc_data_misses",
];

#[test]
fn a_converted_trace_replays_to_the_same_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("t.lackey");
    let bin = dir.path().join("t.rtrace");
    write_lackey(&text);
    let (text, bin) = (text.to_str().unwrap(), bin.to_str().unwrap());
    let (ok, out, err) = run(&["sim", "trace", "convert", text, bin]);
    assert!(ok, "{err}");
    assert!(
        out.contains("events") && out.contains("bytes per event"),
        "{out}"
    );
    assert!(
        std::fs::metadata(bin).unwrap().len() * 3 < std::fs::metadata(text).unwrap().len(),
        "the binary trace is compact"
    );
    for identity in [true, false] {
        let mut args = vec!["sim", "trace", "--machine", "tiny", "--json"];
        if identity {
            args.push("--identity-map");
        }
        let from_text = baseline(&[&args[..], &[text]].concat());
        let from_bin = baseline(&[&args[..], &[bin]].concat());
        let forced = baseline(&[&args[..], &["--format", "binary", bin]].concat());
        assert!(
            from_text["l1d_misses"].as_u64().unwrap() > 1000,
            "{from_text}"
        );
        for c in COUNTS {
            assert_eq!(from_text[c], from_bin[c], "{c}, identity map {identity}");
            assert_eq!(from_bin[c], forced[c], "{c}");
        }
    }
    // Converting a binary trace again gives the same bytes.
    let again = dir.path().join("again.rtrace");
    let (ok, _, err) = run(&["sim", "trace", "convert", bin, again.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(bin).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn a_trace_replays_at_scaled_costs_of_rocs_and_refuses_a_scale_that_is_not_one() {
    // The costs of a page move and a sample are rocs's: the baseline runs as at the
    // machine's own, and a scale that is not a positive number is refused by name.
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("t.lackey");
    write_lackey(&text);
    let text = text.to_str().unwrap();
    let args = ["sim", "trace", "--machine", "tiny", "--json", text];
    let own = baseline(&args);
    let scaled = baseline(&[&args[..], &["--cost-scale", "0.003"]].concat());
    for c in COUNTS {
        assert_eq!(own[c], scaled[c], "{c}");
    }
    let (ok, _, err) = run(&[&args[..], &["--cost-scale", "0"]].concat());
    assert!(
        !ok && err.contains("--cost-scale") && err.contains("positive"),
        "{err}"
    );
}

#[test]
fn bad_binary_traces_are_refused_with_their_offset() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("t.lackey");
    let bin = dir.path().join("t.rtrace");
    write_lackey(&text);
    let (text, bin) = (text.to_str().unwrap(), bin.to_str().unwrap());
    assert!(run(&["sim", "trace", "convert", text, bin]).0);

    let (ok, _, err) = run(&["sim", "trace", "--format", "binary", text]);
    assert!(
        !ok && err.contains("byte 0: not a rocs binary trace"),
        "{err}"
    );

    let bytes = std::fs::read(bin).unwrap();
    let cut = dir.path().join("cut.rtrace");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (ok, _, err) = run(&["sim", "trace", cut.to_str().unwrap()]);
    assert!(!ok, "a truncated trace is an error");
    assert!(err.contains("binary trace, byte "), "{err}");

    let (ok, _, err) = run(&["sim", "trace", "convert", "/nonexistent.lackey", bin]);
    assert!(!ok && err.contains("/nonexistent.lackey"), "{err}");
}

#[test]
fn stderr_not_a_terminal_gets_no_progress_bar() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("t.lackey");
    write_lackey(&text);
    let (ok, out, err) = run(&["sim", "trace", text.to_str().unwrap(), "--machine", "tiny"]);
    assert!(ok && out.contains("baseline:"), "{out}");
    assert_eq!(
        err, "",
        "standard error is a pipe here: no bar, no escape codes"
    );
}

#[test]
fn several_traces_are_tenants_replayed_in_a_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.lackey"), dir.path().join("b.rtrace"));
    write_lackey(&a);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    assert!(run(&["sim", "trace", "convert", a, b]).0);
    let length = 50_001u64;
    let n = length.to_string();
    let args = ["sim", "trace", a, b, "--machine", "tiny", "--length", &n];
    let group = baseline(&[&args[..], &["--json"]].concat());
    let tenants = group["processes"].as_array().unwrap();
    assert_eq!(tenants.len(), 2, "{group}");
    let count = |v: &Value, c: &str| v[c].as_u64().unwrap();
    for (t, name) in tenants.iter().zip([a, b]) {
        assert_eq!(t["name"], name);
        assert_eq!(
            count(t, "instructions") + count(t, "l1d_accesses"),
            length,
            "each tenant replays {length} references, its trace (~20000) looped: {t}"
        );
    }
    for c in ["instructions", "l1d_misses", "llc_misses"] {
        assert_eq!(
            count(&group, c),
            count(&tenants[0], c) + count(&tenants[1], c),
            "{c}: the group is its tenants"
        );
    }
    // The same trace twice: the tenants compete for the LLC, so each misses there more
    // than the trace alone does over the same references.
    let alone = baseline(&[
        "sim",
        "trace",
        a,
        "--machine",
        "tiny",
        "--length",
        &n,
        "--json",
    ]);
    assert!(
        count(&tenants[0], "llc_misses") > count(&alone, "llc_misses"),
        "{} beside a neighbour vs {} alone",
        tenants[0]["llc_misses"],
        alone["llc_misses"]
    );
    let (ok, out, err) = run(&args);
    assert!(
        ok && out.contains("pid 1000") && out.contains("pid 1001"),
        "{out}{err}"
    );

    let (ok, _, err) = run(&["sim", "trace", a, "-"]);
    assert!(
        !ok && err.contains("standard input (-) can only be the one trace"),
        "{err}"
    );
    let (ok, _, err) = run(&["sim", "trace", a, "--length", "10", "--repeat", "2"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
    let (ok, _, err) = run(&["sim", "trace", a, "--length", "0"]);
    assert!(!ok && err.contains("--length"), "{err}");
}

fn have_valgrind() -> bool {
    std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn record_streams_a_real_program_through_lackey() {
    if !have_valgrind() {
        eprintln!("\n*** SKIPPED: valgrind is not installed (apt-get install valgrind): --record runs programs under lackey.\n");
        return;
    }
    let args = [
        "sim",
        "trace",
        "--machine",
        "tiny",
        "--identity-map",
        "--json",
    ];
    let program = ["--", "echo", "hello from the program"];
    let (ok, out, err) = run(&[&args[..], &["--record"], &program[..]].concat());
    assert!(ok, "{err}");
    assert!(
        err.contains("hello from the program"),
        "the program's output: {err}"
    );
    let streamed: Value = serde_json::from_str(&out).expect("standard output is the report");
    let streamed = &streamed["modes"]["baseline"];
    assert!(
        streamed["instructions"].as_u64().unwrap() > 10_000,
        "{streamed}"
    );

    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("echo.rtrace");
    let save = ["--record", "--save", saved.to_str().unwrap()];
    let from_save = baseline(&[&args[..], &save[..], &program[..]].concat());
    let replayed = baseline(&[&args[..], &[saved.to_str().unwrap()]].concat());
    for c in COUNTS {
        assert_eq!(from_save[c], replayed[c], "{c}");
    }
    // The same program: about the same work (its environment differs a little).
    let (a, b) = (
        streamed["instructions"].as_u64().unwrap() as f64,
        replayed["instructions"].as_u64().unwrap() as f64,
    );
    assert!((a - b).abs() < 0.05 * a, "{a} vs {b}");
}

#[test]
fn record_refuses_what_a_stream_cannot_do() {
    let (ok, _, err) = run(&["sim", "trace", "--record", "--mode", "all", "--", "true"]);
    assert!(!ok && err.contains("add --save FILE"), "{err}");
    let (ok, _, err) = run(&["sim", "trace", "--record", "--repeat", "2", "--", "true"]);
    assert!(!ok && err.contains("add --save FILE"), "{err}");
    let (ok, _, err) = run(&["sim", "trace", "--record"]);
    assert!(!ok && err.contains("PROGRAM"), "{err}");
    let (ok, _, err) = run(&["sim", "trace", "t.lackey", "--record", "--", "true"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}
