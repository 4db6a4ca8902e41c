//! The sample period reaches the kernel: raised and lowered on a live target, read back
//! from how many page faults the kernel then samples, and kept when the kernel refuses.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rocs_core::{Sampler, SamplingPlan};
use rocs_linux::plan::software_page_fault_plan;
use rocs_linux::{LinuxSampler, SamplerError};

/// A perl process that, on each line it reads, writes a fresh 16 MiB string (thousands of
/// first-touch page faults, all in this one thread) and answers "done".
struct Toucher {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Toucher {
    fn start() -> Toucher {
        let mut child = Command::new("perl")
            .arg("-e")
            .arg(r#"$| = 1; my @keep; print "ready\n"; while (<STDIN>) { push @keep, "x" x (16 << 20); print "done\n"; }"#)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("perl runs");
        let to = child.stdin.take().unwrap();
        let mut from = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Toucher { child, to, from }
    }

    /// One round of touching; returns when it is over.
    fn touch(&mut self) {
        writeln!(self.to, "go").unwrap();
        let mut line = String::new();
        self.from.read_line(&mut line).unwrap();
        assert_eq!(line, "done\n");
    }
}

/// Samples of `pid` waiting in the rings now.
fn drain_count(sampler: &mut LinuxSampler, pid: u32) -> u64 {
    let mut n = 0;
    sampler.drain_with(pid, |_| n += 1).unwrap();
    n
}

#[test]
fn raising_and_lowering_the_period_reach_the_kernel() {
    let mut t = Toucher::start();
    let pid = t.child.id();
    let mut sampler = LinuxSampler::new(software_page_fault_plan());
    // No CPU budget: only this test moves the period.
    let plan = SamplingPlan {
        period: 1,
        cpu_budget: 0.0,
    };
    sampler.start(pid, &plan).unwrap();
    drain_count(&mut sampler, pid);

    t.touch();
    let every_fault = drain_count(&mut sampler, pid);
    assert!(
        every_fault >= 4096,
        "16 MiB are >= 4096 faults: {every_fault}"
    );

    // Raised: one sample per 64 faults.
    assert_eq!(sampler.set_period(pid, 64).unwrap(), 64);
    t.touch();
    let raised = drain_count(&mut sampler, pid);
    assert!(
        raised * 32 <= every_fault && raised * 128 >= every_fault,
        "period 64 took {raised} samples where period 1 took {every_fault}"
    );

    // Lowered again: every fault.
    assert_eq!(sampler.set_period(pid, 1).unwrap(), 1);
    t.touch();
    let lowered = drain_count(&mut sampler, pid);
    assert!(
        lowered * 2 >= every_fault && lowered <= every_fault * 2,
        "period 1 again took {lowered} samples, first {every_fault}"
    );
    let stats = sampler.stats(pid).unwrap();
    assert_eq!((stats.period, stats.period_changes), (1, 2));

    // A period the kernel refuses (bit 63 set) changes nothing, and says so.
    match sampler.set_period(pid, 1 << 63) {
        Err(SamplerError::PeriodRefused { kept: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    let stats = sampler.stats(pid).unwrap();
    assert_eq!((stats.period, stats.period_refusals), (1, 1));
    t.touch();
    let after_refusal = drain_count(&mut sampler, pid);
    assert!(after_refusal * 2 >= every_fault, "{after_refusal}");

    sampler.stop(pid).unwrap();
    drop(t.to);
    t.child.wait().unwrap();
}
