//! `rocsctl sim trace`: replay a real program's memory trace (valgrind lackey's text or
//! rocs's binary format), or several as processes sharing the LLC, record one with `--record -- PROGRAM ARGS...` (valgrind's lackey
//! streaming through a pipe into the simulator), or convert one to the binary format.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use rocs_sim::closed_loop::{self, LoopConfig};
use rocs_sim::trace::TraceFormat;
use rocs_sim::{BinaryWriter, Machine, MachineSpec, SimError, TraceInput, TraceReader, TraceSpec};

use super::progress::{self, Steps};
use super::{modes_of, LoopArgs, Mode, ModeReport, RunReport};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TraceCommand {
    #[command(subcommand)]
    action: Option<TraceAction>,
    #[command(flatten)]
    replay: TraceArgs,
}

#[derive(Subcommand)]
enum TraceAction {
    /// Convert a trace (lackey text or binary) to rocs's binary format (docs/traces.md):
    /// about a fifth of the bytes, and several times faster to replay.
    Convert(ConvertArgs),
}

#[derive(Args)]
struct ConvertArgs {
    /// The trace to read, or - for standard input.
    input: String,
    /// The binary trace to write.
    output: PathBuf,
    /// Format of the input.
    #[arg(long, value_enum, default_value_t = TraceFormatArg::Auto)]
    format: TraceFormatArg,
}

#[derive(Args)]
struct TraceArgs {
    /// Trace format.
    #[arg(long, value_enum, default_value_t = TraceFormatArg::Auto)]
    format: TraceFormatArg,
    /// Trace file, or - for standard input; several traces are processes sharing the LLC,
    /// each on its own core (give --length so that they share it to the end).
    #[arg(required_unless_present = "record", conflicts_with = "record", num_args = 1..)]
    files: Vec<String>,
    /// Run the program given after `--` under valgrind's lackey and replay its accesses as
    /// they come, through a pipe (no trace file is written unless --save says where).
    #[arg(long, requires = "program")]
    record: bool,
    /// With --record: write the trace here (binary format) and replay it from there; every
    /// --mode other than baseline needs this (they replay the trace several times).
    #[arg(long, requires = "record")]
    save: Option<PathBuf>,
    /// With --record: the program to run and its arguments.
    #[arg(last = true)]
    program: Vec<String>,
    /// Built-in machine name or a machine .toml file.
    #[arg(long, default_value = "ppc970fx")]
    machine: String,
    /// Use virtual addresses as physical (compare with cachegrind).
    #[arg(long)]
    identity_map: bool,
    /// Replay the trace this many times (a file only).
    #[arg(long, default_value_t = 1, conflicts_with = "length")]
    repeat: u32,
    /// Replay each trace in a loop until it has given N references (trace lines: instruction
    /// fetches and data accesses), so that tenants of different lengths share the LLC to
    /// the end (trace files only).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    length: Option<u64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What to run (modes other than baseline need a trace file: they replay it again).
    #[arg(long, value_enum, default_value_t = Mode::Baseline)]
    mode: Mode,
    #[command(flatten)]
    closed_loop: LoopArgs,
    /// The machine with its costs of a page migration and a sample F times its own
    /// (real.md's "costs" column: the costs a short simulated window stands for); below
    /// 1, rocs samples as rocsd does a window 1/F times as long (its sample period times
    /// F, its CPU budget).
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    cost_scale: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TraceFormatArg {
    /// Tell from the first byte.
    Auto,
    /// valgrind --tool=lackey --trace-mem=yes
    Lackey,
    /// rocs's binary format (`rocsctl sim trace convert`).
    Binary,
}

impl TraceFormatArg {
    fn format(self) -> TraceFormat {
        match self {
            TraceFormatArg::Auto => TraceFormat::Detect,
            TraceFormatArg::Lackey => TraceFormat::Lackey,
            TraceFormatArg::Binary => TraceFormat::Binary,
        }
    }
}

pub fn run(cmd: TraceCommand) -> anyhow::Result<ExitCode> {
    match cmd.action {
        Some(TraceAction::Convert(args)) => convert(args),
        None => replay(cmd.replay),
    }
}

/// A trace file or standard input, read through a progress bar. The buffer is small: the
/// trace readers read into larger buffers of their own, which a BufReader then fills
/// straight from the input, with no copy through its own.
fn open_input(name: &str) -> anyhow::Result<Box<dyn BufRead + Send>> {
    const BUFFER: usize = 1 << 14;
    if name == "-" {
        let bar = progress::bytes(None, "standard input");
        return Ok(Box::new(BufReader::with_capacity(
            BUFFER,
            bar.wrap_read(std::io::stdin()),
        )));
    }
    let f = File::open(name).with_context(|| format!("cannot open {name}"))?;
    let len = f.metadata().map(|m| m.len()).ok();
    let bar = progress::bytes(len, name);
    Ok(Box::new(BufReader::with_capacity(BUFFER, bar.wrap_read(f))))
}

fn convert(args: ConvertArgs) -> anyhow::Result<ExitCode> {
    let mut reader = TraceReader::new(open_input(&args.input)?, args.format.format())?;
    let (events, bytes) = write_binary(&mut reader, &args.output)
        .with_context(|| format!("converting {}", args.input))?;
    println!(
        "{}: {events} events, {bytes} bytes ({:.2} bytes per event)",
        args.output.display(),
        bytes as f64 / events.max(1) as f64
    );
    Ok(ExitCode::SUCCESS)
}

/// Write every event of `reader` to `path` in the binary format; returns the events and
/// the bytes written.
fn write_binary(reader: &mut TraceReader, path: &Path) -> anyhow::Result<(u64, u64)> {
    let out = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BinaryWriter::new(BufWriter::with_capacity(1 << 20, out));
    let io = |e| anyhow::Error::new(e).context(format!("writing {}", path.display()));
    while let Some(ev) = reader.next_event()? {
        w.write(&ev).map_err(io)?;
    }
    let events = w.events();
    let out = w.finish().map_err(io)?;
    let bytes = out.get_ref().metadata().map_err(io)?.len();
    Ok((events, bytes))
}

fn replay(args: TraceArgs) -> anyhow::Result<ExitCode> {
    // Every option is checked before a program is traced.
    let (profile, cfg) = args
        .closed_loop
        .config(args.mode)?
        .at_cost_scale(&MachineSpec::resolve(&args.machine)?, args.cost_scale)
        .context("--cost-scale")?;
    if args.record {
        let Some(save) = &args.save else {
            return replay_recording(&args, &profile);
        };
        let (mut child, pipe) = spawn_lackey(&args.program)?;
        let bar = progress::bytes(None, "lackey's trace, saving");
        let mut reader = TraceReader::new(
            Box::new(BufReader::new(bar.wrap_read(pipe))),
            TraceFormat::Lackey,
        )?;
        let saved = write_binary(&mut reader, save);
        bar.finish_and_clear();
        finish_lackey(&mut child, saved.is_ok())?;
        let (events, bytes) = saved?;
        eprintln!(
            "saved {events} events in {} ({bytes} bytes)",
            save.display()
        );
        return replay_files(&args, &profile, &cfg, &[save.display().to_string()]);
    }
    replay_files(&args, &profile, &cfg, &args.files)
}

fn replay_files(
    args: &TraceArgs,
    profile: &MachineSpec,
    cfg: &LoopConfig,
    files: &[String],
) -> anyhow::Result<ExitCode> {
    let format = if args.record {
        TraceFormat::Binary
    } else {
        args.format.format()
    };
    let stdin = files.iter().any(|f| f == "-");
    if stdin && files.len() > 1 {
        anyhow::bail!("standard input (-) can only be the one trace: give trace files");
    }
    if stdin && args.length.is_some() {
        anyhow::bail!(
            "--length replays the trace in a loop: give a trace file, not standard input"
        );
    }
    let spec_of = |file: &String| TraceSpec {
        input: TraceInput::File(PathBuf::from(file)),
        format,
        repeat: args.repeat,
        length: args.length,
        identity_map: args.identity_map,
    };
    if args.mode != Mode::Baseline {
        if stdin {
            anyhow::bail!(
                "--mode {} replays the trace several times: give a trace file, not standard input",
                args.mode.name()
            );
        }
        let make = || -> Result<Machine, SimError> {
            Machine::from_traces(profile, files.iter().map(spec_of).collect(), args.seed)
        };
        let name = make()?.workload_name().to_string();
        let steps = Steps::new(None);
        let c = closed_loop::compare(&make, cfg, modes_of(args.mode), &mut |what: &str| {
            steps.step(&format!("{name}: {what}"))
        })
        .with_context(|| format!("replaying {name} in mode {}", args.mode.name()));
        steps.finish();
        RunReport::emit_closed_loop(
            name,
            profile.name.clone(),
            args.seed,
            c?,
            &args.closed_loop,
            args.json,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let specs = match files {
        // One pass of one trace reads through a progress bar; loops reopen the file.
        [file] if args.repeat == 1 && args.length.is_none() => vec![TraceSpec {
            input: TraceInput::Reader(open_input(file)?),
            ..spec_of(file)
        }],
        [file] if stdin => vec![TraceSpec {
            input: TraceInput::Stdin,
            ..spec_of(file)
        }],
        _ => files.iter().map(spec_of).collect(),
    };
    replay_baseline(args, profile, &files.join(" + "), specs)
}

fn replay_baseline(
    args: &TraceArgs,
    profile: &MachineSpec,
    name: &str,
    traces: Vec<TraceSpec>,
) -> anyhow::Result<ExitCode> {
    let mut m = Machine::from_traces(profile, traces, args.seed)?;
    let start = Instant::now();
    m.run_to_end()
        .with_context(|| format!("replaying {name}"))?;
    let mode = ModeReport::from_stats(m.totals(), start.elapsed().as_secs_f64());
    let report = RunReport::new(
        name.to_string(),
        profile.name.clone(),
        args.seed,
        vec![(Mode::Baseline.name().to_string(), mode)],
    );
    report.emit(args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// `--record` without `--save`: lackey's output streams into the simulator.
fn replay_recording(args: &TraceArgs, profile: &MachineSpec) -> anyhow::Result<ExitCode> {
    if args.mode != Mode::Baseline {
        anyhow::bail!(
            "--mode {} replays the trace several times but --record streams it once: add --save FILE",
            args.mode.name()
        );
    }
    if args.repeat != 1 || args.length.is_some() {
        anyhow::bail!(
            "--repeat and --length replay the trace again but --record streams it once: add --save FILE"
        );
    }
    let (mut child, pipe) = spawn_lackey(&args.program)?;
    let bar = progress::bytes(None, "lackey's trace");
    let trace = TraceSpec {
        input: TraceInput::Reader(Box::new(BufReader::with_capacity(
            1 << 20,
            bar.wrap_read(pipe),
        ))),
        format: TraceFormat::Lackey,
        repeat: 1,
        length: None,
        identity_map: args.identity_map,
    };
    let result = replay_baseline(args, profile, &args.program.join(" "), vec![trace]);
    bar.finish_and_clear();
    finish_lackey(&mut child, result.is_ok())?;
    result
}

/// Start `valgrind --tool=lackey --trace-mem=yes PROGRAM...` with its log (the trace)
/// written into a pipe; returns the child and the pipe's read end. The program's own
/// output goes to standard error, so that standard output holds only the report.
fn spawn_lackey(program: &[String]) -> anyhow::Result<(Child, File)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is an array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe for lackey");
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and nothing else owns them.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let log_fd = write_end.as_raw_fd();
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating standard error")?;
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=lackey")
        .arg("--trace-mem=yes")
        .arg(format!("--log-fd={log_fd}"))
        .args(program)
        .stdout(stderr);
    // SAFETY: between fork and exec the child only calls fcntl, which is async-signal-safe,
    // on a descriptor it inherited: the write end stays open across exec for valgrind.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(log_fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!("valgrind is not installed: --record runs the program under valgrind's lackey (apt-get install valgrind)")
        } else {
            anyhow::Error::new(e).context("starting valgrind")
        }
    })?;
    // Only valgrind holds the write end now: the pipe ends when valgrind exits.
    drop(write_end);
    Ok((child, File::from(read_end)))
}

/// Wait for valgrind (kill it first if the replay stopped early) and say how it ended.
fn finish_lackey(child: &mut Child, replayed: bool) -> anyhow::Result<()> {
    if !replayed {
        let _ = child.kill();
    }
    let status = child.wait().context("waiting for valgrind")?;
    if replayed && !status.success() {
        // The trace is still the program's accesses up to its exit; say it failed.
        eprintln!("rocsctl: warning: valgrind (and the program under it) exited with {status}");
    }
    Ok(())
}
