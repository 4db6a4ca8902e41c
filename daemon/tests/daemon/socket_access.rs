//! The control socket under load and between users: every one of 300 concurrent clients gets
//! a reply or a refusal it can read; idle connections of one user starve neither root nor
//! other users; a member of the socket group may read and may not change, decided from the
//! groups the kernel recorded at connect (SO_PEERGROUPS).
//!
//! Other users are played by this test binary run again under another uid (see `as_peer`).

use crate::common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A quiet sim rocsd whose idle clients are never timed out while a test runs: a client that
/// is not served is refused, not made to wait for an idle one to go.
fn config(group: &str, mode: &str) -> String {
    format!(
        r#"
platform = "sim"
client_timeout_ms = 600_000
socket_mode = {mode}
socket_group = "{group}"
[sim]
machine = "tiny"
window_cycles = 100_000
pause_ms = 200
[[sim.workload]]
name = "twolf-like"
"#
    )
}

/// The uids the tests play other users with (no passwd entry is needed to run as a uid).
const READER_UID: u32 = 4242;
const OTHER_READER_UID: u32 = 4243;
/// What rocsd lets one non-root user hold at once (daemon/src/server.rs MAX_PER_READER).
const MAX_PER_READER: usize = 32;
/// Slots in all (daemon/src/server.rs MAX_CLIENTS).
const MAX_CLIENTS: usize = 256;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The test's socket group: created when missing (a system group with no members).
fn test_group() -> (String, u32) {
    const NAME: &str = "rocs-test";
    if nix::unistd::Group::from_name(NAME).unwrap().is_none() {
        let out = Command::new("groupadd")
            .args(["--system", NAME])
            .output()
            .expect("groupadd runs (package passwd)");
        // 9: created meanwhile by a test running in parallel.
        assert!(
            out.status.success() || out.status.code() == Some(9),
            "groupadd {NAME}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let gid = nix::unistd::Group::from_name(NAME)
        .unwrap()
        .expect("the test group exists")
        .gid
        .as_raw();
    (NAME.to_string(), gid)
}

/// Send `line` and read one reply line, as rocsctl does. A write that fails (the daemon
/// closed before taking the request: EPIPE) is a failure even when a reply could be read.
fn ask(socket: &Path, line: &str) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let wrote = s.write_all(format!("{line}\n").as_bytes());
    let mut reply = String::new();
    let read = BufReader::new(s).read_line(&mut reply);
    wrote.map_err(|e| format!("write: {e} (reply {reply:?})"))?;
    read.map_err(|e| format!("read: {e}"))?;
    serde_json::from_str(&reply).map_err(|e| format!("reply {reply:?}: {e}"))
}

/// `n` connections that send nothing.
fn idle_connections(socket: &Path, n: usize) -> Vec<UnixStream> {
    (0..n)
        .map(|_| UnixStream::connect(socket).unwrap())
        .collect()
}

/// 300 clients at once, each on its own connection: a reply or a refusal each.
fn burst(socket: &Path, clients: usize) -> (usize, usize) {
    let start = Arc::new(Barrier::new(clients));
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            let socket = socket.to_path_buf();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                ask(
                    &socket,
                    &format!("{{\"v\":1,\"id\":{i},\"request\":\"status\"}}"),
                )
                .map(|r| (i, r))
            })
        })
        .collect();
    let (mut answered, mut refused) = (0, 0);
    for h in handles {
        let (i, r) = h
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("a client got no reply: {e}"));
        assert_eq!(r["id"], i, "{r}");
        if r["ok"] == true {
            answered += 1;
        } else {
            assert_eq!(r["error"]["code"], "unavailable", "{r}");
            refused += 1;
        }
    }
    (answered, refused)
}

#[test]
fn concurrent_clients_each_get_a_reply_or_a_readable_refusal() {
    let d = common::start(&config("rocs", "0o600"), &[]);
    // Every slot taken by idle clients: all 300 are refused, and each can read why.
    let idle = idle_connections(&d.socket, MAX_CLIENTS);
    let (answered, refused) = burst(&d.socket, 300);
    assert_eq!((answered, refused), (0, 300));
    drop(idle);
    d.wait(Duration::from_secs(30), "slots freed", |d| {
        (d.raw(json!({"request": "status"}))["ok"] == true).then_some(())
    });
    // Some slots free: each is answered or refused, never cut off.
    let idle = idle_connections(&d.socket, MAX_CLIENTS - 20);
    let (answered, refused) = burst(&d.socket, 300);
    println!(
        "with {} idle: {answered} answered, {refused} refused",
        idle.len()
    );
    drop(idle);
    // Hundreds of refusals, not logged one by one (at most once per 10 s).
    let log = d.log();
    let logged = log.matches("refused a control client").count();
    assert!(
        (1..=10).contains(&logged),
        "{logged} lines for {} refusals:\n{log}",
        300 + refused
    );
}

#[test]
fn idle_connections_of_one_user_starve_neither_root_nor_other_users() {
    if !is_root() {
        println!("skipped: playing other users needs root");
        return;
    }
    let (group, gid) = test_group();
    let d = common::start(&config(&group, "0o660"), &[]);
    // 300 idle connections of a reader: MAX_PER_READER are held, every other one is refused
    // (after the refusal's read timeout, since they send nothing), readably.
    let mut holder = spawn_peer(
        READER_UID,
        &[gid],
        &d.socket,
        &format!("hold:300:{}", 300 - MAX_PER_READER),
    );
    let held = read_peer_line(&mut holder, "PEER-HELD ");
    let held: Value = serde_json::from_str(&held).unwrap();
    assert_eq!(held["held"], MAX_PER_READER, "{held}\n{}", d.log());
    assert_eq!(held["refused"], 300 - MAX_PER_READER, "{held}");
    assert!(
        held["refusal"]
            .as_str()
            .unwrap()
            .contains(&format!("uid {READER_UID} already has {MAX_PER_READER}")),
        "{held}"
    );
    // With those still open, root is served, and so is another reader.
    d.ok(json!({"request": "status"}));
    let other = as_peer(
        OTHER_READER_UID,
        &[gid],
        &d.socket,
        r#"{"v":1,"request":"status"}"#,
    );
    assert_eq!(other["ok"], true, "{other}");
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder still holds"
    );
    drop(holder.stdin.take());
    holder.wait().unwrap();
}

#[test]
fn a_group_member_may_read_and_may_not_change() {
    if !is_root() {
        println!("skipped: playing other users needs root");
        return;
    }
    let (group, gid) = test_group();
    let d = common::start(&config(&group, "0o660"), &[]);
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::gid(&meta),
        gid,
        "the socket belongs to the group"
    );
    // Membership by a supplementary group only: rocsd sees it through SO_PEERGROUPS.
    let status = as_peer(
        READER_UID,
        &[gid],
        &d.socket,
        r#"{"v":1,"request":"status"}"#,
    );
    assert_eq!(status["ok"], true, "{status}");
    for change in ["pause", "resume", "restore", "reload"] {
        let line = format!("{{\"v\":1,\"id\":5,\"request\":\"{change}\"}}");
        let r = as_peer(READER_UID, &[gid], &d.socket, &line);
        assert_eq!(r["ok"], false, "{change}: {r}");
        assert_eq!(r["error"]["code"], "permission_denied", "{change}: {r}");
        assert_eq!(r["id"], 5);
    }
    // Root changes what it does.
    assert_eq!(d.ok(json!({"request": "pause"}))["action"], "pause");
    // Without the group the same user cannot even connect (socket mode 0660).
    let r = as_peer(READER_UID, &[], &d.socket, r#"{"v":1,"request":"status"}"#);
    assert!(
        r["connect_error"]
            .as_str()
            .is_some_and(|e| e.contains("ermission")),
        "{r}"
    );
}

/// Environment of the peer run: the socket, and what to do.
const PEER_SOCKET: &str = "ROCSD_TEST_SOCKET_PEER";
const PEER_DO: &str = "ROCSD_TEST_SOCKET_PEER_DO";

/// Run this test binary's `socket_peer` as `uid` with primary group `uid` and the
/// supplementary `groups`, doing `what` (see `socket_peer`).
fn spawn_peer(uid: u32, groups: &[u32], socket: &Path, what: &str) -> Child {
    let groups: Vec<nix::unistd::Gid> = groups
        .iter()
        .map(|&g| nix::unistd::Gid::from_raw(g))
        .collect();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", &common::test_name(module_path!(), "socket_peer")])
        .args(["--nocapture", "--test-threads=1"])
        .env(PEER_SOCKET, socket)
        .env(PEER_DO, what)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and only makes the
    // setgroups, setgid and setuid system calls (async-signal-safe; no allocation, no lock:
    // `groups` was built before the fork). Groups first: they cannot be set after setuid.
    unsafe {
        cmd.pre_exec(move || {
            let err = |e: nix::errno::Errno| std::io::Error::from_raw_os_error(e as i32);
            nix::unistd::setgroups(&groups).map_err(err)?;
            nix::unistd::setgid(nix::unistd::Gid::from_raw(uid)).map_err(err)?;
            nix::unistd::setuid(nix::unistd::Uid::from_raw(uid)).map_err(err)?;
            Ok(())
        });
    }
    cmd.spawn().expect("the test binary runs as another user")
}

/// The first line of the peer's output that starts with `tag`, without the tag.
fn read_peer_line(peer: &mut Child, tag: &str) -> String {
    let out = BufReader::new(peer.stdout.as_mut().unwrap());
    for line in out.lines() {
        let line = line.unwrap();
        // libtest prints "test socket_access::socket_peer ... " before the test's own output.
        if let Some((_, rest)) = line.split_once(tag) {
            return rest.to_string();
        }
    }
    panic!("the peer said no {tag:?}: {:?}", peer.wait());
}

/// Ask one request line as another user and return the reply (or `{"connect_error": ..}`).
fn as_peer(uid: u32, groups: &[u32], socket: &Path, line: &str) -> Value {
    let mut peer = spawn_peer(uid, groups, socket, &format!("ask:{line}"));
    let reply = read_peer_line(&mut peer, "PEER-REPLY ");
    drop(peer.stdin.take());
    peer.wait().unwrap();
    serde_json::from_str(&reply).unwrap()
}

/// Not a test on its own: the body of the peer above (does nothing unless started by
/// `spawn_peer`). `ask:LINE` sends LINE and prints the reply; `hold:N:R` opens N idle
/// connections, waits until R of them are refused, prints what it holds, and keeps the
/// others open until its stdin closes.
#[test]
fn socket_peer() {
    let (Some(socket), Some(what)) = (std::env::var_os(PEER_SOCKET), std::env::var(PEER_DO).ok())
    else {
        return;
    };
    assert!(!is_root(), "the peer must not be root");
    let socket = Path::new(&socket);
    if let Some(line) = what.strip_prefix("ask:") {
        let reply = match ask(socket, line) {
            Ok(reply) => reply,
            Err(e) if e.starts_with("connect") => json!({ "connect_error": e }),
            Err(e) => panic!("{e}"),
        };
        println!("PEER-REPLY {reply}");
        return;
    }
    let (n, refusals) = what
        .strip_prefix("hold:")
        .and_then(|r| r.split_once(':'))
        .expect("hold:N:R");
    let (n, refusals): (usize, usize) = (n.parse().unwrap(), refusals.parse().unwrap());
    let mut open = idle_connections(socket, n);
    for s in &open {
        s.set_nonblocking(true).unwrap();
    }
    let mut refused = Vec::new();
    let t0 = Instant::now();
    while refused.len() < refusals && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
        open.retain_mut(|s| {
            let mut buf = [0u8; 4096];
            match s.read(&mut buf) {
                Ok(n) if n > 0 => {
                    let reply: Value = serde_json::from_slice(&buf[..n]).unwrap();
                    refused.push(reply);
                    false
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => true,
                other => panic!("an idle connection ended without a reply: {other:?}"),
            }
        });
    }
    assert!(refused.iter().all(|r| r["error"]["code"] == "unavailable"));
    let summary = json!({
        "held": open.len(),
        "refused": refused.len(),
        "refusal": refused.first().map(|r| r["error"]["message"].clone()),
    });
    println!("PEER-HELD {summary}");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}
