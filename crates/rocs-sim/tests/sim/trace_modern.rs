//! Traces on machines with the modern models (victim LLC, TLB, L2 prefetcher) take the
//! per-access path generated workloads take there; each model is checked on a trace
//! against a closed form.

use std::path::PathBuf;

use rocs_sim::machine::Counts;
use rocs_sim::{Machine, MachineSpec, TraceSpec};

/// A machine with 64 B lines everywhere, a 1 KiB L1D, an L2 of 256 sets x 4 ways (64 KiB)
/// and an LLC of 256 sets x 8 ways (128 KiB, 4 colours), both LRU, plus `extra` (fill, [prefetch], [tlb]).
fn machine(fill: &str, extra: &str) -> MachineSpec {
    let text = format!(
        "name = \"m\"\nclock_ghz = 1.0\nbase_cpi = 1.0\npage_size = \"4KiB\"\nmemory = \"64MiB\"\n\
         memory_latency = 100\n\
         [l1d]\nsize = 1024\nline = 64\nways = 2\n\
         [l2]\nsize = 65536\nline = 64\nways = 4\nlatency = 10\n\
         [llc]\nsize = 131072\nline = 64\nways = 8\nlatency = 30\nfill = \"{fill}\"\n{extra}"
    );
    MachineSpec::from_toml("m.toml", &text).unwrap()
}

/// A lackey trace of `passes` passes of one 8-byte load per 64-byte line over `lines`
/// lines from `base`, every `step` lines.
fn write_loop(name: &str, base: u64, lines: u64, step: u64, passes: u64) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("rocs-trace-modern-{}-{name}", std::process::id()));
    let mut t = String::new();
    for _ in 0..passes {
        for i in (0..lines).step_by(step as usize) {
            t.push_str(&format!(" L {:08x},8\n", base + i * 64));
        }
    }
    std::fs::write(&path, t).unwrap();
    path
}

fn replay(spec: &MachineSpec, path: &PathBuf, identity_map: bool) -> Counts {
    let trace = TraceSpec {
        identity_map,
        ..TraceSpec::file(path)
    };
    let mut m = Machine::from_traces(spec, vec![trace], 1).unwrap();
    m.run_to_end().unwrap();
    m.totals().counts
}

#[test]
fn an_exclusive_victim_llc_holds_what_the_l2_does_not() {
    // A loop over 12 lines per set: 4 ways of L2 plus 8 of LLC. Exclusive, the two are one
    // LRU stack of 12 (the hierarchy's own test checks that against Mattson's stack): after
    // the first pass every L2 miss hits the LLC. Filled on a miss, the LLC holds only 8 of
    // the 12 and LRU evicts each line before its reuse: every pass misses.
    let lines = 256 * 12;
    let passes = 5;
    let path = write_loop("victim", 0x10_0000, lines, 1, passes);
    let exclusive = replay(&machine("exclusive-victim", ""), &path, true);
    let on_miss = replay(&machine("on-miss", ""), &path, true);
    assert_eq!(
        exclusive.l2_misses,
        lines * passes,
        "the loop overflows the L2"
    );
    assert_eq!(
        exclusive.llc_data_misses, lines,
        "only the first pass misses"
    );
    assert_eq!(on_miss.llc_data_misses, lines * passes, "every pass misses");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_tlb_misses_on_every_page_of_a_loop_it_cannot_hold() {
    // 64 entries, 4 ways: 16 sets indexed by the page number. A loop over 32 consecutive
    // pages puts 2 pages in each set: all stay, so only first touches miss. Over 128 pages,
    // 8 pages cycle through each 4-way LRU set: every reference misses.
    let spec = machine(
        "on-miss",
        "[tlb]\nentries = 64\nways = 4\nwalk_cycles = 20\n",
    );
    for (pages, misses_per_pass) in [(32u64, 0u64), (128, 128)] {
        let passes = 4;
        let path = write_loop("tlb", 0x4000_0000, pages * 64, 64, passes);
        let c = replay(&spec, &path, false);
        assert_eq!(
            c.tlb_misses,
            pages + (passes - 1) * misses_per_pass,
            "{pages} pages"
        );
        assert!(
            c.walk_cycles >= 20 * c.tlb_misses,
            "each walk costs its cycles"
        );
        let _ = std::fs::remove_file(&path);
    }
    // Identity mapping gives the page tables no frames: refused, with the way out.
    let path = write_loop("tlb-identity", 0, 1, 1, 1);
    let trace = TraceSpec {
        identity_map: true,
        ..TraceSpec::file(&path)
    };
    let Err(e) = Machine::from_traces(&spec, vec![trace], 1) else {
        panic!("a TLB with identity mapping")
    };
    assert!(e.to_string().contains("without [tlb]"), "{e}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_trained_prefetcher_leaves_a_stream_two_demand_misses_per_page() {
    // One pass over 256 pages of lines in order: without a prefetcher every line misses the
    // L2. The stream prefetcher (trained per 4 KiB page after 2 accesses of one stride,
    // `degree` lines per access, up to `distance` ahead, never across a page) leaves the
    // first 2 lines of each page to demand, then stays ahead: 2 demand misses per page, and
    // the other 62 lines of each page arrive as prefetches.
    let pages = 256u64;
    let path = write_loop("prefetch", 0x10_0000, pages * 64, 1, 1);
    let prefetch = "[prefetch]\nstreams = 16\ndegree = 2\ndistance = 16\n";
    let off = replay(&machine("on-miss", ""), &path, true);
    let on = replay(&machine("on-miss", prefetch), &path, true);
    assert_eq!(off.l2_misses, pages * 64);
    assert_eq!(off.prefetches, 0);
    assert_eq!(on.l2_misses, pages * 2, "{on:?}");
    assert_eq!(on.prefetches, pages * 62, "{on:?}");
    let _ = std::fs::remove_file(&path);
}
