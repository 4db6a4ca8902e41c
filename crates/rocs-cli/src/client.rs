//! rocsctl's daemon commands: ask rocsd over its control socket and print the answer for
//! people (tables) or for scripts (`--json`: the daemon's result as it came).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use rocs_config::protocol::{
    encode_request, ActionReply, ConfineReply, HistoryReply, PageRow, ProfileReply, ReloadReply,
    Reply, Request, StackReply, StatusReply, TargetSummary,
};
use rocs_core::{DataSource, MissRateStack, PageProfile, VirtPage};
use serde_json::Value;

use crate::render;

/// Options every command takes, before or after the command's name.
#[derive(Args, Clone, Debug)]
pub struct Global {
    /// Print the answer as JSON (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// The control socket of the rocsd to ask (daemon commands).
    #[arg(long, global = true, value_name = "PATH", default_value = rocs_config::daemon::DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

#[derive(Subcommand)]
pub enum ClientCommand {
    /// rocsd: platform, what it can do here, policies, targets.
    Status,
    /// The processes rocsd is attached to, with their state, IPC, MPKI and pages.
    ///
    /// PROFILED counts the pages with samples in the last profile; CONFINED the pages in the
    /// pollute buffer. CONFINED may exceed PROFILED: the stack's regions also cover the
    /// unsampled pages between sampled ones (a region is confined whole, as in ROCS Fig. 3),
    /// and pages confined by name need no samples.
    Targets,
    /// A target's page profile from rocsd (sampled hits and misses by address, the miss-rate
    /// histogram and the address-space map); or, with --perf-data, a perf.data file's.
    Profile {
        /// The target: a pid, or a command name only one target has.
        #[arg(required_unless_present = "perf_data")]
        target: Option<String>,
        /// Read this perf.data file (`perf record -d`, `perf mem record`) instead of asking
        /// rocsd.
        #[arg(long = "perf-data", value_name = "FILE", conflicts_with = "target")]
        perf_data: Option<PathBuf>,
        /// With --perf-data: keep only this process's samples.
        #[arg(long, requires = "perf_data")]
        pid: Option<u32>,
        /// Also draw the pictures as SVG in FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// A target's miss-rate stack: its pages ordered by miss rate, the confined ones marked.
    ///
    /// Pages are ranked by their region's miss rate (REGION RATE: address-adjacent pages of
    /// similar rate merged, so that a page with few samples is not ranked alone); PAGE RATE
    /// is the page's own sampled rate ("-": no LLC sample of its own).
    Stack {
        target: String,
        /// Show at most this many entries from the top (0: all).
        #[arg(long, default_value_t = 30)]
        limit: usize,
    },
    /// What a target's controller did and why: states, profiles, search steps.
    History { target: String },
    /// Stop searching and moving pages (one target, or all); pages stay where they are.
    Pause { target: Option<String> },
    /// Start again from observing (one target, or all).
    Resume { target: Option<String> },
    /// Move a target's pages (or every target's) back out of the pollute buffer, and pause
    /// it, so that no search confines them again (`resume` starts it again from observing).
    /// Says how many pages went back.
    Restore { target: Option<String> },
    /// Re-read the policy files (a broken one is reported; the old policies stay).
    Reload,
    /// Confine pages of a target now, by name, outside the search (root only): an address
    /// range, or the K worst pages of its stack. `stack` marks them; `restore` moves them
    /// back like the others.
    Confine {
        target: String,
        /// START-END: hexadecimal addresses, END excluded (`profile` shows the target's).
        #[arg(long, value_name = "START-END", value_parser = parse_range,
              required_unless_present = "top", conflicts_with = "top")]
        range: Option<[u64; 2]>,
        /// The K pages at the top of the target's miss-rate stack.
        #[arg(long, value_name = "K")]
        top: Option<usize>,
    },
}

/// `START-END` in hexadecimal (with or without 0x), START below END.
fn parse_range(s: &str) -> Result<[u64; 2], String> {
    let hex = |t: &str| u64::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok();
    match s.split_once('-').map(|(a, b)| (hex(a), hex(b))) {
        Some((Some(start), Some(end))) if start < end => Ok([start, end]),
        Some((Some(_), Some(_))) => Err(format!("{s:?}: START must be below END")),
        _ => Err(format!(
            "{s:?} is not START-END in hexadecimal (e.g. 0x7f0000000000-0x7f0000100000)"
        )),
    }
}

/// Longest reply accepted (a profile of millions of pages is large, but not unbounded).
const MAX_REPLY: u64 = 512 << 20;

/// Send one request, read one reply.
pub fn ask(socket: &Path, request: &Request) -> anyhow::Result<Reply> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                "is rocsd running? (`systemctl status rocsd`; or give --socket PATH)"
            }
            std::io::ErrorKind::PermissionDenied => {
                "reading needs root or membership of group rocs; changing needs root"
            }
            _ => "",
        };
        anyhow::anyhow!("cannot reach rocsd at {}: {e}; {hint}", socket.display())
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    // A daemon that refuses the connection may close it before taking the request; it
    // still says why, so read the reply before reporting a failed write.
    let sent = stream.write_all(encode_request(1, request).as_bytes());
    let mut line = String::new();
    let read = BufReader::new(stream.take(MAX_REPLY)).read_line(&mut line);
    if line.is_empty() {
        if let Err(e) = sent {
            return Err(e).with_context(|| format!("sending to rocsd at {}", socket.display()));
        }
    }
    read.with_context(|| format!("reading rocsd's reply from {}", socket.display()))?;
    if line.is_empty() {
        bail!(
            "rocsd at {} closed the connection without a reply",
            socket.display()
        );
    }
    let reply: Reply = serde_json::from_str(&line).context("rocsd's reply is not valid JSON")?;
    if reply.v != rocs_config::protocol::PROTOCOL_VERSION {
        bail!(
            "rocsd speaks protocol {} and this rocsctl {}; use the rocsctl of the same release",
            reply.v,
            rocs_config::protocol::PROTOCOL_VERSION
        );
    }
    Ok(reply)
}

pub fn run(cmd: ClientCommand, conn: &Global) -> anyhow::Result<ExitCode> {
    let (request, svg) = match cmd {
        ClientCommand::Status => (Request::Status, None),
        ClientCommand::Targets => (Request::Targets, None),
        ClientCommand::Profile {
            target,
            perf_data,
            pid,
            svg,
        } => match (target, perf_data) {
            (_, Some(perf_data)) => {
                return crate::linux::run(
                    crate::linux::LinuxCommand::Profile {
                        perf_data,
                        pid,
                        svg,
                    },
                    conn.json,
                )
            }
            (Some(target), None) => (Request::Profile { target }, svg),
            (None, None) => bail!("give a TARGET (pid or command name) or --perf-data FILE"),
        },
        ClientCommand::Stack { target, limit } => (
            Request::Stack {
                target,
                limit: (limit > 0).then_some(limit),
            },
            None,
        ),
        ClientCommand::History { target } => (Request::History { target }, None),
        ClientCommand::Pause { target } => (Request::Pause { target }, None),
        ClientCommand::Resume { target } => (Request::Resume { target }, None),
        ClientCommand::Restore { target } => (Request::Restore { target }, None),
        ClientCommand::Reload => (Request::Reload, None),
        ClientCommand::Confine { target, range, top } => {
            (Request::Confine { target, range, top }, None)
        }
    };
    let reply = ask(&conn.socket, &request)?;
    let result = match reply.into_result() {
        Ok(v) => v,
        Err(e) => {
            if conn.json {
                println!("{}", serde_json::json!({ "error": e }));
            } else {
                eprintln!("rocsctl: rocsd refused {}: {}", request.name(), e.message);
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    // The picture first: a reader that stops early (`| head`) must not cost the file.
    let mut wrote = None;
    if let (Some(path), Request::Profile { .. }) = (svg, &request) {
        let p: ProfileReply = serde_json::from_value(result.clone())?;
        write_svg(&p, &path)?;
        wrote = Some(path);
    }
    if conn.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", render_text(&request, &result)?);
        if let Some(path) = wrote {
            println!("wrote {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

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
fn write_svg(p: &ProfileReply, path: &Path) -> anyhow::Result<()> {
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
    fn ranges_and_runs_read_well() {
        assert_eq!(parse_range("0x1000-0x3000"), Ok([0x1000, 0x3000]));
        assert_eq!(parse_range("1000-3000"), Ok([0x1000, 0x3000]));
        assert!(parse_range("0x3000-0x1000").is_err());
        assert!(parse_range("0x3000").is_err());
        assert!(parse_range("x-y").is_err());
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
