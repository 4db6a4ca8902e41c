//! Errors of the simulator: every bad input says what was wrong and where.

use std::path::PathBuf;

use rocs_core::GeometryError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SimError {
    #[error("unknown machine '{name}'; known machines: {}; or give a path to a .toml file", known.join(", "))]
    UnknownMachine { name: String, known: Vec<String> },
    #[error("unknown workload '{name}'; known workloads: {}; or give a path to a .toml file", known.join(", "))]
    UnknownWorkload { name: String, known: Vec<String> },
    #[error("{file}:{line}:{column}: {message}")]
    Toml {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    // The reasons are part of the message (not chained as `source`), so that printing the
    // error chain does not say them twice.
    #[error("{file}: {what}: impossible cache geometry: {reason}")]
    Geometry {
        file: String,
        what: String,
        reason: GeometryError,
    },
    #[error("cannot read {}: {reason}", path.display())]
    Io {
        path: PathBuf,
        reason: std::io::Error,
    },
    #[error("trace line {line}: {message}")]
    Trace { line: u64, message: String },
    #[error("trace read error after line {line}: {reason}")]
    TraceIo { line: u64, reason: std::io::Error },
    #[error("binary trace, byte {offset}: {message}")]
    BinaryTrace { offset: u64, message: String },
    #[error("binary trace, read error at byte {offset}: {reason}")]
    BinaryTraceIo { offset: u64, reason: std::io::Error },
    #[error("no process with pid {0} on this machine")]
    NoSuchProcess(u32),
    #[error("out of physical frames ({0})")]
    OutOfFrames(String),
    #[error("{0}")]
    Unsupported(String),
}

/// Turn a toml parse/deserialize error into file:line:column.
pub(crate) fn toml_error(file: &str, text: &str, e: toml::de::Error) -> SimError {
    let (line, column) = match e.span() {
        Some(span) => line_col(text, span.start),
        None => (1, 1),
    };
    SimError::Toml {
        file: file.to_string(),
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

/// 1-based line and column of byte offset `at` in `text`.
pub(crate) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}
