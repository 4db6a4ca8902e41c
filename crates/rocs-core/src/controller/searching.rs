//! The controller from a finished profile to a chosen placement: the stack is built, the
//! pages already in the pollute colours are learnt, then each placement the search asks
//! for is moved to, settled and measured, until the search chooses its `k`.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::group::GroupJudge;
use super::messages::{Action, ColourReport, EventKind, MemberWindow, SharerPace, WindowContext};
use super::{Controller, Deferred, Stage};
use crate::knobs::SearchMode;
use crate::phase::{left_level, outside, MPKI_FLOOR};
use crate::regions::{build_stack, pool_regions, Region, RegionParams, RegionPool, StackBuild};
use crate::search::{resolvable_gain, Next, Search};
use crate::{Colour, CounterDelta, Mapping, MissRateStack, PageProfile, Pid, StackEntry, VirtPage};

/// Phases whose search result is remembered (the oldest is forgotten first).
const PHASES_REMEMBERED: usize = 4;

/// A remembered phase matches a new stack when this share of its confined pages are the
/// new stack's top pages.
const RECALL_OVERLAP: f64 = 0.9;

/// A remembered choice is kept without a new search if it measures at least this share of
/// the gain it measured over k = 0 when it was chosen.
const RECALL_GAIN_SHARE: f64 = 0.5;

/// What a search that paid found: its pages, and IPC with and without them confined.
#[derive(Clone, Debug)]
pub(super) struct PhaseMemory {
    pages: HashSet<VirtPage>,
    ipc: f64,
    baseline_ipc: f64,
}

/// Windows at k = 0, before any move, that the search measures to judge its own scatter
/// when the profile's windows say it is too noisy (see `Controller::scatter_verdict`).
const UNMOVED_WINDOWS: usize = 4;

/// The share of the LLC's room outside the pollute buffer that the unconfined pages of a
/// stack too large for it are left to fill at the search's fit point: pages land on
/// colours at random, and a set filled to its ways by the average colour overflows on the
/// fuller ones.
const FIT_SHARE: f64 = 0.7;

/// How many times the hits lost by the pages a loop fit moves (see
/// [`Controller::loop_fit`]) the misses of the pages staying must be.
const LOOP_FIT_WIN_OVER_LOSS: f64 = 2.0;

/// Pages of a stack beyond which the search measures each point over a pass of the
/// program's loop (see [`Controller::stack_takes_long_to_place`]): eight windows of moves
/// at 4,096 pages a window, the budget the rule was measured at. No stack of random.md's
/// workloads is that long (its campaign reads the same with and without the rule);
/// zen4-like's art-like has 39,060 pages, its cg-like 195,553.
const LONG_PLACEMENT_PAGES: usize = 32_768;

/// The most windows of a kept placement, the last the search measured, that a Steady
/// stage's phase reference is learnt from.
const KEPT_REFERENCE_WINDOWS: usize = 8;

/// The fewest of a placement's pages that go back when the targets it was chosen for no
/// longer run and the budget's share has no room for more (see
/// `Controller::undo_for_sharers`): enough for a profile to sample them.
const LEAST_PAGES_BACK: usize = 32;

/// The most of a target's cycles a promise is taken to save: the latencies sampled say what
/// a miss cost, not what else the program waits for, and an IPC gain of s / (1 - s) grows
/// without bound as the share s nears 1.
const MAX_CYCLES_SHARE: f64 = 0.9;

/// Most pages of streams' mappings, in LLCs, that a search for the sharers' gain takes
/// beyond the pages its profile reached ([`Controller::unreached_streams`]): a mapping
/// reserved far beyond what the program touches is not moved page by page.
const WHOLE_STREAM_MAX_LLCS: u64 = 64;

/// The same bound where the LLC's size is not known: 4 GiB of 4 KiB pages.
const WHOLE_STREAM_MAX_PAGES: u64 = 1 << 20;

/// Whose gain a search is for: what [`Controller::unreached_streams`] lets into a stream's
/// mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Judged {
    ForItself,
    ForSharers,
}

/// Whether a search can tell its promise from the scatter of its windows.
enum Scatter {
    Quiet,
    /// Measure k = 0 again before judging.
    Unsure,
    /// Too noisy: the smallest relative gain the windows could tell.
    TooNoisy(f64),
}

/// One measured window of a search: its number, its placement, and the target's own IPC,
/// MPKI and LLC references per kilo-instruction in it.
#[derive(Clone, Copy, Debug)]
struct OwnWindow {
    at: u64,
    k: usize,
    ipc: f64,
    mpki: f64,
    apki: f64,
}

/// Why a search that had found nothing was told to conclude: what it had cost and what
/// its next probe's moves (a retry's: there and back) would have added, in cycles, and the
/// bound that sum went over.
#[derive(Clone, Copy, Debug)]
struct Overspent {
    cost: f64,
    next_moves: f64,
    /// Over the budget's share for a retry (see `Spending::retry_affords`), not over what
    /// its promise could win back.
    retry_share: bool,
}

/// A probe measured again because a sharer that had changed phase seemed to pay for it
/// (see `Controller::search_window`): k = 0 first, which takes the sharer's reference in
/// its new phase, then the probe, judged against it.
#[derive(Clone, Copy, Debug)]
enum Rejudge {
    /// k = 0 is measured next, then the probe `k`.
    Zero { k: usize },
    /// The probe `k` is measured next.
    Probe { k: usize },
    /// The probe has been measured again: the search goes on.
    Done,
}

/// What a search in progress needs besides the [`Search`] itself.
#[derive(Clone, Debug, Default)]
pub(super) struct SearchRun {
    /// The placement for this `k` is complete: the next window measures it.
    measuring: Option<usize>,
    /// The placement for this `k` is being made, batch by batch.
    placing: Option<usize>,
    /// Windows still to wait after a move before measuring.
    settle_left: u32,
    /// Cycles the last move costs the target, still to pass before measuring: a window
    /// that pays for copies measures the move, not the placement.
    settle_cycles: u64,
    /// A loop fit's `k` and the cycles one pass of its loop takes: the loop fit settles
    /// for a pass after its move, and one pass is one measurement of it.
    loop_pass: Option<(usize, u64)>,
    /// Cycles of the pass being measured still to run (a loop fit's, or any point's of a
    /// stack that takes long to place: `Controller::stack_takes_long_to_place`).
    measure_cycles_left: u64,
    /// The counters of the pass measured so far.
    pass_sum: CounterDelta,
    /// Pages moved by the last batch.
    moved_pages: usize,
    /// The window count when pages were last moved.
    moved_at: Option<u64>,
    /// The search is over; moving to this `k` before Steady.
    final_k: Option<usize>,
    /// Windows measured at k = 0 that missed too little to be worth profiling, and that
    /// missed enough.
    baseline_quiet: u32,
    baseline_loud: u32,
    started_at: u64,
    /// Judged by the LLC group's score rather than the target's own IPC.
    judged_by_group: bool,
    /// Whether it is judged by the group is learnt from its first window (a search that
    /// did not start from a profile, which held the turn and knew).
    judge_pending: bool,
    /// Judged by the LLC group: the windows measured at the current placement, and each
    /// member's IPC at k = 0.
    group: GroupJudge,
    /// The target's own IPC in the windows before any page moved, the profile's and the
    /// search's first k = 0 windows apart: how much a window scatters.
    profile_ipcs: Vec<f64>,
    unmoved: Vec<f64>,
    /// The MPKI of the `unmoved` windows.
    unmoved_mpki: Vec<f64>,
    /// Each measured window of the target's own.
    own_windows: Vec<OwnWindow>,
    /// Each probe window's cost against k = 0 as counted in the attempt's spending (see
    /// `Spending::spent`), by window number.
    probe_costs: Vec<(u64, f64)>,
    /// The LLC references per kilo-instruction the profile's samples were taken at (see
    /// `ProfileMix`).
    profile_apki: Option<f64>,
    /// The references per kilo-instruction changed during the search (see `mix_changed`),
    /// from this to this: it chose from the windows before the change.
    mix_changed: Option<(f64, f64)>,
    /// The search ended before its first move because the windows scatter too much to
    /// tell any gain the profile promises: the smallest relative gain they could tell.
    too_noisy: Option<f64>,
    /// The search was told to conclude because it had cost, or with its next probe's
    /// moves would have cost, more than it may spend (see `Overspent`).
    overspent: Option<Overspent>,
    /// The probe the cost rule refused had not been measured: the search had not looked
    /// there at all.
    refused_unmeasured: bool,
    /// Each sharer's pace at each `k` measured (the last measurement), for a search judged
    /// by the LLC group.
    paces: BTreeMap<usize, Vec<SharerPace>>,
    /// The profile promised nothing (this is its reason for ending in Steady), unless the
    /// colour report shows the stack's pages over-filling their colours: pages that miss on
    /// every pass, like a stream's, though they are reused. The search goes on only for
    /// them, and only if their misses are worth a search.
    unless_over_full: Option<String>,
    /// The search moves its pages back and ends in Observe, for this reason: the targets
    /// sharing the LLC changed during it (see `Controller::abandon_attempt`), those a kept
    /// placement was chosen for no longer run (see `Controller::undo_for_sharers`), a kept
    /// placement lost its re-verification, or the windows at k = 0 entered another phase
    /// (see `changed_level`).
    abandoned: Option<&'static str>,
    /// The search measures a kept placement against k = 0 again.
    reverifying: bool,
    /// A probe being measured again against k = 0 taken in a sharer's new phase.
    rejudge: Option<Rejudge>,
    /// A probe has been measured again so: once an attempt.
    rejudged: bool,
}

impl SearchRun {
    /// End a search that has not chosen yet at k = 0, without measuring again.
    pub(super) fn abandon(&mut self) {
        if self.final_k.is_none() {
            self.final_k = Some(0);
            self.abandoned = Some(
                "a target sharing the LLC started or stopped during the search: its windows \
                 compare two mixes, so it chose nothing; the pages it moved go back, and the \
                 target is observed afresh",
            );
            self.measuring = None;
            self.settle_left = 0;
            self.settle_cycles = 0;
        }
    }
}

impl Controller {
    fn run_mut(&mut self) -> Option<&mut SearchRun> {
        match &mut self.stage {
            Stage::Search(run) => Some(run.as_mut()),
            _ => None,
        }
    }

    /// The profile is over: build the stack and start the search. When the window that
    /// ended it came with the LLC group's score, the search is judged by it.
    pub(super) fn finish_profile(&mut self, context: &WindowContext, out: &mut Vec<Action>) {
        let scored = context.group.is_some();
        self.stop_sampling(out);
        let built = build_stack(&self.profile, &self.region_params());
        let previous = std::mem::replace(&mut self.build, built);
        // Pages confined by name stay where they are: the search ranks the others.
        let explicit = self.pages.explicit();
        if !explicit.is_empty() {
            let entries = self.build.stack.entries().iter();
            let kept = entries.filter(|e| !explicit.contains(&e.page)).copied();
            self.build.stack = MissRateStack::from_entries(kept.collect());
        }
        let n = self.build.stack.len();
        let profiled = EventKind::Profiled {
            pages_profiled: self.profile.len(),
            samples: self.profile.samples_total(),
            stack_pages: n,
            regions: self.build.regions.len(),
        };
        self.event(profiled, out);
        if n == 0 {
            let reason = "the profile has no page with LLC samples: nothing to rank";
            self.enter_steady(reason.into(), false, out);
            return;
        }
        if self.knobs.dry_run {
            let reason = format!("dry run: stack of {n} pages built, no page is migrated");
            self.enter_steady(reason, false, out);
            return;
        }
        // A target gains if its own reused data misses, or, judged by its LLC group, if
        // another sharer misses: then the data to protect is theirs.
        let promise = self.promise();
        self.promise = Some(promise);
        self.cycles_per_load_share = self.profile_latency.miss_cost().and_then(|cost| {
            let cycles = self.profile_cycles as f64;
            (cycles > 0.0).then(|| cost * self.profile_llc_references as f64 / cycles)
        });
        let mut unless_over_full = None;
        // A search for the sharers' gain: the stack's streaming pages of its `n`, and how
        // many pages of their mappings the profile did not reach it took with them.
        let mut for_sharers = None;
        let mut stream_pages_added = 0;
        if promise < self.knobs.min_promise && !for_others(context) {
            let reason = format!(
                "nothing to win: {:.1}% of the sampled LLC loads miss on pages that are also \
                 reused (under min_promise {:.1}%), and no other target of the LLC has reused \
                 data that misses: the misses are on pages that only stream, or the reused \
                 data already hits",
                promise * 100.0,
                self.knobs.min_promise * 100.0
            );
            if self.squeezed(&previous) {
                let reason = format!(
                    "{reason}; but it was taken with pages confined that were reused when they \
                     were chosen, and squeezed into the pollute colours they miss like a \
                     stream: they go back"
                );
                self.move_back_and_observe(reason, out);
                return;
            }
            if !self.colours_could_over_fill(n) {
                self.enter_steady(reason, false, out);
                return;
            }
            unless_over_full = Some(reason);
        } else if promise < self.knobs.min_promise {
            // A search only for the sharers' gain confines only what this target does not
            // reuse itself: its pages that (nearly) only miss. Its pages that hit would
            // lose those hits in the pollute colours, at its own expense: a tenant whose
            // table and sweep fit in the LLC probed 76 of its 80 pages for its sharers
            // and ran at 0.54 of its pace in the probe.
            let streams = self.build.stack.entries()[..self.streaming_top()].to_vec();
            if streams.is_empty() {
                let reason = format!(
                    "nothing to confine for the sharers: {:.1}% of the sampled LLC loads \
                     miss on pages that are also reused (under min_promise {:.1}%), and no \
                     page of the stack only streams (a miss rate of at least {:.2}): \
                     confining any would cost this target its own hits",
                    promise * 100.0,
                    self.knobs.min_promise * 100.0,
                    1.0 - self.knobs.region_merge_tolerance
                );
                // A tenant's new phase promised nothing, for itself or its sharer, while
                // the 2 pages its last phase kept confined slowed both (random.md's run
                // 118 at offset 1: 0.960 of off).
                if self.squeezed(&previous) {
                    let reason = format!(
                        "{reason}; but it was taken with pages confined that were reused \
                         when they were chosen: they go back"
                    );
                    self.move_back_and_observe(reason, out);
                    return;
                }
                self.enter_steady(reason, false, out);
                return;
            }
            let sampled = streams.len();
            // Only for a sharer known to gain: a search for one not yet profiled is a
            // guess, and the mappings' pages would multiply what it costs (random.md's
            // ppc970fx-368974fa at the machine's costs: 1,132 pages searched, not 180,
            // for a sharer that only streams; the streamer 0.95 -> 0.83 of off).
            let streams = match context.sharers_promised {
                true => {
                    let unreached = self.unreached_streams(&streams, Judged::ForSharers);
                    self.take_whole(streams, unreached)
                }
                false => streams,
            };
            stream_pages_added = streams.len() - sampled;
            for_sharers = Some((sampled, n));
            self.build.stack = MissRateStack::from_entries(streams);
        }
        // A profile cut for its cost while it still found new pages saw its streams only
        // in part: where their buffers are large enough that the stack takes long to
        // place, they are searched whole, below the pages it sampled (modern.md's spr-like
        // cg-like: three windows with the prefetcher off sample 18,653 pages of a matrix
        // of 92,151; confined whole, it runs 3% faster, while the stack of the pages
        // sampled held no gain). A short stack is not lengthened: its pages beyond what
        // the pollute colours hold would be probed first (random.md's ppc970fx-2175732d,
        // 55 pages and 42 more: 1.456 -> 0.999 of off).
        let streaming = self.streaming_top();
        if for_sharers.is_none() && self.profile_cut.is_some() && streaming > 0 {
            let entries = self.build.stack.entries();
            let unreached = self.unreached_streams(&entries[..streaming], Judged::ForItself);
            let added = unreached.iter().map(Region::pages).sum::<u64>() as usize;
            if entries.len() + added > LONG_PLACEMENT_PAGES {
                let entries = entries.to_vec();
                let mut all = self.take_whole(entries[..streaming].to_vec(), unreached);
                all.extend_from_slice(&entries[streaming..]);
                stream_pages_added = added;
                self.build.stack = MissRateStack::from_entries(all);
            }
        }
        let n = self.build.stack.len();
        let mut search = self.new_search();
        let profile_ipcs = match &self.stage {
            Stage::Profile { ipcs, .. } => ipcs.as_slice(),
            _ => &[],
        };
        search.drift_before(profile_ipcs);
        let skip = usize::from(self.unsampled_from_start);
        let before: Vec<f64> = self.unsampled_ipcs.iter().skip(skip).copied().collect();
        search.trend_before(&before);
        let profile_ipcs = profile_ipcs.iter().map(|&(_, ipc)| ipc).collect();
        if scored {
            search.judged_by_group();
        }
        let streaming = self.streaming_top();
        search.set_streaming_top(streaming);
        // A long stack's pages that only stream are what confining it is for.
        if self.stack_takes_long_to_place() {
            if streaming > 0 {
                search.probe_streaming_top(streaming);
            }
            if self.loop_pass_cycles().is_some() {
                search.measured_over_passes();
            }
        }
        // A retry after an attempt that found nothing probes first no more pages than the
        // budget's share has room to move there and back (at least one): its first probe is
        // free of the share, and one of 27 pages took what fruitless attempts cost to 1.58%
        // of the cycles (bzip2's real trace on ppc970fx, padded 4000 bytes in CI's
        // directory: 0.9895 of off).
        if let Some(room) = self
            .spending
            .retry_room(self.knobs.overhead_budget, self.sharers_spending)
        {
            let there_and_back = 2.0 * self.knobs.migration_cost_cycles.max(1) as f64;
            search.cap_first_probe((room / there_and_back) as usize);
        }
        let recalled = self.recall().filter(|_| unless_over_full.is_none());
        if let Some((k, accept_above)) = recalled {
            search.recall(k, accept_above);
        }
        self.search = Some(search);
        let reason = if let Some(gate) = &unless_over_full {
            format!(
                "{gate}; unless its pages over-fill their colours (reused pages then miss on \
                 every pass, like a stream's): asking which colours its {n} pages are on"
            )
        } else {
            self.stats.searches += 1;
            let mut reason = format!(
                "{} search over a stack of {n} pages in {} regions; {:.1}% of the sampled \
                 LLC loads miss on pages that are also reused (what confining could turn \
                 into hits)",
                self.knobs.search,
                self.build.regions.len(),
                promise * 100.0
            );
            if let Some(cost) = self.profile_latency.miss_cost() {
                reason += &format!(
                    ", at {cost:.0} cycles a miss: {:.1}% of its cycles",
                    self.cycles_share(promise) * 100.0
                );
            }
            if let Some((streams, all)) = for_sharers.filter(|&(streams, all)| streams < all) {
                reason += &format!(
                    "; for the sharers' gain: only the {streams} of its {all} pages that only \
                     stream"
                );
            }
            if stream_pages_added > 0 {
                reason += &format!(
                    "; and the {stream_pages_added} pages of the streams' mappings that the \
                     profile did not reach"
                );
            }
            if let (Some((k, _)), SearchMode::Adaptive) = (recalled, self.knobs.search) {
                reason += &format!(", from k = {k}: its top pages are an earlier phase's choice");
            }
            reason
        };
        let run = SearchRun {
            started_at: self.stats.windows,
            judged_by_group: scored,
            profile_ipcs,
            profile_apki: self.profile_mix.apki(),
            unless_over_full,
            ..SearchRun::default()
        };
        self.transition(Stage::Search(Box::new(run)), reason, out);
        // First learn which stack pages already sit in the pollute colours; the search
        // starts once the answer is in.
        out.push(self.pages.ask_colours(self.build.stack.top(n).collect()));
    }

    /// Whether the profile just taken saw pages confined that were reused when they were
    /// chosen (by `previous`, the stack they were chosen from), in an attempt that has
    /// searched before. A profile taken with pages confined sees reused pages squeezed into
    /// the pollute colours miss like a stream, and promises nothing for them: a tenant
    /// alone for the rest of its run kept 108 pages confined for sharers long gone (0.857
    /// of off). Such pages go back when the profile promises nothing; a confined stream,
    /// which never hit, stays (the phase that confined it finds it there), and so do pages
    /// this profile did not see: unused, they cost nothing where they are, and a phase that
    /// comes back finds them placed.
    fn squeezed(&self, previous: &StackBuild) -> bool {
        let explicit = self.pages.explicit();
        self.search.is_some()
            && self.pages.confined().iter().any(|&p| {
                !explicit.contains(&p)
                    && self.build.contains(p)
                    && previous.region_of(p).is_some_and(|r| r.hits > 0)
            })
    }

    /// Pages named since the profile ended (by the operator, or a policy whose mapping's
    /// pages became present) leave the stack the search ranks, as they would have had they
    /// been named before it was built. A search still choosing starts again over the stack
    /// without them: its measurements compared placements that moved them, and its `k`
    /// counted them. A search moving to its choice keeps the same pages (its `k` less the
    /// named ones among them); a stack in Steady only loses them.
    pub(super) fn set_named_aside(&mut self, out: &mut Vec<Action>) {
        let named = self.pages.explicit();
        let entries = self.build.stack.entries();
        if !entries.iter().any(|e| named.contains(&e.page)) {
            return;
        }
        let named_above = |k: usize| {
            let top = entries.iter().take(k);
            top.filter(|e| named.contains(&e.page)).count()
        };
        let kept: Vec<_> = entries
            .iter()
            .filter(|e| !named.contains(&e.page))
            .copied()
            .collect();
        let left = entries.len() - kept.len();
        let Stage::Search(run) = &mut self.stage else {
            self.build.stack = MissRateStack::from_entries(kept);
            return;
        };
        if let Some(k) = run.final_k {
            let k = k - named_above(k);
            run.placing = run.placing.map(|_| k);
            run.final_k = Some(k);
            self.build.stack = MissRateStack::from_entries(kept);
            return;
        }
        self.build.stack = MissRateStack::from_entries(kept);
        let n = self.build.stack.len();
        let restarted = SearchRun {
            started_at: run.started_at,
            judged_by_group: run.judged_by_group,
            profile_ipcs: std::mem::take(&mut run.profile_ipcs),
            moved_at: run.moved_at,
            // Nothing left to rank: back to k = 0, then Steady.
            final_k: (n == 0).then_some(0),
            ..SearchRun::default()
        };
        if n > 0 {
            let mut search = self.new_search();
            if restarted.judged_by_group {
                search.judged_by_group();
            }
            self.search = Some(search);
        }
        let reason = format!(
            "{left} page(s) confined by name (the operator or a policy) leave the stack: \
             the search starts again over the {n} pages left, since its measurements \
             compared placements that moved named pages"
        );
        // The next window starts the new search (at k = 0, moving the probe's pages back).
        self.transition(Stage::Search(Box::new(restarted)), reason, out);
    }

    /// The other targets a placement at `k` of a search judged by the LLC group was
    /// chosen for: those whose pace there was above the searcher's own (not counting
    /// sharers in another phase). Empty for a search judged alone, for k = 0, and for a
    /// placement that paid the searcher most: that one is its own.
    fn beneficiaries_of(&self, k: usize) -> BTreeSet<Pid> {
        let Some(run) = self.run_mut_ref().filter(|r| r.judged_by_group && k > 0) else {
            return BTreeSet::new();
        };
        let Some(paces) = run.paces.get(&k) else {
            return BTreeSet::new();
        };
        let own = paces
            .iter()
            .find(|p| p.pid == self.pid)
            .map_or(1.0, |p| p.pace);
        paces
            .iter()
            .filter(|p| p.pid != self.pid && !p.other_phase && p.pace > own)
            .map(|p| p.pid)
            .collect()
    }

    /// A placement kept for other targets' sake is judged by a mix that is gone once none
    /// of them runs any more: alone, or beside others, the searcher pays for it with
    /// nothing in return (a tenant whose placement gained its two sharers 8% and 9% at no
    /// cost to itself ran alone for the last half of its run with its reused pages in
    /// 1/16 of the cache: 0.82 of off). Its pages go back, and the target is observed
    /// afresh, to profile and search again if it still misses under the new mix.
    ///
    /// Moving them back is what measuring the placement alone costs, and it is held to the
    /// budget's share like any attempt: when the share has no room for every page, only
    /// the last of the placement go back (the stack ranks them least streaming: the
    /// likeliest to be reused), as many as it has room for, halving from all, and at least
    /// [`LEAST_PAGES_BACK`]. The profile afresh then sees whether they hit alone, and a
    /// search, if they do, starts at k = 0 with every page back. The neighbour of
    /// noisy-neighbour on ppc970fx, whose 3,905 confined pages stream alone too, moved them
    /// all back as its victim exited, 3.7% of the run (1.566 of off, its oracle 1.637); now
    /// 488 (1.618). Random tiny-9d0cacf0's streamer moves 62 of its 250 back, sees them hit
    /// alone, and searches again (+25% for itself).
    pub(super) fn undo_for_sharers(&mut self, running: &BTreeSet<Pid>, out: &mut Vec<Action>) {
        if !matches!(self.stage, Stage::Steady { .. })
            || self.beneficiaries.is_empty()
            || !self.beneficiaries.is_disjoint(running)
        {
            return;
        }
        let gone = pids(&std::mem::take(&mut self.beneficiaries));
        let k = self.placed.as_ref().map_or(0, |(k, _)| *k);
        let back = self.pages_back_affordable(k);
        let reason = if back < k {
            format!(
                "the targets this placement was chosen for ({gone}) no longer run: {back} of \
                 its {k} pages go back, the last of it (the budget's share has room for no \
                 more), and the target is observed afresh"
            )
        } else {
            format!(
                "the targets this placement was chosen for ({gone}) no longer run: its pages \
                 go back"
            )
        };
        self.move_back_and_observe_from(k - back, reason, out);
    }

    /// How many of a placement's `k` pages the budget's share has room to move back: all,
    /// or halved until it has, but at least [`LEAST_PAGES_BACK`] (or all, if fewer).
    fn pages_back_affordable(&self, k: usize) -> usize {
        let least = k.min(LEAST_PAGES_BACK);
        let cost = self.knobs.migration_cost_cycles as f64;
        let mut back = k;
        while back > least && !self.affords(back as f64 * cost) {
            back /= 2;
        }
        back.max(least)
    }

    /// A kept placement was measured beside a target that no longer runs: what it gained
    /// then says nothing of what it does under the new mix. A
    /// tenant kept 5 pages confined that had paid 11% beside a sharer; alone once the
    /// sharer ended, it ran at half its pace with them for the rest of its run (0.53 of
    /// off), and its phase detector, which learns its reference afresh under a new mix,
    /// saw nothing. The placement is measured against k = 0 again, in the balanced blocks
    /// that verify a choice, and kept only if it still wins.
    ///
    /// Measuring it again is an attempt: it may move the placement's pages three times
    /// (to k = 0, back, and to k = 0 again if it lost), and it waits until that fits the
    /// share of its cycles attempts may cost (`overhead_budget`). Returns whether the
    /// re-verification started.
    pub(super) fn reverify(&mut self, out: &mut Vec<Action>) -> bool {
        let Some((k, among)) = &self.placed else {
            self.reverify_due = false;
            return false;
        };
        let k = *k;
        let cost = 3.0 * k as f64 * self.knobs.migration_cost_cycles as f64;
        let affordable = self.affords(cost);
        if !affordable && self.reverify_waits {
            return false;
        }
        let change = format!(
            "the targets sharing the LLC changed since the kept placement (k = {k}) was \
             measured (then: {}; now: {})",
            pids(among),
            pids(&self.sharers_now)
        );
        if !affordable {
            self.reverify_waits = true;
            let (spent, share) = self.budget_shares();
            let reason = format!(
                "{change}; measuring it against k = 0 again may move {} pages ({:.2} M \
                 cycles), which with the {:.2}% of the cycles fruitless attempts cost \
                 (this target's and those sharing its LLC) is over the {:.2}% allowed \
                 now: kept as it is until that fits",
                3 * k,
                cost / 1e6,
                spent * 100.0,
                share * 100.0
            );
            self.transition(self.steady(0), reason, out);
            return false;
        }
        self.reverify_due = false;
        let n = self.build.stack.len();
        let mut search = self.new_search();
        if k > n || !search.reverify(k) {
            return false;
        }
        self.placed = None;
        self.spending.start();
        self.search = Some(search);
        self.stats.searches += 1;
        let run = SearchRun {
            started_at: self.stats.windows,
            judge_pending: true,
            reverifying: true,
            ..SearchRun::default()
        };
        let reason = format!("{change}: it is measured against k = 0 again");
        self.transition(Stage::Search(Box::new(run)), reason, out);
        true
    }

    /// Move the pages this target's searches confined back (those its last profile saw),
    /// through a search that has already chosen k = 0, then observe afresh.
    fn move_back_and_observe(&mut self, reason: String, out: &mut Vec<Action>) {
        self.move_back_and_observe_from(0, reason, out);
    }

    /// Move the pages of this target's placement below the stack's top `keep` back, then
    /// observe afresh.
    fn move_back_and_observe_from(&mut self, keep: usize, reason: String, out: &mut Vec<Action>) {
        self.placed = None;
        self.reverify_due = false;
        let run = SearchRun {
            final_k: Some(keep),
            abandoned: Some(if keep == 0 {
                "the confined pages are back; the target is observed afresh"
            } else {
                "the last of the placement's pages are back; the target is observed afresh"
            }),
            started_at: self.stats.windows,
            ..SearchRun::default()
        };
        self.transition(Stage::Search(Box::new(run)), reason, out);
    }

    pub(super) fn on_colours(&mut self, report: ColourReport, out: &mut Vec<Action>) {
        if !self.pages.on_colours(&report, &self.pollute) {
            return;
        }
        let fresh = matches!(&self.stage, Stage::Search(run) if run.measuring.is_none()
            && run.placing.is_none() && run.final_k.is_none())
            && self
                .search
                .as_ref()
                .is_some_and(|s| s.measurements().in_order().is_empty());
        let relief = if fresh {
            self.pages.set_probes_evict(false);
            self.colour_relief(&report)
        } else {
            None
        };
        let gate = self.run_mut().and_then(|run| run.unless_over_full.take());
        if let Some(reason) = gate {
            // The profile promised nothing: the search goes on only for the pages that
            // over-fill their colours, and only if their misses are worth one.
            let promise = relief.as_ref().map_or(0.0, |r| r.promise);
            let Some(relief) = relief.filter(|_| promise >= self.knobs.min_promise) else {
                let reason = format!(
                    "{reason}; and no colour is over-full with pages whose misses a search \
                     could win ({:.1}% of the sampled LLC loads)",
                    promise * 100.0
                );
                self.enter_steady(reason, false, out);
                return;
            };
            self.promise = Some(promise);
            self.stats.searches += 1;
            // Only the relief is searched: the rest of the stack promised nothing.
            let k = relief.k;
            self.relieve_colours_first(relief, out);
            self.build.stack = self.build.stack.truncated(k);
            if let Some(search) = self.search.as_mut() {
                search.only_top(k);
            }
        } else if let Some(relief) = relief {
            // The profile's promise counts misses on reused regions; the over-full
            // colours' pages miss on every pass and look like a stream to it, so their
            // misses are not in it.
            self.promise = self.promise.map(|p| p.max(relief.promise));
            self.relieve_colours_first(relief, out);
        }
        if matches!(self.stage, Stage::Search(_)) && self.pages.in_flight() == 0 {
            self.search_step(out);
        }
    }

    /// Whether a stack of `n` pages could over-fill some colours where it would otherwise
    /// fit the ordinary colours (what [`Controller::colour_relief`] looks for): the
    /// platform said how large the colours are, and the stack is not larger than the LLC's
    /// ordinary colours and the buffer together. Adaptive search only (linear search is
    /// the paper's Algorithm 1 over the whole stack).
    fn colours_could_over_fill(&self, n: usize) -> bool {
        self.knobs.search == SearchMode::Adaptive
            && self.colour_pages > 0
            && n as u64 <= self.llc_room_pages + self.buffer_pages()
    }

    /// The pages the pollute buffer holds (0 before the platform said how large colours
    /// are).
    fn buffer_pages(&self) -> u64 {
        self.pollute.len() as u64 * self.colour_pages
    }

    /// Before a search's first window: whether the stack's pages over-fill some colours
    /// (more of them on a colour than it holds), and if so which pages to probe first:
    /// those beyond what each colour holds. The allocator deals frames out at random, so
    /// a reused array of half the LLC can put nine pages on a colour of eight ways: those
    /// pages miss on every pass however little else runs, while the array's other pages
    /// always hit. Moving one of them into the pollute buffer makes them all hit; moving
    /// a region of the stack (the search's usual first probe) can put more pages in the
    /// buffer than it holds, and they then miss there instead.
    fn colour_relief(&self, report: &ColourReport) -> Option<ColourRelief> {
        if self.colour_pages == 0 {
            return None;
        }
        let colours: BTreeMap<VirtPage, Colour> = report
            .pages
            .iter()
            .zip(&report.results)
            .filter_map(|(p, r)| r.ok().map(|c| (*p, c)))
            .collect();
        let buffer_pages = self.buffer_pages();
        let overflow = colour_overflow(
            &self.build.stack,
            &colours,
            &self.pollute,
            self.colour_pages,
            self.build.stack.reused_loads(),
        );
        // Over-full colours are conflicts only when the stack would fit the ordinary
        // colours spread evenly; a stack larger than they hold misses for want of room.
        // The buffer's pages beyond what it holds count as ordinary: whether a loop fits
        // the cache does not depend on where a placement left its pages, and the probes
        // move them out (random.md's run 109: its first phase left 256 pages confined,
        // and its second phase's loop over 2.8 LLCs, 354 - 256 = 98 pages outside the
        // buffer, was taken for a stack that fits the 120 pages of ordinary colours).
        let ordinary_pages = colours.len() as u64 - overflow.buffer.pages.min(buffer_pages);
        if ordinary_pages > self.llc_room_pages {
            return self.loop_fit(&overflow);
        }
        // The program's own pages on the pollute colours (frames it was given before rocs
        // reserved them) stay there through probes and take the buffer's room. When they
        // over-fill it they miss there whatever else is confined, and when they leave too
        // little room for the pages relieved, those would over-fill it. Probes then move
        // them out too (the smallest placement relieves the buffer).
        let buffer_full = overflow.buffer.pages > buffer_pages;
        // Whole colours only: a colour relieved of fewer pages than it holds too many
        // still misses on all of them. What relieving them could win: their pages' misses
        // beyond what pages miss on colours that fit (see `colour_overflow`).
        let (mut pages, mut colours_relieved, mut misses) = (Vec::new(), 0, 0.0);
        for over_full in &overflow.by_colour {
            if (pages.len() + over_full.over.len()) as u64 > buffer_pages {
                break;
            }
            pages.extend_from_slice(&over_full.over);
            colours_relieved += 1;
            misses += over_full.excess_misses;
        }
        if buffer_full {
            misses += overflow.buffer.excess_misses;
        }
        let squatters_out =
            buffer_full || pages.len() as u64 > buffer_pages.saturating_sub(overflow.buffer.pages);
        let k = pages.len().max(usize::from(buffer_full));
        if k == 0 {
            return None;
        }
        let loads = sampled_loads(&self.build.stack);
        Some(ColourRelief {
            pages,
            k,
            colours: colours_relieved,
            buffer_over_full: buffer_full.then_some(overflow.buffer.pages),
            staying_in_buffer: None,
            loop_pass: None,
            squatters_out,
            promise: misses / loads.max(1) as f64,
        })
    }

    /// For a target alone whose stack is larger than the LLC's ordinary colours hold: the
    /// pages beyond what each colour holds, probed first. A loop over more data than the
    /// cache holds misses on every pass; with exactly those pages confined every colour
    /// keeps no more pages than it holds, and the rest of the loop hits (random.md's run
    /// 117: the top 40 of its 146 pages confined make it 1.37 times as fast, the fit
    /// point's 62 only 1.06, these 40 1.50). The pages moved miss in the buffer as they
    /// missed before, unless they hit part of the time: then their hits must be well
    /// below what the pages staying miss. (A loop that misses on every pass has no page
    /// that hits, and nothing to lose.)
    fn loop_fit(&self, overflow: &ColourOverflow) -> Option<ColourRelief> {
        if !self.sharers_now.is_empty() || self.knobs.search != SearchMode::Adaptive {
            return None;
        }
        // The stack's pages the allocator put on the pollute colours stay there, confined
        // where they are: moved out, as a kept placement moves such pages, they would land
        // on ordinary colours at random and over-fill some again (run 117: 13 of them made
        // the kept placement's 0.39 IPC 0.32).
        let pages: Vec<VirtPage> = overflow
            .buffer
            .over
            .iter()
            .chain(overflow.by_colour.iter().flat_map(|c| c.over.iter()))
            .copied()
            .collect();
        let misses: f64 = overflow.by_colour.iter().map(|c| c.staying_misses).sum();
        // The pages moved must have missed as a loop's do: pages that hit part of the
        // time (a reused table's beside streams in a stack seven times the LLC) lose
        // those hits in the buffer (random.md's run 460: MPKI 190 -> 507).
        let lost: u64 = overflow.by_colour.iter().map(|c| c.over_hits).sum();
        if misses < LOOP_FIT_WIN_OVER_LOSS * lost as f64 {
            return None;
        }
        let loads = sampled_loads(&self.build.stack);
        let k = pages.len();
        (k > 0 && k < self.build.stack.len()).then(|| ColourRelief {
            colours: overflow.by_colour.len(),
            pages,
            k,
            buffer_over_full: None,
            squatters_out: false,
            staying_in_buffer: Some(overflow.buffer.over.len()),
            loop_pass: self.loop_pass_cycles(),
            promise: misses / loads.max(1) as f64,
        })
    }

    /// The cycles a loop over the whole stack takes to load each of its lines once, at
    /// the rate the profile saw LLC references. After a loop fit the pages staying on
    /// their colours hit from the pass after the one that loads them, and within a pass
    /// the windows differ by the part of the loop they hold: random.md's run 373, a
    /// stencil over 240 pages that makes a pass in about 6 windows, read +8% a window
    /// after its loop fit's move and 0.11 to 0.30 window by window after a pass (k = 0:
    /// 0.10); measured over a pass, +71%, and kept, 1.63 times as fast (1.003 before).
    fn loop_pass_cycles(&self) -> Option<u64> {
        let lines_per_page = match self.llc_room_pages {
            0 => return None,
            room => self.llc_lines as f64 / (room + self.buffer_pages()) as f64,
        };
        let refs_per_cycle = self.profile_llc_references as f64 / self.profile_cycles.max(1) as f64;
        (refs_per_cycle > 0.0)
            .then(|| (self.build.stack.len() as f64 * lines_per_page / refs_per_cycle) as u64)
    }

    /// Whether the stack is longer than `LONG_PLACEMENT_PAGES`: it is then a loop over
    /// far more than the cache holds, whose windows cycle with the program's passes over
    /// its data, and each point the search measures is measured over a pass, as a loop
    /// fit is. Measured window by window, zen4-like's cg-like (195,553 pages) read 126,024
    /// pages confined at 0.161 and 0.145 against k = 0's 0.129: a lead of 17% that the
    /// windows' scatter left 0.0028 IPC beyond noise, and the balanced blocks then took 60
    /// windows (1.010 of off); over passes of 3.4 windows its points read 0.150 to 0.154
    /// and the search kept 140,797 pages without them (1.059). The rule is the stack's
    /// size, not the windows its moves take: judged in windows of 16,384 pages, cg-like's
    /// first stack at seed 2 (87,278 pages) was not long, and window by window its
    /// cycling windows chose k = 0 after 208,016 moves (0.9760 of off). A pass adds little
    /// to a probe of a stack that long; to a short one it would add several windows.
    fn stack_takes_long_to_place(&self) -> bool {
        self.build.stack.len() > LONG_PLACEMENT_PAGES
    }

    /// Put the relief's pages at the top of the stack, and have the search probe exactly
    /// them first.
    fn relieve_colours_first(&mut self, relief: ColourRelief, out: &mut Vec<Action>) {
        self.pages.set_probes_evict(relief.squatters_out);
        if let (Some(pass), Some(run)) = (relief.loop_pass, self.run_mut()) {
            run.loop_pass = Some((relief.k, pass));
        }
        // The search keeps the boundaries of the stack it was made for: lifting pages to
        // the top moves the region boundaries above where they came from by at most that
        // many places (the buffer's pages, or a loop fit's: the pass goes on from there).
        self.build.stack = self.build.stack.with_first(&relief.pages);
        if let Some(search) = self.search.as_mut() {
            match relief.loop_pass {
                Some(_) => search.probe_loop_fit_first(relief.k),
                None => search.probe_first(relief.k),
            }
        }
        let over_full = EventKind::ColoursOverFull {
            colours: relief.colours,
            pages: relief.pages.len() - relief.staying_in_buffer.unwrap_or(0),
            buffer_pages: relief.buffer_over_full,
            staying_in_buffer: relief.staying_in_buffer,
        };
        self.event(over_full, out);
    }

    /// A window of the search: measure the placement if it is ready, then decide what the
    /// next window is for.
    pub(super) fn search_window(
        &mut self,
        delta: &CounterDelta,
        ran: bool,
        group: Option<Vec<MemberWindow>>,
        out: &mut Vec<Action>,
    ) {
        self.stats.search_windows += 1;
        if self.pages.in_flight() > 0 {
            // A migration report is missing: this window's placement is unknown.
            return;
        }
        self.skip_window = false;
        let worth = self.worth_profiling(delta);
        let (pid, band, now) = (self.pid, self.knobs.phase_band, self.stats.windows);
        let adaptive = self.knobs.search == SearchMode::Adaptive;
        let judge_now = match &mut self.stage {
            Stage::Search(run) => std::mem::take(&mut run.judge_pending),
            _ => false,
        };
        if judge_now && group.is_some() {
            if let Some(s) = self.search.as_mut() {
                s.judged_by_group();
            }
            if let Some(run) = self.run_mut() {
                run.judged_by_group = true;
            }
        }
        let Some(run) = self.run_mut() else {
            return;
        };
        let Some(k) = run.measuring else {
            self.search_step(out);
            return;
        };
        if run.settle_left > 0 || run.settle_cycles > 0 {
            // The windows right after a move carry the move's cost (as many windows as its
            // cycles fill) and cold caches for the moved pages: not a fair measurement.
            run.settle_left = run.settle_left.saturating_sub(1);
            run.settle_cycles = run.settle_cycles.saturating_sub(delta.cycles.max(1));
            return;
        }
        if !ran {
            return;
        }
        let mut measured = *delta;
        if run.measure_cycles_left > 0 {
            // A pass is one measurement (a loop fit's, or any point's where the stack takes
            // long to place: see `loop_pass_cycles`, `stack_takes_long_to_place`).
            run.measure_cycles_left = run.measure_cycles_left.saturating_sub(delta.cycles.max(1));
            let sum = &mut run.pass_sum;
            sum.instructions += delta.instructions;
            sum.cycles += delta.cycles;
            sum.llc_misses += delta.llc_misses;
            sum.llc_references += delta.llc_references;
            if run.measure_cycles_left > 0 {
                return;
            }
            measured = std::mem::take(sum);
        }
        let (ipc, mpki) = (measured.ipc(), measured.mpki());
        if k == 0 && run.moved_at.is_none() {
            run.unmoved.push(ipc);
            run.unmoved_mpki.push(mpki);
        }
        let mut value = ipc;
        let mut sharers = Vec::new();
        let mut own_past_floor = false;
        let mut paid_in_another_phase = false;
        if run.judged_by_group {
            let Some(members) = group else {
                return;
            };
            let floors: BTreeMap<Pid, f64> = members
                .iter()
                .filter_map(|m| m.floor.map(|f| (m.pid, f)))
                .collect();
            let own_floor = floors.get(&pid).copied();
            if !run.group.window(members) {
                return;
            }
            match run.group.judge(k, pid) {
                Some((score, paces)) => {
                    paid_in_another_phase = paces
                        .iter()
                        .any(|p| p.other_phase && floors.get(&p.pid).is_some_and(|&f| p.pace < f));
                    own_past_floor = k > 0
                        && paces
                            .iter()
                            .find(|p| p.pid == pid)
                            .zip(own_floor)
                            .is_some_and(|(p, floor)| p.pace < floor);
                    run.paces.insert(k, paces.clone());
                    (value, sharers) = (score, paces);
                }
                None => return,
            }
        }
        run.measuring = None;
        run.own_windows.push(OwnWindow {
            at: now,
            k,
            ipc,
            mpki,
            apki: measured.apki(),
        });
        let apki: Vec<f64> = run.own_windows.iter().map(|w| w.apki).collect();
        if let Some(from) = mix_changed(&apki, band).filter(|_| adaptive) {
            // Only the windows before the change compare placements within one phase
            // (linear search is Algorithm 1 as the paper has it, and runs to its end).
            let since = run.own_windows[from].at;
            run.own_windows.truncate(from);
            run.mix_changed = Some((apki[0], apki[apki.len() - 1]));
            // A probe window in the other phase measured the phase, not its placement: a
            // gain it seemed to show is not banked against what the attempt spent (bzip2's
            // real trace on ppc970fx, padded 2000 bytes: three probes read faster as the
            // program left its sort, and the attempt's 55 page moves and profile counted
            // as nothing, so a third attempt started).
            let gains_forgotten: f64 = run
                .probe_costs
                .iter()
                .filter(|(at, _)| *at >= since)
                .map(|(_, cost)| cost.min(0.0))
                .sum();
            self.spending.spent(-gains_forgotten);
            let search = self.search.as_mut().expect("searching");
            search.forget_from(since);
            let k = match search.measurements().best() {
                Some((best, _)) if search.has_gain() => best,
                _ => 0,
            };
            self.search_done(k, out);
            return;
        }
        if k == 0 {
            if worth {
                run.baseline_loud += 1;
            } else {
                run.baseline_quiet += 1;
            }
        }
        // A probe window slower than the search's own k = 0 cost the target the difference
        // (the k = 0 windows are the reference, and cost nothing).
        let base = self.search.as_ref().and_then(|s| s.measurements().mean(0));
        if let (true, Some(base)) = (k > 0, base.filter(|&b| b > 0.0)) {
            let cost = measured.cycles as f64 * (1.0 - value / base);
            self.spending.spent(cost);
            if let Some(run) = self.run_mut() {
                run.probe_costs.push((now, cost));
            }
        }
        if let Some(s) = self.search.as_mut() {
            s.record_at_with_mpki(self.stats.windows, k, value, mpki);
            // A placement that slowed the searcher itself past its own floor is refused,
            // and a larger one confines more of its pages and slows it further: the search
            // ends with what it measured (fixed seed 2 of rocs-sim's random_campaign test
            // probed on, to 39% slower for its searcher, and lost 1.2%).
            if own_past_floor {
                s.conclude();
            }
        }
        // A sharer slower past its floor at a probe, but in another phase than at k = 0,
        // counts at pace 1: whether the placement or its phase slowed it, k = 0 measured
        // in that phase tells. Measured again against it, the probe is judged by what it
        // costs the sharer now. random.md's tiny-53d666ed: t1 entered a phase of ten
        // times its LLC references as t0's first probe began, ran 64-73% slower at every
        // probe there, uncounted, and t0 kept 76 pages; t1 ended at 0.801 of off.
        if let Some(run) = self.run_mut().filter(|_| k > 0 && paid_in_another_phase) {
            if !std::mem::replace(&mut run.rejudged, true) {
                run.rejudge = Some(Rejudge::Zero { k });
            }
        }
        let step = EventKind::SearchStep {
            k,
            ipc,
            mpki,
            group_score: (!sharers.is_empty()).then_some(value),
            sharers,
        };
        self.event(step, out);
        self.search_step(out);
    }

    /// The LLC references per kilo-instruction the profile's samples were taken at and the
    /// search's windows at k = 0 now run at, if those left that level (see [`left_level`])
    /// in an attempt that has not profiled again yet: the references are the loads that
    /// miss the caches above the LLC, which no placement has changed yet, so the program
    /// has changed phase since most of its samples were taken. Not where sampling switches
    /// the prefetcher off: the profile's windows then make another mix whatever the
    /// program does (zen4-like's art-like: 102.5 references per 1000 instructions in its
    /// profile, 51.7 at k = 0 in its search, the same phase; profiled again, at half its
    /// speed, 1.3496 -> 1.3195; spr-like's cg-like 0.9894 -> 0.9665).
    fn profile_of_another_mix(&self) -> Option<(f64, f64)> {
        let run = self.run_mut_ref()?;
        let profiled = run.profile_apki?;
        if self.profiled_again || self.sampling_pauses_prefetch {
            return None;
        }
        let series: Vec<f64> = std::iter::once(profiled)
            .chain(run.own_windows.iter().map(|w| w.apki))
            .collect();
        left_level(&series, self.knobs.phase_band, MPKI_FLOOR)
            .then(|| (profiled, series[series.len() - 1]))
    }

    /// The stack ranks the pages of a phase the program has left (see
    /// `profile_of_another_mix`): probing it would move pages by what they did then
    /// (bzip2, traced: its block fill's pages, which only stream, probed as its sort
    /// began to reuse them, at a third of the speed of off for two windows, in each of
    /// three runs of the trace). Before any page moves, the attempt profiles the phase the
    /// program is in, once: a program whose phases are shorter than a profile and a search
    /// then searches what it profiled.
    fn profile_again(&mut self, profiled: f64, now: f64, out: &mut Vec<Action>) {
        self.profiled_again = true;
        let reason = format!(
            "the search's windows at k = 0 make {now:.1} LLC references per 1000 \
             instructions, where the profile's samples were taken at {profiled:.1}: the \
             program changed phase since, and the stack ranks the pages of the phase \
             before; no page moved yet: profiling again"
        );
        self.profile_afresh(reason, out);
    }

    /// Decide what the next window is for, and start the moves it needs.
    fn search_step(&mut self, out: &mut Vec<Action>) {
        if self.rejudge_step(out) {
            return;
        }
        let (Some(search), Stage::Search(run)) = (self.search.as_mut(), &self.stage) else {
            return;
        };
        let next = match run.final_k {
            Some(k) => Next::Done(k),
            // The misses that started the profile are gone (a cold start that warmed up, a
            // burst that ended): with nothing missing at k = 0, no `k` can gain, and every
            // probe would cost its moves.
            None if run.baseline_quiet >= 2
                && run.baseline_loud == 0
                && search.measurements().iter().all(|(k, _, _)| k == 0) =>
            {
                Next::Done(0)
            }
            None => {
                let first_probe = run.moved_at.is_none();
                let next = search.next_step();
                if let Some(check) = search.take_check() {
                    self.event(EventKind::SearchChecks { check }, out);
                }
                if first_probe && matches!(next, Next::Measure(k) if k > 0) {
                    if let Some((profiled, now)) = self.profile_of_another_mix() {
                        self.profile_again(profiled, now, out);
                        return;
                    }
                }
                self.affordable(next, first_probe)
            }
        };
        match next {
            Next::Measure(k) => self.measure(k, out),
            Next::Done(k) => self.search_done(k, out),
        }
    }

    /// The next step of a probe measured again ([`Rejudge`]), if one is under way and the
    /// search has not ended: whether it took the window.
    fn rejudge_step(&mut self, out: &mut Vec<Action>) -> bool {
        let Some(run) = self.run_mut().filter(|r| r.final_k.is_none()) else {
            return false;
        };
        let Some(rejudge) = run.rejudge else {
            return false;
        };
        if let Some(k) = run.placing {
            self.measure(k, out);
            return true;
        }
        let k = match rejudge {
            Rejudge::Zero { k } => {
                run.rejudge = Some(Rejudge::Probe { k });
                0
            }
            Rejudge::Probe { k } => {
                run.rejudge = Some(Rejudge::Done);
                k
            }
            Rejudge::Done => {
                run.rejudge = None;
                return false;
            }
        };
        self.measure(k, out);
        true
    }

    /// Move towards placement `k`, and once it is complete, measure it (after the windows
    /// its moves take to settle).
    fn measure(&mut self, k: usize, out: &mut Vec<Action>) {
        let moved_before = self.stats.windows;
        let complete = self.move_towards(k, false, out);
        let run = self.run_mut().expect("searching");
        run.placing = (!complete).then_some(k);
        if complete {
            let (settle, cost) = (self.knobs.settle_windows, self.knobs.migration_cost_cycles);
            let long_placement_pass = if self.stack_takes_long_to_place() {
                self.loop_pass_cycles()
            } else {
                None
            };
            let run = self.run_mut().expect("searching");
            run.measuring = Some(k);
            let pass = run.loop_pass.filter(|&(fit, _)| fit == k).map(|(_, c)| c);
            // Settle after any move that made up this placement, the last batch
            // included; a loop fit for its moves' cycles and then a pass of its
            // loop: the program does not run while its pages move, so a pass
            // counted from the move's start can end before the loop has come
            // round (random.md's run 117 at the machine's costs: its loop fit,
            // measured again after 85 pages came back from a larger probe, read
            // MPKI 45 against 18 the first time and was dropped).
            if run.moved_at == Some(moved_before) {
                run.settle_left = settle;
                run.settle_cycles = run.moved_pages as u64 * cost + pass.unwrap_or(0);
            }
            run.measure_cycles_left = pass.or(long_placement_pass).unwrap_or(0);
            run.pass_sum = CounterDelta::default();
        }
    }

    /// The search's `next` step, unless the target cannot afford it. Before the first
    /// probe: if the windows scatter too much to tell the promised gain, no probe is made;
    /// otherwise the first probe is made whatever the profile cost (that cost is spent
    /// either way, and only a probe can tell whether the promise holds). Before each later
    /// probe, in a search that has found nothing: once the attempt has cost, or with the
    /// probe's own moves would cost, more than the promise could win back, exploring
    /// further costs more than it can repay, so the search concludes (at k = 0, unless the
    /// Confirm stage sees a gain after all). A probe whose placement is under way is
    /// finished: one stopped halfway through its batches would have cost them for nothing.
    /// A retry after an attempt that found nothing concludes as well once it, with what
    /// fruitless attempts cost, would take more than the budget's share (see
    /// `Spending::retry_affords`). A search that has found a gain goes on: its moves so
    /// far are the price of a placement it keeps.
    fn affordable(&mut self, next: Next, first_probe: bool) -> Next {
        let Next::Measure(k) = next else {
            return next;
        };
        let Some(run) = self.run_mut_ref() else {
            return next;
        };
        if k == 0 || run.placing == Some(k) {
            return next;
        }
        let searched_on = run.overspent.is_some();
        if first_probe {
            match self.scatter_verdict() {
                Scatter::TooNoisy(resolvable) => {
                    self.run_mut().expect("searching").too_noisy = Some(resolvable);
                    return Next::Done(0);
                }
                Scatter::Unsure => return Next::Measure(0),
                Scatter::Quiet => return next,
            }
        }
        let search = self.search.as_ref().expect("searching");
        if searched_on || search.has_gain() {
            return next;
        }
        // The probe's own moves count before they are made: a probe of the whole stack
        // can cost more than everything before it.
        let moves = self.pages_to_move(k) as f64 * self.knobs.migration_cost_cycles as f64;
        // A retry after an attempt that found nothing is also held to the budget's share,
        // once it has probed: its promise, an overestimate on a short program, did not stop
        // it (bzip2's real trace on ppc970fx, padded 4500 bytes: a retry searched 10 windows
        // and moved 66 pages, 0.9874 of off). Its first probe is the least a retry is (and
        // no more pages than the share has room for, where the search starts), and a
        // search that moved its buffer's squatters out at k = 0 has not yet probed.
        // A retry that finds nothing moves the probe's pages back: those moves are counted
        // before the probe too (counted after, a retry probed its whole stack and left what
        // fruitless attempts cost over the share).
        let probed = search.measurements().iter().any(|(k, _, _)| k > 0);
        let back = self.build.stack.top(k).count() as f64 * self.knobs.migration_cost_cycles as f64;
        let retry_over_share = probed
            && !self.spending.retry_affords(
                self.knobs.overhead_budget,
                moves + back,
                self.sharers_spending,
            );
        let cost = match self.over_what_it_could_win(moves) {
            Some(cost) => cost,
            None if retry_over_share => self.spending.attempt_cost() + moves,
            None => return next,
        };
        let next_moves = if retry_over_share {
            moves + back
        } else {
            moves
        };
        let measured = self
            .search
            .as_ref()
            .is_some_and(|s| s.measurements().count(k) > 0);
        let run = self.run_mut().expect("searching");
        run.overspent = Some(Overspent {
            cost: cost - moves,
            next_moves,
            retry_share: retry_over_share,
        });
        run.refused_unmeasured = !measured;
        let search = self.search.as_mut().expect("searching");
        if search.conclude() {
            search.next_step()
        } else {
            next
        }
    }

    /// The search chose `k`: remember what it found, move there, then hold it.
    fn search_done(&mut self, k: usize, out: &mut Vec<Action>) {
        let (Some(search), Some(run)) = (self.search.as_ref(), self.run_mut_ref()) else {
            return;
        };
        if run.final_k.is_none() {
            let windows = self.stats.windows - run.started_at;
            let m = search.measurements();
            let (ipc, baseline_ipc) = (m.mean(k), m.mean(0));
            let beneficiaries = self.beneficiaries_of(k);
            // A placement chosen for other targets' sake is the mix's, not this phase's:
            // it is not recalled when the phase comes back.
            let own = beneficiaries.is_empty();
            if let (true, true, Some(ipc), Some(baseline_ipc)) = (k > 0, own, ipc, baseline_ipc) {
                let pages: HashSet<VirtPage> = self.build.stack.top(k).collect();
                // The same phase found again replaces its old entry.
                self.remembered
                    .retain(|r| overlap(&r.pages, &pages) < RECALL_OVERLAP);
                self.remembered.push_front(PhaseMemory {
                    pages,
                    ipc,
                    baseline_ipc,
                });
                self.remembered.truncate(PHASES_REMEMBERED);
            }
            self.beneficiaries = beneficiaries;
            self.placed = (k > 0).then(|| (k, self.sharers_now.clone()));
            let band = self.knobs.phase_band;
            let run = self.run_mut().expect("searching");
            run.final_k = Some(k);
            // The kept placement lost to k = 0 beside the targets running now, which says
            // nothing of what wins beside them (random.md's run 282: k = 16 lost once its
            // sharer had exited, where the oracle's k = 11 made the run 1.40 times as
            // fast): look again.
            if run.reverifying && k == 0 {
                run.abandoned = Some(
                    "the kept placement no longer wins beside the targets running now: the \
                     target is observed afresh",
                );
            } else if k == 0 && changed_level(&run.unmoved, &run.unmoved_mpki, band) {
                run.abandoned = Some(
                    "the target's IPC and MPKI changed phase during the search's windows at \
                     k = 0: its profile is of the phase before, so it chose nothing, and the \
                     target is observed afresh",
                );
            }
            let done = EventKind::SearchDone {
                k,
                ipc,
                baseline_ipc,
                windows,
            };
            self.event(done, out);
        }
        if self.move_towards(k, true, out) {
            let run = self.run_mut_ref().expect("searching");
            // The kept placement's windows are the phase's reference, at k = 0 too: the
            // windows after the search may already be another phase (random.md's run 408
            // kept k = 0, and Steady, given no reference, learnt one after its back-off
            // from a phase the program had entered meanwhile, never profiled: 1.001 of
            // off; 1.52 with k = 0's windows as the reference). After a change of the
            // program's loads they are the ended phase's, so that the phase the program
            // entered is profiled.
            let ended = run.mix_changed.is_some();
            let kept: Vec<(f64, f64)> = run
                .own_windows
                .iter()
                .rev()
                .filter(|w| w.k == k)
                .take(KEPT_REFERENCE_WINDOWS)
                .map(|w| (w.ipc, w.mpki))
                .collect();
            if let Some(reason) = run.abandoned {
                self.spending.abandon();
                self.transition(Stage::observe(), reason.into(), out);
                return;
            }
            let mut reason = self.choice_words(k);
            if let Some(resolvable) = run.too_noisy {
                let promise = self.promise.unwrap_or(0.0);
                reason += &format!(
                    "; too noisy to search: a window's IPC scatters so much that a search \
                     measuring {} window(s) a point tells only gains above {:.1}% from \
                     noise, more than the {:.1}% the profile promises (its {:.1}% of sampled \
                     LLC loads), so no page was moved",
                    self.knobs.search_max_repeats,
                    resolvable * 100.0,
                    self.promised_ipc_gain(promise) * 100.0,
                    promise * 100.0
                );
            } else if let Some(over) = run.overspent {
                // Told to conclude, the search still keeps a point its last measurements
                // confirm beats k = 0.
                let outcome = if k == 0 {
                    "ended early, having found no gain"
                } else {
                    "was cut short, and its confirmation kept the best point measured"
                };
                let next = if over.next_moves > 0.0 {
                    let moves = if over.retry_share {
                        "moves, there and back,"
                    } else {
                        "moves"
                    };
                    format!(
                        ", and its next probe's {moves} would have added {:.2} M: together",
                        over.next_moves / 1e6
                    )
                } else {
                    String::new()
                };
                let bound = if over.retry_share {
                    let (fruitless, allowed) = self.budget_shares();
                    let this = self
                        .spending
                        .share_of(over.cost + over.next_moves, self.sharers_spending);
                    format!(
                        "more than a retry after an attempt that found nothing may spend: \
                         with what fruitless attempts cost before it, {:.2}% of the cycles \
                         so far (this target's and those sharing its LLC), over the {:.2}% \
                         allowed now (overhead_budget, halved for each fruitless attempt in \
                         a row)",
                        (fruitless + this) * 100.0,
                        allowed * 100.0
                    )
                } else {
                    let promised = match self.own_promise() {
                        Some(p) => format!(
                            "the {:.1}% of its cycles the profile promises to save",
                            self.cycles_share(p) * 100.0
                        ),
                        None => format!(
                            "min_promise {:.1}% (the search was only for other targets' gain)",
                            self.knobs.min_promise * 100.0
                        ),
                    };
                    format!(
                        "more than {promised} could win back over as many cycles again as \
                         the target has run"
                    )
                };
                reason += &format!(
                    "; the search {outcome}: it had cost {:.2} M cycles (its profile \
                     included){next}, {bound}",
                    over.cost / 1e6,
                );
                // Nothing found, and nothing looked at where the promise lies: the attempt
                // waits for the target to have run long enough to pay for its next step. Not
                // a retry held to its share: running longer pays for it only by its promise.
                let deferrable = k == 0
                    && !over.retry_share
                    && self.knobs.search == SearchMode::Adaptive
                    && !run.judged_by_group
                    && self.own_promise().is_some()
                    && run.refused_unmeasured;
                let mpki = crate::search::moments(&run.unmoved_mpki).0;
                if let (true, Some(profile)) = (deferrable, self.profile_cut) {
                    self.deferred = Some(Deferred {
                        moves: over.next_moves,
                        profile,
                        mpki,
                    });
                    reason += "; its profile had not seen the program whole: the attempt goes \
                               on once the target has run long enough to pay for the rest";
                }
            } else if let Some((from, to)) = run.mix_changed {
                reason += &format!(
                    "; the target's LLC references per 1000 instructions changed during the \
                     search, from {from:.1} to {to:.1}: the program changed phase, and the \
                     search chose from its windows before the change"
                );
            } else if k == 0 && run.baseline_loud == 0 && run.baseline_quiet > 0 {
                reason += "; at k = 0 the target missed too little to be worth profiling: nothing to gain";
            }
            self.enter_steady(reason, k > 0, out);
            if let Stage::Steady { phase, .. } = &mut self.stage {
                if ended {
                    phase.learn_ended(&kept);
                } else {
                    phase.learn(&kept);
                }
            }
        }
    }

    /// What choosing `k` does, for the transition to Steady. The moves to `k` were only
    /// issued: the pages they take back out of the buffer still count as confined until
    /// their report comes, so say where the pages are going, not where they are now.
    fn choice_words(&self, k: usize) -> String {
        let (build, profile) = (&self.build, &self.profile);
        let top: HashSet<VirtPage> = build.stack.top(k).collect();
        // Pages no placement of this search moves (see `move_towards`).
        let aside = |p: &VirtPage| {
            self.pages.explicit().contains(p) || !(build.contains(*p) || profile.get(*p).is_some())
        };
        let confined = self.pages.confined();
        let leaving = confined
            .iter()
            .filter(|p| !top.contains(p) && !aside(p))
            .count();
        let kept = confined.iter().filter(|p| aside(p)).count();
        let mut words = format!("search chose k = {k} of {} pages", build.stack.len());
        if leaving > 0 {
            words += &format!(
                "; {leaving} page{} of the last probe go{} back to the ordinary colours",
                if leaving == 1 { "" } else { "s" },
                if leaving == 1 { "es" } else { "" }
            );
        }
        if kept > 0 {
            words += &format!(
                "; {kept} page{} outside the search stay{} confined (named by the operator or \
                 a policy, or confined in an earlier phase that this profile did not see)",
                if kept == 1 { "" } else { "s" },
                if kept == 1 { "s" } else { "" }
            );
        }
        words
    }

    /// Before the first move: whether the windows so far scatter too much for the search
    /// to tell the gain the profile promises. A search sees a gain only through its
    /// windows' IPC; where it could tell only gains larger than the promise (the share of
    /// loads that could turn from misses into hits, which bounds the relative gain of
    /// every workload we have measured), it would move pages and learn nothing. Real
    /// programs' request mixes scatter a window's IPC by tens of percent, the built-in
    /// workloads by about 1%. The profile's windows and the search's are judged first;
    /// if they say noisy, the verdict rests on the search's own k = 0 windows alone (a
    /// profile window can be odd for reasons of its own: under rocsd on the simulated
    /// platform one was, while the search's two k = 0 windows read the same IPC), measured
    /// until there are `UNMOVED_WINDOWS`. A search for other
    /// targets' gain (the promise under `min_promise`) is not judged by it.
    fn scatter_verdict(&self) -> Scatter {
        let (Some(promise), Some(run)) = (self.own_promise(), self.run_mut_ref()) else {
            return Scatter::Quiet;
        };
        let promise = self.promised_ipc_gain(promise);
        let repeats = self.knobs.search_max_repeats;
        if run.judged_by_group {
            // The search decides on the group's score, which scatters with every sharer's
            // phases: its own scatter at k = 0 is what a probe must rise above. Before the
            // first probe, the search's k = 0 measurements are those scores.
            const GROUP_UNMOVED: usize = 3;
            let scores: Vec<f64> = self
                .search
                .as_ref()
                .map(|s| s.measurements().in_order())
                .unwrap_or_default()
                .iter()
                .filter(|w| w.k == 0)
                .map(|w| w.ipc)
                .collect();
            if scores.len() < GROUP_UNMOVED {
                return Scatter::Unsure;
            }
            return match resolvable_gain(&[scores.as_slice()], repeats) {
                Some(r) if r > promise => Scatter::TooNoisy(r),
                _ => Scatter::Quiet,
            };
        }
        let groups = [run.profile_ipcs.as_slice(), run.unmoved.as_slice()];
        if resolvable_gain(&groups, repeats).is_none_or(|r| r <= promise) {
            return Scatter::Quiet;
        }
        if run.unmoved.len() < UNMOVED_WINDOWS {
            return Scatter::Unsure;
        }
        match resolvable_gain(&[run.unmoved.as_slice()], repeats) {
            Some(r) if r > promise => Scatter::TooNoisy(r),
            _ => Scatter::Quiet,
        }
    }

    /// What the attempt has cost, if that is more than its promise (the largest relative
    /// gain we expect; see [`Controller::bounding_promise`]) could win back. A search
    /// whose probes gain pays for itself as it goes: a probe faster than k = 0 counts
    /// against the cost.
    fn over_what_it_could_win(&self, next: f64) -> Option<f64> {
        self.spending
            .over_what_it_could_win(self.bounding_promise(), next)
    }

    /// The gain the cost rule weighs a search's cost against: its own promise, or, for a
    /// search only for other targets' gain, `min_promise`, the least gain worth a search.
    /// Unbounded, such a search explored its whole stack however little it found (a random
    /// tenant moved its pages for a sharer's gain that never came, and lost 9%).
    pub(super) fn bounding_promise(&self) -> f64 {
        self.own_promise()
            .map_or(self.knobs.min_promise, |p| self.cycles_share(p))
    }

    /// The share of the target's cycles that turning `loads` (a share of its LLC loads)
    /// from misses into hits could save, by what a miss cost in the profile's samples: a
    /// promise counts loads, a search measures IPC, and a miss may cost a program most of
    /// its cycles (a tiny program whose one over-full colour missed on 3.8% of its loads
    /// ran 1.86 times as fast without those misses). Never less than the share of loads,
    /// the bound before latencies were weighed: zen4-like's cg-like, its misses
    /// overlapping at 84 cycles each, would promise 17.1% of its cycles for 21.3% of its
    /// loads, take its cut attempt up later, and end its run verifying a kept 18% gain
    /// (1.010 -> 0.962 of off). Without latencies in the samples, the share of loads.
    fn cycles_share(&self, loads: f64) -> f64 {
        self.cycles_per_load_share
            .map_or(loads, |c| (loads * c.max(1.0)).min(MAX_CYCLES_SHARE))
    }

    /// The largest IPC gain the profile promises: IPC rises by s / (1 - s) where a share
    /// s of the cycles is saved.
    fn promised_ipc_gain(&self, loads: f64) -> f64 {
        let saved = self.cycles_share(loads);
        saved / (1.0 - saved)
    }

    /// The profile's promise when the search is for this target's own gain (at least
    /// `min_promise`); a search only for other targets' gain has none of its own.
    fn own_promise(&self) -> Option<f64> {
        self.promise.filter(|&p| p >= self.knobs.min_promise)
    }

    fn run_mut_ref(&self) -> Option<&SearchRun> {
        match &self.stage {
            Stage::Search(run) => Some(run.as_ref()),
            _ => None,
        }
    }

    /// What a pollute buffer could win for this target: the share of its sampled LLC
    /// loads that are misses in regions that are also reused (they hit at times) and miss
    /// clearly less than the stack's worst region. Those misses are what confining the
    /// worst pages can turn into hits; misses on pages that only stream cannot be. Judged
    /// by region, not page: a page's few samples scatter its rate (a table of uniform pages
    /// sampled 3 times each has pages at 0.33 and at 1.0), a region's rate is what the
    /// stack ranks by; and regions that sampling cannot tell apart are pooled
    /// ([`pool_regions`]), since a region sampled less than once a page comes in pieces.
    ///
    /// The reused regions share the LLC outside the pollute buffer (when the platform said
    /// how large it is): however the streams are placed, it holds at most that many pages,
    /// and loads spread over a region's pages hit at most in the share of them it holds.
    /// The bound gives the room to the regions with the most loads per page first (the
    /// most hits a placement could win), and counts only the hits each region's share of
    /// it adds to those the region has. (A region left less room than it has now loses
    /// hits, but counting them would not bound the gain: the hits won may be on loads the
    /// program waits for and the hits lost on loads it overlaps.)
    ///
    /// Alone on its LLC, a target's region that misses on every load is reused too when
    /// its loads over the profile reach twice its lines: a loop over more than the cache
    /// holds, part of which fits once the rest is confined (random.md at the window's
    /// costs, offsets 0 / 1 / 2: median fraction of the oracle 0.916 / 0.908 / 0.903 ->
    /// 0.924 / 0.918 / 0.914, no more runs below 0.99; NOTES.md session 44).
    pub(super) fn promise(&self) -> f64 {
        self.promise_of(&self.build)
    }

    fn promise_of(&self, build: &StackBuild) -> f64 {
        let Some(top) = build.stack.entries().first() else {
            return 0.0;
        };
        let below = top.miss_rate - self.knobs.region_merge_tolerance;
        let pools = pool_regions(&build.regions, &self.region_params());
        let loads = |p: &RegionPool| p.samples() as f64;
        let density = |p: &RegionPool| loads(p) / p.pages.max(1) as f64;
        // A loop over more than the cache holds misses on every pass, as a stream does,
        // but loads each of its lines once a pass, where a stream loads it once: alone on
        // the LLC (where the fit point probes inside it), a pool whose LLC loads, as the
        // profile's samples stand for them, reach twice its lines is reused.
        let all_samples: u64 = pools.iter().map(RegionPool::samples).sum();
        let loads_per_sample = self.profile_llc_references as f64 / all_samples.max(1) as f64;
        let lines_per_page = match self.llc_room_pages {
            0 => 0.0,
            _ => self.llc_lines as f64 / (self.llc_room_pages + self.buffer_pages()) as f64,
        };
        let is_loop = |p: &RegionPool| {
            self.sharers_now.is_empty()
                && lines_per_page > 0.0
                && loads(p) * loads_per_sample >= 2.0 * p.pages as f64 * lines_per_page
        };
        let mut reused: Vec<&RegionPool> = pools
            .iter()
            .filter(|p| (p.hits > 0 && p.miss_rate() < below) || is_loop(p))
            .collect();
        reused.sort_by(|a, b| density(b).total_cmp(&density(a)));
        let mut room = match self.llc_room_pages {
            0 => f64::INFINITY,
            pages => pages as f64,
        };
        let mut winnable = 0.0;
        for p in reused {
            let pages = p.pages as f64;
            let held = (room / pages).min(1.0);
            room = (room - pages).max(0.0);
            winnable += (loads(p) * held - p.hits as f64).max(0.0);
        }
        let all: f64 = pools.iter().map(loads).sum();
        if all == 0.0 {
            0.0
        } else {
            winnable / all
        }
    }

    /// The pages of `streams`' mappings (`streams`: the stack's pages that only stream)
    /// that the profile did not reach, as regions without samples: a stream's buffer is
    /// confined whole ([`Controller::take_whole`]), not only the part the profile saw it
    /// pass. Only mappings whose every page of the profile's regions streams, so that no
    /// reused page is taken along, and at most [`WHOLE_STREAM_MAX_LLCS`] times the LLC's
    /// pages in all (where its size is not known, [`WHOLE_STREAM_MAX_PAGES`]). Each
    /// region's rate is its mapping's least streaming rate.
    /// (noisy-neighbour on zen4-like at `--scale auto:0.1`: the neighbour's buffer is
    /// 262,144 pages, of which its profile reached 11,069.)
    ///
    /// Two kinds of region say little of the pages of a mapping: one that reaches past
    /// the mapping's end takes the rate of the pages it holds on both sides (zen4-like
    /// art-like: the stream's last 60 pages and the reused array after it, at 0.61), and
    /// one with fewer than `min_samples_per_page` samples is pulled towards the profile's
    /// overall rate. A search for the target's own gain, which measures what it confines,
    /// does not let them keep a stream's mapping out; one for the sharers' gain, paid for
    /// with this target's own hits, does.
    fn unreached_streams(&self, streams: &[StackEntry], judged: Judged) -> Vec<Region> {
        if self.mappings.is_empty() || streams.is_empty() {
            return Vec::new();
        }
        // Per mapping (address order): the least rate of its stack pages while they all
        // stream, None once one does not (or it holds none).
        let streaming: HashSet<VirtPage> = streams.iter().map(|e| e.page).collect();
        let min_samples = u64::from(self.knobs.min_samples_per_page);
        let mut rates: Vec<Option<f64>> = vec![Some(f64::INFINITY); self.mappings.len()];
        for e in self.build.stack.entries() {
            let i = self.mappings.partition_point(|m| m.last < e.page);
            if judged == Judged::ForItself {
                let region = self.build.region_of(e.page);
                let thin = region.is_some_and(|r| r.hits + r.misses < min_samples);
                let past_ends =
                    |m: &Mapping| region.is_some_and(|r| r.first < m.first || r.last > m.last);
                if thin || self.mappings.get(i).is_some_and(past_ends) {
                    continue;
                }
            }
            if let Some(rate) = rates.get_mut(i).filter(|_| self.mappings[i].holds(e.page)) {
                *rate = rate
                    .filter(|_| streaming.contains(&e.page))
                    .map(|r| r.min(e.miss_rate));
            }
        }
        let mut left = match self.llc_room_pages {
            0 => WHOLE_STREAM_MAX_PAGES,
            room => WHOLE_STREAM_MAX_LLCS * (room + self.buffer_pages()),
        };
        let mut unreached = Vec::new();
        for (m, rate) in self.mappings.iter().zip(rates) {
            let Some(rate) = rate.filter(|r| r.is_finite()) else {
                continue;
            };
            // The runs of the mapping's pages between the profile's regions.
            let mut page = m.first.0;
            let after = self.build.regions.partition_point(|r| r.last < m.first);
            let inside = self.build.regions[after..]
                .iter()
                .take_while(|r| r.first <= m.last);
            let ends = inside.map(|r| (r.first.0, r.last.0 + 1));
            for (next, resume) in ends.chain([(m.last.0 + 1, m.last.0 + 1)]) {
                let end = next.min(page + left);
                if end > page {
                    unreached.push(Region {
                        first: VirtPage(page),
                        last: VirtPage(end - 1),
                        sampled_pages: 0,
                        hits: 0,
                        misses: 0,
                        miss_rate: rate,
                    });
                    left -= end - page;
                }
                page = page.max(resume);
            }
        }
        unreached
    }

    /// `streams` followed by the pages of `unreached` ([`Controller::unreached_streams`]),
    /// which rank below the sampled ones at their region's rate and join the build as
    /// regions without samples, so that later moves know them.
    fn take_whole(&mut self, streams: Vec<StackEntry>, unreached: Vec<Region>) -> Vec<StackEntry> {
        let mut all = streams;
        for region in unreached {
            all.extend((region.first.0..=region.last.0).map(|p| StackEntry {
                page: VirtPage(p),
                hits: 0,
                misses: 0,
                miss_rate: region.miss_rate,
            }));
            self.build.regions.push(region);
        }
        self.build.regions.sort_by_key(|r| r.first);
        all
    }

    /// How many of the stack's top pages (nearly) only miss: a miss rate within
    /// `region_merge_tolerance` of 1, what a stream's pages read.
    fn streaming_top(&self) -> usize {
        let least = 1.0 - self.knobs.region_merge_tolerance;
        let entries = self.build.stack.entries();
        entries.iter().take_while(|e| e.miss_rate >= least).count()
    }

    /// Whether the profile so far already says there is nothing to win: its promise is
    /// under `min_promise`, and no other target of the LLC has reused data that misses
    /// (the search would be for theirs). More windows add pages to the stack, not reuse
    /// to the regions: a stream's pages keep coming, and a profile that waited for them
    /// would pay for samples that cannot change its verdict.
    pub(super) fn promises_nothing(&self, context: &WindowContext) -> bool {
        if for_others(context) {
            return false;
        }
        let build = build_stack(&self.profile, &self.region_params());
        self.promise_of(&build) < self.knobs.min_promise
    }

    /// A search of the top of the stack worth confining
    /// ([`crate::MissRateStack::worth_confining`]; linear search: the whole stack) over its
    /// region boundaries and, for a target alone on its LLC whose stack holds more pages
    /// than [`FIT_SHARE`] of the LLC's room outside the pollute buffer, the fit point: the
    /// `k` that leaves that many unconfined.
    /// A loop over more data than the cache holds misses on every pass; confined in part,
    /// the rest fits and hits, and the best `k` lies inside its region, where no boundary
    /// is (random run 117: boundaries at 8 and 119 of 132 pages, the oracle's best k 47).
    /// Not beside sharers: the extra probe's moves then fell on tenants that ran for only
    /// part of the search, and 24 more shared runs of random.md left a tenant below 0.95
    /// of its speed (NOTES session 26).
    fn new_search(&self) -> Search {
        // Linear search is Algorithm 1 as the paper has it: down the whole stack.
        let worth = match self.knobs.search {
            SearchMode::Adaptive => self.build.stack.worth_confining(),
            SearchMode::Linear => self.build.stack.len(),
        };
        let boundaries = self
            .build
            .stack
            .boundaries()
            .into_iter()
            .filter(|&b| b < worth)
            .collect();
        let mut search = Search::new(&self.knobs, worth, boundaries);
        // The fit point of the whole stack: the pages below those worth confining take
        // the LLC's room too (random.md's run 117: its fit point 48 of 132 pages, the
        // oracle's best 47; counted from the 123 worth confining, 39 lost 3%).
        let stack = self.build.stack.len();
        let fits = (self.llc_room_pages as f64 * FIT_SHARE) as usize;
        if self.sharers_now.is_empty() && self.llc_room_pages > 0 && stack > fits {
            search.probe_fit_point(stack - fits);
        }
        search
    }

    fn region_params(&self) -> RegionParams {
        RegionParams {
            min_samples: self.knobs.min_samples_per_page,
            tolerance: self.knobs.region_merge_tolerance,
            max_gap: self.knobs.region_max_gap,
        }
    }

    /// The remembered phase whose confined pages are (nearly all) the top pages of the new
    /// stack: its `k` on this stack, and the IPC that `k` must reach to be kept.
    fn recall(&self) -> Option<(usize, f64)> {
        let n = self.build.stack.len();
        self.remembered.iter().find_map(|r| {
            let k = r.pages.len();
            if k == 0 || k > n {
                return None;
            }
            let top: HashSet<VirtPage> = self.build.stack.top(k).collect();
            (overlap(&r.pages, &top) >= RECALL_OVERLAP).then_some((
                k,
                r.baseline_ipc + RECALL_GAIN_SHARE * (r.ipc - r.baseline_ipc),
            ))
        })
    }

    /// Pages a probe at `k` moves from the current placement (see
    /// [`PageLedger::moves_needed`]).
    fn pages_to_move(&self, k: usize) -> usize {
        let seen = seen_by(&self.build, &self.profile);
        self.pages.moves_needed(&self.build.stack, k, &seen)
    }

    /// Issue the next batch (within the window's page budget) of the moves that make the
    /// confined set the top `k` of the stack. Returns true when, once this batch is done,
    /// the placement is complete: the next window measures `k`.
    fn move_towards(&mut self, k: usize, settled: bool, out: &mut Vec<Action>) -> bool {
        let moves = {
            let seen = seen_by(&self.build, &self.profile);
            self.pages
                .moves_towards(&self.build.stack, k, &seen, settled)
        };
        if moves.issued > 0 {
            self.skip_window = true;
            let now = self.stats.windows;
            if let Some(run) = self.run_mut() {
                run.moved_at = Some(now);
                run.moved_pages = moves.issued;
            }
        }
        out.extend(moves.actions);
        moves.complete
    }
}

/// Where a stack's pages over-fill the colours they are on.
#[derive(Debug, Default, PartialEq)]
struct ColourOverflow {
    /// The over-full ordinary colours, the least over-full first.
    by_colour: Vec<OverFullColour>,
    /// The stack's pages on the pollute colours.
    buffer: OverFullColour,
}

/// Pages of a stack on one colour.
#[derive(Debug, Default, PartialEq)]
struct OverFullColour {
    /// How many of the stack's pages are on it.
    pages: u64,
    /// The pages beyond what it holds (those that missed most in the profile first); on
    /// the pollute colours, every page of the stack there.
    over: Vec<VirtPage>,
    /// The profile's misses on its pages beyond what pages miss on colours that are not
    /// over-full (see [`colour_overflow`]).
    excess_misses: f64,
    /// The same, on the pages that stay on the colour when `over` leave it.
    staying_misses: f64,
    /// The profile's hits on `over`: what they lose when they miss in the buffer.
    over_hits: u64,
}

/// What relieving over-full colours first means for a search (see
/// [`Controller::colour_relief`]).
#[derive(Debug)]
struct ColourRelief {
    /// The pages to move first: those beyond what their colours hold.
    pages: Vec<VirtPage>,
    /// The first probe: `pages`, or one page when only the buffer is over-full.
    k: usize,
    /// Colours relieved.
    colours: usize,
    /// The program's pages on the pollute colours when they over-fill the buffer.
    buffer_over_full: Option<u64>,
    /// Probes move the program's pages on the pollute colours out: they over-fill the
    /// buffer, or leave too little room in it for `pages`.
    squatters_out: bool,
    /// A loop fit ([`Controller::loop_fit`]): how many of `pages` are the program's pages
    /// on the pollute colours, confined where they are.
    staying_in_buffer: Option<usize>,
    /// A loop fit: the cycles one pass over the stack takes.
    loop_pass: Option<u64>,
    /// What relieving could win: the share of the sampled LLC loads that miss on the
    /// pages of the colours relieved beyond what pages miss on colours that fit.
    promise: f64,
}

/// The LLC loads sampled on the pages of `stack`: what a relief's promise is a share of.
fn sampled_loads(stack: &MissRateStack) -> u64 {
    stack.entries().iter().map(|e| e.hits + e.misses).sum()
}

/// The pages of `stack` beyond what their colour holds (`per_colour` pages), on the
/// ordinary colours (`colours` maps pages to their frames' colours; pages it does not name
/// are left out): from each over-full colour, as many as it holds too many, those that
/// missed most in the profile first. And the stack's pages on the pollute colours.
///
/// What relieving a colour could win is what its pages miss beyond what pages miss on the
/// colours that hold no more than fit, counted on the pages that look reused (at least
/// `reused_loads` sampled loads): a loop over an over-full colour misses on every pass
/// where the array's other pages hit, but pages loaded at random miss about as often on
/// any colour, and moving them wins nothing.
fn colour_overflow(
    stack: &MissRateStack,
    colours: &BTreeMap<VirtPage, Colour>,
    pollute: &[Colour],
    per_colour: u64,
    reused_loads: Option<u64>,
) -> ColourOverflow {
    let mut on: BTreeMap<Colour, Vec<(usize, &StackEntry)>> = BTreeMap::new();
    let mut buffer = Vec::new();
    for (rank, e) in stack.entries().iter().enumerate() {
        match colours.get(&e.page) {
            Some(c) if pollute.contains(c) => buffer.push((rank, e)),
            Some(&c) => on.entry(c).or_default().push((rank, e)),
            None => {}
        }
    }
    let per_colour = per_colour as usize;
    let (mut full, fitting): (Vec<_>, Vec<_>) =
        on.into_values().partition(|pages| pages.len() > per_colour);
    let reused = |e: &StackEntry| reused_loads.is_some_and(|least| e.hits + e.misses >= least);
    let (mut misses, mut loads) = (0, 0);
    for &(_, e) in fitting.iter().flatten().filter(|(_, e)| reused(e)) {
        misses += e.misses;
        loads += e.hits + e.misses;
    }
    let fitting_rate = if loads == 0 {
        0.0
    } else {
        misses as f64 / loads as f64
    };
    let excess = |pages: &[(usize, &StackEntry)]| -> f64 {
        let reused = pages.iter().map(|&(_, e)| e).filter(|e| reused(e));
        let beyond = reused.map(|e| e.misses as f64 - (e.hits + e.misses) as f64 * fitting_rate);
        beyond.sum::<f64>().max(0.0)
    };
    full.sort_by_key(|pages| pages.len());
    let by_colour = full
        .into_iter()
        .map(|mut pages| {
            let over = pages.len() - per_colour;
            pages.sort_by(|a, b| b.1.misses.cmp(&a.1.misses).then(a.0.cmp(&b.0)));
            OverFullColour {
                pages: pages.len() as u64,
                over: pages.iter().take(over).map(|(_, e)| e.page).collect(),
                excess_misses: excess(&pages),
                staying_misses: excess(&pages[over..]),
                over_hits: pages[..over].iter().map(|(_, e)| e.hits).sum(),
            }
        })
        .collect();
    let buffer = OverFullColour {
        pages: buffer.len() as u64,
        over: buffer.iter().map(|(_, e)| e.page).collect(),
        excess_misses: excess(&buffer),
        staying_misses: 0.0,
        // They stay where they are: nothing to lose.
        over_hits: 0,
    };
    ColourOverflow { by_colour, buffer }
}

/// A set of pids as the controller's reasons name them: "pid 1, pid 2", or "none".
pub(super) fn pids(set: &BTreeSet<Pid>) -> String {
    if set.is_empty() {
        return "none".to_string();
    }
    let named: Vec<String> = set.iter().map(|p| format!("pid {p}")).collect();
    named.join(", ")
}

/// Whether the current profile saw a page. Confined pages it did not see stay where they
/// are: a page this phase does not touch costs nothing in the pollute buffer, and the
/// phase that confined it finds it there when it comes back.
fn seen_by<'a>(build: &'a StackBuild, profile: &'a PageProfile) -> impl Fn(&VirtPage) -> bool + 'a {
    |p| build.contains(*p) || profile.get(*p).is_some()
}

/// The share of `a` that is also in `b`.
fn overlap(a: &HashSet<VirtPage>, b: &HashSet<VirtPage>) -> f64 {
    if a.is_empty() {
        return 0.0;
    }
    a.iter().filter(|p| b.contains(p)).count() as f64 / a.len() as f64
}

/// Whether a search of this target could be for the others' gain: it is judged by its LLC
/// group, and another sharer has reused data that misses.
fn for_others(context: &WindowContext) -> bool {
    context.group.is_some() && context.sharers_miss
}

/// Whether windows measured in a row at one placement left their first window's level in
/// IPC and in MPKI (see [`left_level`]). A search's windows at k = 0 that do so measured a
/// phase its profile did not see (random.md's run 479: a tenant profiled at IPC 0.16 and
/// MPKI 18, whose search then read 0.016 and MPKI 345 twice, judged its windows too noisy
/// to search, and stayed steady in that phase unprofiled, where the oracle made the pair
/// 1.85 times as fast).
fn changed_level(ipcs: &[f64], mpkis: &[f64], band: f64) -> bool {
    left_level(ipcs, band, 0.0) && left_level(mpkis, band, MPKI_FLOOR)
}

/// Where a search's measured windows' LLC references per kilo-instruction, in order, left
/// the first window's level (see [`left_level`]), whatever the placements: the first of
/// the windows outside it since the last within. The references are the loads that miss
/// the caches above the LLC, which a placement in the LLC changes little (only through a
/// private cache whose sets the pollute colours also narrow): the program's mix changed,
/// and the windows from there on measured another phase (random.md's run 274: a tenant's
/// stream ended one window into its search's probe of k = 116, its references fell from
/// 291 to 177 per kilo-instruction, and the probes' IPC 0.064 against k = 0's 0.048 was
/// the next phase's, where k = 0 ran at 0.28; the search kept 172 pages, and the tenant
/// ran at 0.818 of off).
fn mix_changed(apki: &[f64], band: f64) -> Option<usize> {
    if !left_level(apki, band, MPKI_FLOOR) {
        return None;
    }
    let within = apki
        .iter()
        .rposition(|&x| !outside(apki[0], x, band, MPKI_FLOOR));
    Some(within.map_or(0, |i| i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(pages: &[(u64, u64)]) -> MissRateStack {
        MissRateStack::from_entries(
            pages
                .iter()
                .map(|&(page, misses)| StackEntry {
                    page: VirtPage(page),
                    hits: 4 - misses,
                    misses,
                    miss_rate: 0.5,
                })
                .collect(),
        )
    }

    #[test]
    fn the_pages_a_colour_holds_too_many_are_those_that_missed_most() {
        // Colours of 2 pages; colour 1 has 4 (2 too many), colour 2 has 3 (1 too many),
        // colour 3 has 2, and colour 9 is the buffer's. Each page was loaded 4 times.
        let pages = |fitting_misses| {
            stack(&[
                (1, 1),
                (2, 4),
                (3, 3),
                (4, 0),
                (5, 0),
                (6, 2),
                (7, 1),
                (8, fitting_misses),
                (9, fitting_misses),
                (10, 4),
            ])
        };
        let colours: BTreeMap<VirtPage, Colour> = [
            (1, 1),
            (2, 1),
            (3, 1),
            (4, 1),
            (5, 2),
            (6, 2),
            (7, 2),
            (8, 3),
            (9, 3),
            (10, 9),
        ]
        .into_iter()
        .map(|(p, c)| (VirtPage(p), Colour(c)))
        .collect();
        let o = colour_overflow(&pages(0), &colours, &[Colour(9)], 2, Some(1));
        // The least over-full colour first; within a colour, the most misses first.
        let over: Vec<_> = o.by_colour.iter().map(|c| c.over.clone()).collect();
        assert_eq!(
            over,
            vec![vec![VirtPage(6)], vec![VirtPage(2), VirtPage(3)]]
        );
        // The pages of colour 3, which is not over-full, always hit: what relieving a
        // colour could win is every miss on its pages.
        let excess: Vec<_> = o.by_colour.iter().map(|c| c.excess_misses).collect();
        assert_eq!(excess, vec![2.0 + 1.0, 1.0 + 4.0 + 3.0]);
        assert_eq!((o.buffer.pages, o.buffer.excess_misses), (1, 4.0));
        assert_eq!(o.buffer.over, vec![VirtPage(10)]);
        // Moved out, pages 6, 2 and 3 lose their hits (2, 0 and 1 of 4 loads); pages 5
        // and 7 staying on colour 2 would turn 1 miss into a hit, pages 1 and 4 on
        // colour 1 another 1: what a loop fit weighs.
        let lost: Vec<_> = o.by_colour.iter().map(|c| c.over_hits).collect();
        assert_eq!(lost, vec![2, 1]);
        let staying: Vec<_> = o.by_colour.iter().map(|c| c.staying_misses).collect();
        assert_eq!(staying, vec![1.0, 1.0]);
        // Where they miss half their loads too, the over-full colours miss no more than
        // a colour that fits: relieving them wins nothing.
        let o = colour_overflow(&pages(2), &colours, &[Colour(9)], 2, Some(1));
        let excess: Vec<_> = o.by_colour.iter().map(|c| c.excess_misses).collect();
        assert_eq!(excess, vec![0.0, 0.0]);
        // Pages that do not look reused win nothing either.
        let o = colour_overflow(&pages(0), &colours, &[Colour(9)], 2, None);
        assert!(o.by_colour.iter().all(|c| c.excess_misses == 0.0));
        // With colours of 4 pages nothing is over-full.
        assert!(
            colour_overflow(&pages(0), &colours, &[Colour(9)], 4, Some(1))
                .by_colour
                .is_empty()
        );
    }

    #[test]
    fn a_page_looks_reused_when_loaded_about_as_often_as_the_pages_that_hit() {
        let entry = |page, hits, misses| StackEntry {
            page: VirtPage(page),
            hits,
            misses,
            miss_rate: misses as f64 / (hits + misses) as f64,
        };
        // The pages that hit were loaded 8, 10 and 12 times: a page needs 5.
        let s = MissRateStack::from_entries(vec![
            entry(1, 0, 9),
            entry(2, 0, 1),
            entry(3, 4, 4),
            entry(4, 9, 1),
            entry(5, 6, 6),
        ]);
        assert_eq!(s.reused_loads(), Some(5));
        // A stack where nothing hits has nothing reused.
        let streams = MissRateStack::from_entries(vec![entry(1, 0, 9), entry(2, 0, 1)]);
        assert_eq!(streams.reused_loads(), None);
    }

    #[test]
    fn a_search_sees_its_programs_mix_change_only_once_it_settles() {
        // Run 274's tenant: 291 references per kilo-instruction at k = 0, 177 from its
        // probe of k = 116 on; the change began with the window that read 202.5.
        assert_eq!(
            mix_changed(&[290.1, 291.4, 202.5, 177.1, 177.0], 0.15),
            Some(2)
        );
        // One window off is not a change, nor two that disagree, nor a return.
        assert_eq!(mix_changed(&[290.1, 291.4, 177.1], 0.15), None);
        assert_eq!(mix_changed(&[290.1, 177.1, 120.0], 0.15), None);
        assert_eq!(mix_changed(&[290.1, 177.1, 291.0], 0.15), None);
        assert_eq!(
            mix_changed(&[290.1, 177.1, 291.0, 177.0, 176.0], 0.15),
            Some(3)
        );
        // Within the band, however the placement moved the IPC.
        assert_eq!(mix_changed(&[748.5, 748.6, 700.0, 690.0], 0.15), None);
        // A program that reaches the LLC hardly at all: judged against the floor.
        assert_eq!(mix_changed(&[0.1, 0.2, 0.25], 0.15), None);
    }
}
