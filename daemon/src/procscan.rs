//! Finding processes: a scan of /proc, cheap enough to run every few hundred milliseconds.
//!
//! Each scan reads /proc/PID/stat (command name, start time, kernel-thread flag) of every
//! process through rocs-linux's procfs reader, and /proc/PID/cgroup of new processes and
//! of a quarter of the others (each process every 4th scan: reading it every scan would
//! double the cost of a scan). A process is checked against the policies when it is new,
//! when its command name changed (an exec) and when it moved to another cgroup (a
//! container runtime or systemd placing it after it started). A process is known by
//! (pid, start time), so a reused pid is a new process.

use std::collections::HashMap;

use rocs_config::{CgroupEntry, ProcessInfo};
use rocs_core::Pid;
use rocs_linux::procs::{CgroupLine, ProcRoot, ProcStat};

/// What one scan saw of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub stat: ProcStat,
    /// None when the file could not be read (the process is exiting).
    pub cgroups: Option<Vec<CgroupLine>>,
}

fn cgroup_entries(lines: Vec<CgroupLine>) -> Vec<CgroupEntry> {
    lines
        .into_iter()
        .map(|l| CgroupEntry {
            hierarchy: l.hierarchy,
            controllers: l.controllers,
            path: l.path,
        })
        .collect()
}

/// Read what policies match on. Exe and cgroups are read only when asked for.
pub fn process_info(pid: Pid, comm: &str, want_exe: bool, want_cgroups: bool) -> ProcessInfo {
    let proc = ProcRoot::default();
    ProcessInfo {
        pid,
        comm: comm.to_string(),
        exe: want_exe.then(|| proc.exe(pid)).flatten(),
        cgroups: if want_cgroups {
            proc.cgroups(pid).map(cgroup_entries).unwrap_or_default()
        } else {
            Vec::new()
        },
    }
}

/// What changed since the previous scan.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ScanDelta {
    /// Processes that are new, whose command name changed (exec) or whose cgroups
    /// changed (moved), or all of them after `rescan_all`: decide again whether they
    /// match.
    pub check: Vec<(Pid, String)>,
    /// Processes that are gone (or whose pid now belongs to another process).
    pub gone: Vec<Pid>,
}

/// A known process's cgroups are read again every this many scans.
pub const CGROUP_RECHECK_EVERY: u64 = 4;

/// Remembers the processes of the previous scan.
pub struct Scanner {
    proc: ProcRoot,
    known: HashMap<Pid, Seen>,
    own_pid: Pid,
    scans: u64,
}

impl Scanner {
    pub fn new() -> Self {
        Scanner::with_root(ProcRoot::default())
    }

    /// A scanner of another /proc tree (a fixture in tests).
    pub fn with_root(proc: ProcRoot) -> Self {
        Scanner {
            proc,
            known: HashMap::new(),
            own_pid: std::process::id(),
            scans: 0,
        }
    }

    /// Scan /proc. With `rescan_all`, every process is checked again (policies changed).
    pub fn scan(&mut self, rescan_all: bool) -> ScanDelta {
        self.scans += 1;
        let mut seen = Vec::new();
        for pid in self.proc.pids() {
            if pid == self.own_pid {
                continue;
            }
            let Some(stat) = self.proc.stat(pid) else {
                continue;
            };
            if stat.kernel_thread {
                continue;
            }
            let new = self
                .known
                .get(&pid)
                .is_none_or(|k| k.stat.start_time != stat.start_time);
            // Spread over the scans: pid + scan number picks a quarter of the processes.
            let due = (u64::from(pid) + self.scans).is_multiple_of(CGROUP_RECHECK_EVERY);
            let cgroups = if new || due {
                self.proc.cgroups(pid)
            } else {
                None
            };
            seen.push((pid, Seen { stat, cgroups }));
        }
        self.apply(seen, rescan_all)
    }

    /// The bookkeeping of a scan, apart from reading /proc (tested on its own).
    pub fn apply(&mut self, seen: Vec<(Pid, Seen)>, rescan_all: bool) -> ScanDelta {
        let mut delta = ScanDelta::default();
        let mut now: HashMap<Pid, Seen> = HashMap::with_capacity(seen.len());
        for (pid, mut this) in seen {
            match self.known.get(&pid) {
                Some(before) if before.stat.start_time == this.stat.start_time => {
                    // Cgroups not read this scan (or unreadable: an exiting process) are
                    // not a move.
                    let moved = matches!((&before.cgroups, &this.cgroups),
                        (Some(was), Some(is)) if was != is);
                    if this.cgroups.is_none() {
                        this.cgroups.clone_from(&before.cgroups);
                    }
                    if rescan_all || before.stat.comm != this.stat.comm || moved {
                        delta.check.push((pid, this.stat.comm.clone()));
                    }
                }
                Some(_) => {
                    // The pid was reused: the old process is gone, this one is new.
                    delta.gone.push(pid);
                    delta.check.push((pid, this.stat.comm.clone()));
                }
                None => delta.check.push((pid, this.stat.comm.clone())),
            }
            now.insert(pid, this);
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
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command};

    use super::*;

    fn seen(comm: &str, start: u64, cgroup: &str) -> Seen {
        Seen {
            stat: ProcStat {
                comm: comm.into(),
                start_time: start,
                kernel_thread: false,
            },
            cgroups: Some(vec![CgroupLine {
                hierarchy: 0,
                controllers: vec![],
                path: cgroup.into(),
            }]),
        }
    }

    #[test]
    fn new_exec_moved_reused_and_gone() {
        let mut s = Scanner::new();
        let d = s.apply(
            vec![(10, seen("bash", 1, "/")), (11, seen("sleep", 2, "/"))],
            false,
        );
        assert_eq!(d.check.len(), 2);
        // Nothing changed: nothing to check.
        let d = s.apply(
            vec![(10, seen("bash", 1, "/")), (11, seen("sleep", 2, "/"))],
            false,
        );
        assert_eq!(d, ScanDelta::default());
        // 10 exec'd into art, 11 exited, 12 started.
        let d = s.apply(
            vec![(10, seen("art", 1, "/")), (12, seen("x", 3, "/"))],
            false,
        );
        assert_eq!(d.check, vec![(10, "art".into()), (12, "x".into())]);
        assert_eq!(d.gone, vec![11]);
        // 10 moved into another cgroup; 12's cgroups were not read (no move).
        let mut unreadable = seen("x", 3, "/");
        unreadable.cgroups = None;
        let d = s.apply(
            vec![(10, seen("art", 1, "/batch")), (12, unreadable)],
            false,
        );
        assert_eq!(d.check, vec![(10, "art".into())]);
        // 12 reused by a new process.
        let d = s.apply(
            vec![(10, seen("art", 1, "/batch")), (12, seen("y", 9, "/"))],
            false,
        );
        assert_eq!(d.gone, vec![12]);
        assert_eq!(d.check, vec![(12, "y".into())]);
        // After a reload everything is checked again.
        let d = s.apply(
            vec![(10, seen("art", 1, "/batch")), (12, seen("y", 9, "/"))],
            true,
        );
        assert_eq!(d.check.len(), 2);
    }

    #[test]
    fn this_process_reads() {
        let info = process_info(std::process::id(), "x", true, true);
        assert!(info.exe.is_some());
        assert!(!info.cgroups.is_empty());
    }

    /// Where cgroup v2 is mounted here, if anywhere (/proc/self/mountinfo, proc(5)).
    fn cgroup2_mount() -> Option<PathBuf> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        info.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(mount_point))
        })
    }

    /// A process `sleep` that lives until dropped.
    struct Sleeper(Child);

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A new cgroup v2 directory, removed when dropped (after its processes are gone).
    struct Cgroup(PathBuf);

    impl Drop for Cgroup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn a_process_moved_into_a_cgroup_after_it_started_is_checked_again() {
        let Some(mount) = cgroup2_mount() else {
            eprintln!("skipped: no cgroup v2 hierarchy is mounted here (the fixture test of Scanner::apply covers the bookkeeping)");
            return;
        };
        let group = Cgroup(mount.join(format!("rocs-scan-test-{}", std::process::id())));
        if let Err(e) = std::fs::create_dir(&group.0) {
            eprintln!(
                "skipped: cannot make a cgroup under {}: {e}",
                mount.display()
            );
            return;
        }
        let sleeper = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
        let pid = sleeper.0.id();
        let mut scanner = Scanner::new();
        let first = scanner.scan(false);
        assert!(first.check.iter().any(|(p, _)| *p == pid));
        assert!(!scanner.scan(false).check.iter().any(|(p, _)| *p == pid));

        std::fs::write(group.0.join("cgroup.procs"), pid.to_string()).unwrap();
        // Within CGROUP_RECHECK_EVERY scans the move is seen, once.
        let checks: Vec<_> = (0..CGROUP_RECHECK_EVERY)
            .flat_map(|_| scanner.scan(false).check)
            .filter(|(p, _)| *p == pid)
            .collect();
        assert_eq!(checks, vec![(pid, "sleep".to_string())]);
        let relative = Path::new("/").join(group.0.strip_prefix(&mount).unwrap());
        let info = process_info(pid, "sleep", false, true);
        assert!(
            info.cgroups
                .iter()
                .any(|c| c.hierarchy == 0 && Path::new(&c.path) == relative),
            "{:?}",
            info.cgroups
        );
        drop(sleeper);
    }
}
