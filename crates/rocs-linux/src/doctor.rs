//! What this machine can do for rocs, checked for real: `rocsctl doctor`.

use std::path::Path;

use serde::Serialize;

use crate::cpu::{CpuInfo, KernelVersion};
use crate::events::{explain_open_error, open_event, Target};
use crate::geometry::{detect_geometry, page_size};
use crate::perf_abi::*;
use crate::plan::{
    missing_core_pmu, select_plan, software_page_fault_plan, EventChoice, EventSpec, SourceRule,
};
use crate::pmu::PmuInventory;

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Yes,
    No,
    Warn,
    Info,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Stable machine-readable name.
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do about a `no` or `warn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    pub checks: Vec<Check>,
    /// True when precise memory sampling works here (a hardware plan's events opened).
    pub precise_sampling: bool,
}

impl DoctorReport {
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: Option<String>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix,
    }
}

/// Effective capabilities of this process (CapEff of /proc/self/status).
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;

/// Try opening one spec on this process, counting only (no ring), to see if the PMU takes it.
fn try_open(spec: &EventSpec, period: u64) -> Result<(), String> {
    open_event(
        spec,
        Target {
            pid: 0,
            cpu: None,
            inherit: false,
        },
        period,
        0,
        None,
    )
    .map(drop)
    .map_err(|e| explain_here(&e, &spec.name))
}

/// Why opening `what` failed, for doctor's own lines: what the sampler and the counters
/// say, without their advice to run `rocsctl doctor` (this is doctor, and its other lines
/// say whether a PMU exists and what to do).
fn explain_here(err: &std::io::Error, what: &str) -> String {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => {
            format!("the PMU does not support {what} ({err})")
        }
        Some(libc::EINVAL) => format!(
            "the kernel refused {what} as configured ({err}): the PMU does not accept this event \
             or a sampling option"
        ),
        _ => explain_open_error(err, what),
    }
}

fn generic(name: &str, type_: u32, config: u64) -> EventSpec {
    EventSpec {
        name: name.into(),
        pmu_type: type_,
        config,
        config1: 0,
        config2: 0,
        precise_ip: 0,
        sample_type: 0,
        samples: false,
        exclude_kernel: true,
        source: SourceRule::None,
    }
}

/// Run every check against the live system rooted at `/` (`sys_root` is normally "/sys").
pub fn run(sys_root: &Path) -> DoctorReport {
    let cpu = CpuInfo::detect().unwrap_or_else(|_| CpuInfo::parse(""));
    let kernel = KernelVersion::running().unwrap_or(KernelVersion::new(0, 0, 0));
    let pmus = PmuInventory::read(sys_root);
    let mut checks = vec![
        cpu_check(&cpu),
        check("kernel", Status::Info, kernel.to_string(), None),
        check(
            "pmus",
            Status::Info,
            format!("/sys/bus/event_source/devices: {}", pmus.names().join(", ")),
            None,
        ),
        hardware_pmu_check(&cpu, &pmus),
    ];
    let precise = precise_checks(&cpu, &pmus, kernel, &mut checks);
    checks.push(software_sampling_check());
    checks.push(counting_group_check());
    let caps = effective_caps();
    checks.push(paranoid_check(caps));
    checks.push(capabilities_check(caps));
    checks.push(thp_check());
    checks.push(shim_check());
    checks.push(prefetch_check(&cpu));
    checks.push(geometry_check(sys_root, &cpu));
    DoctorReport {
        checks,
        precise_sampling: precise,
    }
}

fn cpu_check(cpu: &CpuInfo) -> Check {
    check(
        "cpu",
        Status::Info,
        format!(
            "{} ({:?}, family {}, model {:#x}{}){}",
            cpu.model_name,
            cpu.vendor,
            cpu.family,
            cpu.model,
            cpu.microarchitecture()
                .map(|m| format!(", {m}"))
                .unwrap_or_default(),
            if cpu.hypervisor {
                ", running under a hypervisor"
            } else {
                ""
            }
        ),
        None,
    )
}

fn hardware_pmu_check(cpu: &CpuInfo, pmus: &PmuInventory) -> Check {
    match pmus.core_pmu() {
        Some(core) => check(
            "hardware_pmu",
            Status::Yes,
            format!("core PMU `{}` (type {})", core.name, core.type_),
            None,
        ),
        None => {
            let why = missing_core_pmu(cpu);
            check("hardware_pmu", Status::No, why.why, Some(why.fix))
        }
    }
}

/// The precise sampling plan this machine would use and whether each of its events opens;
/// returns whether precise memory sampling works (a sampling event of the plan opened).
fn precise_checks(
    cpu: &CpuInfo,
    pmus: &PmuInventory,
    kernel: KernelVersion,
    checks: &mut Vec<Check>,
) -> bool {
    let plan = match select_plan(cpu, pmus, kernel, EventChoice::Auto) {
        Ok(plan) => plan,
        Err(e) => {
            checks.push(check("precise_plan", Status::No, e.why, Some(e.fix)));
            return false;
        }
    };
    checks.push(check("precise_plan", Status::Yes, plan.label.clone(), None));
    let mut precise = false;
    for spec in plan.events() {
        checks.push(match try_open(spec, plan.default_period) {
            Ok(()) => {
                precise |= spec.samples;
                check(
                    "precise_event",
                    Status::Yes,
                    format!("{} opens", spec.name),
                    None,
                )
            }
            Err(e) => check(
                "precise_event",
                Status::No,
                format!("{} refused: {e}", spec.name),
                Some("check the hardware_pmu and permission lines; on a VM enable the vPMU".into()),
            ),
        });
    }
    if let Some(why) = &plan.live_unsupported {
        checks.push(check(
            "precise_live",
            Status::Warn,
            why.clone(),
            Some("import perf.data files instead: `rocsctl profile --perf-data`".into()),
        ));
    }
    precise
}

fn software_sampling_check() -> Check {
    let sw = software_page_fault_plan();
    let sw_spec = sw.events().next().expect("software plan has an event");
    match try_open(sw_spec, 1) {
        Ok(()) => check(
            "software_sampling",
            Status::Yes,
            "page-fault sampling with data addresses opens (`--event page-faults`; not cache misses)",
            None,
        ),
        Err(e) => check(
            "software_sampling",
            Status::No,
            e,
            Some("perf_event must be enabled in the kernel (CONFIG_PERF_EVENTS)".into()),
        ),
    }
}

/// Whether the counters of the controller's windows open.
fn counting_group_check() -> Check {
    let counting: Vec<_> = [
        ("instructions", HW_INSTRUCTIONS),
        ("cycles", HW_CPU_CYCLES),
        ("LLC references", HW_CACHE_REFERENCES),
        ("LLC misses", HW_CACHE_MISSES),
    ]
    .iter()
    .map(|(n, c)| (n, try_open(&generic(n, TYPE_HARDWARE, *c), 0)))
    .collect();
    let refused: Vec<_> = counting.iter().filter(|(_, r)| r.is_err()).collect();
    if refused.is_empty() {
        return check(
            "counting_group",
            Status::Yes,
            "instructions, cycles, LLC references and misses open",
            None,
        );
    }
    check(
        "counting_group",
        Status::No,
        format!(
            "refused: {}: {}",
            refused
                .iter()
                .map(|(n, _)| **n)
                .collect::<Vec<_>>()
                .join(", "),
            refused[0].1.as_ref().unwrap_err()
        ),
        Some(
            "the controller's IPC/MPKI windows need these counters: a hardware PMU (or vPMU) is \
             required"
                .into(),
        ),
    )
}

fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// CAP_PERFMON or CAP_SYS_ADMIN: enough to bypass perf_event_paranoid.
fn perf_privileged(caps: u64) -> bool {
    has_cap(caps, CAP_PERFMON) || has_cap(caps, CAP_SYS_ADMIN)
}

fn paranoid_check(caps: u64) -> Check {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let privileged = perf_privileged(caps);
    match paranoid {
        Some(p) if p <= 1 || privileged => check(
            "perf_event_paranoid",
            Status::Yes,
            format!(
                "{p}{}",
                if privileged && p > 1 {
                    " (bypassed: this process has CAP_PERFMON/CAP_SYS_ADMIN)"
                } else {
                    ""
                }
            ),
            None,
        ),
        Some(p) => check(
            "perf_event_paranoid",
            Status::No,
            format!("{p}: unprivileged processes may only profile themselves in user mode"),
            Some(
                "run rocsd as root or with CAP_PERFMON, or `sysctl kernel.perf_event_paranoid=1`"
                    .into(),
            ),
        ),
        None => check(
            "perf_event_paranoid",
            Status::No,
            "/proc/sys/kernel/perf_event_paranoid is missing",
            Some("the kernel lacks perf_event support (CONFIG_PERF_EVENTS)".into()),
        ),
    }
}

fn capabilities_check(caps: u64) -> Check {
    let names: Vec<&str> = [
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        (CAP_SYS_PTRACE, "CAP_SYS_PTRACE"),
    ]
    .iter()
    .filter(|(c, _)| has_cap(caps, *c))
    .map(|(_, n)| *n)
    .collect();
    if perf_privileged(caps) && has_cap(caps, CAP_SYS_PTRACE) {
        return check("capabilities", Status::Yes, names.join(", "), None);
    }
    let effective = if names.is_empty() {
        "none of CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_PTRACE".to_string()
    } else {
        names.join(", ")
    };
    check(
        "capabilities",
        Status::No,
        format!("effective: {effective}"),
        Some(
            "sampling other users' processes needs CAP_PERFMON (or CAP_SYS_ADMIN) and \
             CAP_SYS_PTRACE: run as root or grant them (systemd: AmbientCapabilities=)"
                .into(),
        ),
    )
}

fn thp_check() -> Check {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok();
    // The file lists every mode with the chosen one in brackets: "always [madvise] never".
    let mode = thp.as_deref().and_then(|t| {
        let s = t.find('[')?;
        let e = t[s..].find(']')?;
        Some(t[s + 1..s + e].to_string())
    });
    match mode.as_deref() {
        Some("always") => check(
            "thp",
            Status::Warn,
            "transparent huge pages: always; huge pages blur a per-4K-page profile and the shim \
             moves 4 KiB pages",
            Some(
                "`echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` (or exclude the \
                 targets from THP)"
                    .into(),
            ),
        ),
        Some(m) => check(
            "thp",
            Status::Yes,
            format!("transparent huge pages: {m}"),
            None,
        ),
        None => check(
            "thp",
            Status::Info,
            "transparent huge pages: not available",
            None,
        ),
    }
}

fn shim_check() -> Check {
    let shim = crate::shim::probe();
    if shim.usable {
        check(
            "shim",
            Status::Yes,
            format!(
                "{} loaded, ABI version {}",
                crate::shim::DEVICE,
                shim.abi_version.map_or("?".into(), |v| v.to_string())
            ),
            None,
        )
    } else if !shim.loaded {
        check(
            "shim",
            Status::No,
            "not loaded (/dev/rocs_shim is absent): pages can be profiled but not moved",
            Some(shim.what_to_do),
        )
    } else {
        check(
            "shim",
            Status::No,
            format!(
                "loaded but not usable{}",
                shim.abi_version
                    .map_or(String::new(), |v| format!(" (ABI version {v})"))
            ),
            Some(shim.what_to_do),
        )
    }
}

/// Whether rocsd could switch the L2 prefetchers off while it profiles (rocsd.toml's
/// `prefetchers_off_while_profiling`); CPU 0 stands for the others.
fn prefetch_check(cpu: &CpuInfo) -> Check {
    let name = "prefetchers";
    let opened = crate::prefetch::register_here(cpu).and_then(|register| {
        crate::prefetch::L2PrefetchSwitch::open(Path::new("/dev/cpu"), &[0], register)
            .map(|_| register)
    });
    match opened {
        Ok(register) => check(
            name,
            Status::Yes,
            format!(
                "the L2 prefetchers can be switched off while a target profiles (MSR {:#x}): \
                 prefetchers_off_while_profiling = true in rocsd.toml does it",
                register.msr
            ),
            None,
        ),
        Err(e) => check(
            name,
            Status::Info,
            format!("rocsd cannot switch the L2 prefetchers off while profiling: {e}"),
            None,
        ),
    }
}

fn geometry_check(sys_root: &Path, cpu: &CpuInfo) -> Check {
    match detect_geometry(sys_root, cpu, page_size(), None) {
        Ok(g) => check(
            "geometry",
            Status::Info,
            format!(
                "LLC {} KiB, {}-way, {} B lines, {} slice(s) x {} sets: {} colours of {} B pages",
                g.llc.size() >> 10,
                g.llc.ways,
                g.llc.line_size,
                g.llc.slices,
                g.llc.sets_per_slice,
                g.colours,
                g.llc.page_size
            ),
            None,
        ),
        Err(e) => check(
            "geometry",
            Status::No,
            e.to_string(),
            Some("set [geometry] in rocsd.toml".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_does_not_tell_the_user_to_run_doctor() {
        for errno in [
            libc::ENOENT,
            libc::EOPNOTSUPP,
            libc::EINVAL,
            libc::EACCES,
            libc::EBUSY,
        ] {
            let e = std::io::Error::from_raw_os_error(errno);
            let why = explain_here(&e, "instructions");
            assert!(!why.contains("rocsctl doctor"), "{errno}: {why}");
        }
        // This machine's report, whatever it has (a VM without a PMU refuses every
        // counting event: the line this was about).
        let report = run(Path::new("/sys"));
        for c in &report.checks {
            let text = format!("{} {}", c.detail, c.fix.as_deref().unwrap_or(""));
            assert!(!text.contains("rocsctl doctor"), "{}: {text}", c.name);
        }
    }
}
