//! The knobs of one controller: what a policy file may set, with defaults.
//!
//! The daemon's policy files deserialize into [`Knobs`]; every field has a default, so a
//! policy names only what it changes. [`Knobs::validate`] refuses contradictory settings with
//! the reason, before a controller is built.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Colour;

/// Which colours make the pollute buffer: a count (the highest `n` colours) or an explicit
/// set of colour indices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PolluteColours {
    /// The highest `n` colours (colours - n .. colours), so that colour 0 and its
    /// neighbours stay with the ordinary data whatever the count.
    Count(u32),
    /// These colour indices.
    Set(Vec<u32>),
}

impl Default for PolluteColours {
    /// One colour, as in ROCS (1/16 of the PowerPC 970FX L2).
    fn default() -> Self {
        PolluteColours::Count(1)
    }
}

impl PolluteColours {
    /// The colours, sorted and deduplicated, checked against `colours` in the cache.
    pub fn resolve(&self, colours: u32) -> Result<Vec<Colour>, KnobError> {
        if colours == 0 {
            return Err(KnobError::NoColours);
        }
        let mut set: Vec<u32> = match self {
            PolluteColours::Count(n) => (colours.saturating_sub(*n)..colours).collect(),
            PolluteColours::Set(v) => v.clone(),
        };
        set.sort_unstable();
        set.dedup();
        if set.is_empty() {
            return Err(KnobError::PolluteEmpty);
        }
        if let PolluteColours::Count(n) = self {
            if *n >= colours {
                return Err(KnobError::PolluteAll { colours });
            }
        }
        if let Some(&c) = set.iter().find(|&&c| c >= colours) {
            return Err(KnobError::ColourOutOfRange { colour: c, colours });
        }
        if set.len() as u32 >= colours {
            return Err(KnobError::PolluteAll { colours });
        }
        Ok(set.into_iter().map(Colour).collect())
    }
}

/// How the search picks `k`, the number of pages confined from the top of the stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// ROCS Algorithm 1: confine `step` more pages per window from the top of the stack,
    /// keep the best IPC, stop at `minPages`, restore the excess.
    Linear,
    /// k = 0 is always a candidate; doubling, then golden-section refinement, with repeated
    /// windows where candidates differ by less than the measured noise.
    #[default]
    Adaptive,
}

impl std::fmt::Display for SearchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SearchMode::Linear => "linear",
            SearchMode::Adaptive => "adaptive",
        })
    }
}

impl std::str::FromStr for SearchMode {
    type Err = KnobError;
    fn from_str(s: &str) -> Result<Self, KnobError> {
        match s {
            "linear" => Ok(SearchMode::Linear),
            "adaptive" => Ok(SearchMode::Adaptive),
            other => Err(KnobError::UnknownSearchMode(other.to_string())),
        }
    }
}

/// Everything a policy can tune about one target's controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Knobs {
    /// Colours reserved for the pollute buffer.
    pub pollute_colours: PolluteColours,
    /// One sample every `sample_period` events while profiling (DESIGN.md 4.2: ≥ 1000).
    pub sample_period: u64,
    /// Largest share of one core that sampling may cost (0.01 = 1%).
    pub sample_cpu_budget: f64,
    /// Consecutive windows over both thresholds needed to leave Observe.
    pub observe_windows: u32,
    /// Windows of precise sampling per profile, at least, unless it slows the target beyond
    /// its samples' cost by more than `sample_cpu_budget` and the unsampled windows' scatter
    /// (the prefetchers off while it samples): then it ends with the window that shows it.
    pub profile_windows: u32,
    /// Windows of precise sampling per profile, at most: the profile goes on past
    /// `profile_windows` while a window adds more than `profile_saturation` new pages.
    pub profile_max_windows: u32,
    /// Windows of precise sampling per profile, at most, for a target alone on its LLC
    /// whose profile has found nothing to win yet: a loop over more than the cache misses
    /// on every load, as a stream does, until the profile has seen it loaded again, and
    /// one pass can take longer than `profile_max_windows`. Each window past those must
    /// fit in `overhead_budget`. 64: random.md's runs 315 and 409 (stencils over about
    /// twice the LLC) make a pass in about 23 windows, and a profile of 32 saw each page
    /// loaded once (0.999 of off; 1.052 and 1.127 at 64, their oracles 1.054 and 1.088).
    pub profile_loop_max_windows: u32,
    /// Fraction of new pages (relative to the pages profiled so far) below which one more
    /// window is not worth its sampling cost.
    pub profile_saturation: f64,
    /// LLC samples a page needs to be ranked on its own; pages with fewer are merged into
    /// a neighbouring region.
    pub min_samples_per_page: u32,
    /// Adjacent pages or regions whose miss rates differ by at most this much (plus the
    /// sampling error of the two estimates) merge into one region.
    pub region_merge_tolerance: f64,
    /// Unsampled pages between two sampled pages of one region, at most this many in a row,
    /// belong to the region (sparse sampling leaves holes in uniform regions).
    pub region_max_gap: u32,
    /// How `k` is searched.
    pub search: SearchMode,
    /// Linear search: pages confined per step; `None` picks `stack / linear_auto_steps`.
    pub linear_step: Option<u32>,
    /// Linear search: number of steps when `linear_step` is not set.
    pub linear_auto_steps: u32,
    /// Linear search (ROCS `minPages`): stop once at most this many stack pages are left
    /// outside the pollute buffer.
    pub linear_min_pages: u32,
    /// Most pages migrated (either way) per window. A larger move spreads over several
    /// windows, and windows during a partial move are not used as measurements. The
    /// default, 16,384 pages (64 MiB; 33 ms of moves at 2 µs a page, a third of rocsd's
    /// 100 ms window, paid only while a placement is made), places a stack a few times a
    /// modern LLC in a window or two: at 4,096, zen4-like's art-like (a 39,060-page stack,
    /// 31,748 confined) took up to 3 windows a probe (1.257 of off, 1.268 now, its oracle
    /// 1.368), and spr-like's art-like could not probe its stack's first region (12,107
    /// pages) in one window and found nothing (0.993; 1.032 now, its oracle 1.050).
    pub page_budget: u32,
    /// Windows to wait after a move before measuring IPC at the new `k`: the window right
    /// after a move pays for the copies and starts with the moved pages cold in the caches.
    pub settle_windows: u32,
    /// Observe → Profile needs the LLC miss rate (misses / references) at least this high
    /// (ROCS kept programs over 25% on the 970FX)... The default keeps out only programs
    /// whose LLC serves nearly every load: LLC references that hit dilute the rate however
    /// many misses there are (random.md's run 468 missed 8.5% of its LLC loads at MPKI 18,
    /// and confining a sixth of its pages gains 26%), and on modern parts prefetches and
    /// instruction fetches dilute it too. What a miss costs is counted by `min_mpki`.
    pub min_llc_miss_rate: f64,
    /// ... and at least this many LLC misses per thousand instructions.
    pub min_mpki: f64,
    /// Steady: a window whose IPC or MPKI differs from the phase's reference by more than
    /// this fraction is outside the band.
    pub phase_band: f64,
    /// Steady: this many consecutive windows outside the band make a new phase.
    pub phase_windows: u32,
    /// Adaptive search: most windows measured at one `k`.
    pub search_max_repeats: u32,
    /// Adaptive search: differences of IPC below this fraction are never significant,
    /// whatever the measured noise says.
    pub search_noise_floor: f64,
    /// Profile and build the stack, but never migrate a page.
    pub dry_run: bool,
    /// Cycles one page migration costs the target (copy and TLB shootdown; ~2 µs per 4 KiB
    /// page at 2 GHz). A move of many pages takes longer than the settle windows: the
    /// search waits until the windows after it have spent that many cycles, then
    /// `settle_windows` more, before it measures.
    pub migration_cost_cycles: u64,
    /// Sharing an LLC: the largest slowdown (0.05 = 5%) another target's placement may
    /// cost this target. A placement that slows it more is refused, whatever it gains the
    /// others, unless this target is `background`.
    pub max_slowdown: f64,
    /// Sharing an LLC: this target may be slowed by any amount if that helps the others
    /// (a batch or backup job beside a latency-sensitive service).
    pub background: bool,
    /// Alone on its LLC: a search starts only if the profile promises something: at least
    /// this share of the sampled LLC loads are misses on pages that are also reused (hit
    /// at times) and miss less than the stack's worst pages. Misses on pages that only
    /// stream, or a reused set that already hits, leave nothing for a pollute buffer to
    /// win, and probes cost their moves.
    pub min_promise: f64,
    /// The share of the target's cycles (0.01 = 1%) that attempts which confine nothing
    /// may cost: after one, the next profile waits until what fruitless attempts cost is
    /// at most this share of the cycles the target has run, and the share halves with
    /// each fruitless attempt in a row. A search that confines something resets it. The
    /// targets of one LLC share the budget: their fruitless attempts' cycles, attempts in
    /// a row and cycles run are summed.
    pub overhead_budget: f64,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            pollute_colours: PolluteColours::default(),
            sample_period: 2000,
            sample_cpu_budget: 0.01,
            observe_windows: 1,
            profile_windows: 2,
            profile_max_windows: 8,
            profile_loop_max_windows: 64,
            profile_saturation: 0.05,
            min_samples_per_page: 4,
            region_merge_tolerance: 0.10,
            region_max_gap: 4,
            search: SearchMode::Adaptive,
            linear_step: None,
            linear_auto_steps: 16,
            linear_min_pages: 0,
            page_budget: 16384,
            settle_windows: 1,
            min_llc_miss_rate: 0.02,
            min_mpki: 1.0,
            phase_band: 0.15,
            phase_windows: 2,
            search_max_repeats: 2,
            search_noise_floor: 0.003,
            dry_run: false,
            migration_cost_cycles: 4000,
            max_slowdown: 0.05,
            background: false,
            min_promise: 0.02,
            overhead_budget: 0.01,
        }
    }
}

/// Why a set of knobs cannot be used.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum KnobError {
    #[error("the cache has no colours; check the cache geometry")]
    NoColours,
    #[error("pollute_colours is empty: at least one colour must hold the pollute buffer")]
    PolluteEmpty,
    #[error("pollute_colours covers all {colours} colours: nothing would be left for the data that is reused")]
    PolluteAll { colours: u32 },
    #[error("pollute colour {colour} does not exist: the cache has colours 0..{colours}")]
    ColourOutOfRange { colour: u32, colours: u32 },
    #[error("sample_period is 0: it must be at least 1 (1000 or more recommended)")]
    SamplePeriodZero,
    #[error("sample_cpu_budget {0} is not in (0, 1]")]
    CpuBudget(f64),
    #[error("{0} is 0: it must be at least 1")]
    Zero(&'static str),
    #[error("linear_step is 0: each step must confine at least one page")]
    StepZero,
    #[error("page_budget is 0: no page could ever be migrated (use dry_run to never migrate)")]
    BudgetZero,
    #[error("{name} = {value} is out of range: {expected}")]
    OutOfRange {
        name: &'static str,
        value: f64,
        expected: &'static str,
    },
    #[error("unknown search mode {0:?}: expected \"linear\" or \"adaptive\"")]
    UnknownSearchMode(String),
    #[error("page_shift {0} is not a page size (expected 12..=30)")]
    PageShift(u32),
}

impl Knobs {
    /// Refuse contradictory or impossible knobs for a cache of `colours` colours.
    pub fn validate(&self, colours: u32) -> Result<(), KnobError> {
        self.pollute_colours.resolve(colours)?;
        if self.sample_period == 0 {
            return Err(KnobError::SamplePeriodZero);
        }
        if !(self.sample_cpu_budget > 0.0 && self.sample_cpu_budget <= 1.0) {
            return Err(KnobError::CpuBudget(self.sample_cpu_budget));
        }
        for (name, v) in [
            ("observe_windows", self.observe_windows),
            ("profile_windows", self.profile_windows),
            ("min_samples_per_page", self.min_samples_per_page),
            ("linear_auto_steps", self.linear_auto_steps),
            ("phase_windows", self.phase_windows),
            ("search_max_repeats", self.search_max_repeats),
        ] {
            if v == 0 {
                return Err(KnobError::Zero(name));
            }
        }
        if self.profile_max_windows < self.profile_windows {
            return Err(KnobError::OutOfRange {
                name: "profile_max_windows",
                value: self.profile_max_windows as f64,
                expected: "at least profile_windows",
            });
        }
        if self.profile_loop_max_windows < self.profile_max_windows {
            return Err(KnobError::OutOfRange {
                name: "profile_loop_max_windows",
                value: self.profile_loop_max_windows as f64,
                expected: "at least profile_max_windows",
            });
        }
        for (name, value) in [
            ("max_slowdown", self.max_slowdown),
            ("min_promise", self.min_promise),
            ("overhead_budget", self.overhead_budget),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(KnobError::OutOfRange {
                    name,
                    value,
                    expected: "a fraction in [0, 1]",
                });
            }
        }
        if self.linear_step == Some(0) {
            return Err(KnobError::StepZero);
        }
        if self.page_budget == 0 {
            return Err(KnobError::BudgetZero);
        }
        let in_unit = |name, value: f64| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(KnobError::OutOfRange {
                    name,
                    value,
                    expected: "a fraction in [0, 1]",
                })
            }
        };
        in_unit("region_merge_tolerance", self.region_merge_tolerance)?;
        in_unit("min_llc_miss_rate", self.min_llc_miss_rate)?;
        in_unit("search_noise_floor", self.search_noise_floor)?;
        in_unit("profile_saturation", self.profile_saturation)?;
        if !(self.min_mpki.is_finite() && self.min_mpki >= 0.0) {
            return Err(KnobError::OutOfRange {
                name: "min_mpki",
                value: self.min_mpki,
                expected: "a finite number ≥ 0",
            });
        }
        if !(self.phase_band.is_finite() && self.phase_band > 0.0) {
            return Err(KnobError::OutOfRange {
                name: "phase_band",
                value: self.phase_band,
                expected: "a fraction > 0 (0.15 = 15%)",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_for_paper_geometry() {
        Knobs::default().validate(16).unwrap();
        assert_eq!(
            Knobs::default().pollute_colours.resolve(16).unwrap(),
            vec![Colour(15)]
        );
    }

    #[test]
    fn contradictory_knobs_are_refused_with_reason() {
        let bad = |f: fn(&mut Knobs)| {
            let mut k = Knobs::default();
            f(&mut k);
            k.validate(16).unwrap_err()
        };
        assert_eq!(bad(|k| k.linear_step = Some(0)), KnobError::StepZero);
        assert_eq!(bad(|k| k.page_budget = 0), KnobError::BudgetZero);
        assert_eq!(
            bad(|k| k.pollute_colours = PolluteColours::Set(vec![])),
            KnobError::PolluteEmpty
        );
        assert_eq!(
            bad(|k| k.pollute_colours = PolluteColours::Count(0)),
            KnobError::PolluteEmpty
        );
        assert_eq!(
            bad(|k| k.pollute_colours = PolluteColours::Count(16)),
            KnobError::PolluteAll { colours: 16 }
        );
        assert_eq!(
            bad(|k| k.pollute_colours = PolluteColours::Set((0..16).collect())),
            KnobError::PolluteAll { colours: 16 }
        );
        assert_eq!(
            bad(|k| k.pollute_colours = PolluteColours::Set(vec![3, 16])),
            KnobError::ColourOutOfRange {
                colour: 16,
                colours: 16
            }
        );
        assert_eq!(bad(|k| k.sample_period = 0), KnobError::SamplePeriodZero);
        assert_eq!(
            bad(|k| k.sample_cpu_budget = 0.0),
            KnobError::CpuBudget(0.0)
        );
        assert_eq!(
            bad(|k| k.profile_windows = 0),
            KnobError::Zero("profile_windows")
        );
        assert!(matches!(
            bad(|k| k.min_llc_miss_rate = 1.5),
            KnobError::OutOfRange {
                name: "min_llc_miss_rate",
                ..
            }
        ));
        assert!(matches!(
            bad(|k| k.profile_max_windows = 1),
            KnobError::OutOfRange {
                name: "profile_max_windows",
                ..
            }
        ));
        assert!(matches!(
            bad(|k| k.profile_loop_max_windows = 4),
            KnobError::OutOfRange {
                name: "profile_loop_max_windows",
                ..
            }
        ));
        assert!(matches!(
            bad(|k| k.phase_band = 0.0),
            KnobError::OutOfRange {
                name: "phase_band",
                ..
            }
        ));
        // The reason reads as a sentence a person can act on.
        let msg = bad(|k| k.pollute_colours = PolluteColours::Count(16)).to_string();
        assert!(msg.contains("all 16 colours"), "{msg}");
        // A single-colour cache cannot have a pollute buffer at all.
        assert_eq!(
            Knobs::default().validate(1).unwrap_err(),
            KnobError::PolluteAll { colours: 1 }
        );
    }

    #[test]
    fn policy_toml_names_only_what_it_changes() {
        let k: Knobs =
            toml::from_str("search = \"linear\"\npollute_colours = [2, 3]\npage_budget = 512\n")
                .unwrap();
        assert_eq!(k.search, SearchMode::Linear);
        assert_eq!(k.pollute_colours, PolluteColours::Set(vec![2, 3]));
        assert_eq!(k.page_budget, 512);
        assert_eq!(k.sample_period, Knobs::default().sample_period);
        let k: Knobs = toml::from_str("pollute_colours = 2\nlinear_step = 64\n").unwrap();
        assert_eq!(k.pollute_colours, PolluteColours::Count(2));
        assert_eq!(k.linear_step, Some(64));
        let e = toml::from_str::<Knobs>("page_budgett = 1\n").unwrap_err();
        assert!(e.to_string().contains("page_budgett"), "{e}");
        let back: Knobs = toml::from_str(&toml::to_string(&Knobs::default()).unwrap()).unwrap();
        assert_eq!(back, Knobs::default());
    }

    #[test]
    fn search_mode_parses_and_prints() {
        assert_eq!("linear".parse::<SearchMode>().unwrap(), SearchMode::Linear);
        assert_eq!(SearchMode::Adaptive.to_string(), "adaptive");
        assert!(matches!(
            "binary".parse::<SearchMode>(),
            Err(KnobError::UnknownSearchMode(_))
        ));
    }
}
