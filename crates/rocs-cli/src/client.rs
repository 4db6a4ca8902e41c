//! rocsctl's daemon commands: ask rocsd over its control socket and print the answer for
//! people (tables) or for scripts (`--json`: the daemon's result as it came).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use rocs_config::protocol::{encode_request, ProfileReply, Reply, Request};

mod text;
pub use text::count;
use text::{render_text, write_svg};

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
    /// it until `resume`.
    ///
    /// The pause keeps the search from confining the pages again; `resume` starts the
    /// target again from observing. The reply says how many pages went back, and how many
    /// are still confined (still moving, at most page_budget a window, or unable to move).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_well() {
        assert_eq!(parse_range("0x1000-0x3000"), Ok([0x1000, 0x3000]));
        assert_eq!(parse_range("1000-3000"), Ok([0x1000, 0x3000]));
        assert!(parse_range("0x3000-0x1000").is_err());
        assert!(parse_range("0x3000").is_err());
        assert!(parse_range("x-y").is_err());
    }
}
