//! Faithful: a real program (Debian's `sort` on a fixed input) is run under valgrind's
//! lackey (memory trace) and under cachegrind (cache simulation) with explicit geometries;
//! replaying the lackey trace on a machine of the same geometry (LRU, identity-mapped) must
//! give the same L1D misses (D1mr + D1mw) and LLC data misses (DLmr + DLmw), within 1%; and
//! the trace converted to rocs's binary format (any version) must replay to exactly the
//! same counts.
//!
//! The model follows cachegrind where it matters: an access straddling two lines touches
//! both and is one access (a miss if either line misses), and both lines go to the LL
//! when the L1 missed; a modify (`M`) is one access; instruction fetches go through the L1I
//! into the same LL; the LL is not inclusive; sizes are clamped to the smallest line.

use crate::common;

use std::path::{Path, PathBuf};

use rocs_sim::{
    BinaryWriter, Machine, MachineSpec, RunStats, TraceFormat, TraceInput, TraceReader, TraceSpec,
};

struct Geometry {
    name: &'static str,
    /// (size, ways, line) for I1, D1, LL.
    i1: (u64, u64, u64),
    d1: (u64, u64, u64),
    ll: (u64, u64, u64),
}

const GEOMETRIES: &[Geometry] = &[
    Geometry {
        name: "64B lines, 8-way L1s, 256KB LL",
        i1: (32768, 8, 64),
        d1: (32768, 8, 64),
        ll: (262144, 8, 64),
    },
    Geometry {
        name: "ppc970fx-like: 128B lines, 2-way D1, direct-mapped I1, 512KB LL",
        i1: (65536, 1, 128),
        d1: (32768, 2, 128),
        ll: (524288, 8, 128),
    },
];

fn work_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("rocs-sim-fidelity-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fixed input: 3000 lines in a scrambled order.
fn write_input(dir: &Path) -> PathBuf {
    let mut s = String::new();
    for i in 1..=3000u64 {
        s.push_str(&format!(
            "{} line {:x}\n",
            (i * 7919) % 20011,
            (i * 2_654_435_761) % (1 << 32)
        ));
    }
    let p = dir.join("input.txt");
    std::fs::write(&p, s).unwrap();
    p
}

fn sort_under(tool_args: &[String], input: &Path) {
    let dir = input.parent().expect("in a directory");
    common::valgrind(
        tool_args,
        dir,
        "sort",
        &[input.to_str().expect("a UTF-8 path")],
        &[],
    );
}

/// The `summary:` line of a cachegrind output file, by event name.
fn cachegrind_summary(path: &Path) -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap();
    let events: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .expect("events line")
        .split_whitespace()
        .collect();
    let values: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .expect("summary line")
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    events.iter().map(|e| e.to_string()).zip(values).collect()
}

fn profile_for(g: &Geometry) -> MachineSpec {
    let level = |(size, ways, line): (u64, u64, u64)| {
        format!("size = {size}\nline = {line}\nways = {ways}\npolicy = \"lru\"\n")
    };
    let text = format!(
        "name = \"cachegrind-geometry\"\nclock_ghz = 1.0\nbase_cpi = 1.0\npage_size = \"4KiB\"\nmemory = \"64MiB\"\nmemory_latency = 100\n[l1i]\n{}[l1d]\n{}[llc]\n{}",
        level(g.i1),
        level(g.d1),
        level(g.ll)
    );
    MachineSpec::from_toml("cachegrind-geometry.toml", &text).unwrap()
}

fn within_1pct(what: &str, ours: u64, theirs: u64) {
    let diff = ours.abs_diff(theirs) as f64;
    assert!(
        diff <= 0.01 * theirs as f64,
        "{what}: rocs-sim {ours} vs cachegrind {theirs} ({:.2}% apart)",
        diff * 100.0 / theirs.max(1) as f64
    );
}

fn convert(lackey: &Path, binary: &Path, version: u32) {
    let input = std::io::BufReader::new(std::fs::File::open(lackey).unwrap());
    let mut r = TraceReader::new(Box::new(input), TraceFormat::Lackey).unwrap();
    let out = std::io::BufWriter::new(std::fs::File::create(binary).unwrap());
    let mut w = BinaryWriter::with_version(out, version).unwrap();
    while let Some(ev) = r.next_event().unwrap() {
        w.write(&ev).unwrap();
    }
    w.finish().unwrap();
}

fn replay(profile: &MachineSpec, trace: &Path, format: TraceFormat) -> RunStats {
    let mut m = Machine::from_trace(
        profile,
        TraceSpec {
            input: TraceInput::File(trace.to_path_buf()),
            format,
            repeat: 1,
            length: None,
            identity_map: true,
        },
        1,
    )
    .unwrap();
    m.run_to_end().unwrap();
    m.totals()
}

#[test]
fn lackey_and_binary_replays_match_cachegrind_on_sort() {
    if !common::have("valgrind") {
        eprintln!(
            "\n*** SKIPPED: valgrind is not installed, so the cachegrind fidelity test cannot run.\n*** Install it (apt-get install valgrind; tests/all.sh does) to check the simulator against cachegrind.\n"
        );
        return;
    }
    let dir = work_dir();
    let input = write_input(&dir);
    let trace = dir.join("lackey.txt");
    sort_under(
        &[
            "--tool=lackey".into(),
            "--trace-mem=yes".into(),
            format!("--log-file={}", trace.display()),
        ],
        &input,
    );
    let binaries = [1, 2, 3, 4, 5].map(|version| {
        let binary = dir.join(format!("trace.v{version}.rtrace"));
        convert(&trace, &binary, version);
        binary
    });
    for g in GEOMETRIES {
        let cg_out = dir.join("cachegrind.out");
        let spec = |(size, ways, line): (u64, u64, u64)| format!("{size},{ways},{line}");
        sort_under(
            &[
                "--tool=cachegrind".into(),
                "--cache-sim=yes".into(),
                format!("--I1={}", spec(g.i1)),
                format!("--D1={}", spec(g.d1)),
                format!("--LL={}", spec(g.ll)),
                format!("--cachegrind-out-file={}", cg_out.display()),
            ],
            &input,
        );
        let cg = cachegrind_summary(&cg_out);
        let profile = profile_for(g);
        // Cachegrind models no prefetcher, no TLB and no victim LLC: agreement is with them
        // off (with them on, a trace takes the path generated workloads take there).
        assert!(!profile.has_modern_models());
        let t = replay(&profile, &trace, TraceFormat::Lackey);
        for binary in &binaries {
            let from_binary = replay(&profile, binary, TraceFormat::Binary);
            assert_eq!(
                from_binary.counts,
                t.counts,
                "{} replays to the same counts",
                binary.display()
            );
        }
        eprintln!(
            "{}: D1 misses {} vs {}, LL data misses {} vs {}, I1 misses {} vs {}",
            g.name,
            t.l1d_misses,
            cg["D1mr"] + cg["D1mw"],
            t.llc_data_misses,
            cg["DLmr"] + cg["DLmw"],
            t.l1i_misses,
            cg["I1mr"]
        );
        assert!(t.instructions > 1_000_000, "a real run: {}", t.instructions);
        within_1pct("instructions", t.instructions, cg["Ir"]);
        within_1pct("data accesses", t.l1d_accesses, cg["Dr"] + cg["Dw"]);
        within_1pct("D1 misses", t.l1d_misses, cg["D1mr"] + cg["D1mw"]);
        within_1pct("LL data misses", t.llc_data_misses, cg["DLmr"] + cg["DLmw"]);
        within_1pct("I1 misses", t.l1i_misses, cg["I1mr"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
