//! rocsctl against a real rocsd (sim platform, temporary socket): every daemon command in
//! text and --json, pictures and --svg, operator commands, a refused reload, an
//! unauthorised user, and no daemon at all.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// rocsd is built with the workspace (`cargo test --workspace`); when only this package's
/// tests were built, build it the same way.
fn rocsd_path() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_rocsctl"))
        .parent()
        .unwrap()
        .to_path_buf();
    let exe = dir.join("rocsd");
    if !exe.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "rocsd"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building rocsd failed");
    }
    assert!(exe.exists(), "no rocsd at {}", exe.display());
    exe
}

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Daemon {
    start_with("")
}

/// A daemon whose rocsd.toml ends with `extra` (tables to add).
fn start_with(extra: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policy.d");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(
        policies.join("10-spec.toml"),
        "name = \"spec\"\n[match]\ncomm = \"art\"\n",
    )
    .unwrap();
    let socket = dir.path().join("rocsd.sock");
    let conf = dir.path().join("rocsd.toml");
    std::fs::write(
        &conf,
        format!(
            r#"platform = "sim"
socket = {:?}
socket_mode = 0o666
policy_dir = {:?}
[knobs]
sample_period = 50
[sim]
machine = "ppc970fx"
window_cycles = 50_000_000
pause_ms = 1
cpu_share = 1.0
[[sim.workload]]
name = "art-like"
scale = 4.0
{extra}"#,
            socket.display().to_string(),
            policies.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(rocsd_path())
        .arg("--config")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Keep the log flowing (and visible with --nocapture).
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("rocsd: {line}");
        }
    });
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "rocsd did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { child, dir, socket }
}

fn rocsctl(d: &Daemon, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rocsctl"))
        .args(args)
        .arg("--socket")
        .arg(&d.socket)
        .output()
        .unwrap()
}

fn json(d: &Daemon, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = rocsctl(d, &a);
    assert!(
        out.status.success(),
        "rocsctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rocsctl {args:?} --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn text(d: &Daemon, args: &[&str]) -> String {
    let out = rocsctl(d, args);
    assert!(
        out.status.success(),
        "rocsctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_daemon_command_in_text_and_json() {
    let d = start();
    let status = json(&d, &["status"]);
    assert_eq!(status["platform"], "sim");
    assert_eq!(status["protocol"], 1);
    assert_eq!(status["policies"][0]["name"], "spec");
    let s = text(&d, &["status"]);
    assert!(
        s.contains("platform   sim (full)") && s.contains("16 colours"),
        "{s}"
    );

    // Wait until art has a profile.
    let t0 = Instant::now();
    let art = loop {
        let ts = json(&d, &["targets"]);
        if let Some(t) = ts.as_array().unwrap().iter().find(|t| t["comm"] == "art") {
            if t["pages_profiled"].as_u64().unwrap() > 0 {
                break t.clone();
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "art never profiled: {ts}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let pid = art["pid"].as_u64().unwrap().to_string();
    let t = text(&d, &["targets"]);
    assert!(
        t.contains("PID") && t.contains("art") && t.contains("spec"),
        "{t}"
    );

    let p = json(&d, &["profile", &pid]);
    assert_eq!(p["target"]["comm"], "art");
    assert_eq!(p["page_shift"], 12);
    assert!(!p["pages"].as_array().unwrap().is_empty());
    let svg = d.dir.path().join("art.svg");
    let t = text(&d, &["profile", "art", "--svg", svg.to_str().unwrap()]);
    assert!(t.contains("samples over") && t.contains("ADDRESSES"), "{t}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg") || picture.starts_with("<?xml"),
        "{picture:.80}"
    );

    let s = json(&d, &["stack", "art", "--limit", "5"]);
    assert!(s["entries"].as_array().unwrap().len() <= 5);
    assert!(s["total"].as_u64().unwrap() >= s["entries"].as_array().unwrap().len() as u64);
    let t = text(&d, &["stack", "art", "--limit", "5"]);
    assert!(t.contains("miss-rate stack"), "{t}");

    let h = json(&d, &["history", "art"]);
    let events = h["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["kind"] == "profile"), "{h}");
    let t = text(&d, &["history", "art"]);
    assert!(t.contains("observe -> profile"), "{t}");

    let r = json(&d, &["pause", &pid]);
    assert_eq!(r["action"], "pause");
    assert_eq!(r["targets"][0].to_string(), pid);
    let r = json(&d, &["resume"]);
    assert_eq!(r["action"], "resume");
    let t = text(&d, &["restore", "art"]);
    let first = t.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("restore: 1 target ({pid}), ")),
        "{t}"
    );
    assert!(
        first.contains("moved back out of the pollute buffer"),
        "{t}"
    );
    assert!(
        t.ends_with("it stays paused until `rocsctl resume`\n"),
        "{t}"
    );
    let t = text(&d, &["status"]);
    assert!(
        t.contains(&format!(
            "paused     1 of 1 target ({pid}): paused or restored"
        )),
        "{t}"
    );

    // Unknown target: exit 1, a reason, and JSON when asked.
    let out = rocsctl(&d, &["stack", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no target named \"nosuch\""));
    let out = rocsctl(&d, &["history", "nosuch", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "no_such_target");

    // A broken policy: reload refused with file and line, the old one stays.
    std::fs::write(
        d.dir.path().join("policy.d/20-bad.toml"),
        "[match]\ncomm = 5\n",
    )
    .unwrap();
    let out = rocsctl(&d, &["reload"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("20-bad.toml:2:8"), "{err}");
    assert_eq!(
        json(&d, &["status"])["policies"].as_array().unwrap().len(),
        1
    );
    std::fs::remove_file(d.dir.path().join("policy.d/20-bad.toml")).unwrap();
    let r = json(&d, &["reload"]);
    assert_eq!(r["policies"][0]["name"], "spec");
}

#[test]
fn an_unauthorised_user_is_refused() {
    use std::os::unix::process::CommandExt;
    let d = start();
    // rocsctl run as nobody (uid 65534, not root, not in group rocs).
    let out = Command::new(env!("CARGO_BIN_EXE_rocsctl"))
        .args(["status", "--socket"])
        .arg(&d.socket)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("permission denied: uid 65534"), "{err}");
    // Root still is served.
    assert_eq!(json(&d, &["status"])["platform"], "sim");
}

#[test]
fn no_daemon_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_rocsctl"))
        .args(["status", "--socket", "/nonexistent/rocsd.sock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach rocsd at /nonexistent/rocsd.sock") && err.contains("--socket"),
        "{err}"
    );
}

#[test]
fn socket_and_json_go_before_or_after_the_command() {
    let d = start();
    let socket = d.socket.to_str().unwrap();
    for args in [
        ["--socket", socket, "--json", "status"],
        ["status", "--socket", socket, "--json"],
        ["--json", "status", "--socket", socket],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rocsctl"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rocsctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["platform"], "sim", "{args:?}");
    }
}

#[test]
fn status_shows_the_notices() {
    // [geometry] on the sim platform is ignored, and rocsd says so: a notice.
    let d = start_with("[geometry]\nline_size = 64\nways = 8\nsize = 1048576\n");
    let s = text(&d, &["status"]);
    assert!(
        s.contains("notices    1\n  [geometry] is ignored on the sim platform"),
        "{s}"
    );
    let d = start();
    let s = text(&d, &["status"]);
    assert!(s.contains("notices    none\n"), "{s}");
}

#[test]
fn concurrent_rocsctl_status_each_get_an_answer_or_a_readable_refusal() {
    use std::os::unix::net::UnixStream;
    let d = start();
    // Idle connections hold every one of rocsd's 256 slots: all 300 are refused, and each
    // rocsctl says why (before, some failed to send with EPIPE instead).
    let idle: Vec<_> = (0..256)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    let clients: Vec<_> = (0..300)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_rocsctl"))
                .args(["status", "--socket"])
                .arg(&d.socket)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut answered, mut refused) = (0, 0);
    for c in clients {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).contains("platform   sim"));
            answered += 1;
        } else {
            assert!(
                err.starts_with("rocsctl: rocsd refused status: rocsd is serving"),
                "{err}"
            );
            refused += 1;
        }
    }
    assert_eq!((answered, refused), (0, 300));
    drop(idle);
    assert_eq!(json(&d, &["status"])["platform"], "sim");
}
