//! Policies: which processes rocsd attaches to, and with which knobs.
//!
//! A policy file (`/etc/rocs/policy.d/NAME.toml`) looks like
//!
//! ```toml
//! name = "batch-art"            # optional; the file's stem otherwise
//! [match]                       # every kind given must match; any pattern of a kind will do
//! comm = ["art", "art_*"]       # command name (/proc/PID/comm), `*` and `?` globs
//! exe = "/opt/spec/bin/*"       # executable path (/proc/PID/exe)
//! cgroup = "/batch.slice"       # cgroup v2 path (and everything below it);
//!                               # "cpu:/batch" names a v1 hierarchy by one of its controllers
//! [knobs]                       # overrides of rocsd.toml's [knobs]
//! pollute_colours = 1
//! ```
//!
//! A top-level `confine = ["[heap]", "[anon:stream]"]` names mappings (as the last column
//! of /proc/PID/maps shows them, `*` and `?` globs) whose pages are confined from the start,
//! without a search: a buffer known to pollute. Only private anonymous memory moves.
//!
//! Policies are tried in file-name order; the first that matches a process wins.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{read_text, ConfigError, Location, Source};
use crate::knobs::{KnobTable, RawKnobs};

mod matcher;

pub use matcher::{
    glob_match, parse_proc_cgroup, CgroupEntry, CgroupPattern, Matcher, ProcessInfo,
};

/// One policy file, parsed and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub name: String,
    pub file: PathBuf,
    pub matcher: Matcher,
    /// The policy's own knobs; overlay them on rocsd.toml's defaults to get a target's.
    pub knobs: KnobTable,
    /// Mappings whose pages are confined by name, without a search (patterns of
    /// /proc/PID/maps's pathname column).
    pub confine: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    name: Option<Spanned<String>>,
    #[serde(rename = "match")]
    matcher: Option<Spanned<RawMatch>>,
    #[serde(default)]
    knobs: RawKnobs,
    confine: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    comm: Option<Spanned<toml::Value>>,
    exe: Option<Spanned<toml::Value>>,
    cgroup: Option<Spanned<toml::Value>>,
}

impl Policy {
    /// Parse the policy text read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Policy, ConfigError> {
        if text.trim().is_empty() {
            return Err(ConfigError::at(
                Location::of_offset(file, text, 0),
                "the policy file is empty: a policy needs at least a [match] table saying which \
                 processes it applies to, e.g. `[match]` and `comm = \"art\"`",
            ));
        }
        let raw: RawPolicy =
            toml::from_str(text).map_err(|e| ConfigError::from_toml(file, text, &e))?;
        let src = Source { file, text };
        let name = match raw.name {
            Some(n) => checked_name(&src, n)?,
            None => file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "policy".into()),
        };
        let Some(raw_match) = raw.matcher else {
            return Err(ConfigError::File {
                file: file.to_path_buf(),
                message: "no [match] table: a policy must say which processes it applies to \
                          (comm, exe or cgroup)"
                    .into(),
            });
        };
        let matcher = parse_matcher(&src, raw_match)?;
        let confine = confine_patterns(&src, raw.confine)?;
        let knobs = match raw.knobs.0 {
            Some(k) => {
                let span = k.span();
                KnobTable::from_spanned(file, text, Some(span), k.into_inner())
            }
            None => KnobTable::new(),
        };
        Ok(Policy {
            name,
            file: file.to_path_buf(),
            matcher,
            knobs,
            confine,
        })
    }

    /// Read and parse a policy file.
    pub fn load(file: &Path) -> Result<Policy, ConfigError> {
        Self::parse(file, &read_text(file)?)
    }
}

fn checked_name(src: &Source, name: Spanned<String>) -> Result<String, ConfigError> {
    let span = name.span();
    let name = name.into_inner();
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError::at(
            src.at(span),
            format!("policy name {name:?} must be non-empty and without spaces"),
        ));
    }
    Ok(name)
}

/// The [match] table: at least one pattern, each of a form that can match.
fn parse_matcher(src: &Source, raw_match: Spanned<RawMatch>) -> Result<Matcher, ConfigError> {
    let match_span = raw_match.span();
    let raw_match = raw_match.into_inner();
    let comm = string_list(src, "comm", raw_match.comm)?;
    for (c, loc) in &comm {
        // comm is cut to 15 bytes by the kernel: a longer literal name never matches.
        if !c.contains('*') && c.len() > 15 {
            return Err(ConfigError::at(
                loc.clone(),
                format!(
                    "comm {c:?} is longer than the 15 bytes the kernel keeps of a command \
                     name; use {:?} or match on exe",
                    &c[..15]
                ),
            ));
        }
    }
    let exe = string_list(src, "exe", raw_match.exe)?;
    for (e, loc) in &exe {
        if !e.starts_with('/') && !e.starts_with('*') {
            return Err(ConfigError::at(
                loc.clone(),
                format!("exe {e:?} must be an absolute path (globs allowed)"),
            ));
        }
    }
    let cgroup = string_list(src, "cgroup", raw_match.cgroup)?
        .into_iter()
        .map(|(c, loc)| CgroupPattern::parse(&c).map_err(|m| ConfigError::at(loc, m)))
        .collect::<Result<Vec<_>, _>>()?;
    let matcher = Matcher {
        comm: comm.into_iter().map(|(s, _)| s).collect(),
        exe: exe.into_iter().map(|(s, _)| s).collect(),
        cgroup,
    };
    if matcher.comm.is_empty() && matcher.exe.is_empty() && matcher.cgroup.is_empty() {
        return Err(ConfigError::at(
            src.at(match_span),
            "[match] is empty: give comm, exe or cgroup",
        ));
    }
    Ok(matcher)
}

/// The top-level `confine`: names of mappings as /proc/PID/maps shows them.
fn confine_patterns(
    src: &Source,
    confine: Option<Spanned<toml::Value>>,
) -> Result<Vec<String>, ConfigError> {
    let confine = string_list(src, "confine", confine)?;
    for (m, loc) in &confine {
        if !(m.starts_with('/') || m.starts_with('[') || m.starts_with('*')) {
            return Err(ConfigError::at(
                loc.clone(),
                format!(
                    "confine {m:?} is no mapping name: give a path (\"/opt/x/*\") or a \
                     bracketed name as /proc/PID/maps shows it (\"[heap]\", \"[anon:NAME]\")"
                ),
            ));
        }
    }
    Ok(confine.into_iter().map(|(m, _)| m).collect())
}

/// A key that takes a string or an array of strings (never empty), each with its place.
fn string_list(
    src: &Source,
    field: &str,
    value: Option<Spanned<toml::Value>>,
) -> Result<Vec<(String, Location)>, ConfigError> {
    let Some(value) = value else {
        return Ok(vec![]);
    };
    let loc = src.at(value.span());
    let list = match value.into_inner() {
        toml::Value::String(s) => vec![s],
        toml::Value::Array(a) => a
            .into_iter()
            .map(|x| match x {
                toml::Value::String(s) => Ok(s),
                other => Err(ConfigError::at(
                    loc.clone(),
                    format!("{field}: expected strings, found {}", other.type_str()),
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(ConfigError::at(
                loc,
                format!(
                    "{field}: expected a string or an array of strings, found {}",
                    other.type_str()
                ),
            ))
        }
    };
    if list.is_empty() {
        return Err(ConfigError::at(
            loc,
            format!("{field}: an empty list matches nothing; remove the key instead"),
        ));
    }
    if let Some(bad) = list.iter().find(|s| s.is_empty()) {
        return Err(ConfigError::at(
            loc,
            format!("{field}: empty pattern {bad:?}"),
        ));
    }
    Ok(list.into_iter().map(|s| (s, loc.clone())).collect())
}

/// Every error found while loading a policy directory, one per line when printed.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct PolicyErrors(pub Vec<ConfigError>);

/// The policies in force, in the order they are tried.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicySet {
    policies: Vec<Policy>,
}

impl PolicySet {
    pub fn new(policies: Vec<Policy>) -> Self {
        PolicySet { policies }
    }

    /// Load every `*.toml` of `dir`, in file-name order. All files are read, so that every
    /// broken one is reported at once; any error refuses the whole set (a half-applied set
    /// of policies would be worse than the previous one).
    pub fn load_dir(dir: &Path) -> Result<PolicySet, PolicyErrors> {
        let entries = std::fs::read_dir(dir).map_err(|source| {
            PolicyErrors(vec![ConfigError::Read {
                file: dir.to_path_buf(),
                source,
            }])
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
            .collect();
        files.sort();
        let mut policies = Vec::new();
        let mut errors = Vec::new();
        for f in files {
            match Policy::load(&f) {
                Ok(p) => policies.push(p),
                Err(e) => errors.push(e),
            }
        }
        for (i, p) in policies.iter().enumerate() {
            if let Some(first) = policies[..i].iter().find(|q| q.name == p.name) {
                errors.push(ConfigError::File {
                    file: p.file.clone(),
                    message: format!(
                        "policy name {:?} is already used by {}",
                        p.name,
                        first.file.display()
                    ),
                });
            }
        }
        if errors.is_empty() {
            Ok(PolicySet { policies })
        } else {
            Err(PolicyErrors(errors))
        }
    }

    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The first policy that applies to `p`.
    pub fn matching(&self, p: &ProcessInfo) -> Option<&Policy> {
        self.policies.iter().find(|pol| pol.matcher.matches(p))
    }

    pub fn uses_cgroups(&self) -> bool {
        self.policies.iter().any(|p| p.matcher.uses_cgroups())
    }

    pub fn uses_exe(&self) -> bool {
        self.policies.iter().any(|p| p.matcher.uses_exe())
    }
}

#[cfg(test)]
mod tests {
    use super::matcher::tests::proc_;
    use super::*;

    #[test]
    fn every_given_kind_must_match() {
        let text = r#"
[match]
comm = ["art", "swim*"]
cgroup = "/batch.slice"
[knobs]
pollute_colours = 2
"#;
        let p = Policy::parse(Path::new("/etc/rocs/policy.d/spec.toml"), text).unwrap();
        assert_eq!(p.name, "spec");
        assert_eq!(p.knobs.keys().collect::<Vec<_>>(), vec!["pollute_colours"]);
        let m = &p.matcher;
        assert!(m.matches(&proc_("art", "/x/art", "0::/batch.slice/a\n")));
        assert!(m.matches(&proc_("swim_ref", "/x/s", "0::/batch.slice\n")));
        assert!(!m.matches(&proc_("art", "/x/art", "0::/user.slice\n")));
        assert!(!m.matches(&proc_("gcc", "/x/gcc", "0::/batch.slice\n")));
    }

    #[test]
    fn confine_names_mappings() {
        let text = "confine = [\"[heap]\", \"[anon:stream*]\"]\n[match]\ncomm = \"x\"\n";
        let p = Policy::parse(Path::new("p.toml"), text).unwrap();
        assert_eq!(p.confine, vec!["[heap]", "[anon:stream*]"]);
        let p = Policy::parse(Path::new("p.toml"), "[match]\ncomm = \"x\"\n").unwrap();
        assert!(p.confine.is_empty());
        for (text, at) in [
            (
                "confine = \"heap\"\n[match]\ncomm = \"x\"\n",
                "p.toml:1:11:",
            ),
            ("confine = []\n[match]\ncomm = \"x\"\n", "p.toml:1:11:"),
            ("\nconfine = 1\n[match]\ncomm = \"x\"\n", "p.toml:2:11:"),
        ] {
            let e = Policy::parse(Path::new("p.toml"), text)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(at) && e.contains("confine"),
                "{text:?} gave {e}"
            );
        }
    }

    #[test]
    fn exe_matches_deleted_executables_and_needs_an_exe() {
        let p = Policy::parse(Path::new("p.toml"), "[match]\nexe = \"/opt/bin/*\"\n").unwrap();
        assert!(p.matcher.matches(&proc_("x", "/opt/bin/art (deleted)", "")));
        let mut no_exe = proc_("x", "/", "");
        no_exe.exe = None;
        assert!(!p.matcher.matches(&no_exe));
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let f = Path::new("policy.d/bad.toml");
        let cases = [
            (
                "[match]\ncomm = \"art\"\npollute = 1\n",
                "policy.d/bad.toml:3:1:",
                "pollute",
            ),
            ("[match]\ncomm = 3\n", "policy.d/bad.toml:2:8:", "comm"),
            (
                "[match]\n\n  exe = \"bin/art\"\n",
                "policy.d/bad.toml:3:9:",
                "absolute",
            ),
            (
                "[match]\ncgroup = [\"batch\"]\n",
                "policy.d/bad.toml:2:10:",
                "cgroup",
            ),
            ("x = [\n", "policy.d/bad.toml:", ""),
            (
                "name = \"a b\"\n[match]\ncomm=\"x\"\n",
                "policy.d/bad.toml:1:8:",
                "name",
            ),
            (
                "[match]\ncomm = \"a_very_long_command_name\"\n",
                "policy.d/bad.toml:2:8:",
                "15 bytes",
            ),
        ];
        for (text, at, word) in cases {
            let e = Policy::parse(f, text).unwrap_err().to_string();
            assert!(e.starts_with(at) && e.contains(word), "{text:?} gave {e}");
        }
        let e = Policy::parse(f, "[match]\n").unwrap_err().to_string();
        assert!(
            e.starts_with("policy.d/bad.toml:1:1:") && e.contains("empty"),
            "{e}"
        );
        let e = Policy::parse(f, "name = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("no [match]"), "{e}");
    }

    #[test]
    fn an_unclosed_array_is_reported_where_it_opens_in_one_line() {
        let f = Path::new("policy.d/bad.toml");
        // The issue's example: the array of line 4 runs into the table of line 6.
        let text = "name = \"art\"\n[match]\ncomm = \"art\"\nexe = [\"/opt/a\",\n  \"/opt/b\"\n[knobs]\npollute_colours = 1\n";
        let e = Policy::parse(f, text).unwrap_err().to_string();
        assert!(e.starts_with("policy.d/bad.toml:4:7: "), "{e}");
        assert!(e.contains("not closed") && e.contains("line 6"), "{e}");
        assert!(!e.contains('\n'), "one line: {e:?}");
        // After a comma toml reads the table header as a nested array and fails inside it.
        let text = text.replace("\"/opt/b\"\n", "\n");
        let e = Policy::parse(f, &text).unwrap_err().to_string();
        assert!(e.starts_with("policy.d/bad.toml:4:7: "), "{e}");
        assert!(e.contains("not closed") && e.contains("line 6"), "{e}");
        // Nested arrays on lines of their own are not tables.
        let text = "[match]\ncomm = [\n  [\"a\"],\n  [\"b\"]\n  [\"c\"],\n]\n";
        let e = Policy::parse(f, text).unwrap_err().to_string();
        assert!(e.starts_with("policy.d/bad.toml:5:3: "), "{e}");
        assert!(e.contains("opened at line 2, column 8"), "{e}");
        // At the end of the file; brackets and `#` inside strings and comments do not count.
        let text = "[match]\ncomm = \"a[\" # ]]\nexe = [ # [\n  \"/x]\",\n";
        let e = Policy::parse(f, text).unwrap_err().to_string();
        assert!(e.starts_with("policy.d/bad.toml:3:7: "), "{e}");
        assert!(e.contains("before the end of the file"), "{e}");
        // A missing comma inside an array is reported where it is, naming the array.
        let text = "[match]\ncomm = [\n  \"a\"\n  \"b\",\n]\n";
        let e = Policy::parse(f, text).unwrap_err().to_string();
        assert!(e.starts_with("policy.d/bad.toml:4:3: "), "{e}");
        assert!(
            e.contains("opened at line 2, column 8") && !e.contains('\n'),
            "{e}"
        );
        // Every toml error is one line.
        for text in ["x = \"abc\n", "[match\n", "a = 1\na = 2\n", "x = {a = 1,\n"] {
            let e = Policy::parse(f, text).unwrap_err().to_string();
            assert!(
                e.starts_with("policy.d/bad.toml:") && !e.contains('\n'),
                "{e:?}"
            );
        }
    }

    #[test]
    fn empty_and_binary_files_are_reported_with_a_place() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.toml");
        std::fs::write(&empty, "").unwrap();
        let e = Policy::load(&empty).unwrap_err().to_string();
        assert_eq!(
            e.find(":1:1: the policy file is empty"),
            Some(empty.display().to_string().len()),
            "{e}"
        );
        std::fs::write(&empty, "\n  \n\t\n").unwrap();
        let e = Policy::load(&empty).unwrap_err().to_string();
        assert!(e.contains(":1:1: the policy file is empty"), "{e}");
        // An ELF executable copied into policy.d: its first bad byte is on line 1.
        let binary = dir.path().join("ls.toml");
        std::fs::write(&binary, b"\x7fELF\x02\x01\x01\0\0\0\n\x80").unwrap();
        let e = Policy::load(&binary).unwrap_err().to_string();
        assert!(e.contains("ls.toml:2:1: not UTF-8 text (byte 0x80"), "{e}");
        // Valid UTF-8 with control characters is toml's to refuse, with a place.
        std::fs::write(&binary, b"\x7fELF\x02\x01\x01\0\0\0").unwrap();
        let e = Policy::load(&binary).unwrap_err().to_string();
        assert!(e.contains("ls.toml:1:1: "), "{e}");
    }

    #[test]
    fn a_directory_loads_in_name_order_and_reports_every_broken_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("20-b.toml"), "[match]\ncomm = \"*\"\n").unwrap();
        std::fs::write(dir.path().join("10-a.toml"), "[match]\ncomm = \"art\"\n").unwrap();
        std::fs::write(dir.path().join("README"), "not a policy").unwrap();
        let set = PolicySet::load_dir(dir.path()).unwrap();
        let names: Vec<_> = set.policies().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["10-a", "20-b"]);
        assert_eq!(set.matching(&proc_("art", "/a", "")).unwrap().name, "10-a");
        assert_eq!(set.matching(&proc_("gcc", "/a", "")).unwrap().name, "20-b");

        std::fs::write(dir.path().join("30-c.toml"), "[match]\ncomm = 1\n").unwrap();
        std::fs::write(
            dir.path().join("40-d.toml"),
            "name = \"10-a\"\n[match]\ncomm=\"x\"\n",
        )
        .unwrap();
        let errs = PolicySet::load_dir(dir.path()).unwrap_err();
        assert_eq!(errs.0.len(), 2, "{errs}");
        assert!(errs.to_string().contains("30-c.toml:2:8"), "{errs}");
        assert!(errs.to_string().contains("already used"), "{errs}");
    }
}
