//! The Machine API the controller drives: determinism, run_for, the platform traits.

use rocs_core::{
    Colour, Counters, DataSource, Errno, Pid, Placement, Remapper, Sampler, SamplingPlan, VirtPage,
};
use rocs_sim::{Machine, MachineSpec, Workload};

const SMALL: &str = r#"
name = "small"
description = "a stream and a reused table"
[[process]]
name = "p"
accesses = 2_000_000
[[process.region]]
name = "stream"
size = "1MiB"
pattern = "sequential"
share = 0.5
[[process.region]]
name = "table"
size = "128KiB"
pattern = "random"
share = 0.5
"#;

fn machine(seed: u64) -> Machine {
    let p = MachineSpec::resolve("tiny").unwrap();
    let w = Workload::from_toml("small.toml", SMALL).unwrap();
    Machine::new(&p, &w, seed).unwrap()
}

#[test]
fn same_seed_same_numbers_and_run_for_ends() {
    let mut a = machine(7);
    let mut b = machine(7);
    let mut steps = 0;
    while a.run_for(1_000_000) {
        steps += 1;
        assert!(steps < 10_000);
    }
    assert!(a.finished());
    assert!(!a.run_for(1_000_000), "stays finished");
    b.run_to_end().unwrap();
    assert_eq!(a.totals(), b.totals());
    let t = a.totals();
    assert_eq!(t.l1d_accesses, 2_000_000);
    assert!(t.llc_misses > 0 && t.llc_misses < t.llc_accesses);
    let mut c = machine(8);
    c.run_to_end().unwrap();
    assert_ne!(
        c.totals().llc_misses,
        t.llc_misses,
        "another seed, other frames"
    );
}

#[test]
fn migrate_to_pollute_and_back_changes_colour_and_charges_cost() {
    let mut m = machine(1);
    let pid = m.pids()[0];
    assert_eq!(m.llc_geometry().colours(), 16);
    assert_eq!(m.pollute_colours(), vec![Colour(15)]);
    let pages = m.region_pages(pid, "stream").unwrap();
    assert_eq!(pages.len(), 256);
    let before = m.query(pid, &pages).unwrap();
    let already = before.iter().filter(|c| **c == Ok(Colour(15))).count();
    let res = m.migrate(pid, &pages, Placement::Pollute).unwrap();
    assert!(res.iter().all(|r| *r == Ok(Colour(15))), "{res:?}");
    let t = m.totals();
    assert_eq!(t.processes[0].pages_migrated as usize, 256 - already);
    assert_eq!(
        t.migration_overhead_cycles,
        (256 - already) as u64 * m.migration_cycles()
    );
    assert_eq!(m.migration_cycles(), 4000, "2 us at 2 GHz");
    let back = m.migrate(pid, &pages[..10], Placement::Restore).unwrap();
    assert!(back.iter().all(|r| matches!(r, Ok(c) if c.0 != 15)));
    // A restored page goes back to the colour it had: a search that confines nothing
    // leaves the layout as it found it (the pages that were in colour 15 by chance had no
    // other colour to go back to).
    for (was, now) in before[..10].iter().zip(&back) {
        if *was != Ok(Colour(15)) {
            assert_eq!(was, now, "a restored page did not go home");
        }
    }
    // Unmapped page and unknown pid.
    assert_eq!(
        m.query(pid, &[VirtPage(1)]).unwrap(),
        vec![Err(Errno::EFAULT)]
    );
    assert!(m.migrate(4242, &pages, Placement::Pollute).is_err());
    m.set_pollute_colours(&[Colour(0), Colour(1)]).unwrap();
    assert!(m.set_pollute_colours(&[Colour(16)]).is_err());
    let res = m.migrate(pid, &pages[..4], Placement::Pollute).unwrap();
    assert!(
        res.iter().all(|r| matches!(r, Ok(Colour(0 | 1)))),
        "{res:?}"
    );
}

#[test]
fn a_page_moved_out_onto_a_chosen_colour_lands_there() {
    let mut m = machine(1);
    let pid = m.pids()[0];
    let pages = m.region_pages(pid, "stream").unwrap();
    let before = m.query(pid, &pages).unwrap();
    // Pages the allocator put in the pollute colour (15) go where they are sent; pages on
    // ordinary colours stay where they are.
    let squatters: Vec<VirtPage> = pages
        .iter()
        .zip(&before)
        .filter(|(_, c)| **c == Ok(Colour(15)))
        .map(|(p, _)| *p)
        .collect();
    assert!(squatters.len() >= 4, "{}", squatters.len());
    let ordinary = pages[before.iter().position(|c| *c == Ok(Colour(3))).unwrap()];
    let moved = m
        .migrate(
            pid,
            &[squatters[0], squatters[1], ordinary],
            Placement::Ordinary(Colour(7)),
        )
        .unwrap();
    assert_eq!(moved, vec![Ok(Colour(7)), Ok(Colour(7)), Ok(Colour(3))]);
    assert_eq!(m.totals().processes[0].pages_migrated, 2);
    // A pollute colour, or one the LLC does not have, is no ordinary colour.
    for bad in [Colour(15), Colour(16)] {
        let res = m
            .migrate(pid, &squatters[2..4], Placement::Ordinary(bad))
            .unwrap();
        assert_eq!(res, vec![Err(Errno::EINVAL); 2], "{bad:?}");
    }
}

#[test]
fn sampler_reports_llc_hits_and_misses_and_counters_give_deltas() {
    let mut m = machine(3);
    let pid = m.pids()[0];
    m.start(
        pid,
        &SamplingPlan {
            period: 100,
            cpu_budget: 0.0,
        },
    )
    .unwrap();
    m.run_for(2_000_000);
    let mut out = Vec::new();
    let loss = m.drain(pid, &mut out).unwrap();
    assert_eq!(loss.lost, 0);
    assert!(out.len() > 10, "{}", out.len());
    assert!(out.iter().any(|s| s.source == DataSource::LlcHit));
    assert!(out.iter().any(|s| s.source == DataSource::LlcMiss));
    assert!(out.iter().all(|s| s.pid == pid && s.paddr.is_some()));
    let t = m.totals();
    assert_eq!(t.sampling_overhead_cycles, out.len() as u64 * 200);
    let d1 = m.read(pid).unwrap();
    assert_eq!(d1.instructions, t.instructions);
    m.stop(pid).unwrap();
    m.run_for(1_000_000);
    let d2 = m.read(pid).unwrap();
    assert!(d2.cycles >= 1_000_000 && d2.instructions > 0);
    out.clear();
    m.drain(pid, &mut out).unwrap();
    assert!(out.is_empty(), "stopped sampling takes no samples");
}

#[test]
fn machine_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Machine>();
}

#[test]
fn a_trace_replays_with_frames_and_its_pages_can_be_migrated() {
    use rocs_sim::{TraceFormat, TraceInput, TraceSpec};
    let trace = "I  00400000,4\n L 00801000,8\n S 00802000,8\n L 00801ffc,8\n";
    let p = MachineSpec::resolve("tiny").unwrap();
    let mut m = Machine::from_trace(
        &p,
        TraceSpec {
            input: TraceInput::Reader(Box::new(std::io::Cursor::new(trace.as_bytes().to_vec()))),
            format: TraceFormat::Lackey,
            repeat: 1,
            length: None,
            identity_map: false,
        },
        1,
    )
    .unwrap();
    m.run_to_end().unwrap();
    let pid = m.pids()[0];
    let pages = m.pages(pid).unwrap();
    // Pages touched: 0x400 (the fetch), 0x801, 0x802 (also by 0x801ffc + 8, which crosses
    // into it).
    assert_eq!(
        pages,
        vec![VirtPage(0x400), VirtPage(0x801), VirtPage(0x802)]
    );
    assert_eq!(m.totals().l1d_accesses, 3);
    let res = m.migrate(pid, &pages, Placement::Pollute).unwrap();
    assert!(res.iter().all(|r| *r == Ok(Colour(15))), "{res:?}");
}

/// A machine whose one process samples every event, allowed `cpu_budget` of its core.
fn sampling_every_event(cpu_budget: f64) -> (Machine, Pid) {
    let p = MachineSpec::resolve("tiny").unwrap();
    let w = Workload::from_toml("small.toml", SMALL)
        .unwrap()
        .scaled(20.0);
    let mut m = Machine::new(&p, &w, 2).unwrap();
    let pid = m.pids()[0];
    m.start(
        pid,
        &SamplingPlan {
            period: 1,
            cpu_budget,
        },
    )
    .unwrap();
    (m, pid)
}

#[test]
fn sampling_stays_within_its_cpu_budget_by_raising_the_period() {
    let (mut m, pid) = sampling_every_event(0.01);
    let mut out = Vec::new();
    let mut throttled = 0;
    for _ in 0..40 {
        m.run_for(10_000_000);
        throttled += m.drain(pid, &mut out).unwrap().throttled;
    }
    assert!(throttled > 0, "the period was raised");
    // After adapting, the last windows cost about the budget, not the 1-sample-per-event cost.
    let t0 = m.totals();
    m.run_for(50_000_000);
    let t1 = m.totals();
    assert!(!m.finished() && t1.cycles > t0.cycles + 40_000_000);
    let share = (t1.sampling_overhead_cycles - t0.sampling_overhead_cycles) as f64
        / (t1.cycles - t0.cycles) as f64;
    assert!(share < 0.03, "sampling share {share}");
}

/// A profile window shorter than the sampler's budget window still costs about the budget:
/// the period is raised as soon as the first samples show it over, not when the budget
/// window ends (the random suite's windows are a seventh of it).
#[test]
fn a_window_shorter_than_the_budget_window_costs_about_the_budget() {
    let (mut m, _) = sampling_every_event(0.1);
    m.run_for(2_000_000);
    let t = m.totals();
    let share = t.sampling_overhead_cycles as f64 / t.cycles as f64;
    assert!(share < 0.25, "sampling share {share}");
}

#[test]
fn ipc_noise_perturbs_window_counts_but_not_the_run() {
    let p = MachineSpec::resolve("xeon-like").unwrap();
    assert!(p.pmu.ipc_noise > 0.0);
    let w = Workload::from_toml("small.toml", SMALL).unwrap();
    let mut m = Machine::new(&p, &w, 1).unwrap();
    let pid = m.pids()[0];
    let mut reported = 0;
    while m.run_for(200_000) {
        reported += m.read(pid).unwrap().cycles;
    }
    reported += m.read(pid).unwrap().cycles;
    let exact = m.totals().cycles;
    assert_ne!(reported, exact, "noise was added");
    let rel = (reported as f64 - exact as f64).abs() / exact as f64;
    assert!(rel < 0.01, "noise averages out: {rel}");
}

/// The timing model's closed form: an access costs its instructions at the base CPI, and
/// one served by the LLC or by memory that level's latency divided by its region's `mlp`
/// (the core overlaps its misses whichever level serves them). Were only memory accesses
/// overlapped, an LLC hit (100 cycles) would cost more than a miss (300 / 4).
#[test]
fn accesses_served_by_the_llc_and_by_memory_both_overlap_mlp_at_a_time() {
    let spec = MachineSpec::from_toml(
        "overlap.toml",
        "name = \"overlap\"\nclock_ghz = 1.0\nbase_cpi = 1.0\npage_size = \"4KiB\"\n\
         memory = \"64MiB\"\nmemory_latency = 300\n\
         [l1d]\nsize = \"4KiB\"\nline = 64\nways = 4\nlatency = 0\n\
         [llc]\nsize = \"1MiB\"\nline = 64\nways = 16\nlatency = 100\n",
    )
    .unwrap();
    let w = Workload::from_toml(
        "table.toml",
        "name = \"table\"\n[[process]]\nname = \"p\"\naccesses = 200_000\n\
         [[process.region]]\nname = \"table\"\nsize = \"256KiB\"\npattern = \"random\"\n\
         elem = 64\nshare = 1.0\nmlp = 4.0\n",
    )
    .unwrap();
    let mut m = Machine::new(&spec, &w, 1).unwrap();
    m.run_to_end().unwrap();
    let t = m.totals();
    let hits = t.llc_accesses - t.llc_misses;
    // The table fits the LLC: its first touches miss, the rest hit.
    assert_eq!(t.llc_misses, 256 * 1024 / 64);
    assert!(hits > 150_000, "{hits} LLC hits");
    assert_eq!(
        t.cycles,
        t.instructions + hits * 100 / 4 + t.llc_misses * 300 / 4
    );
}

/// A program's accesses are its own: sampling it changes what its run costs, never which
/// addresses it touches. The sampler once drew its period's jitter from the program's own
/// random generator, so a profiled program picked other regions and other random offsets
/// from then on, and a run that moved no page differed from its baseline in more than
/// the samples' cost. Its L1D (private, virtually indexed, filled by nothing else) then
/// misses exactly as often with and without the sampler.
#[test]
fn sampling_a_program_does_not_change_its_accesses() {
    let p = MachineSpec::resolve("xeon-like").unwrap();
    assert!(p.pmu.jitter > 0.0, "the sampler draws random numbers");
    let w = Workload::from_toml("small.toml", SMALL).unwrap();
    let l1d_misses = |sampled: bool| {
        let mut m = Machine::new(&p, &w, 5).unwrap();
        if sampled {
            let pid = m.pids()[0];
            let plan = SamplingPlan {
                period: 7,
                cpu_budget: 1.0,
            };
            m.start(pid, &plan).unwrap();
        }
        m.run_to_end().unwrap();
        let t = m.totals();
        assert_eq!(t.samples > 0, sampled);
        t.l1d_misses
    };
    assert_eq!(l1d_misses(true), l1d_misses(false));
}

#[test]
fn a_generated_process_s_mappings_are_its_regions() {
    let mut m = machine(1);
    let pid = m.pids()[0];
    let maps = m
        .mappings(pid)
        .unwrap()
        .expect("a generated process tells its mappings");
    let pages = |name| {
        let p = m.region_pages(pid, name).unwrap();
        (p[0], *p.last().unwrap(), p.len())
    };
    let ((s0, s1, sn), (t0, t1, tn)) = (pages("stream"), pages("table"));
    assert_eq!((sn, tn), (256, 32));
    let ranges: Vec<_> = maps.iter().map(|r| (r.first, r.last)).collect();
    assert_eq!(ranges, vec![(s0, s1), (t0, t1)]);
    assert!(m.mappings(4242).is_err(), "unknown pid");
}
