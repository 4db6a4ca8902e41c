//! The models beyond the paper's machines, through the machine's public interface, each
//! against a closed form: the prefetcher (a trained stream leaves `train` demand misses
//! per 4 KiB page), the TLB (a scan misses once per page and reads each page-table line from
//! memory once: 8 entries of 8 bytes to a 64-byte line), and the prefetcher switched off
//! while sampling (ROCS Fig. 4: prefetched lines hide a stream from the profile).

use rocs_core::{Sampler, SamplingPlan};
use rocs_sim::{Machine, MachineSpec, RunStats, Workload};

const PAGES: u64 = 16;

/// A machine whose caches hold everything the scan touches (no capacity misses), with the
/// prefetcher and the TLB as asked.
fn machine(prefetch: bool, off_while_sampling: bool, tlb: bool) -> MachineSpec {
    machine_with(prefetch, off_while_sampling, tlb, "lru")
}

fn machine_with(
    prefetch: bool,
    off_while_sampling: bool,
    tlb: bool,
    llc_policy: &str,
) -> MachineSpec {
    let mut text = format!(
        "name = \"models\"\nclock_ghz = 1.0\nbase_cpi = 1.0\npage_size = \"4KiB\"\nmemory = \"64MiB\"\nmemory_latency = 200\n\
         [l1d]\nsize = \"4KiB\"\nline = 64\nways = 4\n\
         [l2]\nsize = \"256KiB\"\nline = 64\nways = 8\nlatency = 10\n\
         [llc]\nsize = \"1MiB\"\nline = 64\nways = 16\nlatency = 30\npolicy = \"{llc_policy}\"\n",
    );
    if prefetch {
        text += &format!(
            "[prefetch]\nstreams = 8\ndegree = 2\ndistance = 20\ntrain = 2\noff_while_sampling = {off_while_sampling}\n"
        );
    }
    if tlb {
        text += "[tlb]\nentries = 64\nways = 4\nwalk_cycles = 20\n";
    }
    MachineSpec::from_toml("models.toml", &text).unwrap()
}

/// One pass over `PAGES` pages, one access per 64-byte line.
fn scan() -> Workload {
    let text = format!(
        "name = \"scan\"\n[[process]]\nname = \"scan\"\naccesses = {}\n[[process.region]]\nname = \"a\"\nsize = \"{}KiB\"\npattern = \"sequential\"\nelem = 64\nshare = 1.0\n",
        PAGES * 64,
        PAGES * 4
    );
    Workload::from_toml("scan.toml", &text).unwrap()
}

fn run(profile: &MachineSpec, sampling: bool) -> RunStats {
    let mut m = Machine::new(profile, &scan(), 1).unwrap();
    if sampling {
        let pid = m.pids()[0];
        // Every event sampled; no CPU budget (the period never moves).
        let plan = SamplingPlan {
            period: 1,
            cpu_budget: 0.0,
        };
        m.start(pid, &plan).unwrap();
    }
    m.run_to_end().unwrap();
    m.totals()
}

#[test]
fn a_trained_stream_misses_only_while_training() {
    let off = run(&machine(false, false, false), false);
    assert_eq!((off.l2_misses, off.prefetches), (PAGES * 64, 0));
    let on = run(&machine(true, false, false), false);
    // Per page: 2 lines to learn the stride, the other 62 prefetched from memory.
    assert_eq!(on.l2_misses, PAGES * 2);
    assert_eq!((on.prefetches, on.prefetch_mem), (PAGES * 62, PAGES * 62));
    assert_eq!(on.llc_misses, PAGES * 2, "demand misses only");
    assert!(
        on.cycles < off.cycles,
        "prefetching hides the stream's latency"
    );
}

#[test]
fn a_scan_walks_once_per_page_and_reads_each_pte_line_once() {
    let t = run(&machine(false, false, true), false);
    assert_eq!(t.tlb_misses, PAGES);
    assert_eq!(t.walk_mem, PAGES / 8);
    let without = run(&machine(false, false, false), false);
    assert_eq!(without.tlb_misses, 0);
    assert_eq!(
        t.cycles - without.cycles,
        t.walk_cycles,
        "walks cost what they count"
    );
    // 16 walks: 20 cycles each, plus the entry from memory (2) or from the L2 (14).
    assert_eq!(t.walk_cycles, PAGES * 20 + 2 * 200 + 14 * 10);
}

#[test]
fn prefetched_lines_hide_a_stream_from_the_profile_unless_switched_off() {
    let hidden = run(&machine(true, false, false), true);
    let seen = run(&machine(true, true, false), true);
    // Every sample is a load that reached the LLC: with the prefetcher on, only the lines
    // it had not learnt yet; switched off while sampling, every line of the stream.
    assert_eq!(hidden.samples, PAGES * 2);
    assert_eq!((seen.samples, seen.prefetches), (PAGES * 64, 0));
}

#[test]
fn way_masks_follow_resctrl_rules() {
    let drrip = machine_with(false, false, false, "drrip");
    let mut m = Machine::new(&drrip, &scan(), 1).unwrap();
    let pid = m.pids()[0];
    assert_eq!(m.way_mask(pid).unwrap(), 0xffff);
    m.set_way_mask(pid, 0x00f0).unwrap();
    for bad in [0, 0x0101, 0x1_0000] {
        let e = m.set_way_mask(pid, bad).unwrap_err().to_string();
        assert!(e.contains("way mask"), "{bad:#x}: {e}");
    }
    let mut lru = Machine::new(&machine(false, false, false), &scan(), 1).unwrap();
    let e = lru.set_way_mask(pid, 0x00f0).unwrap_err().to_string();
    assert!(e.contains("RRIP"), "{e}");
}
