//! What goes into a controller and what comes out of it: observations, actions, events,
//! and the operator's commands.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::SharedSpending;
use crate::search::GainCheck;
use crate::{
    CounterDelta, Errno, Mapping, MemSample, PageResult, Pid, Placement, SampleLoss, SamplingPlan,
    VirtPage,
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Stop sampling and searching; keep pages where they are.
    Pause,
    /// Start again from Observe, from the current placement.
    Resume,
    /// Move every confined page back (within the page budget per window) and pause.
    RestoreAll,
    /// Confine these pages now, whatever the search says, and keep them confined (the
    /// operator, or a policy naming mappings, knows them to pollute): they stay out of the
    /// search and are restored like the others. Ignored in dry run.
    Confine { pages: Vec<VirtPage> },
}

/// Whether this controller may start a profile (and the search that follows it). Targets
/// that share an LLC take turns ([`crate::Engine`]): their searches would disturb each
/// other's measurements. A lone target always has the turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "turn", rename_all = "snake_case")]
pub enum Turn {
    /// Profile and search when there is reason to.
    Granted,
    /// Another target of the LLC (`holder`) profiles or searches: wait in Observe or
    /// Steady, judging no phase change by IPC or MPKI (the holder's moves change this
    /// target's too), only by the target's own LLC references (see `OwnLoads`).
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
    /// The counters of the window that just ended, for a controller alone on its LLC. The
    /// [`crate::Engine`] feeds the controllers it owns their windows with what their LLC
    /// domain adds ([`WindowContext`]).
    Window(CounterDelta),
    /// Samples drained since the previous window (samples of other pids are ignored).
    Samples(&'a [MemSample]),
    /// Samples the platform lost or throttled.
    SampleLoss(SampleLoss),
    /// The outcome of a migration the controller asked for.
    Migrated(MigrationReport),
    /// The answer to an [`Action::Query`].
    Colours(ColourReport),
    /// The target's mappings ([`crate::Remapper::mappings`]), read in each window it is
    /// sampled.
    Mappings(Vec<Mapping>),
    /// The target exited.
    TargetExited,
    /// An operator command.
    Command(Command),
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
        /// Judged by the LLC group: each sharer's pace at `k` (its IPC over the windows
        /// measured, relative to its IPC at k = 0), so that who gained and who paid is on
        /// record.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sharers: Vec<SharerPace>,
    },
    /// Before the search: some colours hold more of the stack's pages than they fit, and
    /// the `pages` beyond that (from `colours` colours) are probed first. `buffer_pages`:
    /// the target's pages already on the pollute colours, when they over-fill the buffer
    /// and probes move them out. `staying_in_buffer`: those pages, when they are probed
    /// with `pages` where they are (a stack larger than the LLC: moved out, they would
    /// over-fill ordinary colours again).
    ColoursOverFull {
        colours: usize,
        pages: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        buffer_pages: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        staying_in_buffer: Option<usize>,
    },
    /// The target has reason to profile (`reason`), but another target of the same LLC
    /// (`holder`, a platform pid: the driver names it as users know it) holds the turn.
    Waiting { holder: Pid, reason: String },
    /// The search's best point beat k = 0, and is checked against drift before it is
    /// kept: how, and why that way.
    SearchChecks { check: GainCheck },
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

/// One sharer's pace at a placement: its IPC there relative to its IPC at k = 0.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharerPace {
    pub pid: Pid,
    pub pace: f64,
    /// Its LLC references per instruction changed since k = 0: it runs another phase, and
    /// the score counted it at pace 1 (see the group judge).
    #[serde(default)]
    pub other_phase: bool,
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

/// One member of an LLC domain in one window, as a search judged by the domain sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemberWindow {
    pub pid: Pid,
    /// Its IPC in this window.
    pub ipc: f64,
    /// Its LLC references per thousand instructions in this window: what it runs, which
    /// no placement of another target's pages changes.
    pub llc_apki: f64,
    /// Its IPC in the window the turn began with, before any sampling or move of the turn.
    pub turn_ipc: f64,
    /// The least pace its policy accepts (1 - `max_slowdown`); `None` for a background
    /// target, which may pay for the others.
    pub floor: Option<f64>,
}

/// What a target's LLC domain adds to one of its windows ([`crate::Engine`] gives it; a lone
/// controller's window has the default: the turn, no group, no change of sharers).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowContext {
    /// May the target profile and search now?
    pub turn: Turn,
    /// For a search judged by the domain: every member that ran in this window and ran in
    /// the window the turn began with (the target included).
    pub group: Option<Vec<MemberWindow>>,
    /// The set of targets running on this LLC changed since the target's last window (one
    /// started, finished or left): its IPC and MPKI change with it, which is no phase change
    /// of its own.
    pub sharers_changed: bool,
    /// Some other target sharing the LLC missed enough in this window to be worth
    /// profiling by its own policy, and its last profile, if it has one, promised a gain:
    /// there is reused data of others a placement could protect.
    pub sharers_miss: bool,
    /// Of those, one whose profile promised a gain (not only one not yet profiled): a
    /// search for the sharers' gain may take its streams' whole mappings.
    pub sharers_promised: bool,
    /// The other targets of the LLC that ran in this window.
    pub running_sharers: BTreeSet<Pid>,
    /// LLC misses of the other targets of the LLC in this window: they fill the cache the
    /// target shares.
    pub sharer_misses: u64,
    /// What the other targets of the LLC spent on fruitless attempts: the targets of one
    /// LLC share the overhead budget.
    pub sharers_spending: SharedSpending,
}

impl Default for WindowContext {
    fn default() -> Self {
        WindowContext {
            turn: Turn::Granted,
            group: None,
            sharers_changed: false,
            sharers_miss: false,
            sharers_promised: false,
            running_sharers: BTreeSet::new(),
            sharer_misses: 0,
            sharers_spending: SharedSpending::default(),
        }
    }
}
