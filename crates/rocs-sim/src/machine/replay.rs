//! Replayed traces: a program's memory references (lackey or binary, see `crate::trace`) as one
//! process, its pages given frames on first touch (or mapped one to one, to compare with
//! cachegrind). Several traces on one machine are several processes sharing the LLC.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use super::hierarchy::{data_ref, instr_ref, modern_fetch, modern_ref, Core, Served, Timing};
use super::{ProcState, FP};
use crate::cache::Cache;
use crate::error::SimError;
use crate::frames::FrameAllocator;
use crate::spec::MachineSpec;
pub use crate::trace::TraceFormat;
use crate::trace::{TraceEvent, TraceKind, TraceReader};

/// Events decoded at a time.
const BATCH: usize = 4096;

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
    /// Events decoded and not yet replayed: `batch[next..]`.
    batch: Vec<TraceEvent>,
    next: usize,
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
            batch: Vec::with_capacity(BATCH),
            next: 0,
            path,
            repeats_left: trace.repeat,
            references_left,
            pass_references: 0,
            map,
            max_size,
            error: None,
        };
        Ok((proc, name))
    }

    /// The physical address of `vaddr`; a page touched for the first time gets a frame (and
    /// its leaf page table one too, if the core has a TLB and the table none yet).
    #[inline(always)]
    pub(super) fn translate(
        &mut self,
        frames: &mut FrameAllocator,
        core: &mut Core,
        vaddr: u64,
        page_shift: u32,
    ) -> Result<u64, SimError> {
        match &self.map {
            PageMap::Identity => Ok(vaddr),
            // Most references fall in the page of the one before.
            PageMap::Table {
                last: Some((vpn, pfn)),
                ..
            } if *vpn == vaddr >> page_shift => {
                Ok(((*pfn as u64) << page_shift) | (vaddr & ((1 << page_shift) - 1)))
            }
            PageMap::Table { .. } => self.translate_slow(frames, core, vaddr, page_shift),
        }
    }

    #[inline(never)]
    fn translate_slow(
        &mut self,
        frames: &mut FrameAllocator,
        core: &mut Core,
        vaddr: u64,
        page_shift: u32,
    ) -> Result<u64, SimError> {
        let PageMap::Table { pages, last } = &mut self.map else {
            return Ok(vaddr);
        };
        let vpn = vaddr >> page_shift;
        let off = vaddr & ((1 << page_shift) - 1);
        let pfn = match pages.get(&vpn) {
            Some(&p) => p,
            None => {
                let out_of_frames =
                    || SimError::OutOfFrames(format!("trace touched {} pages", pages.len()));
                if let Some(tlb) = core.modern.tlb.as_mut().filter(|t| t.lacks_table(vpn)) {
                    tlb.add_table(vpn, frames.alloc_any().ok_or_else(out_of_frames)?);
                }
                let p = frames.alloc_any().ok_or_else(out_of_frames)?;
                pages.insert(vpn, p);
                p
            }
        };
        *last = Some((vpn, pfn));
        Ok(((pfn as u64) << page_shift) | off)
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

    pub(super) fn run_inner(
        &mut self,
        st: &mut ProcState,
        llc: &mut Cache,
        frames: &mut FrameAllocator,
        t: &Timing,
        page_shift: u32,
        limit_fp: u64,
    ) -> Result<(), SimError> {
        let page_size = 1u64 << page_shift;
        // Any model beyond the paper's machines sends accesses down the path generated
        // workloads take on such machines; without them the path is cachegrind's.
        let modern = st.core.modern.any();
        let identity = matches!(self.map, PageMap::Identity);
        while st.clock_fp < limit_fp {
            if self.references_left == 0 {
                st.finished = true;
                return Ok(());
            }
            if self.next == self.batch.len() {
                self.reader.next_batch(&mut self.batch, BATCH)?;
                self.next = 0;
            }
            let Some(&ev) = self.batch.get(self.next) else {
                let looped = self.references_left != u64::MAX;
                if looped || self.repeats_left > 1 {
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
                    continue;
                }
                st.finished = true;
                return Ok(());
            };
            self.next += 1;
            self.references_left -= (self.references_left != u64::MAX) as u64;
            self.pass_references += 1;
            let size = ev.size.min(self.max_size);
            let paddr = if identity {
                ev.addr
            } else {
                self.translate(frames, &mut st.core, ev.addr, page_shift)?
            };
            // An access crossing into another page touches two frames: reference the two
            // parts separately, as one access (a miss if either part misses).
            let split = !identity && (ev.addr & (page_size - 1)) + size > page_size;
            let (first, p2) = if split {
                let first = page_size - (ev.addr & (page_size - 1));
                let p2 = self.translate(frames, &mut st.core, ev.addr + first, page_shift)?;
                (first, p2)
            } else {
                (size, 0)
            };
            let mut walk_fp = 0;
            let latency = if ev.kind == TraceKind::Instr {
                st.instr_fp += FP;
                st.clock_fp += t.base_per_instr;
                let served = fetch(st, llc, modern, ev.addr, paddr, first);
                if split {
                    let b = fetch(st, llc, modern, ev.addr + first, p2, size - first);
                    if st.core.l1i.is_some() {
                        st.c.accesses -= 1;
                        st.c.l1i_accesses -= 1;
                    }
                    served.max(b)
                } else {
                    served
                }
            } else {
                st.c.accesses += 1;
                let data =
                    |st: &mut ProcState, llc: &mut Cache, walk_fp: &mut u64, vaddr, paddr, size| {
                        if modern {
                            let (served, walk) = modern_ref(
                                &mut st.core,
                                llc,
                                &mut st.c,
                                t,
                                vaddr,
                                paddr,
                                size,
                                page_shift,
                            );
                            *walk_fp += walk;
                            served
                        } else {
                            data_ref(&mut st.core, llc, &mut st.c, vaddr, paddr, size)
                        }
                    };
                let mut served = data(st, llc, &mut walk_fp, ev.addr, paddr, first);
                if split {
                    served = served.max(data(
                        st,
                        llc,
                        &mut walk_fp,
                        ev.addr + first,
                        p2,
                        size - first,
                    ));
                    st.c.l1d_accesses -= 1;
                }
                if served >= Served::Llc && ev.kind != TraceKind::Store && st.pmu.enabled {
                    let w = if served == Served::Mem { t.mem } else { t.llc };
                    let pa = (!identity).then_some(paddr);
                    st.pmu_event(t, ev.addr, pa, served, w);
                }
                served
            };
            st.clock_fp += walk_fp
                + match latency {
                    Served::L1 => t.l1,
                    Served::L2 => t.l2,
                    Served::Llc => t.llc,
                    Served::Mem => t.mem,
                };
        }
        Ok(())
    }
}

/// An instruction fetch down the modern path or cachegrind's.
#[inline(always)]
fn fetch(
    st: &mut ProcState,
    llc: &mut Cache,
    modern: bool,
    vaddr: u64,
    paddr: u64,
    size: u64,
) -> Served {
    if modern {
        modern_fetch(&mut st.core, llc, &mut st.c, vaddr, paddr, size)
    } else {
        instr_ref(&mut st.core, llc, &mut st.c, vaddr, paddr, size)
    }
}

pub(super) fn open_trace(path: &PathBuf) -> Result<Box<dyn BufRead + Send>, SimError> {
    let f = File::open(path).map_err(|reason| SimError::Io {
        path: path.clone(),
        reason,
    })?;
    Ok(Box::new(BufReader::with_capacity(1 << 20, f)))
}
