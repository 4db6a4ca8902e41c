//! What rocsctl prints and draws from rocsd's answers: tables and terminal pictures for
//! people, and the profile as SVG.

use std::path::Path;

use anyhow::Context;
use rocs_config::protocol::{
    ActionReply, ConfineReply, HistoryReply, PageRow, ProfileReply, ReloadReply, Request,
    StackReply, StatusReply, TargetSummary,
};
use rocs_core::{DataSource, MissRateStack, PageProfile, VirtPage};
use serde_json::Value;

use crate::render;

/// The answer for people.
pub fn render_text(request: &Request, result: &Value) -> anyhow::Result<String> {
    let r = result.clone();
    Ok(match request {
        Request::Status => status_text(&serde_json::from_value(r)?),
        Request::Targets => targets_text(&serde_json::from_value::<Vec<TargetSummary>>(r)?),
        Request::Profile { .. } => {
            let p: ProfileReply = serde_json::from_value(r)?;
            profile_text(&p) + &pictures_text(&p)
        }
        Request::Stack { .. } => stack_text(&serde_json::from_value(r)?),
        Request::History { .. } => history_text(&serde_json::from_value(r)?),
        Request::Pause { .. } | Request::Resume { .. } | Request::Restore { .. } => {
            action_text(&serde_json::from_value(r)?)
        }
        Request::Confine { .. } => {
            let c: ConfineReply = serde_json::from_value(r)?;
            format!(
                "target {}: {} of {} confined ({} confined by name in all)\n",
                c.target,
                c.confined,
                count(c.pages, "named page", "named pages"),
                c.explicit
            )
        }
        Request::Reload => {
            let r: ReloadReply = serde_json::from_value(r)?;
            let mut s = format!(
                "reloaded {}\n",
                count(r.policies.len(), "policy", "policies")
            );
            for p in r.policies {
                s += &format!("  {:<20} {}\n", p.name, p.file);
            }
            s
        }
    })
}

/// `n` and its noun, singular for exactly one: "1 page", "3 pages".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What `pause`, `resume` or `restore` did.
fn action_text(a: &ActionReply) -> String {
    let pids: Vec<String> = a.targets.iter().map(|p| p.to_string()).collect();
    let mut out = format!(
        "{}: {}{}",
        a.action,
        count(a.targets.len(), "target", "targets"),
        if pids.is_empty() {
            String::new()
        } else {
            format!(" ({})", pids.join(", "))
        }
    );
    if let Some(back) = a.pages_restored {
        out += &format!(
            ", {} moved back out of the pollute buffer",
            count(back, "page", "pages")
        );
    }
    match a.pages_still_confined {
        Some(0) | None => {}
        Some(n) => {
            out += &format!(
                "; {} still confined (still going back, at most page_budget pages a window, \
                 or could not move: `rocsctl history` says why)",
                count(n, "page", "pages")
            )
        }
    }
    if a.action == "restore" && !a.targets.is_empty() {
        out += &format!(
            "\n{} paused until `rocsctl resume`",
            if a.targets.len() == 1 {
                "it stays"
            } else {
                "they stay"
            }
        );
    }
    out + "\n"
}

fn bytes(n: u64) -> String {
    const UNITS: &[(u64, &str)] = &[(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for &(u, name) in UNITS {
        if n >= u && n.is_multiple_of(u) {
            return format!("{} {name}", n / u);
        }
    }
    format!("{n} B")
}

fn status_text(s: &StatusReply) -> String {
    let mut out = format!(
        "rocsd {} (protocol {}), pid {}, up {:.0} s\n",
        s.version, s.protocol, s.pid, s.uptime_s
    );
    out += &format!("platform   {} ({})\n", s.platform, s.capability);
    match &s.llc {
        Some(g) => {
            out += &format!(
                "LLC        {}, {}-way, {} B lines, {}: {} colours of {} pages\n",
                bytes(g.size()),
                g.ways,
                g.line_size,
                count(g.slices as usize, "slice", "slices"),
                s.colours,
                bytes(g.page_size)
            )
        }
        None => out += "LLC        unknown\n",
    }
    out += &format!(
        "targets    {} now, {} since start, {} gone\n",
        s.targets, s.targets_seen, s.targets_exited
    );
    out += &format!("paused     {}\n", paused_text(s));
    out += &format!("policies   {}\n", s.policies.len());
    for p in &s.policies {
        out += &format!("  {:<20} {}\n", p.name, p.file);
    }
    if let Some(e) = &s.last_reload_error {
        out += "last reload refused (the policies above stay in force):\n";
        for line in e.lines() {
            out += &format!("  {line}\n");
        }
    }
    if s.notices.is_empty() {
        out += "notices    none\n";
    } else {
        out += &format!("notices    {}\n", s.notices.len());
        for n in &s.notices {
            out += &format!("  {n}\n");
        }
    }
    out
}

/// Whether targets are paused: all of them by the operator, some one by one, or none.
fn paused_text(s: &StatusReply) -> String {
    let pids = || {
        let pids: Vec<String> = s.paused_targets.iter().map(|p| p.to_string()).collect();
        pids.join(", ")
    };
    if s.paused {
        "yes: every target, and those found later (`rocsctl resume` starts them again)".into()
    } else if s.paused_targets.is_empty() {
        "no".into()
    } else {
        format!(
            "{} of {} ({}): paused or restored one by one; `rocsctl resume PID` starts one again",
            s.paused_targets.len(),
            count(s.targets, "target", "targets"),
            pids()
        )
    }
}

fn targets_text(ts: &[TargetSummary]) -> String {
    if ts.is_empty() {
        return "no targets (no running process matches a policy)\n".to_string();
    }
    let mut out = format!(
        "{:>7}  {:<15} {:<12} {:<8} {:>7} {:>8} {:>8} {:>8} {:>9} {:>6}\n",
        "PID", "COMM", "POLICY", "STATE", "IPC", "MPKI", "PROFILED", "CONFINED", "SAMPLES", "LOST"
    );
    for t in ts {
        out += &format!(
            "{:>7}  {:<15} {:<12} {:<8} {:>7.3} {:>8.2} {:>8} {:>8} {:>9} {:>6}\n",
            t.pid,
            t.comm,
            t.policy,
            t.state,
            t.ipc,
            t.mpki,
            t.pages_profiled,
            t.pages_confined,
            t.samples,
            t.lost_samples
        );
        if let Some(e) = &t.last_error {
            out += &format!("{:>7}  last error: {e}\n", "");
        }
    }
    if ts.iter().any(|t| t.pages_confined > t.pages_profiled) {
        out += "CONFINED may exceed PROFILED: a region of the stack is confined whole, with the \
                unsampled pages between its sampled ones (ROCS Fig. 3), and pages confined by \
                name need no samples.\n";
    }
    out
}

fn head(t: &TargetSummary) -> String {
    format!(
        "target {} ({}), policy {}, {}{}: IPC {:.3}, MPKI {:.2}, {}\n",
        t.pid,
        t.comm,
        t.policy,
        t.state,
        if t.capability == "full" {
            String::new()
        } else {
            format!(" [{}]", t.capability)
        },
        t.ipc,
        t.mpki,
        count(t.windows as usize, "window", "windows")
    )
}

fn rate(hits: u64, misses: u64) -> String {
    if hits + misses == 0 {
        "-".into()
    } else {
        format!("{:.2}", misses as f64 / (hits + misses) as f64)
    }
}

/// Runs of address-adjacent pages with the same confinement, for the profile table.
fn runs(pages: &[PageRow]) -> Vec<(u64, u64, u64, u64, u64, bool)> {
    let mut out: Vec<(u64, u64, u64, u64, u64, bool)> = Vec::new();
    for p in pages {
        match out.last_mut() {
            Some(r) if r.1 + 1 == p.page && r.5 == p.confined => {
                r.1 = p.page;
                r.2 += 1;
                r.3 += p.hits as u64;
                r.4 += p.misses as u64;
            }
            _ => out.push((
                p.page,
                p.page,
                1,
                p.hits as u64,
                p.misses as u64,
                p.confined,
            )),
        }
    }
    out
}

fn profile_text(p: &ProfileReply) -> String {
    let mut out = head(&p.target);
    let confined = p.pages.iter().filter(|r| r.confined).count();
    out += &format!(
        "{} over {} of {}; {} confined\n",
        count(p.samples as usize, "sample", "samples"),
        count(p.pages.len(), "page", "pages"),
        bytes(1 << p.page_shift),
        count(confined, "page", "pages")
    );
    if p.pages.is_empty() {
        out += "(no profile yet: the target has not been sampled)\n";
        return out;
    }
    out += &format!(
        "{:<37} {:>7} {:>8} {:>8} {:>6}  {}\n",
        "ADDRESSES", "PAGES", "HITS", "MISSES", "RATE", "CONFINED"
    );
    let shift = p.page_shift;
    let rows = runs(&p.pages);
    const MAX_ROWS: usize = 40;
    for r in rows.iter().take(MAX_ROWS) {
        out += &format!(
            "{:#018x}-{:#018x} {:>7} {:>8} {:>8} {:>6}  {}\n",
            r.0 << shift,
            ((r.1 + 1) << shift) - 1,
            r.2,
            r.3,
            r.4,
            rate(r.3, r.4),
            if r.5 { "yes" } else { "" }
        );
    }
    if rows.len() > MAX_ROWS {
        out += &format!(
            "... {} more runs (--json has every page)\n",
            rows.len() - MAX_ROWS
        );
    }
    out
}

fn stack_text(s: &StackReply) -> String {
    let mut out = head(&s.target);
    out += &format!(
        "miss-rate stack: {}, the top {} confined{}\n",
        count(s.total, "page", "pages"),
        s.k,
        if s.entries.len() < s.total {
            format!(" (showing {})", s.entries.len())
        } else {
            String::new()
        }
    );
    if s.entries.is_empty() {
        return out;
    }
    out += &format!(
        "{:>6}  {:<18} {:>8} {:>8} {:>9} {:>11}\n",
        "RANK", "PAGE", "HITS", "MISSES", "PAGE RATE", "REGION RATE"
    );
    for (i, e) in s.entries.iter().enumerate() {
        out += &format!(
            "{:>6}{} {:#018x} {:>8} {:>8} {:>9} {:>11.2}\n",
            i + 1,
            if i < s.k { "*" } else { " " },
            e.page.0 << s.page_shift,
            e.hits,
            e.misses,
            rate(e.hits, e.misses),
            e.miss_rate
        );
    }
    out += "(ranked by REGION RATE, the miss rate of the address-adjacent pages of similar rate \
            merged with the page; PAGE RATE is the page's own, '-' without LLC samples)\n";
    if s.k > 0 {
        out += "(* confined in the pollute buffer)\n";
    }
    if !s.explicit.is_empty() {
        out += &format!(
            "confined by name, outside the search: {}\n",
            count(s.explicit.len(), "page", "pages")
        );
        for (first, last) in page_runs(&s.explicit) {
            out += &format!(
                "  {:#018x}-{:#018x} {:>7}\n",
                first << s.page_shift,
                ((last + 1) << s.page_shift) - 1,
                count((last - first + 1) as usize, "page", "pages")
            );
        }
    }
    out
}

/// Runs of consecutive page numbers (sorted input): first and last of each.
fn page_runs(pages: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match runs.last_mut() {
            Some(r) if r.1 + 1 == p => r.1 = p,
            _ => runs.push((p, p)),
        }
    }
    runs
}

fn history_text(h: &HistoryReply) -> String {
    let mut out = head(&h.target);
    if h.events.is_empty() {
        out += "(nothing has happened yet)\n";
    }
    for e in &h.events {
        out += &format!("{:>6}  {:<8} {}\n", e.window, e.kind, e.text);
    }
    out
}

/// The profile the daemon sent, as rocs-core's profile and (per-page) stack, for the pictures.
fn rebuild(p: &ProfileReply) -> (PageProfile, MissRateStack) {
    let mut profile = PageProfile::new(p.page_shift);
    for r in &p.pages {
        let addr = r.page << p.page_shift;
        for (n, source) in [
            (r.hits, DataSource::LlcHit),
            (r.misses, DataSource::LlcMiss),
            (r.other, DataSource::Other),
        ] {
            for _ in 0..n {
                profile.record(addr, source);
            }
        }
    }
    let stack = MissRateStack::from_profile(&profile);
    (profile, stack)
}

/// The miss-rate histogram (ROCS Fig. 2) and the address-space map (ROCS Fig. 3).
fn pictures_text(p: &ProfileReply) -> String {
    if p.pages.is_empty() {
        return String::new();
    }
    let (profile, stack) = rebuild(p);
    let mut out = String::from("\n");
    out += &render::histogram_text(&stack, 10, 40);
    out += "\n";
    out += &render::address_map_text(&profile, 100, 6);
    out
}

/// The same pictures as an SVG file.
pub fn write_svg(p: &ProfileReply, path: &Path) -> anyhow::Result<()> {
    let (profile, stack) = rebuild(p);
    let title = format!(
        "target {} ({}), policy {}, {}",
        p.target.pid, p.target.comm, p.target.policy, p.target.state
    );
    let confined = p
        .pages
        .iter()
        .filter(|r| r.confined)
        .map(|r| VirtPage(r.page))
        .collect();
    let doc = render::profile_svg(&profile, &stack, &confined, &title);
    std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_adjacent_pages_with_the_same_placement() {
        let row = |page, confined| PageRow {
            page,
            hits: 1,
            misses: 3,
            other: 0,
            confined,
        };
        let r = runs(&[row(1, false), row(2, false), row(3, true), row(5, true)]);
        assert_eq!(
            r,
            vec![
                (1, 2, 2, 2, 6, false),
                (3, 3, 1, 1, 3, true),
                (5, 5, 1, 1, 3, true)
            ]
        );
    }

    #[test]
    fn page_runs_join_consecutive_pages() {
        assert_eq!(
            page_runs(&[1, 2, 3, 7, 9, 10]),
            vec![(1, 3), (7, 7), (9, 10)]
        );
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes(512 << 10), "512 KiB");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(1000), "1000 B");
    }

    fn summary(pid: u32, profiled: usize, confined: usize, paused: bool) -> TargetSummary {
        serde_json::from_value(serde_json::json!({
            "pid": pid, "comm": "art", "policy": "spec",
            "state": if paused { "paused" } else { "steady" }, "paused": paused,
            "capability": "full", "windows": 1, "ipc": 0.5, "mpki": 3.0,
            "pages_profiled": profiled, "pages_confined": confined, "samples": 10,
            "lost_samples": 0, "uptime_s": 1.0, "last_error": null
        }))
        .unwrap()
    }

    #[test]
    fn targets_explain_more_confined_than_profiled_pages() {
        let t = targets_text(&[summary(7, 2671, 3164, false)]);
        assert!(t.contains("CONFINED may exceed PROFILED"), "{t}");
        assert!(
            t.contains("unsampled pages between its sampled ones"),
            "{t}"
        );
        let t = targets_text(&[summary(7, 2671, 100, false)]);
        assert!(!t.contains("may exceed"), "{t}");
    }

    #[test]
    fn the_stack_shows_the_pages_own_rate_beside_its_regions() {
        let s = StackReply {
            target: summary(7, 2, 1, false),
            page_shift: 12,
            total: 2,
            k: 1,
            entries: vec![
                rocs_core::StackEntry {
                    page: VirtPage(1),
                    hits: 0,
                    misses: 13,
                    miss_rate: 0.82,
                },
                rocs_core::StackEntry {
                    page: VirtPage(2),
                    hits: 0,
                    misses: 0,
                    miss_rate: 0.82,
                },
            ],
            explicit: vec![],
        };
        let t = stack_text(&s);
        assert!(t.contains("PAGE RATE REGION RATE"), "{t}");
        let row = |page: &str| t.lines().find(|l| l.contains(page)).unwrap().to_string();
        let own: Vec<String> = row("0x0000000000001000")
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(own[own.len() - 2..], ["1.00", "0.82"], "{t}");
        assert!(
            row("0x0000000000002000")
                .trim_end()
                .ends_with("-        0.82"),
            "{t}"
        );
    }

    #[test]
    fn restore_says_how_many_pages_went_back_and_that_targets_stay_paused() {
        let mut a = ActionReply {
            action: "restore".into(),
            targets: vec![7],
            pages_restored: Some(1),
            pages_still_confined: Some(0),
        };
        assert_eq!(
            action_text(&a),
            "restore: 1 target (7), 1 page moved back out of the pollute buffer\n\
             it stays paused until `rocsctl resume`\n"
        );
        a.targets.push(8);
        a.pages_still_confined = Some(5);
        let t = action_text(&a);
        assert!(
            t.starts_with("restore: 2 targets (7, 8), 1 page moved back"),
            "{t}"
        );
        assert!(t.contains("; 5 pages still confined"), "{t}");
        assert!(
            t.ends_with("they stay paused until `rocsctl resume`\n"),
            "{t}"
        );
        let pause = ActionReply {
            action: "pause".into(),
            targets: vec![7],
            pages_restored: None,
            pages_still_confined: None,
        };
        assert_eq!(action_text(&pause), "pause: 1 target (7)\n");
    }
}
