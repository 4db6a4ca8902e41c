//! Processes as a /proc tree shows them (the machine's, or a fixture's): which processes
//! exist, their command name and start time, their cgroups and executable. The files are
//! parsed by the procfs crate; each is opened by path (procfs's `Process` would first
//! open a directory handle per process, which a scan of every process every few hundred
//! milliseconds does not need).

use std::path::{Path, PathBuf};

use procfs::process::{MemoryMaps, Stat};
use procfs::{FromRead, ProcessCGroups};
use rocs_core::{Mapping, VirtPage};

/// PF_KTHREAD in /proc/PID/stat's flags (include/linux/sched.h).
const PF_KTHREAD: u32 = 0x0020_0000;

/// What /proc/PID/stat says about a process that matters for finding targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub comm: String,
    /// Clock ticks after boot when the process started: with the pid, who it is.
    pub start_time: u64,
    pub kernel_thread: bool,
}

/// One line of /proc/PID/cgroup: a hierarchy (0 for cgroup v2), its v1 controllers, and
/// the process's cgroup in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CgroupLine {
    pub hierarchy: u32,
    pub controllers: Vec<String>,
    pub path: String,
}

/// A /proc tree: "/proc" on a live system, a fixture directory in tests.
#[derive(Clone, Debug)]
pub struct ProcRoot(PathBuf);

impl Default for ProcRoot {
    fn default() -> Self {
        ProcRoot(PathBuf::from("/proc"))
    }
}

impl ProcRoot {
    pub fn new(root: impl AsRef<Path>) -> Self {
        ProcRoot(root.as_ref().to_path_buf())
    }

    /// Every process id in the tree now (empty when it cannot be read).
    pub fn pids(&self) -> Vec<u32> {
        let Ok(dir) = std::fs::read_dir(&self.0) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    }

    fn file(&self, pid: u32, name: &str) -> PathBuf {
        self.0.join(pid.to_string()).join(name)
    }

    /// The process's stat, or None once it is gone.
    pub fn stat(&self, pid: u32) -> Option<ProcStat> {
        let stat = Stat::from_file(self.file(pid, "stat")).ok()?;
        Some(ProcStat {
            comm: stat.comm,
            start_time: stat.starttime,
            kernel_thread: stat.flags & PF_KTHREAD != 0,
        })
    }

    /// The process's cgroups, one line per hierarchy; None once it is gone.
    pub fn cgroups(&self, pid: u32) -> Option<Vec<CgroupLine>> {
        let lines = ProcessCGroups::from_file(self.file(pid, "cgroup")).ok()?;
        Some(
            lines
                .0
                .into_iter()
                .map(|c| CgroupLine {
                    hierarchy: c.hierarchy,
                    controllers: c.controllers,
                    path: c.pathname,
                })
                .collect(),
        )
    }

    /// The process's executable, when it can be read.
    pub fn exe(&self, pid: u32) -> Option<PathBuf> {
        std::fs::read_link(self.file(pid, "exe")).ok()
    }

    /// The process's mappings (/proc/PID/maps) as ranges of pages of `1 << page_shift`
    /// bytes, in address order.
    pub fn mappings(&self, pid: u32, page_shift: u32) -> procfs::ProcResult<Vec<Mapping>> {
        let maps = MemoryMaps::from_file(self.file(pid, "maps"))?;
        Ok(maps
            .0
            .iter()
            .filter(|m| m.address.1 > m.address.0)
            .map(|m| Mapping {
                first: VirtPage(m.address.0 >> page_shift),
                last: VirtPage((m.address.1 - 1) >> page_shift),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture /proc with one process, its stat and cgroup files as the kernel writes
    /// them (proc(5)).
    fn fixture(pid: u32, stat: &str, cgroup: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(pid.to_string());
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("stat"), stat).unwrap();
        std::fs::write(p.join("cgroup"), cgroup).unwrap();
        dir
    }

    #[test]
    fn reads_stat_and_cgroups_of_a_fixture() {
        let stat = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let cgroup = "4:memory:/batch\n0::/user.slice/app.scope\n";
        let dir = fixture(1234, stat, cgroup);
        let root = ProcRoot::new(dir.path());
        assert_eq!(root.pids(), vec![1234]);
        assert_eq!(
            root.stat(1234),
            Some(ProcStat {
                comm: "my (odd) prog".into(),
                start_time: 987654,
                kernel_thread: false,
            })
        );
        assert_eq!(
            root.cgroups(1234).unwrap(),
            vec![
                CgroupLine {
                    hierarchy: 4,
                    controllers: vec!["memory".into()],
                    path: "/batch".into(),
                },
                CgroupLine {
                    hierarchy: 0,
                    controllers: vec![],
                    path: "/user.slice/app.scope".into(),
                },
            ]
        );
        assert_eq!(root.stat(99), None);
        // kthreadd: flags 2129984 has PF_KTHREAD.
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let dir = fixture(2, kthread, "0::/\n");
        assert!(ProcRoot::new(dir.path()).stat(2).unwrap().kernel_thread);
    }

    #[test]
    fn reads_this_process() {
        let root = ProcRoot::default();
        let me = std::process::id();
        assert!(root.pids().contains(&me));
        let st = root.stat(me).unwrap();
        assert!(!st.kernel_thread && st.start_time > 0);
        assert!(root.exe(me).is_some());
        assert!(!root.cgroups(me).unwrap().is_empty());
    }

    #[test]
    fn a_process_s_mappings_are_page_ranges() {
        // proc(5)'s example lines: a file mapping, the heap, an anonymous mapping of 1 GiB
        // (the kernel ends its header with a space, name or not).
        let maps = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
00e03000-00e24000 rw-p 00000000 00:00 0           [heap]
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n";
        let dir = fixture(7, "", "");
        std::fs::write(dir.path().join("7/maps"), maps).unwrap();
        let got = ProcRoot::new(dir.path()).mappings(7, 12).unwrap();
        let range = |first: u64, last: u64| Mapping {
            first: VirtPage(first),
            last: VirtPage(last),
        };
        assert_eq!(
            got,
            vec![
                range(0x400, 0x451),
                range(0xe03, 0xe23),
                range(0x7f0000000, 0x7f003ffff),
            ]
        );
        // This process's own: its stack among them.
        let me = std::process::id();
        let own = ProcRoot::default().mappings(me, 12).unwrap();
        let local = 0u64;
        let page = VirtPage(std::ptr::addr_of!(local) as u64 >> 12);
        assert!(own.iter().any(|m| m.holds(page)), "{own:?}");
    }
}
