//! Plan selection and geometry detection against fixture trees of real CPUs.

use std::path::PathBuf;

use rocs_core::DataSource;
use rocs_linux::datasrc::IbsDataSrcEncoding;
use rocs_linux::perf_abi::*;
use rocs_linux::{
    detect_geometry, select_plan, CpuInfo, EventChoice, KernelVersion, PlanKind, PmuInventory,
    SourceRule,
};

fn fixture(name: &str) -> (CpuInfo, PmuInventory, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let cpu = CpuInfo::parse(&std::fs::read_to_string(dir.join("cpuinfo")).unwrap());
    let sys = dir.join("sys");
    (cpu, PmuInventory::read(&sys), sys)
}

const NEW: KernelVersion = KernelVersion::new(6, 18, 0);

#[test]
fn skylake_sp_uses_load_retired_hit_and_miss() {
    let (cpu, pmus, _) = fixture("skylake-sp");
    let plan = select_plan(&cpu, &pmus, NEW, EventChoice::Auto).unwrap();
    assert_eq!(plan.kind, PlanKind::IntelLoadRetired);
    let evs: Vec<_> = plan.events().collect();
    assert_eq!(evs.len(), 2);
    assert_eq!((evs[0].pmu_type, evs[0].config), (4, 0x20d1));
    assert_eq!(evs[0].source, SourceRule::Fixed(DataSource::LlcMiss));
    assert_eq!(evs[1].config, 0x04d1);
    assert_eq!(evs[1].source, SourceRule::Fixed(DataSource::LlcHit));
    assert!(evs.iter().all(|e| e.precise_ip >= 2));
    assert!(evs.iter().all(|e| e.sample_type
        & (SAMPLE_ADDR | SAMPLE_TID | SAMPLE_TIME | SAMPLE_DATA_SRC | SAMPLE_WEIGHT)
        == SAMPLE_ADDR | SAMPLE_TID | SAMPLE_TIME | SAMPLE_DATA_SRC | SAMPLE_WEIGHT));
    assert!(plan.measures_llc);
    assert!(plan.default_period >= 1000);
}

#[test]
fn ice_lake_uses_load_retired() {
    let (cpu, pmus, _) = fixture("icelake-sp");
    let plan = select_plan(&cpu, &pmus, NEW, EventChoice::Auto).unwrap();
    assert_eq!(plan.kind, PlanKind::IntelLoadRetired);
}

#[test]
fn sapphire_rapids_uses_load_latency_with_aux_leader() {
    let (cpu, pmus, _) = fixture("sapphire-rapids");
    let plan = select_plan(&cpu, &pmus, NEW, EventChoice::Auto).unwrap();
    assert_eq!(plan.kind, PlanKind::IntelLoadLatency);
    assert_eq!(plan.groups.len(), 1);
    let g = &plan.groups[0];
    assert_eq!(g[0].name, "mem-loads-aux");
    assert_eq!(g[0].config, 0x8203);
    assert!(!g[0].samples);
    assert_eq!(
        (g[1].config, g[1].config1),
        (0x01cd, 30),
        "ldlat=30 in config1"
    );
    assert_eq!(g[1].source, SourceRule::DataSrc);
}

#[test]
fn zen3_and_zen4_use_ibs_op_with_its_dynamic_type() {
    for name in ["zen3", "zen4"] {
        let (cpu, pmus, _) = fixture(name);
        let plan = select_plan(&cpu, &pmus, NEW, EventChoice::Auto).unwrap();
        assert_eq!(plan.kind, PlanKind::AmdIbsOp, "{name}");
        let ev = plan.events().next().unwrap();
        assert_eq!(ev.pmu_type, 11, "type from ibs_op/type");
        assert_eq!(ev.config, 1 << 19, "cnt_ctl: count ops");
        assert_eq!(ev.source, SourceRule::DataSrc);
        assert!(ev.sample_type & SAMPLE_DATA_SRC != 0);
    }
    let (cpu, pmus, _) = fixture("zen3");
    let old = select_plan(&cpu, &pmus, KernelVersion::new(5, 15, 0), EventChoice::Auto).unwrap();
    assert_eq!(old.kind, PlanKind::AmdIbsOpRaw);
    let ev = old.events().next().unwrap();
    // Zen 3 (family 19h): the PPR's DataSrc encoding, with erratum 1293 on models 00h-0Fh.
    assert_eq!(
        ev.source,
        SourceRule::IbsRaw(IbsDataSrcEncoding::Zen {
            erratum_1293: cpu.model <= 0x0f
        })
    );
    assert!(ev.sample_type & SAMPLE_RAW != 0 && ev.sample_type & SAMPLE_DATA_SRC == 0);
}

#[test]
fn neoverse_with_spe_is_refused_with_what_to_do() {
    // rocsd's probe takes any plan select_plan gives; an SPE plan it cannot sample live
    // would start "full" and fail every target. It must refuse at start instead.
    let (cpu, pmus, _) = fixture("neoverse-n1");
    let err = select_plan(&cpu, &pmus, NEW, EventChoice::Auto).unwrap_err();
    assert!(err.why.contains("arm_spe_0"), "{err}");
    assert!(
        err.fix.contains("perf inject") && err.fix.contains("rocsctl profile --perf-data"),
        "{err}"
    );
    assert!(err.fix.contains("allow_observe_only"), "{err}");
    let sw = select_plan(&cpu, &pmus, NEW, EventChoice::PageFaults).unwrap();
    assert_eq!(sw.kind, PlanKind::SoftwarePageFaults);
}

#[test]
fn vm_without_vpmu_has_no_hardware_plan_and_says_why() {
    let (cpu, pmus, _) = fixture("vm-no-pmu");
    let err = select_plan(&cpu, &pmus, NEW, EventChoice::Auto).unwrap_err();
    assert!(err.why.contains("virtual machine"), "{err}");
    assert!(err.fix.contains("--event page-faults"), "{err}");
    let sw = select_plan(&cpu, &pmus, NEW, EventChoice::PageFaults).unwrap();
    assert_eq!(sw.kind, PlanKind::SoftwarePageFaults);
    assert!(!sw.measures_llc);
    assert!(sw.label.contains("NOT"));
}

#[test]
fn geometry_from_fixtures_counts_colours_per_slice() {
    // (fixture, slices, sets per slice, colours for 4 KiB pages)
    for (name, slices, sets, colours) in [
        ("skylake-sp", 20, 2048, 32),
        ("icelake-sp", 40, 2048, 32),
        ("sapphire-rapids", 56, 2048, 32),
        ("zen3", 8, 4096, 64),
        ("zen4", 8, 4096, 64),
        ("neoverse-n1", 1, 2048, 32),
        ("vm-no-pmu", 2, 16384, 256),
        // 2 vCPUs of a 26-slice Skylake-SP (this CI machine): 53,248 sets, 11 ways.
        ("vm-skylake-sp", 13, 4096, 64),
    ] {
        let (cpu, _, sys) = fixture(name);
        let g = detect_geometry(&sys, &cpu, 4096, None).unwrap();
        assert_eq!(
            (g.llc.slices, g.llc.sets_per_slice, g.colours),
            (slices, sets, colours),
            "{name}"
        );
        assert!(!g.overridden);
    }
}

#[test]
fn geometry_override_wins_and_bad_trees_are_errors() {
    let (cpu, _, sys) = fixture("zen3");
    let o = rocs_core::CacheGeometry::new(128, 512, 8, 1, 4096).unwrap();
    let g = detect_geometry(&sys, &cpu, 4096, Some(o)).unwrap();
    assert!(g.overridden);
    assert_eq!(g.colours, 16);
    let err = detect_geometry(std::path::Path::new("/nonexistent"), &cpu, 4096, None).unwrap_err();
    assert!(err.to_string().contains("config"), "{err}");
}
