//! How a search judged by its LLC domain scores a placement: each member's pace (its IPC
//! there over its IPC at k = 0), combined so that starving one member never pays.

use std::collections::BTreeMap;

use super::messages::{MemberWindow, SharerPace};
use crate::Pid;

/// Windows measured, and averaged, at each placement of a search judged by its domain:
/// the others' gain comes in bursts (while a partly confined stream sweeps its confined
/// part), and one window says more about where the sweep was than about `k`.
const MEASURE_WINDOWS: usize = 2;

/// The windows measured at the current placement, and each member's IPC at k = 0.
#[derive(Clone, Debug, Default)]
pub(super) struct GroupJudge {
    span: Vec<Vec<MemberWindow>>,
    /// Each member's IPC at k = 0: the sum of its means over the search's k = 0
    /// placements, and how many.
    at_zero: BTreeMap<Pid, (f64, u32)>,
}

impl GroupJudge {
    /// A window measured at the current placement; `true` once enough are in to judge it.
    pub fn window(&mut self, members: Vec<MemberWindow>) -> bool {
        self.span.push(members);
        self.span.len() >= MEASURE_WINDOWS
    }

    /// The score of the placement `k` measured over the windows given since the last
    /// judgement, and each member's pace; `None` if no member ran in them.
    ///
    /// A member's pace is its mean IPC over those windows over its IPC at k = 0: the mean
    /// of the search's k = 0 measurements so far. Measured against k = 0 of the same
    /// search, a member whose own phase changed after the turn began is not taken for one
    /// the placement slowed (a reference taken once, when the turn began, had a phased
    /// neighbour at a tenth of its pace at every k, and the search chased its phases).
    /// Before any k = 0 measurement, a k = 0 placement is its own reference (pace 1) and
    /// any other is judged against the window the turn began with.
    ///
    /// The score is the harmonic mean of the paces: each member's progress counts relative
    /// to its own (a memory-bound member that speeds up by 40% is worth as much as a fast
    /// one that does), and the harmonic mean is the throughput measure that does not
    /// reward starving one member to speed up another (one at 4x and one at 0.16x score
    /// 0.31, not the 2.1 of their plain mean). A placement that slows a member below its
    /// floor (`max_slowdown`, unless it is background) scores that member's pace instead,
    /// below k = 0's, so no search chooses it.
    pub fn judge(&mut self, k: usize) -> Option<(f64, Vec<SharerPace>)> {
        let span = std::mem::take(&mut self.span);
        let mut sums: BTreeMap<Pid, (f64, u32, MemberWindow)> = BTreeMap::new();
        for m in span.iter().flatten() {
            let e = sums.entry(m.pid).or_insert((0.0, 0, *m));
            e.0 += m.ipc;
            e.1 += 1;
        }
        let mut paces = Vec::new();
        let mut floors = Vec::new();
        for (&pid, &(sum, n, last)) in &sums {
            let mean = sum / f64::from(n);
            let reference = match self.at_zero.get(&pid) {
                Some(&(s, c)) => s / f64::from(c),
                None if k == 0 => mean,
                None => last.turn_ipc,
            };
            if reference <= 0.0 || mean <= 0.0 {
                continue;
            }
            let pace = mean / reference;
            paces.push(SharerPace { pid, pace });
            floors.push(last.floor);
        }
        if k == 0 {
            for (&pid, &(sum, n, _)) in &sums {
                let e = self.at_zero.entry(pid).or_insert((0.0, 0));
                e.0 += sum / f64::from(n);
                e.1 += 1;
            }
        }
        if paces.is_empty() {
            return None;
        }
        let inverse: f64 = paces.iter().map(|p| 1.0 / p.pace).sum();
        let harmonic = paces.len() as f64 / inverse;
        let refused = paces
            .iter()
            .zip(&floors)
            .filter(|(p, floor)| floor.is_some_and(|f| p.pace < f))
            .map(|(p, _)| p.pace)
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
            turn_ipc,
            floor: Some(0.95),
        }
    }

    fn judged(j: &mut GroupJudge, k: usize, ipcs: [f64; 2], turn: [f64; 2]) -> f64 {
        let w = || vec![member(1, ipcs[0], turn[0]), member(2, ipcs[1], turn[1])];
        assert!(!j.window(w()));
        assert!(j.window(w()));
        j.judge(k).expect("both ran").0
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
            let score = j.judge(k).expect("both ran").0;
            if k == 7 {
                assert!((score - 2.0 / (1.0 / 0.9 + 1.0 / 1.5)).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn before_any_k0_a_probe_is_judged_against_the_turns_first_window() {
        let mut j = GroupJudge::default();
        let score = judged(&mut j, 5, [0.5, 0.4], [0.5, 0.2]);
        assert!((score - 4.0 / 3.0).abs() < 1e-12, "{score}");
    }
}
