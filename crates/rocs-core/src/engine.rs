//! The engine of one LLC domain: it owns the controllers of the targets that share that
//! cache, routes observations to them, gives turns, and judges a search by what it does to
//! every sharer.
//!
//! Each controller alone maximises its own target's IPC. When a streaming tenant pollutes
//! the cache of a tenant that reuses data, confining the streamer's pages gives the other
//! tenant its cache back but does not speed the streamer up: the streamer's own search keeps
//! `k = 0` and never sees the gain. And two searches at once disturb each other, because
//! each one's probes change the other target's IPC. So:
//!
//! - **One turn.** Only one target at a time profiles and searches (holds the turn); the
//!   others are told [`Turn::Withheld`] with their windows and wait in Observe or Steady,
//!   keeping their state, judging no phase change by IPC or MPKI (the holder's moves
//!   change theirs too), only by their own LLC references. A target that wanted to
//!   profile meanwhile says so once ([`crate::EventKind::Waiting`]) and looks again when
//!   the turn is free.
//! - **One objective.** The holder's search is given every member's IPC with each window
//!   and records the domain's score of each placement instead of its own IPC (the
//!   controller's `group` module says how it is scored).
//!
//! Like the controller, the engine is sans-IO. Data flows one way: counters and samples in
//! ([`Engine::on`], [`Engine::end_window`]), actions out, tagged with the pid they are for.
//! [`crate::Driver`] carries them to a platform. A domain of one target never withholds the
//! turn and sends no group: a lone target runs exactly as it would alone.

use std::collections::{BTreeMap, BTreeSet};

use crate::controller::{
    Action, Controller, MemberWindow, Observation, State, Turn, WindowContext,
};
use crate::{CounterDelta, Pid};

/// A target of the domain, with what the engine knows of it.
#[derive(Clone, Debug)]
struct Member {
    ctrl: Controller,
    /// When it started waiting for the turn (a window number), while it waits.
    waiting_since: Option<u64>,
    /// Its IPC in the window the current turn began with: a probe before any k = 0
    /// measurement of the search is judged against it.
    turn_ipc: Option<f64>,
}

/// The controllers of the targets that share one LLC.
#[derive(Clone, Debug, Default)]
pub struct Engine {
    members: BTreeMap<Pid, Member>,
    /// Controllers of targets that exited, kept for inspection until detached.
    exited: BTreeMap<Pid, Controller>,
    /// The member that profiles or searches.
    holder: Option<Pid>,
    /// The counters of the window being fed, by member.
    window: BTreeMap<Pid, CounterDelta>,
    /// Windows ended.
    windows: u64,
    /// Members that ran in the previous window.
    running: BTreeSet<Pid>,
    /// Members to tell, with their next window, that the set of running members changed.
    tell_changed: BTreeSet<Pid>,
}

impl Engine {
    pub fn new() -> Self {
        Engine::default()
    }

    /// A target attached on this LLC, with its controller (the target is the controller's
    /// pid). Returns the controller it replaces, if that pid was attached already.
    pub fn attach(&mut self, ctrl: Controller) -> Option<Controller> {
        let pid = ctrl.pid();
        let old = self.detach(pid);
        let member = Member {
            ctrl,
            waiting_since: None,
            turn_ipc: None,
        };
        self.members.insert(pid, member);
        old
    }

    /// A target released (or gone): its controller, taken out of the domain. If it held the
    /// turn, the turn is free.
    pub fn detach(&mut self, pid: Pid) -> Option<Controller> {
        let exited = self.exited.remove(&pid);
        self.leave(pid).or(exited)
    }

    /// The controller of a target, attached or exited.
    pub fn controller(&self, pid: Pid) -> Option<&Controller> {
        self.members
            .get(&pid)
            .map(|m| &m.ctrl)
            .or_else(|| self.exited.get(&pid))
    }

    /// Every controller, attached or exited, by pid.
    pub fn controllers(&self) -> impl Iterator<Item = &Controller> + '_ {
        let mut all: Vec<&Controller> = self
            .members
            .values()
            .map(|m| &m.ctrl)
            .chain(self.exited.values())
            .collect();
        all.sort_by_key(|c| c.pid());
        all.into_iter()
    }

    /// The targets that have not exited, by pid.
    pub fn pids(&self) -> impl ExactSizeIterator<Item = Pid> + '_ {
        self.members.keys().copied()
    }

    /// Targets that have not exited.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The target that profiles or searches now.
    pub fn holder(&self) -> Option<Pid> {
        self.holder
    }

    /// The turn a target has.
    pub fn turn_for(&self, pid: Pid) -> Turn {
        match self.holder {
            Some(holder) if holder != pid => Turn::Withheld { holder },
            _ => Turn::Granted,
        }
    }

    /// An observation for one target (anything but its window's counters, which come
    /// through [`Engine::end_window`]). Returns its controller's actions; an unknown pid has
    /// none. A target that exited leaves the domain (its controller stays until detached).
    pub fn on(&mut self, pid: Pid, obs: Observation<'_>) -> Vec<Action> {
        let exits = matches!(obs, Observation::TargetExited);
        let Some(member) = self.members.get_mut(&pid) else {
            return Vec::new();
        };
        let actions = member.ctrl.on(obs);
        if exits {
            if let Some(ctrl) = self.leave(pid) {
                self.exited.insert(pid, ctrl);
            }
        } else {
            self.update(pid);
        }
        actions
    }

    /// A window ended: every target's counters for it (pids that are not members are
    /// ignored; a member without counters did not run and is not fed). Feeds each member
    /// its window and returns the actions, in order: members waiting for the turn first
    /// (longest waiting first), then by LLC misses in this window, most first (confining
    /// the biggest polluter is what helps the others most, so it should search first when
    /// several want to), then by pid.
    pub fn end_window(&mut self, counters: &[(Pid, CounterDelta)]) -> Vec<(Pid, Action)> {
        self.windows += 1;
        self.window = counters
            .iter()
            .filter(|(pid, _)| self.members.contains_key(pid))
            .map(|&(pid, delta)| (pid, delta))
            .collect();
        self.note_running();
        let mut order: Vec<Pid> = self.window.keys().copied().collect();
        order.sort_by_key(|pid| {
            let waiting = self.members[pid].waiting_since.unwrap_or(u64::MAX);
            let misses = self.window[pid].llc_misses;
            (waiting, std::cmp::Reverse(misses), *pid)
        });
        let mut out = Vec::new();
        for pid in order {
            let context = WindowContext {
                turn: self.turn_for(pid),
                group: (self.holder == Some(pid))
                    .then(|| self.group_window())
                    .flatten(),
                sharers_changed: self.tell_changed.remove(&pid),
                sharers_miss: self.others_miss(pid, false),
                sharers_promised: self.others_miss(pid, true),
                running_sharers: self
                    .running
                    .iter()
                    .filter(|&&p| p != pid)
                    .copied()
                    .collect(),
                sharer_misses: self
                    .window
                    .iter()
                    .filter(|(&p, _)| p != pid)
                    .map(|(_, d)| d.llc_misses)
                    .sum(),
                sharers_spending: self
                    .members
                    .iter()
                    .filter(|(&p, _)| p != pid)
                    .map(|(_, m)| m.ctrl.spent_on_fruitless())
                    .sum(),
            };
            let delta = self.window[&pid];
            let member = self.members.get_mut(&pid).expect("a member");
            let actions = member.ctrl.on_shared_window(delta, context);
            self.update(pid);
            out.extend(actions.into_iter().map(|a| (pid, a)));
        }
        out
    }

    /// Whether a member other than `pid` has reused data that misses: it missed enough in
    /// this window to be worth profiling, by its own policy, and its last profile (if it
    /// has one) promised something. A member whose misses are all on pages that only
    /// stream gains nothing from a placement of `pid`'s pages, and `pid`'s probes would
    /// squeeze `pid`'s own data for nothing (noisy-neighbour's victim, searching for its
    /// neighbour's sake, left its own table on worse frames: 0.81 of off at scale 0.3).
    /// `profiled`: only a member whose profile promised, not one yet to be profiled.
    fn others_miss(&self, pid: Pid, profiled: bool) -> bool {
        self.window.iter().any(|(&other, d)| {
            let ctrl = &self.members[&other].ctrl;
            let promising = match ctrl.last_promise() {
                Some(promise) => promise >= ctrl.knobs().min_promise,
                None => !profiled,
            };
            other != pid && promising && ctrl.worth_profiling(d)
        })
    }

    /// A member that starts or stops running changes the others' cache: they must not take
    /// it for a phase change of their own.
    fn note_running(&mut self) {
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
    }

    /// The window being fed, for the holder's search judged by the domain: each member
    /// that ran in it and in the window the turn began with. `None` when fewer than two
    /// did: a holder whose sharers have all stopped is a lone target, and is judged as one.
    /// (A turn outlives a sharer's exit when the holder's profile, abandoned for it,
    /// starts again in the same window: judged as a group of one, random.md's
    /// ppc970fx-2175732d measured each point over two windows, refined nowhere, and kept
    /// nothing where k = 8 had read +11% and +93%; 1.288 of off, 1.456 judged alone.)
    fn group_window(&self) -> Option<Vec<MemberWindow>> {
        let members: Vec<MemberWindow> = self
            .members
            .iter()
            .filter_map(|(&pid, m)| {
                let (turn_ipc, d) = (m.turn_ipc?, self.window.get(&pid)?);
                let knobs = m.ctrl.knobs();
                (turn_ipc > 0.0 && d.cycles > 0 && d.instructions > 0).then(|| MemberWindow {
                    pid,
                    ipc: d.ipc(),
                    llc_apki: d.llc_references as f64 * 1000.0 / d.instructions as f64,
                    turn_ipc,
                    floor: (!knobs.background).then_some(1.0 - knobs.max_slowdown),
                })
            })
            .collect();
        (members.len() >= 2).then_some(members)
    }

    /// Take a member out of the turn's bookkeeping and return its controller.
    fn leave(&mut self, pid: Pid) -> Option<Controller> {
        let member = self.members.remove(&pid)?;
        self.window.remove(&pid);
        self.tell_changed.remove(&pid);
        if self.running.remove(&pid) {
            self.tell_changed.extend(self.members.keys().copied());
        }
        if self.holder == Some(pid) {
            self.end_turn();
        }
        Some(member.ctrl)
    }

    /// After a member's controller changed: a holder that no longer profiles or searches
    /// frees the turn; a member that started to takes it.
    fn update(&mut self, pid: Pid) {
        let Some(member) = self.members.get(&pid) else {
            return;
        };
        let busy = member.ctrl.holds_turn();
        if self.holder == Some(pid) && !busy {
            self.end_turn();
        }
        if self.holder.is_none() && busy {
            self.begin_turn(pid);
        }
        let windows = self.windows;
        let member = self.members.get_mut(&pid).expect("a member");
        if member.ctrl.waiting_for_turn() {
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
            m.turn_ipc = self
                .window
                .get(p)
                .filter(|d| d.cycles > 0 && d.instructions > 0)
                .map(CounterDelta::ipc);
        }
    }

    fn end_turn(&mut self) {
        self.holder = None;
        for m in self.members.values_mut() {
            m.turn_ipc = None;
        }
    }

    /// The state of every target, by pid (exited ones included).
    pub fn states(&self) -> Vec<(Pid, State)> {
        self.controllers().map(|c| (c.pid(), c.state())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Knobs;

    #[test]
    fn a_member_that_stops_running_is_no_phase_change_of_the_others() {
        let mut engine = Engine::new();
        for pid in [1, 2] {
            let knobs = Knobs {
                min_mpki: 1e9,
                ..Knobs::default()
            };
            engine.attach(Controller::new(pid, knobs, 12, 16).expect("valid knobs"));
        }
        let ran = CounterDelta {
            instructions: 1000,
            cycles: 2000,
            ..CounterDelta::default()
        };
        let idle = CounterDelta::default();
        let set = |pids: &[Pid]| pids.iter().copied().collect::<BTreeSet<Pid>>();
        engine.windows = 1;
        engine.window = [(1, ran), (2, ran)].into();
        engine.note_running();
        assert_eq!(
            engine.tell_changed,
            set(&[]),
            "the first window changes nothing"
        );
        // Member 2 stopped running: member 1 is to be told, with its next window.
        engine.windows = 2;
        engine.window = [(1, ran), (2, idle)].into();
        engine.note_running();
        assert_eq!(engine.tell_changed, set(&[1]));
        // The window feeds it, and nothing changed since: nothing more to tell.
        engine.end_window(&[(1, ran), (2, idle)]);
        assert_eq!(engine.tell_changed, set(&[]));
        // A member that leaves while it ran changes the others' cache too.
        engine.end_window(&[(1, ran), (2, ran)]);
        engine.detach(2);
        assert_eq!(engine.tell_changed, set(&[1]));
    }
}
