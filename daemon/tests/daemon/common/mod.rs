//! Helpers of the daemon's end-to-end tests: a rocsd on a temporary socket, and a client.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The name libtest gives test `name` of the module whose `module_path!()` is `module`:
/// its path below the crate, as in `protocol::peer_helper`, which `--exact` asks for when a
/// test runs this binary again to be one of its own tests.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, below)) => format!("{below}::{name}"),
        None => name.to_string(),
    }
}

/// `rocsd --check` on `config` (rocsd.toml text; `policy_dir` is filled in): it loads the
/// settings and policies and probes the machine as a start does, then exits.
pub fn check(config: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let policy_dir = dir.path().join("policy.d");
    std::fs::create_dir(&policy_dir).unwrap();
    check_with_policies(config, &policy_dir)
}

/// [`check`] with the policies of `policy_dir`.
pub fn check_with_policies(config: &str, policy_dir: &Path) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("rocsd.toml");
    let policy_dir = policy_dir.display().to_string();
    std::fs::write(&conf, format!("policy_dir = {policy_dir:?}\n{config}")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .args(["--check", "--config"])
        .arg(&conf)
        .env("ROCSD_LOG", "info")
        .output()
        .unwrap()
}

/// A running rocsd, killed when dropped; its log is kept for failure messages.
pub struct Rocsd {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub policy_dir: PathBuf,
    pub log: Arc<Mutex<String>>,
}

/// Write `config` (rocsd.toml text, without socket and policy_dir, which are filled in) and
/// `policies` (file name, text) into a fresh folder and start rocsd on it.
pub fn start(config: &str, policies: &[(&str, &str)]) -> Rocsd {
    let dir = tempfile::tempdir().unwrap();
    // Other users (the unauthorised-peer test) must reach the socket.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy_dir = dir.path().join("policy.d");
    std::fs::create_dir(&policy_dir).unwrap();
    for (name, text) in policies {
        std::fs::write(policy_dir.join(name), text).unwrap();
    }
    let socket = dir.path().join("rocsd.sock");
    let conf = dir.path().join("rocsd.toml");
    std::fs::write(
        &conf,
        format!(
            "socket = {:?}\npolicy_dir = {:?}\n{config}",
            socket.display().to_string(),
            policy_dir.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .arg("--config")
        .arg(&conf)
        .env("ROCSD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = sink.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    let mut d = Rocsd {
        child: Some(child),
        dir,
        socket,
        policy_dir,
        log,
    };
    d.wait_for_socket();
    d
}

impl Rocsd {
    fn wait_for_socket(&mut self) {
        let t0 = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                panic!("rocsd exited with {status} before serving:\n{}", self.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "rocsd did not serve within 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The address rocsd's metrics endpoint bound (asked for with port 0, so that no other
    /// test or connection can take the port between choosing it and binding it), from its
    /// log.
    pub fn metrics_addr(&self) -> String {
        self.wait(
            Duration::from_secs(30),
            "the metrics address in the log",
            |d| {
                let log = d.log();
                let from = log.find("metrics on http://")? + "metrics on http://".len();
                let to = from + log[from..].find("/metrics")?;
                Some(log[from..to].to_string())
            },
        )
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Send one request object (the version is added) and return the whole reply.
    pub fn raw(&self, mut req: Value) -> Value {
        req["v"] = json!(1);
        ask_line(&self.socket, &req.to_string())
    }

    /// Send a request and return its result, failing the test on an error reply.
    pub fn ok(&self, req: Value) -> Value {
        let r = self.raw(req.clone());
        assert_eq!(r["ok"], json!(true), "{req} -> {r}\nlog:\n{}", self.log());
        r["result"].clone()
    }

    /// Poll `f` until it gives Some, or fail after `limit` with `what` and the log.
    pub fn wait<T>(&self, limit: Duration, what: &str, mut f: impl FnMut(&Self) -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            assert!(
                t0.elapsed() < limit,
                "{what}: not within {limit:?}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Send SIGTERM and wait for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                panic!("rocsd did not stop within {limit:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Rocsd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Send one line, read one reply line.
pub fn ask_line(socket: &Path, line: &str) -> Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut reply = String::new();
    BufReader::new(s.take(1 << 30))
        .read_line(&mut reply)
        .unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("bad reply {reply:?}: {e}"))
}
