//! rocsctl against a real rocsd (sim platform, temporary socket): every daemon command in
//! text and --json, pictures and --svg, operator commands, a refused reload, an
//! unauthorised user, and no daemon at all.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::svg_check;

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
        // In the profile these tests were built in, whose directory `exe` is in.
        let profile: &[&str] = if cfg!(debug_assertions) {
            &[]
        } else {
            &["--release"]
        };
        let status = Command::new(cargo)
            .args(["build", "-p", "rocsd"])
            .args(profile)
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
# Long enough that art (pid 1000) is still running when the tests ask for it by pid, on
# a loaded machine too; the next run of the workload would be another pid.
scale = 10.0
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
        "rocsctl {args:?} --json: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
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

    // Wait until art has a whole profile: while it is profiling, its profile grows
    // between the two requests below that must agree on it.
    let t0 = Instant::now();
    let art = loop {
        let ts = json(&d, &["targets"]);
        if let Some(t) = ts.as_array().unwrap().iter().find(|t| t["comm"] == "art") {
            if t["pages_profiled"].as_u64().unwrap() > 0 && t["state"] != "profile" {
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
    // The picture counts the same pages as the profile: a bar count per miss-rate bin
    // that adds up to the pages with LLC samples, and a column per page or run of pages.
    let picture = std::fs::read_to_string(&svg).unwrap();
    let doc = svg_check::parse(&picture);
    let with_llc = p["pages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["hits"].as_u64().unwrap() + r["misses"].as_u64().unwrap() > 0)
        .count() as u64;
    let counted: u64 = svg_check::in_group(&doc, "histogram", "count")
        .iter()
        .map(|n| n.text().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, with_llc);
    assert!(!svg_check::in_group(&doc, "address-map", "hits").is_empty());
    assert_eq!(svg_check::in_group(&doc, "histogram", "x-tick").len(), 11);

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
    // rocsd frees the slots as it sees the idle peers hang up, which takes a moment: the
    // next status is answered once it has, and refused readably until then.
    let t0 = Instant::now();
    loop {
        let out = rocsctl(&d, &["status", "--json"]);
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["platform"], "sim");
            break;
        }
        // With --json the refusal is on stdout.
        let err = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(err.contains("rocsd is serving"), "{err}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "slots not freed: {err}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The colours the profile SVG paints its data in (render/svg.rs): LLC hits, misses,
/// confined pages, miss rate.
const DATA_COLOURS: [(&str, [u8; 3]); 4] = [
    ("hits", [0x2e, 0x86, 0xc1]),
    ("misses", [0xc0, 0x39, 0x2b]),
    ("confined", [0xe6, 0x7e, 0x22]),
    ("miss rate", [0x8e, 0x44, 0xad]),
];

/// A profile SVG from a real run, with pages confined, rendered by a real browser: the
/// screenshot is a picture (not blank, not an error page) with every colour of the data.
/// Skips, saying so, when chromium is not installed (tests/all.sh installs it).
#[test]
fn the_profile_svg_renders_in_a_real_browser() {
    let Some(chromium) = find_on_path("chromium") else {
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return;
    };
    let d = start();
    let t0 = Instant::now();
    loop {
        let ts = json(&d, &["targets"]);
        let art = ts.as_array().unwrap().iter().find(|t| t["comm"] == "art");
        if art.is_some_and(|t| t["pages_confined"].as_u64().unwrap() > 0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "art never confined pages: {ts}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let svg = d.dir.path().join("art.svg");
    text(&d, &["profile", "art", "--svg", svg.to_str().unwrap()]);
    let png = d.dir.path().join("art.png");
    let (width, height) = (1000, 850);
    let mut browser = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            d.dir.path().join("chromium").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("file://{}", svg.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while browser.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = browser.kill();
            panic!("chromium took more than 2 minutes to take a screenshot");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (size, pixels) = decode_rgb(&png);
    assert_eq!(size, (width, height));
    let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
    assert!(
        white < pixels.len() * 95 / 100,
        "the screenshot is nearly blank: {white} of {} pixels white",
        pixels.len()
    );
    for (what, colour) in DATA_COLOURS {
        let n = pixels.iter().filter(|p| **p == colour).count();
        assert!(
            n > 100,
            "{n} pixels of {what} ({colour:?}) in {}",
            png.display()
        );
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A PNG file's size and its pixels as RGB (any alpha dropped).
fn decode_rgb(path: &Path) -> ((u32, u32), Vec<[u8; 3]>) {
    let file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("no screenshot at {}: {e}", path.display()));
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a PNG of sane size")];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "a colour screenshot: {:?}", info.color_type);
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    ((info.width, info.height), pixels)
}
