//! rocsd's metrics page: every documented series, per machine and per target, in both
//! formats; only /metrics; a cap on connections; and a dashboard that asks only for series
//! rocsd exports.

use crate::common;
use crate::scrape;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::scrape::{documented, families, get, request};

const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0";

/// rocsd with its metrics on a free port of the loopback, the address it bound, and the pid
/// of its first target once measured.
fn rocsd_with_metrics() -> (common::Rocsd, String, u64) {
    let config = "platform = \"sim\"\nmetrics = \"127.0.0.1:0\"\n[sim]\nmachine = \"tiny\"\n\
                  window_cycles = 1_000_000\npause_ms = 5\n[[sim.workload]]\nname = \"twolf-like\"\n";
    let d = common::start(config, &[("10-all.toml", "[match]\ncomm = \"*\"\n")]);
    let pid = d.wait(Duration::from_secs(30), "a target measured", |d| {
        let ts = d.ok(json!({"request": "targets"}));
        let t = ts.as_array()?.first()?.clone();
        (t["windows"].as_u64()? > 0).then(|| t["pid"].as_u64().unwrap())
    });
    let addr = d.metrics_addr();
    (d, addr, pid)
}

#[test]
fn every_documented_series_per_machine_and_per_target() {
    let (_d, addr, pid) = rocsd_with_metrics();

    let page = get(&addr, "/metrics");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.head
            .contains("\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8"),
        "{}",
        page.head
    );
    // The page exports exactly what docs/metrics.md documents.
    assert_eq!(families(&page.body), documented(), "{}", page.body);
    let body = &page.body;
    assert!(body.contains("\nrocs_targets 1\n"), "{body}");
    assert!(body.contains("\nrocs_targets_attached_total 1\n"), "{body}");
    assert!(
        body.contains(
            "\nrocs_build_info{version=\"0.1.0\",platform=\"sim\",capability=\"full\"} 1\n"
        ),
        "{body}"
    );
    let labels = format!("{{pid=\"{pid}\",comm=\"twolf\",policy=\"10-all\"}}");
    for name in documented()
        .iter()
        .filter(|n| n.starts_with("rocs_target_"))
    {
        if name == "rocs_target_state" {
            continue;
        }
        assert!(
            body.contains(&format!("\n{name}{labels} ")),
            "no {name}{labels}:\n{body}"
        );
    }
    // One state series per state, exactly one of them 1.
    let states: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("rocs_target_state{"))
        .collect();
    assert_eq!(states.len(), 6, "{states:?}");
    assert_eq!(states.iter().filter(|l| l.ends_with(" 1")).count(), 1);

    // OpenMetrics for a client that asks for it (Prometheus does).
    let om = request(&addr, "GET", "/metrics", Some(OPENMETRICS));
    assert!(
        om.head.contains(
            "\r\ncontent-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
        ),
        "{}",
        om.head
    );
    assert!(om.body.ends_with("\n# EOF\n"), "{}", om.body);
    assert!(om.body.contains("\n# TYPE rocs_samples counter\n"));
    assert!(om
        .body
        .contains("\n# UNIT rocs_daemon_cpu_seconds seconds\n"));

    // HEAD answers the head alone.
    let head = request(&addr, "HEAD", "/metrics", None);
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    // /metrics only, GET or HEAD only.
    for path in ["/", "/metrics/", "/debug", "/metricsx"] {
        assert_eq!(get(&addr, path).status, 404, "{path}");
    }
    let post = request(&addr, "POST", "/metrics", None);
    assert_eq!(post.status, 405);
    assert!(post.head.contains("\r\nallow: get, head"), "{}", post.head);
}

#[test]
fn connections_beyond_the_cap_are_closed_and_the_cap_frees_up() {
    const CAP: usize = 16;
    let (_d, addr, _) = rocsd_with_metrics();
    // CAP idle connections take every place (rocsd accepts in order).
    let mut idle: Vec<TcpStream> = (0..CAP)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // One more is closed without an answer.
    let mut extra = TcpStream::connect(&addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(
        extra.read(&mut buf).unwrap(),
        0,
        "a connection beyond the cap must be closed"
    );
    // The idle ones are served.
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    first
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
    // Once they go, new clients are served again.
    drop(idle);
    let t0 = Instant::now();
    loop {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.0 200 OK") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the cap did not free up after the clients left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_dashboard_asks_only_for_series_rocsd_exports() {
    let exported = documented();
    let exprs = scrape::dashboard_expressions();
    assert!(exprs.len() >= 20, "{exprs:?}");
    for expr in &exprs {
        let names = scrape::selected_metrics(expr);
        assert!(!names.is_empty(), "{expr} selects no series");
        for name in names {
            assert!(
                exported.contains(&name),
                "deploy/grafana/rocs.json: {expr} asks for {name}, which rocsd does not export \
                 (docs/metrics.md lists what it does)"
            );
        }
    }
    // Per node and per target: confinement, IPC, MPKI and overhead.
    let all = exprs.join("\n");
    for series in [
        "rocs_pollute_buffer_frames",
        "rocs_target_pages_confined",
        "rocs_target_ipc",
        "rocs_target_mpki",
        "rocs_daemon_cpu_seconds_total",
        "rocs_sampling_cpu_seconds_total",
    ] {
        assert!(all.contains(series), "the dashboard does not show {series}");
    }
}

#[test]
fn promql_names_are_told_from_functions_labels_and_variables() {
    assert_eq!(
        scrape::selected_metrics(
            "sum by (instance, state) (rate(rocs_a_total{instance=~\"$node\"}[$__rate_interval])) \
             / on (instance) group_left max(rocs_b) * 1e3 > bool 0.5"
        ),
        ["rocs_a_total", "rocs_b"]
    );
    assert_eq!(
        scrape::selected_metrics("label_values(rocs_c{x=\"a,b\"}, comm)"),
        ["rocs_c"]
    );
    assert_eq!(scrape::selected_metrics("up == 1"), ["up"]);
}
