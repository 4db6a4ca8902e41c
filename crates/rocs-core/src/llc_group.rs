//! Targets that share one LLC take turns to profile and search, and the target that
//! searches is judged by the throughput of all of them.
//!
//! Each controller alone maximises its own target's IPC. When a streaming tenant pollutes
//! the cache of a tenant that reuses data, confining the streamer's pages gives the other
//! tenant its cache back but does not speed the streamer up: the streamer's own search keeps
//! `k = 0` and never sees the gain. And two searches at once disturb each other, because
//! each one's probes change the other target's IPC. So the targets of one LLC form a group:
//!
//! - **One turn.** Only one member at a time profiles and searches (holds the turn); the
//!   others are told [`Turn::Withheld`] and wait in Observe or Steady, keeping their state,
//!   without watching for phase changes (the holder's moves change their IPC too). A member
//!   that wanted to profile meanwhile says so once ([`crate::EventKind::Waiting`]) and looks
//!   again when the turn is free.
//! - **One objective.** The holder's search records the group's score of each window
//!   ([`LlcGroup::score`]) instead of its own IPC.
//!
//! The group is sans-IO like the controller, and owns no controller: the driver keeps its
//! controllers and feeds each one through the group. At the end of every window:
//!
//! 1. drain and feed each member's samples and sample loss, as for a lone target;
//! 2. read every member's counters (the same stretch of time) and pass them to
//!    [`LlcGroup::begin_window`], which returns the order in which to feed the members;
//! 3. in that order, [`LlcGroup::feed`] each member's window, and carry out the actions it
//!    returns (feeding migration reports to the controller as usual).
//!
//! Members [`join`](LlcGroup::join) when they are attached and [`leave`](LlcGroup::leave)
//! when they exit or are released; a holder that leaves frees the turn. A group of one
//! member never withholds the turn and sends no score: a lone target runs exactly as it
//! would without a group.

use std::collections::{BTreeMap, BTreeSet};

use crate::controller::{Action, Controller, Observation, Turn};
use crate::{CounterDelta, Pid};

/// One member of the group.
#[derive(Clone, Debug, Default, PartialEq)]
struct Member {
    /// The turn this member's controller was last told.
    told: Option<Turn>,
    /// When it started waiting for the turn (a sequence number), while it waits.
    waiting_since: Option<u64>,
    /// Its IPC in the window before the current turn began: the pace its score is
    /// measured against during that turn.
    reference_ipc: Option<f64>,
}

/// The controllers of the targets that share one LLC.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LlcGroup {
    members: BTreeMap<Pid, Member>,
    /// The member that profiles or searches.
    holder: Option<Pid>,
    /// The holder's search is judged by the group's score (the turn began with at least two
    /// members to measure).
    scored: bool,
    /// The counters of the window being fed, by member.
    window: BTreeMap<Pid, CounterDelta>,
    /// Windows begun (orders the waiting members).
    windows: u64,
    /// Members that ran in the previous window.
    running: BTreeSet<Pid>,
    /// Members to tell, in this window, that the set of running members changed.
    tell_changed: BTreeSet<Pid>,
}

impl LlcGroup {
    pub fn new() -> Self {
        LlcGroup::default()
    }

    /// A target attached on this LLC. Joining twice changes nothing.
    pub fn join(&mut self, pid: Pid) {
        self.members.entry(pid).or_default();
    }

    /// A target exited or was released. If it held the turn, the turn is free.
    pub fn leave(&mut self, pid: Pid) {
        self.members.remove(&pid);
        self.window.remove(&pid);
        self.tell_changed.remove(&pid);
        if self.running.remove(&pid) {
            self.tell_changed.extend(self.members.keys().copied());
        }
        if self.holder == Some(pid) {
            self.end_turn();
        }
    }

    /// Members, by pid.
    pub fn members(&self) -> impl ExactSizeIterator<Item = Pid> + '_ {
        self.members.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The member that profiles or searches now.
    pub fn holder(&self) -> Option<Pid> {
        self.holder
    }

    /// The turn a member's controller is told.
    pub fn turn_for(&self, pid: Pid) -> Turn {
        match self.holder {
            Some(holder) if holder != pid => Turn::Withheld { holder },
            _ => Turn::Granted,
        }
    }

    /// A window ended: every member's counters for it (pids that are not members are
    /// ignored; a member without counters did not run). Returns the members in the order to
    /// feed them: those waiting for the turn first (longest waiting first), then by LLC
    /// misses in this window, most first (confining the biggest polluter is what helps the
    /// others most, so it should search first when several want to), then by pid.
    pub fn begin_window(&mut self, counters: &[(Pid, CounterDelta)]) -> Vec<Pid> {
        self.windows += 1;
        self.window = counters
            .iter()
            .filter(|(pid, _)| self.members.contains_key(pid))
            .map(|&(pid, delta)| (pid, delta))
            .collect();
        // A member that starts or stops running changes the others' cache: they must not
        // take it for a phase change of their own.
        let running: BTreeSet<Pid> = self
            .window
            .iter()
            .filter(|(_, d)| d.cycles > 0 && d.instructions > 0)
            .map(|(&pid, _)| pid)
            .collect();
        let changed: BTreeSet<Pid> = running
            .symmetric_difference(&self.running)
            .copied()
            .collect();
        if self.windows > 1 && !changed.is_empty() && self.members.len() > 1 {
            self.tell_changed
                .extend(self.members.keys().filter(|p| !changed.contains(p)));
        }
        self.running = running;
        let mut order: Vec<Pid> = self.members.keys().copied().collect();
        order.sort_by_key(|pid| {
            let waiting = self.members[pid].waiting_since.unwrap_or(u64::MAX);
            let misses = self.window.get(pid).map_or(0, |d| d.llc_misses);
            (waiting, std::cmp::Reverse(misses), *pid)
        });
        order
    }

    /// For drivers whose members' windows do not line up (rocsd on Linux: one task per
    /// target, each on its own timer of the same period): this member's counters become its
    /// latest window, the others' latest stay, and the window count advances. Call it, then
    /// [`LlcGroup::feed`]. The score then combines windows that overlap rather than
    /// coincide; turns work the same.
    pub fn note_counters(&mut self, pid: Pid, delta: CounterDelta) {
        if self.members.contains_key(&pid) {
            self.windows += 1;
            self.window.insert(pid, delta);
        }
    }

    /// The group's score of the window being fed: the mean, over the members that have a
    /// reference pace for this turn and ran in the window, of IPC / reference IPC (the
    /// normalised weighted speedup of the mix). `None` when no such member ran.
    ///
    /// Why this measure: the oracle (rocs-sim's Best Offline) minimises the elapsed cycles
    /// of the whole mix, each process on its own core (`RunStats::cycles` is the longest
    /// process's). Online nobody knows which tenant will finish last nor how much work it has
    /// left, so each tenant's progress counts relative to its own pace: a memory-bound
    /// tenant that speeds up by 40% is worth as much as a fast one that speeds up by 40%,
    /// whatever their raw IPCs (a sum of raw IPCs would weigh most the high-IPC streamer, the
    /// tenant that gains least from the cache). This is the usual throughput measure of a
    /// multiprogrammed mix (weighted speedup), and it is 1 at the pace the turn began with.
    /// The references stay fixed for the whole turn, so the score is linear in each
    /// member's IPC and the search's noise handling (means, pooled deviation, relative
    /// margin) applies to it as to one target's IPC.
    pub fn score(&self) -> Option<f64> {
        let (mut sum, mut n) = (0.0, 0usize);
        for (pid, m) in &self.members {
            let (Some(reference), Some(d)) = (m.reference_ipc, self.window.get(pid)) else {
                continue;
            };
            if reference > 0.0 && d.cycles > 0 && d.instructions > 0 {
                sum += d.ipc() / reference;
                n += 1;
            }
        }
        (n > 0).then(|| sum / n as f64)
    }

    /// Feed one member's window to its controller: the turn (when it changed), the group's
    /// score (to the holder, when the turn is scored), then the counters. Returns the
    /// controller's actions, to carry out as usual. A controller that is not a member is
    /// fed its window alone.
    pub fn feed(&mut self, ctrl: &mut Controller, delta: CounterDelta) -> Vec<Action> {
        let pid = ctrl.pid();
        if !self.members.contains_key(&pid) {
            return ctrl.on(Observation::Window(delta));
        }
        self.update(ctrl);
        let mut out = Vec::new();
        let turn = self.turn_for(pid);
        let member = self.members.get_mut(&pid).expect("a member");
        if member.told != Some(turn) {
            member.told = Some(turn);
            out.extend(ctrl.on(Observation::Turn(turn)));
        }
        if self.tell_changed.remove(&pid) {
            out.extend(ctrl.on(Observation::SharersChanged));
        }
        if self.scored && self.holder == Some(pid) {
            if let Some(score) = self.score() {
                out.extend(ctrl.on(Observation::GroupScore(score)));
            }
        }
        out.extend(ctrl.on(Observation::Window(delta)));
        self.update(ctrl);
        out
    }

    /// Take note of a member's controller after its actions were carried out (a search can
    /// end on a migration report): a holder that no longer profiles or searches frees the
    /// turn; a member that started to takes it. [`LlcGroup::feed`] calls this itself.
    pub fn update(&mut self, ctrl: &Controller) {
        let pid = ctrl.pid();
        if !self.members.contains_key(&pid) {
            return;
        }
        let busy = ctrl.holds_turn();
        if self.holder == Some(pid) && !busy {
            self.end_turn();
        }
        if self.holder.is_none() && busy {
            self.begin_turn(pid);
        }
        let windows = self.windows;
        let member = self.members.get_mut(&pid).expect("a member");
        if ctrl.waiting_for_turn() {
            member.waiting_since.get_or_insert(windows);
        } else {
            member.waiting_since = None;
        }
    }

    fn begin_turn(&mut self, pid: Pid) {
        self.holder = Some(pid);
        // Each member's pace in the window the turn began with: the holder decided to
        // profile on this window, before any sampling or move of the turn.
        for (p, m) in self.members.iter_mut() {
            m.reference_ipc = self
                .window
                .get(p)
                .filter(|d| d.cycles > 0 && d.instructions > 0)
                .map(CounterDelta::ipc);
        }
        let measured = self
            .members
            .values()
            .filter(|m| m.reference_ipc.is_some())
            .count();
        self.scored = measured >= 2;
    }

    fn end_turn(&mut self) {
        self.holder = None;
        self.scored = false;
        for m in self.members.values_mut() {
            m.reference_ipc = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{ColourReport, EventKind, MigrationReport, State};
    use crate::{Colour, DataSource, Knobs, MemSample, Placement};

    const SHIFT: u32 = 12;

    /// A target on a fake platform: every move and query succeeds; while sampling, each
    /// window brings samples that miss on pages `first..first + 64`.
    struct Target {
        ctrl: Controller,
        first: u64,
        sampling: bool,
        events: Vec<EventKind>,
    }

    impl Target {
        fn new(pid: Pid, first: u64) -> Self {
            let knobs = Knobs {
                profile_windows: 1,
                min_samples_per_page: 1,
                ..Knobs::default()
            };
            Target {
                ctrl: Controller::new(pid, knobs, SHIFT, 16).expect("valid knobs"),
                first,
                sampling: false,
                events: Vec::new(),
            }
        }

        fn pid(&self) -> Pid {
            self.ctrl.pid()
        }

        fn samples(&self) -> Vec<MemSample> {
            (0..640u64)
                .map(|i| MemSample {
                    pid: self.pid(),
                    tid: self.pid(),
                    vaddr: (self.first + i % 64) << SHIFT,
                    paddr: None,
                    // The first pages miss more: the stack has an order.
                    source: if i % 64 < 32 || i % 3 == 0 {
                        DataSource::LlcMiss
                    } else {
                        DataSource::LlcHit
                    },
                    weight: 0,
                    time: i,
                })
                .collect()
        }

        fn carry_out(&mut self, actions: Vec<Action>) {
            let mut queue: std::collections::VecDeque<Action> = actions.into();
            let ordinary = (0..16)
                .map(Colour)
                .find(|c| !self.ctrl.pollute_colours().contains(c))
                .expect("an ordinary colour");
            let pollute = self.ctrl.pollute_colours()[0];
            while let Some(a) = queue.pop_front() {
                match a {
                    Action::StartSampling(_) => self.sampling = true,
                    Action::StopSampling => self.sampling = false,
                    Action::Migrate { pages, to } => {
                        let c = if to == Placement::Pollute {
                            pollute
                        } else {
                            ordinary
                        };
                        let results = vec![Ok(c); pages.len()];
                        let report = MigrationReport { to, pages, results };
                        queue.extend(self.ctrl.on(Observation::Migrated(report)));
                    }
                    Action::Query { pages } => {
                        let results = vec![Ok(ordinary); pages.len()];
                        let report = ColourReport { pages, results };
                        queue.extend(self.ctrl.on(Observation::Colours(report)));
                    }
                    Action::Report(e) => self.events.push(e.kind),
                }
            }
        }
    }

    /// A window with this IPC that misses enough to be worth profiling.
    fn delta(ipc: f64) -> CounterDelta {
        let cycles = 1_000_000;
        let instructions = (ipc * cycles as f64) as u64;
        CounterDelta {
            instructions,
            cycles,
            llc_references: instructions / 20,
            llc_misses: instructions / 40,
            time_enabled: cycles,
            time_running: cycles,
        }
    }

    /// One window of every target through the group, with the IPC `ipc(pid)`.
    fn window(group: &mut LlcGroup, targets: &mut [Target], ipc: &dyn Fn(Pid) -> f64) {
        for t in targets.iter_mut() {
            if t.sampling {
                let samples = t.samples();
                let a = t.ctrl.on(Observation::Samples(&samples));
                t.carry_out(a);
            }
        }
        let counters: Vec<(Pid, CounterDelta)> = targets
            .iter()
            .map(|t| (t.pid(), delta(ipc(t.pid()))))
            .collect();
        for pid in group.begin_window(&counters) {
            let t = targets.iter_mut().find(|t| t.pid() == pid).expect("member");
            let a = group.feed(&mut t.ctrl, delta(ipc(pid)));
            t.carry_out(a);
            group.update(&t.ctrl);
        }
    }

    fn busy(targets: &[Target]) -> Vec<Pid> {
        targets
            .iter()
            .filter(|t| t.ctrl.holds_turn())
            .map(Target::pid)
            .collect()
    }

    #[test]
    fn one_target_at_a_time_profiles_and_searches() {
        let mut group = LlcGroup::new();
        let mut targets = vec![Target::new(1, 0x1000), Target::new(2, 0x2000)];
        for t in &targets {
            group.join(t.pid());
        }
        let mut turns = Vec::new();
        for _ in 0..200 {
            window(&mut group, &mut targets, &|_| 0.5);
            let b = busy(&targets);
            assert!(b.len() <= 1, "two targets hold the turn: {b:?}");
            assert_eq!(b.first().copied(), group.holder());
            if let Some(&h) = b.first() {
                if turns.last() != Some(&h) {
                    turns.push(h);
                }
            }
        }
        // Both took a turn, one after the other.
        assert!(turns.contains(&1) && turns.contains(&2), "turns: {turns:?}");
        // The one that waited said for whom, and why.
        let waited: Vec<(Pid, &EventKind)> = targets
            .iter()
            .flat_map(|t| t.events.iter().map(move |e| (t.pid(), e)))
            .filter(|(_, e)| matches!(e, EventKind::Waiting { .. }))
            .collect();
        assert!(!waited.is_empty(), "nobody waited");
        for (pid, e) in waited {
            let EventKind::Waiting { holder, reason } = e else {
                unreachable!()
            };
            assert_ne!(*holder, pid);
            assert!(reason.contains("LLC miss rate"), "{reason}");
        }
    }

    #[test]
    fn the_biggest_polluter_goes_first() {
        let mut group = LlcGroup::new();
        group.join(1);
        group.join(2);
        let mut a = delta(0.5);
        a.llc_misses = 10;
        let b = delta(0.5);
        assert_eq!(group.begin_window(&[(1, a), (2, b)]), vec![2, 1]);
    }

    #[test]
    fn a_holder_that_leaves_frees_the_turn() {
        let mut group = LlcGroup::new();
        let mut targets = vec![Target::new(1, 0x1000), Target::new(2, 0x2000)];
        for t in &targets {
            group.join(t.pid());
        }
        // Run until one searches while the other waits.
        let mut holder = None;
        for _ in 0..20 {
            window(&mut group, &mut targets, &|_| 0.5);
            let waiting = targets.iter().any(|t| t.ctrl.waiting_for_turn());
            if let Some(t) = targets.iter().find(|t| t.ctrl.state() == State::Search) {
                if waiting {
                    holder = Some(t.pid());
                    break;
                }
            }
        }
        let holder = holder.expect("one searches while the other waits");
        let i = targets
            .iter()
            .position(|t| t.pid() == holder)
            .expect("present");
        let mut gone = targets.remove(i);
        let a = gone.ctrl.on(Observation::TargetExited);
        gone.carry_out(a);
        group.leave(holder);
        assert_eq!(group.holder(), None);
        assert_eq!(group.len(), 1);
        // The other gets the turn and profiles at once.
        window(&mut group, &mut targets, &|_| 0.5);
        assert_eq!(targets[0].ctrl.state(), State::Profile);
        assert_eq!(group.holder(), Some(targets[0].pid()));
        // A newcomer while it holds the turn waits.
        let mut newcomer = Target::new(3, 0x3000);
        group.join(3);
        newcomer.carry_out(Vec::new());
        targets.push(newcomer);
        window(&mut group, &mut targets, &|_| 0.5);
        assert_eq!(
            targets[1].ctrl.turn(),
            Turn::Withheld {
                holder: targets[0].pid()
            }
        );
        assert_ne!(targets[1].ctrl.state(), State::Profile);
    }

    #[test]
    fn the_search_records_the_groups_score() {
        let mut group = LlcGroup::new();
        let mut targets = vec![Target::new(1, 0x1000), Target::new(2, 0x2000)];
        for t in &targets {
            group.join(t.pid());
        }
        // Target 2's IPC doubles whenever target 1 confines anything (target 1 is the
        // streamer, 2 the victim); target 1's own IPC does not move.
        for _ in 0..60 {
            let confining = !targets[0].ctrl.confined().is_empty();
            let victim = if confining { 0.4 } else { 0.2 };
            window(&mut group, &mut targets, &|pid| {
                if pid == 1 {
                    0.5
                } else {
                    victim
                }
            });
        }
        let t1 = &targets[0];
        let steps: Vec<(usize, f64, Option<f64>)> = t1
            .events
            .iter()
            .filter_map(|e| match e {
                EventKind::SearchStep {
                    k,
                    ipc,
                    group_score,
                    ..
                } => Some((*k, *ipc, *group_score)),
                _ => None,
            })
            .collect();
        assert!(
            !steps.is_empty(),
            "target 1 never searched: {:?}",
            t1.events
        );
        for &(k, ipc, score) in &steps {
            // Both paces were measured before the turn (0.5 and 0.2): the score is the
            // mean of the two targets' speedups over them.
            let victim = if k > 0 { 0.4 } else { 0.2 };
            let want = (ipc / 0.5 + victim / 0.2) / 2.0;
            let score = score.expect("a group score");
            assert!((score - want).abs() < 1e-9, "k = {k}: {score} vs {want}");
        }
        // Judged by the group, the streamer confines: its own IPC never moved.
        assert!(!t1.ctrl.confined().is_empty(), "steps: {steps:?}");
        let recorded = t1.ctrl.search().expect("searched").measurements();
        assert!(recorded
            .iter()
            .any(|(k, m, _)| k > 0 && (m - 1.5).abs() < 1e-9));
    }

    #[test]
    fn unaligned_windows_take_turns_and_score_on_the_latest_counters() {
        // rocsd on Linux: each target's task ends its windows on its own timer.
        let mut group = LlcGroup::new();
        let mut targets = vec![Target::new(1, 0x1000), Target::new(2, 0x2000)];
        for t in &targets {
            group.join(t.pid());
        }
        for round in 0..200 {
            for i in 0..targets.len() {
                let t = &mut targets[i];
                if t.sampling {
                    let samples = t.samples();
                    let a = t.ctrl.on(Observation::Samples(&samples));
                    t.carry_out(a);
                }
                let victim = if round % 2 == 0 { 0.2 } else { 0.3 };
                let d = delta(if t.pid() == 1 { 0.5 } else { victim });
                group.note_counters(t.pid(), d);
                let a = group.feed(&mut t.ctrl, d);
                t.carry_out(a);
                group.update(&t.ctrl);
                assert!(
                    busy(&targets).len() <= 1,
                    "round {round}: two hold the turn"
                );
            }
        }
        for t in &targets {
            assert!(t.ctrl.stats().searches > 0, "{} never searched", t.pid());
        }
        // The score combines each member's latest window.
        let mut group = LlcGroup::new();
        group.join(1);
        group.join(2);
        let mut a = Target::new(1, 0x1000);
        group.note_counters(2, delta(0.2));
        group.note_counters(1, delta(0.5));
        // Member 1 starts to profile: the paces are the latest windows, 0.5 and 0.2.
        let _ = group.feed(&mut a.ctrl, delta(0.5));
        assert_eq!(group.holder(), Some(1));
        group.note_counters(2, delta(0.3));
        let score = group.score().expect("both measured");
        assert!((score - (1.0 + 1.5) / 2.0).abs() < 1e-9, "{score}");
    }

    #[test]
    fn a_member_that_stops_running_is_no_phase_change_of_the_others() {
        let mut group = LlcGroup::new();
        group.join(1);
        group.join(2);
        let mut t1 = Target::new(1, 0x1000);
        let ran = delta(0.5);
        let idle = CounterDelta::default();
        group.begin_window(&[(1, ran), (2, ran)]);
        let _ = group.feed(&mut t1.ctrl, ran);
        assert!(!group.tell_changed.contains(&1));
        // Member 2 stopped running: member 1 is told before its next window.
        group.begin_window(&[(1, ran), (2, idle)]);
        assert!(group.tell_changed.contains(&1));
        let _ = group.feed(&mut t1.ctrl, ran);
        assert!(!group.tell_changed.contains(&1));
        // Nothing changed since: nothing to tell.
        group.begin_window(&[(1, ran), (2, idle)]);
        assert!(group.tell_changed.is_empty());
    }

    #[test]
    fn a_group_of_one_sends_no_score_and_never_withholds() {
        let mut group = LlcGroup::new();
        let mut targets = vec![Target::new(1, 0x1000)];
        group.join(1);
        for _ in 0..40 {
            window(&mut group, &mut targets, &|_| 0.5);
            assert_eq!(targets[0].ctrl.turn(), Turn::Granted);
        }
        assert!(targets[0].events.iter().any(|e| matches!(
            e,
            EventKind::SearchStep {
                group_score: None,
                ..
            }
        )));
        assert!(!targets[0]
            .events
            .iter()
            .any(|e| matches!(e, EventKind::Waiting { .. })));
    }
}
