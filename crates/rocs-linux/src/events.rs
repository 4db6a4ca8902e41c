//! Opening the events of a plan with perf-event2, and what a refusal means.

use std::io;

use perf_event::events::Raw;
use perf_event::{Builder, Counter, SampleFlag, SampleSkid};

use crate::plan::EventSpec;

/// Where an event observes: one thread (or process with inherit) on one CPU or all.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub pid: i32,
    /// None = any CPU.
    pub cpu: Option<usize>,
    /// Follow threads and processes the observed task creates later.
    pub inherit: bool,
}

/// Open one event of a plan. Sampling events get `period` and the spec's sample type
/// (plus `extra_sample_type`); they start disabled.
pub fn open_event(
    spec: &EventSpec,
    target: Target,
    period: u64,
    extra_sample_type: u64,
    group: Option<&mut Counter>,
) -> io::Result<Counter> {
    let mut b = Builder::new(
        Raw::new(spec.config)
            .config1(spec.config1)
            .config2(spec.config2),
    );
    b.attrs_mut().type_ = spec.pmu_type;
    b.observe_pid(target.pid);
    match target.cpu {
        Some(cpu) => b.one_cpu(cpu),
        None => b.any_cpu(),
    };
    b.inherit(target.inherit);
    b.exclude_kernel(spec.exclude_kernel);
    b.exclude_hv(true);
    b.precise_ip(match spec.precise_ip {
        0 => SampleSkid::Arbitrary,
        1 => SampleSkid::Constant,
        2 => SampleSkid::RequestZero,
        _ => SampleSkid::RequireZero,
    });
    if spec.samples {
        b.sample_period(period.max(1));
        b.sample(SampleFlag::from_bits_retain(
            spec.sample_type | extra_sample_type,
        ));
        // Exit and fork records tell when the target and its threads end; every record
        // carries the sample id fields so that it can be attributed.
        b.task(true);
        b.sample_id_all(true);
    }
    match group {
        Some(leader) => b.build_with_group(leader),
        None => b.build(),
    }
}

/// What a perf_event_open errno means for the user, with what to do.
pub fn explain_open_error(err: &io::Error, what: &str) -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => format!(
            "the PMU does not support {what} ({err}); on a VM without a vPMU no hardware event exists: run `rocsctl doctor`"
        ),
        Some(libc::EINVAL) => format!(
            "the kernel refused {what} as configured ({err}): the PMU does not accept this event or a sampling option; run `rocsctl doctor`"
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "no permission to open {what} ({err}; perf_event_paranoid={paranoid}): run as root, grant CAP_PERFMON (and CAP_SYS_PTRACE for other users' processes), or lower /proc/sys/kernel/perf_event_paranoid"
        ),
        Some(libc::ESRCH) => format!("the target process does not exist ({err})"),
        Some(libc::EMFILE) | Some(libc::ENFILE) => format!(
            "out of file descriptors opening {what} ({err}): raise `ulimit -n`"
        ),
        Some(libc::EBUSY) => format!(
            "the PMU is busy ({err}): another tool holds it exclusively (NMI watchdog, another perf session)"
        ),
        _ => format!("cannot open {what}: {err}"),
    }
}
