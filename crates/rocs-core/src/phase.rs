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

/// A phase whose reference has this many windows knows how much its program scatters by
/// itself, and where that is little, its band narrows (see [`PhaseDetector::limit`]).
const QUIET_WINDOWS: u32 = 6;

/// A quiet phase's band is at least this many standard deviations of its windows...
const QUIET_SIGMAS: f64 = 8.0;

/// ...and at least this share of the band.
const QUIET_BAND_SHARE: f64 = 0.5;

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
    /// The last window outside the band (IPC, MPKI, and whether only the narrowed band),
    /// while `strikes` counts.
    last_outside: Option<(f64, f64, bool)>,
    /// The band (relative) the windows that made the last phase change were outside of.
    changed_band: Option<f64>,
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
            last_outside: None,
            changed_band: None,
        }
    }

    /// The band (relative to the reference) the windows that made the last
    /// [`PhaseVerdict::Changed`] were outside of: the configured one, or narrower where the
    /// phase's windows scattered little.
    pub fn changed_band(&self) -> Option<f64> {
        self.changed_band
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

    /// How far from the reference `level` a window may lie within the phase: the band,
    /// and at least `NOISE_SIGMAS` standard deviations `sd` of the reference's windows.
    /// `narrowed`: where a reference of `QUIET_WINDOWS` or more scatters less than an
    /// eighth of the band, the band narrows, to as little as half. A tenant kept 512 pages
    /// of its stream confined through a phase whose loads fell 14% and MPKI 13.5% (1,480
    /// to 1,280, its windows within 1-3% of each other on either side), where that
    /// placement ran at 0.0096 IPC and k = 0 at 0.012; the band of 15% never saw the change
    /// (random.md's tiny-59ba4714 at offset 2: 0.895 of off).
    fn limit(&self, level: f64, sd: f64, narrowed: bool) -> f64 {
        let band = self.band * level;
        let band = if narrowed && self.learned >= QUIET_WINDOWS {
            (QUIET_SIGMAS * sd).clamp(QUIET_BAND_SHARE * band, band)
        } else {
            band
        };
        band.max(NOISE_SIGMAS * sd)
    }

    pub fn observe(&mut self, ipc: f64, mpki: f64) -> PhaseVerdict {
        let Some((ref_ipc, ref_mpki)) = self.reference() else {
            self.add(ipc, mpki);
            return PhaseVerdict::Learning;
        };
        let (sd_ipc, sd_mpki) = self.spread();
        let ipc_level = ref_ipc.max(f64::MIN_POSITIVE);
        let mpki_level = ref_mpki.max(MPKI_FLOOR);
        let (ipc_off, mpki_off) = ((ipc - ref_ipc).abs(), (mpki - ref_mpki).abs());
        let ipc_limit = self.limit(ipc_level, sd_ipc, true);
        let mpki_limit = self.limit(mpki_level, sd_mpki, true);
        let ipc_out = ipc_off > ipc_limit;
        let mpki_out = mpki_off > mpki_limit;
        let narrowly = !(ipc_off > self.limit(ipc_level, sd_ipc, false)
            || mpki_off > self.limit(mpki_level, sd_mpki, false));
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
            self.last_outside = None;
            // Every window of the phase refines its reference, not only the first few: a
            // program whose windows cycle more slowly than the reference's first windows
            // (a sweep over an array larger than a window reaches) shows its whole spread
            // only over a cycle, and is not a new phase at each of its peaks.
            self.add(ipc, mpki);
            return PhaseVerdict::Within;
        }
        // A window outside only the narrowed band counts towards a change with its
        // neighbour outside only while the two agree: the program has settled in its next
        // phase. Else the count starts again, so that the phase profiled is the one it
        // entered: a tenant leaving a phase at MPKI 324 read 299 (outside the narrowed band
        // only), then 9.2, then 3.4; judged at 9.2, the new phase seemed to miss enough to
        // profile, and its profile found nothing, where at 3.4 it misses too little to be
        // worth one (random.md's ppc970fx-80f8ecdc at offset 1, 1.066 -> 1.020). Windows
        // outside the whole band count as they always did.
        let counts = self.last_outside.is_some_and(|(i, m, before_narrowly)| {
            !(narrowly || before_narrowly)
                || !(outside(i, ipc, self.band, 0.0) || outside(m, mpki, self.band, MPKI_FLOOR))
        });
        self.strikes = if counts { self.strikes + 1 } else { 1 };
        self.last_outside = Some((ipc, mpki, narrowly));
        if self.strikes >= self.windows {
            let out = [
                (ipc_out, ipc_limit / ipc_level),
                (mpki_out, mpki_limit / mpki_level),
            ];
            let band = out
                .iter()
                .filter(|o| o.0)
                .map(|o| o.1)
                .fold(f64::INFINITY, f64::min);
            self.reset();
            self.changed_band = Some(band);
            PhaseVerdict::Changed
        } else {
            PhaseVerdict::Outside {
                strikes: self.strikes,
            }
        }
    }
}

/// A target's LLC references per kilo-instruction while it is steady: the loads that miss
/// its private caches, which no sharer's placement changes. While another target's search
/// holds the LLC's turn, the holder's probes move this target's IPC and MPKI, so those say
/// nothing of its phase; its references still do. A tenant whose program changed phase in
/// the second window of a sharer's search (references 318 -> 680 per kilo-instruction,
/// IPC 0.030 -> 0.011) learnt its phase afresh once the turn was free, from windows of the
/// new phase, and kept the old phase's 70 pages confined through 43 windows of it
/// (random.md's random-tiny-50a39f0b at the window's costs: that tenant 0.934 of off).
#[derive(Clone, Debug, Default)]
pub struct OwnLoads {
    /// References per kilo-instruction summed over the phase's windows, and their count.
    sum: f64,
    windows: u32,
    /// The windows since the turn was withheld, in order.
    withheld: Vec<f64>,
}

impl OwnLoads {
    /// A window of the phase, judged within it (or while its reference is learnt).
    pub fn learn(&mut self, apki: f64) {
        self.sum += apki;
        self.windows += 1;
    }

    /// A window in which another target's search holds the turn.
    pub fn withheld(&mut self, apki: f64) {
        self.withheld.push(apki);
    }

    /// The turn is back: whether, while it was withheld, the target's references left its
    /// phase's level by more than `band` and settled elsewhere (the last two windows agree,
    /// both outside it on the same side). The level is that of the phase's windows, or
    /// with none (the turn went to another as this Steady began), the first withheld
    /// window's. Forgets the withheld windows.
    pub fn moved_while_withheld(&mut self, band: f64) -> bool {
        let withheld = std::mem::take(&mut self.withheld);
        if self.windows == 0 {
            return left_level(&withheld, band, MPKI_FLOOR);
        }
        let level = self.sum / f64::from(self.windows);
        let series: Vec<f64> = std::iter::once(level).chain(withheld).collect();
        left_level(&series, band, MPKI_FLOOR)
    }

    /// Whether the turn has been withheld since the last window granted it.
    pub fn is_withheld(&self) -> bool {
        !self.withheld.is_empty()
    }
}

/// Whether a series of windows' readings left the first window's level and settled
/// elsewhere: the last two agree within `band` and both lie outside it from the first, on
/// the same side (each judged against at least `floor`).
pub(crate) fn left_level(series: &[f64], band: f64, floor: f64) -> bool {
    let &[from, .., a, b] = series else {
        return false;
    };
    outside(from, a, band, floor)
        && outside(from, b, band, floor)
        && !outside(a, b, band, floor)
        && (a > from) == (b > from)
}

/// Whether `x` lies outside `band` of `from` (judged against at least `floor`).
pub(crate) fn outside(from: f64, x: f64, band: f64, floor: f64) -> bool {
    (x - from).abs() > band * from.max(floor)
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
    fn a_quiet_phase_narrows_its_band() {
        // random.md's tiny-59ba4714 at offset 2: a tenant's windows in Steady with 512 of
        // its pages confined (IPC, MPKI), then its program's next phase, 13.5% fewer
        // misses, at the same IPC, where k = 0 would have run 25% faster.
        let before = [
            (0.0098, 1476.5),
            (0.0097, 1488.1),
            (0.0097, 1491.9),
            (0.0097, 1486.9),
            (0.0098, 1481.0),
            (0.0098, 1481.0),
            (0.0098, 1472.3),
            (0.0097, 1431.0),
        ];
        let after = [(0.0096, 1279.9), (0.0096, 1279.5)];
        let verdicts = |windows: &[(f64, f64)]| {
            let mut d = PhaseDetector::new(0.15, 2);
            let v: Vec<_> = windows.iter().map(|&(i, m)| d.observe(i, m)).collect();
            (v, d.changed_band())
        };
        let (v, band) = verdicts(&[&before[..], &after[..]].concat());
        assert_eq!(
            v[8..],
            [PhaseVerdict::Outside { strikes: 1 }, PhaseVerdict::Changed]
        );
        let band = band.expect("changed");
        assert!((0.075..0.15).contains(&band), "narrowed band {band}");
        // Three windows say too little of how the program scatters: the band stays whole.
        let (v, _) = verdicts(&[&before[..3], &after[..]].concat());
        assert_eq!(v[3..], [PhaseVerdict::Within, PhaseVerdict::Within]);
        // A noisier phase keeps its band, so that a window between two phases that lies
        // within it widens nothing it should not (random.md's ppc970fx-723d2f46 at offset
        // 1: its windows scatter 8% in MPKI; the window after them half-way to the next
        // phase, then the next phase, a change as with the whole band).
        let noisy = [
            (0.0338, 173.7),
            (0.0340, 172.2),
            (0.0383, 151.4),
            (0.0357, 163.8),
            (0.0343, 170.7),
            (0.0339, 173.1),
            (0.0341, 172.0),
            (0.0341, 171.7),
            (0.0369, 157.8),
            (0.0236, 217.4),
            (0.0175, 271.5),
            (0.0174, 271.2),
        ];
        let (v, band) = verdicts(&noisy);
        let outside = PhaseVerdict::Outside { strikes: 1 };
        assert_eq!(v[9..11], [outside, PhaseVerdict::Changed]);
        assert!(band.is_some_and(|b| b >= 0.15), "band {band:?}");
    }

    #[test]
    fn a_change_seen_through_the_narrowed_band_is_judged_once_the_program_has_settled() {
        // random.md's ppc970fx-80f8ecdc at offset 1: a tenant's windows in Steady, then
        // two windows on the way to a phase that misses almost nothing, then that phase.
        let mut d = PhaseDetector::new(0.15, 2);
        let steady = [
            (0.0193, 327.3),
            (0.0196, 323.8),
            (0.0196, 323.2),
            (0.0196, 324.8),
            (0.0193, 326.3),
            (0.0196, 324.4),
            (0.0198, 323.9),
            (0.0197, 324.1),
        ];
        for (ipc, mpki) in steady {
            assert_ne!(d.observe(ipc, mpki), PhaseVerdict::Changed);
        }
        let outside = PhaseVerdict::Outside { strikes: 1 };
        // Outside the narrowed band only (-7.9%)...
        assert_eq!(d.observe(0.0203, 299.0), outside);
        // ...and the next window not where it was: the count starts again.
        assert_eq!(d.observe(0.1674, 9.23), outside);
        assert_eq!(d.observe(0.2183, 3.44), PhaseVerdict::Changed);
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

    #[test]
    fn own_loads_tell_a_phase_change_while_the_turn_is_withheld() {
        let withheld = |learnt: &[f64], windows: &[f64]| {
            let mut loads = OwnLoads::default();
            learnt.iter().for_each(|&x| loads.learn(x));
            windows.iter().for_each(|&x| loads.withheld(x));
            let moved = loads.moved_while_withheld(0.15);
            assert!(!loads.is_withheld(), "the withheld windows are forgotten");
            moved
        };
        // random-tiny-50a39f0b's tenant: its references doubled two windows into the turn.
        assert!(withheld(
            &[317.5, 318.8],
            &[319.6, 318.6, 403.9, 678.1, 680.7]
        ));
        // Without a level learnt, the first withheld window's stands in.
        assert!(withheld(&[], &[319.6, 318.6, 403.9, 678.1, 680.7]));
        // The holder's probes move IPC and MPKI, not references.
        assert!(!withheld(&[318.0], &[319.6, 300.0, 321.2, 317.9]));
        // A phase that ended before the turn came back, or one not yet settled.
        assert!(!withheld(&[318.0], &[680.0, 679.0, 318.5]));
        assert!(!withheld(&[318.0], &[319.0, 680.0, 410.0]));
        // Two withheld windows tell, one does not.
        assert!(withheld(&[318.0], &[680.0, 679.0]));
        assert!(!withheld(&[318.0], &[680.0]));
        assert!(!withheld(&[], &[680.0, 679.0]));
    }
}
