//! Machine specs: the caches, latencies, clock, memory and PMU of a simulated machine,
//! read from TOML. A few are built in (`ppc970fx`, `xeon-like`, `tiny`).

use std::path::Path;

use rocs_core::CacheGeometry;
use serde::{Deserialize, Serialize};

use crate::cache::Policy;
use crate::error::{toml_error, SimError};
use crate::size::ByteSize;

/// One cache level of a machine spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelSpec {
    /// Total size, all slices.
    pub size: ByteSize,
    /// Line size.
    pub line: ByteSize,
    pub ways: u64,
    /// Slices (LLC only in practice); a hash of the frame's address picks the slice.
    #[serde(default = "one")]
    pub slices: u64,
    /// Cycles an access served by this level costs, beyond the base CPI.
    #[serde(default)]
    pub latency: u32,
    #[serde(default = "lru")]
    pub policy: Policy,
    /// LLC only: how lines get into it (default: on a miss, like every other level).
    #[serde(default)]
    pub fill: Fill,
}

/// How lines get into the LLC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fill {
    /// A line missed in every level is installed in every level (non-inclusive,
    /// non-exclusive: an LLC eviction does not reach into the L2).
    #[default]
    OnMiss,
    /// A victim cache: lines from memory go to the L2 only, and the LLC is filled by the
    /// L2's evictions; an LLC hit leaves its copy there (Intel's non-inclusive L3 since
    /// Skylake-SP).
    Victim,
    /// A victim cache whose hits move the line to the L2, leaving the LLC (AMD Zen's L3,
    /// "mostly exclusive").
    ExclusiveVictim,
}

/// An L2 stream/stride prefetcher: per 4 KiB page, once `train` accesses in a row have
/// had the same stride, it fetches up to `degree` lines per access, running up to
/// `distance` lines ahead, never past the page. Prefetched lines fill the L2 and, unless
/// the LLC is a victim cache, the LLC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefetchSpec {
    /// Pages tracked at once (the least recently used is replaced).
    pub streams: usize,
    pub degree: u32,
    pub distance: u32,
    /// Accesses with the same stride before prefetching starts (at least 2: a stride needs
    /// two).
    #[serde(default = "default_train")]
    pub train: u32,
    /// Switch the L2 prefetchers off while the PMU samples (ROCS profiled so: prefetching
    /// hides streaming pages from the profile, Fig. 4; MSR 0x1A4 bit 0 on Intel).
    #[serde(default)]
    pub off_while_sampling: bool,
}

/// A data TLB whose misses walk the page table through the L2 and the LLC: the walker reads
/// the leaf page-table entry (8 bytes, 8 to a 64-byte line); the upper levels are taken to
/// hit in the paging-structure caches (Intel SDM Vol. 3A, 4.10.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbSpec {
    pub entries: u64,
    pub ways: u64,
    /// Cycles of a walk besides reading the entry (the walker's own steps).
    #[serde(default)]
    pub walk_cycles: u32,
}

/// The PMU model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PmuSpec {
    /// Cycles each sample costs the target (interrupt or PEBS assist plus drain).
    #[serde(default = "default_sample_cost")]
    pub sample_cost_cycles: u32,
    /// Each sampling period is drawn uniformly within ±jitter of the requested one (0..1).
    #[serde(default)]
    pub jitter: f64,
    /// Relative standard deviation of the noise added to the cycles a counter read reports
    /// (so that window IPC is noisy, as on real machines). 0 = exact.
    #[serde(default)]
    pub ipc_noise: f64,
    /// Samples the ring holds between drains; more are counted as lost.
    #[serde(default = "default_ring")]
    pub ring_samples: usize,
}

impl Default for PmuSpec {
    fn default() -> Self {
        PmuSpec {
            sample_cost_cycles: default_sample_cost(),
            jitter: 0.0,
            ipc_noise: 0.0,
            ring_samples: default_ring(),
        }
    }
}

fn one() -> u64 {
    1
}
fn lru() -> Policy {
    Policy::Lru
}
fn default_sample_cost() -> u32 {
    500
}
fn default_ring() -> usize {
    1 << 16
}
fn default_train() -> u32 {
    2
}
fn default_migration_ns() -> f64 {
    2000.0
}

/// A simulated machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub clock_ghz: f64,
    /// Cycles per instruction when every access hits the L1.
    pub base_cpi: f64,
    pub page_size: ByteSize,
    /// Physical memory (frames = memory / page_size).
    pub memory: ByteSize,
    /// Cycles an access that misses the LLC costs.
    pub memory_latency: u32,
    /// Cost of migrating one 4 KiB page (copy and TLB shootdown), in nanoseconds.
    #[serde(default = "default_migration_ns")]
    pub migration_ns_per_4k: f64,
    pub l1d: LevelSpec,
    /// Instruction cache, used by trace replay (`I` lines); generated workloads fetch no
    /// instructions through it.
    #[serde(default)]
    pub l1i: Option<LevelSpec>,
    /// A private mid-level cache between the L1s and the LLC.
    #[serde(default)]
    pub l2: Option<LevelSpec>,
    /// The shared last-level cache (the one colours partition).
    pub llc: LevelSpec,
    #[serde(default)]
    pub pmu: PmuSpec,
    /// An L2 hardware prefetcher (none if absent).
    #[serde(default)]
    pub prefetch: Option<PrefetchSpec>,
    /// A data TLB with page walks through the caches (none if absent: translation free).
    #[serde(default)]
    pub tlb: Option<TlbSpec>,
}

const BUILTIN_MACHINES: &[(&str, &str)] = &[
    ("ppc970fx", include_str!("../machines/ppc970fx.toml")),
    ("xeon-like", include_str!("../machines/xeon-like.toml")),
    ("tiny", include_str!("../machines/tiny.toml")),
    ("zen4-like", include_str!("../machines/zen4-like.toml")),
    ("spr-like", include_str!("../machines/spr-like.toml")),
    (
        "neoverse-like",
        include_str!("../machines/neoverse-like.toml"),
    ),
];

/// Names of the built-in machine specs.
pub fn builtin_machines() -> Vec<&'static str> {
    BUILTIN_MACHINES.iter().map(|(n, _)| *n).collect()
}

/// Read `text` as TOML of type `T`, errors located in `file`.
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
) -> Result<T, SimError> {
    toml::from_str(text).map_err(|e| toml_error(file, text, e))
}

pub(crate) fn looks_like_path(s: &str) -> bool {
    s.ends_with(".toml") || s.contains('/') || Path::new(s).exists()
}

pub(crate) fn read_file(path: &str) -> Result<String, SimError> {
    std::fs::read_to_string(path).map_err(|reason| SimError::Io {
        path: path.into(),
        reason,
    })
}

impl MachineSpec {
    /// A built-in machine spec by name, or a TOML file by path.
    pub fn resolve(name_or_path: &str) -> Result<MachineSpec, SimError> {
        if let Some((name, text)) = BUILTIN_MACHINES.iter().find(|(n, _)| *n == name_or_path) {
            return Self::from_toml(&format!("builtin:{name}.toml"), text);
        }
        if looks_like_path(name_or_path) {
            let text = read_file(name_or_path)?;
            return Self::from_toml(name_or_path, &text);
        }
        Err(SimError::UnknownMachine {
            name: name_or_path.to_string(),
            known: builtin_machines().iter().map(|s| s.to_string()).collect(),
        })
    }

    /// Parse and validate a machine spec; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<MachineSpec, SimError> {
        let p: MachineSpec = parse_toml(file, text)?;
        p.validate(file)?;
        Ok(p)
    }

    fn level_geometry(
        &self,
        file: &str,
        what: &str,
        l: &LevelSpec,
    ) -> Result<CacheGeometry, SimError> {
        let geo = |reason| SimError::Geometry {
            file: file.to_string(),
            what: what.to_string(),
            reason,
        };
        if l.line.0 == 0 || !l.line.0.is_power_of_two() {
            return Err(geo(rocs_core::GeometryError::NotPowerOfTwo {
                field: "line_size",
                value: l.line.0,
            }));
        }
        CacheGeometry::from_size(l.size.0, l.line.0, l.ways, l.slices, self.page_size.0)
            .map_err(geo)
    }

    /// Check that the spec describes a machine that can exist.
    pub fn validate(&self, file: &str) -> Result<(), SimError> {
        let invalid = |message: String| SimError::Invalid {
            file: file.to_string(),
            message,
        };
        if !(self.clock_ghz.is_finite() && self.clock_ghz > 0.0) {
            return Err(invalid(format!(
                "clock_ghz must be positive, got {}",
                self.clock_ghz
            )));
        }
        if !(self.base_cpi.is_finite() && self.base_cpi >= 0.0) {
            return Err(invalid(format!(
                "base_cpi must be >= 0, got {}",
                self.base_cpi
            )));
        }
        if !(self.migration_ns_per_4k.is_finite() && self.migration_ns_per_4k >= 0.0) {
            return Err(invalid("migration_ns_per_4k must be >= 0".into()));
        }
        let pmu = &self.pmu;
        if !(0.0..1.0).contains(&pmu.jitter) || !(0.0..1.0).contains(&pmu.ipc_noise) {
            return Err(invalid(
                "pmu.jitter and pmu.ipc_noise must be in [0, 1)".into(),
            ));
        }
        self.level_geometry(file, "l1d", &self.l1d)?;
        if let Some(l) = &self.l1i {
            self.level_geometry(file, "l1i", l)?;
        }
        if let Some(l) = &self.l2 {
            self.level_geometry(file, "l2", l)?;
        }
        self.level_geometry(file, "llc", &self.llc)?;
        for (what, l) in [
            ("l1d", Some(&self.l1d)),
            ("l1i", self.l1i.as_ref()),
            ("l2", self.l2.as_ref()),
        ] {
            if l.is_some_and(|l| l.slices != 1) {
                return Err(invalid(format!("{what}: only the llc may have slices")));
            }
        }
        if self.l1d.fill != Fill::OnMiss
            || self.l1i.as_ref().is_some_and(|l| l.fill != Fill::OnMiss)
            || self.l2.as_ref().is_some_and(|l| l.fill != Fill::OnMiss)
        {
            return Err(invalid("only the llc may set fill".into()));
        }
        if self.llc.fill != Fill::OnMiss && self.l2.is_none() {
            return Err(invalid(
                "llc: a victim cache (fill = \"victim\" or \"exclusive-victim\") needs an [l2] to fill it"
                    .into(),
            ));
        }
        if self.llc.ways > 64 {
            return Err(invalid(format!(
                "llc: at most 64 ways (way masks are 64 bits), got {}",
                self.llc.ways
            )));
        }
        self.validate_models(file)?;
        let frames = self.memory.0 / self.page_size.0;
        if !self.memory.0.is_multiple_of(self.page_size.0)
            || frames == 0
            || frames > u32::MAX as u64
        {
            return Err(invalid(format!(
                "memory {} must be a whole number (1..2^32) of {} pages",
                self.memory, self.page_size
            )));
        }
        Ok(())
    }

    /// The prefetcher and the TLB.
    fn validate_models(&self, file: &str) -> Result<(), SimError> {
        let invalid = |message: String| SimError::Invalid {
            file: file.to_string(),
            message,
        };
        if let Some(p) = &self.prefetch {
            if self.l2.is_none() {
                return Err(invalid(
                    "prefetch: the prefetcher is the L2's: add an [l2]".into(),
                ));
            }
            if p.streams == 0
                || p.streams > 1024
                || p.degree == 0
                || p.degree as usize > crate::prefetch::MAX_DEGREE
                || p.distance < p.degree
            {
                return Err(invalid(format!(
                    "prefetch: need 1..=1024 streams, degree in 1..=16 and distance >= degree (got {}, {}, {})",
                    p.streams, p.degree, p.distance
                )));
            }
            if !(2..=64).contains(&p.train) {
                return Err(invalid(format!(
                    "prefetch: train must be in 2..=64 (a stride needs two accesses), got {}",
                    p.train
                )));
            }
        }
        if let Some(t) = &self.tlb {
            if t.ways == 0
                || t.entries == 0
                || !t.entries.is_multiple_of(t.ways)
                || !(t.entries / t.ways).is_power_of_two()
            {
                return Err(invalid(format!(
                    "tlb: entries ({}) must be ways ({}) times a power of two",
                    t.entries, t.ways
                )));
            }
        }
        Ok(())
    }

    /// True if any model beyond the caches of the paper's machines is on (prefetcher,
    /// TLB, a victim LLC).
    pub fn has_modern_models(&self) -> bool {
        self.prefetch.is_some() || self.tlb.is_some() || self.llc.fill != Fill::OnMiss
    }

    /// Geometry of a level; the spec was validated, so this cannot fail.
    fn geometry_of(&self, l: &LevelSpec) -> CacheGeometry {
        CacheGeometry::from_size(l.size.0, l.line.0, l.ways, l.slices, self.page_size.0)
            .expect("validated spec")
    }

    pub fn llc_geometry(&self) -> CacheGeometry {
        self.geometry_of(&self.llc)
    }
    pub fn l1d_geometry(&self) -> CacheGeometry {
        self.geometry_of(&self.l1d)
    }
    pub fn l1i_geometry(&self) -> Option<CacheGeometry> {
        self.l1i.as_ref().map(|l| self.geometry_of(l))
    }
    pub fn l2_geometry(&self) -> Option<CacheGeometry> {
        self.l2.as_ref().map(|l| self.geometry_of(l))
    }

    /// Cycles that migrating one page costs.
    pub fn migration_cycles(&self) -> u64 {
        (self.migration_ns_per_4k * (self.page_size.0 as f64 / 4096.0) * self.clock_ghz).round()
            as u64
    }

    /// This machine with rocs's two fixed costs, a page migration and a sample, `factor`
    /// times its own (a sample never below one cycle, rounded up): what a short simulated
    /// window weighs them at when it stands for a longer real one (see
    /// `closed_loop::campaign::window_cost_scale`).
    pub fn with_costs_scaled(&self, factor: f64) -> Result<MachineSpec, SimError> {
        if !(factor.is_finite() && factor > 0.0) {
            return Err(SimError::Invalid {
                file: self.name.clone(),
                message: format!("a cost scale must be a positive number, got {factor}"),
            });
        }
        let mut scaled = self.clone();
        scaled.migration_ns_per_4k *= factor;
        scaled.pmu.sample_cost_cycles = (self.pmu.sample_cost_cycles as f64 * factor)
            .ceil()
            .max(1.0) as u32;
        Ok(scaled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_ppc970fx_matches_rocs_table_1() {
        for name in builtin_machines() {
            MachineSpec::resolve(name).unwrap();
        }
        let p = MachineSpec::resolve("ppc970fx").unwrap();
        let g = p.llc_geometry();
        assert_eq!(
            (g.size(), g.ways, g.line_size, g.colours()),
            (512 << 10, 8, 128, 16)
        );
        let l1 = p.l1d_geometry();
        assert_eq!((l1.size(), l1.ways, l1.line_size), (32 << 10, 2, 128));
        assert_eq!((p.llc.latency, p.memory_latency), (12, 300));
        assert_eq!(p.migration_cycles(), 4600);
        let x = MachineSpec::resolve("xeon-like").unwrap();
        assert_eq!(x.llc_geometry().colours(), 32);
        assert!(x.llc_geometry().slices > 1);
        assert_ne!(x.llc.policy, Policy::Lru);
    }

    #[test]
    fn scaled_costs_scale_a_move_and_a_sample_and_nothing_else() {
        let p = MachineSpec::resolve("ppc970fx").unwrap();
        let s = p.with_costs_scaled(0.003).unwrap();
        // 2000 ns at 2.3 GHz is 4600 cycles; at 0.003 of it, 13.8 cycles, rounded.
        assert_eq!(s.migration_cycles(), 14);
        // 1500 cycles a sample: 4.5, rounded up.
        assert_eq!(s.pmu.sample_cost_cycles, 5);
        let tiny = MachineSpec::resolve("tiny").unwrap();
        assert_eq!(
            tiny.with_costs_scaled(1e-6).unwrap().pmu.sample_cost_cycles,
            1
        );
        let back = MachineSpec {
            migration_ns_per_4k: p.migration_ns_per_4k,
            pmu: p.pmu.clone(),
            ..s
        };
        assert_eq!(back, p);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = p.with_costs_scaled(bad).unwrap_err().to_string();
            assert!(e.contains("cost scale"), "{e}");
        }
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let e = MachineSpec::resolve("pdp11").unwrap_err().to_string();
        assert!(e.contains("ppc970fx") && e.contains("xeon-like"), "{e}");
    }

    #[test]
    fn impossible_geometry_is_refused_with_reason() {
        let text = include_str!("../machines/tiny.toml").replace("ways = 4", "ways = 3");
        let e = MachineSpec::from_toml("bad.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.toml") && e.contains("impossible cache geometry"),
            "{e}"
        );
    }

    #[test]
    fn malformed_toml_says_line_and_column() {
        let e = MachineSpec::from_toml("m.toml", "name = \"x\"\nclock_ghz = = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.toml:2:"), "{e}");
    }
}
