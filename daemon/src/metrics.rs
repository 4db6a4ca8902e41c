//! Prometheus text metrics on a loopback address (off unless `metrics` is configured).
//!
//! A minimal HTTP/1.0 responder: any GET gets the metrics page. Requests are bounded in size
//! and time like control clients.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rocs_config::protocol::TargetSummary;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::state::Daemon;

const STATES: &[&str] = &["observe", "profile", "search", "steady", "paused", "exited"];

/// Quote a label value as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A per-target metric: name, type, help, and how to read it from a target.
type Metric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&TargetSummary) -> f64,
);

/// The metrics page.
pub fn render(daemon: &Daemon, targets: &[TargetSummary]) -> String {
    let mut out = String::new();
    let status = daemon.status();
    let _ = writeln!(
        out,
        "# HELP rocs_up rocsd is running.\n# TYPE rocs_up gauge\nrocs_up 1"
    );
    let _ = writeln!(
        out,
        "# HELP rocs_targets Targets attached now.\n# TYPE rocs_targets gauge\nrocs_targets {}",
        targets.len()
    );
    let _ = writeln!(
        out,
        "# HELP rocs_targets_seen_total Targets attached since start.\n# TYPE rocs_targets_seen_total counter\nrocs_targets_seen_total {}",
        status.targets_seen
    );
    let per_target: [Metric; 6] = [
        (
            "rocs_target_ipc",
            "gauge",
            "Instructions per cycle in the last window.",
            |t| t.ipc,
        ),
        (
            "rocs_target_mpki",
            "gauge",
            "LLC misses per thousand instructions in the last window.",
            |t| t.mpki,
        ),
        (
            "rocs_target_pages_confined",
            "gauge",
            "Pages in the pollute buffer.",
            |t| t.pages_confined as f64,
        ),
        (
            "rocs_target_pages_profiled",
            "gauge",
            "Pages in the current profile.",
            |t| t.pages_profiled as f64,
        ),
        (
            "rocs_target_samples_total",
            "counter",
            "Samples counted into profiles.",
            |t| t.samples as f64,
        ),
        (
            "rocs_target_lost_samples_total",
            "counter",
            "Samples the platform lost.",
            |t| t.lost_samples as f64,
        ),
    ];
    for (name, kind, help, get) in per_target {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for t in targets {
            let _ = writeln!(
                out,
                "{name}{{pid=\"{}\",comm=\"{}\",policy=\"{}\"}} {}",
                t.pid,
                label(&t.comm),
                label(&t.policy),
                get(t)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP rocs_target_state The controller's state (1 for the current one).\n# TYPE rocs_target_state gauge"
    );
    for t in targets {
        for s in STATES {
            let _ = writeln!(
                out,
                "rocs_target_state{{pid=\"{}\",comm=\"{}\",policy=\"{}\",state=\"{s}\"}} {}",
                t.pid,
                label(&t.comm),
                label(&t.policy),
                u8::from(t.state == *s)
            );
        }
    }
    out
}

pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))
}

pub async fn serve(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (mut stream, _) = tokio::select! {
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
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let mut head = [0u8; 4096];
            let mut n = 0;
            // Read the request head (bounded), then answer.
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while n < head.len() {
                    let m = stream.read(&mut head[n..]).await?;
                    if m == 0 {
                        break;
                    }
                    n += m;
                    if head[..n].windows(4).any(|w| w == b"\r\n\r\n")
                        || head[..n].windows(2).any(|w| w == b"\n\n")
                    {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let (status, body) = if head[..n].starts_with(b"GET ") {
                ("200 OK", render(&daemon, &daemon.summaries()))
            } else {
                ("405 Method Not Allowed", "only GET\n".to_string())
            };
            let response = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                stream.write_all(response.as_bytes()),
            )
            .await;
        });
    }
}
