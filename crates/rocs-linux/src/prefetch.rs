//! The L2 prefetchers switched off while rocs profiles, as ROCS profiled: prefetched lines
//! hide a streaming page's misses, so a profile taken with them on ranks streams as reused
//! (ROCS Fig. 4; the simulated machines' `off_while_sampling`).
//!
//! On Intel cores through MSR 0x1A4 (MSR_MISC_FEATURE_CONTROL): bit 0 disables the L2
//! hardware (streamer) prefetcher, bit 1 the L2 adjacent cache line prefetcher (Intel,
//! "Disclosure of Hardware Prefetcher Control on Some Intel Processors", 2014, for Nehalem
//! to Broadwell; Intel's pepc sets the same bits on every later core it lists, through
//! Granite Rapids). On AMD cores that say so in CPUID Fn8000_0021_EAX[13] (PrefetchCtlMsr)
//! through MSRC000_0108 (Core::X86::Msr::PrefetchControl, AMD's Processor Programming
//! Reference for family 19h): bit 3 (L2Stream) disables the L2 stream prefetcher, bit 5
//! (UpDown) the L2 next-or-previous-line prefetcher. Either register is per core (its
//! hardware threads share it); it is read and written through the msr driver's
//! /dev/cpu/N/msr, at the file offset of the register's number. Linux offers no switch for
//! Arm's cores: they are refused.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::cpu::{CpuInfo, Vendor};

/// The register that switches a core's L2 prefetchers, and its bits that switch them off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefetchRegister {
    pub msr: u64,
    pub off_bits: u64,
}

/// Intel's MSR_MISC_FEATURE_CONTROL: the L2 streamer (bit 0) and adjacent line (bit 1).
pub const INTEL: PrefetchRegister = PrefetchRegister {
    msr: 0x1a4,
    off_bits: 0b11,
};

/// AMD's PrefetchControl: L2Stream (bit 3) and UpDown (bit 5).
pub const AMD: PrefetchRegister = PrefetchRegister {
    msr: 0xc000_0108,
    off_bits: 1 << 3 | 1 << 5,
};

/// Why the L2 prefetchers cannot be switched here.
#[derive(Debug, thiserror::Error)]
pub enum PrefetchError {
    #[error(
        "{cpu}: rocsd switches the L2 prefetchers only on Intel's family-6 cores from \
         Nehalem to Granite Rapids (MSR 0x1A4) and on AMD cores with the prefetch control \
         MSR (CPUID Fn8000_0021_EAX[13]); set prefetchers_off_while_profiling = false in \
         rocsd.toml"
    )]
    Unsupported { cpu: String },
    // The io errors are in the messages, not sources: a report of the chain says them once.
    #[error(
        "opening {path}: {error}; the msr driver gives it (modprobe msr), and opening it \
         takes CAP_SYS_RAWIO and, under systemd, the unit's leave (config/rocsd.service \
         says how)"
    )]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {error}")]
    Ledger { path: PathBuf, error: String },
    #[error("reading MSR {msr:#x} of CPU {cpu}: {error}")]
    Read {
        msr: u64,
        cpu: u32,
        error: std::io::Error,
    },
    #[error(
        "writing MSR {msr:#x} of CPU {cpu}: {error} (a kernel in lockdown, or booted with \
         msr.allow_writes=off, refuses every MSR write)"
    )]
    Write {
        msr: u64,
        cpu: u32,
        error: std::io::Error,
    },
}

/// Intel family-6 models whose MSR 0x1A4 has the L2 prefetcher bits: the disclosure's
/// (Nehalem to Broadwell) and those Intel's pepc lists after them (to Granite Rapids), each
/// with its name in the kernel's intel-family.h (a test checks both against the installed
/// kernel headers).
pub const INTEL_MODELS: &[(u32, &str)] = &[
    (0x1e, "NEHALEM"),
    (0x1f, "NEHALEM_G"),
    (0x1a, "NEHALEM_EP"),
    (0x2e, "NEHALEM_EX"),
    (0x25, "WESTMERE"),
    (0x2c, "WESTMERE_EP"),
    (0x2f, "WESTMERE_EX"),
    (0x2a, "SANDYBRIDGE"),
    (0x2d, "SANDYBRIDGE_X"),
    (0x3a, "IVYBRIDGE"),
    (0x3e, "IVYBRIDGE_X"),
    (0x3c, "HASWELL"),
    (0x3f, "HASWELL_X"),
    (0x45, "HASWELL_L"),
    (0x46, "HASWELL_G"),
    (0x3d, "BROADWELL"),
    (0x47, "BROADWELL_G"),
    (0x4f, "BROADWELL_X"),
    (0x56, "BROADWELL_D"),
    (0x4e, "SKYLAKE_L"),
    (0x5e, "SKYLAKE"),
    (0x55, "SKYLAKE_X"),
    (0x8e, "KABYLAKE_L"),
    (0x9e, "KABYLAKE"),
    (0xa5, "COMETLAKE"),
    (0xa6, "COMETLAKE_L"),
    (0x66, "CANNONLAKE_L"),
    (0x6a, "ICELAKE_X"),
    (0x6c, "ICELAKE_D"),
    (0x7d, "ICELAKE"),
    (0x7e, "ICELAKE_L"),
    (0x9d, "ICELAKE_NNPI"),
    (0xa7, "ROCKETLAKE"),
    (0x8c, "TIGERLAKE_L"),
    (0x8d, "TIGERLAKE"),
    (0x8f, "SAPPHIRERAPIDS_X"),
    (0xcf, "EMERALDRAPIDS_X"),
    (0xad, "GRANITERAPIDS_X"),
    (0xae, "GRANITERAPIDS_D"),
    (0x97, "ALDERLAKE"),
    (0x9a, "ALDERLAKE_L"),
    (0xb7, "RAPTORLAKE"),
    (0xba, "RAPTORLAKE_P"),
    (0xbf, "RAPTORLAKE_S"),
    (0xac, "METEORLAKE"),
    (0xaa, "METEORLAKE_L"),
];

/// The switch of this machine's CPU (the first in /proc/cpuinfo stands for all).
pub fn register_here(cpu: &CpuInfo) -> Result<PrefetchRegister, PrefetchError> {
    register_of(cpu, amd_prefetch_control_msr())
}

/// The switch of `cpu`, an AMD one's as its CPUID says (`amd_control_msr`).
pub fn register_of(
    cpu: &CpuInfo,
    amd_control_msr: bool,
) -> Result<PrefetchRegister, PrefetchError> {
    match cpu.vendor {
        Vendor::Intel
            if cpu.family == 6 && INTEL_MODELS.iter().any(|&(model, _)| model == cpu.model) =>
        {
            return Ok(INTEL)
        }
        Vendor::Amd if amd_control_msr => return Ok(AMD),
        _ => {}
    }
    Err(PrefetchError::Unsupported {
        cpu: format!(
            "{:?} family {} model {:#x} ({})",
            cpu.vendor, cpu.family, cpu.model, cpu.model_name
        ),
    })
}

/// CPUID Fn8000_0021_EAX[13], PrefetchCtlMsr: this AMD core has MSRC000_0108.
fn amd_prefetch_control_msr() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        let leaf = 0x8000_0021;
        __cpuid(0x8000_0000).eax >= leaf && __cpuid(leaf).eax >> 13 & 1 == 1
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The L2 prefetchers of a set of CPUs (one LLC domain's), each off while any holder asks
/// for it: the first [`hold`](Self::hold) of a CPU sets its bits, keeping what its register
/// held; the last [`release`](Self::release) of it writes that back. Dropped while held,
/// it writes it back too, so that rocsd never leaves a machine without its prefetchers; and
/// with a ledger (see [`recover`](Self::recover)) a rocsd killed while they were off leaves
/// the next what it needs to give them back.
pub struct L2PrefetchSwitch {
    register: PrefetchRegister,
    msrs: Vec<(u32, File)>,
    /// Each CPU's register before the bits were set, while they are.
    saved: BTreeMap<u32, u64>,
    /// How many holders want each CPU's prefetchers off (CPUs nobody holds are absent).
    holds: BTreeMap<u32, usize>,
    /// A folder holding, while a CPU's bits are set, a file `cpuN` with what its register
    /// held before (in hex).
    ledger: Option<PathBuf>,
}

impl L2PrefetchSwitch {
    /// Open the MSR files of `cpus` under `root` (`/dev/cpu` on a real machine) and read each
    /// register once, so that a machine that cannot switch is known at start, not at the
    /// first profile.
    pub fn open(
        root: &Path,
        cpus: &[u32],
        register: PrefetchRegister,
    ) -> Result<L2PrefetchSwitch, PrefetchError> {
        let mut msrs = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let path = root.join(cpu.to_string()).join("msr");
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|error| PrefetchError::Open { path, error })?;
            read_msr(&file, register.msr, cpu)?;
            msrs.push((cpu, file));
        }
        Ok(L2PrefetchSwitch {
            register,
            msrs,
            saved: BTreeMap::new(),
            holds: BTreeMap::new(),
            ledger: None,
        })
    }

    /// Keep a ledger in `dir` from now on, and first give back every register of these
    /// CPUs that a ledger there says an earlier switch left off (its rocsd killed while a
    /// target profiled). Returns the CPUs given back.
    pub fn recover(&mut self, dir: &Path) -> Result<Vec<u32>, PrefetchError> {
        let mut given_back = Vec::new();
        for (cpu, file) in &self.msrs {
            let path = ledger_file(dir, *cpu);
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ledger_error(&path, e)),
            };
            let before = u64::from_str_radix(text.trim().trim_start_matches("0x"), 16)
                .map_err(|_| ledger_error(&path, format!("{text:?} is not a register value")))?;
            write_msr(file, self.register.msr, *cpu, before)?;
            std::fs::remove_file(&path).map_err(|e| ledger_error(&path, e))?;
            given_back.push(*cpu);
        }
        self.ledger = Some(dir.to_path_buf());
        Ok(given_back)
    }

    /// The CPUs it switches.
    pub fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.msrs.iter().map(|(cpu, _)| *cpu)
    }

    /// Whether any CPU's prefetchers are off now.
    pub fn is_off(&self) -> bool {
        !self.holds.is_empty()
    }

    /// One more holder wants the prefetchers of `cpus` off (those of its own).
    pub fn hold(&mut self, cpus: &[u32]) -> Result<(), PrefetchError> {
        let newly: Vec<u32> = cpus
            .iter()
            .copied()
            .filter(|cpu| !self.holds.contains_key(cpu))
            .collect();
        if let Err(e) = self.switch_off(&newly) {
            // Those switched already go back on (what cannot stays saved, for the next
            // release or the drop to try again); the failure to switch is the news.
            let _ = self.restore(&newly);
            return Err(e);
        }
        for (cpu, _) in &self.msrs {
            if cpus.contains(cpu) {
                *self.holds.entry(*cpu).or_default() += 1;
            }
        }
        Ok(())
    }

    /// Set the off bits on those of `cpus` not off already, saving what each register held.
    fn switch_off(&mut self, cpus: &[u32]) -> Result<(), PrefetchError> {
        let msr = self.register.msr;
        for (cpu, file) in &self.msrs {
            if !cpus.contains(cpu) || self.saved.contains_key(cpu) {
                continue; // not asked, or not written back after an earlier failure
            }
            let before = read_msr(file, msr, *cpu)?;
            // The ledger first: a rocsd killed between the two leaves a register unchanged
            // and a ledger the next gives back as it was.
            if let Some(dir) = &self.ledger {
                std::fs::create_dir_all(dir).map_err(|e| ledger_error(dir, e))?;
                let path = ledger_file(dir, *cpu);
                std::fs::write(&path, format!("{before:#x}\n"))
                    .map_err(|e| ledger_error(&path, e))?;
            }
            if let Err(e) = write_msr(file, msr, *cpu, before | self.register.off_bits) {
                if let Some(dir) = &self.ledger {
                    let _ = forget_in_ledger(dir, *cpu); // unchanged: nothing to give back
                }
                return Err(e);
            }
            self.saved.insert(*cpu, before);
        }
        Ok(())
    }

    /// A holder of `cpus` is done; the last of each gives its register back.
    pub fn release(&mut self, cpus: &[u32]) -> Result<(), PrefetchError> {
        let mut free = Vec::new();
        for cpu in cpus {
            if let Some(holders) = self.holds.get_mut(cpu) {
                *holders -= 1;
                if *holders == 0 {
                    self.holds.remove(cpu);
                    free.push(*cpu);
                }
            }
        }
        self.restore(&free)
    }

    /// Write back the saved registers of `cpus`, forgetting those written; the first
    /// failure is returned, the others still tried.
    fn restore(&mut self, cpus: &[u32]) -> Result<(), PrefetchError> {
        let mut first = Ok(());
        for (cpu, file) in &self.msrs {
            let Some(&before) = self.saved.get(cpu).filter(|_| cpus.contains(cpu)) else {
                continue;
            };
            let written = write_msr(file, self.register.msr, *cpu, before).and_then(|()| {
                self.saved.remove(cpu);
                match &self.ledger {
                    Some(dir) => forget_in_ledger(dir, *cpu),
                    None => Ok(()),
                }
            });
            if let Err(e) = written {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for L2PrefetchSwitch {
    fn drop(&mut self) {
        let saved: Vec<u32> = self.saved.keys().copied().collect();
        if let Err(e) = self.restore(&saved) {
            eprintln!("rocs: the L2 prefetchers could not be switched back on: {e}");
        }
    }
}

fn ledger_file(dir: &Path, cpu: u32) -> PathBuf {
    dir.join(format!("cpu{cpu}"))
}

fn ledger_error(path: &Path, error: impl std::fmt::Display) -> PrefetchError {
    PrefetchError::Ledger {
        path: path.to_path_buf(),
        error: error.to_string(),
    }
}

fn forget_in_ledger(dir: &Path, cpu: u32) -> Result<(), PrefetchError> {
    let path = ledger_file(dir, cpu);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ledger_error(&path, e)),
        _ => Ok(()),
    }
}

fn read_msr(file: &File, msr: u64, cpu: u32) -> Result<u64, PrefetchError> {
    let mut bytes = [0u8; 8];
    file.read_exact_at(&mut bytes, msr)
        .map_err(|error| PrefetchError::Read { msr, cpu, error })?;
    Ok(u64::from_le_bytes(bytes))
}

fn write_msr(file: &File, msr: u64, cpu: u32, value: u64) -> Result<(), PrefetchError> {
    file.write_all_at(&value.to_le_bytes(), msr)
        .map_err(|error| PrefetchError::Write { msr, cpu, error })
}

/// A directory laid out as /dev/cpu: one file per CPU whose bytes at offset 0x1A4 stand for
/// the register (the msr driver reads and writes an MSR at its number's offset).
#[cfg(test)]
pub(crate) fn fake_cpus(register: PrefetchRegister, values: &[u64]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (cpu, value) in values.iter().enumerate() {
        let path = dir.path().join(cpu.to_string());
        std::fs::create_dir(&path).unwrap();
        let file = File::create(path.join("msr")).unwrap();
        file.write_all_at(&value.to_le_bytes(), register.msr)
            .unwrap();
    }
    dir
}

/// The register of `cpu` in a [`fake_cpus`] directory.
#[cfg(test)]
pub(crate) fn register(dir: &Path, msr: u64, cpu: u32) -> u64 {
    let file = File::open(dir.join(cpu.to_string()).join("msr")).unwrap();
    read_msr(&file, msr, cpu).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_holder_switches_every_cpu_off_and_the_last_restores_what_each_held() {
        // CPU 1 has its DCU IP prefetcher (bit 3) off already, set by someone else: it stays.
        let dir = fake_cpus(INTEL, &[0, 0b1000]);
        let reg = |cpu| register(dir.path(), INTEL.msr, cpu);
        let mut switch = L2PrefetchSwitch::open(dir.path(), &[0, 1], INTEL).unwrap();
        switch.hold(&[0, 1]).unwrap();
        assert_eq!((reg(0), reg(1)), (0b11, 0b1011));
        switch.hold(&[0, 1]).unwrap();
        switch.release(&[0, 1]).unwrap();
        assert!(switch.is_off(), "a second holder still profiles");
        assert_eq!(reg(1), 0b1011);
        switch.release(&[0, 1]).unwrap();
        assert!(!switch.is_off());
        assert_eq!((reg(0), reg(1)), (0, 0b1000));
    }

    #[test]
    fn a_holder_of_some_cpus_leaves_the_others_on() {
        let dir = fake_cpus(INTEL, &[0, 0, 0]);
        let reg = |cpu| register(dir.path(), INTEL.msr, cpu);
        let mut switch = L2PrefetchSwitch::open(dir.path(), &[0, 1, 2], INTEL).unwrap();
        switch.hold(&[1]).unwrap();
        switch.hold(&[1, 2]).unwrap();
        assert_eq!((reg(0), reg(1), reg(2)), (0, 0b11, 0b11));
        switch.release(&[1]).unwrap();
        assert_eq!(
            (reg(1), reg(2)),
            (0b11, 0b11),
            "CPU 1 is still held by the second"
        );
        switch.release(&[1, 2]).unwrap();
        assert_eq!((reg(0), reg(1), reg(2)), (0, 0, 0));
        assert!(!switch.is_off());
    }

    #[test]
    fn on_amd_the_two_l2_prefetchers_of_prefetch_control_go_off() {
        // L1Stream (bit 0) off already; MasterEnable (bit 6) as Zen 5 resets it: both stay.
        let dir = fake_cpus(AMD, &[0b100_0001]);
        let mut switch = L2PrefetchSwitch::open(dir.path(), &[0], AMD).unwrap();
        switch.hold(&[0]).unwrap();
        assert_eq!(register(dir.path(), AMD.msr, 0), 0b110_1001);
        switch.release(&[0]).unwrap();
        assert_eq!(register(dir.path(), AMD.msr, 0), 0b100_0001);
    }

    #[test]
    fn a_cpu_that_fails_leaves_none_switched() {
        let dir = fake_cpus(INTEL, &[0b0100, 0]);
        let mut switch = L2PrefetchSwitch::open(dir.path(), &[0, 1], INTEL).unwrap();
        // CPU 1's register can no longer be read (its file emptied after the open).
        File::create(dir.path().join("1/msr")).unwrap();
        let err = switch.hold(&[0, 1]).unwrap_err().to_string();
        assert!(err.contains("reading MSR 0x1a4 of CPU 1"), "{err}");
        assert!(!switch.is_off());
        assert_eq!(register(dir.path(), INTEL.msr, 0), 0b0100, "CPU 0 back on");
    }

    #[test]
    fn a_switch_killed_while_held_is_undone_by_the_next_from_its_ledger() {
        let dir = fake_cpus(INTEL, &[0b0100, 0]);
        let ledger = dir.path().join("ledger");
        let mut first = L2PrefetchSwitch::open(dir.path(), &[0, 1], INTEL).unwrap();
        assert!(first.recover(&ledger).unwrap().is_empty());
        first.hold(&[0, 1]).unwrap();
        assert_eq!(register(dir.path(), INTEL.msr, 0), 0b0111);
        std::mem::forget(first); // killed: no release, no drop
        let mut next = L2PrefetchSwitch::open(dir.path(), &[0, 1], INTEL).unwrap();
        assert_eq!(next.recover(&ledger).unwrap(), vec![0, 1]);
        assert_eq!(register(dir.path(), INTEL.msr, 0), 0b0100);
        assert_eq!(register(dir.path(), INTEL.msr, 1), 0);
        // A switch that releases leaves no ledger behind.
        next.hold(&[0, 1]).unwrap();
        next.release(&[0, 1]).unwrap();
        assert_eq!(std::fs::read_dir(&ledger).unwrap().count(), 0);
    }

    #[test]
    fn a_switch_dropped_while_held_gives_the_prefetchers_back() {
        let dir = fake_cpus(INTEL, &[0b0100]);
        let mut switch = L2PrefetchSwitch::open(dir.path(), &[0], INTEL).unwrap();
        switch.hold(&[0]).unwrap();
        assert_eq!(register(dir.path(), INTEL.msr, 0), 0b0111);
        drop(switch);
        assert_eq!(register(dir.path(), INTEL.msr, 0), 0b0100);
    }

    #[test]
    fn a_cpu_without_the_msr_driver_is_refused_at_open_saying_what_to_do() {
        let dir = fake_cpus(INTEL, &[0]);
        let err = L2PrefetchSwitch::open(dir.path(), &[0, 1], INTEL)
            .err()
            .expect("CPU 1 has no msr file");
        let text = err.to_string();
        assert!(
            text.contains("1/msr") && text.contains("modprobe msr"),
            "{text}"
        );
    }

    #[test]
    fn only_cores_with_a_documented_register_are_switched() {
        let cpu = |vendor, family, model| CpuInfo {
            vendor,
            family,
            model,
            implementer: 0,
            model_name: "test".into(),
            hypervisor: false,
            flags: Vec::new(),
        };
        let intel = |model| register_of(&cpu(Vendor::Intel, 6, model), false).ok();
        assert_eq!(intel(0x8f), Some(INTEL), "Sapphire Rapids");
        assert_eq!(intel(0x55), Some(INTEL), "Skylake-SP");
        // Penryn (0x17): before Nehalem the switch was another register (0x1A0).
        assert_eq!(intel(0x17), None);
        // Goldmont (0x5c): an Atom, whose bit 1 is not the adjacent line prefetcher.
        assert_eq!(intel(0x5c), None);
        let zen4 = cpu(Vendor::Amd, 25, 0x11);
        assert_eq!(register_of(&zen4, true).ok(), Some(AMD));
        let without = register_of(&zen4, false).unwrap_err().to_string();
        assert!(
            without.contains("prefetchers_off_while_profiling = false"),
            "{without}"
        );
        assert!(register_of(&cpu(Vendor::Arm, 8, 0xd40), true).is_err());
    }
}
