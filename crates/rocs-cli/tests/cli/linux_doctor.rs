//! `rocsctl doctor` and `rocsctl geometry` on this machine.

use assert_cmd::Command;
use serde_json::Value;

fn rocsctl() -> Command {
    Command::cargo_bin("rocsctl").unwrap()
}

fn has_core_pmu() -> bool {
    ["cpu", "cpu_core"].iter().any(|p| {
        std::path::Path::new("/sys/bus/event_source/devices")
            .join(p)
            .exists()
    }) || std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("armv"))
        })
        .unwrap_or(false)
}

#[test]
fn doctor_json_tells_the_truth_about_the_pmu_and_every_no_has_a_fix() {
    let out = rocsctl().args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let get = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check"))
    };
    let pmu = get("hardware_pmu");
    if has_core_pmu() {
        assert_eq!(pmu["status"], "yes");
    } else {
        assert_eq!(pmu["status"], "no", "{pmu}");
        assert!(pmu["detail"].as_str().unwrap().contains("no hardware PMU"));
        assert_eq!(v["precise_sampling"], false);
        if std::fs::read_to_string("/proc/cpuinfo")
            .unwrap()
            .contains(" hypervisor")
        {
            assert!(
                pmu["detail"].as_str().unwrap().contains("virtual machine"),
                "{pmu}"
            );
        }
    }
    for c in checks {
        if c["status"] == "no" || c["status"] == "warn" {
            assert!(
                c["fix"].as_str().is_some_and(|f| !f.is_empty()),
                "a 'no' without a fix: {c}"
            );
        }
    }
    for name in [
        "perf_event_paranoid",
        "capabilities",
        "thp",
        "shim",
        "software_sampling",
        "counting_group",
        "geometry",
    ] {
        get(name);
    }
    if !std::path::Path::new("/dev/rocs_shim").exists() {
        assert!(get("shim")["detail"]
            .as_str()
            .unwrap()
            .contains("not loaded"));
    }
}

#[test]
fn doctor_text_says_what_to_do() {
    let out = rocsctl().arg("doctor").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("hardware_pmu"));
    if !has_core_pmu() {
        assert!(text.contains("NO   hardware_pmu"), "{text}");
        assert!(text.contains("->"), "{text}");
    }
}

#[test]
fn geometry_json_matches_sysfs() {
    let out = rocsctl().args(["geometry", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let llc = &v["llc"];
    // The LLC is the highest level sysfs lists; its size must be what sysfs says.
    let mut best = (0u64, 0u64);
    for e in std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache")
        .unwrap()
        .flatten()
    {
        let p = e.path();
        let Ok(level) = std::fs::read_to_string(p.join("level")) else {
            continue;
        };
        let level: u64 = level.trim().parse().unwrap();
        let size = std::fs::read_to_string(p.join("size")).unwrap();
        let kib: u64 = size.trim().trim_end_matches('K').parse().unwrap();
        if level > best.0 {
            best = (level, kib << 10);
        }
    }
    let size = llc["line_size"].as_u64().unwrap()
        * llc["sets_per_slice"].as_u64().unwrap()
        * llc["ways"].as_u64().unwrap()
        * llc["slices"].as_u64().unwrap();
    assert_eq!(size, best.1);
    assert_eq!(
        v["colours"].as_u64().unwrap(),
        llc["sets_per_slice"].as_u64().unwrap() * llc["line_size"].as_u64().unwrap()
            / llc["page_size"].as_u64().unwrap()
    );
}
