//! The controller of one target: a sans-IO state machine.
//!
//! Observations go in ([`Controller::on`]), actions come out; the controller never reads a
//! clock, a counter or a file. The driver ([`crate::Driver`]) carries the actions to the
//! platform traits and brings the results back:
//!
//! - at the end of every window: first the window's samples ([`Observation::Samples`]) and
//!   sample loss, then its counters ([`Observation::Window`], or through the
//!   [`crate::Engine`] that owns the controller);
//! - every [`Action::Migrate`] gets its [`Observation::Migrated`] report before the next
//!   window ends (a window that ends with a report outstanding is not used as a
//!   measurement);
//! - every [`Action::Query`] gets its [`Observation::Colours`] report (the search waits for
//!   it);
//! - [`Action::StartSampling`] and [`Action::StopSampling`] take effect for the next window.
//!
//! States (DESIGN.md 4): Observe → Profile → Search → Steady, and Steady → Profile on a
//! phase change; Paused on the operator's command; Exited when the target is gone. Each
//! state carries its own data ([`Stage`]); the pages' whereabouts are the [`ledger`]'s, the
//! search's steps are in [`searching`].

mod budget;
mod group;
mod ledger;
mod messages;
mod searching;

use std::collections::{BTreeSet, VecDeque};

pub use messages::{
    Action, ColourReport, Command, Event, EventKind, MemberWindow, MigrationReport, Observation,
    SharerPace, State, Stats, Turn, WindowContext,
};

use crate::knobs::{KnobError, Knobs};
use crate::phase::{OwnLoads, PhaseDetector, PhaseVerdict};
use crate::regions::{Region, StackBuild};
use crate::search::Search;
use crate::{
    CacheGeometry, Colour, CounterDelta, DataSource, Mapping, MemSample, MissRateStack,
    PageProfile, Pid, SamplingPlan, VirtPage,
};
pub use budget::SharedSpending;
use budget::Spending;
use ledger::PageLedger;
use searching::{PhaseMemory, SearchRun};

/// Steady windows without phase watch after a search that confined nothing (doubling for
/// each such search in a row, up to the maximum).
const FRUITLESS_COOLDOWN: u32 = 8;
const FRUITLESS_COOLDOWN_MAX: u32 = 512;

/// Most events kept in the history (the oldest go first).
const HISTORY_CAP: usize = 4096;

/// Unsampled windows kept to tell how much a target's window scatters before a profile.
const UNSAMPLED_KEPT: usize = 8;

/// At most this many windows are waited for a target's cache to settle after another
/// target's moves before it may profile.
const SETTLING_WINDOWS_MAX: u32 = 4;

/// Where the controller is, with what only that state needs.
#[derive(Clone, Debug)]
enum Stage {
    Observe {
        /// Windows in a row that missed enough to be worth profiling.
        streak: u32,
        /// Wanted to profile while the turn was withheld (and said so once).
        waiting: bool,
        /// Windows left to wait for the cache to settle after another target's moves:
        /// until two windows in a row agree on the IPC, none counts towards a profile
        /// (see [`Controller::observe_window`]).
        settling: u32,
    },
    Profile {
        /// Windows profiled so far.
        windows: u32,
        /// Pages in the profile at the end of the previous profile window.
        pages_seen: usize,
        /// The IPC of each profile window in which the target ran, by window number: how
        /// much the target's IPC drifts on its own, with no page moved.
        ipcs: Vec<(u64, f64)>,
        /// The IPC of the last window before the profile that ran unsampled: what a
        /// profile window runs slower than it is what profiling costs.
        reference_ipc: Option<f64>,
        /// Over the profile's windows: cycles, and what they cost.
        cycles: u64,
        cost: ProfileCost,
        /// A profile that ended on its cost before it had seen the program whole, taken
        /// up again (see [`Deferred`]): it goes on while its promise pays for it.
        continued: bool,
    },
    /// Boxed: a search's state is many times the size of the other stages'.
    Search(Box<SearchRun>),
    Steady {
        /// Windows observed in this Steady stretch.
        windows: u32,
        /// Steady windows to wait before watching for phase changes.
        cooldown: u32,
        phase: PhaseDetector,
        /// The program's own loads, which tell its phase while another's search holds the
        /// turn.
        loads: OwnLoads,
    },
    Paused {
        /// Confined pages are being moved back, a budget's worth per window.
        restoring: bool,
    },
    Exited,
}

impl Stage {
    fn state(&self) -> State {
        match self {
            Stage::Observe { .. } => State::Observe,
            Stage::Profile { .. } => State::Profile,
            Stage::Search(_) => State::Search,
            Stage::Steady { .. } => State::Steady,
            Stage::Paused { .. } => State::Paused,
            Stage::Exited => State::Exited,
        }
    }

    fn observe() -> Stage {
        Stage::Observe {
            streak: 0,
            waiting: false,
            settling: 0,
        }
    }
}

/// The LLC references per kilo-instruction of a profile's windows, each weighted by the
/// samples it added: the mix of loads in which the stack ranks its pages.
#[derive(Clone, Copy, Debug, Default)]
struct ProfileMix {
    weighted_apki: f64,
    weight: u64,
    /// The profile's samples counted so far.
    counted: u64,
}

impl ProfileMix {
    /// A profile window that ran at `apki`, after which the profile holds `samples`.
    fn window(&mut self, apki: f64, samples: u64) {
        let added = samples.saturating_sub(self.counted);
        self.counted = samples;
        self.weighted_apki += apki * added as f64;
        self.weight += added;
    }

    fn apki(&self) -> Option<f64> {
        (self.weight > 0).then(|| self.weighted_apki / self.weight as f64)
    }
}

/// A profile that ended on its cost while each window still found many new pages.
#[derive(Clone, Copy, Debug)]
struct ProfileCut {
    windows: u32,
    /// What one of its windows cost the target, on average (cycles).
    window_cost: f64,
}

/// An attempt whose profile ended on its cost before it had seen the program whole, and
/// whose search the cost rule then stopped, having found no gain, before a probe it had
/// not measured: both costs were judged against the cycles run so far, and early in a long
/// run those are few. The profile is taken up again once the target has run long enough
/// for the promise to pay for the rest of it and that probe's moves, and a search over the
/// whole stack follows. A phase change or a change of sharers drops it.
#[derive(Clone, Copy, Debug)]
struct Deferred {
    profile: ProfileCut,
    /// What the refused probe's moves cost (cycles).
    moves: f64,
    /// The target's MPKI at k = 0 in the search: the misses its promise is a share of.
    mpki: f64,
}

/// The load latencies a profile's LLC samples carry (PEBS, IBS and SPE report them; the
/// simulator reports the cycles a load stalled its program): what a miss costs beyond a
/// hit. Samples without a latency (software events) are not counted.
#[derive(Clone, Copy, Debug, Default)]
struct SampledLatency {
    hits: u64,
    hit_cycles: u64,
    misses: u64,
    miss_cycles: u64,
}

impl SampledLatency {
    fn record(&mut self, sample: &MemSample) {
        let (count, cycles) = match sample.source {
            DataSource::LlcHit => (&mut self.hits, &mut self.hit_cycles),
            DataSource::LlcMiss => (&mut self.misses, &mut self.miss_cycles),
            DataSource::Other => return,
        };
        if sample.weight > 0 {
            *count += 1;
            *cycles += u64::from(sample.weight);
        }
    }

    /// The cycles a load saves that hits where it missed: the mean miss's latency less the
    /// mean hit's (all of it when no sampled load hit). `None` without a sampled miss.
    fn miss_cost(&self) -> Option<f64> {
        let mean = |cycles: u64, n: u64| cycles as f64 / n as f64;
        let hit = if self.hits > 0 {
            mean(self.hit_cycles, self.hits)
        } else {
            0.0
        };
        (self.misses > 0).then(|| (mean(self.miss_cycles, self.misses) - hit).max(0.0))
    }
}

/// The controller of one target.
#[derive(Clone, Debug)]
pub struct Controller {
    pid: Pid,
    knobs: Knobs,
    pollute: Vec<Colour>,
    stage: Stage,
    sampling: bool,
    profile: PageProfile,
    build: StackBuild,
    /// The search in progress or the last one, with its measurements.
    search: Option<Search>,
    /// Results of earlier fruitful searches, newest first: a phase that comes back is
    /// recognised by its stack and tries its old `k` first.
    remembered: VecDeque<PhaseMemory>,
    pages: PageLedger,
    /// What the last profile promised ([`Controller::last_promise`]).
    promise: Option<f64>,
    /// The target's mappings as last read while it was sampled (empty: unknown).
    mappings: Vec<Mapping>,
    /// The share of the target's cycles that turning all of its LLC loads from misses
    /// into hits would save, by the last profile's load latencies: what turns a promise
    /// (a share of loads) into a share of cycles. `None` when the samples carry no
    /// latency (software events).
    cycles_per_load_share: Option<f64>,
    /// Searches in a row that confined nothing.
    fruitless: u32,
    /// What attempts (a profile and its search) cost, and when the next may start.
    spending: Spending,
    /// The share of its cycles the last profile's sampling cost (`None` before the
    /// first): what the next attempt's profile is expected to cost a window. How much
    /// slower its windows ran is not counted: that depends as much on the phase they fell
    /// in (random-tiny-a70abc49 at the machine's costs: a profile across a phase change
    /// cost 0.9 M cycles, and a retry that counted it waited out the phase its search had
    /// gained 141% in, 1.32 -> 1.00 of off).
    profile_sampling_share: Option<f64>,
    /// What the other targets of the LLC spent on fruitless attempts, as of the last window.
    sharers_spending: SharedSpending,
    /// The last profile ended on its cost before it had seen the program whole.
    profile_cut: Option<ProfileCut>,
    /// An attempt to take up again when the target can afford it.
    deferred: Option<Deferred>,
    /// CPU time the platform says sampling cost since the last window.
    sampling_ns: u64,
    /// The other targets of the LLC the kept placement was chosen for (empty when it is
    /// this target's own; see `Controller::undo_for_sharers`).
    beneficiaries: BTreeSet<Pid>,
    /// The kept placement's `k`, and the other targets of the LLC that ran while it was
    /// measured (see `Controller::reverify`).
    placed: Option<(usize, BTreeSet<Pid>)>,
    /// A target the kept placement was measured beside no longer runs: the placement is
    /// to be measured again once the turn is free and the budget allows.
    reverify_due: bool,
    /// Said that the re-verification waits for the budget (once per change of sharers).
    reverify_waits: bool,
    /// The other targets of the LLC that ran in the last window.
    sharers_now: BTreeSet<Pid>,
    /// The IPC of the last window that ran unsampled with no search under way.
    unsampled_ipc: Option<f64>,
    /// The IPC of the last windows (at most [`UNSAMPLED_KEPT`]) that ran unsampled with no
    /// search under way, since pages last moved or the phase changed: how much a window
    /// scatters on its own.
    unsampled_ipcs: VecDeque<f64>,
    /// The oldest of `unsampled_ipcs` is the target's first window: its start-up (first
    /// touches, compulsory misses) says nothing of a trend, so it is left out of one.
    unsampled_from_start: bool,
    /// A move was made just before this window: not a clean phase reference.
    skip_window: bool,
    /// Lines the LLC holds ([`Controller::set_llc`]; 0: unknown).
    llc_lines: u64,
    /// Pages of data the LLC holds outside the pollute buffer ([`Controller::set_llc`];
    /// 0: unknown).
    llc_room_pages: u64,
    /// How many pages one colour of the LLC holds (its ways, in every slice); 0 until the
    /// platform says what the LLC is.
    colour_pages: u64,
    /// The platform switches a prefetcher off while it samples
    /// ([`Controller::set_sampling_pauses_prefetch`]).
    sampling_pauses_prefetch: bool,
    /// LLC misses of this target and the others sharing its LLC since it was attached.
    llc_misses_seen: u64,
    /// LLC references the target made in the current profile's windows: with the
    /// profile's LLC samples, how many loads each sample stands for.
    profile_llc_references: u64,
    /// Cycles the target ran in the current profile's windows.
    profile_cycles: u64,
    /// The latencies of the current profile's LLC samples.
    profile_latency: SampledLatency,
    /// The mix of loads the current profile's samples were taken in.
    profile_mix: ProfileMix,
    /// The attempt in progress has profiled again once, its first profile being of
    /// another phase (see `Controller::profile_again`).
    profiled_again: bool,
    history: VecDeque<Event>,
    stats: Stats,
}

impl Controller {
    /// A controller for `pid` on a machine with pages of `1 << page_shift` bytes and an LLC
    /// of `colours` colours. Refuses contradictory knobs.
    pub fn new(pid: Pid, knobs: Knobs, page_shift: u32, colours: u32) -> Result<Self, KnobError> {
        knobs.validate(colours)?;
        if !(12..=30).contains(&page_shift) {
            return Err(KnobError::PageShift(page_shift));
        }
        let pollute = knobs.pollute_colours.resolve(colours)?;
        let ordinary = (0..colours)
            .map(Colour)
            .filter(|c| !pollute.contains(c))
            .collect();
        Ok(Controller {
            pid,
            pollute,
            stage: Stage::observe(),
            sampling: false,
            profile: PageProfile::new(page_shift),
            build: StackBuild::default(),
            search: None,
            remembered: VecDeque::new(),
            pages: PageLedger::new(knobs.page_budget, ordinary),
            promise: None,
            mappings: Vec::new(),
            cycles_per_load_share: None,
            fruitless: 0,
            spending: Spending::default(),
            profile_sampling_share: None,
            sharers_spending: SharedSpending::default(),
            profile_cut: None,
            deferred: None,
            sampling_ns: 0,
            beneficiaries: BTreeSet::new(),
            placed: None,
            reverify_due: false,
            reverify_waits: false,
            sharers_now: BTreeSet::new(),
            unsampled_ipc: None,
            unsampled_ipcs: VecDeque::new(),
            unsampled_from_start: true,
            llc_lines: 0,
            llc_room_pages: 0,
            colour_pages: 0,
            sampling_pauses_prefetch: false,
            llc_misses_seen: 0,
            profile_llc_references: 0,
            profile_cycles: 0,
            profile_latency: SampledLatency::default(),
            profile_mix: ProfileMix::default(),
            profiled_again: false,
            skip_window: false,
            history: VecDeque::new(),
            stats: Stats::default(),
            knobs,
        })
    }

    /// The platform says what the LLC is. Until the target and those sharing its LLC have
    /// missed as many times as it has lines since the target was attached, its misses may
    /// be first touches of a cache still filling, which no placement turns into hits, and
    /// it does not profile: on a 32 MiB LLC a program's first windows miss on a cold
    /// cache, and a profile then (the L2 prefetcher off while it samples) cost real
    /// programs that could gain nothing 0.4-1.2% of their run. The pages it holds outside
    /// the pollute buffer bound what a profile promises (see `Controller::promise`).
    pub fn set_llc(&mut self, llc: &CacheGeometry) {
        self.llc_lines = llc.size() / llc.line_size.max(1);
        let pages = llc.size() >> self.profile.page_shift();
        let colours = u64::from(llc.colours().max(1));
        let ordinary = colours.saturating_sub(self.pollute.len() as u64);
        self.llc_room_pages = pages * ordinary / colours;
        self.colour_pages = llc.ways * llc.slices;
    }

    /// The platform switches the target's prefetcher off while it samples (as ROCS
    /// profiled, so that streaming pages show their misses): a profile's windows then make
    /// another mix of LLC references than the windows around them.
    pub fn set_sampling_pauses_prefetch(&mut self, pauses: bool) {
        self.sampling_pauses_prefetch = pauses;
    }

    /// What this target spent on fruitless attempts, for its sharers' budget.
    pub fn spent_on_fruitless(&self) -> SharedSpending {
        self.spending.shared()
    }

    /// Whether an attempt that may cost `cycles` fits in the overhead budget the targets
    /// of the LLC share.
    fn affords(&self, cycles: f64) -> bool {
        self.spending
            .affords(self.knobs.overhead_budget, cycles, self.sharers_spending)
    }

    /// Whether a new attempt may start, in windows of `window_cycles`: the first is free;
    /// after one of its own that found nothing, its cost (what that one cost, or its
    /// cheapest form, a profile of `profile_windows` windows each sampled as the last
    /// profile was, whichever is more) must fit in the budget with what fruitless attempts
    /// cost already (see [`Spending::affords_attempt`]).
    fn affords_an_attempt(&self, window_cycles: u64) -> bool {
        self.spending.affords_attempt(
            self.knobs.overhead_budget,
            self.cheapest_attempt(window_cycles),
            self.sharers_spending,
        )
    }

    /// What the cheapest attempt costs in windows of `window_cycles` (see
    /// [`Controller::affords_an_attempt`]).
    fn cheapest_attempt(&self, window_cycles: u64) -> f64 {
        let share = self
            .profile_sampling_share
            .unwrap_or(self.knobs.sample_cpu_budget);
        f64::from(self.knobs.profile_windows) * share * window_cycles as f64
    }

    /// What fruitless attempts on the LLC cost, as a share of the cycles its targets ran,
    /// and the share allowed now.
    fn budget_shares(&self) -> (f64, f64) {
        self.spending
            .shares(self.knobs.overhead_budget, self.sharers_spending)
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    pub fn knobs(&self) -> &Knobs {
        &self.knobs
    }

    /// The colours of the pollute buffer (the platform must be configured with them).
    pub fn pollute_colours(&self) -> &[Colour] {
        &self.pollute
    }

    pub fn state(&self) -> State {
        self.stage.state()
    }

    /// Transitions, search steps and other events, oldest first (the last 4096).
    pub fn history(&self) -> impl ExactSizeIterator<Item = &Event> + '_ {
        self.history.iter()
    }

    /// The current miss-rate stack (empty before the first profile).
    pub fn stack(&self) -> &MissRateStack {
        &self.build.stack
    }

    /// The regions the stack was built from, by address.
    pub fn regions(&self) -> &[Region] {
        &self.build.regions
    }

    /// The profile being collected, or the last one.
    pub fn profile(&self) -> &PageProfile {
        &self.profile
    }

    /// Pages in the pollute buffer now (confirmed by migration reports).
    pub fn confined(&self) -> &BTreeSet<VirtPage> {
        self.pages.confined()
    }

    /// Confined pages that were named ([`Command::Confine`]): outside the search.
    pub fn explicit(&self) -> &BTreeSet<VirtPage> {
        self.pages.explicit()
    }

    /// Ordinary pages found in the pollute colours, not put there by rocs (they are moved
    /// out when a search confines anything, and left alone at k = 0).
    pub fn squatters(&self) -> &BTreeSet<VirtPage> {
        self.pages.squatters()
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// What the last finished profile promised: the share of the target's sampled LLC
    /// loads that a pollute buffer could turn from misses into hits (misses on pages that
    /// are also reused). `None` before the first profile.
    pub fn last_promise(&self) -> Option<f64> {
        self.promise
    }

    /// Whether the controller has asked for sampling and not stopped it.
    pub fn sampling(&self) -> bool {
        self.sampling
    }

    /// Profiling or searching: the turn of its LLC domain is in use.
    pub fn holds_turn(&self) -> bool {
        matches!(self.stage, Stage::Profile { .. } | Stage::Search(_))
    }

    /// Wanted to profile while the turn was withheld, and still waits.
    pub fn waiting_for_turn(&self) -> bool {
        matches!(self.stage, Stage::Observe { waiting: true, .. })
    }

    /// The search in progress or last finished, with its measurements.
    pub fn search(&self) -> Option<&Search> {
        self.search.as_ref()
    }

    /// Feed one observation; carry out the returned actions in order.
    pub fn on(&mut self, obs: Observation<'_>) -> Vec<Action> {
        let mut out = Vec::new();
        if self.stage.state() == State::Exited {
            return out;
        }
        match obs {
            Observation::Window(delta) => self.on_window(delta, WindowContext::default(), &mut out),
            Observation::Samples(samples) => self.on_samples(samples),
            Observation::SampleLoss(loss) => {
                self.stats.samples_lost += loss.lost;
                self.stats.samples_throttled += loss.throttled;
                self.sampling_ns += loss.cpu_ns;
            }
            Observation::Migrated(report) => self.on_migrated(report, &mut out),
            Observation::Colours(report) => self.on_colours(report, &mut out),
            Observation::Mappings(mappings) => self.mappings = mappings,
            Observation::TargetExited => {
                self.stop_sampling(&mut out);
                self.transition(Stage::Exited, "the target exited".into(), &mut out);
            }
            Observation::Command(cmd) => self.on_command(cmd, &mut out),
        }
        out
    }

    /// A window of a target that shares its LLC with others: the counters, and what the
    /// domain adds (the turn, the group's score, a change of sharers).
    pub fn on_shared_window(&mut self, delta: CounterDelta, context: WindowContext) -> Vec<Action> {
        let mut out = Vec::new();
        if self.stage.state() != State::Exited {
            self.on_window(delta, context, &mut out);
        }
        out
    }

    fn on_samples(&mut self, samples: &[MemSample]) {
        if !matches!(self.stage, Stage::Profile { .. }) {
            return;
        }
        for s in samples.iter().filter(|s| s.pid == self.pid) {
            self.profile.record(s.vaddr, s.source);
            self.profile_latency.record(s);
            self.stats.samples += 1;
        }
    }

    fn on_window(&mut self, delta: CounterDelta, context: WindowContext, out: &mut Vec<Action>) {
        self.stats.windows += 1;
        self.pages.new_window(self.knobs.page_budget);
        match &mut self.stage {
            Stage::Observe {
                streak,
                waiting,
                settling,
            } if *waiting && context.turn == Turn::Granted => {
                // The holder's moves changed this target's cache: what made it want to
                // profile may no longer hold. Look again from the new placement, once it
                // has settled.
                *waiting = false;
                *streak = 0;
                *settling = SETTLING_WINDOWS_MAX;
            }
            Stage::Steady { phase, .. } if context.sharers_changed => {
                // Learn the phase reference again under the new mix.
                phase.reset();
            }
            _ => {}
        }
        self.llc_misses_seen = self
            .llc_misses_seen
            .saturating_add(delta.llc_misses)
            .saturating_add(context.sharer_misses);
        self.sharers_now.clone_from(&context.running_sharers);
        self.sharers_spending = context.sharers_spending;
        // A window in which the target did not run says nothing about it.
        let ran = delta.cycles > 0 && delta.instructions > 0;
        let sampling_ns = std::mem::take(&mut self.sampling_ns);
        if ran {
            self.spending.window(delta.cycles);
            let sampling = self.sampling_cycles(&delta, sampling_ns);
            match &mut self.stage {
                Stage::Profile {
                    reference_ipc,
                    cycles,
                    cost,
                    ..
                } => {
                    *cycles += delta.cycles;
                    self.profile_llc_references += delta.llc_references;
                    self.profile_cycles += delta.cycles;
                    let before = cost.spent();
                    cost.slower += slower_than(&delta, *reference_ipc);
                    cost.sampling += sampling;
                    self.spending.spent(cost.spent() - before);
                    // `cycles` is not 0: the target ran.
                    self.profile_sampling_share = Some(cost.sampling / *cycles as f64);
                }
                Stage::Observe { .. } | Stage::Steady { .. } => {
                    self.unsampled_ipc = Some(delta.ipc());
                    // Kept while another target of the LLC holds the turn too: its probes
                    // only widen the scatter, which raises the bar a profile's early end
                    // must clear.
                    if self.unsampled_ipcs.len() == UNSAMPLED_KEPT {
                        self.unsampled_from_start = false;
                        self.unsampled_ipcs.pop_front();
                    }
                    self.unsampled_ipcs.push_back(delta.ipc());
                }
                _ => {}
            }
        }
        // The window is charged to the stage it ran in (a profile's sampling included)
        // before a change of sharers ends that stage.
        if context.sharers_changed {
            self.deferred = None;
            self.abandon_attempt(out);
            self.spending.new_mix();
            self.undo_for_sharers(&context.running_sharers, out);
            self.reverify_waits = false;
            self.reverify_due = matches!(self.stage, Stage::Steady { .. })
                && self
                    .placed
                    .as_ref()
                    .is_some_and(|(_, among)| !among.is_subset(&context.running_sharers));
            self.observe_new_mix(out);
        }
        match self.stage.state() {
            State::Observe if ran => self.observe_window(&delta, context.turn, out),
            State::Profile => self.profile_window(&delta, ran, &context, out),
            State::Search => self.search_window(&delta, ran, context.group, out),
            State::Steady if ran => self.steady_window(&delta, context.turn, out),
            State::Paused => {
                if matches!(self.stage, Stage::Paused { restoring: true }) {
                    self.restore_batch(out);
                }
            }
            _ => {}
        }
    }

    /// A target steady with nothing confined decided so under the mix of targets that ran
    /// then: what kept it from confining (a sharer's noise, its pollution, a promise too
    /// small beside it) may be gone with that mix. It is observed afresh, and profiles
    /// again if it still misses enough (random.md's run 490: a tenant whose profiles beside
    /// streaming sharers found nothing reused that missed stayed steady with nothing
    /// confined when they exited, where alone its search kept a third of its stack for
    /// +87%).
    fn observe_new_mix(&mut self, out: &mut Vec<Action>) {
        let nothing_kept = self.placed.is_none() && self.pages.confined().is_empty();
        if !matches!(self.stage, Stage::Steady { .. }) || !nothing_kept {
            return;
        }
        let reason = format!(
            "the targets sharing the LLC changed (now: {}): it kept nothing under the mix \
             before; observed afresh",
            searching::pids(&self.sharers_now)
        );
        self.transition(Stage::observe(), reason, out);
    }

    /// What sampling cost the target in a window: what the platform reported
    /// (`sampling_ns`, at the window's cycles per nanosecond), never more than the plan
    /// allows of the window. A platform that reports no cost, or no time to convert it
    /// with, is charged the plan's cap: a cost unknown is not a cost of zero.
    fn sampling_cycles(&self, delta: &CounterDelta, sampling_ns: u64) -> f64 {
        let cap = self.knobs.sample_cpu_budget * delta.cycles as f64;
        if sampling_ns == 0 || delta.time_running == 0 {
            return cap;
        }
        let cycles_per_ns = delta.cycles as f64 / delta.time_running as f64;
        (sampling_ns as f64 * cycles_per_ns).min(cap)
    }

    /// Whether a window misses enough (both thresholds) to be worth profiling.
    pub fn worth_profiling(&self, delta: &CounterDelta) -> bool {
        miss_rate(delta) >= self.knobs.min_llc_miss_rate && delta.mpki() >= self.knobs.min_mpki
    }

    fn observe_window(&mut self, delta: &CounterDelta, turn: Turn, out: &mut Vec<Action>) {
        let cold = self.llc_misses_seen < self.llc_lines;
        let worth = self.worth_profiling(delta) && !cold;
        let may_try = self.affords_an_attempt(delta.cycles);
        let mut latest = self.unsampled_ipcs.iter().rev();
        let agrees = match (latest.next(), latest.next()) {
            (Some(now), Some(before)) => (now / before - 1.0).abs() <= self.knobs.phase_band,
            _ => false,
        };
        let Stage::Observe {
            streak,
            waiting,
            settling,
        } = &mut self.stage
        else {
            return;
        };
        // After the turn's holder moved pages, this target's cache fills anew over a few
        // windows, and the last of them is the reference a profile's cost is measured
        // against: taken in that transient, it charged a profile for the holder's pages
        // going back (random.md's run 410: a tenant's IPC fell from 0.069 to 0.009 as
        // its sharer's 126 confined pages went back; its profile was charged 2.4% of the
        // LLC's cycles, and the overhead budget kept that sharer, whose search had scored
        // the LLC group 1.37 at k = 126, from searching again for the rest of the run).
        if *settling > 0 {
            *settling = if agrees { 0 } else { *settling - 1 };
            if *settling > 0 {
                *streak = 0;
                return;
            }
        }
        *streak = if worth { *streak + 1 } else { 0 };
        if *streak < self.knobs.observe_windows || !may_try {
            return;
        }
        let reason = format!(
            "LLC miss rate {:.2} ≥ {:.2} and MPKI {:.2} ≥ {:.2} for {} window(s)",
            miss_rate(delta),
            self.knobs.min_llc_miss_rate,
            delta.mpki(),
            self.knobs.min_mpki,
            streak
        );
        // Profile now if the turn allows it; otherwise wait, and say so once.
        match turn {
            Turn::Granted => self.start_profile(reason, out),
            Turn::Withheld { holder } => {
                if !std::mem::replace(waiting, true) {
                    self.event(EventKind::Waiting { holder, reason }, out);
                }
            }
        }
    }

    fn profile_window(
        &mut self,
        delta: &CounterDelta,
        ran: bool,
        context: &WindowContext,
        out: &mut Vec<Action>,
    ) {
        let Stage::Profile {
            windows,
            pages_seen,
            ipcs,
            cost,
            continued,
            ..
        } = &mut self.stage
        else {
            return;
        };
        let (spent, continued) = (cost.spent(), *continued);
        *windows += 1;
        if ran {
            ipcs.push((self.stats.windows, delta.ipc()));
            self.profile_mix
                .window(delta.apki(), self.profile.samples_total());
        }
        // A profile lasts at least `profile_windows`, and goes on (up to
        // `profile_max_windows`) while each window still finds many new pages: a sweep over
        // a large array reaches its pages one window after another.
        let pages = self.profile.len();
        let new_pages = pages - std::mem::replace(pages_seen, pages);
        let saturated = new_pages as f64 <= self.knobs.profile_saturation * pages as f64;
        let (windows, min_windows) = (*windows, self.knobs.profile_windows);
        let max_windows = self.knobs.profile_max_windows;
        if continued {
            // Taken up again because its promise pays for it: it goes on while it does.
            let window_cost = spent / f64::from(windows.max(1));
            let unpaid = self
                .spending
                .over_what_it_could_win(self.bounding_promise(), window_cost)
                .is_some();
            if windows >= max_windows || saturated || unpaid {
                self.profile_cut =
                    (unpaid && !saturated && windows < max_windows).then_some(ProfileCut {
                        windows,
                        window_cost,
                    });
                self.finish_profile(context, out);
            }
            return;
        }
        let too_costly = self.profiling_costs_too_much(windows);
        // A retry after an attempt that found nothing ends at its minimum length once its
        // next window would take what fruitless attempts cost past the share allowed now
        // (bzip2's real trace on ppc970fx, in another layout than the one above: a retry
        // that profiled 10 windows cost 0.55% of the run, 0.9896 of off; 0.9926 cut). Only
        // a retry: a first look cut short ranks fewer pages (random-ppc970fx-446f285f at
        // the window's costs, whose first profile a sharer's exit had abandoned: 1.160 ->
        // 0.988 of off with every profile cut).
        let over_share = windows >= min_windows
            && !self.spending.retry_affords(
                self.knobs.overhead_budget,
                spent / f64::from(windows),
                self.sharers_spending,
            );
        // A profile that promises nothing ends at its minimum length: more samples of a
        // stream do not make it reused. But a loop over more than the cache holds misses
        // on every load, as a stream does, until the profile has seen it loaded again
        // (NOTES session 45): alone on an LLC of known size (where loops count, see
        // `promise_of`), such a profile goes on while the overhead budget affords another
        // window, up to `profile_loop_max_windows` (random.md's run 363, ppc970fx: a stencil
        // over 1.6 times the LLC makes a pass in about 11 windows; 10 saw each page loaded
        // once, and it kept nothing where its oracle gains 14%). The budget is not halved
        // for the fruitless attempts before: they back off attempts, but a loop shows only
        // to a profile this long, and profiles beside sharers never look for one (random.md's
        // run 271: a loop over 3.2 LLCs, a pass in 2.2 windows, profiled twice beside its
        // sharers, then alone for 4 windows, 1.8 passes, on half the budget: 1.000 of off,
        // its oracle 1.21). Their cost stays within the budget.
        let nothing_yet = windows >= min_windows && self.promises_nothing(context);
        let cost_after_next_window = spent * f64::from(windows + 1) / f64::from(windows);
        let may_find_a_loop = nothing_yet
            && self.sharers_now.is_empty()
            && self.llc_room_pages > 0
            && self.spending.affords_unhalved(
                self.knobs.overhead_budget,
                cost_after_next_window,
                self.sharers_spending,
            );
        let longest = if may_find_a_loop {
            self.knobs.profile_loop_max_windows
        } else {
            max_windows
        };
        if windows >= longest
            || too_costly
            || (windows >= min_windows && saturated && !may_find_a_loop)
            || ((nothing_yet || over_share) && !may_find_a_loop)
        {
            // Ended on its cost while each window still found many new pages: a sweep it
            // has not seen whole. A search that cannot afford to look further may take the
            // profile up again later (see `Deferred`).
            self.profile_cut = ((too_costly || over_share) && !saturated && windows < max_windows)
                .then(|| ProfileCut {
                    windows,
                    window_cost: spent / f64::from(windows.max(1)),
                });
            self.finish_profile(context, out);
        }
    }

    /// Whether the profile so far has slowed the target by more than the sampling budget
    /// beyond what sampling itself cost: profiling then costs more than the operator
    /// allowed. At its minimum length it ends rather than going on for more pages; before
    /// that, it ends once the slowdown is also beyond how much the target's unsampled
    /// windows scatter (two standard deviations), since one window slower than the one
    /// before it may be noise. A machine that profiles with its prefetchers off (as ROCS
    /// does, so that streaming pages show their misses) runs a streaming program at half
    /// its speed, while its samples cost 1%: on a run of 200 windows, three such windows
    /// alone cost more than the 1% the controller may lose where nothing can be gained.
    fn profiling_costs_too_much(&self, windows: u32) -> bool {
        let Stage::Profile { cycles, cost, .. } = &self.stage else {
            return false;
        };
        let allowed = if windows >= self.knobs.profile_windows {
            self.knobs.sample_cpu_budget
        } else {
            match self.unsampled_scatter() {
                Some(scatter) => self.knobs.sample_cpu_budget + 2.0 * scatter,
                None => return false,
            }
        };
        cost.excess() > allowed * *cycles as f64
    }

    /// The standard deviation of the IPC of the unsampled windows kept, relative to their
    /// mean (`None` with fewer than two).
    fn unsampled_scatter(&self) -> Option<f64> {
        let ipcs: Vec<f64> = self.unsampled_ipcs.iter().copied().collect();
        if ipcs.len() < 2 {
            return None;
        }
        let (mean, squares) = crate::search::moments(&ipcs);
        (mean > 0.0).then(|| (squares / (ipcs.len() - 1) as f64).sqrt() / mean)
    }

    fn steady_window(&mut self, delta: &CounterDelta, turn: Turn, out: &mut Vec<Action>) {
        if self.pages.in_flight() > 0 || std::mem::take(&mut self.skip_window) {
            return;
        }
        if turn == Turn::Granted && self.reverify_due && self.reverify(out) {
            return;
        }
        if turn == Turn::Granted && self.take_up_deferred(delta, out) {
            return;
        }
        let Stage::Steady {
            windows,
            cooldown,
            phase,
            loads,
        } = &mut self.stage
        else {
            return;
        };
        if let Turn::Withheld { .. } = turn {
            // Another target's search moves pages: its probes change this target's IPC and
            // MPKI without any phase change of its own, but not its references.
            loads.withheld(delta.apki());
            return;
        }
        if loads.is_withheld() && !loads.moved_while_withheld(self.knobs.phase_band) {
            // The reference is learnt again under the placement the holder left, unless
            // the program's own loads moved meanwhile: then the reference from before the
            // turn was withheld sees the phase it changed to.
            phase.reset();
        }
        *windows += 1;
        if *windows <= *cooldown {
            loads.learn(delta.apki());
            return;
        }
        match phase.observe(delta.ipc(), delta.mpki()) {
            PhaseVerdict::Changed => {}
            PhaseVerdict::Learning | PhaseVerdict::Within => {
                loads.learn(delta.apki());
                return;
            }
            PhaseVerdict::Outside { .. } => return,
        }
        self.stats.phase_changes += 1;
        self.unsampled_ipcs.clear();
        self.unsampled_from_start = false;
        let configured = self.knobs.phase_band;
        let band = match phase.changed_band() {
            Some(b) if b < configured => format!(
                "±{:.1}% band (phase_band {:.0}%, narrowed where the phase's windows \
                 scattered little)",
                b * 100.0,
                configured * 100.0
            ),
            _ => format!("±{:.0}% band", configured * 100.0),
        };
        let reason = format!(
            "phase change: IPC {:.3}, MPKI {:.2} outside the {band} for {} windows",
            delta.ipc(),
            delta.mpki(),
            self.knobs.phase_windows
        );
        if !self.worth_profiling(delta) {
            let reason = format!("{reason}; the new phase misses too little to profile");
            self.transition(Stage::observe(), reason, out);
        } else if !self.affords_an_attempt(delta.cycles) {
            // Observe profiles once the budget allows, if the phase still misses then.
            let (spent, share) = self.budget_shares();
            let next = match self
                .spending
                .next_attempt_cost(self.cheapest_attempt(delta.cycles))
            {
                Some(cost) => format!(
                    ", and after an attempt that found nothing the next would cost {:.2} M \
                     cycles more",
                    cost / 1e6
                ),
                None => String::new(),
            };
            let reason = format!(
                "{reason}; not profiled yet: fruitless attempts cost {:.2}% of the cycles \
                 so far (this target's and those sharing its LLC){next}, over the {:.2}% \
                 allowed now (overhead_budget, halved for each fruitless attempt in a row)",
                spent * 100.0,
                share * 100.0
            );
            self.transition(Stage::observe(), reason, out);
        } else {
            self.stats.phase_changes_profiled += 1;
            self.start_profile(reason, out);
        }
    }

    /// Start an attempt: a profile, then a search if the profile promises something.
    fn start_profile(&mut self, reason: String, out: &mut Vec<Action>) {
        self.spending.start();
        self.deferred = None;
        self.profile_cut = None;
        self.beneficiaries.clear();
        self.placed = None;
        self.reverify_due = false;
        self.pages.forget_failures();
        self.profiled_again = false;
        self.profile_afresh(reason, out);
    }

    /// Profile from scratch, as part of the attempt in progress.
    pub(super) fn profile_afresh(&mut self, reason: String, out: &mut Vec<Action>) {
        self.profile.clear();
        self.profile_llc_references = 0;
        self.profile_cycles = 0;
        self.profile_latency = SampledLatency::default();
        self.profile_mix = ProfileMix::default();
        self.stats.profiles += 1;
        self.enter_profile(0, false, reason, out);
    }

    /// Enter the profile stage and start sampling. `windows` the profile has had already,
    /// and `continued`: it goes on with the samples of one cut short.
    fn enter_profile(
        &mut self,
        windows: u32,
        continued: bool,
        reason: String,
        out: &mut Vec<Action>,
    ) {
        let profile = Stage::Profile {
            windows,
            pages_seen: self.profile.len(),
            ipcs: Vec::new(),
            reference_ipc: self.unsampled_ipc,
            cycles: 0,
            cost: ProfileCost::default(),
            continued,
        };
        self.transition(profile, reason, out);
        self.sampling = true;
        out.push(Action::StartSampling(SamplingPlan {
            period: self.knobs.sample_period,
            cpu_budget: self.knobs.sample_cpu_budget,
        }));
    }

    /// Take up the deferred attempt if the target can now afford its next step (see
    /// [`Deferred`]) and still misses as it did then: misses that fell away since (an LLC
    /// that was still warming, a burst that ended) leave nothing for the rest of the
    /// profile to find (spr-like cg-like at full length: a profile taken up at MPKI 5.8
    /// where the search had seen 15, to find its target missing too little to profile).
    /// Returns true if it did.
    fn take_up_deferred(&mut self, delta: &CounterDelta, out: &mut Vec<Action>) -> bool {
        let Some(d) = self.deferred else {
            return false;
        };
        if !self.worth_profiling(delta) || delta.mpki() < (1.0 - self.knobs.phase_band) * d.mpki {
            return false;
        }
        let promise = self.bounding_promise();
        let p = d.profile;
        let left = f64::from(self.knobs.profile_max_windows.saturating_sub(p.windows));
        if !self
            .spending
            .could_resume(promise, p.window_cost * left + d.moves)
        {
            return false;
        }
        self.deferred = None;
        self.spending.resume();
        let reason = format!(
            "the attempt cut short by its cost goes on: its profile had not seen the program \
             whole, and the {:.1}% of its cycles it promises to save now pays for the rest",
            promise * 100.0
        );
        self.enter_profile(p.windows, true, reason, out);
        true
    }

    fn stop_sampling(&mut self, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.sampling) {
            out.push(Action::StopSampling);
        }
    }

    /// Another target of the LLC started or stopped running: a profile or search under
    /// way compares windows of two different mixes. A sharer that stops frees the cache it
    /// polluted, so every later window runs faster whatever the placement: a search that
    /// went on would take that for its probes' gain (noisy-neighbour's victim on
    /// neoverse-like confined half its own table when its neighbour exited mid-search,
    /// 0.62 of off). The attempt ends: a profile stops, a search moves its pages back, and
    /// the target is observed afresh, to profile again if it still misses under the new mix.
    fn abandon_attempt(&mut self, out: &mut Vec<Action>) {
        match &mut self.stage {
            Stage::Profile { .. } => {
                self.stop_sampling(out);
                self.spending.abandon();
                let reason = "a target sharing the LLC started or stopped during the profile: \
                              its samples are of another mix; observing afresh";
                self.transition(Stage::observe(), reason.into(), out);
            }
            Stage::Search(run) => run.abandon(),
            _ => {}
        }
    }

    /// `fruitful`: the search chose to confine something. (Not "pages are confined now":
    /// the restores of a search that chose k = 0 may still be in flight.)
    fn enter_steady(&mut self, reason: String, fruitful: bool, out: &mut Vec<Action>) {
        // A search that found nothing makes the next one less urgent: phase changes are
        // ignored for a while, twice as long after each fruitless search in a row.
        self.fruitless = if fruitful { 0 } else { self.fruitless + 1 };
        self.spending.end(fruitful);
        let cooldown = if self.fruitless == 0 {
            0
        } else {
            (FRUITLESS_COOLDOWN << (self.fruitless - 1).min(6)).min(FRUITLESS_COOLDOWN_MAX)
        };
        self.transition(self.steady(cooldown), reason, out);
    }

    /// A fresh Steady stage that ignores phase changes for its first `cooldown` windows.
    fn steady(&self, cooldown: u32) -> Stage {
        Stage::Steady {
            windows: 0,
            cooldown,
            phase: PhaseDetector::new(self.knobs.phase_band, self.knobs.phase_windows),
            loads: OwnLoads::default(),
        }
    }

    fn on_migrated(&mut self, report: MigrationReport, out: &mut Vec<Action>) {
        let (moved, failures) = self.pages.on_migrated(&report);
        self.stats.pages_migrated += moved;
        let cost = moved as f64 * self.knobs.migration_cost_cycles as f64;
        self.spending.moved(cost);
        if moved > 0 {
            self.unsampled_ipcs.clear();
            self.unsampled_from_start = false;
        }
        if let Some(f) = failures {
            self.stats.migrations_failed += f.count as u64;
            let failed = EventKind::MigrationFailed {
                to: report.to,
                failed: f.count,
                errno: f.errno,
            };
            self.event(failed, out);
        }
        if matches!(self.stage, Stage::Paused { restoring: true })
            && self.pages.in_flight() == 0
            && self.pages.restorable().next().is_none()
        {
            self.stage = Stage::Paused { restoring: false };
            self.event(EventKind::Restored, out);
        }
    }

    fn restore_batch(&mut self, out: &mut Vec<Action>) {
        match self.pages.restore_batch() {
            None => {}
            Some(Some(migrate)) => out.push(migrate),
            Some(None) => {
                self.stage = Stage::Paused { restoring: false };
                self.event(EventKind::Restored, out);
            }
        }
    }

    fn on_command(&mut self, cmd: Command, out: &mut Vec<Action>) {
        let paused = self.state() == State::Paused;
        match cmd {
            Command::Pause if !paused => {
                self.stop_sampling(out);
                let stage = Stage::Paused { restoring: false };
                self.transition(stage, "paused by the operator".into(), out);
            }
            Command::Resume if paused => {
                self.transition(Stage::observe(), "resumed by the operator".into(), out);
            }
            Command::RestoreAll => {
                self.stop_sampling(out);
                let stage = Stage::Paused { restoring: true };
                if paused {
                    self.stage = stage;
                } else {
                    self.transition(stage, "restore requested by the operator".into(), out);
                }
                // New pages may be retried now: the operator wants everything back.
                self.pages.forget_failures();
                self.restore_batch(out);
            }
            Command::Confine { pages } if !self.knobs.dry_run => {
                if let Some(migrate) = self.pages.confine_explicitly(pages) {
                    // The move is no part of any placement the search measures.
                    self.skip_window = true;
                    out.push(migrate);
                }
                self.set_named_aside(out);
            }
            _ => {}
        }
    }

    fn transition(&mut self, to: Stage, reason: String, out: &mut Vec<Action>) {
        let from = self.stage.state();
        let to_state = to.state();
        self.stage = to;
        let kind = EventKind::Transition {
            from,
            to: to_state,
            reason,
        };
        self.event(kind, out);
    }

    fn event(&mut self, kind: EventKind, out: &mut Vec<Action>) {
        let e = Event {
            window: self.stats.windows,
            kind,
        };
        if self.history.len() == HISTORY_CAP {
            self.history.pop_front();
        }
        self.history.push_back(e.clone());
        out.push(Action::Report(e));
    }
}

fn miss_rate(delta: &CounterDelta) -> f64 {
    if delta.llc_references == 0 {
        0.0
    } else {
        delta.llc_misses as f64 / delta.llc_references as f64
    }
}

/// What a profile's windows cost the target, summed over them before either is judged: a
/// window's IPC scatters around its pace by more than sampling costs (1.5% a window where
/// sampling costs 0.7%), and taking the larger of the two window by window charged the
/// scatter's upper half as cost, 1.2% a window: over the 1% budget, so a profile alone on
/// its LLC could not afford the windows that see a loop over more than the cache loaded
/// again (random.md's run 477, ppc970fx: three windows, nothing found, oracle 1.205).
#[derive(Clone, Copy, Debug, Default)]
struct ProfileCost {
    /// Cycles the windows ran slower than the reference (less where some ran faster).
    slower: f64,
    /// Cycles the platform says sampling cost.
    sampling: f64,
}

impl ProfileCost {
    /// What the profile cost: its slowdown or its sampling, whichever is more.
    fn spent(&self) -> f64 {
        self.slower.max(self.sampling)
    }

    /// What the windows ran slower than the reference beyond what sampling cost.
    fn excess(&self) -> f64 {
        (self.slower - self.sampling).max(0.0)
    }
}

/// The cycles a window ran slower than it would have at `reference` IPC (negative if it
/// ran faster; zero with no reference).
fn slower_than(delta: &CounterDelta, reference: Option<f64>) -> f64 {
    match reference {
        Some(reference) if reference > 0.0 => delta.cycles as f64 * (1.0 - delta.ipc() / reference),
        _ => 0.0,
    }
}
