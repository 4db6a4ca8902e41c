//! Memory traces of real programs: valgrind lackey's text (`valgrind --tool=lackey
//! --trace-mem=yes`, [`LackeyReader`]) and rocs's compact binary format ([`BinaryReader`],
//! [`BinaryWriter`], specified in [`binary`] and docs/traces.md). [`TraceReader`] reads
//! either, telling them apart by their first byte.

pub mod binary;
pub mod columns;
mod lackey;

use std::io::{BufRead, Read};

pub use binary::{BinaryReader, BinaryWriter, EventSink};
pub use columns::ColumnReader;
pub use lackey::LackeyReader;

use crate::error::SimError;

/// What one trace event asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    Instr,
    Load,
    Store,
    /// A load and a store of the same location by one instruction.
    Modify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub kind: TraceKind,
    pub addr: u64,
    pub size: u64,
}

/// The format of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Tell from the first byte: the binary format's magic, else lackey.
    Detect,
    Lackey,
    Binary,
}

/// A reader of either format.
pub enum TraceReader {
    Lackey(LackeyReader<Box<dyn Read + Send>>),
    Binary(BinaryReader<Box<dyn Read + Send>>),
    /// A binary trace of version 5.
    Columns(ColumnReader<Box<dyn Read + Send>>),
}

impl TraceReader {
    /// A reader of `input` in `format` (for `Detect`, peeks at its first byte).
    pub fn new(mut input: Box<dyn BufRead + Send>, format: TraceFormat) -> Result<Self, SimError> {
        let format = match format {
            TraceFormat::Detect => {
                let first = loop {
                    match input.fill_buf() {
                        Ok(b) => break b.first().copied(),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(reason) => return Err(SimError::TraceIo { line: 0, reason }),
                    }
                };
                if first == Some(binary::MAGIC[0]) {
                    TraceFormat::Binary
                } else {
                    TraceFormat::Lackey
                }
            }
            f => f,
        };
        let input: Box<dyn Read + Send> = Box::new(input);
        Ok(match format {
            TraceFormat::Binary => {
                let r = BinaryReader::new(input)?;
                if r.version() >= 5 {
                    TraceReader::Columns(r.into_columns())
                } else {
                    TraceReader::Binary(r)
                }
            }
            _ => TraceReader::Lackey(LackeyReader::new(input)),
        })
    }

    pub fn format(&self) -> TraceFormat {
        match self {
            TraceReader::Lackey(_) => TraceFormat::Lackey,
            TraceReader::Binary(_) | TraceReader::Columns(_) => TraceFormat::Binary,
        }
    }

    /// The next event, `None` at the end of the trace.
    #[inline(always)]
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>, SimError> {
        match self {
            TraceReader::Lackey(r) => r.next_event(),
            TraceReader::Binary(r) => r.next_event(),
            TraceReader::Columns(r) => r.next_event(),
        }
    }

    /// Hand events to `sink` while it wants more; false when the trace is over. A binary
    /// trace is decoded in a loop fused with `sink`'s.
    #[inline(always)]
    pub fn feed<S: EventSink>(&mut self, sink: &mut S) -> Result<bool, SimError> {
        match self {
            TraceReader::Binary(r) => r.feed(sink),
            TraceReader::Columns(r) => r.feed(sink),
            TraceReader::Lackey(r) => {
                while sink.wants() {
                    match r.next_event()? {
                        Some(ev) => sink.event(ev)?,
                        None => return Ok(false),
                    }
                }
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(input: Vec<u8>, format: TraceFormat) -> (TraceFormat, Vec<TraceEvent>) {
        let mut r = TraceReader::new(Box::new(std::io::Cursor::new(input)), format).unwrap();
        let mut got = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            got.push(e);
        }
        (r.format(), got)
    }

    #[test]
    fn detects_the_format_and_both_give_the_same_events() {
        let text =
            b"==1== Lackey\nI  00400000,4\n L 00001000,8\n S 0000fff8,8\n M 00002000,4\n".to_vec();
        let (format, from_text) = events(text.clone(), TraceFormat::Detect);
        assert_eq!(format, TraceFormat::Lackey);
        assert_eq!(from_text.len(), 4);
        let mut w = BinaryWriter::new(Vec::new());
        for e in &from_text {
            w.write(e).unwrap();
        }
        let bin = w.finish().unwrap();
        assert_eq!(
            events(bin.clone(), TraceFormat::Detect),
            (TraceFormat::Binary, from_text)
        );
        // A forced format is not second-guessed.
        let Err(e) = TraceReader::new(Box::new(std::io::Cursor::new(text)), TraceFormat::Binary)
        else {
            panic!("lackey text read as binary")
        };
        assert!(e.to_string().contains("not a rocs binary trace"), "{e}");
        // Empty input is an empty trace.
        assert_eq!(events(Vec::new(), TraceFormat::Detect).1, vec![]);
    }
}
