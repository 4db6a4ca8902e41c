//! A real Prometheus (Debian's `prometheus` package; tests/all.sh installs it) scrapes a
//! real rocsd on simulated machines every second: every documented series arrives with its
//! labels, counters move, every query of the Grafana dashboard runs and finds data, and
//! `promtool check metrics` finds nothing to say about a scrape.

use crate::common;
use crate::scrape;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long Prometheus and rocsd get to show each thing (the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(90);

/// A program on PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// A Prometheus server, killed when dropped; its log is kept for failure messages.
struct Prometheus {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Prometheus {
    fn start(binary: &Path, dir: &Path, scrape: &str) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: rocs\n    static_configs:\n      \
                 - targets: ['{scrape}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", scrape::free_port());
        let log = dir.join("prometheus.log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Prometheus { child, addr, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query's result vector, or the error Prometheus gave.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let path = format!("/api/v1/query?query={}", scrape::url_encode(expr));
        let r = scrape::try_request(&self.addr, "GET", &path, None)?;
        let v: Value = serde_json::from_str(&r.body)
            .map_err(|e| format!("{expr}: not JSON ({e}): {}", r.body))?;
        if v["status"] != "success" {
            return Err(format!("{expr}: {v}"));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// Poll `f` until it gives Some, or fail with `what` and both logs.
    fn wait<T>(&self, rocsd: &common::Rocsd, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "{what}: not within {PATIENCE:?}\nprometheus:\n{}\nrocsd:\n{}",
                self.log(),
                rocsd.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of a one-series result.
fn value(result: &[Value]) -> Option<f64> {
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// rocsd on the demo's simulated PowerPC 970FX with art-like (much to gain: it profiles,
/// searches and migrates), with short windows, and its metrics on a free port of the
/// loopback (see `Rocsd::metrics_addr`).
fn start_rocsd() -> common::Rocsd {
    let config = "platform = \"sim\"\nmetrics = \"127.0.0.1:0\"\n\
                  [knobs]\npollute_colours = 1\nsample_period = 100\nmin_llc_miss_rate = 0.1\n\
                  [sim]\nmachine = \"ppc970fx\"\nwindow_cycles = 10_000_000\ncpu_share = 0.5\n\
                  pause_ms = 10\nseed = 1\n\
                  [[sim.workload]]\nname = \"art-like\"\nscale = 10.0\n";
    common::start(config, &[("10-spec.toml", "[match]\ncomm = \"art\"\n")])
}

#[test]
fn a_real_prometheus_scrapes_every_documented_series() {
    let (Some(prometheus), Some(promtool)) = (which("prometheus"), which("promtool")) else {
        assert!(
            !nix::unistd::geteuid().is_root(),
            "prometheus is not installed: tests/all.sh installs it \
             (apt-get install --no-install-recommends prometheus)"
        );
        println!(
            "SKIPPED: Debian's prometheus package is not installed and this user is not root, \
             so it cannot be installed (tests/all.sh installs it when run as root)"
        );
        return;
    };
    let rocsd = start_rocsd();
    let metrics = rocsd.metrics_addr();
    let dir = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(&prometheus, dir.path(), &metrics);

    prom.wait(&rocsd, "Prometheus scrapes rocsd (up == 1)", || {
        (value(&prom.query("up{job=\"rocs\"}").ok()?)? == 1.0).then_some(())
    });

    // Every documented series arrives; a target's carry pid, comm and policy.
    for name in scrape::documented() {
        let result = prom.wait(&rocsd, &format!("{name} in Prometheus"), || {
            let r = prom.query(&name).ok()?;
            (!r.is_empty()).then_some(r)
        });
        if name.starts_with("rocs_target_") {
            let labels = &result[0]["metric"];
            assert_eq!(labels["comm"], "art", "{name}: {labels}");
            assert_eq!(labels["policy"], "10-spec", "{name}: {labels}");
            assert!(labels["pid"].as_str().is_some(), "{name}: {labels}");
        }
    }
    let states = prom.query("rocs_target_state").unwrap();
    assert_eq!(states.len(), 6, "one series per state: {states:?}");

    // Counters move: windows and rocsd's CPU time always; art samples (at a CPU cost) and
    // migrates.
    for counter in ["rocs_target_windows_total", "rocs_daemon_cpu_seconds_total"] {
        let first = value(&prom.query(counter).unwrap()).unwrap();
        prom.wait(&rocsd, &format!("{counter} grows from {first}"), || {
            (value(&prom.query(counter).ok()?)? > first).then_some(())
        });
    }
    for counter in [
        "rocs_samples_total",
        "rocs_pages_migrated_total",
        "rocs_sampling_cpu_seconds_total",
    ] {
        prom.wait(&rocsd, &format!("{counter} above 0"), || {
            (value(&prom.query(counter).ok()?)? > 0.0).then_some(())
        });
    }

    // Every query of the dashboard is valid PromQL and finds data here.
    for expr in scrape::dashboard_expressions() {
        let promql = match expr.strip_prefix("label_values(") {
            // A variable's label_values(SELECTOR, LABEL): the selector must find series.
            Some(rest) => rest.rsplit_once(',').unwrap().0.to_string(),
            None => expr.clone(),
        };
        let promql = promql
            .replace("$node", ".*")
            .replace("$comm", ".*")
            .replace("$__rate_interval", "10s");
        prom.query(&promql)
            .unwrap_or_else(|e| panic!("deploy/grafana/rocs.json: {e}"));
        prom.wait(
            &rocsd,
            &format!("dashboard query {promql} finds data"),
            || (!prom.query(&promql).ok()?.is_empty()).then_some(()),
        );
    }

    // promtool finds nothing wrong with a scrape (it reads the classic text format).
    let page = scrape::get(&metrics, "/metrics");
    assert_eq!(page.status, 200);
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(page.body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}\npage:\n{}",
        out.status,
        page.body
    );
}
