//! What rocsd says about its targets, in words: the journal's lines and `rocsctl
//! history`'s. Every controller event is written here, once.

use rocs_core::{EventKind, Pid, Placement};

/// A short kind and a sentence for people, for the journal and `rocsctl history`; `shown`
/// gives the pid users know for a platform pid.
pub fn describe(kind: &EventKind, shown: &dyn Fn(Pid) -> Pid) -> (&'static str, String) {
    match kind {
        EventKind::Transition { from, to, reason } => {
            ("state", format!("{from} -> {to}: {reason}"))
        }
        EventKind::Profiled {
            pages_profiled,
            samples,
            stack_pages,
            regions,
        } => (
            "profile",
            format!(
                "{samples} samples over {pages_profiled} pages: a stack of {stack_pages} pages \
                 in {regions} regions"
            ),
        ),
        EventKind::SearchStep {
            k,
            ipc,
            mpki,
            group_score,
            sharers,
        } => {
            let group = group_score
                .map(|s| format!(", LLC group score {s:.3}"))
                .unwrap_or_default();
            // Who gained and who paid: each sharer's pace against the turn's start.
            let paces = sharers
                .iter()
                .map(|p| format!("pid {} {:+.1}%", shown(p.pid), (p.pace - 1.0) * 100.0))
                .collect::<Vec<_>>()
                .join(", ");
            let paces = if paces.is_empty() {
                paces
            } else {
                format!(" ({paces})")
            };
            (
                "search",
                format!("k = {k}: IPC {ipc:.3}, MPKI {mpki:.2}{group}{paces}"),
            )
        }
        EventKind::Waiting { holder, reason } => (
            "state",
            format!(
                "waiting for pid {}'s search to finish: {reason}",
                shown(*holder)
            ),
        ),
        EventKind::SearchDone {
            k,
            ipc,
            baseline_ipc,
            windows,
        } => {
            let gain = match (ipc, baseline_ipc) {
                (Some(i), Some(b)) if *b > 0.0 => {
                    format!(
                        " (IPC {i:.3} against {b:.3} at k = 0, {:+.1}%)",
                        (i / b - 1.0) * 100.0
                    )
                }
                _ => String::new(),
            };
            (
                "search",
                format!("chose k = {k}{gain} after {windows} windows"),
            )
        }
        EventKind::MigrationFailed { to, failed, errno } => (
            "migrate",
            format!(
                "{failed} pages could not move to {}: {errno}",
                match to {
                    Placement::Pollute => "the pollute buffer",
                    Placement::Restore => "the ordinary colours",
                }
            ),
        ),
        EventKind::Restored => ("restore", "every confined page is back".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_search_step_says_who_gained_and_who_paid() {
        let step = EventKind::SearchStep {
            k: 64,
            ipc: 0.5,
            mpki: 12.0,
            group_score: Some(1.2),
            sharers: vec![
                rocs_core::SharerPace {
                    pid: 1000,
                    pace: 1.0,
                },
                rocs_core::SharerPace {
                    pid: 1001,
                    pace: 1.33,
                },
            ],
        };
        let shown: BTreeMap<Pid, Pid> = [(1000, 7), (1001, 8)].into();
        let (_, text) = describe(&step, &|p| shown.get(&p).copied().unwrap_or(p));
        assert_eq!(
            text,
            "k = 64: IPC 0.500, MPKI 12.00, LLC group score 1.200 (pid 7 +0.0%, pid 8 +33.0%)"
        );
    }

    #[test]
    fn a_waiting_target_names_the_holder_by_the_pid_users_see() {
        let waiting = EventKind::Waiting {
            holder: 1000,
            reason: "LLC miss rate 0.40 ≥ 0.10".into(),
        };
        let shown: BTreeMap<Pid, Pid> = [(1000, 1002)].into();
        let (kind, text) = describe(&waiting, &|p| shown.get(&p).copied().unwrap_or(p));
        assert_eq!(kind, "state");
        assert_eq!(
            text,
            "waiting for pid 1002's search to finish: LLC miss rate 0.40 ≥ 0.10"
        );
        // On Linux the platform's pid is the pid users see.
        let (_, text) = describe(&waiting, &|p| p);
        assert!(text.starts_with("waiting for pid 1000's search"), "{text}");
    }
}
