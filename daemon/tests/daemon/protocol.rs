//! The control socket survives garbage: malformed JSON, oversized lines, unknown requests, a
//! client that connects and stalls, 100 clients at once. Each gets an error reply or a
//! timeout, and rocsd keeps serving. An unauthorised peer is refused.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A quiet sim rocsd (no policies: no targets, nothing to simulate but the socket).
const CONFIG: &str = r#"
platform = "sim"
client_timeout_ms = 500
socket_mode = 0o666
[sim]
machine = "tiny"
window_cycles = 100_000
pause_ms = 200
[[sim.workload]]
name = "twolf-like"
"#;

fn reply_of(stream: &mut UnixStream) -> Value {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad reply {line:?}: {e}"))
}

fn still_serving(d: &common::Rocsd) {
    let s = d.ok(json!({"request": "status"}));
    assert_eq!(s["protocol"], 1);
}

#[test]
fn garbage_gets_errors_and_rocsd_keeps_serving() {
    let d = common::start(CONFIG, &[]);
    let cases: &[(&str, &str)] = &[
        ("{\"v\":1,\"request\":", "bad_json"),
        ("not json at all", "bad_json"),
        ("[1,2,3]", "bad_json"),
        ("{\"request\":\"status\"}", "bad_version"),
        ("{\"v\":99,\"request\":\"status\"}", "bad_version"),
        ("{\"v\":1,\"request\":\"format_disk\"}", "unknown_request"),
        ("{\"v\":1,\"request\":\"profile\"}", "bad_request"),
        (
            "{\"v\":1,\"request\":\"status\",\"extra\":1}",
            "bad_request",
        ),
        ("\u{0}\u{1}\u{2}\u{ff}", "bad_json"),
    ];
    for (line, code) in cases {
        let r = common::ask_line(&d.socket, line);
        assert_eq!(r["ok"], false, "{line:?} -> {r}");
        assert_eq!(r["error"]["code"], *code, "{line:?} -> {r}");
        assert_eq!(r["v"], 1);
    }
    // Several requests on one connection, the id echoed.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(b"{\"v\":1,\"id\":1,\"request\":\"status\"}\n{\"v\":1,\"id\":\"two\",\"request\":\"targets\"}\n")
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for id in [json!(1), json!("two")] {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], id);
        assert_eq!(v["ok"], true);
    }
    still_serving(&d);

    // An oversized line: an error, then the connection is closed.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    let big = vec![b'x'; 200 * 1024];
    // The daemon may close before reading all of it; the write may then fail.
    let _ = s.write_all(&big);
    let v = reply_of(&mut s);
    assert_eq!(v["error"]["code"], "too_long");
    still_serving(&d);

    // A client that connects and says nothing is timed out; one that sends half a line too.
    let mut quiet = UnixStream::connect(&d.socket).unwrap();
    let mut half = UnixStream::connect(&d.socket).unwrap();
    half.write_all(b"{\"v\":1,\"requ").unwrap();
    still_serving(&d);
    let t0 = Instant::now();
    assert_eq!(reply_of(&mut quiet)["error"]["code"], "timeout");
    assert_eq!(reply_of(&mut half)["error"]["code"], "timeout");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let mut rest = Vec::new();
    quiet.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "the connection is closed after the timeout"
    );

    // 100 clients at once, all answered.
    let handles: Vec<_> = (0..100)
        .map(|i| {
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                let r = common::ask_line(
                    &socket,
                    &format!("{{\"v\":1,\"id\":{i},\"request\":\"status\"}}"),
                );
                assert_eq!(r["id"], i);
                assert_eq!(r["ok"], true);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    still_serving(&d);
}

#[test]
fn unauthorised_peers_are_refused() {
    let d = common::start(CONFIG, &[]);
    // uid 65534 (nobody) is not root and not in group rocs: refused, even for reading.
    let v = peer_as_nobody(&d.socket);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["error"]["code"], "permission_denied");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("uid 65534"));
    // The refusal is logged after the reply is written: wait for the line, do not race it.
    d.wait(
        std::time::Duration::from_secs(10),
        "the refusal in the log",
        |d| {
            d.log()
                .contains("refused a control client: uid 65534")
                .then_some(())
        },
    );
    // Root is served as before.
    still_serving(&d);
}

/// Environment variable that turns this test binary into the unprivileged peer.
const PEER_ENV: &str = "ROCSD_TEST_PEER_SOCKET";

/// Run this test binary again as uid/gid 65534 with no supplementary groups; as that
/// process, `peer_helper` asks for status and prints the reply.
fn peer_as_nobody(socket: &std::path::Path) -> Value {
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &common::test_name(module_path!(), "peer_helper")])
        .args(["--nocapture", "--test-threads=1"])
        .env(PEER_ENV, socket)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("the test binary runs as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("PEER-REPLY ").map(|(_, reply)| reply))
        .unwrap_or_else(|| {
            panic!(
                "the peer printed no reply: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).unwrap()
}

/// Not a test on its own: the body of the unprivileged peer above (does nothing unless
/// started by `peer_as_nobody`).
#[test]
fn peer_helper() {
    let Some(socket) = std::env::var_os(PEER_ENV) else {
        return;
    };
    assert_ne!(
        nix::unistd::getuid().as_raw(),
        0,
        "the peer must not be root"
    );
    let v = common::ask_line(
        std::path::Path::new(&socket),
        "{\"v\":1,\"request\":\"status\"}",
    );
    println!("PEER-REPLY {v}");
}
