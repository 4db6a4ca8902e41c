//! What rocs says about its targets, in words: rocsd's journal lines, `rocsctl history`'s,
//! and `rocsctl sim run --timeline`'s. Every controller event is written here, once.

use rocs_core::search::{BlocksWhy, GainCheck};
use rocs_core::{Errno, EventKind, Pid, Placement};

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
                "{} over {}: a stack of {} in {}",
                count(*samples, "sample", "samples"),
                count(*pages_profiled, "page", "pages"),
                count(*stack_pages, "page", "pages"),
                count(*regions, "region", "regions")
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
                .map(|p| {
                    let phase = if p.other_phase {
                        " in another phase, not counted"
                    } else {
                        ""
                    };
                    format!(
                        "pid {} {:+.1}%{phase}",
                        shown(p.pid),
                        (p.pace - 1.0) * 100.0
                    )
                })
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
                format!(
                    "chose k = {k}{gain} after {}",
                    count(*windows, "window", "windows")
                ),
            )
        }
        EventKind::MigrationFailed { to, failed, errno } => (
            "migrate",
            format!(
                "{} could not move to {}: {}",
                count(*failed, "page", "pages"),
                match to {
                    Placement::Pollute => "the pollute buffer".to_string(),
                    Placement::Restore => "the ordinary colours".to_string(),
                    Placement::Ordinary(c) => format!("ordinary colour {}", c.0),
                },
                migration_error(*errno)
            ),
        ),
        EventKind::ColoursOverFull {
            colours,
            pages,
            buffer_pages,
            staying_in_buffer,
        } => {
            let mut parts = Vec::new();
            if *pages > 0 {
                parts.push(format!(
                    "{} hold more of the stack's pages than they fit: the {} beyond that are \
                     probed first",
                    count(*colours, "colour", "colours"),
                    count(*pages, "page", "pages")
                ));
            }
            if let Some(n) = staying_in_buffer.filter(|&n| n > 0) {
                parts.push(format!(
                    "with them the {} already on the pollute colours, where they stay",
                    count(n, "page", "pages")
                ));
            }
            if let Some(n) = buffer_pages {
                parts.push(format!(
                    "{} of its pages on the pollute colours already over-fill the buffer: \
                     probes move them out",
                    n
                ));
            }
            let text = parts.join("; ");
            ("colours", text)
        }
        EventKind::Restored => ("restore", "every confined page is back".to_string()),
        EventKind::SearchChecks { check } => ("search", gain_check(check)),
    }
}

/// Why a search checks its best point against drift, and how.
fn gain_check(check: &GainCheck) -> String {
    let blocks = |k: usize| {
        format!(
            "verified in balanced blocks against k = 0, each moving its {} there and back",
            count(k, "page", "pages")
        )
    };
    match *check {
        GainCheck::Revisit { k, at, gain, apart } => format!(
            "k = {k} beat k = 0 by {gain:.4} IPC beyond noise, {apart:.0} windows after k = 0's \
             windows: to tell that from a drift, k = {at} ({} away, first measured long \
             before) is measured again",
            count(k.abs_diff(at), "page", "pages")
        ),
        GainCheck::Blocks { k, why } => {
            let reason = match why {
                BlocksWhy::Trend => format!(
                    "the trend of IPC before the search, carried forward, explains k = {k}'s lead"
                ),
                BlocksWhy::DriftUnknown => format!(
                    "k = {k} beat k = 0 beyond noise, but too few windows before the search \
                     tell how fast IPC drifts by itself"
                ),
                BlocksWhy::Drift {
                    gain,
                    drift,
                    apart,
                    reach,
                } => format!(
                    "k = {k} beat k = 0 by {gain:.4} IPC beyond noise, {apart:.0} windows after \
                     k = 0's windows, and a drift as fast as before the search ({drift:.5} a \
                     window) could explain that; no point first measured long enough before \
                     lies within {} of it to measure again instead",
                    count(reach, "page", "pages")
                ),
                BlocksWhy::Revisited {
                    at,
                    gain,
                    drift,
                    apart,
                } => format!(
                    "k = {at}, measured again, moved {drift:.5} IPC a window, noise included: \
                     over the {apart:.0} windows between k = 0's and k = {k}'s, enough to \
                     explain k = {k}'s lead of {gain:.4} beyond noise"
                ),
            };
            format!("{reason}: {}", blocks(k))
        }
    }
}

/// `n` and its noun, singular for exactly one: "1 page", "3 pages".
pub fn count(n: impl TryInto<u64> + std::fmt::Display + Copy, one: &str, many: &str) -> String {
    let noun = if n.try_into().is_ok_and(|n| n == 1) {
        one
    } else {
        many
    };
    format!("{n} {noun}")
}

/// A page's migration error by name, what it means for the move, and what to do. The
/// per-page errors are the shim's (kmod-shim/README.md) and move_pages(2)'s.
pub fn migration_error(errno: Errno) -> String {
    let name = nix::errno::Errno::from_raw(errno.0);
    let why = match name {
        nix::errno::Errno::EFAULT => {
            "nothing is mapped at those addresses: the program unmapped or shrank that \
             memory since it was sampled, or the profile took an unsampled hole between \
             two mappings for part of a region; they are not tried again until the next \
             profile, nothing to do"
        }
        nix::errno::Errno::ENOENT => {
            "the pages were never touched, or are the shared zero page: they have no frame of \
             their own to move; nothing to do"
        }
        nix::errno::Errno::EACCES => {
            "shared memory (MAP_SHARED) belongs to other processes too and does not move; \
             only private anonymous memory can be confined"
        }
        nix::errno::Errno::EOPNOTSUPP => {
            "file-backed, hugetlbfs, KSM or special mappings do not move; only private \
             anonymous memory can be confined"
        }
        nix::errno::Errno::EBUSY => {
            "the kernel would not isolate them (pinned, swapped out, or a huge page it could \
             not split); they are tried again after the next profile"
        }
        nix::errno::Errno::ENOMEM => {
            "no free frame of a pollute colour is left on the page's node: the buffer is \
             full; give it more colours (knob pollute_colours) or confine fewer pages"
        }
        nix::errno::Errno::ESRCH => "the target exited during the move",
        nix::errno::Errno::EPERM => {
            "rocsd may not move this process's pages (the shim needs CAP_SYS_ADMIN)"
        }
        nix::errno::Errno::EINVAL => {
            "the platform cannot move these pages (a trace replayed without a page table, or \
             a report without a result for them)"
        }
        _ => name.desc(),
    };
    format!("{name:?} (errno {}): {why}", errno.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocs_core::Colour;
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
                    other_phase: false,
                },
                rocs_core::SharerPace {
                    pid: 1001,
                    pace: 1.33,
                    other_phase: false,
                },
                rocs_core::SharerPace {
                    pid: 1002,
                    pace: 7.0,
                    other_phase: true,
                },
            ],
        };
        let shown: BTreeMap<Pid, Pid> = [(1000, 7), (1001, 8)].into();
        let (_, text) = describe(&step, &|p| shown.get(&p).copied().unwrap_or(p));
        assert_eq!(
            text,
            "k = 64: IPC 0.500, MPKI 12.00, LLC group score 1.200 (pid 7 +0.0%, pid 8 +33.0%, \
             pid 1002 +600.0% in another phase, not counted)"
        );
    }

    #[test]
    fn a_search_checking_its_gain_says_why_it_pays_for_the_balanced_blocks() {
        let blocks = EventKind::SearchChecks {
            check: GainCheck::Blocks {
                k: 126_024,
                why: BlocksWhy::Drift {
                    gain: 0.0123,
                    drift: 0.00041,
                    apart: 42.0,
                    reach: 8_192,
                },
            },
        };
        let (kind, text) = describe(&blocks, &|p| p);
        assert_eq!(kind, "search");
        assert_eq!(
            text,
            "k = 126024 beat k = 0 by 0.0123 IPC beyond noise, 42 windows after k = 0's \
             windows, and a drift as fast as before the search (0.00041 a window) could \
             explain that; no point first measured long enough before lies within 8192 pages \
             of it to measure again instead: verified in balanced blocks against k = 0, each \
             moving its 126024 pages there and back"
        );
        let revisit = EventKind::SearchChecks {
            check: GainCheck::Revisit {
                k: 650,
                at: 600,
                gain: 0.19,
                apart: 5.5,
            },
        };
        let (_, text) = describe(&revisit, &|p| p);
        assert!(
            text.contains("k = 600 (50 pages away, first measured long before) is measured again"),
            "{text}"
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

    #[test]
    fn a_failed_migration_names_its_error_and_counts_in_words() {
        let failed = |failed, errno| EventKind::MigrationFailed {
            to: Placement::Pollute,
            failed,
            errno,
        };
        let (kind, text) = describe(&failed(1, Errno::EFAULT), &|p| p);
        assert_eq!(kind, "migrate");
        assert!(
            text.starts_with(
                "1 page could not move to the pollute buffer: EFAULT (errno 14): nothing is mapped"
            ),
            "{text}"
        );
        let (_, text) = describe(&failed(3, Errno::ENOMEM), &|p| p);
        assert!(text.starts_with("3 pages could not move"), "{text}");
        assert!(text.contains("ENOMEM (errno 12)") && text.contains("pollute_colours"));
        let to_colour = EventKind::MigrationFailed {
            to: Placement::Ordinary(Colour(7)),
            failed: 2,
            errno: Errno::EINVAL,
        };
        let (_, text) = describe(&to_colour, &|p| p);
        assert!(
            text.starts_with("2 pages could not move to ordinary colour 7: EINVAL"),
            "{text}"
        );
        // An errno without words of ours still has its name and the system's description.
        let (_, text) = describe(&failed(2, Errno(110)), &|p| p);
        assert!(
            text.ends_with("ETIMEDOUT (errno 110): Connection timed out"),
            "{text}"
        );
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1usize, "page", "pages"), "1 page");
        assert_eq!(count(0u64, "page", "pages"), "0 pages");
        assert_eq!(count(2u32, "policy", "policies"), "2 policies");
        let profiled = EventKind::Profiled {
            pages_profiled: 1,
            samples: 1,
            stack_pages: 1,
            regions: 1,
        };
        let (_, text) = describe(&profiled, &|p| p);
        assert_eq!(text, "1 sample over 1 page: a stack of 1 page in 1 region");
        let done = EventKind::SearchDone {
            k: 0,
            ipc: None,
            baseline_ipc: None,
            windows: 1,
        };
        assert_eq!(describe(&done, &|p| p).1, "chose k = 0 after 1 window");
    }
}
