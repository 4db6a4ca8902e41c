//! `prefetchers_off_while_profiling = true` on the linux platform: rocsd either switches the
//! L2 prefetchers (and says so at start) or refuses to start, saying why and what to do; it
//! never profiles with them on when told to switch them off.

use crate::common;

#[test]
fn rocsd_switches_the_prefetchers_or_refuses_to_start_saying_why() {
    // --check probes the machine as a start does, then says what would run.
    let out = common::check(
        "platform = \"linux\"\nallow_observe_only = true\nprefetchers_off_while_profiling = true\n",
    );
    let log = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // A machine that allows it (an Intel or AMD core with the switch, the msr driver, root).
        assert!(log.contains("L2 PREFETCHERS OFF WHILE PROFILING"), "{log}");
    } else {
        assert!(
            log.contains("prefetchers_off_while_profiling = true in rocsd.toml"),
            "{log}"
        );
        // Either the CPU has no switch rocs knows, or /dev/cpu/N/msr is missing (this VM:
        // its kernel cannot load the msr driver) or not writable.
        let why = ["switches the L2 prefetchers only on Intel", "modprobe msr"];
        assert!(why.iter().any(|w| log.contains(w)), "{log}");
    }
}
