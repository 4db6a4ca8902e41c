//! The PMUs the kernel exposes under /sys/bus/event_source/devices: their dynamic type
//! numbers, named events, format fields and capabilities.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One PMU directory (e.g. `cpu`, `cpu_core`, `ibs_op`, `arm_spe_0`, `software`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PmuDevice {
    pub name: String,
    /// The `type` value to put into perf_event_attr.
    pub type_: u32,
    /// `events/*`: name -> encoding (e.g. "event=0xcd,umask=0x1,ldlat=3").
    pub events: BTreeMap<String, String>,
    /// `format/*`: field -> bits (e.g. "config:19").
    pub formats: BTreeMap<String, String>,
    /// `caps/*`: name -> value.
    pub caps: BTreeMap<String, String>,
}

impl PmuDevice {
    /// The first bit of a format field such as "config:19" or "config1:0-11", as
    /// (which config word, bit). None when the PMU has no such field.
    pub fn format_bit(&self, field: &str) -> Option<(u8, u32)> {
        let spec = self.formats.get(field)?;
        let (word, bits) = spec.split_once(':')?;
        let word = match word {
            "config" => 0,
            "config1" => 1,
            "config2" => 2,
            _ => return None,
        };
        let first = bits.split(['-', ',']).next()?.parse().ok()?;
        Some((word, first))
    }
}

/// A snapshot of every PMU in a sysfs tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PmuInventory {
    pub pmus: BTreeMap<String, PmuDevice>,
    /// Where it was read from (for messages).
    #[serde(skip)]
    pub root: PathBuf,
}

fn read_dir_map(dir: &Path) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return map;
    };
    for e in entries.flatten() {
        if let Ok(text) = std::fs::read_to_string(e.path()) {
            map.insert(
                e.file_name().to_string_lossy().into_owned(),
                text.trim().to_string(),
            );
        }
    }
    map
}

impl PmuInventory {
    /// Read `<sys_root>/bus/event_source/devices/*` (sys_root is "/sys" on a live system,
    /// a fixture directory in tests). A missing directory gives an empty inventory.
    pub fn read(sys_root: &Path) -> PmuInventory {
        let devices = sys_root.join("bus/event_source/devices");
        let mut pmus = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(&devices) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let dir = e.path();
                let Some(type_) = std::fs::read_to_string(dir.join("type"))
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                else {
                    continue;
                };
                pmus.insert(
                    name.clone(),
                    PmuDevice {
                        name,
                        type_,
                        events: read_dir_map(&dir.join("events")),
                        formats: read_dir_map(&dir.join("format")),
                        caps: read_dir_map(&dir.join("caps")),
                    },
                );
            }
        }
        PmuInventory {
            pmus,
            root: devices,
        }
    }

    pub fn get(&self, name: &str) -> Option<&PmuDevice> {
        self.pmus.get(name)
    }

    /// The core PMU: `cpu` (Intel, AMD), `cpu_core` (Intel hybrid: the P-cores) or
    /// `armv8_pmuv3*`/`armv9_*` on Arm.
    pub fn core_pmu(&self) -> Option<&PmuDevice> {
        self.get("cpu")
            .or_else(|| self.get("cpu_core"))
            .or_else(|| {
                self.pmus
                    .values()
                    .find(|p| p.name.starts_with("armv8_") || p.name.starts_with("armv9_"))
            })
    }

    /// The first Arm SPE instance (`arm_spe_0`).
    pub fn arm_spe(&self) -> Option<&PmuDevice> {
        self.pmus.values().find(|p| p.name.starts_with("arm_spe"))
    }

    pub fn names(&self) -> Vec<&str> {
        self.pmus.keys().map(String::as_str).collect()
    }
}
