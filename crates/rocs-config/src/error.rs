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

/// The text of one configuration or policy file, to place what toml's spans point at.
pub(crate) struct Source<'a> {
    pub file: &'a Path,
    pub text: &'a str,
}

impl Source<'_> {
    /// The location of the start of `span`.
    pub fn at(&self, span: Range<usize>) -> Location {
        Location::of_span(self.file, self.text, Some(span))
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
    /// line; keep its meaningful lines as one (a log line per error), and take the place from
    /// the span. An array left open is reported where it opens, not where toml noticed.
    pub(crate) fn from_toml(file: &Path, text: &str, e: &toml::de::Error) -> Self {
        let message = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        let Some(mut at) = e.span().map(|s| s.start.min(text.len())) else {
            return ConfigError::at(Location::of_offset(file, text, 0), message);
        };
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let here = Location::of_offset(file, text, at);
        let open = unclosed_brackets(text, at);
        let what = |open: usize| match text.as_bytes()[open] {
            b'[' => ("array", ']'),
            _ => ("inline table", '}'),
        };
        // The end of the file, or a table, inside an array: it was never closed. (A table
        // header inside an array reads as a nested array, so toml may fail inside it.)
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let before = if text[at..].trim().is_empty() {
            Some("the end of the file".to_string())
        } else if is_table_header(&text[line_start..]) {
            Some(format!("the table at line {}", here.line))
        } else {
            None
        };
        if let Some(before) = before {
            if let Some(&open) = open.iter().rev().find(|&&o| o < line_start) {
                let (what, close) = what(open);
                return ConfigError::at(
                    Location::of_offset(file, text, open),
                    format!("this {what} is not closed: `{close}` expected before {before}"),
                );
            }
        }
        // Something wrong inside a value that spans lines (a missing comma): say where it
        // opened too.
        match open.last() {
            Some(&open) if open < line_start => {
                let opened = Location::of_offset(file, text, open);
                ConfigError::at(
                    here,
                    format!(
                        "{message} (in the {} opened at line {}, column {})",
                        what(open).0,
                        opened.line,
                        opened.column
                    ),
                )
            }
            _ => ConfigError::at(here, message),
        }
    }
}

/// Whether the line that starts `line` is a table header (`[name]`, `[[name.sub]]`): bare
/// keys only, which no array of values looks like.
fn is_table_header(line: &str) -> bool {
    let line = line.lines().next().unwrap_or("");
    let line = line.split('#').next().unwrap_or("").trim();
    let inner = line
        .strip_prefix("[[")
        .and_then(|l| l.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')));
    inner.is_some_and(|k| {
        !k.trim().is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-. ".contains(c))
    })
}

/// Whether only blanks precede byte `at` on its line.
fn starts_line(text: &str, at: usize) -> bool {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text[line_start..at].trim().is_empty()
}

/// The offsets of the arrays and inline tables still open at byte `upto` of a TOML text,
/// outermost first, skipping strings, comments and table headers.
fn unclosed_brackets(text: &str, upto: usize) -> Vec<usize> {
    let bytes = &text.as_bytes()[..upto.min(text.len())];
    let mut open = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        match bytes[i] {
            b'#' => i = skip_past(bytes, i, b"\n"),
            b'"' if rest.starts_with(b"\"\"\"") => i = skip_string(bytes, i + 3, b"\"\"\"", true),
            b'\'' if rest.starts_with(b"\'\'\'") => i = skip_string(bytes, i + 3, b"\'\'\'", false),
            b'"' => i = skip_string(bytes, i + 1, b"\"", true),
            b'\'' => i = skip_string(bytes, i + 1, b"\'", false),
            // A table header: `[` first on its line, outside any value.
            b'[' if open.is_empty() && starts_line(text, i) => i = skip_past(bytes, i, b"\n"),
            b'[' | b'{' => {
                open.push(i);
                i += 1;
            }
            b']' | b'}' => {
                open.pop();
                i += 1;
            }
            _ => i += 1,
        }
    }
    open
}

/// The index just past the first `end` at or after `from` (or the end).
fn skip_past(bytes: &[u8], from: usize, end: &[u8]) -> usize {
    bytes[from..]
        .windows(end.len())
        .position(|w| w == end)
        .map_or(bytes.len(), |p| from + p + end.len())
}

/// The index just past a string's closing `quote`, from just after its opening one;
/// `escapes` for basic strings, where a backslash escapes the next character.
fn skip_string(bytes: &[u8], mut i: usize, quote: &[u8], escapes: bool) -> usize {
    while i < bytes.len() {
        if escapes && bytes[i] == b'\\' {
            i += 2;
        } else if bytes[i..].starts_with(quote) {
            return i + quote.len();
        } else if bytes[i] == b'\n' && quote.len() == 1 {
            // A one-line string ends at the line's end, closed or not.
            return i;
        } else {
            i += 1;
        }
    }
    bytes.len()
}

/// Read a configuration or policy file as text. A file that is not UTF-8 (a binary, a
/// file in another encoding) is reported at its first bad byte.
pub fn read_text(file: &Path) -> Result<String, ConfigError> {
    let bytes = std::fs::read(file).map_err(|source| ConfigError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let text = std::str::from_utf8(&bytes[..good]).unwrap_or_default();
        ConfigError::at(
            Location::of_offset(file, text, good),
            format!(
                "not UTF-8 text (byte {:#04x} at offset {good}): a rocs configuration is a TOML \
                 text file; is this the right file?",
                bytes[good]
            ),
        )
    })
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
