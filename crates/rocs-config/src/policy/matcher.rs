//! Which processes a policy applies to: command name, executable and cgroup patterns.

use std::path::PathBuf;

/// What rocsd knows of a process when it decides whether a policy applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The command name (at most 15 bytes on Linux).
    pub comm: String,
    /// The executable, when it can be read.
    pub exe: Option<PathBuf>,
    /// The process's cgroups, one per hierarchy, as /proc/PID/cgroup lists them.
    pub cgroups: Vec<CgroupEntry>,
}

/// One line of /proc/PID/cgroup: `hierarchy-id:controller-list:path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupEntry {
    /// 0 for the unified (v2) hierarchy.
    pub hierarchy: u32,
    /// The v1 controllers of the hierarchy (empty for v2). Named hierarchies appear as
    /// `name=systemd`.
    pub controllers: Vec<String>,
    pub path: String,
}

/// Parse /proc/PID/cgroup. Lines that do not have the three fields are skipped (the file is
/// written by the kernel; a partial read of an exiting process can cut it short).
pub fn parse_proc_cgroup(text: &str) -> Vec<CgroupEntry> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let hierarchy = parts.next()?.parse().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some(CgroupEntry {
                hierarchy,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// A cgroup pattern: a path, optionally tied to a v1 hierarchy by one of its controllers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupPattern {
    /// `None`: the v2 hierarchy (or, on a machine without one, any hierarchy).
    pub controller: Option<String>,
    pub path: String,
}

impl CgroupPattern {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let (controller, path) = match s.find('/') {
            Some(0) => (None, s),
            Some(i) if s[..i].ends_with(':') && i > 1 => (Some(s[..i - 1].to_string()), &s[i..]),
            _ => {
                return Err(format!(
                    "cgroup pattern {s:?} must be an absolute path (\"/system.slice/x.service\") \
                     or CONTROLLER:/path for a cgroup v1 hierarchy"
                ))
            }
        };
        Ok(CgroupPattern {
            controller,
            path: path.to_string(),
        })
    }

    /// The path itself and everything below it match; `*` and `?` glob.
    fn matches_path(&self, path: &str) -> bool {
        if glob_match(&self.path, path) {
            return true;
        }
        let prefix = self.path.trim_end_matches('/');
        path.len() > prefix.len()
            && path.as_bytes()[prefix.len()] == b'/'
            && glob_match(prefix, &path[..prefix.len()])
    }

    pub fn matches(&self, cgroups: &[CgroupEntry]) -> bool {
        match &self.controller {
            Some(c) => cgroups
                .iter()
                .filter(|e| e.hierarchy != 0 && e.controllers.iter().any(|x| x == c))
                .any(|e| self.matches_path(&e.path)),
            None => {
                let v2: Vec<_> = cgroups.iter().filter(|e| e.hierarchy == 0).collect();
                if v2.is_empty() {
                    // A v1-only machine: the path may be in any hierarchy.
                    cgroups.iter().any(|e| self.matches_path(&e.path))
                } else {
                    v2.iter().any(|e| self.matches_path(&e.path))
                }
            }
        }
    }
}

/// `*` matches any run of characters (including none, and including `/`), `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and how much of the text it has swallowed.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Which processes a policy applies to. Every kind that is given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matcher {
    pub comm: Vec<String>,
    pub exe: Vec<String>,
    pub cgroup: Vec<CgroupPattern>,
}

impl Matcher {
    pub fn matches(&self, p: &ProcessInfo) -> bool {
        let comm_ok = self.comm.is_empty() || self.comm.iter().any(|c| glob_match(c, &p.comm));
        let exe_ok = self.exe.is_empty()
            || p.exe.as_deref().is_some_and(|exe| {
                let exe = exe.to_string_lossy();
                // A replaced executable reads as "PATH (deleted)"; it is still that program.
                let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
                self.exe.iter().any(|e| glob_match(e, exe))
            });
        let cgroup_ok = self.cgroup.is_empty() || self.cgroup.iter().any(|c| c.matches(&p.cgroups));
        comm_ok && exe_ok && cgroup_ok
    }

    /// True when the matcher looks at cgroups (rocsd then reads /proc/PID/cgroup).
    pub fn uses_cgroups(&self) -> bool {
        !self.cgroup.is_empty()
    }

    /// True when the matcher looks at the executable.
    pub fn uses_exe(&self) -> bool {
        !self.exe.is_empty()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn proc_(comm: &str, exe: &str, cgroup: &str) -> ProcessInfo {
        ProcessInfo {
            pid: 42,
            comm: comm.into(),
            exe: Some(exe.into()),
            cgroups: parse_proc_cgroup(cgroup),
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("art*", "art_base"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("/opt/*/bin/x", "/opt/a/b/bin/x"));
        assert!(!glob_match("art", "arts"));
        assert!(glob_match("*a*b*", "xxaxxbxx"));
    }

    #[test]
    fn cgroup_v2_paths_match_themselves_and_below() {
        let v2 = "0::/batch.slice/job.service\n";
        let pat = CgroupPattern::parse("/batch.slice").unwrap();
        assert!(pat.matches(&parse_proc_cgroup(v2)));
        assert!(!pat.matches(&parse_proc_cgroup("0::/batch.slicex/a\n")));
        assert!(CgroupPattern::parse("/batch.slice/")
            .unwrap()
            .matches(&parse_proc_cgroup(v2)));
        assert!(CgroupPattern::parse("/*/job.service")
            .unwrap()
            .matches(&parse_proc_cgroup(v2)));
    }

    #[test]
    fn cgroup_v1_hierarchies_by_controller() {
        let v1 = "12:cpu,cpuacct:/batch\n11:memory:/other\n1:name=systemd:/user.slice\n";
        let cg = parse_proc_cgroup(v1);
        assert_eq!(cg[0].controllers, vec!["cpu", "cpuacct"]);
        assert!(CgroupPattern::parse("cpu:/batch").unwrap().matches(&cg));
        assert!(!CgroupPattern::parse("memory:/batch").unwrap().matches(&cg));
        // No v2 line: a plain path may be in any hierarchy.
        assert!(CgroupPattern::parse("/user.slice").unwrap().matches(&cg));
        // A hybrid machine: the plain path is the v2 one.
        let hybrid = parse_proc_cgroup("3:cpu:/batch\n0::/user.slice/x\n");
        assert!(!CgroupPattern::parse("/batch").unwrap().matches(&hybrid));
        assert!(CgroupPattern::parse("cpu:/batch").unwrap().matches(&hybrid));
        assert!(CgroupPattern::parse("batch").is_err());
    }
}
