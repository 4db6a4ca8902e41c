//! Cache geometry of this machine, from /sys/devices/system/cpu/cpu0/cache/index*/.

use std::path::{Path, PathBuf};

use rocs_core::{CacheGeometry, GeometryError};
use serde::Serialize;
use thiserror::Error;

use crate::cpu::{CpuInfo, Vendor};

/// One cache as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CacheLevel {
    pub level: u32,
    /// "Data", "Instruction" or "Unified".
    pub kind: String,
    pub size: u64,
    pub ways: u64,
    pub line_size: u64,
    pub sets: u64,
    /// CPUs sharing this cache.
    pub shared_cpus: Vec<u32>,
}

/// The last-level cache geometry rocs colours against, and how it was found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DetectedGeometry {
    pub llc: CacheGeometry,
    pub colours: u32,
    /// Every cache level of cpu0 (empty when overridden and sysfs is unreadable).
    pub levels: Vec<CacheLevel>,
    /// Where the slice count came from.
    pub slices_from: String,
    /// True when the geometry came from the configuration, not from sysfs.
    pub overridden: bool,
    pub notes: Vec<String>,
}

#[derive(Debug, Error)]
pub enum GeometryDetectError {
    #[error(
        "no cache description under {0} (is sysfs mounted? set the geometry in the config instead)"
    )]
    NoCaches(PathBuf),
    #[error("{path}: {what} (set the geometry in the config instead)")]
    Bad { path: PathBuf, what: String },
    #[error(
        "the last-level cache read from sysfs is not a valid geometry: {0} (set it in the config)"
    )]
    Invalid(#[from] GeometryError),
}

/// Parse a sysfs CPU list such as "0-7,64-71".
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, mult) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1 << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// Read every cache of cpu0 under `<sys_root>/devices/system/cpu/cpu0/cache`.
pub fn read_cache_levels(sys_root: &Path) -> Result<Vec<CacheLevel>, GeometryDetectError> {
    let dir = sys_root.join("devices/system/cpu/cpu0/cache");
    let entries =
        std::fs::read_dir(&dir).map_err(|_| GeometryDetectError::NoCaches(dir.clone()))?;
    let mut levels = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("index") {
            continue;
        }
        let p = e.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).map(|s| s.trim().to_string());
        let bad = |f: &str, what: &str| GeometryDetectError::Bad {
            path: p.join(f),
            what: what.to_string(),
        };
        let num = |f: &str| -> Result<u64, GeometryDetectError> {
            read(f)
                .map_err(|_| bad(f, "missing"))?
                .parse()
                .map_err(|_| bad(f, "not a number"))
        };
        let size = parse_size(&read("size").map_err(|_| bad("size", "missing"))?)
            .ok_or_else(|| bad("size", "not a size like 32768K"))?;
        let shared = read("shared_cpu_list").unwrap_or_default();
        levels.push(CacheLevel {
            level: num("level")? as u32,
            kind: read("type").unwrap_or_else(|_| "Unified".into()),
            size,
            ways: num("ways_of_associativity")?,
            line_size: num("coherency_line_size")?,
            sets: num("number_of_sets").unwrap_or(0),
            shared_cpus: parse_cpu_list(&shared).unwrap_or_default(),
        });
    }
    if levels.is_empty() {
        return Err(GeometryDetectError::NoCaches(dir));
    }
    levels.sort_by_key(|l| (l.level, l.kind.clone()));
    Ok(levels)
}

/// Find the LLC geometry: the override when given, else sysfs. Slices: one per core
/// sharing the LLC on Intel and AMD (Intel's LLC has a slice per core; a Zen CCX's L3
/// one per core), one elsewhere.
pub fn detect_geometry(
    sys_root: &Path,
    cpu: &CpuInfo,
    page_size: u64,
    override_: Option<CacheGeometry>,
) -> Result<DetectedGeometry, GeometryDetectError> {
    if let Some(g) = override_ {
        g.validate()?;
        return Ok(DetectedGeometry {
            llc: g,
            colours: g.colours(),
            levels: read_cache_levels(sys_root).unwrap_or_default(),
            slices_from: "configuration".into(),
            overridden: true,
            notes: vec![],
        });
    }
    let levels = read_cache_levels(sys_root)?;
    let llc = levels
        .iter()
        .filter(|l| l.kind != "Instruction")
        .max_by_key(|l| l.level)
        .ok_or_else(|| GeometryDetectError::NoCaches(sys_root.into()))?
        .clone();
    let mut notes = Vec::new();
    if llc.sets != 0 && llc.sets * llc.ways * llc.line_size != llc.size {
        notes.push(format!(
            "L{} reports {} sets x {} ways x {} B lines = {} B, but size {} B; the size wins",
            llc.level,
            llc.sets,
            llc.ways,
            llc.line_size,
            llc.sets * llc.ways * llc.line_size,
            llc.size
        ));
    }
    let threads_per_core = std::fs::read_to_string(
        sys_root.join("devices/system/cpu/cpu0/topology/thread_siblings_list"),
    )
    .ok()
    .and_then(|t| parse_cpu_list(&t))
    .map(|v| v.len().max(1) as u64)
    .unwrap_or(1);
    let cores = (llc.shared_cpus.len() as u64 / threads_per_core).max(1);
    let (mut slices, mut slices_from) = match cpu.vendor {
        Vendor::Intel => (
            cores,
            format!("one slice per core sharing the LLC ({cores} cores)"),
        ),
        Vendor::Amd => (
            cores,
            format!("one L3 slice per core of the CCX ({cores} cores)"),
        ),
        _ => (1, "slices unknown for this CPU: treated as one".to_string()),
    };
    let geometry = match CacheGeometry::from_size(
        llc.size,
        llc.line_size,
        llc.ways,
        slices,
        page_size,
    ) {
        Ok(g) => g,
        Err(e) => {
            // A VM shows fewer CPUs than the host's LLC has slices (2 vCPUs on a 26-slice
            // Skylake-SP L3 of 53,248 sets): take the fewest slices whose sets are a power
            // of two. It may count fewer slices than the hardware has, and so more colours
            // (bits of the slice hash read as set bits): a pollute buffer of those colours
            // then spans a larger, still bounded, share of the LLC.
            let lines = llc.size / (llc.line_size * llc.ways).max(1);
            let fewest = if lines == 0 {
                1
            } else {
                lines / (lines & lines.wrapping_neg())
            };
            if fewest == slices {
                return Err(e.into());
            }
            notes.push(format!(
                "{slices} slice(s) do not divide the LLC into power-of-two sets ({e}); taken as {fewest}, the fewest that do"
            ));
            slices = fewest;
            slices_from = format!(
                "the fewest slices that give power-of-two sets ({fewest}; sharing gave no valid count)"
            );
            CacheGeometry::from_size(llc.size, llc.line_size, llc.ways, slices, page_size)?
        }
    };
    Ok(DetectedGeometry {
        llc: geometry,
        colours: geometry.colours(),
        levels,
        slices_from,
        overridden: false,
        notes,
    })
}

/// `detect_geometry` for the machine this runs on (/sys, /proc/cpuinfo, its page size).
pub fn detect_geometry_here(
    override_: Option<CacheGeometry>,
) -> Result<DetectedGeometry, GeometryDetectError> {
    let cpu = CpuInfo::detect().unwrap_or_else(|_| CpuInfo::parse(""));
    detect_geometry(Path::new("/sys"), &cpu, page_size(), override_)
}

/// The page size of this system.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_sizes() {
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("5\n").unwrap(), vec![5]);
        assert!(parse_cpu_list("3-1").is_none());
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
    }
}
