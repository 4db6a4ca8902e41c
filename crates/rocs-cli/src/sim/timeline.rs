//! `--timeline`: the rocs run window by window, each process's IPC, LLC MPKI, state and
//! pages confined, with the controllers' events beneath the window that produced them, in
//! the words of rocsd's history (rocs_config::report).

use rocs_config::report::describe;
use rocs_sim::closed_loop::{RocsRun, TimelineEvent, WindowRow};
use serde::Serialize;

/// The timeline of a rocs run, as `--json` writes it.
#[derive(Debug, Serialize)]
pub struct TimelineReport {
    pub window_cycles: u64,
    pub windows: Vec<WindowLine>,
    pub events: Vec<EventLine>,
}

#[derive(Debug, Serialize)]
pub struct WindowLine {
    #[serde(flatten)]
    pub row: WindowRow,
    pub ipc: f64,
    pub llc_mpki: f64,
}

#[derive(Debug, Serialize)]
pub struct EventLine {
    #[serde(flatten)]
    pub event: TimelineEvent,
    /// What kind of event, as `rocsctl history` names it (state, profile, search, ...).
    pub what: &'static str,
    /// The event in words.
    pub text: String,
}

impl TimelineReport {
    pub fn of(run: &RocsRun) -> Self {
        let windows = run
            .timeline
            .windows
            .iter()
            .map(|row| WindowLine {
                ipc: ratio(row.instructions, row.cycles),
                llc_mpki: ratio(row.llc_misses * 1000, row.instructions),
                row: row.clone(),
            })
            .collect();
        let events = run
            .timeline
            .events
            .iter()
            .map(|e| {
                // A simulated process's pid is the one its user sees.
                let (what, text) = describe(&e.kind, &|pid| pid);
                EventLine {
                    event: e.clone(),
                    what,
                    text,
                }
            })
            .collect();
        TimelineReport {
            window_cycles: run.window_cycles,
            windows,
            events,
        }
    }

    /// For people: a row per window and process, its events beneath it.
    pub fn text(&self) -> String {
        let mut out = format!(
            "rocs, window by window ({} cycles each): per process, IPC and LLC misses per \
             1000 instructions in the window, then the controller's state and pages confined \
             once it had seen it; its events beneath\n",
            self.window_cycles
        );
        out += &format!(
            "{:>7} {:>14} {:>7} {:>7} {:>8}  {:<10} {:>8}\n",
            "window", "end cycle", "pid", "IPC", "MPKI", "state", "confined"
        );
        let mut events = self.events.iter().peekable();
        for (i, w) in self.windows.iter().enumerate() {
            let r = &w.row;
            out += &format!(
                "{:>7} {:>14} {:>7} {:>7.4} {:>8.3}  {:<10} {:>8}\n",
                r.window,
                r.end_cycle,
                r.pid,
                w.ipc,
                w.llc_mpki,
                r.state.to_string(),
                r.confined
            );
            // Once a window's last row is out, the events its end produced.
            let last_of_window = self
                .windows
                .get(i + 1)
                .is_none_or(|next| next.row.window > r.window);
            if last_of_window {
                while let Some(e) = events.next_if(|e| e.event.window <= r.window) {
                    out += &event_line(e);
                }
            }
        }
        for e in events {
            out += &event_line(e);
        }
        out
    }
}

fn event_line(e: &EventLine) -> String {
    format!(
        "{:>31} {:<8} {}\n",
        format!("pid {}", e.event.pid),
        e.what,
        e.text
    )
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
