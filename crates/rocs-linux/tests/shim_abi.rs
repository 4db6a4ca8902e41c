//! The Rust mirror of the shim's ABI (`rocs_linux::shim::abi`) against the C header
//! `kmod-shim/include/uapi/rocs_shim.h`: a small C program compiled against the header
//! prints every size, field offset, constant and ioctl number, and each must equal what
//! the Rust side computes. Needs a C compiler (`cc`), as building Rust on Linux does.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use rocs_linux::shim::abi;

/// (name, value) pairs the C program prints, as C expressions over the header.
const C_VALUES: &[&str] = &[
    "sizeof(struct rocs_shim_info)",
    "offsetof(struct rocs_shim_info, abi_version)",
    "offsetof(struct rocs_shim_info, page_shift)",
    "offsetof(struct rocs_shim_info, colours)",
    "offsetof(struct rocs_shim_info, max_colours)",
    "offsetof(struct rocs_shim_info, max_pages)",
    "offsetof(struct rocs_shim_info, pool_limit)",
    "offsetof(struct rocs_shim_info, pool_frames)",
    "offsetof(struct rocs_shim_info, pollute_mask)",
    "sizeof(struct rocs_shim_config)",
    "offsetof(struct rocs_shim_config, colours)",
    "offsetof(struct rocs_shim_config, flags)",
    "offsetof(struct rocs_shim_config, pool_limit)",
    "offsetof(struct rocs_shim_config, pollute_mask)",
    "sizeof(struct rocs_shim_pages)",
    "offsetof(struct rocs_shim_pages, pid)",
    "offsetof(struct rocs_shim_pages, placement)",
    "offsetof(struct rocs_shim_pages, count)",
    "offsetof(struct rocs_shim_pages, addrs)",
    "offsetof(struct rocs_shim_pages, status)",
    "offsetof(struct rocs_shim_pages, colour)",
    "offsetof(struct rocs_shim_pages, flags)",
    "offsetof(struct rocs_shim_pages, moved)",
    "sizeof(struct rocs_shim_stats)",
    "offsetof(struct rocs_shim_stats, migrated_pollute)",
    "offsetof(struct rocs_shim_stats, migrated_restore)",
    "offsetof(struct rocs_shim_stats, already_placed)",
    "offsetof(struct rocs_shim_stats, failures)",
    "offsetof(struct rocs_shim_stats, frames_allocated)",
    "offsetof(struct rocs_shim_stats, frames_released)",
    "offsetof(struct rocs_shim_stats, pool_frames)",
    "offsetof(struct rocs_shim_stats, colours)",
    "offsetof(struct rocs_shim_stats, reserved)",
    "offsetof(struct rocs_shim_stats, held_by_colour)",
    "ROCS_SHIM_ABI_VERSION",
    "ROCS_SHIM_MAX_COLOURS",
    "ROCS_SHIM_MASK_WORDS",
    "ROCS_SHIM_MAX_PAGES",
    "ROCS_SHIM_MAX_POOL_LIMIT",
    "ROCS_SHIM_POLLUTE",
    "ROCS_SHIM_RESTORE",
    "ROCS_SHIM_ORDINARY",
    "ROCS_SHIM_CONFIG_PREFILL",
    "ROCS_SHIM_FAIL_UNMAPPED",
    "ROCS_SHIM_FAIL_NOT_PRESENT",
    "ROCS_SHIM_FAIL_SHARED",
    "ROCS_SHIM_FAIL_UNSUPPORTED",
    "ROCS_SHIM_FAIL_BUSY",
    "ROCS_SHIM_FAIL_NOMEM",
    "ROCS_SHIM_FAIL_EXITED",
    "ROCS_SHIM_FAIL_NR",
    "ROCS_SHIM_IOC_MAGIC",
    "ROCS_SHIM_IOC_INFO",
    "ROCS_SHIM_IOC_CONFIGURE",
    "ROCS_SHIM_IOC_MIGRATE",
    "ROCS_SHIM_IOC_QUERY",
    "ROCS_SHIM_IOC_STATS",
];

/// The same values from the Rust mirror, in the same order.
fn rust_values() -> Vec<u64> {
    use abi::{Config, Info, Pages, Stats};
    let v = |x: usize| x as u64;
    vec![
        v(size_of::<Info>()),
        v(offset_of!(Info, abi_version)),
        v(offset_of!(Info, page_shift)),
        v(offset_of!(Info, colours)),
        v(offset_of!(Info, max_colours)),
        v(offset_of!(Info, max_pages)),
        v(offset_of!(Info, pool_limit)),
        v(offset_of!(Info, pool_frames)),
        v(offset_of!(Info, pollute_mask)),
        v(size_of::<Config>()),
        v(offset_of!(Config, colours)),
        v(offset_of!(Config, flags)),
        v(offset_of!(Config, pool_limit)),
        v(offset_of!(Config, pollute_mask)),
        v(size_of::<Pages>()),
        v(offset_of!(Pages, pid)),
        v(offset_of!(Pages, placement)),
        v(offset_of!(Pages, count)),
        v(offset_of!(Pages, addrs)),
        v(offset_of!(Pages, status)),
        v(offset_of!(Pages, colour)),
        v(offset_of!(Pages, flags)),
        v(offset_of!(Pages, moved)),
        v(size_of::<Stats>()),
        v(offset_of!(Stats, migrated_pollute)),
        v(offset_of!(Stats, migrated_restore)),
        v(offset_of!(Stats, already_placed)),
        v(offset_of!(Stats, failures)),
        v(offset_of!(Stats, frames_allocated)),
        v(offset_of!(Stats, frames_released)),
        v(offset_of!(Stats, pool_frames)),
        v(offset_of!(Stats, colours)),
        v(offset_of!(Stats, reserved)),
        v(offset_of!(Stats, held_by_colour)),
        abi::ABI_VERSION.into(),
        v(abi::MAX_COLOURS),
        v(abi::MASK_WORDS),
        abi::MAX_PAGES,
        abi::MAX_POOL_LIMIT,
        abi::POLLUTE.into(),
        abi::RESTORE.into(),
        abi::ORDINARY.into(),
        abi::CONFIG_PREFILL.into(),
        v(abi::FAIL_UNMAPPED),
        v(abi::FAIL_NOT_PRESENT),
        v(abi::FAIL_SHARED),
        v(abi::FAIL_UNSUPPORTED),
        v(abi::FAIL_BUSY),
        v(abi::FAIL_NOMEM),
        v(abi::FAIL_EXITED),
        v(abi::FAIL_NR),
        abi::IOC_MAGIC.into(),
        abi::IOC_INFO,
        abi::IOC_CONFIGURE,
        abi::IOC_MIGRATE,
        abi::IOC_QUERY,
        abi::IOC_STATS,
    ]
}

/// Compile and run the C side; its output parsed as expression -> value.
fn c_values() -> BTreeMap<String, u64> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let include = root.join("kmod-shim/include/uapi");
    assert!(
        include.join("rocs_shim.h").exists(),
        "no header at {}",
        include.display()
    );
    let dir = tempfile::tempdir().expect("temporary directory");
    let source = dir.path().join("abi.c");
    let program = dir.path().join("abi");
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"rocs_shim.h\"\nint main(void) {\n",
    );
    for expr in C_VALUES {
        c.push_str(&format!(
            "    printf(\"%s=%llu\\n\", \"{}\", (unsigned long long)({expr}));\n",
            expr.replace('"', "\\\"")
        ));
    }
    c.push_str("    return 0;\n}\n");
    std::fs::write(&source, c).expect("write the C program");

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&program)
        .arg(&source)
        .arg("-I")
        .arg(&include)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e} (install gcc, or set CC)"));
    assert!(
        out.status.success(),
        "the ABI program does not compile against rocs_shim.h:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&program)
        .output()
        .expect("run the ABI program");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("ASCII output")
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once('=').expect("name=value");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn rust_mirror_matches_the_c_header() {
    let c = c_values();
    let rust = rust_values();
    assert_eq!(
        rust.len(),
        C_VALUES.len(),
        "the two lists must name the same values"
    );
    let mismatches: Vec<String> = C_VALUES
        .iter()
        .zip(&rust)
        .filter(|(expr, r)| c.get(**expr) != Some(r))
        .map(|(expr, r)| format!("{expr}: C {:?}, Rust {r}", c.get(*expr)))
        .collect();
    assert!(
        mismatches.is_empty(),
        "ABI mismatch:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn structs_have_no_implicit_padding() {
    // Every struct's size is the sum of its fields: the explicit padding is all there is.
    assert_eq!(size_of::<abi::Info>(), 4 * 4 + 3 * 8 + abi::MASK_WORDS * 8);
    assert_eq!(size_of::<abi::Config>(), 2 * 4 + 8 + abi::MASK_WORDS * 8);
    assert_eq!(size_of::<abi::Pages>(), 4 * 4 + 4 * 8);
    assert_eq!(
        size_of::<abi::Stats>(),
        3 * 8 + abi::FAIL_NR * 8 + 3 * 8 + 2 * 4 + abi::MAX_COLOURS * 8
    );
    // The ioctl size field has 14 bits.
    assert!(size_of::<abi::Stats>() < 1 << 14);
}

#[test]
fn abi_2_keeps_the_size_and_offsets_of_abi_1_pages() {
    // ABI 2 split ABI 1's `__u64 flags` into `colour` and `flags`; nothing else moved.
    use abi::Pages;
    assert_eq!(size_of::<Pages>(), 48);
    assert_eq!(
        [
            offset_of!(Pages, count),
            offset_of!(Pages, addrs),
            offset_of!(Pages, status),
            offset_of!(Pages, colour),
            offset_of!(Pages, flags),
            offset_of!(Pages, moved),
        ],
        [8, 16, 24, 32, 36, 40]
    );
}

/// The client against the real module: tests/vm/run.sh runs this (`--ignored`) inside its
/// qemu guest, where rocs_shim.ko is loaded and /proc/self/pagemap shows frame numbers.
#[test]
#[ignore = "needs a loaded rocs_shim (tests/vm/run.sh runs it inside a VM)"]
fn live_client_moves_pages_and_reports_each() {
    use rocs_core::{Colour, Errno, Placement, Remapper, VirtPage};
    use rocs_linux::shim::{ShimClient, ShimConfig, ShimError};
    use std::io::{Read, Seek, SeekFrom};

    const PAGES: usize = 64;
    let mut shim = ShimClient::open().expect("open /dev/rocs_shim");
    assert_eq!(shim.info().unwrap().abi_version, abi::ABI_VERSION);
    shim.configure(&ShimConfig {
        colours: 16,
        pollute: vec![Colour(3), Colour(9)],
        pool_limit: 1024,
        prefill: false,
    })
    .expect("CONFIGURE");
    let info = shim.info().unwrap();
    assert_eq!(
        (info.colours, info.pollute.clone()),
        (16, vec![Colour(3), Colour(9)])
    );

    let page = 1usize << shim.page_shift();
    // SAFETY: a fresh private anonymous mapping, used only through `mem` below and
    // unmapped at the end of the test.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGES * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    // SAFETY: `base` is a readable, writable mapping of PAGES * page bytes.
    let mem = unsafe { std::slice::from_raw_parts_mut(base as *mut u64, PAGES * page / 8) };
    for (i, w) in mem.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    let shift = shim.page_shift();
    let mut pages: Vec<VirtPage> = (0..PAGES)
        .map(|i| VirtPage::containing(base as u64 + (i * page) as u64, shift))
        .collect();
    // One page nobody mapped: its own error, the others unaffected.
    pages.push(VirtPage(1));

    let pagemap_colour = |p: VirtPage| -> u32 {
        let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
        f.seek(SeekFrom::Start(p.0 * 8)).unwrap();
        let mut e = [0u8; 8];
        f.read_exact(&mut e).unwrap();
        let e = u64::from_le_bytes(e);
        assert!(e >> 63 == 1, "page not present");
        (e & ((1 << 55) - 1)) as u32 % 16
    };

    for to in [Placement::Pollute, Placement::Restore, Placement::Pollute] {
        let results = shim.migrate(0, &pages, to).expect("MIGRATE");
        assert_eq!(results.len(), PAGES + 1);
        assert_eq!(results[PAGES], Err(Errno::EFAULT));
        let queried = shim.query(0, &pages).expect("QUERY");
        for (i, r) in results[..PAGES].iter().enumerate() {
            let Ok(Colour(c)) = *r else {
                panic!("page {i}: {r:?}")
            };
            assert_eq!(
                c == 3 || c == 9,
                to == Placement::Pollute,
                "page {i} on colour {c}"
            );
            assert_eq!(pagemap_colour(pages[i]), c, "page {i}: pagemap disagrees");
            assert_eq!(queried[i], Ok(Colour(c)), "page {i}: QUERY disagrees");
        }
    }

    // Out of the pollute buffer onto one chosen ordinary colour; then they stay there.
    let before = shim.stats().expect("STATS");
    for round in 0..2 {
        let results = shim
            .migrate(0, &pages, Placement::Ordinary(Colour(5)))
            .expect("MIGRATE to Ordinary");
        assert_eq!(results[PAGES], Err(Errno::EFAULT));
        let queried = shim.query(0, &pages).expect("QUERY");
        for (i, r) in results[..PAGES].iter().enumerate() {
            assert_eq!(*r, Ok(Colour(5)), "round {round}, page {i}");
            assert_eq!(pagemap_colour(pages[i]), 5, "page {i}: pagemap disagrees");
            assert_eq!(queried[i], Ok(Colour(5)), "page {i}: QUERY disagrees");
        }
    }
    let after = shim.stats().expect("STATS");
    assert_eq!(
        after.migrated_restore - before.migrated_restore,
        PAGES as u64
    );
    assert_eq!(after.already_placed - before.already_placed, PAGES as u64);
    // A pollute colour, or one beyond the colours: every page gets EINVAL and stays.
    for bad in [Colour(3), Colour(16), Colour(u32::MAX)] {
        let results = shim
            .migrate(0, &pages, Placement::Ordinary(bad))
            .expect("MIGRATE to a bad colour answers per page");
        assert!(
            results.iter().all(|r| *r == Err(Errno::EINVAL)),
            "{bad:?}: {results:?}"
        );
    }
    assert!(shim
        .query(0, &pages[..PAGES])
        .unwrap()
        .iter()
        .all(|r| *r == Ok(Colour(5))));
    assert!(mem
        .iter()
        .enumerate()
        .all(|(i, w)| *w == (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let stats = shim.stats().expect("STATS");
    assert!(stats.migrated_pollute >= PAGES as u64 && stats.migrated_restore >= PAGES as u64 / 2);
    assert_eq!(stats.held_by_colour.len(), 16);
    assert_eq!(stats.held_by_colour.iter().sum::<u64>(), stats.pool_frames);

    assert!(matches!(
        shim.migrate(0x7fff_fff0, &pages[..1], Placement::Pollute),
        Err(ShimError::TargetGone { pid: 0x7fff_fff0 })
    ));
    assert!(shim.migrate(0, &[], Placement::Pollute).unwrap().is_empty());
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(base, PAGES * page) };
}
