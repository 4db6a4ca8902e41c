//! Helpers of the metrics tests: free ports, an HTTP/1.0 GET, the series a page exports,
//! the series docs/metrics.md documents, and the expressions of the Grafana dashboard.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// A port free now (bound, read, let go: the server binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Response {
    pub status: u16,
    /// The head, lower-cased (header names are case-insensitive).
    pub head: String,
    pub body: String,
}

/// One request on a fresh connection (HTTP/1.0: the server closes after answering, and the
/// body is neither chunked nor compressed).
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> Result<Response, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n"
    )
    .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head in {raw:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok(Response {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    })
}

pub fn request(addr: &str, method: &str, path: &str, accept: Option<&str>) -> Response {
    try_request(addr, method, path, accept).unwrap_or_else(|e| panic!("{e}"))
}

pub fn get(addr: &str, path: &str) -> Response {
    request(addr, "GET", path, None)
}

/// The metric families of a page in the classic text format, from its `# TYPE` lines.
pub fn families(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .map(str::to_string)
        .collect()
}

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// The series docs/metrics.md lists, from its tables' first column.
pub fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_file("docs/metrics.md")).unwrap();
    let names: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .map(str::to_string)
        .collect();
    assert!(names.len() > 20, "docs/metrics.md lists only {names:?}");
    names
}

/// Every PromQL expression of deploy/grafana/rocs.json: the panels' queries and the
/// template variables' queries.
pub fn dashboard_expressions() -> Vec<String> {
    let path = repo_file("deploy/grafana/rocs.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("a query's expr").to_string());
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if var["type"] == "query" {
            exprs.push(var["query"]["query"].as_str().expect("query").to_string());
        }
    }
    exprs
}

/// The metric names a PromQL expression selects: its identifiers that are not functions,
/// keywords, grouping labels, label matchers, ranges, strings or Grafana variables.
pub fn selected_metrics(expr: &str) -> Vec<String> {
    // Operators, and aggregations (which may stand before `by (...)` rather than `(`).
    const KEYWORDS: [&str; 18] = [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "atan2",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    // Skip from an opening bracket to its closing one.
    let skip_to = |i: usize, close: char| {
        let mut j = i;
        while j < chars.len() && chars[j] != close {
            j += 1;
        }
        j + 1
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' => i = skip_to(i, '}'),
            '[' => i = skip_to(i, ']'),
            '"' | '\'' | '`' => i = skip_to(i + 1, c),
            '0'..='9' | '.' => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':' | '$'))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next] == ' ' {
                    next += 1;
                }
                let call = chars.get(next) == Some(&'(');
                if GROUPING.contains(&word.as_str()) {
                    if call {
                        i = skip_to(next, ')');
                    }
                } else if word == "label_values" {
                    // label_values(METRIC, LABEL): the second argument is a label.
                    let close = skip_to(next, ')');
                    let inner: String = chars[next + 1..close - 1].iter().collect();
                    let metric = inner.rsplit_once(',').map_or(&*inner, |(m, _)| m);
                    names.extend(selected_metrics(metric));
                    i = close;
                } else if !call && !word.starts_with('$') && !KEYWORDS.contains(&word.as_str()) {
                    names.push(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// `text` as a URL query value (everything but unreserved characters percent-encoded).
pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
