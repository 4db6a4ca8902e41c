//! What decoding alone costs the trace replay: a binary trace decoded from memory into a
//! sink that only counts, and into one that also tells the repeats (a reference to the line
//! its stream touched last, which the replay only counts) from the rest, in M references
//! per CPU second of this thread, the best of REPS runs. Both take a version 3 or 4 trace's
//! run records whole where the replay would (64-byte lines; version 4's without looking
//! their lines up in caches, as the replay must when it cannot tell otherwise), so both
//! decode what the replay decodes. For version 5, every reference decoded (as a replay one
//! by one does) and the group heads alone (what a replay of whole blocks decodes). The
//! floor under `tests/bench/traces.sh`'s replay figure (docs/traces.md). Then the run
//! records taken whole and the references decoded one by one, and how the repeats fall in
//! runs (references in a row that are all repeats, every record decoded): what a record
//! standing for a whole run spares the replay.
//!
//!     cargo run --release -p rocs-sim --example trace_floor -- TRACE.rtrace [LINE_BYTES] [REPS]

#[path = "../benches/common/mod.rs"]
#[allow(dead_code)]
mod common;

use rocs_sim::trace::binary::{RunLines, RUN_LINE_SHIFT};
use rocs_sim::trace::{BinaryReader, EventSink, TraceEvent, TraceKind};
use rocs_sim::SimError;

/// The replay's repeat check (`machine::replay::RecentLines`): the line each stream
/// (instruction fetches, data accesses) touched last.
struct LastLines {
    shift: u32,
    last: [u64; 2],
}

impl LastLines {
    fn new(line: u64) -> Self {
        LastLines {
            shift: line.trailing_zeros(),
            last: [u64::MAX; 2],
        }
    }

    /// Whether `ev` lies in its stream's last line; if not, its last line is now that one.
    #[inline(always)]
    fn repeats(&mut self, ev: &TraceEvent) -> bool {
        let stream = (ev.kind != TraceKind::Instr) as usize;
        let size = ev.size.min(1 << self.shift);
        let first = ev.addr >> self.shift;
        let last = ev.addr.saturating_add(size - 1) >> self.shift;
        if first == self.last[stream] && last == first {
            return true;
        }
        self.last[stream] = last;
        false
    }
}

/// Counts events; with `REPEATS`, also makes the replay's repeat check and nothing else,
/// otherwise folds the addresses so that decoding cannot be optimised away. Takes runs of
/// repeats whole if its lines are the runs' 64 bytes, as the replay does.
struct Sink<const REPEATS: bool> {
    lines: LastLines,
    events: u64,
    fold: u64,
    repeats: u64,
    /// Run records taken whole, and events handed one by one.
    runs: u64,
    handed: u64,
}

impl<const REPEATS: bool> Sink<REPEATS> {
    fn new(line: u64) -> Self {
        Sink {
            lines: LastLines::new(line),
            events: 0,
            fold: 0,
            repeats: 0,
            runs: 0,
            handed: 0,
        }
    }
}

impl<const REPEATS: bool> EventSink for Sink<REPEATS> {
    #[inline(always)]
    fn wants(&self) -> bool {
        true
    }

    #[inline(always)]
    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError> {
        self.events += 1;
        self.handed += 1;
        if !REPEATS {
            self.fold ^= ev.addr;
            return Ok(());
        }
        if self.lines.repeats(&ev) {
            self.repeats += 1;
        }
        Ok(())
    }

    #[inline(always)]
    fn run(&mut self, fetches: u64, data: u64) -> bool {
        // The replay's condition, less the clock's: the runs' lines, and (where the lines
        // are followed) each stream's last line known; the repeats leave them as they are.
        let known = |last: u64, n: u64| !REPEATS || n == 0 || last != u64::MAX;
        let take = self.lines.shift == RUN_LINE_SHIFT
            && known(self.lines.last[0], fetches)
            && known(self.lines.last[1], data);
        if take {
            self.events += fetches + data;
            self.repeats += fetches + data;
            self.runs += 1;
        }
        take
    }

    #[inline(always)]
    fn run_of_lines(&mut self, fetches: u64, data: u64, lines: &RunLines) -> bool {
        // The replay's condition, less the clock's and the caches': the runs' lines (each
        // run's lines looked at, as the replay looks them up).
        let (fetch_lines, fetch_slots) = lines.lines(0);
        let (data_lines, data_slots) = lines.lines(1);
        self.fold ^= (fetch_lines[0] ^ data_lines[0]) + u64::from(fetch_slots | data_slots);
        let take = self.lines.shift == RUN_LINE_SHIFT;
        if take {
            self.events += fetches + data;
            self.runs += 1;
        }
        take
    }
}

/// How long the runs of repeats are: references in a row that are all repeats (of either
/// stream), as a record standing for a run would see them. Not timed.
struct Runs {
    lines: LastLines,
    run: u64,
    repeats: u64,
    /// Repeats in runs of at least `RUN_LENGTHS[i]`.
    in_runs: [u64; RUN_LENGTHS.len()],
}

const RUN_LENGTHS: [u64; 3] = [2, 4, 8];

impl Runs {
    fn end_run(&mut self) {
        for (n, &len) in self.in_runs.iter_mut().zip(&RUN_LENGTHS) {
            if self.run >= len {
                *n += self.run;
            }
        }
        self.run = 0;
    }
}

impl EventSink for Runs {
    fn wants(&self) -> bool {
        true
    }

    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError> {
        if self.lines.repeats(&ev) {
            self.repeats += 1;
            self.run += 1;
        } else {
            self.end_run();
        }
        Ok(())
    }
}

/// Feeds the whole trace to `sink`; CPU seconds taken.
fn timed<S: EventSink>(bytes: &[u8], sink: &mut S) -> f64 {
    let reader = BinaryReader::new(bytes).expect("a binary trace");
    let start = common::thread_cpu_time();
    if reader.version() >= 5 {
        let mut reader = reader.into_columns();
        while reader.feed(sink).expect("a readable trace") {}
    } else {
        let mut reader = reader;
        while reader.feed(sink).expect("a readable trace") {}
    }
    (common::thread_cpu_time() - start).as_secs_f64()
}

/// Version 5: decodes the group heads alone, as the replay of whole blocks does; the
/// references they stand for, and CPU seconds taken.
fn heads_timed(bytes: &[u8]) -> (u64, f64) {
    let mut reader = BinaryReader::new(bytes)
        .expect("a binary trace")
        .into_columns();
    let start = common::thread_cpu_time();
    let mut refs = 0;
    while let Some(block) = reader.peek_block().expect("a readable trace") {
        for s in 0..2 {
            let mut heads = block.heads(s);
            for _ in 0..block.groups[s] {
                refs += heads.read().expect("a head").count;
            }
        }
        reader.take_block();
    }
    (refs, (common::thread_cpu_time() - start).as_secs_f64())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: trace_floor TRACE.rtrace [LINE_BYTES] [REPS]");
        std::process::exit(2);
    };
    let line: u64 = args.get(1).map_or(64, |l| l.parse().expect("LINE_BYTES"));
    let reps: usize = args.get(2).map_or(3, |r| r.parse().expect("REPS"));
    assert!(line.is_power_of_two(), "LINE_BYTES must be a power of two");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let version = BinaryReader::new(&bytes[..])
        .expect("a binary trace")
        .version();
    let (mut decode, mut filter) = (0.0f64, 0.0f64);
    let (mut events, mut repeats, mut runs, mut handed) = (0, 0, 0, 0);
    for _ in 0..reps {
        let mut count = Sink::<false>::new(line);
        let seconds = timed(&bytes, &mut count);
        std::hint::black_box(count.fold);
        events = count.events;
        decode = decode.max(events as f64 / seconds / 1e6);
        let (n, seconds) = if version >= 5 {
            heads_timed(&bytes)
        } else {
            let mut check = Sink::<true>::new(line);
            let seconds = timed(&bytes, &mut check);
            repeats = check.repeats;
            (runs, handed) = (check.runs, check.handed);
            (check.events, seconds)
        };
        filter = filter.max(n as f64 / seconds / 1e6);
    }
    if version >= 5 {
        println!("{path}: {events} references (version 5: blocks of columns)");
    } else {
        // Version 4's runs are references to a stream's last few lines, not only repeats.
        let outside = if version >= 4 { " (outside runs)" } else { "" };
        println!(
            "{path}: {events} references, {repeats} repeats of their stream's last {line}-byte \
             line{outside}"
        );
    }
    println!("decoding alone: {decode:.1} M references per CPU second (best of {reps})");
    if version >= 5 {
        // What a replay of whole blocks decodes instead of every reference.
        println!("decoding the group heads alone: {filter:.1} M references per CPU second");
        println!("run records taken whole: none in version 5");
    } else {
        println!("decoding and the repeat check: {filter:.1} M references per CPU second");
        println!("run records taken whole: {runs}; references decoded one by one: {handed}");
    }
    let mut runs = Runs {
        lines: LastLines::new(line),
        run: 0,
        repeats: 0,
        in_runs: [0; RUN_LENGTHS.len()],
    };
    timed(&bytes, &mut runs);
    runs.end_run();
    let shares: Vec<String> = RUN_LENGTHS
        .iter()
        .zip(runs.in_runs)
        .map(|(len, n)| {
            format!(
                "{len}: {:.1}%",
                100.0 * n as f64 / runs.repeats.max(1) as f64
            )
        })
        .collect();
    println!(
        "repeats in runs of at least N references in a row that are all repeats, N = {}",
        shares.join(", ")
    );
}
