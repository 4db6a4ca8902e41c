//! What CPU this is, from the text of /proc/cpuinfo, and which kernel runs it.

use std::fmt;

/// CPU vendor as far as event selection cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Intel,
    Amd,
    Arm,
    Other,
}

/// The identity of the first CPU in /proc/cpuinfo.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CpuInfo {
    pub vendor: Vendor,
    /// x86 family (e.g. 6 for Intel Core, 25 for AMD Zen 3/4); for Arm the architecture.
    pub family: u32,
    /// x86 model; for Arm the part number (e.g. 0xd0c for Neoverse N1).
    pub model: u32,
    /// Arm implementer (0x41 = Arm Ltd); 0 on x86.
    pub implementer: u32,
    pub model_name: String,
    /// The `hypervisor` flag: running under a hypervisor (a VM).
    pub hypervisor: bool,
    pub flags: Vec<String>,
}

fn parse_num(v: &str) -> Option<u32> {
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

impl CpuInfo {
    /// Parse the first processor block of /proc/cpuinfo. Unknown layouts give
    /// `Vendor::Other` rather than an error: the software plan still works there.
    pub fn parse(text: &str) -> CpuInfo {
        let mut info = CpuInfo {
            vendor: Vendor::Other,
            family: 0,
            model: 0,
            implementer: 0,
            model_name: String::new(),
            hypervisor: false,
            flags: Vec::new(),
        };
        let mut seen_processor = false;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim();
            let value = value.trim();
            if key == "processor" {
                // x86 starts a block with "processor"; stop at the second one.
                if seen_processor && info.vendor != Vendor::Other {
                    break;
                }
                seen_processor = true;
                continue;
            }
            match key {
                "vendor_id" => {
                    info.vendor = match value {
                        "GenuineIntel" => Vendor::Intel,
                        "AuthenticAMD" | "HygonGenuine" => Vendor::Amd,
                        _ => Vendor::Other,
                    }
                }
                "cpu family" => info.family = parse_num(value).unwrap_or(0),
                "model" => info.model = parse_num(value).unwrap_or(0),
                "model name" if info.model_name.is_empty() => info.model_name = value.to_string(),
                "flags" | "Features" if info.flags.is_empty() => {
                    info.flags = value.split_whitespace().map(str::to_string).collect();
                    info.hypervisor = info.flags.iter().any(|f| f == "hypervisor");
                }
                "CPU implementer" => {
                    info.implementer = parse_num(value).unwrap_or(0);
                    if info.implementer == 0x41 || info.vendor == Vendor::Other {
                        info.vendor = Vendor::Arm;
                    }
                }
                "CPU architecture" => info.family = parse_num(value).unwrap_or(0),
                "CPU part" if info.model == 0 => info.model = parse_num(value).unwrap_or(0),
                _ => {}
            }
        }
        if info.model_name.is_empty() && info.vendor == Vendor::Arm {
            info.model_name = arm_part_name(info.implementer, info.model)
                .unwrap_or("Arm core")
                .to_string();
        }
        info
    }

    /// Read /proc/cpuinfo of this machine.
    ///
    /// Not through procfs, which rocs uses for the rest of /proc: its cpuinfo parser
    /// (procfs-core 0.17.0, `CpuInfo::from_buf_read`) skips every line of a block before
    /// the block's first `processor` key, so a file that names the CPU first comes out
    /// without it (32-bit Arm kernels before 3.8 print `Processor`, `Features` and the `CPU`
    /// lines with no `processor` line at all; s390x prints vendor_id and features in a
    /// header). `parse` reads the keys wherever they are; the test
    /// `procfs_drops_the_lines_before_the_first_processor_key` shows the difference.
    pub fn detect() -> std::io::Result<CpuInfo> {
        Ok(CpuInfo::parse(&std::fs::read_to_string("/proc/cpuinfo")?))
    }

    /// A short name of the microarchitecture where we know it.
    pub fn microarchitecture(&self) -> Option<&'static str> {
        match self.vendor {
            Vendor::Intel if self.family == 6 => intel_model_name(self.model),
            Vendor::Amd => match (self.family, self.model) {
                (0x17, 0x00..=0x2f) => Some("Zen/Zen+"),
                (0x17, _) => Some("Zen 2"),
                (0x19, 0x00..=0x0f) | (0x19, 0x20..=0x5f) => Some("Zen 3"),
                (0x19, _) => Some("Zen 4"),
                (0x1a, _) => Some("Zen 5"),
                _ => None,
            },
            Vendor::Arm => arm_part_name(self.implementer, self.model),
            _ => None,
        }
    }
}

fn intel_model_name(model: u32) -> Option<&'static str> {
    Some(match model {
        0x3c | 0x3f | 0x45 | 0x46 => "Haswell",
        0x3d | 0x47 | 0x4f | 0x56 => "Broadwell",
        0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => "Skylake client",
        0x55 => "Skylake-SP/Cascade Lake",
        0x6a | 0x6c => "Ice Lake-SP",
        0x7d | 0x7e => "Ice Lake client",
        0x8c | 0x8d => "Tiger Lake",
        0x8f => "Sapphire Rapids",
        0xcf => "Emerald Rapids",
        0xad | 0xae => "Granite Rapids",
        0x97 | 0x9a => "Alder Lake",
        0xb7 | 0xba | 0xbf => "Raptor Lake",
        0xaa | 0xac => "Meteor Lake",
        _ => return None,
    })
}

fn arm_part_name(implementer: u32, part: u32) -> Option<&'static str> {
    if implementer != 0x41 {
        return None;
    }
    Some(match part {
        0xd0c => "Neoverse N1",
        0xd40 => "Neoverse V1",
        0xd49 => "Neoverse N2",
        0xd4f => "Neoverse V2",
        0xd8e => "Neoverse N3",
        0xd84 => "Neoverse V3",
        _ => return None,
    })
}

/// A kernel release as `uname -r` prints it, reduced to numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        KernelVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parse "6.18.44-fc-v669", "5.10.0-28-amd64", "6.1".
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut nums = release
            .split(|c: char| !c.is_ascii_digit())
            .take(3)
            .map(|s| s.parse::<u32>().ok());
        let major = nums.next()??;
        let minor = nums.next().flatten()?;
        let patch = nums.next().flatten().unwrap_or(0);
        Some(KernelVersion::new(major, minor, patch))
    }

    /// The running kernel (uname).
    pub fn running() -> Option<KernelVersion> {
        let uts = nix::sys::utsname::uname().ok()?;
        KernelVersion::parse(&uts.release().to_string_lossy())
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_releases() {
        assert_eq!(
            KernelVersion::parse("6.18.44-fc-v669"),
            Some(KernelVersion::new(6, 18, 44))
        );
        assert_eq!(
            KernelVersion::parse("5.10.0-28-amd64"),
            Some(KernelVersion::new(5, 10, 0))
        );
        assert_eq!(
            KernelVersion::parse("6.1"),
            Some(KernelVersion::new(6, 1, 0))
        );
        assert_eq!(KernelVersion::parse("garbage"), None);
        assert!(KernelVersion::new(6, 0, 9) < KernelVersion::new(6, 1, 0));
    }

    #[test]
    fn parses_x86_and_arm_cpuinfo() {
        let amd = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: fpu hypervisor avx2\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n";
        let c = CpuInfo::parse(amd);
        assert_eq!((c.vendor, c.family, c.model), (Vendor::Amd, 25, 17));
        assert!(c.hypervisor);
        assert_eq!(c.microarchitecture(), Some("Zen 4"));
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd spe\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n";
        let c = CpuInfo::parse(arm);
        assert_eq!((c.vendor, c.model), (Vendor::Arm, 0xd0c));
        assert!(!c.hypervisor);
        assert_eq!(c.model_name, "Neoverse N1");
    }

    /// The evidence for reading /proc/cpuinfo ourselves (see `CpuInfo::detect`): should a
    /// procfs update keep these lines, read the file through procfs instead.
    #[test]
    fn procfs_drops_the_lines_before_the_first_processor_key() {
        use procfs::FromRead;
        // A 32-bit Arm board on a 3.x kernel (Raspberry Pi 1): no `processor` line.
        let arm32 = "Processor\t: ARMv6-compatible processor rev 7 (v6l)\nBogoMIPS\t: 697.95\n\
                     Features\t: swp half thumb fastmult vfp edsp java tls\n\
                     CPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x0\n\
                     CPU part\t: 0xb76\nCPU revision\t: 7\n\nHardware\t: BCM2708\n";
        let ours = CpuInfo::parse(arm32);
        assert_eq!(
            (ours.vendor, ours.implementer, ours.model),
            (Vendor::Arm, 0x41, 0xb76)
        );
        assert_eq!(ours.flags.len(), 8);
        let theirs = procfs::CpuInfo::from_read(arm32.as_bytes()).unwrap();
        assert_eq!(theirs.get_field(0, "CPU implementer"), None);
        assert_eq!(theirs.get_field(0, "Features"), None);
        // And a header before the first block is lost even when `processor` lines follow.
        let header = "vendor_id\t: GenuineIntel\nprocessor\t: 0\ncpu family\t: 6\n";
        assert_eq!(CpuInfo::parse(header).vendor, Vendor::Intel);
        let theirs = procfs::CpuInfo::from_read(header.as_bytes()).unwrap();
        assert_eq!(theirs.vendor_id(0), None);
        assert_eq!(theirs.get_field(0, "cpu family"), Some("6"));
    }
}
