//! A replay PMU: precise samples and window counters played from a script instead of read
//! from the hardware, for machines without a PMU (a TCG guest) where the rest of rocsd's
//! real path (processes, policies, the controller, the kernel shim, restore) is tested.
//!
//! It is chosen only by name (`pmu = "replay:FILE"` in rocsd.toml) and says what it is
//! wherever rocsd reports its PMU. The script is text, one statement a line:
//!
//! ```text
//! # what every target's counters and samples say, window after window;
//! # the last window repeats for ever
//! window instructions=100000000 cycles=200000000 llc_references=1000000 llc_misses=600000
//! samples 0x100000000-0x100200000 miss=3 hit=1   # each page of the range, this window
//! samples 0x100200000-0x100400000 hit=4
//! window ...
//! ```
//!
//! Every target plays the script from its first window on: its n-th counter read returns
//! window n, and while it is sampled, the drain before that read returns window n's samples
//! (one sample per count per page of each range, at the page's first byte).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocs_core::{CounterDelta, DataSource, MemSample, Pid, SampleLoss};

/// Pages one `samples` line may cover (a typo in an address must not ask for terabytes of
/// samples).
const MAX_RANGE_PAGES: u64 = 1 << 20;

/// Why a script cannot be used: its file, and the line at fault when there is one.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{}: cannot read the replay PMU script: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}", file.display())]
    At {
        file: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{}: the replay PMU script has no `window` line: give at least one", file.display())]
    Empty { file: PathBuf },
}

/// Samples of every page of `[start, end)`: `miss` LLC misses and `hit` LLC hits each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleRange {
    pub start: u64,
    pub end: u64,
    pub miss: u32,
    pub hit: u32,
}

/// One window of the script.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayWindow {
    pub counters: CounterDelta,
    pub samples: Vec<SampleRange>,
}

/// A parsed script.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayScript {
    pub file: PathBuf,
    pub windows: Vec<ReplayWindow>,
}

impl ReplayScript {
    pub fn load(file: &Path) -> Result<Self, ReplayError> {
        let text = std::fs::read_to_string(file).map_err(|source| ReplayError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(file, &text, crate::geometry::page_size())
    }

    /// Parse `text` read from `file`, for pages of `page_size` bytes.
    pub fn parse(file: &Path, text: &str, page_size: u64) -> Result<Self, ReplayError> {
        let mut windows: Vec<ReplayWindow> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let at = |message: String| ReplayError::At {
                file: file.to_path_buf(),
                line: i + 1,
                message,
            };
            let line = raw.split('#').next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            match words.next() {
                None => {}
                Some("window") => {
                    let fields = fields(
                        words,
                        &["instructions", "cycles", "llc_references", "llc_misses"],
                    )
                    .map_err(at)?;
                    let get = |k: &str| fields.get(k).copied().unwrap_or(0);
                    if get("instructions") == 0 || get("cycles") == 0 {
                        return Err(at(
                            "a window needs instructions=N and cycles=N, both above 0".into(),
                        ));
                    }
                    if get("llc_misses") > get("llc_references") {
                        return Err(at("llc_misses is more than llc_references".into()));
                    }
                    windows.push(ReplayWindow {
                        counters: CounterDelta {
                            instructions: get("instructions"),
                            cycles: get("cycles"),
                            llc_references: get("llc_references"),
                            llc_misses: get("llc_misses"),
                            // Counted the whole time: nothing was multiplexed.
                            time_enabled: get("cycles"),
                            time_running: get("cycles"),
                        },
                        samples: Vec::new(),
                    });
                }
                Some("samples") => {
                    let Some(window) = windows.last_mut() else {
                        return Err(at("`samples` before the first `window`".into()));
                    };
                    let range = words.next().ok_or_else(|| {
                        at("`samples` needs a range START-END (hexadecimal addresses)".into())
                    })?;
                    let (start, end) = address_range(range, page_size).map_err(at)?;
                    let fields = fields(words, &["miss", "hit"]).map_err(at)?;
                    let count = |k: &str| -> Result<u32, ReplayError> {
                        let v = fields.get(k).copied().unwrap_or(0);
                        u32::try_from(v).map_err(|_| at(format!("{k}={v} is too large")))
                    };
                    window.samples.push(SampleRange {
                        start,
                        end,
                        miss: count("miss")?,
                        hit: count("hit")?,
                    });
                }
                Some(other) => {
                    return Err(at(format!(
                        "unknown statement {other:?}: a line is `window ...` or `samples ...`"
                    )))
                }
            }
        }
        if windows.is_empty() {
            return Err(ReplayError::Empty {
                file: file.to_path_buf(),
            });
        }
        Ok(ReplayScript {
            file: file.to_path_buf(),
            windows,
        })
    }

    /// Window `n` (the last one for every `n` past the end).
    fn window(&self, n: usize) -> &ReplayWindow {
        &self.windows[n.min(self.windows.len() - 1)]
    }
}

/// `key=value` pairs, each key one of `known` and at most once, values decimal.
fn fields<'a>(
    words: impl Iterator<Item = &'a str>,
    known: &[&str],
) -> Result<BTreeMap<&'a str, u64>, String> {
    let mut out = BTreeMap::new();
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or_else(|| format!("{w:?} is not key=value"))?;
        if !known.contains(&k) {
            return Err(format!("unknown key {k:?}; known: {}", known.join(", ")));
        }
        let v: u64 = v
            .parse()
            .map_err(|_| format!("{k}={v:?} is not a whole number"))?;
        if out.insert(k, v).is_some() {
            return Err(format!("{k} is given twice"));
        }
    }
    Ok(out)
}

/// `START-END`, hexadecimal (with or without 0x), page-aligned, START < END.
fn address_range(s: &str, page_size: u64) -> Result<(u64, u64), String> {
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
    let (a, b) = s
        .split_once('-')
        .and_then(|(a, b)| Some((hex(a)?, hex(b)?)))
        .ok_or_else(|| format!("{s:?} is not a range START-END of hexadecimal addresses"))?;
    if a >= b || a % page_size != 0 || b % page_size != 0 {
        return Err(format!(
            "{s:?}: START must be below END and both multiples of the page size ({page_size:#x})"
        ));
    }
    if (b - a) / page_size > MAX_RANGE_PAGES {
        return Err(format!(
            "{s:?} covers more than {MAX_RANGE_PAGES} pages: split it, or check the addresses"
        ));
    }
    Ok((a, b))
}

/// The replay PMU: each target's place in the script and whether it is sampled.
#[derive(Debug)]
pub struct ReplayPmu {
    script: Arc<ReplayScript>,
    page_size: u64,
    /// Windows read so far, per target.
    read: BTreeMap<Pid, usize>,
    sampling: BTreeSet<Pid>,
}

impl ReplayPmu {
    pub fn new(script: Arc<ReplayScript>, page_size: u64) -> Self {
        ReplayPmu {
            script,
            page_size,
            read: BTreeMap::new(),
            sampling: BTreeSet::new(),
        }
    }

    pub fn file(&self) -> &Path {
        &self.script.file
    }

    pub fn start(&mut self, pid: Pid) {
        self.sampling.insert(pid);
    }

    pub fn stop(&mut self, pid: Pid) {
        self.sampling.remove(&pid);
    }

    /// The samples of `pid`'s current window, if it is sampled.
    pub fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> SampleLoss {
        if !self.sampling.contains(&pid) {
            return SampleLoss::default();
        }
        let n = self.read.get(&pid).copied().unwrap_or(0);
        for range in &self.script.window(n).samples {
            let mut addr = range.start;
            while addr < range.end {
                for (count, source) in [
                    (range.miss, DataSource::LlcMiss),
                    (range.hit, DataSource::LlcHit),
                ] {
                    out.extend((0..count).map(|_| MemSample {
                        pid,
                        tid: pid,
                        vaddr: addr,
                        paddr: None,
                        source,
                        weight: 0,
                        time: 0,
                    }));
                }
                addr += self.page_size;
            }
        }
        SampleLoss::default()
    }

    /// The counters of `pid`'s current window; the next read is of the next window.
    pub fn read(&mut self, pid: Pid) -> CounterDelta {
        let n = self.read.entry(pid).or_insert(0);
        let delta = self.script.window(*n).counters;
        *n += 1;
        delta
    }

    /// The target is gone: a later one with the same pid starts the script again.
    pub fn forget(&mut self, pid: Pid) {
        self.read.remove(&pid);
        self.sampling.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
# two windows; the second repeats
window instructions=1000 cycles=2000 llc_references=100 llc_misses=60
samples 0x10000-0x12000 miss=2 hit=1   # two pages
window instructions=3000 cycles=2000 llc_references=10 llc_misses=1
samples 10000-11000 hit=1
";

    fn script() -> Arc<ReplayScript> {
        Arc::new(ReplayScript::parse(Path::new("r.replay"), SCRIPT, 4096).unwrap())
    }

    #[test]
    fn windows_play_in_order_and_the_last_repeats() {
        let mut pmu = ReplayPmu::new(script(), 4096);
        let ipcs: Vec<f64> = (0..4).map(|_| pmu.read(7).ipc()).collect();
        assert_eq!(ipcs, vec![0.5, 1.5, 1.5, 1.5]);
        // Another target starts from the first window.
        assert_eq!(pmu.read(8).instructions, 1000);
        pmu.forget(7);
        assert_eq!(pmu.read(7).instructions, 1000);
    }

    #[test]
    fn samples_come_only_while_sampling_one_per_count_per_page() {
        let mut pmu = ReplayPmu::new(script(), 4096);
        let mut out = Vec::new();
        pmu.drain(7, &mut out);
        assert!(out.is_empty(), "not sampled yet");
        pmu.start(7);
        pmu.drain(7, &mut out);
        let at = |addr, source| {
            out.iter()
                .filter(|s| s.vaddr == addr && s.source == source && s.pid == 7)
                .count()
        };
        assert_eq!(out.len(), 6);
        assert_eq!(at(0x10000, DataSource::LlcMiss), 2);
        assert_eq!(at(0x11000, DataSource::LlcHit), 1);
        out.clear();
        pmu.read(7);
        pmu.drain(7, &mut out);
        assert_eq!(out.len(), 1, "the second window's samples");
        pmu.stop(7);
        out.clear();
        pmu.drain(7, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let bad = |text: &str| {
            ReplayScript::parse(Path::new("r.replay"), text, 4096)
                .unwrap_err()
                .to_string()
        };
        let w = "window instructions=1 cycles=1\n";
        for (text, want) in [
            (
                "samples 0x0-0x1000 miss=1\n",
                "r.replay:1: `samples` before",
            ),
            ("\nwindow cycles=1\n", "r.replay:2: a window needs"),
            (
                "window instructions=1 cycles=1 ipc=2\n",
                "r.replay:1: unknown key \"ipc\"",
            ),
            (
                "window instructions=1 cycles=x\n",
                "r.replay:1: cycles=\"x\"",
            ),
            (
                "window instructions=1 cycles=1 llc_references=1 llc_misses=2\n",
                "r.replay:1: llc_misses",
            ),
            (
                &format!("{w}samples 0x1000-0x1000\n"),
                "r.replay:2: \"0x1000-0x1000\"",
            ),
            (&format!("{w}samples 0x1001-0x2000\n"), "r.replay:2:"),
            (
                &format!("{w}samples zz\n"),
                "r.replay:2: \"zz\" is not a range",
            ),
            (&format!("{w}samples 0x0-0x1000000000000\n"), "r.replay:2:"),
            (
                &format!("{w}sample 0x0-0x1000\n"),
                "r.replay:2: unknown statement",
            ),
            ("# nothing\n", "no `window` line"),
        ] {
            let e = bad(text);
            assert!(e.contains(want), "{text:?} gave {e}");
        }
    }
}
