//! Progress of long work, on standard error. On a terminal: a bar (or a spinner when the
//! amount of work is unknown) showing the step under way, with finished steps' lines above
//! it. Otherwise (a log file, a pipe, CI): no bar and no escape codes, one line per step.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

fn on_terminal() -> bool {
    std::io::stderr().is_terminal()
}

fn hidden_unless_terminal(bar: ProgressBar) -> ProgressBar {
    if !on_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// Steps of a run or an evaluation: `total` units of work if known.
pub struct Steps {
    bar: ProgressBar,
    terminal: bool,
    start: Instant,
}

impl Steps {
    pub fn new(total: Option<u64>) -> Self {
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}")
                    .expect("a valid template"),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("[{elapsed_precise}] {spinner} {wide_msg}")
                    .expect("a valid template"),
            ),
        };
        let terminal = on_terminal();
        let bar = hidden_unless_terminal(bar);
        if terminal {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Steps {
            bar,
            terminal,
            start: Instant::now(),
        }
    }

    /// A step begins: on a terminal it replaces the bar's message, in a log it is a line.
    pub fn step(&self, what: &str) {
        if self.terminal {
            self.bar.set_message(what.to_string());
        } else {
            self.line(what);
        }
    }

    /// A line that stays (a result), above the bar on a terminal.
    pub fn line(&self, what: &str) {
        let line = format!("[{:>6.1}s] {what}", self.start.elapsed().as_secs_f64());
        if self.terminal {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    /// One unit of work is done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Bytes of a trace read so far, out of `len` if known; hidden unless on a terminal.
pub fn bytes(len: Option<u64>, what: &str) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "[{elapsed_precise}] {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left) {msg}",
            )
            .expect("a valid template"),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("[{elapsed_precise}] {spinner} {bytes} ({bytes_per_sec}) {msg}")
                .expect("a valid template"),
        ),
    };
    let bar = hidden_unless_terminal(bar);
    bar.set_message(what.to_string());
    bar
}
