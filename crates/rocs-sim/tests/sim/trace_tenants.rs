//! Several traces on one machine are processes sharing its LLC: each replays its trace in a
//! loop up to its length, gets its own frames (the same ones however the tenants' paces
//! interleave), and a streaming neighbour costs a reusing tenant the LLC hits it had alone.

use std::path::{Path, PathBuf};

use rocs_core::{Remapper, Sampler, SamplingPlan, VirtPage};
use rocs_sim::{Machine, MachineSpec, ProcessStats, TraceSpec};

fn work_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rocs-sim-tenants-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A lackey trace that goes once over `bytes` of data from `base`, a load every `stride`
/// bytes, with `instrs` instruction fetches before each load.
fn write_pass(path: &Path, base: u64, bytes: u64, stride: u64, instrs: u64) {
    let mut t = String::new();
    for off in (0..bytes).step_by(stride as usize) {
        for i in 0..instrs {
            t.push_str(&format!("I  {:08x},4\n", 0x40_0000 + 4 * i));
        }
        t.push_str(&format!(" L {:08x},8\n", base + off));
    }
    std::fs::write(path, t).unwrap();
}

fn looped(path: &Path, length: u64) -> TraceSpec {
    TraceSpec {
        length: Some(length),
        ..TraceSpec::file(path)
    }
}

fn run(spec: &MachineSpec, traces: Vec<TraceSpec>) -> Vec<ProcessStats> {
    let mut m = Machine::from_traces(spec, traces, 7).unwrap();
    m.run_to_end().unwrap();
    m.totals().processes
}

#[test]
fn each_tenant_replays_its_trace_in_a_loop_up_to_its_length() {
    let dir = work_dir("length");
    let (a, b) = (dir.join("a.lackey"), dir.join("b.lackey"));
    // a: 64 KiB once = 16384 references; b: 4 KiB once = 1024 references.
    write_pass(&a, 0x100_0000, 64 << 10, 8, 1);
    write_pass(&b, 0x200_0000, 4 << 10, 8, 1);
    let length = 100_001;
    let tiny = MachineSpec::resolve("tiny").unwrap();
    let procs = run(&tiny, vec![looped(&a, length), looped(&b, length)]);
    assert_eq!(procs.len(), 2);
    for p in &procs {
        // Every reference is an instruction fetch or a data access; an odd length stops
        // after a fetch.
        assert_eq!(p.instructions + p.l1d_accesses, length, "{}", p.name);
        assert_eq!(p.instructions, length / 2 + 1, "{}", p.name);
    }
    assert!(procs[0].name.ends_with("a.lackey") && procs[1].name.ends_with("b.lackey"));
    // b's 4 KiB fits the 4 KiB L1D: after its first pass every load hits, in every pass.
    assert_eq!(procs[1].l1d_misses, 64, "b misses only its first pass");
    // a's 64 KiB fits the 256 KiB LLC: it misses there only on its first pass (1024 lines)
    // and on its code line.
    assert_eq!(procs[0].llc_data_misses, 1024);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tenant's layout is its own: sampling one tenant slows it, so the two tenants' first
/// touches interleave differently, and yet every page of both gets the same frame colour as
/// in the run without sampling. (Sharing one order of frames, the pace decided the layout,
/// and a run with rocs was compared with a baseline of another layout.)
#[test]
fn each_tenant_gets_the_same_frames_whatever_the_pace_of_the_other() {
    let dir = work_dir("layout");
    let (a, b) = (dir.join("a.lackey"), dir.join("b.lackey"));
    write_pass(&a, 0x100_0000, 512 << 10, 64, 2);
    write_pass(&b, 0x200_0000, 512 << 10, 64, 2);
    let ppc = MachineSpec::resolve("ppc970fx").unwrap();
    let specs = || vec![looped(&a, 40_000), looped(&b, 40_000)];
    let mut plain = Machine::from_traces(&ppc, specs(), 3).unwrap();
    plain.run_to_end().unwrap();
    let mut sampled = Machine::from_traces(&ppc, specs(), 3).unwrap();
    let plan = SamplingPlan {
        period: 3,
        cpu_budget: 1.0,
    };
    Sampler::start(&mut sampled, 1000, &plan).unwrap();
    sampled.run_to_end().unwrap();
    let cycles = |m: &Machine| m.totals().processes[0].cycles;
    assert!(
        cycles(&sampled) > cycles(&plain) * 11 / 10,
        "sampling slowed the first tenant: {} against {} cycles",
        cycles(&sampled),
        cycles(&plain)
    );
    for (pid, base) in [(1000, 0x100_0000u64), (1001, 0x200_0000)] {
        let pages: Vec<VirtPage> = (0..128).map(|i| VirtPage((base >> 12) + i)).collect();
        let plain_colours = plain.query(pid, &pages).unwrap();
        assert!(
            plain_colours.iter().all(|c| c.is_ok()),
            "every page touched"
        );
        assert_eq!(
            plain_colours,
            sampled.query(pid, &pages).unwrap(),
            "pid {pid}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_streaming_neighbour_takes_the_llc_from_a_reusing_tenant() {
    let dir = work_dir("neighbour");
    let (reuse, stream) = (dir.join("reuse.lackey"), dir.join("stream.lackey"));
    // tiny, but with memory as fast as its LLC: the stream (a load a line) then brings in
    // about 4 lines while the reusing loop (8 loads a line, 8 instructions a load) goes
    // through one, so between two uses of a reused line its 4-way set sees about 4 stream
    // lines: LRU evicts it. Alone, the 64 KiB reused fit the 256 KiB LLC.
    let tiny = MachineSpec::resolve("tiny").unwrap();
    let spec = MachineSpec {
        memory_latency: tiny.llc.latency,
        ..tiny
    };
    write_pass(&reuse, 0x100_0000, 64 << 10, 8, 8);
    write_pass(&stream, 0x800_0000, 4 << 20, 64, 1);
    let length = 1_000_000;
    let alone = run(&spec, vec![looped(&reuse, length)]);
    let shared = run(&spec, vec![looped(&reuse, length), looped(&stream, length)]);
    assert_eq!(alone[0].l1d_misses, shared[0].l1d_misses, "private L1Ds");
    // Alone, the first of the ~13 passes misses the LLC (and a set whose random frames
    // share a colour with too many others could miss again).
    let first_pass = (64 << 10) / 64;
    assert!(
        alone[0].llc_data_misses < 2 * first_pass,
        "{} misses alone",
        alone[0].llc_data_misses
    );
    eprintln!(
        "reusing tenant's LLC data misses: {} alone, {} beside the stream",
        alone[0].llc_data_misses, shared[0].llc_data_misses
    );
    assert!(
        shared[0].llc_data_misses > 5 * alone[0].llc_data_misses,
        "the stream evicts the reused set"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_tenant_specs_are_refused_with_a_reason() {
    let dir = work_dir("refused");
    let a = dir.join("a.lackey");
    write_pass(&a, 0x100_0000, 4096, 8, 1);
    let empty = dir.join("empty.lackey");
    std::fs::write(&empty, "==1== nothing traced\n").unwrap();
    let spec = MachineSpec::resolve("tiny").unwrap();
    let err = |traces: Vec<TraceSpec>| match Machine::from_traces(&spec, traces, 1) {
        Ok(mut m) => m.run_to_end().unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err(vec![]).contains("no trace"));
    let e = err(vec![looped(&a, 0)]);
    assert!(e.contains("length of 0"), "{e}");
    let e = err(vec![TraceSpec {
        repeat: 2,
        ..looped(&a, 10)
    }]);
    assert!(e.contains("not both"), "{e}");
    let identity = TraceSpec {
        identity_map: true,
        ..TraceSpec::file(&a)
    };
    let e = err(vec![identity, TraceSpec::file(&a)]);
    assert!(e.contains("identity mapping is for one trace"), "{e}");
    let e = err(vec![looped(&empty, 10)]);
    assert!(e.contains("no references to replay in a loop"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
