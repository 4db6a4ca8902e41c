//! The Intel models whose L2 prefetchers rocs switches off (rocs_linux::prefetch) checked
//! against the kernel's own numbering, arch/x86/include/asm/intel-family.h of the installed
//! Debian kernel headers (tests/all.sh installs linux-headers-amd64), not against our table.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rocs_linux::prefetch::INTEL_MODELS;

/// Every intel-family.h under /usr/src.
fn headers() -> Vec<PathBuf> {
    let Ok(dirs) = std::fs::read_dir("/usr/src") else {
        return Vec::new();
    };
    dirs.filter_map(|d| {
        let path = d.ok()?.path().join("arch/x86/include/asm/intel-family.h");
        path.exists().then_some(path)
    })
    .collect()
}

/// The family-6 models a header names: `#define INTEL_FAM6_NAME 0xNN` (before Linux 6.10)
/// or `#define INTEL_NAME IFM(6, 0xNN)` (after).
fn family6_models(text: &str) -> BTreeMap<String, u32> {
    let mut models = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let (name, number) = if let Some(name) = name.strip_prefix("INTEL_FAM6_") {
            (name, value)
        } else if let (Some(name), Some((_, after))) =
            (name.strip_prefix("INTEL_"), line.split_once("IFM(6,"))
        {
            (name, after.split(')').next().unwrap_or(""))
        } else {
            continue;
        };
        let hex = number
            .trim()
            .trim_start_matches("0x")
            .trim_start_matches("0X");
        if let Ok(model) = u32::from_str_radix(hex, 16) {
            models.insert(name.to_string(), model);
        }
    }
    models
}

#[test]
fn every_model_switched_is_the_kernel_s_number_for_its_name() {
    let headers = headers();
    assert!(
        !headers.is_empty(),
        "no /usr/src/*/arch/x86/include/asm/intel-family.h: install linux-headers-amd64 \
         (tests/all.sh does)"
    );
    for header in headers {
        let text = std::fs::read_to_string(&header).unwrap();
        let kernel = family6_models(&text);
        assert!(
            kernel.len() > 40,
            "{}: read only {} models; is its format new?",
            header.display(),
            kernel.len()
        );
        for &(model, name) in INTEL_MODELS {
            assert_eq!(
                kernel.get(name),
                Some(&model),
                "{}: {name} is {} there, {model:#x} in rocs_linux::prefetch",
                header.display(),
                kernel
                    .get(name)
                    .map_or("not named".to_string(), |m| format!("{m:#x}"))
            );
        }
        // And no core of the families we switch is left out: a Skylake or Ice Lake the
        // kernel names but rocs refuses would be a silent gap.
        let families = [
            "NEHALEM",
            "WESTMERE",
            "SANDYBRIDGE",
            "IVYBRIDGE",
            "HASWELL",
            "BROADWELL",
            "SKYLAKE",
            "KABYLAKE",
            "COMETLAKE",
            "CANNONLAKE",
            "ICELAKE",
            "ROCKETLAKE",
            "TIGERLAKE",
            "SAPPHIRERAPIDS",
            "EMERALDRAPIDS",
            "GRANITERAPIDS",
            "ALDERLAKE",
            "RAPTORLAKE",
            "METEORLAKE",
        ];
        for (name, model) in &kernel {
            // Alder Lake-N has only Gracemont (Atom) cores: not the big cores' register.
            let ours = families.iter().any(|f| name.starts_with(f)) && name != "ALDERLAKE_N";
            if ours {
                assert!(
                    INTEL_MODELS.iter().any(|(m, n)| m == model && n == name),
                    "{}: the kernel names {name} ({model:#x}), which rocs_linux::prefetch \
                     leaves out",
                    header.display()
                );
            }
        }
    }
}

#[test]
fn both_of_the_kernel_s_header_formats_are_read() {
    let old = "#define INTEL_FAM6_SAPPHIRERAPIDS_X\t0x8F\t/* Golden Cove */\n";
    let new = "#define INTEL_SAPPHIRERAPIDS_X\t\tIFM(6, 0x8F) /* Golden Cove */\n\
               #define INTEL_PANTHERCOVE_X\t\tIFM(19, 0x01) /* Diamond Rapids */\n";
    for text in [old, new] {
        let models = family6_models(text);
        assert_eq!(models.len(), 1, "{text}: {models:?}");
        assert_eq!(models.get("SAPPHIRERAPIDS_X"), Some(&0x8f), "{text}");
    }
}
