//! Workloads: synthetic programs described in TOML, built from regions with access patterns.
//!
//! ```toml
//! name = "example"
//! description = "what it models"
//! [[process]]
//! name = "main"
//! accesses = 10_000_000          # length when no phases are given
//! [[process.region]]
//! name = "stream"
//! size = "2MiB"
//! pattern = "sequential"         # sequential | strided | random | pointer-chase | stencil
//! share = 0.4                    # share of the process's accesses
//! write_fraction = 0.0
//! instructions_per_access = 3.0
//! [[process.phase]]              # optional; shares override the regions' own
//! accesses = 5_000_000
//! shares = { stream = 1.0 }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::SimError;
use crate::size::ByteSize;
use crate::spec::{looks_like_path, parse_toml, read_file, MachineSpec};

/// How a region's addresses are walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Element after element, wrapping at the end.
    Sequential,
    /// Every `stride` bytes; at the end, start again one element further.
    Strided,
    /// Uniformly random elements.
    Random,
    /// A random cyclic permutation of the elements, followed one by one (a linked list
    /// laid out at random); its misses do not overlap (memory-level parallelism 1).
    PointerChase,
    /// A sweep that reads several points around the current element (`offsets`, bytes)
    /// before moving on: grid codes.
    Stencil,
}

/// One memory region of a process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    pub name: String,
    /// Size in bytes; or give `size_llc`.
    #[serde(default = "no_size")]
    pub size: ByteSize,
    /// Size as a share of the machine's LLC (0.5 = half of it; 4 = four times it), so that
    /// the region means the same on every machine. Resolved when the machine is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_llc: Option<f64>,
    pub pattern: Pattern,
    /// Share of the process's accesses that go here (relative weight).
    #[serde(default)]
    pub share: f64,
    /// Bytes per access (and per element).
    #[serde(default = "default_elem")]
    pub elem: u32,
    /// `strided`: bytes between consecutive accesses.
    #[serde(default)]
    pub stride: Option<ByteSize>,
    /// `stencil`: byte offsets read around the current element.
    #[serde(default)]
    pub offsets: Vec<i64>,
    #[serde(default)]
    pub write_fraction: f64,
    #[serde(default = "default_ipa")]
    pub instructions_per_access: f64,
    /// Misses of this region overlap this many at a time (out-of-order execution and
    /// prefetching hide latency of independent streams): an access served by memory costs
    /// `memory_latency / mlp` cycles, and one served by the LLC its latency / mlp. The
    /// overlap is the core's, whichever level serves the miss: an LLC hit that did not
    /// overlap would cost more than a memory access that did (90 against 310 / 4 cycles
    /// on neoverse-like), and confining a reused set that then always missed would speed
    /// it up.
    #[serde(default = "default_mlp")]
    pub mlp: f64,
}

fn no_size() -> ByteSize {
    ByteSize(0)
}
fn default_elem() -> u32 {
    8
}
fn default_ipa() -> f64 {
    1.0
}
fn default_mlp() -> f64 {
    1.0
}
fn default_repeat() -> u32 {
    1
}

/// A stretch of a process's run with its own mix of regions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    #[serde(default)]
    pub name: Option<String>,
    /// Data accesses in this phase.
    pub accesses: u64,
    /// Region name -> share; regions not named get share 0. Empty: the regions' own shares.
    #[serde(default)]
    pub shares: BTreeMap<String, f64>,
}

/// One process of a workload (its own address space and core, sharing the LLC).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub name: String,
    /// Length of the run when no phases are given.
    #[serde(default)]
    pub accesses: Option<u64>,
    /// Run the phases this many times.
    #[serde(default = "default_repeat")]
    pub repeat: u32,
    #[serde(rename = "region")]
    pub regions: Vec<RegionSpec>,
    #[serde(rename = "phase", default)]
    pub phases: Vec<PhaseSpec>,
}

/// A workload: one or more processes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Multiplies every phase length (tests run shortened workloads).
    #[serde(default = "default_scale")]
    pub scale: f64,
    /// The LLC the byte sizes were chosen for: `--scale auto` rescales them (and the run
    /// lengths, so that each set is walked as many times) to another machine's LLC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub designed_for_llc: Option<ByteSize>,
    #[serde(rename = "process")]
    pub processes: Vec<ProcessSpec>,
}

fn default_scale() -> f64 {
    1.0
}

const BUILTIN_WORKLOADS: &[(&str, &str)] = &[
    ("art-like", include_str!("../workloads/art-like.toml")),
    ("swim-like", include_str!("../workloads/swim-like.toml")),
    ("cg-like", include_str!("../workloads/cg-like.toml")),
    ("mgrid-like", include_str!("../workloads/mgrid-like.toml")),
    ("mcf-like", include_str!("../workloads/mcf-like.toml")),
    ("twolf-like", include_str!("../workloads/twolf-like.toml")),
    ("phased", include_str!("../workloads/phased.toml")),
    (
        "noisy-neighbour",
        include_str!("../workloads/noisy-neighbour.toml"),
    ),
];

/// Names of the built-in workloads.
pub fn builtin_workloads() -> Vec<&'static str> {
    BUILTIN_WORKLOADS.iter().map(|(n, _)| *n).collect()
}

impl Workload {
    /// A built-in workload by name, or a TOML file by path.
    pub fn resolve(name_or_path: &str) -> Result<Workload, SimError> {
        if let Some((name, text)) = BUILTIN_WORKLOADS.iter().find(|(n, _)| *n == name_or_path) {
            return Self::from_toml(&format!("builtin:{name}.toml"), text);
        }
        if looks_like_path(name_or_path) {
            let text = read_file(name_or_path)?;
            return Self::from_toml(name_or_path, &text);
        }
        Err(SimError::UnknownWorkload {
            name: name_or_path.to_string(),
            known: builtin_workloads().iter().map(|s| s.to_string()).collect(),
        })
    }

    /// Parse and validate; `file` names the source in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Workload, SimError> {
        let w: Workload = parse_toml(file, text)?;
        w.validate(file)?;
        Ok(w)
    }

    /// The same workload with every phase `factor` times as long.
    pub fn scaled(&self, factor: f64) -> Workload {
        let mut w = self.clone();
        w.scale *= factor;
        w
    }

    /// The workload on a machine whose LLC holds `llc_bytes`: every `size_llc` region in
    /// bytes (a whole number of elements, at least one).
    pub fn sized_for(&self, llc_bytes: u64) -> Workload {
        let mut w = self.clone();
        for r in w.processes.iter_mut().flat_map(|p| p.regions.iter_mut()) {
            if let Some(share) = r.size_llc.take() {
                r.size = ByteSize(elements(share * llc_bytes as f64, r.elem));
            }
        }
        w
    }

    /// `--scale auto`: the byte sizes rescaled from the LLC the workload was designed for
    /// to one of `llc_bytes` (a reused set that fitted still fits with the same room, a
    /// stream stays as many times the LLC), the run lengths in proportion times `length`.
    pub fn auto_scaled(&self, llc_bytes: u64, length: f64) -> Result<Workload, SimError> {
        let Some(design) = self.designed_for_llc else {
            return Err(SimError::Unsupported(format!(
                "workload '{}' has no designed_for_llc: --scale auto cannot tell what its \
                 sizes are relative to (give designed_for_llc = \"SIZE\" or sizes as size_llc)",
                self.name
            )));
        };
        let factor = llc_bytes as f64 / design.0 as f64;
        let mut w = self.scaled(factor * length);
        for r in w.processes.iter_mut().flat_map(|p| p.regions.iter_mut()) {
            if r.size_llc.is_none() {
                r.size = ByteSize(elements(r.size.0 as f64 * factor, r.elem));
            }
        }
        w.designed_for_llc = Some(ByteSize(llc_bytes));
        Ok(w)
    }

    /// The phases of process `i` as they will run (lengths scaled, shares resolved per region).
    pub(crate) fn resolved_phases(&self, i: usize) -> Vec<(u64, Vec<f64>)> {
        let p = &self.processes[i];
        let own: Vec<f64> = p.regions.iter().map(|r| r.share).collect();
        let scale = |n: u64| ((n as f64 * self.scale).round() as u64).max(1);
        if p.phases.is_empty() {
            return vec![(scale(p.accesses.unwrap_or(0)), own)];
        }
        p.phases
            .iter()
            .map(|ph| {
                let shares = if ph.shares.is_empty() {
                    own.clone()
                } else {
                    p.regions
                        .iter()
                        .map(|r| ph.shares.get(&r.name).copied().unwrap_or(0.0))
                        .collect()
                };
                (scale(ph.accesses), shares)
            })
            .collect()
    }

    pub fn validate(&self, file: &str) -> Result<(), SimError> {
        let invalid = |message: String| SimError::Invalid {
            file: file.to_string(),
            message,
        };
        if self.processes.is_empty() {
            return Err(invalid("a workload needs at least one [[process]]".into()));
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(invalid(format!(
                "scale must be positive, got {}",
                self.scale
            )));
        }
        for p in &self.processes {
            let at = |m: String| invalid(format!("process '{}': {m}", p.name));
            if p.regions.is_empty() {
                return Err(at("needs at least one [[process.region]]".into()));
            }
            if p.repeat == 0 {
                return Err(at("repeat must be at least 1".into()));
            }
            for (i, r) in p.regions.iter().enumerate() {
                let at = |m: String| at(format!("region '{}': {m}", r.name));
                if p.regions[..i].iter().any(|o| o.name == r.name) {
                    return Err(at("region names must be unique".into()));
                }
                r.check().map_err(at)?;
            }
            if p.phases.is_empty() {
                if p.accesses.unwrap_or(0) == 0 {
                    return Err(at(
                        "give accesses = N or at least one [[process.phase]]".into()
                    ));
                }
                if p.regions.iter().all(|r| r.share == 0.0) {
                    return Err(at("at least one region needs a share > 0".into()));
                }
            }
            for (i, ph) in p.phases.iter().enumerate() {
                let label = ph.name.clone().unwrap_or_else(|| format!("#{}", i + 1));
                ph.check(&p.regions)
                    .map_err(|m| at(format!("phase {label}: {m}")))?;
            }
        }
        Ok(())
    }
}

/// How workloads are sized for a machine: `--scale 0.3` (run lengths times 0.3, sizes as
/// written) or `--scale auto` / `--scale auto:0.1` (sizes relative to the machine's LLC,
/// see [`Workload::auto_scaled`], lengths in proportion, times 0.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Length(f64),
    Auto { length: f64 },
}

impl std::str::FromStr for Scale {
    type Err = String;

    fn from_str(s: &str) -> Result<Scale, String> {
        let number = |t: &str| match t.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
            _ => Err(format!(
                "'{s}' is not a scale: give a positive number (run lengths), auto (sizes \
                 relative to the machine's LLC) or auto:N (that, lengths times N)"
            )),
        };
        match s.trim().strip_prefix("auto") {
            Some("") => Ok(Scale::Auto { length: 1.0 }),
            Some(rest) => match rest.strip_prefix(':') {
                Some(n) => Ok(Scale::Auto { length: number(n)? }),
                None => number(s).map(Scale::Length),
            },
            None => number(s).map(Scale::Length),
        }
    }
}

impl std::fmt::Display for Scale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scale::Length(v) => write!(f, "{v}"),
            Scale::Auto { length } if *length == 1.0 => write!(f, "auto"),
            Scale::Auto { length } => write!(f, "auto:{length}"),
        }
    }
}

impl Scale {
    /// `workload` as it runs on `spec`.
    pub fn apply(&self, workload: &Workload, spec: &MachineSpec) -> Result<Workload, SimError> {
        match *self {
            Scale::Length(v) => Ok(workload.scaled(v)),
            Scale::Auto { length } => workload.auto_scaled(spec.llc.size.0, length),
        }
    }
}

/// `bytes` rounded to a whole number of `elem`-byte elements, at least one.
pub(crate) fn elements(bytes: f64, elem: u32) -> u64 {
    ((bytes / elem as f64).round() as u64).max(1) * elem as u64
}

impl RegionSpec {
    /// What is wrong with this region, if anything.
    fn check(&self) -> Result<(), String> {
        let r = self;
        if r.elem == 0 || !r.elem.is_power_of_two() || r.elem > 4096 {
            return Err(format!(
                "elem must be a power of two in 1..=4096, got {}",
                r.elem
            ));
        }
        if let Some(share) = r.size_llc {
            if r.size.0 != 0 {
                return Err("give size or size_llc, not both".into());
            }
            if !(share.is_finite() && share > 0.0 && share <= 256.0) {
                return Err(format!("size_llc must be in (0, 256], got {share}"));
            }
            // The rest is checked once the machine gives the size.
            return Ok(());
        }
        if r.size.0 < r.elem as u64 || !r.size.0.is_multiple_of(r.elem as u64) {
            return Err(format!(
                "size {} must be a non-zero multiple of elem {}",
                r.size, r.elem
            ));
        }
        if r.size.0 > 64 << 30 {
            return Err(format!("size {} is larger than 64GiB", r.size));
        }
        let finite_nonneg = |v: f64| v.is_finite() && v >= 0.0;
        if !finite_nonneg(r.share) {
            return Err(format!("share must be >= 0, got {}", r.share));
        }
        if !(0.0..=1.0).contains(&r.write_fraction) {
            return Err(format!(
                "write_fraction must be in [0, 1], got {}",
                r.write_fraction
            ));
        }
        if !finite_nonneg(r.instructions_per_access) || r.instructions_per_access > 1e6 {
            return Err("instructions_per_access must be in [0, 1e6]".into());
        }
        if !(r.mlp.is_finite() && r.mlp >= 1.0) {
            return Err(format!("mlp must be >= 1, got {}", r.mlp));
        }
        match r.pattern {
            Pattern::Strided => match r.stride {
                Some(s) if s.0 >= r.elem as u64 && s.0 % r.elem as u64 == 0 && s.0 <= r.size.0 => {}
                _ => {
                    return Err(
                        "strided needs stride = a multiple of elem, at most the size".into(),
                    )
                }
            },
            Pattern::Stencil => {
                if r.offsets.is_empty() || r.offsets.len() > 64 {
                    return Err("stencil needs offsets = [..] (1 to 64 byte offsets)".into());
                }
                if r.offsets
                    .iter()
                    .any(|o| o.unsigned_abs() >= r.size.0 || o % r.elem as i64 != 0)
                {
                    return Err(
                        "stencil offsets must be multiples of elem, smaller than the size".into(),
                    );
                }
            }
            // The chain is a table of 4 bytes per element: keep it under 256 MiB.
            Pattern::PointerChase if r.size.0 / r.elem as u64 > 1 << 26 => {
                return Err(
                    "pointer-chase has too many elements (at most 2^26: raise elem)".into(),
                );
            }
            _ => {}
        }
        Ok(())
    }
}

impl PhaseSpec {
    /// What is wrong with this phase of a process with these regions, if anything.
    fn check(&self, regions: &[RegionSpec]) -> Result<(), String> {
        let ph = self;
        if ph.accesses == 0 {
            return Err("accesses must be > 0".into());
        }
        for (name, share) in &ph.shares {
            if !regions.iter().any(|r| &r.name == name) {
                return Err(format!("unknown region '{name}' in shares"));
            }
            if !(share.is_finite() && *share >= 0.0) {
                return Err(format!("share of '{name}' must be >= 0"));
            }
        }
        let total: f64 = if ph.shares.is_empty() {
            regions.iter().map(|r| r.share).sum()
        } else {
            ph.shares.values().sum()
        };
        if total <= 0.0 {
            return Err("shares add up to 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_say_what_they_model() {
        for name in builtin_workloads() {
            let w = Workload::resolve(name).unwrap();
            assert_eq!(w.name, name);
            assert!(!w.description.is_empty(), "{name} has no description");
        }
        assert_eq!(
            Workload::resolve("noisy-neighbour")
                .unwrap()
                .processes
                .len(),
            2
        );
    }

    #[test]
    fn unknown_workload_lists_the_known_ones() {
        let e = Workload::resolve("gcc-like").unwrap_err().to_string();
        assert!(e.contains("art-like") && e.contains("mcf-like"), "{e}");
    }

    #[test]
    fn sizes_follow_the_llc() {
        let art = Workload::resolve("art-like").unwrap();
        let zen = MachineSpec::resolve("zen4-like").unwrap();
        let auto: Scale = "auto:0.5".parse().unwrap();
        let w = auto.apply(&art, &zen).unwrap();
        // 32 MiB is 64 times ppc970fx's 512 KiB: the 2 MiB weights become 128 MiB, and
        // the run is 64 times as long, halved.
        let weights = &w.processes[0].regions[0];
        assert_eq!(weights.size, ByteSize(128 << 20));
        assert_eq!(w.resolved_phases(0)[0].0, 100_000_000 * 32);
        assert_eq!("0.3".parse::<Scale>().unwrap(), Scale::Length(0.3));
        assert!("auto:x".parse::<Scale>().unwrap_err().contains("auto:N"));
        let text = "name = \"w\"\n[[process]]\nname = \"p\"\naccesses = 10\n[[process.region]]\nname = \"a\"\nsize_llc = 0.25\npattern = \"random\"\nshare = 1.0\n";
        let w = Workload::from_toml("w.toml", text).unwrap();
        assert_eq!(
            w.sized_for(32 << 20).processes[0].regions[0].size,
            ByteSize(8 << 20)
        );
        let e = Workload::from_toml("w.toml", &text.replace("size_llc", "size = 4096\nsize_llc"))
            .unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
        let e = auto.apply(&w, &zen).unwrap_err();
        assert!(e.to_string().contains("designed_for_llc"), "{e}");
    }

    #[test]
    fn bad_workloads_are_refused_with_a_reason() {
        let base = "name = \"w\"\n[[process]]\nname = \"p\"\naccesses = 10\n[[process.region]]\nname = \"a\"\nsize = \"4KiB\"\nshare = 1.0\n";
        let e =
            Workload::from_toml("w.toml", &format!("{base}pattern = \"zigzag\"\n")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("w.toml:9:"), "{msg}");
        assert!(msg.contains("sequential"), "says what was expected: {msg}");
        let e =
            Workload::from_toml("w.toml", &format!("{base}pattern = \"strided\"\n")).unwrap_err();
        assert!(e.to_string().contains("stride"), "{e}");
        let ok = Workload::from_toml("w.toml", &format!("{base}pattern = \"random\"\n")).unwrap();
        assert_eq!(ok.resolved_phases(0), vec![(10, vec![1.0])]);
        assert_eq!(ok.scaled(0.5).resolved_phases(0)[0].0, 5);
    }
}
