//! Prometheus metrics (off unless `metrics` is configured): rocsd's figures per machine and
//! per target, encoded by prometheus-client at every scrape and served by hyper at
//! `/metrics`. docs/metrics.md lists every series.
//!
//! Prometheus asks for OpenMetrics and gets it; other clients (curl, `promtool check
//! metrics`) get the classic text format 0.0.4, which is the same text with counters' family
//! names carrying their `_total` and without OpenMetrics' `# UNIT` and `# EOF` lines.

use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelValue, EncodeMetric,
    LabelValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use rocs_config::protocol::{StatusReply, TargetSummary};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::state::{Daemon, TargetTotals};

pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const CLASSIC_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Connections served at once; more are closed at once (a scraper needs one).
const MAX_CONNECTIONS: usize = 16;
/// A client must send a request's head within this (an idle keep-alive connection too).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head read (a scrape's is a few hundred bytes).
const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The states `rocs_target_state` has a series for.
const STATES: [&str; 6] = ["observe", "profile", "search", "steady", "paused", "exited"];

/// A per-target gauge: name, help, value.
type TargetGauge = (&'static str, &'static str, fn(&TargetSummary) -> f64);
/// A per-target counter: name without `_total`, help, value.
type TargetCounter = (&'static str, &'static str, fn(&TargetSummary) -> u64);

const TARGET_GAUGES: [TargetGauge; 4] = [
    (
        "rocs_target_ipc",
        "Instructions per cycle of the target in its last window.",
        |t| t.ipc,
    ),
    (
        "rocs_target_mpki",
        "LLC misses per thousand instructions of the target in its last window.",
        |t| t.mpki,
    ),
    (
        "rocs_target_pages_profiled",
        "Pages of the target in its current profile.",
        |t| t.pages_profiled as f64,
    ),
    (
        "rocs_target_pages_confined",
        "Pages of the target in the pollute buffer.",
        |t| t.pages_confined as f64,
    ),
];

const TARGET_COUNTERS: [TargetCounter; 6] = [
    (
        "rocs_target_windows",
        "Measurement windows of the target.",
        |t| t.windows,
    ),
    (
        "rocs_target_samples",
        "Memory samples of the target counted into profiles.",
        |t| t.samples,
    ),
    (
        "rocs_target_lost_samples",
        "Memory samples of the target the platform lost.",
        |t| t.lost_samples,
    ),
    (
        "rocs_target_throttled_samples",
        "Memory samples of the target the kernel withheld to bound the sampling rate.",
        |t| t.throttled_samples,
    ),
    (
        "rocs_target_pages_migrated",
        "Pages of the target moved into the pollute buffer or back.",
        |t| t.pages_migrated,
    ),
    (
        "rocs_target_migration_failures",
        "Pages of the target that could not be moved.",
        |t| t.migration_failures,
    ),
];

/// Encodes the daemon's figures at every scrape.
struct DaemonCollector(Arc<Daemon>);

impl fmt::Debug for DaemonCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DaemonCollector")
    }
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    let metric = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// `name` without `_total` (the encoder adds it).
fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: impl EncodeCounterValue,
) -> fmt::Result {
    let metric = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

/// A label value, escaped as both text formats require (`\\`, `\"` and `\n`):
/// prometheus-client writes label values as given (its issue 151), and a process may name
/// itself anything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LabelValue(String);

impl LabelValue {
    fn new(text: &str) -> Self {
        LabelValue(text.to_string())
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        use fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

fn target_labels(t: &TargetSummary) -> Vec<(&'static str, LabelValue)> {
    vec![
        ("pid", LabelValue(t.pid.to_string())),
        ("comm", LabelValue::new(&t.comm)),
        ("policy", LabelValue::new(&t.policy)),
    ]
}

impl Collector for DaemonCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let daemon = &self.0;
        let status = daemon.status();
        let targets = daemon.summaries();
        let totals = daemon.totals();
        let e = &mut enc;
        encode_daemon(e, daemon, &status)?;
        encode_control(e, &status)?;
        encode_machine(e, &totals, &targets)?;
        encode_targets(e, &targets)
    }
}

/// rocsd itself: what it is, since when, and the CPU it and its sampling cost.
fn encode_daemon(e: &mut DescriptorEncoder, daemon: &Daemon, status: &StatusReply) -> fmt::Result {
    let mut info = e.encode_descriptor(
        "rocs_build_info",
        "rocsd's version, platform and capability (always 1).",
        None,
        MetricType::Gauge,
    )?;
    let labels = [
        ("version", LabelValue::new(&status.version)),
        ("platform", LabelValue::new(&status.platform)),
        ("capability", LabelValue::new(&status.capability)),
    ];
    ConstGauge::new(1u64).encode(info.encode_family(&labels)?)?;
    let started = SystemTime::now()
        .checked_sub(daemon.started.elapsed())
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    gauge(
        e,
        "rocs_start_time",
        "When rocsd started, in seconds since the Unix epoch.",
        Some(Unit::Seconds),
        started.as_secs_f64(),
    )?;
    counter(
        e,
        "rocs_daemon_cpu",
        "CPU time rocsd itself used (user and system).",
        Some(Unit::Seconds),
        own_cpu_time().as_secs_f64(),
    )?;
    counter(
        e,
        "rocs_sampling_cpu",
        "CPU time the platform spent on memory sampling; its rate is the share of a core.",
        Some(Unit::Seconds),
        daemon.sampling_cpu().as_secs_f64(),
    )
}

/// What the operator set up and changed: colours, pause, policies, targets.
fn encode_control(e: &mut DescriptorEncoder, status: &StatusReply) -> fmt::Result {
    gauge(
        e,
        "rocs_llc_colours",
        "Page colours of the LLC.",
        None,
        status.colours,
    )?;
    gauge(
        e,
        "rocs_paused",
        "1 while the operator has paused every target.",
        None,
        u64::from(status.paused),
    )?;
    gauge(
        e,
        "rocs_policies",
        "Policies in force.",
        None,
        status.policies.len(),
    )?;
    counter(
        e,
        "rocs_policy_reloads",
        "Policy reloads that took effect.",
        None,
        status.reloads,
    )?;
    gauge(
        e,
        "rocs_policy_reload_failed",
        "1 when the last policy reload was refused (the previous policies stay).",
        None,
        u64::from(status.last_reload_error.is_some()),
    )?;
    gauge(
        e,
        "rocs_targets",
        "Targets attached now.",
        None,
        status.targets,
    )?;
    counter(
        e,
        "rocs_targets_attached",
        "Targets attached since start.",
        None,
        status.targets_seen,
    )?;
    counter(
        e,
        "rocs_targets_exited",
        "Targets let go since start (exited, or their policy no longer applies).",
        None,
        status.targets_exited,
    )
}

/// The machine's sums over every target since start, and the pollute buffer now.
fn encode_machine(
    e: &mut DescriptorEncoder,
    totals: &TargetTotals,
    targets: &[TargetSummary],
) -> fmt::Result {
    for (name, help, value) in [
        (
            "rocs_samples",
            "Memory samples counted into profiles, every target since start.",
            totals.samples,
        ),
        (
            "rocs_lost_samples",
            "Memory samples the platform lost, every target since start.",
            totals.lost_samples,
        ),
        (
            "rocs_throttled_samples",
            "Memory samples the kernel withheld, every target since start.",
            totals.throttled_samples,
        ),
        (
            "rocs_pages_migrated",
            "Pages moved into the pollute buffer or back, every target since start.",
            totals.pages_migrated,
        ),
        (
            "rocs_migration_failures",
            "Pages that could not be moved, every target since start.",
            totals.migration_failures,
        ),
    ] {
        counter(e, name, help, None, value)?;
    }
    let frames: usize = targets.iter().map(|t| t.pages_confined).sum();
    gauge(
        e,
        "rocs_pollute_buffer_frames",
        "Frames of the pollute buffer holding a confined page now.",
        None,
        frames,
    )
}

fn encode_targets(e: &mut DescriptorEncoder, targets: &[TargetSummary]) -> fmt::Result {
    let mut metric = e.encode_descriptor(
        "rocs_target_state",
        "The target's controller state: 1 for the state it is in, 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
    for t in targets {
        for state in STATES {
            let mut labels = target_labels(t);
            labels.push(("state", LabelValue::new(state)));
            ConstGauge::new(u64::from(t.state == state)).encode(metric.encode_family(&labels)?)?;
        }
    }
    for (name, help, get) in TARGET_GAUGES {
        let mut metric = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for t in targets {
            ConstGauge::new(get(t)).encode(metric.encode_family(&target_labels(t))?)?;
        }
    }
    for (name, help, get) in TARGET_COUNTERS {
        let mut metric = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for t in targets {
            ConstCounter::new(get(t)).encode(metric.encode_family(&target_labels(t))?)?;
        }
    }
    Ok(())
}

/// CPU time this process has used, all threads.
fn own_cpu_time() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}

/// The metrics page, in OpenMetrics or the classic text format.
pub struct Exporter {
    registry: Registry,
}

impl Exporter {
    pub fn new(daemon: Arc<Daemon>) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(DaemonCollector(daemon)));
        Exporter { registry }
    }

    pub fn openmetrics(&self) -> Result<String, fmt::Error> {
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &self.registry)?;
        Ok(page)
    }

    /// The answer to one HTTP request.
    fn respond(&self, method: &Method, path: &str, headers: &HeaderMap) -> Response<Full<Bytes>> {
        if path != "/metrics" {
            return plain(StatusCode::NOT_FOUND, "rocsd serves /metrics only\n");
        }
        if method != Method::GET && method != Method::HEAD {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let page = match self.openmetrics() {
            Ok(page) => page,
            Err(fmt::Error) => {
                tracing::warn!("metrics could not be encoded");
                return plain(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode\n");
            }
        };
        let (body, content_type) = if accepts_openmetrics(headers) {
            (page, OPENMETRICS)
        } else {
            (classic_text(&page), CLASSIC_TEXT)
        };
        let mut r = Response::new(Full::new(Bytes::from(body)));
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Whether the client's Accept lists OpenMetrics (with a quality above 0).
fn accepts_openmetrics(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            media.eq_ignore_ascii_case("application/openmetrics-text")
                && !parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.parse() == Ok(0.0)))
        })
}

/// OpenMetrics text of counters and gauges, as the classic text format 0.0.4 says it: a
/// counter's family is named like its sample (with `_total`), and there are no `# UNIT` or
/// `# EOF` lines. Everything else (label and help escaping, values) is the same.
pub fn classic_text(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|kind| Some((kind, line.strip_prefix(kind)?.split_once(' ')?)));
        match descriptor {
            Some((kind, (name, rest))) if counters.contains(name) => {
                out.push_str(&format!("{kind}{name}_total {rest}"));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))
}

/// Serve `/metrics` until `shutdown` changes.
pub async fn serve(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    mut shutdown: watch::Receiver<bool>,
) {
    let exporter = Arc::new(Exporter::new(daemon));
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("metrics accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!("metrics: {MAX_CONNECTIONS} connections open; closing {peer}'s");
            continue;
        };
        let exporter = exporter.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = exporter.respond(req.method(), req.uri().path(), req.headers());
                async move { Ok::<_, Infallible>(response) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_header_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("metrics connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;

    #[test]
    fn classic_text_names_counter_families_with_total_and_drops_openmetrics_lines() {
        // Real prometheus-client output: a counter with a unit, a labelled gauge.
        let mut registry = Registry::default();
        let cpu: Counter<f64, std::sync::atomic::AtomicU64> = Counter::default();
        cpu.inc_by(1.5);
        registry.register_with_unit("x_cpu", "CPU used", Unit::Seconds, cpu);
        let ipc = Family::<Vec<(&'static str, LabelValue)>, Gauge>::default();
        ipc.get_or_create(&vec![("comm", LabelValue::new("a"))])
            .set(2);
        registry.register("x_ipc", "IPC", ipc);
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry).unwrap();
        assert!(om.contains("# TYPE x_cpu_seconds counter\n"), "{om}");
        assert!(om.contains("# UNIT x_cpu_seconds seconds\n"), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
        // The text format 0.0.4 (Prometheus's exposition formats document): HELP and TYPE
        // name the sample's metric.
        assert_eq!(
            classic_text(&om),
            "# HELP x_cpu_seconds_total CPU used.\n\
             # TYPE x_cpu_seconds_total counter\n\
             x_cpu_seconds_total 1.5\n\
             # HELP x_ipc IPC.\n\
             # TYPE x_ipc gauge\n\
             x_ipc{comm=\"a\"} 2\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        // A process may call itself anything: `\`, `"` and a line feed must not end the
        // value or the line (both formats escape them as `\\`, `\"`, `\n`).
        let comm = Family::<Vec<(&'static str, LabelValue)>, Gauge>::default();
        comm.get_or_create(&vec![("comm", LabelValue::new("a\\b\"c\nd"))])
            .set(1);
        let mut registry = Registry::default();
        registry.register("x", "x", comm);
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry).unwrap();
        assert!(om.contains("\nx{comm=\"a\\\\b\\\"c\\nd\"} 1\n"), "{om}");
    }

    #[test]
    fn openmetrics_only_when_the_client_asks_for_it() {
        let accept = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(ACCEPT, HeaderValue::from_static(v));
            accepts_openmetrics(&h)
        };
        // What Prometheus 2 sends.
        assert!(accept(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
             version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!accept("*/*"));
        assert!(!accept("text/plain"));
        assert!(!accept("application/openmetrics-text;q=0"));
        assert!(!accepts_openmetrics(&HeaderMap::new()));
    }
}
