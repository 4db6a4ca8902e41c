//! Finding processes: a scan of /proc, cheap enough to run every few hundred milliseconds.
//!
//! Each scan reads /proc/PID/stat of every process (command name, start time, kernel-thread
//! flag); the executable and cgroups are read only when a process is new or its command
//! name changed (an exec), and only when some policy looks at them. A process is known by
//! (pid, start time), so a reused pid is a new process.

use std::collections::HashMap;

use rocs_config::{parse_proc_cgroup, ProcessInfo};
use rocs_core::Pid;

/// PF_KTHREAD in /proc/PID/stat's flags.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What /proc/PID/stat says that matters here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub start_time: u64,
    pub kernel_thread: bool,
}

/// Parse /proc/PID/stat. The command name is between the first '(' and the last ')' (it may
/// itself contain parentheses and spaces).
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    // Fields after the comm, starting with field 3 (state).
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let flags: u64 = rest.get(9 - 3)?.parse().ok()?;
    let start_time: u64 = rest.get(22 - 3)?.parse().ok()?;
    Some(Stat {
        comm,
        start_time,
        kernel_thread: flags & PF_KTHREAD != 0,
    })
}

/// Every process id in /proc now.
pub fn list_pids() -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<Pid>().ok())
        .collect()
}

pub fn read_stat(pid: Pid) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Read what policies match on. Exe and cgroups are read only when asked for.
pub fn process_info(pid: Pid, comm: &str, want_exe: bool, want_cgroups: bool) -> ProcessInfo {
    let exe = want_exe
        .then(|| std::fs::read_link(format!("/proc/{pid}/exe")).ok())
        .flatten();
    let cgroups = if want_cgroups {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .map(|t| parse_proc_cgroup(&t))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    ProcessInfo {
        pid,
        comm: comm.to_string(),
        exe,
        cgroups,
    }
}

/// What changed since the previous scan.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ScanDelta {
    /// Processes that are new, or whose command name changed (exec), or all of them after
    /// `rescan_all`: decide again whether they match.
    pub check: Vec<(Pid, String)>,
    /// Processes that are gone (or whose pid now belongs to another process).
    pub gone: Vec<Pid>,
}

/// Remembers the processes of the previous scan.
#[derive(Default)]
pub struct Scanner {
    known: HashMap<Pid, (u64, String)>,
    own_pid: Pid,
}

impl Scanner {
    pub fn new() -> Self {
        Scanner {
            known: HashMap::new(),
            own_pid: std::process::id(),
        }
    }

    /// Scan /proc. With `rescan_all`, every process is checked again (policies changed).
    pub fn scan(&mut self, rescan_all: bool) -> ScanDelta {
        let mut stats = Vec::new();
        for pid in list_pids() {
            if pid == self.own_pid {
                continue;
            }
            if let Some(st) = read_stat(pid) {
                if !st.kernel_thread {
                    stats.push((pid, st));
                }
            }
        }
        self.apply(stats, rescan_all)
    }

    /// The bookkeeping of a scan, apart from reading /proc (tested on its own).
    pub fn apply(&mut self, stats: Vec<(Pid, Stat)>, rescan_all: bool) -> ScanDelta {
        let mut delta = ScanDelta::default();
        let mut now: HashMap<Pid, (u64, String)> = HashMap::with_capacity(stats.len());
        for (pid, st) in stats {
            match self.known.get(&pid) {
                Some((start, comm)) if *start == st.start_time => {
                    if rescan_all || *comm != st.comm {
                        delta.check.push((pid, st.comm.clone()));
                    }
                }
                Some(_) => {
                    // The pid was reused: the old process is gone, this one is new.
                    delta.gone.push(pid);
                    delta.check.push((pid, st.comm.clone()));
                }
                None => delta.check.push((pid, st.comm.clone())),
            }
            now.insert(pid, (st.start_time, st.comm));
        }
        for pid in self.known.keys() {
            if !now.contains_key(pid) {
                delta.gone.push(*pid);
            }
        }
        self.known = now;
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let text = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let st = parse_stat(text).unwrap();
        assert_eq!(st.comm, "my (odd) prog");
        assert_eq!(st.start_time, 987654);
        assert!(!st.kernel_thread);
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert!(parse_stat(kthread).unwrap().kernel_thread);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_reads() {
        let st = read_stat(std::process::id()).unwrap();
        assert!(!st.kernel_thread);
        assert!(st.start_time > 0);
        let info = process_info(std::process::id(), &st.comm, true, true);
        assert!(info.exe.is_some());
    }

    fn st(comm: &str, start: u64) -> Stat {
        Stat {
            comm: comm.into(),
            start_time: start,
            kernel_thread: false,
        }
    }

    #[test]
    fn new_exec_reused_and_gone() {
        let mut s = Scanner::new();
        let d = s.apply(vec![(10, st("bash", 1)), (11, st("sleep", 2))], false);
        assert_eq!(d.check.len(), 2);
        // Nothing changed: nothing to check.
        let d = s.apply(vec![(10, st("bash", 1)), (11, st("sleep", 2))], false);
        assert_eq!(d, ScanDelta::default());
        // 10 exec'd into art, 11 exited, 12 started.
        let d = s.apply(vec![(10, st("art", 1)), (12, st("x", 3))], false);
        assert_eq!(d.check, vec![(10, "art".into()), (12, "x".into())]);
        assert_eq!(d.gone, vec![11]);
        // 12 reused by a new process.
        let d = s.apply(vec![(10, st("art", 1)), (12, st("y", 9))], false);
        assert_eq!(d.gone, vec![12]);
        assert_eq!(d.check, vec![(12, "y".into())]);
        // After a reload everything is checked again.
        let d = s.apply(vec![(10, st("art", 1)), (12, st("y", 9))], true);
        assert_eq!(d.check.len(), 2);
    }
}
