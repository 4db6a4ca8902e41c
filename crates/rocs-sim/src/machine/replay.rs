//! Replayed traces: a program's memory references (lackey or binary, see `crate::trace`) as one
//! process, its pages given frames on first touch (or mapped one to one, to compare with
//! cachegrind). Several traces on one machine are several processes sharing the LLC.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use super::hierarchy::{data_ref, instr_ref, modern_fetch, modern_ref, Core, Served, Timing};
use super::{ProcState, FIRST_PID, FP};
use crate::cache::{Cache, Policy};
use crate::error::SimError;
use crate::frames::FrameAllocator;
use crate::spec::MachineSpec;
use crate::trace::binary::{RunLines, NO_LINE, RING_LINES, RUN_LINE_SHIFT};
pub use crate::trace::TraceFormat;
use crate::trace::{EventSink, TraceEvent, TraceKind, TraceReader};

/// Where a trace comes from.
pub enum TraceInput {
    /// A file, reopened for each repetition.
    File(PathBuf),
    /// Standard input (one pass only).
    Stdin,
    /// Any reader (one pass only).
    Reader(Box<dyn BufRead + Send>),
}

/// A trace replayed as one process.
pub struct TraceSpec {
    pub input: TraceInput,
    /// Valgrind lackey's text or rocs's binary format (or tell from the first byte).
    pub format: TraceFormat,
    /// Replay the trace this many times (a file only).
    pub repeat: u32,
    /// Replay the trace in a loop until it has given this many references (instruction
    /// fetches and data accesses, one per trace line), so that tenants of different lengths
    /// share the LLC to the end and a steady state exists (a file only; `repeat` must be 1).
    pub length: Option<u64>,
    /// Use virtual addresses as physical ones (to compare with cachegrind, which indexes
    /// by virtual address); otherwise pages get frames from the allocator on first touch.
    pub identity_map: bool,
}

impl TraceSpec {
    /// The trace in file `path`, its format told from its first byte, replayed once with
    /// pages given frames on first touch.
    pub fn file(path: impl Into<PathBuf>) -> TraceSpec {
        TraceSpec {
            input: TraceInput::File(path.into()),
            format: TraceFormat::Detect,
            repeat: 1,
            length: None,
            identity_map: false,
        }
    }
}

pub(super) enum PageMap {
    Identity,
    Table {
        pages: HashMap<u64, u32>,
        last: Option<(u64, u32)>,
    },
}

pub(super) struct TraceProc {
    pub(super) reader: TraceReader,
    pub(super) path: Option<PathBuf>,
    pub(super) repeats_left: u32,
    /// References left to replay before the process finishes (`u64::MAX`: no limit).
    pub(super) references_left: u64,
    /// References read in the current pass over the trace (a looped empty trace is an error).
    pub(super) pass_references: u64,
    pub(super) map: PageMap,
    /// Sizes are clamped to the smallest line, as cachegrind does, so that an access never
    /// spans more than two lines.
    pub(super) max_size: u64,
    pub(super) error: Option<SimError>,
    /// Let a repeated access to the line its stream touched last skip the hierarchy (see
    /// [`RecentLines`]); off only in a test that checks it against the full path.
    skip_repeats: bool,
    scratch: blocks::Scratch,
}

impl TraceProc {
    /// The process that replays `trace` on a machine of `spec`, and its name.
    pub(super) fn open(
        spec: &MachineSpec,
        trace: TraceSpec,
    ) -> Result<(TraceProc, String), SimError> {
        if trace.repeat == 0 {
            return Err(SimError::Unsupported("repeat must be at least 1".into()));
        }
        let (reader, path, name): (Box<dyn BufRead + Send>, Option<PathBuf>, String) =
            match trace.input {
                TraceInput::File(p) => (open_trace(&p)?, Some(p.clone()), p.display().to_string()),
                TraceInput::Stdin => (
                    Box::new(BufReader::with_capacity(1 << 20, std::io::stdin())),
                    None,
                    "-".into(),
                ),
                TraceInput::Reader(r) => (r, None, "trace".into()),
            };
        if trace.repeat > 1 && path.is_none() {
            return Err(SimError::Unsupported(
                "repeat > 1 needs a trace file (standard input can be read once)".into(),
            ));
        }
        let references_left = match trace.length {
            None => u64::MAX,
            Some(0) => {
                return Err(SimError::Unsupported(format!(
                    "{name}: a length of 0 references replays nothing; give at least 1"
                )))
            }
            Some(_) if path.is_none() => {
                return Err(SimError::Unsupported(format!(
                    "{name}: a length loops the trace, which needs a trace file (standard \
                     input can be read once)"
                )))
            }
            Some(_) if trace.repeat != 1 => {
                return Err(SimError::Unsupported(format!(
                    "{name}: give a length or a repeat count, not both"
                )))
            }
            Some(n) => n,
        };
        // Sizes are clamped to the smallest line, as cachegrind does.
        let max_size = [
            Some(&spec.l1d),
            spec.l1i.as_ref(),
            spec.l2.as_ref(),
            Some(&spec.llc),
        ]
        .into_iter()
        .flatten()
        .map(|l| l.line.0)
        .min()
        .unwrap_or(64);
        let map = if trace.identity_map {
            PageMap::Identity
        } else {
            PageMap::Table {
                pages: HashMap::new(),
                last: None,
            }
        };
        let proc = TraceProc {
            reader: TraceReader::new(reader, trace.format)?,
            path,
            repeats_left: trace.repeat,
            references_left,
            pass_references: 0,
            map,
            max_size,
            error: None,
            skip_repeats: true,
            scratch: Default::default(),
        };
        Ok((proc, name))
    }

    pub(super) fn run(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        frames: &mut FrameAllocator,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) {
        if let Err(e) = self.run_inner(st, llc, frames, t, page_shift, limit_fp) {
            self.error = Some(e);
            st.finished = true;
        }
    }

    /// Replay until the clock reaches `limit_fp`, the process's length is replayed or the
    /// trace ends.
    pub(super) fn run_inner(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        frames: &mut FrameAllocator,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) -> Result<(), SimError> {
        let mut env = Env {
            llc,
            frames,
            t,
            page_shift,
            identity: matches!(self.map, PageMap::Identity),
            // Any model beyond the paper's machines sends accesses down the path generated
            // workloads take on such machines; without them the path is cachegrind's.
            modern: st.core.modern.any(),
        };
        // Made afresh each run: between runs pages migrate, which invalidates their lines.
        let mut recent = RecentLines::new(&st.core, self.skip_repeats, self.max_size);
        let (base_per_instr, l1) = (t.base_per_instr, t.l1);
        let whole_blocks = self.skip_repeats && blocks::apply(st, self.max_size);
        while st.clock_fp < limit_fp {
            if self.references_left == 0 {
                st.finished = true;
                return Ok(());
            }
            if let TraceReader::Columns(r) = &mut self.reader {
                r.stop_at_block_end(whole_blocks);
                r.offer_runs(recent.runs);
                if whole_blocks && !r.in_block() {
                    let taken = blocks::take_block(
                        r,
                        &mut self.map,
                        st,
                        &mut env,
                        &mut self.scratch,
                        self.references_left,
                        limit_fp,
                    )?;
                    match taken {
                        blocks::Taken::Whole(n) => {
                            if self.references_left != u64::MAX {
                                self.references_left -= n;
                            }
                            self.pass_references += n;
                            // The streams' last lines are no longer those it holds.
                            recent = RecentLines::new(&st.core, self.skip_repeats, self.max_size);
                            continue;
                        }
                        // Fed below in runs (where the feed finds the end, too).
                        blocks::Taken::DoesNotFit | blocks::Taken::End => {}
                    }
                }
            }
            let clock = st.clock_fp;
            let mut replayer = Replayer {
                map: &mut self.map,
                st: &mut *st,
                env: &mut env,
                recent: &mut recent,
                max_size: self.max_size,
                base_per_instr,
                l1,
                limit_fp,
                left: self.references_left,
                clock,
                instrs: 0,
                instr_repeats: 0,
                data: 0,
                data_repeats: 0,
            };
            let more = self.reader.feed(&mut replayer);
            let replayed = replayer.finish();
            if self.references_left != u64::MAX {
                self.references_left -= replayed;
            }
            self.pass_references += replayed;
            if !more? && !self.reopen()? {
                st.finished = true;
                return Ok(());
            }
        }
        Ok(())
    }

    /// At the end of the trace: reopen its file if it is replayed again; false when the
    /// trace is over.
    fn reopen(&mut self) -> Result<bool, SimError> {
        let looped = self.references_left != u64::MAX;
        if !looped && self.repeats_left <= 1 {
            return Ok(false);
        }
        let path = self
            .path
            .clone()
            .ok_or_else(|| SimError::Unsupported("repeat needs a trace file".into()))?;
        if self.pass_references == 0 {
            return Err(SimError::Unsupported(format!(
                "{}: the trace has no references to replay in a loop",
                path.display()
            )));
        }
        self.reader = TraceReader::new(open_trace(&path)?, self.reader.format())?;
        self.pass_references = 0;
        self.repeats_left -= (!looped) as u32;
        Ok(true)
    }
}

/// One stretch of a trace process's replay, fed its events by the trace's reader. The
/// clock and the counts of repeated lines live in its fields, which the compiler keeps in
/// registers through the fused decoding loop, and [`Replayer::finish`] writes them back:
/// most events are such repeats, which only count.
struct Replayer<'a, 'e> {
    map: &'a mut PageMap,
    st: &'a mut ProcState,
    env: &'a mut Env<'e>,
    recent: &'a mut RecentLines,
    max_size: u64,
    base_per_instr: u64,
    l1: u64,
    limit_fp: u64,
    /// Events it may still replay (the process's length).
    left: u64,
    clock: u64,
    instrs: u64,
    instr_repeats: u64,
    /// Data accesses, repeated or not.
    data: u64,
    data_repeats: u64,
}

impl Replayer<'_, '_> {
    /// Count a run of `fetches` and `data` L1 hits that change nothing, costing `cost`.
    #[inline(always)]
    fn take_run(&mut self, fetches: u64, data: u64, cost: u64) {
        self.left -= fetches + data;
        self.clock += cost;
        self.instrs += fetches;
        self.instr_repeats += fetches;
        self.data += data;
        self.data_repeats += data;
    }

    /// Write the clock and the counts back to the process; returns the events replayed.
    fn finish(self) -> u64 {
        let st = self.st;
        st.clock_fp = self.clock;
        st.instr_fp += self.instrs * FP;
        // A fetch through the hierarchy counts itself; a data access is counted here.
        st.c.accesses += self.instr_repeats + self.data;
        st.c.l1i_accesses += self.instr_repeats;
        st.c.l1d_accesses += self.data_repeats;
        self.instrs + self.data
    }
}

impl EventSink for Replayer<'_, '_> {
    /// Until the clock reaches the limit or the process's length is replayed.
    #[inline(always)]
    fn wants(&self) -> bool {
        self.clock < self.limit_fp && self.left > 0
    }

    /// A run of repeats of 64-byte lines (binary version 3): taken as a whole if those are
    /// this machine's repeats too, each stream with references in it has touched a line
    /// since the filter was made (from then on its last line is the writer's: both are the
    /// line its last reference ended in), and every event of it is wanted.
    #[inline(always)]
    fn run(&mut self, fetches: u64, data: u64) -> bool {
        let n = fetches + data;
        // What the events one by one would cost: a fetch's base cost, and a hit each. The
        // clock only grows: below the limit after the last event, it was before each.
        let cost = fetches * self.base_per_instr + n * self.l1;
        let take = self.recent.runs
            && (fetches == 0 || self.recent.instr.last != RecentLine::NONE)
            && (data == 0 || self.recent.data.last != RecentLine::NONE)
            && self.clock + cost < self.limit_fp
            && self.left >= n;
        if take {
            self.take_run(fetches, data, cost);
        }
        take
    }

    /// A run of accesses to a few lines of each stream (binary version 4): taken as a whole
    /// if those are this machine's lines, the MRU hits skip the hierarchy here (LRU L1s,
    /// the cachegrind path), each of those lines is the most recent of its L1 set (so
    /// that each access is a hit that changes nothing: two lines most recent of their sets
    /// are in different sets) and every event of it is wanted.
    #[inline(always)]
    fn run_of_lines(&mut self, fetches: u64, data: u64, lines: &RunLines) -> bool {
        let n = fetches + data;
        let cost = fetches * self.base_per_instr + n * self.l1;
        let core = &self.st.core;
        let ring_mru = &mut self.recent.ring_mru;
        let take = self.recent.runs
            && self.recent.mru_hits
            && self.clock + cost < self.limit_fp
            && self.left >= n
            && ring_lines_mru(core.l1i.as_ref(), lines, 0, &mut ring_mru[0])
            && ring_lines_mru(Some(&core.l1d), lines, 1, &mut ring_mru[1]);
        if take {
            self.take_run(fetches, data, cost);
        }
        take
    }

    #[inline(always)]
    fn event(&mut self, ev: TraceEvent) -> Result<(), SimError> {
        self.left -= 1;
        let size = ev.size.min(self.max_size);
        if ev.kind == TraceKind::Instr {
            self.instrs += 1;
            self.clock += self.base_per_instr;
            if self.recent.instr.repeats(ev.addr, size)
                || (self.recent.mru_hits
                    && self
                        .recent
                        .instr
                        .mru_hit(self.st.core.l1i.as_ref(), ev.addr, size))
            {
                // The line is the most recent of its L1I set: a hit that changes nothing.
                self.instr_repeats += 1;
                self.clock += self.l1;
                return Ok(());
            }
        } else {
            self.data += 1;
            if self.recent.data.repeats(ev.addr, size)
                || (self.recent.mru_hits
                    && self
                        .recent
                        .data
                        .mru_hit(Some(&self.st.core.l1d), ev.addr, size))
            {
                // The most recent line of its L1D set (and its page the most recent of
                // its TLB set): a hit that changes nothing.
                self.data_repeats += 1;
                self.clock += self.l1;
                return Ok(());
            }
        }
        // The PMU reads and advances the clock.
        self.st.clock_fp = self.clock;
        let latency = reference(self.map, self.st, self.env, &ev, size)?;
        let stream = (ev.kind != TraceKind::Instr) as usize;
        // The L1's sets may have changed: the ring's lines must be looked up again.
        self.recent.ring_mru[stream] = false;
        if ev.kind == TraceKind::Instr {
            self.recent.instr.touched(ev.addr, size);
        } else {
            self.recent.data.touched(ev.addr, size);
        }
        self.clock = self.st.clock_fp + latency;
        Ok(())
    }
}

/// Whether the lines of `stream` that a version 4 run's references lie in are each the most
/// recent of their set in `l1`. `known`: every line of the stream's ring is (or is none
/// yet), which stays so until an access of the stream goes through the hierarchy (lines
/// enter the ring only by accesses that leave them the most recent of their sets: repeats,
/// MRU hits and ones through the hierarchy). Looking the ring's lines up is most of a
/// run's cost, and most runs follow others with no access through the hierarchy between.
#[inline(always)]
fn ring_lines_mru(l1: Option<&Cache>, lines: &RunLines, stream: usize, known: &mut bool) -> bool {
    *known || look_up_ring_lines(l1, lines, stream, known)
}

/// [`ring_lines_mru`] when not known: out of line, so that the replay's loop stays small.
#[inline(never)]
fn look_up_ring_lines(
    l1: Option<&Cache>,
    lines: &RunLines,
    stream: usize,
    known: &mut bool,
) -> bool {
    let (ring, used) = lines.lines(stream);
    if used == 0 {
        return true;
    }
    let Some(l1) = l1 else {
        return false;
    };
    let mut mru = l1.lru_mru_mask(ring);
    for (i, &line) in ring.iter().enumerate() {
        mru |= ((line == NO_LINE) as u32) << i;
    }
    *known = mru == (1 << RING_LINES) - 1;
    used & !mru == 0
}

/// One event through the hierarchy (its fetch's base cost already counted); returns
/// its latency (fixed point), a page walk's included.
#[inline(always)]
fn reference(
    map: &mut PageMap,
    st: &mut ProcState,
    env: &mut Env,
    ev: &TraceEvent,
    size: u64,
) -> Result<u64, SimError> {
    let (page_size, shift) = (1u64 << env.page_shift, env.page_shift);
    let paddr = if env.identity {
        ev.addr
    } else {
        translate(map, env.frames, st, ev.addr, shift)?
    };
    // An access crossing into another page touches two frames: reference the two
    // parts separately, as one access (a miss if either part misses).
    let split = !env.identity && (ev.addr & (page_size - 1)) + size > page_size;
    let (first, p2) = if split {
        let first = page_size - (ev.addr & (page_size - 1));
        let p2 = translate(map, env.frames, st, ev.addr + first, shift)?;
        (first, p2)
    } else {
        (size, 0)
    };
    let t = env.t;
    let mut walk_fp = 0;
    let served = if ev.kind == TraceKind::Instr {
        let served = fetch(st, env, ev.addr, paddr, first);
        if split {
            let b = fetch(st, env, ev.addr + first, p2, size - first);
            if st.core.l1i.is_some() {
                st.c.accesses -= 1;
                st.c.l1i_accesses -= 1;
            }
            served.max(b)
        } else {
            served
        }
    } else {
        let mut served = data(st, env, &mut walk_fp, ev.addr, paddr, first);
        if split {
            let b = data(st, env, &mut walk_fp, ev.addr + first, p2, size - first);
            served = served.max(b);
            st.c.l1d_accesses -= 1;
        }
        if served >= Served::Llc && ev.kind != TraceKind::Store && st.pmu.enabled {
            let w = if served == Served::Mem { t.mem } else { t.llc };
            let pa = (!env.identity).then_some(paddr);
            st.pmu_event(t, ev.addr, pa, served, w);
        }
        served
    };
    Ok(walk_fp
        + match served {
            Served::L1 => t.l1,
            Served::L2 => t.l2,
            Served::Llc => t.llc,
            Served::Mem => t.mem,
        })
}

/// What a run of a trace process works with besides the process.
struct Env<'a> {
    llc: &'a mut Cache,
    frames: &'a mut FrameAllocator,
    t: &'a Timing,
    page_shift: u32,
    identity: bool,
    modern: bool,
}

/// The last line each stream (instruction fetches, data accesses) touched in its L1, so
/// that an access to that same line again skips the hierarchy. The line is then the most
/// recently used of its L1 set (nothing else touches a core's L1 between two accesses of
/// its stream: prefetches and page walks fill the levels below), so under LRU the access
/// is a hit that changes no state; on the modern path its page is also the most recently
/// used of its TLB set (only data accesses look the TLB up), so the TLB hits unchanged too.
/// Under RRIP a hit would lower the line's prediction value, so the filter is off there.
struct RecentLines {
    instr: RecentLine,
    data: RecentLine,
    /// Both streams' lines are the 64 bytes a binary trace's runs count repeats of, and
    /// sizes are clamped to them: the runs' repeats are this machine's.
    runs: bool,
    /// Both L1s are LRU and nothing but the stream's own accesses touches them (the
    /// cachegrind path: no TLB, whose state a data access changes): an access to the most
    /// recent line of its L1 set, whichever line its stream touched last, is a hit that
    /// changes nothing too, and skips the hierarchy.
    mru_hits: bool,
    /// Per stream: every line of the binary trace's ring (version 4) is known to be the
    /// most recent of its L1 set (see [`ring_lines_mru`]).
    ring_mru: [bool; 2],
}

struct RecentLine {
    shift: u32,
    /// Line number; `NONE` when nothing was touched yet or the filter is off.
    last: u64,
    on: bool,
}

impl RecentLine {
    /// No line: a line number is an address shifted right by at least one bit.
    const NONE: u64 = u64::MAX;

    fn new(l1: Option<&Cache>) -> RecentLine {
        let l1 = l1.filter(|c| c.policy() == Policy::Lru && c.line_shift() > 0);
        RecentLine {
            shift: l1.map_or(0, |c| c.line_shift()),
            last: Self::NONE,
            on: l1.is_some(),
        }
    }

    /// True if `size` bytes at `addr` lie in the line touched last.
    #[inline(always)]
    fn repeats(&self, addr: u64, size: u64) -> bool {
        let first = addr >> self.shift;
        first == self.last && addr.saturating_add(size - 1) >> self.shift == first
    }

    /// True if `size` bytes at `addr` lie in one line and it is the most recent of its set
    /// in `l1` (LRU): a hit that changes nothing, which makes it the line touched last.
    #[inline(always)]
    fn mru_hit(&mut self, l1: Option<&Cache>, addr: u64, size: u64) -> bool {
        let first = addr >> self.shift;
        let hit = addr.saturating_add(size - 1) >> self.shift == first
            && l1.is_some_and(|c| c.is_lru_mru(first));
        if hit {
            self.last = first;
        }
        hit
    }

    /// An access of `size` bytes at `addr` went through the L1: its last line is now the
    /// most recent of its set.
    #[inline(always)]
    fn touched(&mut self, addr: u64, size: u64) {
        if self.on {
            self.last = addr.saturating_add(size - 1) >> self.shift;
        }
    }
}

impl RecentLines {
    fn new(core: &Core, on: bool, max_size: u64) -> RecentLines {
        let l1i = core.l1i.as_ref().filter(|_| on);
        let l1d = Some(&core.l1d).filter(|_| on);
        let (instr, data) = (RecentLine::new(l1i), RecentLine::new(l1d));
        let run_line = |l: &RecentLine| l.on && l.shift == RUN_LINE_SHIFT;
        RecentLines {
            runs: run_line(&instr) && run_line(&data) && max_size == 1 << RUN_LINE_SHIFT,
            mru_hits: instr.on && data.on && !core.modern.any(),
            ring_mru: [false; 2],
            instr,
            data,
        }
    }
}

/// The physical address of `vaddr`; a page touched for the first time gets a frame (and
/// its leaf page table one too, if the core has a TLB and the table none yet).
#[inline(always)]
fn translate(
    map: &mut PageMap,
    frames: &mut FrameAllocator,
    st: &mut ProcState,
    vaddr: u64,
    page_shift: u32,
) -> Result<u64, SimError> {
    match map {
        PageMap::Identity => Ok(vaddr),
        // Most references fall in the page of the one before.
        PageMap::Table {
            last: Some((vpn, pfn)),
            ..
        } if *vpn == vaddr >> page_shift => {
            Ok(((*pfn as u64) << page_shift) | (vaddr & ((1 << page_shift) - 1)))
        }
        PageMap::Table { .. } => translate_slow(map, frames, st, vaddr, page_shift),
    }
}

#[inline(never)]
fn translate_slow(
    map: &mut PageMap,
    frames: &mut FrameAllocator,
    st: &mut ProcState,
    vaddr: u64,
    page_shift: u32,
) -> Result<u64, SimError> {
    let PageMap::Table { pages, last } = map else {
        return Ok(vaddr);
    };
    let vpn = vaddr >> page_shift;
    let off = vaddr & ((1 << page_shift) - 1);
    let pfn = match pages.get(&vpn) {
        Some(&p) => p,
        None => {
            let out_of_frames =
                || SimError::OutOfFrames(format!("trace touched {} pages", pages.len()));
            // Each process takes its first touches' frames from its own share.
            let share = (st.pid - FIRST_PID) as usize;
            if let Some(tlb) = st.core.modern.tlb.as_mut().filter(|t| t.lacks_table(vpn)) {
                tlb.add_table(vpn, frames.alloc_for(share).ok_or_else(out_of_frames)?);
            }
            let p = frames.alloc_for(share).ok_or_else(out_of_frames)?;
            pages.insert(vpn, p);
            p
        }
    };
    *last = Some((vpn, pfn));
    Ok(((pfn as u64) << page_shift) | off)
}

/// A data access down the modern path or cachegrind's; adds a page walk's cycles to
/// `walk_fp`.
#[inline(always)]
fn data(
    st: &mut ProcState,
    env: &mut Env,
    walk_fp: &mut u64,
    vaddr: u64,
    paddr: u64,
    size: u64,
) -> Served {
    if env.modern {
        let (served, walk) = modern_ref(
            &mut st.core,
            env.llc,
            &mut st.c,
            env.t,
            vaddr,
            paddr,
            size,
            env.page_shift,
        );
        *walk_fp += walk;
        served
    } else {
        data_ref(&mut st.core, env.llc, &mut st.c, vaddr, paddr, size)
    }
}

/// An instruction fetch down the modern path or cachegrind's.
#[inline(always)]
fn fetch(st: &mut ProcState, env: &mut Env, vaddr: u64, paddr: u64, size: u64) -> Served {
    if env.modern {
        modern_fetch(&mut st.core, env.llc, &mut st.c, vaddr, paddr, size)
    } else {
        instr_ref(&mut st.core, env.llc, &mut st.c, vaddr, paddr, size)
    }
}

pub(super) fn open_trace(path: &PathBuf) -> Result<Box<dyn BufRead + Send>, SimError> {
    let f = File::open(path).map_err(|reason| SimError::Io {
        path: path.clone(),
        reason,
    })?;
    // Small: both readers read into buffers of their own, larger than this one, and a
    // BufReader hands such reads straight to the file once its buffer (the format's first
    // bytes) is consumed, saving a copy of the whole trace.
    Ok(Box::new(BufReader::with_capacity(1 << 14, f)))
}

#[path = "replay_blocks.rs"]
mod blocks;

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
