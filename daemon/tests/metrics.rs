//! Prometheus text metrics on a loopback address, per target.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use serde_json::json;

fn get(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn metrics_per_target() {
    // A free port: bind, read it, let go (rocsd binds it next).
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = format!(
        "platform = \"sim\"\nmetrics = \"{addr}\"\n[sim]\nmachine = \"tiny\"\nwindow_cycles = 1_000_000\n\
         pause_ms = 5\n[[sim.workload]]\nname = \"twolf-like\"\n"
    );
    let d = common::start(&config, &[("10-all.toml", "[match]\ncomm = \"*\"\n")]);
    let pid = d.wait(Duration::from_secs(30), "a target measured", |d| {
        let ts = d.ok(json!({"request": "targets"}));
        let t = ts.as_array()?.first()?.clone();
        (t["windows"].as_u64()? > 0).then(|| t["pid"].as_u64().unwrap())
    });
    let page = get(&addr);
    assert!(page.starts_with("HTTP/1.0 200 OK"), "{page}");
    assert!(page.contains("Content-Type: text/plain; version=0.0.4"));
    assert!(page.contains("\nrocs_up 1\n"));
    assert!(page.contains("\nrocs_targets 1\n"), "{page}");
    for metric in [
        "rocs_target_ipc",
        "rocs_target_mpki",
        "rocs_target_pages_confined",
        "rocs_target_samples_total",
        "rocs_target_lost_samples_total",
    ] {
        let line = format!("\n{metric}{{pid=\"{pid}\",comm=\"twolf\",policy=\"10-all\"}} ");
        assert!(page.contains(&line), "no {metric} for {pid}:\n{page}");
    }
    assert!(page.contains(&format!(
        "rocs_target_state{{pid=\"{pid}\",comm=\"twolf\",policy=\"10-all\",state=\""
    )));
    // Only GET is served.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"POST / HTTP/1.0\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.0 405"), "{r}");
}
