//! The controller of one target: a sans-IO state machine.
//!
//! Observations go in ([`Controller::on`]), actions come out; the controller never reads a
//! clock, a counter or a file. The driver (the simulator's closed loop, or rocsd) carries
//! the actions to the platform traits and brings the results back:
//!
//! - at the end of every window: first the window's samples ([`Observation::Samples`]) and
//!   sample loss, then its counters ([`Observation::Window`]);
//! - every [`Action::Migrate`] gets its [`Observation::Migrated`] report before the next
//!   window ends (a window that ends with a report outstanding is not used as a
//!   measurement);
//! - every [`Action::Query`] gets its [`Observation::Colours`] report (the search waits for
//!   it);
//! - [`Action::StartSampling`] and [`Action::StopSampling`] take effect for the next window.
//!
//! States (DESIGN.md 4): Observe → Profile → Search → Steady, and Steady → Profile on a
//! phase change; Paused on the operator's command; Exited when the target is gone.

use std::collections::{BTreeSet, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::knobs::{KnobError, Knobs, SearchMode};
use crate::phase::{PhaseDetector, PhaseVerdict};
use crate::regions::{build_stack, Region, RegionParams, StackBuild};
use crate::search::{Next, Search};
use crate::{
    Colour, CounterDelta, Errno, MemSample, MissRateStack, PageProfile, PageResult, Pid, Placement,
    SampleLoss, SamplingPlan, VirtPage,
};

/// Where the controller is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Counting only; waiting for the target to miss enough to be worth profiling.
    Observe,
    /// Precise sampling for a bounded number of windows.
    Profile,
    /// Measuring IPC at candidate `k`s.
    Search,
    /// Holding the chosen placement, watching for a phase change.
    Steady,
    /// Stopped by the operator; pages stay where they are (or are being restored).
    Paused,
    /// The target is gone.
    Exited,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Observe => "observe",
            State::Profile => "profile",
            State::Search => "search",
            State::Steady => "steady",
            State::Paused => "paused",
            State::Exited => "exited",
        })
    }
}

/// What the operator asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Stop sampling and searching; keep pages where they are.
    Pause,
    /// Start again from Observe, from the current placement.
    Resume,
    /// Move every confined page back (within the page budget per window) and pause.
    RestoreAll,
}

/// Whether this controller may start a profile (and the search that follows it). Targets
/// that share an LLC take turns ([`crate::llc_group::LlcGroup`]): their searches would
/// disturb each other's measurements. A lone target always has the turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "turn", rename_all = "snake_case")]
pub enum Turn {
    /// Profile and search when there is reason to.
    Granted,
    /// Another target of the LLC (`holder`) profiles or searches: wait in Observe or
    /// Steady, without watching for phase changes (the holder's moves change this target's
    /// IPC too).
    Withheld { holder: Pid },
}

/// The result of one [`Action::Migrate`]: one result per page, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationReport {
    pub to: Placement,
    pub pages: Vec<VirtPage>,
    pub results: Vec<PageResult>,
}

/// The result of one [`Action::Query`]: one result per page, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColourReport {
    pub pages: Vec<VirtPage>,
    pub results: Vec<PageResult>,
}

/// Something the driver observed.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation<'a> {
    /// The counters of the window that just ended.
    Window(CounterDelta),
    /// Samples drained since the previous window (samples of other pids are ignored).
    Samples(&'a [MemSample]),
    /// Samples the platform lost or throttled.
    SampleLoss(SampleLoss),
    /// The outcome of a migration the controller asked for.
    Migrated(MigrationReport),
    /// The answer to an [`Action::Query`].
    Colours(ColourReport),
    /// The target exited.
    TargetExited,
    /// An operator command.
    Command(Command),
    /// Whether this target may profile and search now (targets sharing an LLC take
    /// turns); a lone target never needs it.
    Turn(Turn),
    /// What the search measures for the window about to be observed, in place of the
    /// target's own IPC: the throughput of the targets sharing the LLC
    /// ([`crate::llc_group::LlcGroup::score`]). Sent just before [`Observation::Window`],
    /// for that window only.
    GroupScore(f64),
    /// The set of targets running on this LLC changed (one started, finished or left):
    /// this target's IPC and MPKI change with it, which is no phase change of its own.
    SharersChanged,
}

/// Something the driver must do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Action {
    StartSampling(SamplingPlan),
    StopSampling,
    /// Move `pages` to `to`, then report with [`Observation::Migrated`].
    Migrate {
        pages: Vec<VirtPage>,
        to: Placement,
    },
    /// Ask the colour of each page's frame (`Remapper::query`), then report with
    /// [`Observation::Colours`]. The controller asks before a search, so that ordinary pages
    /// that happen to sit in the pollute colours are moved out: the buffer is reserved.
    Query {
        pages: Vec<VirtPage>,
    },
    /// Tell the world (log, history, control socket).
    Report(Event),
}

/// One entry of the controller's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Windows observed before this event.
    pub window: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    Transition {
        from: State,
        to: State,
        reason: String,
    },
    /// A profile ended and the stack was built.
    Profiled {
        pages_profiled: usize,
        samples: u64,
        stack_pages: usize,
        regions: usize,
    },
    /// One measured window of the search.
    SearchStep {
        k: usize,
        ipc: f64,
        mpki: f64,
        /// What the search recorded instead of `ipc`: the LLC group's score, averaged over
        /// the windows measured at `k`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group_score: Option<f64>,
    },
    /// The target has reason to profile (`reason`), but another target of the same LLC
    /// (`holder`, a platform pid: the driver names it as users know it) holds the turn.
    Waiting { holder: Pid, reason: String },
    /// The search chose `k`.
    SearchDone {
        k: usize,
        ipc: Option<f64>,
        baseline_ipc: Option<f64>,
        windows: u64,
    },
    /// Pages the platform could not move.
    MigrationFailed {
        to: Placement,
        failed: usize,
        errno: Errno,
    },
    /// Every confined page is back among the ordinary colours.
    Restored,
}

/// Running totals, for inspection and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub windows: u64,
    /// Samples of this target counted into a profile.
    pub samples: u64,
    pub samples_lost: u64,
    pub samples_throttled: u64,
    /// Pages moved successfully (either way).
    pub pages_migrated: u64,
    pub migrations_failed: u64,
    /// Windows spent in Search (measurements and windows of partial moves).
    pub search_windows: u64,
    pub profiles: u64,
    pub searches: u64,
    pub phase_changes: u64,
    /// Phase changes whose new phase missed enough to be profiled (the others went back
    /// to Observe).
    pub phase_changes_profiled: u64,
}

/// Steady windows without phase watch after a search that confined nothing (doubling for
/// each such search in a row, up to the maximum).
const FRUITLESS_COOLDOWN: u32 = 8;
const FRUITLESS_COOLDOWN_MAX: u32 = 512;

/// Windows measured, and averaged, at each placement of a search judged by an LLC group.
const GROUP_MEASURE_WINDOWS: usize = 2;

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
struct PhaseMemory {
    pages: HashSet<VirtPage>,
    ipc: f64,
    baseline_ipc: f64,
}

/// Most events kept in the history (the oldest go first).
const HISTORY_CAP: usize = 4096;

/// The controller of one target.
#[derive(Clone, Debug)]
pub struct Controller {
    pid: Pid,
    knobs: Knobs,
    pollute: Vec<Colour>,
    state: State,
    sampling: bool,
    observe_streak: u32,
    profile: PageProfile,
    profile_windows: u32,
    /// Pages in the profile at the end of the previous profile window.
    profile_pages_seen: usize,
    build: StackBuild,
    /// Results of earlier fruitful searches, newest first: a phase that comes back is
    /// recognised by its stack and tries its old `k` first.
    remembered: VecDeque<PhaseMemory>,
    confined: BTreeSet<VirtPage>,
    /// Ordinary pages found in the pollute colours (the allocator put them there); moved
    /// out when a search confines anything.
    squatters: BTreeSet<VirtPage>,
    /// Squatters we moved out; they go back when the search settles on k = 0.
    evicted: BTreeSet<VirtPage>,
    /// Evicted squatters being moved back by the migration in flight.
    rehoming: HashSet<VirtPage>,
    /// Pages that failed to move since the last profile; not tried again until then.
    failed: HashSet<VirtPage>,
    search: Option<Search>,
    /// The placement for this `k` is complete: the next window measures it.
    measuring: Option<usize>,
    /// Windows still to wait after a move before measuring.
    settle_left: u32,
    /// A colour query is out; the search waits for it.
    awaiting_colours: bool,
    /// The window count when pages were last moved.
    moved_at: Option<u64>,
    /// The search is over; moving to this `k` before Steady.
    final_k: Option<usize>,
    /// Windows measured at k = 0 in this search that missed too little to be worth
    /// profiling, and that missed enough.
    baseline_quiet: u32,
    baseline_loud: u32,
    search_started_at: u64,
    phase: PhaseDetector,
    /// Windows observed in the current Steady stretch.
    steady_windows: u32,
    /// Steady windows to wait before watching for phase changes.
    cooldown: u32,
    /// Searches in a row that confined nothing.
    fruitless: u32,
    /// A move was made just before this window: not a clean phase reference.
    skip_window: bool,
    restoring: bool,
    /// May this target profile and search now ([`Turn`])?
    turn: Turn,
    /// The target wanted to profile while the turn was withheld (and said so once).
    waiting: bool,
    /// The LLC group's score of the window about to be observed.
    group_score: Option<f64>,
    /// The last window came with a group score: a search starting now is judged by it.
    scored_by_group: bool,
    /// The search in progress is judged by the LLC group's score.
    group_search: bool,
    /// Scores of the windows measured so far at the current placement (group search).
    span: Vec<f64>,
    in_flight: u32,
    budget_left: u32,
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
        Ok(Controller {
            pid,
            pollute,
            state: State::Observe,
            sampling: false,
            observe_streak: 0,
            profile: PageProfile::new(page_shift),
            profile_windows: 0,
            profile_pages_seen: 0,
            build: StackBuild::default(),
            remembered: VecDeque::new(),
            confined: BTreeSet::new(),
            squatters: BTreeSet::new(),
            evicted: BTreeSet::new(),
            rehoming: HashSet::new(),
            failed: HashSet::new(),
            search: None,
            measuring: None,
            settle_left: 0,
            awaiting_colours: false,
            moved_at: None,
            final_k: None,
            baseline_quiet: 0,
            baseline_loud: 0,
            search_started_at: 0,
            phase: PhaseDetector::new(knobs.phase_band, knobs.phase_windows),
            skip_window: false,
            steady_windows: 0,
            cooldown: 0,
            fruitless: 0,
            restoring: false,
            turn: Turn::Granted,
            waiting: false,
            group_score: None,
            scored_by_group: false,
            group_search: false,
            span: Vec::new(),
            in_flight: 0,
            budget_left: knobs.page_budget,
            history: VecDeque::new(),
            stats: Stats::default(),
            knobs,
        })
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
        self.state
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
        &self.confined
    }

    /// Ordinary pages found in the pollute colours, not put there by rocs (they are moved
    /// out when a search confines anything, and left alone at k = 0).
    pub fn squatters(&self) -> &BTreeSet<VirtPage> {
        &self.squatters
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether the controller has asked for sampling and not stopped it.
    pub fn sampling(&self) -> bool {
        self.sampling
    }

    /// Whether the controller may profile and search now.
    pub fn turn(&self) -> Turn {
        self.turn
    }

    /// Profiling or searching: the turn of its LLC group is in use.
    pub fn holds_turn(&self) -> bool {
        matches!(self.state, State::Profile | State::Search)
    }

    /// Wanted to profile while the turn was withheld, and still waits.
    pub fn waiting_for_turn(&self) -> bool {
        self.waiting
    }

    /// The search in progress or last finished, with its measurements.
    pub fn search(&self) -> Option<&Search> {
        self.search.as_ref()
    }

    /// Feed one observation; carry out the returned actions in order.
    pub fn on(&mut self, obs: Observation<'_>) -> Vec<Action> {
        let mut out = Vec::new();
        if self.state == State::Exited {
            return out;
        }
        match obs {
            Observation::Window(delta) => self.on_window(delta, &mut out),
            Observation::Samples(samples) => self.on_samples(samples),
            Observation::SampleLoss(loss) => {
                self.stats.samples_lost += loss.lost;
                self.stats.samples_throttled += loss.throttled;
            }
            Observation::Migrated(report) => self.on_migrated(report, &mut out),
            Observation::Colours(report) => self.on_colours(report, &mut out),
            Observation::TargetExited => {
                self.stop_sampling(&mut out);
                self.transition(State::Exited, "the target exited".into(), &mut out);
            }
            Observation::Command(cmd) => self.on_command(cmd, &mut out),
            Observation::Turn(turn) => self.on_turn(turn),
            Observation::GroupScore(score) => self.group_score = Some(score),
            Observation::SharersChanged => {
                // Learn the phase reference again under the new mix.
                if self.state == State::Steady {
                    self.phase.reset();
                }
            }
        }
        out
    }

    fn on_samples(&mut self, samples: &[MemSample]) {
        if self.state != State::Profile {
            return;
        }
        for s in samples.iter().filter(|s| s.pid == self.pid) {
            self.profile.record(s.vaddr, s.source);
            self.stats.samples += 1;
        }
    }

    fn on_turn(&mut self, turn: Turn) {
        if turn == Turn::Granted && self.turn != Turn::Granted && self.waiting {
            // The holder's moves changed this target's cache: what made it want to
            // profile may no longer hold. Look again from the new placement.
            self.waiting = false;
            self.observe_streak = 0;
            self.phase.reset();
        }
        self.turn = turn;
    }

    /// Profile now if the turn allows it; otherwise wait, and say so once.
    fn request_profile(&mut self, reason: String, out: &mut Vec<Action>) {
        match self.turn {
            Turn::Granted => {
                self.waiting = false;
                self.start_profile(reason, out);
            }
            Turn::Withheld { holder } => {
                if !std::mem::replace(&mut self.waiting, true) {
                    self.event(EventKind::Waiting { holder, reason }, out);
                }
            }
        }
    }

    fn on_window(&mut self, delta: CounterDelta, out: &mut Vec<Action>) {
        self.stats.windows += 1;
        let group_score = self.group_score.take();
        self.scored_by_group = group_score.is_some();
        self.budget_left = self.knobs.page_budget;
        // A window in which the target did not run says nothing about it.
        let ran = delta.cycles > 0 && delta.instructions > 0;
        match self.state {
            State::Observe if ran => self.observe_window(&delta, out),
            State::Profile => {
                self.profile_windows += 1;
                // A profile lasts at least `profile_windows`, and goes on (up to
                // `profile_max_windows`) while each window still finds many new pages: a
                // sweep over a large array reaches its pages one window after another.
                let pages = self.profile.len();
                let new_pages = pages - std::mem::replace(&mut self.profile_pages_seen, pages);
                let saturated = new_pages as f64 <= self.knobs.profile_saturation * pages as f64;
                if self.profile_windows >= self.knobs.profile_max_windows
                    || (self.profile_windows >= self.knobs.profile_windows && saturated)
                {
                    self.finish_profile(out);
                }
            }
            State::Search => {
                self.stats.search_windows += 1;
                if self.in_flight > 0 {
                    // A migration report is missing: this window's placement is unknown.
                    return;
                }
                self.skip_window = false;
                if let Some(k) = self.measuring {
                    if self.settle_left > 0 {
                        // The window right after a move carries the move's cost and cold
                        // caches for the moved pages: not a fair measurement of k.
                        self.settle_left -= 1;
                        return;
                    }
                    if !ran {
                        return;
                    }
                    let (ipc, mpki) = (delta.ipc(), delta.mpki());
                    let mut value = group_score.unwrap_or(ipc);
                    if self.group_search {
                        // A search judged by its LLC group measures each placement over
                        // several windows: the others' gain comes in bursts (while a
                        // partly confined stream sweeps its confined part), and one window
                        // says more about where the sweep was than about `k`.
                        let Some(score) = group_score else {
                            return;
                        };
                        self.span.push(score);
                        if self.span.len() < GROUP_MEASURE_WINDOWS {
                            return;
                        }
                        value = self.span.iter().sum::<f64>() / self.span.len() as f64;
                        self.span.clear();
                    }
                    self.measuring = None;
                    if k == 0 {
                        if self.worth_profiling(&delta) {
                            self.baseline_loud += 1;
                        } else {
                            self.baseline_quiet += 1;
                        }
                    }
                    if let Some(s) = self.search.as_mut() {
                        s.record(k, value);
                    }
                    let step = EventKind::SearchStep {
                        k,
                        ipc,
                        mpki,
                        group_score: group_score.map(|_| value),
                    };
                    self.event(step, out);
                }
                self.search_step(out);
            }
            State::Steady if ran => {
                if self.in_flight > 0 || std::mem::take(&mut self.skip_window) {
                    return;
                }
                if let Turn::Withheld { .. } = self.turn {
                    // Another target's search moves pages: its probes change this
                    // target's IPC and MPKI without any phase change of its own. The
                    // reference is learnt again once the turn is free.
                    self.phase.reset();
                    return;
                }
                self.steady_windows += 1;
                if self.steady_windows <= self.cooldown {
                    return;
                }
                if self.phase.observe(delta.ipc(), delta.mpki()) == PhaseVerdict::Changed {
                    self.stats.phase_changes += 1;
                    let reason = format!(
                        "phase change: IPC {:.3}, MPKI {:.2} outside the ±{:.0}% band for {} windows",
                        delta.ipc(),
                        delta.mpki(),
                        self.knobs.phase_band * 100.0,
                        self.knobs.phase_windows
                    );
                    if self.worth_profiling(&delta) {
                        self.stats.phase_changes_profiled += 1;
                        self.start_profile(reason, out);
                    } else {
                        self.observe_streak = 0;
                        let reason =
                            format!("{reason}; the new phase misses too little to profile");
                        self.transition(State::Observe, reason, out);
                    }
                }
            }
            State::Paused if self.restoring => self.restore_batch(out),
            _ => {}
        }
    }

    /// Whether a window misses enough (both thresholds) to be worth profiling.
    fn worth_profiling(&self, delta: &CounterDelta) -> bool {
        let miss_rate = if delta.llc_references == 0 {
            0.0
        } else {
            delta.llc_misses as f64 / delta.llc_references as f64
        };
        miss_rate >= self.knobs.min_llc_miss_rate && delta.mpki() >= self.knobs.min_mpki
    }

    fn observe_window(&mut self, delta: &CounterDelta, out: &mut Vec<Action>) {
        let miss_rate = if delta.llc_references == 0 {
            0.0
        } else {
            delta.llc_misses as f64 / delta.llc_references as f64
        };
        let mpki = delta.mpki();
        if self.worth_profiling(delta) {
            self.observe_streak += 1;
        } else {
            self.observe_streak = 0;
        }
        if self.observe_streak >= self.knobs.observe_windows {
            let reason = format!(
                "LLC miss rate {:.2} ≥ {:.2} and MPKI {:.2} ≥ {:.2} for {} window(s)",
                miss_rate,
                self.knobs.min_llc_miss_rate,
                mpki,
                self.knobs.min_mpki,
                self.observe_streak
            );
            self.request_profile(reason, out);
        }
    }

    fn start_profile(&mut self, reason: String, out: &mut Vec<Action>) {
        self.profile.clear();
        self.profile_windows = 0;
        self.profile_pages_seen = 0;
        self.failed.clear();
        self.stats.profiles += 1;
        self.transition(State::Profile, reason, out);
        self.sampling = true;
        out.push(Action::StartSampling(SamplingPlan {
            period: self.knobs.sample_period,
            cpu_budget: self.knobs.sample_cpu_budget,
        }));
    }

    fn stop_sampling(&mut self, out: &mut Vec<Action>) {
        if std::mem::take(&mut self.sampling) {
            out.push(Action::StopSampling);
        }
    }

    fn finish_profile(&mut self, out: &mut Vec<Action>) {
        self.stop_sampling(out);
        let params = RegionParams {
            min_samples: self.knobs.min_samples_per_page,
            tolerance: self.knobs.region_merge_tolerance,
            max_gap: self.knobs.region_max_gap,
        };
        self.build = build_stack(&self.profile, &params);
        let n = self.build.stack.len();
        self.event(
            EventKind::Profiled {
                pages_profiled: self.profile.len(),
                samples: self.profile.samples_total(),
                stack_pages: n,
                regions: self.build.regions.len(),
            },
            out,
        );
        if n == 0 {
            self.enter_steady(
                "the profile has no page with LLC samples: nothing to rank".into(),
                false,
                out,
            );
            return;
        }
        if self.knobs.dry_run {
            self.enter_steady(
                format!("dry run: stack of {n} pages built, no page is migrated"),
                false,
                out,
            );
            return;
        }
        let mut search = Search::new(&self.knobs, n, self.build.stack.boundaries());
        self.group_search = self.scored_by_group;
        self.span.clear();
        if self.group_search {
            search.judged_by_group();
        }
        let recalled = self.recall();
        if let Some((k, accept_above)) = recalled {
            search.recall(k, accept_above);
        }
        self.search = Some(search);
        self.measuring = None;
        self.final_k = None;
        self.baseline_quiet = 0;
        self.baseline_loud = 0;
        self.search_started_at = self.stats.windows;
        self.stats.searches += 1;
        let mut reason = format!(
            "{} search over a stack of {n} pages in {} regions",
            self.knobs.search,
            self.build.regions.len()
        );
        if let (Some((k, _)), SearchMode::Adaptive) = (recalled, self.knobs.search) {
            reason += &format!(", from k = {k}: its top pages are an earlier phase's choice");
        }
        self.transition(State::Search, reason, out);
        // First learn which stack pages already sit in the pollute colours; the search
        // starts once the answer is in.
        self.in_flight += 1;
        self.awaiting_colours = true;
        out.push(Action::Query {
            pages: self.build.stack.top(n).collect(),
        });
    }

    fn on_colours(&mut self, report: ColourReport, out: &mut Vec<Action>) {
        if !std::mem::take(&mut self.awaiting_colours) {
            return;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        for (page, result) in report.pages.iter().zip(&report.results) {
            if let Ok(colour) = result {
                // A page in the buffer that we did not put there is a squatter; a page
                // outside the buffer is not confined, whatever we believed.
                if !self.pollute.contains(colour) {
                    self.confined.remove(page);
                    self.squatters.remove(page);
                } else if !self.confined.contains(page) {
                    self.squatters.insert(*page);
                }
            }
        }
        if self.state == State::Search && self.in_flight == 0 {
            self.search_step(out);
        }
    }

    /// Decide what the next window is for, and start the moves it needs.
    fn search_step(&mut self, out: &mut Vec<Action>) {
        let Some(search) = self.search.as_mut() else {
            return;
        };
        let next = match self.final_k {
            Some(k) => Next::Done(k),
            // The misses that started the profile are gone (a cold start that warmed up, a
            // burst that ended): with nothing missing at k = 0, no `k` can gain, and every
            // probe would cost its moves.
            None if self.baseline_quiet >= 2
                && self.baseline_loud == 0
                && search.measurements().iter().all(|(k, _, _)| k == 0) =>
            {
                Next::Done(0)
            }
            None => search.next_step(),
        };
        match next {
            Next::Measure(k) => {
                let moved_before = self.stats.windows;
                if self.move_towards(k, out) {
                    self.measuring = Some(k);
                    // Settle after any move that made up this placement, the last batch
                    // included.
                    if self.moved_at == Some(moved_before) {
                        self.settle_left = self.knobs.settle_windows;
                    }
                }
            }
            Next::Done(k) => {
                if self.final_k.is_none() {
                    self.final_k = Some(k);
                    let m = search.measurements();
                    if let (true, Some(ipc), Some(baseline_ipc)) = (k > 0, m.mean(k), m.mean(0)) {
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
                    let done = EventKind::SearchDone {
                        k,
                        ipc: m.mean(k),
                        baseline_ipc: m.mean(0),
                        windows: self.stats.windows - self.search_started_at,
                    };
                    self.event(done, out);
                }
                if self.move_towards(k, out) {
                    let mut reason = format!(
                        "search chose k = {k} of {} pages ({} confined)",
                        self.build.stack.len(),
                        self.confined.len()
                    );
                    if k == 0 && self.baseline_loud == 0 && self.baseline_quiet > 0 {
                        reason += "; at k = 0 the target missed too little to be worth profiling: nothing to gain";
                    }
                    self.enter_steady(reason, k > 0, out);
                }
            }
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

    /// Whether the current profile saw `page` (it is in the stack or has samples). Confined
    /// pages it did not see stay where they are: a page this phase does not touch costs
    /// nothing in the pollute buffer, and the phase that confined it finds it there when
    /// it comes back.
    fn seen(&self, page: &VirtPage) -> bool {
        self.build.contains(*page) || self.profile.get(*page).is_some()
    }

    /// `fruitful`: the search chose to confine something. (Not "pages are confined now":
    /// the restores of a search that chose k = 0 may still be in flight.)
    fn enter_steady(&mut self, reason: String, fruitful: bool, out: &mut Vec<Action>) {
        self.phase.reset();
        self.steady_windows = 0;
        // A search that found nothing makes the next one less urgent: phase changes are
        // ignored for a while, twice as long after each fruitless search in a row.
        self.fruitless = if fruitful { 0 } else { self.fruitless + 1 };
        self.cooldown = if self.fruitless == 0 {
            0
        } else {
            (FRUITLESS_COOLDOWN << (self.fruitless - 1).min(6)).min(FRUITLESS_COOLDOWN_MAX)
        };
        self.transition(State::Steady, reason, out);
    }

    /// Issue the next batch (within the window's page budget) of the moves that make the
    /// confined set the top `k` of the stack. Returns true when, once this batch is done,
    /// the placement is complete: the next window measures `k`.
    fn move_towards(&mut self, k: usize, out: &mut Vec<Action>) -> bool {
        let target: HashSet<VirtPage> = self
            .build
            .stack
            .top(k)
            .filter(|p| !self.failed.contains(p))
            .collect();
        if k > 0 {
            // Pages that were in the buffer before us and belong there now are adopted
            // where they are.
            let adopt: Vec<VirtPage> = self
                .squatters
                .iter()
                .filter(|p| target.contains(p))
                .copied()
                .collect();
            for p in adopt {
                self.squatters.remove(&p);
                self.confined.insert(p);
            }
        }
        // With k > 0 the buffer is reserved: ordinary pages found in it move out. With
        // k = 0 nothing of ours is confined and the squatters we moved out go back, so that
        // k = 0 is "rocs not running" (the LLC keeps all of its colours for the program).
        let restore: Vec<VirtPage> = self
            .confined
            .iter()
            .filter(|p| self.seen(p))
            .chain(self.squatters.iter().filter(|_| k > 0))
            .filter(|p| !target.contains(p) && !self.failed.contains(p))
            .copied()
            .collect();
        let rehome: Vec<VirtPage> = if k == 0 {
            self.evicted
                .iter()
                .filter(|p| !self.failed.contains(p))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let pollute: Vec<VirtPage> = self
            .build
            .stack
            .top(k)
            .filter(|p| !self.confined.contains(p) && !self.failed.contains(p))
            .chain(rehome.iter().copied())
            .collect();
        self.rehoming = rehome.into_iter().collect();
        let needed = restore.len() + pollute.len();
        let budget = self.budget_left as usize;
        // Restores first: they make room in the pollute buffer and undo the last guess.
        let restore_now: Vec<VirtPage> = restore.into_iter().take(budget).collect();
        let pollute_now: Vec<VirtPage> = pollute
            .into_iter()
            .take(budget - restore_now.len())
            .collect();
        let issued = restore_now.len() + pollute_now.len();
        self.budget_left -= issued as u32;
        if issued > 0 {
            self.skip_window = true;
            self.moved_at = Some(self.stats.windows);
        }
        for (pages, to) in [
            (restore_now, Placement::Restore),
            (pollute_now, Placement::Pollute),
        ] {
            if !pages.is_empty() {
                self.in_flight += 1;
                out.push(Action::Migrate { pages, to });
            }
        }
        issued == needed
    }

    fn on_migrated(&mut self, report: MigrationReport, out: &mut Vec<Action>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let mut failed = 0;
        let mut first_errno = None;
        for (i, &page) in report.pages.iter().enumerate() {
            // A missing result means the page was not moved.
            let result = report.results.get(i).copied().unwrap_or(Err(Errno::EINVAL));
            match (report.to, result) {
                (Placement::Pollute, Ok(_)) => {
                    if self.rehoming.remove(&page) {
                        self.evicted.remove(&page);
                        self.squatters.insert(page);
                    } else {
                        self.confined.insert(page);
                    }
                    self.stats.pages_migrated += 1;
                }
                (Placement::Restore, Ok(_)) => {
                    self.confined.remove(&page);
                    if self.squatters.remove(&page) {
                        self.evicted.insert(page);
                    }
                    self.stats.pages_migrated += 1;
                }
                (to, Err(errno)) => {
                    failed += 1;
                    first_errno.get_or_insert(errno);
                    self.failed.insert(page);
                    // A page that no longer exists is in no buffer.
                    if to == Placement::Restore && matches!(errno, Errno::ENOENT | Errno::EFAULT) {
                        self.confined.remove(&page);
                        self.squatters.remove(&page);
                    }
                }
            }
        }
        self.stats.migrations_failed += failed as u64;
        if let Some(errno) = first_errno {
            self.event(
                EventKind::MigrationFailed {
                    to: report.to,
                    failed,
                    errno,
                },
                out,
            );
        }
        if self.restoring && self.in_flight == 0 && self.restorable().next().is_none() {
            self.restoring = false;
            self.event(EventKind::Restored, out);
        }
    }

    fn restorable(&self) -> impl Iterator<Item = VirtPage> + '_ {
        self.confined
            .iter()
            .copied()
            .filter(|p| !self.failed.contains(p))
    }

    fn restore_batch(&mut self, out: &mut Vec<Action>) {
        if self.in_flight > 0 {
            return;
        }
        let pages: Vec<VirtPage> = self.restorable().take(self.budget_left as usize).collect();
        if pages.is_empty() {
            self.restoring = false;
            self.event(EventKind::Restored, out);
            return;
        }
        self.budget_left -= pages.len() as u32;
        self.in_flight += 1;
        out.push(Action::Migrate {
            pages,
            to: Placement::Restore,
        });
    }

    fn on_command(&mut self, cmd: Command, out: &mut Vec<Action>) {
        match cmd {
            Command::Pause => {
                if self.state != State::Paused {
                    self.stop_sampling(out);
                    self.transition(State::Paused, "paused by the operator".into(), out);
                }
            }
            Command::Resume => {
                if self.state == State::Paused {
                    self.restoring = false;
                    self.observe_streak = 0;
                    self.transition(State::Observe, "resumed by the operator".into(), out);
                }
            }
            Command::RestoreAll => {
                self.stop_sampling(out);
                if self.state != State::Paused {
                    self.transition(
                        State::Paused,
                        "restore requested by the operator".into(),
                        out,
                    );
                }
                // New pages may be retried now: the operator wants everything back.
                self.failed.clear();
                self.restoring = true;
                self.restore_batch(out);
            }
        }
    }

    fn transition(&mut self, to: State, reason: String, out: &mut Vec<Action>) {
        let from = self.state;
        self.state = to;
        self.event(EventKind::Transition { from, to, reason }, out);
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

/// The share of `a` that is also in `b`.
fn overlap(a: &HashSet<VirtPage>, b: &HashSet<VirtPage>) -> f64 {
    if a.is_empty() {
        return 0.0;
    }
    a.iter().filter(|p| b.contains(p)).count() as f64 / a.len() as f64
}
