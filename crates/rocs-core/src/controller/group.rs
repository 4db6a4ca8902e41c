//! How a search judged by its LLC domain scores a placement: each member's pace (its IPC
//! there over its IPC at k = 0), combined so that starving one member never pays.

use std::collections::BTreeMap;

use super::messages::{MemberWindow, SharerPace};
use crate::phase::MPKI_FLOOR;
use crate::Pid;

/// Windows measured, and averaged, at each placement of a search judged by its domain:
/// the others' gain comes in bursts (while a partly confined stream sweeps its confined
/// part), and one window says more about where the sweep was than about `k`.
const MEASURE_WINDOWS: usize = 2;

/// A sharer whose LLC references per instruction differ by more than this share from its
/// own at k = 0 (judged against at least `MPKI_FLOOR` of them: a sharer that made none at
/// k = 0 and makes 90 now runs another phase too) runs another phase: the searcher's
/// placement decides which of a sharer's LLC references hit, not how many it makes (its
/// private caches hold none of the searcher's pages). In the simulator a sharer's rate
/// stays within 2% of its k = 0 rate at every placement, even where the placement doubles
/// its pace; phases moved it by 14% and by 99% while its IPC rose 7- and 10-fold.
const OTHER_PHASE: f64 = 0.10;

/// Whether LLC references per kilo-instruction at `now` are of another phase than at `was`
/// (see [`OTHER_PHASE`]).
fn other_phase(was: f64, now: f64) -> bool {
    (now - was).abs() > OTHER_PHASE * was.max(MPKI_FLOOR)
}

/// A mean kept as a sum and a count.
#[derive(Clone, Copy, Debug, Default)]
struct Mean {
    sum: f64,
    n: u32,
}

impl Mean {
    fn add(&mut self, x: f64) {
        self.sum += x;
        self.n += 1;
    }

    fn get(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// One member's k = 0 reference: its mean IPC and LLC references per kilo-instruction
/// over the search's k = 0 placements (each placement's mean counts once).
#[derive(Clone, Copy, Debug, Default)]
struct Reference {
    ipc: Mean,
    llc_apki: Mean,
}

/// The windows measured at the current placement, each member's k = 0 reference, and
/// each member's mean pace at each placement measured.
#[derive(Clone, Debug, Default)]
pub(super) struct GroupJudge {
    span: Vec<Vec<MemberWindow>>,
    at_zero: BTreeMap<Pid, Reference>,
    paces_at: BTreeMap<(usize, Pid), Mean>,
}

impl GroupJudge {
    /// A window measured at the current placement; `true` once enough are in to judge it.
    pub fn window(&mut self, members: Vec<MemberWindow>) -> bool {
        self.span.push(members);
        self.span.len() >= MEASURE_WINDOWS
    }

    /// The score of the placement `k` of `searcher`'s pages, measured over the windows
    /// given since the last judgement, and each member's pace; `None` if no member ran in
    /// them.
    ///
    /// A member's pace is its mean IPC over those windows over its IPC at k = 0: the mean
    /// of the search's k = 0 measurements so far (a sharer's in its current phase: a k = 0
    /// measurement of another phase, see [`OTHER_PHASE`], starts its reference afresh).
    /// Measured against k = 0 of the same search, a member whose own phase changed after
    /// the turn began is not taken for one the placement slowed (a reference taken once,
    /// when the turn began, had a phased neighbour at a tenth of its pace at every k, and
    /// the search chased its phases).
    /// Before any k = 0 measurement, a k = 0 placement is its own reference (pace 1) and
    /// any other is judged against the window the turn began with.
    ///
    /// A sharer whose phase changed since k = 0 (see [`OTHER_PHASE`]) counts at pace 1:
    /// its IPC says what it runs now, not what the placement did (a sharer entering a
    /// phase that fits in its L1 ran at 7 times its k = 0 pace, and a search confined the
    /// searcher's reused pages for it: 0.77 of off). The searcher itself is always
    /// counted: confining its pages squeezes its own physically indexed private caches,
    /// which changes its rate, and that cost is the placement's.
    ///
    /// The score is the harmonic mean of the paces: each member's progress counts relative
    /// to its own (a memory-bound member that speeds up by 40% is worth as much as a fast
    /// one that does), and the harmonic mean is the throughput measure that does not
    /// reward starving one member to speed up another (one at 4x and one at 0.16x score
    /// 0.31, not the 2.1 of their plain mean). A placement that slows a member below its
    /// floor (`max_slowdown`, unless it is background) scores that member's pace instead,
    /// below k = 0's, so no search chooses it. Both go by the member's mean pace over the
    /// search's measurements of that placement, not by the last one alone: a
    /// sharer's measurements scatter as much as its k = 0 ones, and one of them past the
    /// floor refused a placement that had measured it within (random.md's run 83: k = 5
    /// doubled its searcher's pace, its sharer read +3.2% and then -7.5%, its own k = 0
    /// measurements -9.8% to +4.5%; the search kept nothing). A k = 0 measurement is
    /// judged by itself, as k = 0's scatter is what the search's noise test reads.
    pub fn judge(&mut self, k: usize, searcher: Pid) -> Option<(f64, Vec<SharerPace>)> {
        let span = std::mem::take(&mut self.span);
        let mut measured: BTreeMap<Pid, (Reference, MemberWindow)> = BTreeMap::new();
        for m in span.iter().flatten() {
            let e = measured.entry(m.pid).or_insert((Reference::default(), *m));
            e.0.ipc.add(m.ipc);
            e.0.llc_apki.add(m.llc_apki);
        }
        if k == 0 {
            // A sharer whose LLC references left its k = 0 rate runs another phase: its
            // k = 0 reference is taken afresh, in the phase it runs now. (The searcher's
            // own phase is its search's to see: see `Controller::search_window`.)
            // Its paces at placements, taken against the old reference, go with it.
            let mut afresh = Vec::new();
            self.at_zero.retain(|&pid, z| {
                let now = measured.get(&pid).and_then(|(here, _)| here.llc_apki.get());
                let left = z
                    .llc_apki
                    .get()
                    .zip(now)
                    .is_some_and(|(was, now)| other_phase(was, now));
                let kept = pid == searcher || !left;
                if !kept {
                    afresh.push(pid);
                }
                kept
            });
            self.paces_at.retain(|(_, pid), _| !afresh.contains(pid));
        }
        let mut paces = Vec::new();
        let mut counted = Vec::new();
        let mut floors = Vec::new();
        let mut floored = Vec::new();
        for (&pid, (here, last)) in &measured {
            let mean = here.ipc.get().expect("measured");
            let zero = self.at_zero.get(&pid);
            let reference = match zero.and_then(|z| z.ipc.get()) {
                Some(ipc) => ipc,
                None if k == 0 => mean,
                None => last.turn_ipc,
            };
            if reference <= 0.0 || mean <= 0.0 {
                continue;
            }
            let pace = mean / reference;
            let apki = here.llc_apki.get().expect("measured");
            let other_phase = pid != searcher
                && k > 0
                && zero
                    .and_then(|z| z.llc_apki.get())
                    .is_some_and(|z| other_phase(z, apki));
            paces.push(SharerPace {
                pid,
                pace,
                other_phase,
            });
            let counted_pace = if other_phase { 1.0 } else { pace };
            counted.push(counted_pace);
            floored.push(if k > 0 && !other_phase {
                let mean = self.paces_at.entry((k, pid)).or_default();
                mean.add(pace);
                mean.get().expect("added")
            } else {
                counted_pace
            });
            floors.push(last.floor);
        }
        if k == 0 {
            for (&pid, (here, _)) in &measured {
                let z = self.at_zero.entry(pid).or_default();
                z.ipc.add(here.ipc.get().expect("measured"));
                z.llc_apki.add(here.llc_apki.get().expect("measured"));
            }
        }
        if paces.is_empty() {
            return None;
        }
        let inverse: f64 = counted.iter().map(|p| 1.0 / p).sum();
        let harmonic = counted.len() as f64 / inverse;
        let refused = floored
            .iter()
            .zip(&floors)
            .filter(|(&p, floor)| floor.is_some_and(|f| p < f))
            .map(|(&p, _)| p)
            .reduce(f64::min);
        Some((refused.map_or(harmonic, |worst| worst.min(harmonic)), paces))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(pid: Pid, ipc: f64, turn_ipc: f64) -> MemberWindow {
        MemberWindow {
            pid,
            ipc,
            llc_apki: 10.0,
            turn_ipc,
            floor: Some(0.95),
        }
    }

    fn judged(j: &mut GroupJudge, k: usize, ipcs: [f64; 2], turn: [f64; 2]) -> f64 {
        let w = || vec![member(1, ipcs[0], turn[0]), member(2, ipcs[1], turn[1])];
        assert!(!j.window(w()));
        assert!(j.window(w()));
        j.judge(k, 1).expect("both ran").0
    }

    #[test]
    fn paces_are_against_the_searchs_own_k0_not_the_turns_first_window() {
        // Member 2 was in a fast phase when the turn began (0.8) and runs at 0.2 since.
        let turn = [0.5, 0.8];
        let mut j = GroupJudge::default();
        assert_eq!(judged(&mut j, 0, [0.5, 0.2], turn), 1.0);
        // Confining doubles member 2's pace and costs member 1 nothing.
        let gain = judged(&mut j, 7, [0.5, 0.4], turn);
        assert!((gain - 2.0 / (1.0 + 0.5)).abs() < 1e-12, "{gain}");
        // Another k = 0 measurement is judged against the first.
        assert!((judged(&mut j, 0, [0.5, 0.22], turn) - 2.0 / (1.0 + 1.0 / 1.1)).abs() < 1e-12);
    }

    #[test]
    fn a_placement_that_slows_a_member_past_its_floor_scores_its_pace() {
        let turn = [0.5, 0.8];
        let mut j = GroupJudge::default();
        judged(&mut j, 0, [0.5, 0.2], turn);
        // Member 2 gains 50%, member 1 pays 10%: refused, whatever the harmonic mean.
        let score = judged(&mut j, 7, [0.45, 0.3], turn);
        assert!((score - 0.9).abs() < 1e-12, "{score}");
        // Background, member 1 may pay.
        let mut j = GroupJudge::default();
        let bg = |ipcs: [f64; 2]| {
            vec![
                MemberWindow {
                    floor: None,
                    ..member(1, ipcs[0], 0.5)
                },
                member(2, ipcs[1], 0.8),
            ]
        };
        for (k, ipcs) in [(0, [0.5, 0.2]), (7, [0.45, 0.3])] {
            j.window(bg(ipcs));
            j.window(bg(ipcs));
            let score = j.judge(k, 1).expect("both ran").0;
            if k == 7 {
                assert!((score - 2.0 / (1.0 / 0.9 + 1.0 / 1.5)).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn a_member_is_past_its_floor_by_its_mean_pace_at_the_placement() {
        let turn = [0.5, 0.8];
        let mut j = GroupJudge::default();
        judged(&mut j, 0, [0.5, 0.2], turn);
        // Member 1 doubles; member 2 reads +3% and then -7.5%: -2.25% on the mean, within
        // its floor, so the second measurement scores the harmonic mean, not 0.925.
        judged(&mut j, 5, [1.0, 0.206], turn);
        let again = judged(&mut j, 5, [1.0, 0.185], turn);
        assert!((again - 2.0 / (0.5 + 1.0 / 0.925)).abs() < 1e-12, "{again}");
        // Read past the floor again, its mean is too: refused at its mean pace.
        let third = judged(&mut j, 5, [1.0, 0.16], turn);
        assert!(
            (third - (1.03 + 0.925 + 0.8) / 3.0).abs() < 1e-12,
            "{third}"
        );
        // Another placement starts its own mean.
        let other = judged(&mut j, 9, [1.0, 0.185], turn);
        assert!((other - 0.925).abs() < 1e-12, "{other}");
    }

    #[test]
    fn a_sharer_whose_reference_is_taken_afresh_forgets_its_paces_at_placements() {
        let turn = [0.5, 0.2];
        let mut j = GroupJudge::default();
        judged(&mut j, 0, [0.5, 0.2], turn);
        // k = 5 slows member 2 to 0.85 of its pace: refused.
        assert!((judged(&mut j, 5, [1.0, 0.17], turn) - 0.85).abs() < 1e-12);
        // k = 0 again finds member 2 in another phase (twice the LLC references) at 0.1.
        let phase = |ipc1: f64, ipc2: f64| {
            vec![
                member(1, ipc1, 0.5),
                MemberWindow {
                    llc_apki: 20.0,
                    ..member(2, ipc2, 0.2)
                },
            ]
        };
        j.window(phase(0.5, 0.1));
        j.window(phase(0.5, 0.1));
        j.judge(0, 1).expect("both ran");
        // At k = 5 member 1 doubles again and member 2 keeps its new pace: judged against
        // its new reference alone, not on a mean with the 0.85 read against the old one
        // (0.925, past its floor).
        j.window(phase(1.0, 0.1));
        j.window(phase(1.0, 0.1));
        let score = j.judge(5, 1).expect("both ran").0;
        assert!((score - 2.0 / (0.5 + 1.0)).abs() < 1e-12, "{score}");
    }

    #[test]
    fn a_sharer_in_another_phase_counts_at_pace_one_and_the_searcher_always_counts() {
        let turn = [0.5, 0.2];
        let mut j = GroupJudge::default();
        judged(&mut j, 0, [0.5, 0.2], turn);
        // Member 2 runs 7 times as fast and reaches the LLC 20% less often: another
        // phase. Member 1, the searcher, reaches it twice as often (its own confined
        // pages squeeze its private caches) and pays 2%: that is the placement's.
        let w = || {
            vec![
                MemberWindow {
                    llc_apki: 20.0,
                    ..member(1, 0.49, 0.5)
                },
                MemberWindow {
                    llc_apki: 8.0,
                    ..member(2, 1.4, 0.2)
                },
            ]
        };
        j.window(w());
        j.window(w());
        let (score, paces) = j.judge(5, 1).expect("both ran");
        assert!((score - 2.0 / (1.0 / 0.98 + 1.0)).abs() < 1e-12, "{score}");
        assert!(!paces[0].other_phase);
        assert!(paces[1].other_phase && (paces[1].pace - 7.0).abs() < 1e-12);
        // Within the band, the same sharer's gain counts.
        let w = || {
            vec![
                member(1, 0.49, 0.5),
                MemberWindow {
                    llc_apki: 9.5,
                    ..member(2, 0.4, 0.2)
                },
            ]
        };
        j.window(w());
        j.window(w());
        let (score, paces) = j.judge(5, 1).expect("both ran");
        assert!(!paces[1].other_phase);
        assert!((score - 2.0 / (1.0 / 0.98 + 0.5)).abs() < 1e-12, "{score}");
    }

    #[test]
    fn a_sharer_that_made_no_llc_references_at_k0_and_makes_them_now_is_in_another_phase() {
        // random.md's run 173: a sharer running in its L2 (no LLC references) at k = 0
        // entered a phase of 93 references per kilo-instruction during a probe, and its
        // IPC fell by a third; the search took that for the probe's cost and refused it.
        let mut j = GroupJudge::default();
        let w = |k0: bool| {
            vec![
                member(1, if k0 { 0.45 } else { 0.5 }, 0.45),
                MemberWindow {
                    llc_apki: if k0 { 0.0 } else { 92.6 },
                    ..member(2, if k0 { 1.67 } else { 1.1 }, 1.67)
                },
            ]
        };
        j.window(w(true));
        j.window(w(true));
        j.judge(0, 1).expect("both ran");
        j.window(w(false));
        j.window(w(false));
        let (score, paces) = j.judge(5, 1).expect("both ran");
        assert!(paces[1].other_phase);
        assert!((score - 2.0 / (0.45 / 0.5 + 1.0)).abs() < 1e-12, "{score}");
        // A stray reference or two at k = 0's level of none is not a phase.
        let mut j = GroupJudge::default();
        j.window(w(true));
        j.window(w(true));
        j.judge(0, 1).expect("both ran");
        let stray = || {
            vec![
                member(1, 0.5, 0.45),
                MemberWindow {
                    llc_apki: 0.05,
                    ..member(2, 1.6, 1.67)
                },
            ]
        };
        j.window(stray());
        j.window(stray());
        let (_, paces) = j.judge(5, 1).expect("both ran");
        assert!(!paces[1].other_phase);
    }

    #[test]
    fn before_any_k0_a_probe_is_judged_against_the_turns_first_window() {
        let mut j = GroupJudge::default();
        let score = judged(&mut j, 5, [0.5, 0.4], [0.5, 0.2]);
        assert!((score - 4.0 / 3.0).abs() < 1e-12, "{score}");
    }
}
