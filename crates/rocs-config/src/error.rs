//! Configuration errors: every one names the file, and where the text is at fault, the line
//! and column too, so that an administrator can go straight to it.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A place in a configuration file (1-based line and column, columns counted in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl Location {
    /// The location of byte `offset` of `text`, which was read from `file`.
    pub fn of_offset(file: &Path, text: &str, offset: usize) -> Self {
        let offset = offset.min(text.len());
        // Step back to a character boundary so that slicing cannot panic.
        let mut at = offset;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location {
            file: file.to_path_buf(),
            line,
            column,
        }
    }

    /// The location of the start of `span` (or of the file's start when there is none).
    pub fn of_span(file: &Path, text: &str, span: Option<Range<usize>>) -> Self {
        Self::of_offset(file, text, span.map_or(0, |s| s.start))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// Why a configuration or policy could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is wrong at a known place.
    #[error("{at}: {message}")]
    At { at: Location, message: String },
    /// A problem that concerns a whole file or directory rather than one place in it.
    #[error("{}: {message}", file.display())]
    File { file: PathBuf, message: String },
}

impl ConfigError {
    pub fn at(at: Location, message: impl Into<String>) -> Self {
        ConfigError::At {
            at,
            message: message.into(),
        }
    }

    /// The location, when the error has one.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::At { at, .. } => Some(at),
            _ => None,
        }
    }

    /// From a toml parse or deserialize error: toml's message carries a caret picture of the
    /// line; keep only its first meaningful line, and take the place from the span.
    pub(crate) fn from_toml(file: &Path, text: &str, e: &toml::de::Error) -> Self {
        let message = e.message().trim().to_string();
        ConfigError::at(Location::of_span(file, text, e.span()), message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = 2\n";
        let f = Path::new("x.toml");
        assert_eq!(Location::of_offset(f, text, 0).to_string(), "x.toml:1:1");
        assert_eq!(Location::of_offset(f, text, 6).to_string(), "x.toml:2:1");
        // 'é' is two bytes: the '=' after "bé " is column 4.
        let eq = text.rfind('=').unwrap();
        assert_eq!(Location::of_offset(f, text, eq).to_string(), "x.toml:2:4");
        // Past the end or inside a character never panics.
        assert_eq!(Location::of_offset(f, text, 999).line, 3);
        assert_eq!(Location::of_offset(f, text, 8).column, 2);
    }
}
