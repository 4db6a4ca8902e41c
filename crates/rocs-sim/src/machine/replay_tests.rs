//! Tests of trace replay (`replay.rs`): every version of the binary format, the
//! repeated-line skip and version 5's blocks taken whole count what the full path counts.

use super::super::{Machine, Source};
use super::*;
use crate::trace::BinaryWriter;
use rocs_core::{Placement, Remapper};

/// A program-like trace in binary format versions 1 to 5: a loop's fetches, mostly
/// straight-line code, loads and stores on a stack, a structure walked field by field,
/// a heap walked with strides, accesses straddling lines and pages, and a stream larger
/// than every LLC so that its lines go all the way down.
fn trace_files(dir: &std::path::Path) -> [PathBuf; 5] {
    let mut events = Vec::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let (mut pc, mut fetch_size) = (0x40_0000u64, 4);
    let ev = |kind, addr, size| TraceEvent { kind, addr, size };
    for i in 0..400_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pc = match x % 50 {
            0 => 0x40_0000 + (x >> 40) % 0x8000,
            1..=5 => pc + fetch_size + 2,
            _ => pc + fetch_size,
        };
        fetch_size = 1 + (x >> 32) % 7;
        events.push(ev(TraceKind::Instr, pc, fetch_size));
        let field = 0x3000_0000 + (i * 40) % (1 << 20);
        match (x >> 8) % 6 {
            0 => events.push(ev(TraceKind::Load, 0x7ff0_0000 + (x >> 20) % 256 * 8, 8)),
            1 => events.push(ev(TraceKind::Store, 0x7ff0_0000 + (x >> 20) % 256 * 8, 8)),
            2 => events.push(ev(
                TraceKind::Modify,
                0x1000_0000 + (i * 24) % (1 << 22),
                16,
            )),
            // Straddles lines, now and then a page.
            3 => events.push(ev(TraceKind::Load, 0x2000_0000 + i * 61, 8)),
            4 => events.push(ev(TraceKind::Load, 0x4000_0000 + i * 64 % (160 << 20), 4)),
            _ => events.extend([
                ev(TraceKind::Load, field, 8),
                ev(TraceKind::Store, field + 8, 4),
                ev(TraceKind::Load, field + 12, 4),
            ]),
        }
    }
    [1, 2, 3, 4, 5].map(|version| {
        let mut w = BinaryWriter::with_version(Vec::new(), version).unwrap();
        for e in &events {
            w.write(e).unwrap();
        }
        let path = dir.join(format!("t.v{version}.rtrace"));
        std::fs::write(&path, w.finish().unwrap()).unwrap();
        path
    })
}

/// A machine with 32-byte L1 lines (and an L1I), smaller than most programs' lines.
fn short_lines() -> MachineSpec {
    let l1 = |which| format!("[{which}]\nsize = \"4KiB\"\nline = 32\nways = 4\nlatency = 1\n");
    let text = format!(
        "name = \"short-lines\"\nclock_ghz = 2.0\nbase_cpi = 0.5\npage_size = \"4KiB\"\n\
         memory = \"256MiB\"\nmemory_latency = 200\n{}{}\
         [llc]\nsize = \"256KiB\"\nline = 64\nways = 4\nlatency = 10\n",
        l1("l1i"),
        l1("l1d")
    );
    MachineSpec::from_toml("short-lines.toml", &text).unwrap()
}

/// Replays of versions 1 to 5 of a trace count the same, with the repeated-line skip (and
/// version 3's runs of repeats, version 4's runs of ring lines and version 5's blocks taken
/// whole) and without, on every built-in machine and one of 32-byte lines (where the runs,
/// of 64-byte lines, are replayed one by one), with pages migrating between windows: short
/// ones, in which no block of version 5 fits, and long ones, into which most do.
#[test]
fn every_version_and_the_repeat_skip_count_what_the_full_path_counts() {
    let dir = std::env::temp_dir().join(format!("rocs-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let [v1, v2, v3, v4, v5] = trace_files(&dir);
    // Most fetches are straight-line code: one byte each in version 2.
    let bytes = [&v1, &v2].map(|p| std::fs::metadata(p).unwrap().len());
    assert!(bytes[1] < bytes[0] * 7 / 8, "{bytes:?}");
    let machines = crate::spec::builtin_machines().into_iter();
    let specs = machines.map(|m| MachineSpec::resolve(m).unwrap());
    for (spec, window_cycles) in specs
        .chain([short_lines()])
        .flat_map(|spec| [(spec.clone(), 50_000), (spec, 5_000_000)])
    {
        let run = |path: &PathBuf, skip: bool| {
            let mut m = Machine::from_trace(&spec, TraceSpec::file(path), 7).unwrap();
            let Source::Trace(t) = &mut m.procs[0].source else {
                unreachable!()
            };
            t.skip_repeats = skip;
            // Short windows (a migration costs some thousand cycles), and between
            // them pages migrate (their lines leave the caches), the hot ones too.
            let pid = m.pids()[0];
            let mut window = 0;
            while m.run_for_checked(window_cycles).unwrap() {
                let pages = m.pages(pid).unwrap();
                let moved = [pages[window % pages.len()], pages[pages.len() / 2]];
                let to = [Placement::Pollute, Placement::Restore][window % 2];
                m.migrate(pid, &moved, to).unwrap();
                window += 1;
            }
            // The counts, not the process names (the traces' paths).
            let totals = m.totals();
            let per_process: Vec<_> = totals.processes.iter().map(|p| p.counts).collect();
            (totals.counts, per_process, m.now())
        };
        let name = format!("{} in windows of {window_cycles} cycles", spec.name);
        let full = run(&v1, false);
        assert!(
            full.0.llc_misses > 0 && full.0.l1d_accesses > 300_000,
            "{name}"
        );
        assert!(full.0.pages_migrated > 4, "{name}");
        let cases = [
            (&v1, true),
            (&v2, false),
            (&v2, true),
            (&v3, false),
            (&v3, true),
            (&v4, false),
            (&v4, true),
            (&v5, false),
            (&v5, true),
        ];
        for (path, skip) in cases {
            assert_eq!(
                run(path, skip),
                full,
                "{name}: {}, skip {skip}",
                path.display()
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
