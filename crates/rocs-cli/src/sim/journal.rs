//! A journal of an evaluation's finished cases, kept in its output directory while it
//! runs, so that an evaluation stopped part way (a failed case, an interrupt, a machine
//! shut down) resumes where it stopped: the same command, run again by the same rocsctl
//! build, takes the cases the journal holds and runs only the others. Each case is
//! deterministic by itself, so a resumed page is the page a single run writes. The
//! journal goes once the page is written.
//!
//! A case can be long (a modern row at full length is dozens of runs of many minutes), so
//! the runs of a case not yet finished are kept too, and a resumed case recalls them
//! instead of making them again.
//!
//! The file is JSON lines: a header (the command and the build), then one line per
//! finished case or run, appended and flushed as it ends.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::hash::Hasher;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Header {
    command: String,
    build: String,
    cases: usize,
}

#[derive(Serialize, Deserialize)]
struct Entry<T> {
    case: usize,
    row: T,
}

/// One run of a case not yet finished, by what was run.
#[derive(Serialize, Deserialize)]
struct RunEntry<R> {
    case: usize,
    run: String,
    counts: R,
}

/// The runs of unfinished cases, by case and what was run.
type Runs = BTreeMap<(usize, String), serde_json::Value>;

/// The finished cases (and runs) of one evaluation, and the file they are appended to.
pub struct Journal<T> {
    path: PathBuf,
    file: Mutex<File>,
    done: Mutex<BTreeMap<usize, T>>,
    runs: Mutex<Runs>,
}

impl<T: Serialize + DeserializeOwned> Journal<T> {
    /// The journal at `path` for `command` (what decides the figures: not `--jobs`) run by
    /// `build` over `cases` cases. A journal left there by the same command and build
    /// gives its cases; any other is replaced, and `say` is told why. A last line cut
    /// short (the run stopped while writing it) is dropped.
    pub fn open(
        path: &Path,
        command: &str,
        build: &str,
        cases: usize,
        say: &dyn Fn(&str),
    ) -> anyhow::Result<Self> {
        let header = Header {
            command: command.to_string(),
            build: build.to_string(),
            cases,
        };
        let (done, runs) = match Self::read(path, &header) {
            Ok(found) => found,
            Err(why) => {
                if path.exists() {
                    say(&format!(
                        "{}: not resumed ({why}); the evaluation starts afresh",
                        path.display()
                    ));
                }
                Default::default()
            }
        };
        if !done.is_empty() || !runs.is_empty() {
            say(&format!(
                "resuming: {} of {cases} cases finished before, and {} runs of the others, \
                 from {} (delete it to run them again)",
                done.len(),
                runs.len(),
                path.display()
            ));
        }
        // Rewrite what is kept, so that new lines follow whole ones.
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let mut text = serde_json::to_string(&header)? + "\n";
        for (case, row) in &done {
            text += &(serde_json::to_string(&Entry { case: *case, row })? + "\n");
        }
        for ((case, run), counts) in &runs {
            let entry = RunEntry {
                case: *case,
                run: run.clone(),
                counts,
            };
            text += &(serde_json::to_string(&entry)? + "\n");
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Journal {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            done: Mutex::new(done),
            runs: Mutex::new(runs),
        })
    }

    /// The cases of the journal at `path` if its header is `header`, and the runs of the
    /// cases it does not hold; why not otherwise.
    fn read(path: &Path, header: &Header) -> Result<(BTreeMap<usize, T>, Runs), String> {
        let file = File::open(path).map_err(|e| e.to_string())?;
        let mut lines = BufReader::new(file).lines();
        let first = lines
            .next()
            .ok_or("it is empty")?
            .map_err(|e| e.to_string())?;
        let found: Header =
            serde_json::from_str(&first).map_err(|e| format!("line 1 is not its header: {e}"))?;
        if found.command != header.command {
            return Err(format!("it is of another command: {}", found.command));
        }
        if found.build != header.build {
            return Err("it was written by another build of rocsctl".to_string());
        }
        if found.cases != header.cases {
            return Err(format!(
                "it has {} cases, not {}",
                found.cases, header.cases
            ));
        }
        let mut done = BTreeMap::new();
        let mut runs = Runs::new();
        for line in lines {
            // A line that is neither (cut short by a stop) ends what can be trusted.
            let Ok(line) = line else { break };
            if let Ok(entry) = serde_json::from_str::<Entry<T>>(&line) {
                if entry.case < header.cases {
                    done.insert(entry.case, entry.row);
                }
            } else if let Ok(entry) = serde_json::from_str::<RunEntry<serde_json::Value>>(&line) {
                runs.insert((entry.case, entry.run), entry.counts);
            } else {
                break;
            }
        }
        runs.retain(|(case, _), _| *case < header.cases && !done.contains_key(case));
        Ok((done, runs))
    }

    /// Case `case`'s row if the journal had it (once: it is handed over).
    pub fn take(&self, case: usize) -> Option<T> {
        self.done.lock().expect("no thread panicked").remove(&case)
    }

    /// Append a finished case.
    pub fn record(&self, case: usize, row: &T) -> anyhow::Result<()> {
        self.append(serde_json::to_string(&Entry { case, row })? + "\n")
    }

    fn append(&self, line: String) -> anyhow::Result<()> {
        let mut file = self.file.lock().expect("no thread panicked");
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .with_context(|| format!("appending to {}", self.path.display()))
    }

    /// What run `run` of case `case` counted, if the journal had it.
    pub fn recall_run<R: DeserializeOwned>(&self, case: usize, run: &str) -> Option<R> {
        let runs = self.runs.lock().expect("no thread panicked");
        let counts = runs.get(&(case, run.to_string()))?;
        // The same build wrote it: what it cannot read is only made again.
        serde_json::from_value(counts.clone()).ok()
    }

    /// Append a finished run of case `case`, which is not finished yet.
    pub fn record_run<R: Serialize>(
        &self,
        case: usize,
        run: &str,
        counts: &R,
    ) -> anyhow::Result<()> {
        let entry = RunEntry {
            case,
            run: run.to_string(),
            counts,
        };
        self.append(serde_json::to_string(&entry)? + "\n")
    }

    /// The evaluation is written: the journal is not needed any more.
    pub fn remove(self) -> anyhow::Result<()> {
        std::fs::remove_file(&self.path)
            .with_context(|| format!("removing {}", self.path.display()))
    }
}

/// What tells this build of rocsctl from another: its version and a hash of its own
/// executable (a journal's rows are only as good as the code that computed them).
pub fn this_build() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("finding rocsctl's own executable")?;
    let bytes =
        std::fs::read(&exe).with_context(|| format!("reading {} to hash it", exe.display()))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(&bytes);
    Ok(format!("{} {:016x}", env!("CARGO_PKG_VERSION"), h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path, command: &str, build: &str) -> (Journal<String>, Vec<String>) {
        let said = std::cell::RefCell::new(Vec::new());
        let j = Journal::open(path, command, build, 3, &|s| {
            said.borrow_mut().push(s.into())
        })
        .unwrap();
        (j, said.into_inner())
    }

    #[test]
    fn a_journal_resumes_only_the_same_command_and_build() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.journal");
        let (j, said) = open(&path, "eval a", "b1");
        assert!(said.is_empty(), "{said:?}");
        j.record(0, &"zero".to_string()).unwrap();
        j.record(2, &"two".to_string()).unwrap();
        drop(j); // stopped here
                 // A line cut short by the stop is dropped.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"case\":1,\"row\":\"on").unwrap();

        let (j, said) = open(&path, "eval a", "b1");
        assert_eq!(j.take(0).as_deref(), Some("zero"));
        assert_eq!(j.take(0), None, "handed over once");
        assert_eq!(j.take(1), None);
        assert!(said[0].starts_with("resuming: 2 of 3 cases"), "{said:?}");
        j.record(1, &"one".to_string()).unwrap();
        drop(j);
        let (j, _) = open(&path, "eval a", "b1");
        assert_eq!(
            j.take(1).as_deref(),
            Some("one"),
            "appended after whole lines"
        );
        assert_eq!(j.take(2).as_deref(), Some("two"));
        drop(j);

        let (j, said) = open(&path, "eval a", "b2");
        assert_eq!(j.take(2), None);
        assert!(said[0].contains("another build"), "{said:?}");
        j.record(2, &"two".to_string()).unwrap();
        drop(j);
        let (j, said) = open(&path, "eval b", "b2");
        assert_eq!(j.take(2), None);
        assert!(said[0].contains("another command: eval a"), "{said:?}");
        j.remove().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn the_runs_of_an_unfinished_case_are_recalled_after_a_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.journal");
        let (j, _) = open(&path, "eval a", "b1");
        j.record(2, &"two".to_string()).unwrap();
        j.record_run(1, "oracle [4]", &40u64).unwrap();
        j.record_run(2, "baseline", &7u64).unwrap();
        drop(j); // stopped while writing the next run
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"case\":1,\"run\":\"base").unwrap();

        let (j, said) = open(&path, "eval a", "b1");
        assert!(
            said[0].starts_with("resuming: 1 of 3 cases finished before, and 1 runs"),
            "{said:?}"
        );
        assert_eq!(j.recall_run::<u64>(1, "oracle [4]"), Some(40));
        assert_eq!(j.recall_run::<u64>(1, "baseline"), None, "cut short");
        assert_eq!(
            j.recall_run::<u64>(2, "baseline"),
            None,
            "its case is finished"
        );
        j.record_run(1, "baseline", &9u64).unwrap();
        drop(j);
        let (j, _) = open(&path, "eval a", "b1");
        assert_eq!(
            j.recall_run::<u64>(1, "baseline"),
            Some(9),
            "after whole lines"
        );
        assert_eq!(
            j.recall_run::<u64>(1, "oracle [4]"),
            Some(40),
            "kept by the rewrite"
        );
        drop(j);
        let (j, _) = open(&path, "eval a", "b2");
        assert_eq!(
            j.recall_run::<u64>(1, "oracle [4]"),
            None,
            "another build's"
        );
    }
}
