//! Which events sample a target's memory accesses on this machine: the event plan.
//!
//! The choice is a pure function of the CPU (from /proc/cpuinfo), the PMUs the kernel
//! exposes (a sysfs tree) and the kernel version, so it is tested with fixtures of
//! machines we do not have.

use rocs_core::DataSource;
use serde::Serialize;
use thiserror::Error;

use crate::cpu::{CpuInfo, KernelVersion, Vendor};
use crate::datasrc::IbsDataSrcEncoding;
use crate::perf_abi::*;
use crate::pmu::{PmuDevice, PmuInventory};

/// The family of an event plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanKind {
    /// Intel PEBS on MEM_LOAD_RETIRED.L3_MISS and .L3_HIT: the event says hit or miss.
    IntelLoadRetired,
    /// Intel PEBS load-latency (`mem-loads`, ldlat), classified by DATA_SRC; on Sapphire
    /// Rapids and Alder Lake with the `mem-loads-aux` group leader.
    IntelLoadLatency,
    /// AMD IBS op sampling, data source decoded by the kernel (Linux >= 6.1).
    AmdIbsOp,
    /// AMD IBS op sampling on kernels before 6.1: the raw IBS registers, decoded here.
    AmdIbsOpRaw,
    /// Arm Statistical Profiling Extension.
    ArmSpe,
    /// Software page-fault events with their data address. Works on any Linux, measures
    /// first touches of pages, NOT cache misses.
    SoftwarePageFaults,
}

/// How a sample of an event says where its data came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceRule {
    /// The event itself counts only hits (or only misses).
    Fixed(DataSource),
    /// Decode PERF_SAMPLE_DATA_SRC.
    DataSrc,
    /// Decode the raw IBS op registers (PERF_SAMPLE_RAW), DataSrc in this encoding.
    IbsRaw(IbsDataSrcEncoding),
    /// No data source (software events).
    None,
}

/// One perf event to open for each target thread (or CPU).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventSpec {
    pub name: String,
    pub pmu_type: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// 0 = arbitrary skid, 2 = precise (PEBS), 3 = exact.
    pub precise_ip: u8,
    pub sample_type: u64,
    /// False for a group leader that only has to exist (mem-loads-aux).
    pub samples: bool,
    /// Some PMUs (IBS on older kernels) refuse exclude_kernel.
    pub exclude_kernel: bool,
    pub source: SourceRule,
}

/// The events that sample memory accesses on a machine, and how to read their samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventPlan {
    pub kind: PlanKind,
    /// What the plan is, in words (shown to users).
    pub label: String,
    /// True when samples say LLC hit or miss; false for the software plan.
    pub measures_llc: bool,
    /// Event groups: the first event of each group is its leader.
    pub groups: Vec<Vec<EventSpec>>,
    pub default_period: u64,
    pub min_period: u64,
    /// Ask for PHYS_ADDR too where the kernel permits it (root / CAP_SYS_ADMIN).
    pub phys_addr: bool,
    /// Why live recording cannot use this plan, when it cannot. None for every plan
    /// `select_plan` gives: a precise plan that cannot be sampled live (Arm SPE) is
    /// refused there, with what to do.
    pub live_unsupported: Option<String>,
}

impl EventPlan {
    /// Every event of every group, leaders first.
    pub fn events(&self) -> impl Iterator<Item = &EventSpec> {
        self.groups.iter().flatten()
    }

    /// The nearest period at or above `period` that the plan's PMU accepts: at least
    /// `min_period`, and for IBS a multiple of 16 (IbsOpMaxCnt counts in units of 16
    /// ops, and the kernel's perf_ibs_init refuses periods with any of the low 4 bits
    /// set).
    pub fn usable_period(&self, period: u64) -> u64 {
        let period = period.max(self.min_period).max(1);
        match self.kind {
            PlanKind::AmdIbsOp | PlanKind::AmdIbsOpRaw => period.div_ceil(16).saturating_mul(16),
            _ => period,
        }
    }
}

/// Which plan the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventChoice {
    /// The precise hardware plan of this CPU.
    Auto,
    /// The software page-fault plan.
    PageFaults,
}

/// Why no precise memory sampling plan exists here, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{why}; {fix}")]
pub struct NoPlan {
    pub why: String,
    pub fix: String,
}

/// Pick the event plan for this CPU, PMU inventory and kernel.
pub fn select_plan(
    cpu: &CpuInfo,
    pmus: &PmuInventory,
    kernel: KernelVersion,
    choice: EventChoice,
) -> Result<EventPlan, NoPlan> {
    match choice {
        EventChoice::PageFaults => Ok(software_page_fault_plan()),
        EventChoice::Auto => hardware_plan(cpu, pmus, kernel),
    }
}

/// The plan for the machine this runs on: /proc/cpuinfo, /sys and the running kernel.
pub fn machine_plan(choice: EventChoice) -> Result<EventPlan, NoPlan> {
    let cpu = CpuInfo::detect().unwrap_or_else(|_| CpuInfo::parse(""));
    let pmus = PmuInventory::read(std::path::Path::new("/sys"));
    let kernel = KernelVersion::running().unwrap_or(KernelVersion::new(0, 0, 0));
    select_plan(&cpu, &pmus, kernel, choice)
}

/// The plan that works everywhere perf_event does: page faults with their address.
pub fn software_page_fault_plan() -> EventPlan {
    EventPlan {
        kind: PlanKind::SoftwarePageFaults,
        label: "page faults (software event; shows which pages are touched, does NOT measure cache misses)".into(),
        measures_llc: false,
        groups: vec![vec![EventSpec {
            name: "page-faults".into(),
            pmu_type: TYPE_SOFTWARE,
            config: SW_PAGE_FAULTS,
            config1: 0,
            config2: 0,
            precise_ip: 0,
            sample_type: SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR,
            samples: true,
            // Faults the kernel takes on user pages (copy_to_user into a fresh buffer)
            // are touches too; the opener falls back to user-only where not permitted.
            exclude_kernel: false,
            source: SourceRule::None,
        }]],
        default_period: 1,
        min_period: 1,
        phys_addr: false,
        live_unsupported: None,
    }
}

/// Why the core PMU is missing, in words, with what to do.
pub fn missing_core_pmu(cpu: &CpuInfo) -> NoPlan {
    if cpu.hypervisor {
        NoPlan {
            why: "no hardware PMU: this is a virtual machine (cpuinfo flag `hypervisor`) whose hypervisor exposes no virtual PMU (no /sys/bus/event_source/devices/cpu*)".into(),
            fix: "enable the guest's vPMU (KVM/QEMU: -cpu host,pmu=on; VMware: 'virtualize CPU performance counters'; cloud: a bare-metal or PMU-enabled instance), run on bare metal, or use --event page-faults to exercise the perf plumbing without cache data".into(),
        }
    } else {
        NoPlan {
            why: "no hardware PMU: the kernel exposes no core PMU under /sys/bus/event_source/devices".into(),
            fix: "use a kernel with CONFIG_PERF_EVENTS and the PMU driver for this CPU, or use --event page-faults".into(),
        }
    }
}

fn hardware_plan(
    cpu: &CpuInfo,
    pmus: &PmuInventory,
    kernel: KernelVersion,
) -> Result<EventPlan, NoPlan> {
    match cpu.vendor {
        Vendor::Intel => {
            let core = pmus.core_pmu().ok_or_else(|| missing_core_pmu(cpu))?;
            intel_plan(cpu, core)
        }
        Vendor::Amd => match pmus.get("ibs_op") {
            Some(ibs) => Ok(amd_ibs_plan(cpu, ibs, kernel)),
            None if pmus.core_pmu().is_none() => Err(missing_core_pmu(cpu)),
            None => Err(NoPlan {
                why: "AMD CPU without the ibs_op PMU (Instruction-Based Sampling is not exposed; hypervisors rarely virtualise IBS)".into(),
                fix: "run on bare metal with a kernel built with CONFIG_PERF_EVENTS_AMD_IBS (check dmesg for 'perf: AMD IBS detected'), or use --event page-faults".into(),
            }),
        },
        Vendor::Arm => match pmus.arm_spe() {
            Some(spe) => Err(spe_not_live(spe)),
            None if pmus.core_pmu().is_none() => Err(missing_core_pmu(cpu)),
            None => Err(NoPlan {
                why: "Arm CPU without an arm_spe PMU (the Statistical Profiling Extension is absent or its driver is not loaded)".into(),
                fix: "load the arm_spe_pmu module (CONFIG_ARM_SPE_PMU) on a CPU with SPE (Neoverse N1/V1 and later) and firmware that describes its interrupt, or use --event page-faults".into(),
            }),
        },
        Vendor::Other => Err(NoPlan {
            why: format!("unknown CPU vendor ({}): no precise memory sampling plan", cpu.model_name),
            fix: "use --event page-faults, or record with perf on a supported machine and import it with `rocsctl profile --perf-data`".into(),
        }),
    }
}

/// Intel models with PEBS on MEM_LOAD_(UOPS_)RETIRED.L3_HIT/L3_MISS (0xD1/0x04, 0x20):
/// Haswell through Ice Lake and Tiger Lake.
fn intel_has_load_retired(model: u32) -> bool {
    matches!(
        model,
        0x3c | 0x3f
            | 0x45
            | 0x46
            | 0x3d
            | 0x47
            | 0x4f
            | 0x56
            | 0x4e
            | 0x5e
            | 0x8e
            | 0x9e
            | 0xa5
            | 0xa6
            | 0x55
            | 0x6a
            | 0x6c
            | 0x7d
            | 0x7e
            | 0x8c
            | 0x8d
    )
}

const INTEL_SAMPLE: u64 =
    SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_WEIGHT | SAMPLE_DATA_SRC;

fn intel_plan(cpu: &CpuInfo, core: &PmuDevice) -> Result<EventPlan, NoPlan> {
    let hybrid = core.name == "cpu_core";
    if cpu.family == 6 && intel_has_load_retired(cpu.model) && !hybrid {
        let ev = |name: &str, umask: u64, src: DataSource| EventSpec {
            name: name.into(),
            pmu_type: core.type_,
            config: 0xd1 | (umask << 8),
            config1: 0,
            config2: 0,
            precise_ip: 2,
            sample_type: INTEL_SAMPLE,
            samples: true,
            exclude_kernel: true,
            source: SourceRule::Fixed(src),
        };
        return Ok(EventPlan {
            kind: PlanKind::IntelLoadRetired,
            label: "Intel PEBS MEM_LOAD_RETIRED.L3_MISS and .L3_HIT (precise loads that reached the LLC)".into(),
            measures_llc: true,
            groups: vec![
                vec![ev("MEM_LOAD_RETIRED.L3_MISS", 0x20, DataSource::LlcMiss)],
                vec![ev("MEM_LOAD_RETIRED.L3_HIT", 0x04, DataSource::LlcHit)],
            ],
            default_period: 2003,
            min_period: 1000,
            phys_addr: true,
            live_unsupported: None,
        });
    }
    let loads = core.events.get("mem-loads").ok_or_else(|| NoPlan {
        why: format!(
            "Intel {} (family {}, model {:#x}): PMU `{}` has neither a known MEM_LOAD_RETIRED PEBS event nor the mem-loads event",
            cpu.model_name, cpu.family, cpu.model, core.name
        ),
        fix: "use a newer kernel that knows this CPU, or use --event page-faults".into(),
    })?;
    // perf mem's default latency threshold: loads slower than an L1 hit.
    let enc = with_term(loads, "ldlat", 30);
    let (config, config1, config2) = encode(core, &enc);
    let mut group = Vec::new();
    if let Some(aux) = core.events.get("mem-loads-aux") {
        let (config, config1, config2) = encode(core, aux);
        group.push(EventSpec {
            name: "mem-loads-aux".into(),
            pmu_type: core.type_,
            config,
            config1,
            config2,
            precise_ip: 0,
            sample_type: 0,
            samples: false,
            exclude_kernel: true,
            source: SourceRule::None,
        });
    }
    group.push(EventSpec {
        name: "mem-loads,ldlat=30".into(),
        pmu_type: core.type_,
        config,
        config1,
        config2,
        precise_ip: 2,
        sample_type: INTEL_SAMPLE,
        samples: true,
        exclude_kernel: true,
        source: SourceRule::DataSrc,
    });
    let aux = if group.len() > 1 {
        " with the mem-loads-aux group leader"
    } else {
        ""
    };
    Ok(EventPlan {
        kind: PlanKind::IntelLoadLatency,
        label: format!(
            "Intel PEBS load latency (mem-loads, ldlat=30{aux}), classified by data source"
        ),
        measures_llc: true,
        groups: vec![group],
        default_period: 2003,
        min_period: 1000,
        phys_addr: true,
        live_unsupported: None,
    })
}

fn amd_ibs_plan(cpu: &CpuInfo, ibs: &PmuDevice, kernel: KernelVersion) -> EventPlan {
    // Count dispatched ops rather than cycles, so the period is in ops.
    let mut config = 0;
    if let Some((0, bit)) = ibs.format_bit("cnt_ctl") {
        config |= 1 << bit;
    }
    let decoded = kernel >= KernelVersion::new(6, 1, 0);
    let (kind, sample_type, source, label) = if decoded {
        (
            PlanKind::AmdIbsOp,
            SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_DATA_SRC,
            SourceRule::DataSrc,
            "AMD IBS op sampling, data source decoded by the kernel",
        )
    } else {
        (
            PlanKind::AmdIbsOpRaw,
            SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_RAW,
            SourceRule::IbsRaw(IbsDataSrcEncoding::for_cpu(cpu.family, cpu.model)),
            "AMD IBS op sampling, raw IBS registers decoded by rocs (kernel < 6.1)",
        )
    };
    EventPlan {
        kind,
        label: label.into(),
        measures_llc: true,
        groups: vec![vec![EventSpec {
            name: "ibs_op".into(),
            pmu_type: ibs.type_,
            config,
            config1: 0,
            config2: 0,
            precise_ip: 0,
            sample_type,
            samples: true,
            // IBS cannot filter by privilege level on most kernels; kernel-address
            // samples are dropped at ingest instead.
            exclude_kernel: false,
            source,
        }]],
        // IBS periods are in ops and must be multiples of 16.
        default_period: 100_000,
        min_period: 0x1000,
        phys_addr: true,
        live_unsupported: None,
    }
}

/// Arm SPE writes its samples into an AUX buffer that rocs decodes (crate::spe) but does
/// not yet map and drain live: refuse here, at the start, with the way to profile anyway.
fn spe_not_live(spe: &PmuDevice) -> NoPlan {
    NoPlan {
        why: format!(
            "Arm SPE ({}) is present, but rocs does not sample through its AUX trace live yet",
            spe.name
        ),
        fix: format!(
            "profile with perf on this machine and import the samples: `perf record -e {}/ts_enable=1,pa_enable=1,load_filter=1/ -d -p PID -- sleep 10`, `perf inject --itrace=M -i perf.data -o mem.data` (M: memory samples), then `rocsctl profile --perf-data mem.data`; or use --event page-faults (rocsd: allow_observe_only = true)",
            spe.name
        ),
    }
}

/// Replace or add `key=value` in a sysfs event encoding.
fn with_term(encoding: &str, key: &str, value: u64) -> String {
    let mut terms: Vec<String> = encoding
        .split(',')
        .filter(|t| !t.is_empty() && t.split('=').next() != Some(key))
        .map(str::to_string)
        .collect();
    terms.push(format!("{key}={value}"));
    terms.join(",")
}

/// Encode "event=0xcd,umask=0x1,ldlat=3" into (config, config1, config2) using the PMU's
/// format fields; x86's usual layout where the PMU lists none (older fixtures).
pub fn encode(pmu: &PmuDevice, encoding: &str) -> (u64, u64, u64) {
    let mut words = [0u64; 3];
    for term in encoding.split(',').filter(|t| !t.is_empty()) {
        let (key, value) = term.split_once('=').unwrap_or((term, "1"));
        let value = parse_u64(value).unwrap_or(0);
        let fallback = match key {
            "event" => "config:0-7,32-35",
            "umask" => "config:8-15",
            "ldlat" => "config1:0-15",
            "cmask" => "config:24-31",
            _ => "",
        };
        let spec = pmu.formats.get(key).map(String::as_str).unwrap_or(fallback);
        place(&mut words, spec, value);
    }
    (words[0], words[1], words[2])
}

fn parse_u64(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Scatter `value`'s low bits over the ranges of a format spec, lowest range first.
fn place(words: &mut [u64; 3], spec: &str, mut value: u64) {
    let Some((word, ranges)) = spec.split_once(':') else {
        return;
    };
    let w = match word {
        "config" => 0,
        "config1" => 1,
        "config2" => 2,
        _ => return,
    };
    for range in ranges.split(',') {
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u32>(), b.parse::<u32>()),
            None => (range.parse(), range.parse()),
        };
        let (Ok(lo), Ok(hi)) = (lo, hi) else { return };
        if hi < lo || hi > 63 {
            return;
        }
        let width = hi - lo + 1;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1 << width) - 1
        };
        words[w] |= (value & mask) << lo;
        value = value.checked_shr(width).unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_with_and_without_formats() {
        let mut pmu = PmuDevice::default();
        assert_eq!(
            encode(&pmu, "event=0xcd,umask=0x1,ldlat=30"),
            (0x1cd, 30, 0)
        );
        pmu.formats
            .insert("event".into(), "config:0-7,32-35".into());
        assert_eq!(encode(&pmu, "event=0x1d1"), (0x1_0000_00d1, 0, 0));
        assert_eq!(
            with_term("event=0xcd,ldlat=3", "ldlat", 30),
            "event=0xcd,ldlat=30"
        );
    }

    #[test]
    fn ibs_periods_are_multiples_of_16() {
        let mut ibs = PmuDevice {
            name: "ibs_op".into(),
            type_: 11,
            ..Default::default()
        };
        ibs.formats.insert("cnt_ctl".into(), "config:19".into());
        let cpu = CpuInfo::parse("vendor_id : AuthenticAMD\ncpu family : 25\nmodel : 1\n");
        let plan = amd_ibs_plan(&cpu, &ibs, KernelVersion::new(6, 1, 0));
        assert_eq!(plan.default_period % 16, 0);
        assert_eq!(plan.usable_period(100_001), 100_016);
        assert_eq!(plan.usable_period(100_016), 100_016);
        assert_eq!(plan.usable_period(1), plan.min_period);
        let sw = software_page_fault_plan();
        assert_eq!(sw.usable_period(7), 7);
        assert_eq!(sw.usable_period(0), 1);
    }
}
