//! The real machine as rocs-core's platform: [`LinuxPlatform`] samples and counts its
//! targets through perf events (or, when asked by name, a [`ReplayPmu`]'s script) and moves
//! their pages through the kernel shim, the twin of `rocs_sim::Machine`. And the machine's
//! LLC domains: the sets of CPUs that share one last-level cache (a socket, an AMD CCX),
//! so that one engine serves each.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rocs_core::{
    CounterDelta, Counters, Mapping, MemSample, PageResult, Pid, Placement, Remapper, SampleLoss,
    Sampler, SamplingPlan, VirtPage,
};

use crate::counters::CounterEvents;
use crate::geometry::{page_size, parse_cpu_list};
use crate::prefetch::{L2PrefetchSwitch, PrefetchError};
use crate::procs::ProcRoot;
use crate::replay::ReplayPmu;
use crate::shim::{ShimClient, ShimError};
use crate::{CountersError, EventPlan, LinuxCounters, LinuxSampler, SamplerError};

/// Why an operation on this machine failed.
#[derive(Debug, thiserror::Error)]
pub enum LinuxPlatformError {
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Counters(#[from] CountersError),
    #[error(transparent)]
    Shim(#[from] ShimError),
    #[error("the rocs_shim kernel module is not available: pages cannot move")]
    NoShim,
    #[error(transparent)]
    Prefetch(#[from] PrefetchError),
    #[error("reading /proc/{pid}/maps: {source}")]
    Maps {
        pid: Pid,
        #[source]
        source: procfs::ProcError,
    },
}

/// Where samples and counters come from.
enum Pmu {
    /// perf events (their events close when this is dropped).
    Perf {
        sampler: LinuxSampler,
        counters: LinuxCounters,
    },
    /// A script, chosen by name for machines without a PMU (tests).
    Replay(ReplayPmu),
}

/// The targets of one LLC domain on this machine: their sampler and counters, and the shim,
/// which every domain shares.
pub struct LinuxPlatform {
    pmu: Pmu,
    shim: Option<Arc<Mutex<ShimClient>>>,
    /// The domain's L2 prefetchers, off on a target's CPUs while it profiles (rocsd.toml's
    /// `prefetchers_off_while_profiling`).
    prefetch: Option<L2PrefetchSwitch>,
    /// The targets profiling, and the CPUs each holds the prefetchers off on.
    sampling: BTreeMap<Pid, Vec<u32>>,
}

impl LinuxPlatform {
    pub fn new(
        plan: EventPlan,
        counter_events: CounterEvents,
        shim: Option<Arc<Mutex<ShimClient>>>,
    ) -> Self {
        let pmu = Pmu::Perf {
            sampler: LinuxSampler::new(plan),
            counters: LinuxCounters::new(counter_events),
        };
        LinuxPlatform::with_pmu(pmu, shim)
    }

    /// Samples and counters from `replay`'s script; pages move through the real shim.
    pub fn with_replay(replay: ReplayPmu, shim: Option<Arc<Mutex<ShimClient>>>) -> Self {
        LinuxPlatform::with_pmu(Pmu::Replay(replay), shim)
    }

    fn with_pmu(pmu: Pmu, shim: Option<Arc<Mutex<ShimClient>>>) -> Self {
        LinuxPlatform {
            pmu,
            shim,
            prefetch: None,
            sampling: BTreeMap::new(),
        }
    }

    /// Switch `prefetch`'s CPUs' L2 prefetchers off while a target samples.
    pub fn switch_prefetchers(&mut self, prefetch: L2PrefetchSwitch) {
        self.prefetch = Some(prefetch);
    }

    /// Whether a target's profile runs with the L2 prefetchers off (for its controller:
    /// `Controller::set_sampling_pauses_prefetch`).
    pub fn pauses_prefetch(&self) -> bool {
        self.prefetch.is_some()
    }

    /// `pid` no longer samples: the last to stop on each of its CPUs gives the prefetchers
    /// there back.
    fn done_sampling(&mut self, pid: Pid) -> Result<(), LinuxPlatformError> {
        match (&mut self.prefetch, self.sampling.remove(&pid)) {
            (Some(prefetch), Some(cpus)) => Ok(prefetch.release(&cpus)?),
            _ => Ok(()),
        }
    }

    fn shim(&self) -> Result<std::sync::MutexGuard<'_, ShimClient>, LinuxPlatformError> {
        let shim = self.shim.as_ref().ok_or(LinuxPlatformError::NoShim)?;
        // A thread that panicked while holding the client left no half-done call behind
        // (each ioctl is one call), so the client is taken over rather than the panic spread.
        Ok(shim
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Stop counting `pid` (its events close); a later read starts again. A target gone
    /// while it profiled no longer holds the prefetchers off.
    pub fn forget(&mut self, pid: Pid) -> Result<(), LinuxPlatformError> {
        match &mut self.pmu {
            Pmu::Perf { counters, .. } => counters.forget(pid),
            Pmu::Replay(replay) => replay.forget(pid),
        }
        self.done_sampling(pid)
    }
}

impl Sampler for LinuxPlatform {
    type Error = LinuxPlatformError;
    fn start(&mut self, pid: Pid, plan: &SamplingPlan) -> Result<(), Self::Error> {
        // The prefetchers go off before the first sample, so that every sample sees them off:
        // on the CPUs of the domain the target may run on (a pinned target's sharers on other
        // cores keep theirs, as the simulator switches the profiled core alone), on all of
        // them when that is not known.
        if let (Some(prefetch), Entry::Vacant(entry)) =
            (&mut self.prefetch, self.sampling.entry(pid))
        {
            let (allowed, _) = process_cpus(Path::new("/proc"), pid);
            let mut cpus: Vec<u32> = prefetch.cpus().filter(|c| allowed.contains(c)).collect();
            if cpus.is_empty() {
                cpus = prefetch.cpus().collect();
            }
            prefetch.hold(&cpus)?;
            entry.insert(cpus);
        }
        let started = match &mut self.pmu {
            Pmu::Perf { sampler, .. } => sampler.start(pid, plan),
            Pmu::Replay(replay) => {
                replay.start(pid);
                Ok(())
            }
        };
        if let Err(e) = started {
            self.done_sampling(pid)?;
            return Err(e.into());
        }
        Ok(())
    }
    fn stop(&mut self, pid: Pid) -> Result<(), Self::Error> {
        let stopped = match &mut self.pmu {
            Pmu::Perf { sampler, .. } => sampler.stop(pid),
            Pmu::Replay(replay) => {
                replay.stop(pid);
                Ok(())
            }
        };
        self.done_sampling(pid)?;
        Ok(stopped?)
    }
    fn drain(&mut self, pid: Pid, out: &mut Vec<MemSample>) -> Result<SampleLoss, Self::Error> {
        Ok(match &mut self.pmu {
            Pmu::Perf { sampler, .. } => sampler.drain(pid, out)?,
            Pmu::Replay(replay) => replay.drain(pid, out),
        })
    }
}

impl Counters for LinuxPlatform {
    type Error = LinuxPlatformError;
    fn read(&mut self, pid: Pid) -> Result<CounterDelta, Self::Error> {
        Ok(match &mut self.pmu {
            Pmu::Perf { counters, .. } => counters.read(pid)?,
            Pmu::Replay(replay) => replay.read(pid),
        })
    }
}

impl Remapper for LinuxPlatform {
    type Error = LinuxPlatformError;
    fn migrate(
        &mut self,
        pid: Pid,
        pages: &[VirtPage],
        to: Placement,
    ) -> Result<Vec<PageResult>, Self::Error> {
        Ok(self.shim()?.migrate(pid, pages, to)?)
    }
    fn query(&mut self, pid: Pid, pages: &[VirtPage]) -> Result<Vec<PageResult>, Self::Error> {
        Ok(self.shim()?.query(pid, pages)?)
    }
    fn mappings(&mut self, pid: Pid) -> Result<Option<Vec<Mapping>>, Self::Error> {
        let page_shift = page_size().trailing_zeros();
        ProcRoot::default()
            .mappings(pid, page_shift)
            .map(Some)
            .map_err(|source| LinuxPlatformError::Maps { pid, source })
    }
}

/// The CPUs of each LLC domain of the machine under `sys_root` (/sys), in order of their
/// first CPU: from each online CPU's last-level cache's `shared_cpu_list`. A machine whose
/// caches sysfs does not describe is one domain of every CPU listed.
pub fn llc_domains(sys_root: &Path) -> Vec<Vec<u32>> {
    let cpu_dir = sys_root.join("devices/system/cpu");
    let cpus: Vec<u32> = std::fs::read_to_string(cpu_dir.join("online"))
        .ok()
        .and_then(|t| parse_cpu_list(&t))
        .unwrap_or_default();
    let mut domains: BTreeSet<Vec<u32>> = BTreeSet::new();
    for &cpu in &cpus {
        if let Some(shared) = last_level_shared_cpus(&cpu_dir.join(format!("cpu{cpu}/cache"))) {
            domains.insert(shared);
        }
    }
    let mut domains: Vec<Vec<u32>> = domains.into_iter().collect();
    // A CPU no domain names (no cache info for it) joins the first.
    let named: BTreeSet<u32> = domains.iter().flatten().copied().collect();
    let loose: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|c| !named.contains(c))
        .collect();
    if domains.is_empty() {
        return vec![cpus];
    }
    domains[0].extend(loose);
    domains.sort_by_key(|d| d.iter().min().copied());
    domains
}

/// The CPUs sharing the highest-level data or unified cache of one CPU.
fn last_level_shared_cpus(cache_dir: &Path) -> Option<Vec<u32>> {
    let mut best: Option<(u32, Vec<u32>)> = None;
    for entry in std::fs::read_dir(cache_dir).ok()?.flatten() {
        let p = entry.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).ok();
        if read("type").is_some_and(|t| t.trim() == "Instruction") {
            continue;
        }
        let Some(level) = read("level").and_then(|l| l.trim().parse::<u32>().ok()) else {
            continue;
        };
        let Some(shared) = read("shared_cpu_list").and_then(|t| parse_cpu_list(&t)) else {
            continue;
        };
        if best.as_ref().is_none_or(|(l, _)| level > *l) {
            best = Some((level, shared));
        }
    }
    best.map(|(_, shared)| shared)
}

/// The LLC domain (an index into `domains`) a process runs in: the one that holds every
/// CPU it may run on, else the one of the CPU it last ran on, else the first. A process
/// pinned across domains shares no single LLC; it is counted where it was last seen.
pub fn domain_of(domains: &[Vec<u32>], allowed: &[u32], last_cpu: Option<u32>) -> usize {
    let holds_all = |d: &Vec<u32>| !allowed.is_empty() && allowed.iter().all(|c| d.contains(c));
    domains
        .iter()
        .position(holds_all)
        .or_else(|| last_cpu.and_then(|cpu| domains.iter().position(|d| d.contains(&cpu))))
        .unwrap_or(0)
}

/// The CPUs a process may run on (`Cpus_allowed_list` of /proc/PID/status) and the CPU it
/// last ran on (field 39 of /proc/PID/stat), when they can be read.
pub fn process_cpus(proc_root: &Path, pid: Pid) -> (Vec<u32>, Option<u32>) {
    let dir = proc_root.join(pid.to_string());
    let allowed = std::fs::read_to_string(dir.join("status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(parse_cpu_list)
        })
        .unwrap_or_default();
    let last = std::fs::read_to_string(dir.join("stat"))
        .ok()
        .and_then(|s| last_cpu_of_stat(&s));
    (allowed, last)
}

/// Field 39 (`processor`) of a /proc/PID/stat line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses: count from the last ')'.
fn last_cpu_of_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name come fields 3, 4, ...: field 39 is the 37th of them.
    rest.split_whitespace().nth(36)?.parse().ok()
}

/// The address ranges of the mappings of a /proc/PID/maps text whose pathname (its last
/// column: a path, `[heap]`, `[stack]`, ...) `named` accepts. Unnamed mappings are left out.
pub fn mapped_ranges(maps: &str, named: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    for line in maps.lines() {
        // "start-end perms offset dev inode   pathname": single spaces up to the inode,
        // then padding; a pathname may hold spaces.
        let mut fields = line.splitn(6, ' ');
        let range = fields.next().unwrap_or("");
        let name = fields.nth(4).unwrap_or("").trim_start();
        if name.is_empty() || !named(name) {
            continue;
        }
        let hex = |t: &str| u64::from_str_radix(t, 16).ok();
        if let Some(r) = range
            .split_once('-')
            .and_then(|(a, b)| Some((hex(a)?, hex(b)?)))
        {
            ranges.push(r);
        }
    }
    ranges
}

/// The pages of `ranges` of process `pid` that are in memory now (/proc/PID/pagemap's
/// "present" bit, 63, in the kernel's Documentation/admin-guide/mm/pagemap.rst): a page
/// never touched, or swapped out, has no frame to move.
pub fn present_pages(
    pid: Pid,
    ranges: &[(u64, u64)],
    page_shift: u32,
) -> std::io::Result<Vec<VirtPage>> {
    use std::os::unix::fs::FileExt;
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))?;
    let mut present = Vec::new();
    for &(start, end) in ranges {
        let first = start >> page_shift;
        let mut entries = vec![0u8; ((end >> page_shift) - first) as usize * 8];
        pagemap.read_exact_at(&mut entries, first * 8)?;
        let pages = entries.chunks_exact(8).enumerate();
        present.extend(pages.filter_map(|(i, e)| {
            let entry = u64::from_ne_bytes(e.try_into().expect("8 bytes"));
            (entry >> 63 == 1).then_some(VirtPage(first + i as u64))
        }));
    }
    Ok(present)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefetchers_are_off_while_any_target_of_the_domain_samples() {
        let script = "window instructions=1000 cycles=2000 llc_references=100 llc_misses=60\n";
        let script = crate::ReplayScript::parse(Path::new("r.replay"), script, 4096).unwrap();
        let mut platform = LinuxPlatform::with_replay(ReplayPmu::new(Arc::new(script), 4096), None);
        let intel = crate::prefetch::INTEL;
        let cpus = crate::prefetch::fake_cpus(intel, &[0, 0]);
        let register = |cpu| crate::prefetch::register(cpus.path(), intel.msr, cpu);
        let switch = L2PrefetchSwitch::open(cpus.path(), &[0, 1], intel).unwrap();
        platform.switch_prefetchers(switch);
        // Pids 7 and 8 are not this machine's processes (no CPU list): every CPU of the
        // domain goes off for them.
        assert!(platform.pauses_prefetch());
        let plan = SamplingPlan {
            period: 1000,
            cpu_budget: 0.01,
        };
        platform.start(7, &plan).unwrap();
        assert_eq!((register(0), register(1)), (0b11, 0b11));
        platform.start(8, &plan).unwrap();
        platform.stop(7).unwrap();
        assert_eq!(register(1), 0b11, "8 still profiles");
        // 8 exits while profiling: forgetting it gives the prefetchers back.
        platform.forget(8).unwrap();
        assert_eq!((register(0), register(1)), (0, 0));
        platform.forget(7).unwrap();
        assert_eq!(register(0), 0, "7 had stopped already");
    }

    #[test]
    fn a_target_s_prefetchers_go_off_only_on_the_cpus_it_may_run_on() {
        let script = "window instructions=1000 cycles=2000 llc_references=100 llc_misses=60\n";
        let script = crate::ReplayScript::parse(Path::new("r.replay"), script, 4096).unwrap();
        let mut platform = LinuxPlatform::with_replay(ReplayPmu::new(Arc::new(script), 4096), None);
        // This test's own process: a CPU it may run on, and one no machine has.
        let me = std::process::id() as Pid;
        let (allowed, _) = process_cpus(Path::new("/proc"), me);
        let (mine, none) = (allowed[0], 4095);
        let intel = crate::prefetch::INTEL;
        let dir = tempfile::tempdir().unwrap();
        for cpu in [mine, none] {
            let file = dir.path().join(cpu.to_string());
            std::fs::create_dir(&file).unwrap();
            std::fs::File::create(file.join("msr"))
                .unwrap()
                .set_len(intel.msr + 8)
                .unwrap();
        }
        let register = |cpu| crate::prefetch::register(dir.path(), intel.msr, cpu);
        platform
            .switch_prefetchers(L2PrefetchSwitch::open(dir.path(), &[mine, none], intel).unwrap());
        let plan = SamplingPlan {
            period: 1000,
            cpu_budget: 0.01,
        };
        platform.start(me, &plan).unwrap();
        assert_eq!((register(mine), register(none)), (0b11, 0));
        platform.stop(me).unwrap();
        assert_eq!(register(mine), 0);
    }

    fn cache(root: &Path, cpu: u32, index: u32, level: u32, kind: &str, shared: &str) {
        let d = root.join(format!("devices/system/cpu/cpu{cpu}/cache/index{index}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
        std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(d.join("shared_cpu_list"), format!("{shared}\n")).unwrap();
    }

    #[test]
    fn two_ccxs_are_two_domains() {
        // A Zen 2-like part: 8 CPUs, each CCX of 4 CPUs (and their SMT siblings) shares an
        // L3; the L1 and L2 are per core.
        let root = tempfile::tempdir().unwrap();
        let cpu = root.path().join("devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-7\n").unwrap();
        for c in 0..8u32 {
            let core = format!("{}", c % 4);
            cache(root.path(), c, 0, 1, "Data", &core);
            cache(root.path(), c, 1, 1, "Instruction", &core);
            cache(root.path(), c, 2, 2, "Unified", &core);
            let ccx = if c < 4 { "0-3" } else { "4-7" };
            cache(root.path(), c, 3, 3, "Unified", ccx);
        }
        let domains = llc_domains(root.path());
        assert_eq!(domains, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        // Pinned inside the second CCX: there. Free to run anywhere: where it last ran.
        assert_eq!(domain_of(&domains, &[5, 6], Some(1)), 1);
        assert_eq!(domain_of(&domains, &[0, 1, 2, 3, 4, 5, 6, 7], Some(6)), 1);
        assert_eq!(domain_of(&domains, &[0, 1, 2, 3, 4, 5, 6, 7], None), 0);
    }

    #[test]
    fn a_machine_without_cache_info_is_one_domain() {
        let root = tempfile::tempdir().unwrap();
        let cpu = root.path().join("devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-1\n").unwrap();
        assert_eq!(llc_domains(root.path()), vec![vec![0, 1]]);
    }

    #[test]
    fn this_machines_domains_cover_its_cpus_and_this_process_is_in_one() {
        let domains = llc_domains(Path::new("/sys"));
        assert!(!domains.is_empty());
        let (allowed, last) = process_cpus(Path::new("/proc"), std::process::id());
        assert!(!allowed.is_empty(), "Cpus_allowed_list read");
        let cpu = last.expect("the processor field of /proc/self/stat");
        assert!(
            domains.iter().any(|d| d.contains(&cpu)),
            "{cpu} in {domains:?}"
        );
    }

    #[test]
    fn named_mappings_give_their_ranges() {
        let maps = "\
00400000-00401000 r-xp 00000000 08:01 1234                               /usr/bin/target
01000000-01003000 rw-p 00000000 00:00 0                                  [heap]
7f0000000000-7f0000002000 rw-p 00000000 00:00 0                          /dev/zero (deleted)
7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n\
7ffc00000000-7ffc00001000 rw-p 00000000 00:00 0                          [stack]
";
        assert_eq!(
            mapped_ranges(maps, |n| n == "[heap]"),
            vec![(0x0100_0000, 0x0100_3000)]
        );
        assert_eq!(
            mapped_ranges(maps, |n| n.starts_with("/dev/zero")),
            vec![(0x7f00_0000_0000, 0x7f00_0000_2000)]
        );
        assert_eq!(
            mapped_ranges(maps, |_| true).len(),
            4,
            "an unnamed one is not"
        );
    }

    #[test]
    fn present_pages_are_the_touched_ones() {
        let shift = crate::geometry::page_size().trailing_zeros();
        let size = 1usize << shift;
        // Four pages mapped, the second and fourth touched.
        // SAFETY: a fresh anonymous private mapping of 4 pages, unmapped below; nothing else
        // refers to that address range.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4 * size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let addr = map as u64;
        // SAFETY: both writes are inside the 4-page mapping made above.
        unsafe {
            *(map as *mut u8).add(size) = 1;
            *(map as *mut u8).add(3 * size) = 1;
        }
        let pages = present_pages(std::process::id(), &[(addr, addr + 4 * size as u64)], shift);
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(map, 4 * size) };
        let first = addr >> shift;
        assert_eq!(
            pages.unwrap(),
            vec![VirtPage(first + 1), VirtPage(first + 3)]
        );
    }

    #[test]
    fn the_last_cpu_is_read_past_a_name_with_spaces_and_parentheses() {
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[39 - 3] = "7".into();
        let stat = format!("1234 (a (b) c) {}", fields.join(" "));
        assert_eq!(last_cpu_of_stat(&stat), Some(7));
    }
}
