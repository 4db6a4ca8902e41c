//! Phase detection: a stretch of windows whose IPC and MPKI stay within a band.

use serde::{Deserialize, Serialize};

/// Windows a new phase's reference is learnt from before windows are judged against it
/// (each window within the band refines it after that).
const REFERENCE_WINDOWS: u32 = 3;

/// A window is outside the band only if it is also this many standard deviations (of the
/// reference windows) away: programs whose windows vary a lot by themselves are not
/// changing phase every window.
const NOISE_SIGMAS: f64 = 4.0;

/// MPKI differences are judged against at least this much MPKI, so that a program with
/// almost no misses does not change phase on every stray miss.
pub(crate) const MPKI_FLOOR: f64 = 1.0;

/// What one window says about the phase.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum PhaseVerdict {
    /// Still averaging the reference of a new phase.
    Learning,
    /// Within the band.
    Within,
    /// Outside the band for `strikes` windows in a row, not yet enough.
    Outside { strikes: u32 },
    /// Outside the band long enough: a new phase.
    Changed,
}

/// Watches IPC and MPKI against the current phase's reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseDetector {
    band: f64,
    windows: u32,
    sum_ipc: f64,
    sum_mpki: f64,
    sq_ipc: f64,
    sq_mpki: f64,
    learned: u32,
    /// The reference was learnt from earlier windows ([`PhaseDetector::learn`]), however
    /// few.
    seeded: bool,
    /// Windows left in which one better than a reference learnt from earlier windows
    /// starts a reference afresh, rather than a phase.
    provisional: u32,
    strikes: u32,
}

impl PhaseDetector {
    /// `band`: largest relative change within a phase; `windows`: consecutive windows
    /// outside the band that make a new phase.
    pub fn new(band: f64, windows: u32) -> Self {
        PhaseDetector {
            band,
            windows: windows.max(1),
            sum_ipc: 0.0,
            sum_mpki: 0.0,
            sq_ipc: 0.0,
            sq_mpki: 0.0,
            learned: 0,
            seeded: false,
            provisional: 0,
            strikes: 0,
        }
    }

    /// Forget the reference: the next windows define a new one.
    pub fn reset(&mut self) {
        *self = PhaseDetector::new(self.band, self.windows);
    }

    /// Learn the reference from `windows` (IPC, MPKI) measured before, when there are at
    /// least two: the placement a search kept was measured in its windows, and the first
    /// windows after it may already be a new phase (a tenant whose program changed phase
    /// one window after its search kept 2 pages learnt a reference from windows on both
    /// sides of the change, so wide that the change never left it: random.md's run 118
    /// at offset 1, 0.960 of off).
    pub fn learn(&mut self, windows: &[(f64, f64)]) {
        if windows.len() < 2 {
            return;
        }
        self.seed(windows);
        self.provisional = REFERENCE_WINDOWS;
    }

    /// Learn the reference from the windows of a phase that has ended, however few: the
    /// windows that follow are judged against them at once, so that the phase the program
    /// entered is seen as one (a search that saw its program's loads change chose from
    /// the windows before the change).
    pub fn learn_ended(&mut self, windows: &[(f64, f64)]) {
        if !windows.is_empty() {
            self.seed(windows);
        }
    }

    /// A reference of exactly these windows.
    fn seed(&mut self, windows: &[(f64, f64)]) {
        self.reset();
        for &(ipc, mpki) in windows {
            self.add(ipc, mpki);
        }
        self.seeded = true;
    }

    /// Count a window of the reference.
    fn add(&mut self, ipc: f64, mpki: f64) {
        self.sum_ipc += ipc;
        self.sum_mpki += mpki;
        self.sq_ipc += ipc * ipc;
        self.sq_mpki += mpki * mpki;
        self.learned += 1;
    }

    /// The reference IPC and MPKI, once learned.
    pub fn reference(&self) -> Option<(f64, f64)> {
        (self.seeded || self.learned >= REFERENCE_WINDOWS).then(|| {
            (
                self.sum_ipc / self.learned as f64,
                self.sum_mpki / self.learned as f64,
            )
        })
    }

    /// Standard deviations of IPC and MPKI over the reference windows.
    fn spread(&self) -> (f64, f64) {
        let n = self.learned.max(1) as f64;
        let sd = |sum: f64, sq: f64| {
            let m = sum / n;
            (sq / n - m * m).max(0.0).sqrt() * (n / (n - 1.0).max(1.0)).sqrt()
        };
        (
            sd(self.sum_ipc, self.sq_ipc),
            sd(self.sum_mpki, self.sq_mpki),
        )
    }

    pub fn observe(&mut self, ipc: f64, mpki: f64) -> PhaseVerdict {
        let Some((ref_ipc, ref_mpki)) = self.reference() else {
            self.add(ipc, mpki);
            return PhaseVerdict::Learning;
        };
        let (sd_ipc, sd_mpki) = self.spread();
        let ipc_out = (ipc - ref_ipc).abs()
            > (self.band * ref_ipc.max(f64::MIN_POSITIVE)).max(NOISE_SIGMAS * sd_ipc);
        let mpki_out = (mpki - ref_mpki).abs()
            > (self.band * ref_mpki.max(MPKI_FLOOR)).max(NOISE_SIGMAS * sd_mpki);
        let better = ipc > ref_ipc && mpki <= ref_mpki;
        let provisional = std::mem::take(&mut self.provisional);
        if provisional > 0 && (ipc_out || mpki_out) && better {
            // Right after the windows learnt from, and better than them: those were
            // measured while the placement's pages were still warming (a search that kept
            // 290 pages read IPC 0.092, its first windows in Steady 0.106), not in another
            // phase. The reference is learnt from the windows that follow.
            self.reset();
            return self.observe(ipc, mpki);
        }
        self.provisional = provisional.saturating_sub(1);
        if !(ipc_out || mpki_out) {
            self.strikes = 0;
            // Every window of the phase refines its reference, not only the first few: a
            // program whose windows cycle more slowly than the reference's first windows
            // (a sweep over an array larger than a window reaches) shows its whole spread
            // only over a cycle, and is not a new phase at each of its peaks.
            self.add(ipc, mpki);
            return PhaseVerdict::Within;
        }
        self.strikes += 1;
        if self.strikes >= self.windows {
            self.reset();
            PhaseVerdict::Changed
        } else {
            PhaseVerdict::Outside {
                strikes: self.strikes,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_windows_outside_the_band_make_a_phase() {
        let mut d = PhaseDetector::new(0.15, 2);
        assert_eq!(d.observe(1.0, 10.0), PhaseVerdict::Learning);
        assert_eq!(d.observe(1.02, 10.0), PhaseVerdict::Learning);
        assert_eq!(d.observe(0.99, 10.1), PhaseVerdict::Learning);
        assert_eq!(d.observe(1.1, 11.0), PhaseVerdict::Within);
        // One spike is not a phase.
        assert_eq!(d.observe(0.5, 10.0), PhaseVerdict::Outside { strikes: 1 });
        assert_eq!(d.observe(1.0, 10.0), PhaseVerdict::Within);
        assert_eq!(d.observe(1.0, 30.0), PhaseVerdict::Outside { strikes: 1 });
        assert_eq!(d.observe(1.0, 30.0), PhaseVerdict::Changed);
        assert_eq!(d.observe(1.0, 30.0), PhaseVerdict::Learning);
    }

    #[test]
    fn a_noisy_program_is_not_a_new_phase_every_window() {
        let mut d = PhaseDetector::new(0.15, 2);
        for ipc in [1.0, 0.75, 1.25] {
            assert_eq!(d.observe(ipc, 10.0), PhaseVerdict::Learning);
        }
        // ±30% is within this program's own spread (sd 0.25).
        for ipc in [0.7, 1.3, 0.72, 1.28] {
            assert_eq!(d.observe(ipc, 10.0), PhaseVerdict::Within);
        }
        assert_eq!(d.observe(3.0, 10.0), PhaseVerdict::Outside { strikes: 1 });
        assert_eq!(d.observe(3.0, 10.0), PhaseVerdict::Changed);
    }

    #[test]
    fn a_slow_cycle_is_learnt_not_a_new_phase_at_each_peak() {
        let mut d = PhaseDetector::new(0.15, 2);
        // The reference's first windows fall in a flat stretch of the cycle...
        for ipc in [1.0, 1.01, 0.99] {
            assert_eq!(d.observe(ipc, 10.0), PhaseVerdict::Learning);
        }
        // ...which then swings ±17% over many windows. Its rise and fall, each within the
        // band of the windows before, widen the reference's spread, so the peaks, 17% from
        // the first windows' mean, are the same phase.
        let cycle = [
            1.05, 1.1, 1.14, 1.1, 1.05, 1.0, 0.95, 0.9, 0.86, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15,
            1.17, 1.17, 1.15, 1.1, 1.0, 0.9, 0.85, 0.83, 0.83, 0.85,
        ];
        for ipc in cycle {
            assert_eq!(d.observe(ipc, 10.0), PhaseVerdict::Within, "IPC {ipc}");
        }
        // A real change still is one.
        assert_eq!(d.observe(0.3, 40.0), PhaseVerdict::Outside { strikes: 1 });
        assert_eq!(d.observe(0.3, 40.0), PhaseVerdict::Changed);
    }

    #[test]
    fn a_reference_learnt_from_the_kept_placements_windows_sees_a_change_right_after_it() {
        // random.md's run 118 at offset 1: the search measured its kept placement at
        // IPC 0.39, and the program changed phase one window into Steady.
        let after = [(0.392, 1.9), (0.291, 19.1), (0.312, 14.9), (0.309, 15.3)];
        let mut fresh = PhaseDetector::new(0.15, 2);
        let verdicts: Vec<_> = after.iter().map(|&(i, m)| fresh.observe(i, m)).collect();
        assert!(
            !verdicts.contains(&PhaseVerdict::Changed),
            "a reference learnt across the change is wide enough to hide it: {verdicts:?}"
        );
        let mut seeded = PhaseDetector::new(0.15, 2);
        seeded.learn(&[(0.390, 2.2), (0.392, 1.9)]);
        assert_eq!(seeded.observe(0.392, 1.9), PhaseVerdict::Within);
        assert_eq!(
            seeded.observe(0.291, 19.1),
            PhaseVerdict::Outside { strikes: 1 }
        );
        assert_eq!(seeded.observe(0.312, 14.9), PhaseVerdict::Changed);
        // A placement better than it was measured is not a new phase: the reference is
        // learnt afresh.
        let mut warmer = PhaseDetector::new(0.15, 2);
        warmer.learn(&[(0.092, 116.2), (0.091, 118.8)]);
        assert_eq!(warmer.observe(0.106, 109.5), PhaseVerdict::Learning);
        assert_eq!(warmer.observe(0.106, 109.5), PhaseVerdict::Learning);
        // Later, a better phase is a phase.
        let mut later = PhaseDetector::new(0.15, 2);
        later.learn(&[(0.033, 444.0), (0.033, 440.0)]);
        for _ in 0..4 {
            assert_eq!(later.observe(0.033, 445.0), PhaseVerdict::Within);
        }
        assert_eq!(
            later.observe(0.117, 128.7),
            PhaseVerdict::Outside { strikes: 1 }
        );
        assert_eq!(later.observe(0.118, 128.6), PhaseVerdict::Changed);
        // One window is no reference.
        let mut one = PhaseDetector::new(0.15, 2);
        one.learn(&[(0.390, 2.2)]);
        assert_eq!(one.observe(0.392, 1.9), PhaseVerdict::Learning);
    }
}
