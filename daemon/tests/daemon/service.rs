//! rocsd as a systemd service: the unit passes `systemd-analyze verify`, and rocsd speaks
//! sd_notify (READY, WATCHDOG, RELOADING, STOPPING) over NOTIFY_SOCKET.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/rocsd.service");

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for must in [
        "Type=notify",
        "WatchdogSec=",
        "RuntimeDirectory=rocs",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "CapabilityBoundingSet=",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(must), "the unit lacks {must}");
    }
    // verify checks that ExecStart exists: point it at the rocsd just built (installed
    // systems have /usr/bin/rocsd); everything else is verified as shipped.
    assert!(unit.contains("ExecStart=/usr/bin/rocsd "));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("rocsd.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/rocsd", env!("CARGO_BIN_EXE_rocsd")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze is installed (tests/all.sh installs systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("rocsd.service"),
        "systemd-analyze has remarks on the unit:\n{stderr}"
    );
}

fn recv_until(sock: &UnixDatagram, want: &str, limit: Duration) -> String {
    let t0 = Instant::now();
    let mut all = String::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < limit {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            all.push_str(&msg);
            all.push('\n');
            if msg.contains(want) {
                return all;
            }
        }
    }
    panic!("no {want} within {limit:?}; got:\n{all}");
}

#[test]
fn rocsd_notifies_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&notify).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let socket = dir.path().join("rocsd.sock");
    let conf = dir.path().join("rocsd.toml");
    std::fs::create_dir(dir.path().join("policy.d")).unwrap();
    std::fs::write(
        &conf,
        format!(
            "platform = \"sim\"\nsocket = {:?}\npolicy_dir = \"policy.d\"\n[sim]\nmachine = \"tiny\"\n\
             [[sim.workload]]\nname = \"twolf-like\"\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .arg("--config")
        .arg(&conf)
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "200000")
        .env("JOURNAL_STREAM", "8:1234")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let got = recv_until(&listener, "READY=1", Duration::from_secs(30));
    assert!(got.contains("STATUS=serving"), "{got}");
    assert!(Path::new(&socket).exists());
    // Keep-alives come at half the watchdog period.
    recv_until(&listener, "WATCHDOG=1", Duration::from_secs(5));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let got = recv_until(&listener, "RELOADING=1", Duration::from_secs(5));
    assert!(got.contains("RELOADING=1"));
    recv_until(&listener, "READY=1", Duration::from_secs(5));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    recv_until(&listener, "STOPPING=1", Duration::from_secs(5));
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(!socket.exists(), "the socket is removed on stop");
}

const CONFIG_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");

#[test]
fn the_shipped_configuration_is_valid() {
    // The demo: rocsd checks its configuration, workloads and policies and says what runs.
    let out = Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .args(["--check", "--config"])
        .arg(format!("{CONFIG_DIR}/demo.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("platform sim") && stdout.contains("policies: spec, mcf"),
        "{stdout}"
    );
    // The example rocsd.toml and policies, checked the way rocsd checks them (on the sim
    // platform, since this machine may have no PMU), with the policy directory pointed at
    // the examples.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(format!("{CONFIG_DIR}/rocsd.toml")).unwrap();
    let text = text
        .replace("platform = \"linux\"", "platform = \"sim\"")
        .replace(
            "policy_dir = \"/etc/rocs/policy.d\"",
            &format!("policy_dir = \"{CONFIG_DIR}/policy.d\""),
        )
        .replace(
            "socket = \"/run/rocs/rocsd.sock\"",
            &format!(
                "socket = {:?}",
                dir.path().join("s.sock").display().to_string()
            ),
        )
        + "\n[[sim.workload]]\nname = \"art-like\"\n";
    let conf = dir.path().join("rocsd.toml");
    std::fs::write(&conf, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocsd"))
        .args(["--check", "--config"])
        .arg(&conf)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("policies: batch, observe-db"), "{stdout}");
}
