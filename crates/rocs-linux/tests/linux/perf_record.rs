//! perf.data files written by the real perf tool with zstd-compressed records
//! (`perf record -z`) import with exactly `perf script`'s per-page counts.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use rocs_linux::read_perf_data;

fn perf(args: &[&str], data: &Path) -> String {
    let out = Command::new("perf")
        .args(args)
        .arg(data)
        .output()
        .expect("this test needs the perf tool (Debian: linux-perf; tests/all.sh installs it)");
    assert!(
        out.status.success(),
        "perf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Samples per 4 KiB page from `perf script -F addr`.
fn perf_script_pages(data: &Path) -> HashMap<u64, u64> {
    let mut pages = HashMap::new();
    for line in perf(&["script", "-F", "addr", "-i"], data).lines() {
        let addr = u64::from_str_radix(line.trim(), 16).unwrap();
        *pages.entry(addr & !0xfff).or_insert(0) += 1;
    }
    pages
}

#[test]
fn zstd_compressed_files_import_with_perf_scripts_counts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("z.data");
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-z",
            "-e",
            "page-faults",
            "-c",
            "1",
            "-d",
            "-o",
        ])
        .arg(&data)
        .args([
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=8M",
            "count=2",
        ])
        .args(["status=none"])
        .status()
        .expect("perf runs");
    assert!(st.success());
    // The records really are compressed: perf says so in the file's header.
    let header = perf(&["report", "--header-only", "-i"], &data);
    assert!(header.contains("# compressed : Zstd"), "{header}");

    let (table, summary) = read_perf_data(&data, None, 12).unwrap();
    let theirs = perf_script_pages(&data);
    assert!(
        theirs.len() >= 2048,
        "8 MiB are 2048 pages: {}",
        theirs.len()
    );
    let ours: HashMap<u64, u64> = table
        .sorted()
        .into_iter()
        .map(|(page, c)| (page.0 << 12, u64::from(c.hits + c.misses + c.other)))
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(summary.imported, theirs.values().sum::<u64>());
    assert_eq!(summary.events[0].name.as_deref(), Some("page-faults"));
}
