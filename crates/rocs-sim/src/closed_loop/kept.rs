//! Runs an evaluation has already made, kept by its caller (`sim eval`'s journal) so that
//! an evaluation stopped part way resumes without making them again. A row of the modern
//! suite at full length is dozens of runs of many minutes each: kept row by row, a row
//! longer than the time the machine is given would never be done. Every run is
//! deterministic for its machine, workload and seed, so a recalled run counts exactly what
//! making it again would.

use super::LoopError;
use crate::RunStats;

/// Why a run just made could not be kept.
pub type KeepError = Box<dyn std::error::Error + Send + Sync>;

/// Where the finished runs of one evaluation case are kept, by what was run (from several
/// threads at once: see [`super::LoopConfig::threads`]).
pub trait KeptRuns: Sync {
    /// The counts of the run `what`, if it was made before.
    fn recall(&self, what: &str) -> Option<RunStats>;
    /// Keep the run `what`, just made.
    fn keep(&self, what: &str, stats: &RunStats) -> Result<(), KeepError>;
}

/// Nothing is kept: every run is made.
pub struct NothingKept;

impl KeptRuns for NothingKept {
    fn recall(&self, _what: &str) -> Option<RunStats> {
        None
    }

    fn keep(&self, _what: &str, _stats: &RunStats) -> Result<(), KeepError> {
        Ok(())
    }
}

/// The run `what`: recalled from `kept` if it was made before, else made by `make_it` and
/// kept. Its counts, and whether they were recalled.
pub(super) fn made_or_recalled(
    kept: &dyn KeptRuns,
    what: &str,
    make_it: impl FnOnce() -> Result<RunStats, LoopError>,
) -> Result<(RunStats, bool), LoopError> {
    if let Some(stats) = kept.recall(what) {
        return Ok((stats, true));
    }
    let stats = make_it()?;
    kept.keep(what, &stats).map_err(|source| LoopError::Keep {
        what: what.to_string(),
        source,
    })?;
    Ok((stats, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Kept(Mutex<BTreeMap<String, RunStats>>);

    impl KeptRuns for Kept {
        fn recall(&self, what: &str) -> Option<RunStats> {
            self.0.lock().unwrap().get(what).cloned()
        }
        fn keep(&self, what: &str, stats: &RunStats) -> Result<(), KeepError> {
            self.0
                .lock()
                .unwrap()
                .insert(what.to_string(), stats.clone());
            Ok(())
        }
    }

    fn stats(cycles: u64) -> RunStats {
        let mut s = RunStats::default();
        s.counts.cycles = cycles;
        s
    }

    #[test]
    fn a_run_is_made_once_then_recalled() {
        let kept = Kept::default();
        let made = RefCell::new(0);
        let run = |what: &str, cycles| {
            made_or_recalled(&kept, what, || {
                *made.borrow_mut() += 1;
                Ok(stats(cycles))
            })
            .unwrap()
        };
        assert_eq!(run("baseline", 100), (stats(100), false));
        // Recalled: the run is not made again (a run's counts do not change).
        assert_eq!(run("baseline", 999), (stats(100), true));
        assert_eq!(run("oracle [3]", 90), (stats(90), false));
        assert_eq!(*made.borrow(), 2);
    }

    #[test]
    fn a_run_that_cannot_be_kept_is_an_error_naming_it() {
        struct Full;
        impl KeptRuns for Full {
            fn recall(&self, _: &str) -> Option<RunStats> {
                None
            }
            fn keep(&self, _: &str, _: &RunStats) -> Result<(), KeepError> {
                Err("no space left on device".into())
            }
        }
        let err = made_or_recalled(&Full, "baseline", || Ok(stats(1))).unwrap_err();
        assert!(err.to_string().contains("\"baseline\""), "{err}");
    }
}
