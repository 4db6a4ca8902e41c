//! `--timeline`: the rocs run window by window, each process's IPC, LLC MPKI, state and
//! pages confined, with the controllers' events beneath the window that produced them, in
//! the words of rocsd's history (rocs_config::report); `--timeline-svg` draws it.

use std::collections::BTreeSet;
use std::fmt::Write;

use rocs_config::report::describe;
use rocs_core::{Pid, State};
use rocs_sim::closed_loop::{RocsRun, TimelineEvent, WindowRow};
use serde::Serialize;

use crate::render::{legend, svg_start, ticks, y_axis, FRAME, GRID};

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
    /// LLC references per 1000 instructions: the program's mix of loads above the LLC,
    /// which a placement in the LLC changes little.
    pub llc_apki: f64,
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
                llc_apki: ratio(row.llc_references * 1000, row.instructions),
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
            "rocs, window by window ({} cycles each): per process, IPC, LLC misses and \
             references per 1000 instructions in the window, then the controller's state \
             and pages confined once it had seen it; its events beneath\n",
            self.window_cycles
        );
        out += &format!(
            "{:>7} {:>14} {:>7} {:>7} {:>8} {:>8}  {:<10} {:>8}\n",
            "window", "end cycle", "pid", "IPC", "MPKI", "APKI", "state", "confined"
        );
        let mut events = self.events.iter().peekable();
        for (i, w) in self.windows.iter().enumerate() {
            let r = &w.row;
            out += &format!(
                "{:>7} {:>14} {:>7} {:>7.4} {:>8.3} {:>8.3}  {:<10} {:>8}\n",
                r.window,
                r.end_cycle,
                r.pid,
                w.ipc,
                w.llc_mpki,
                w.llc_apki,
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

/// Line colours of the processes, in pid order (repeating past the fifth).
const PROCESS_COLOURS: [&str; 5] = ["#2e86c1", "#c0392b", "#27ae60", "#8e44ad", "#d35400"];

/// Where the controller was, as a band under the IPC plot: the attempt (profile, search)
/// stands out, holding and observing stay quiet.
fn state_colour(state: State) -> &'static str {
    match state {
        State::Observe => "#eeeeee",
        State::Profile => "#a569bd",
        State::Search => "#f5b041",
        State::Steady => "#a9dfbf",
        State::Paused => "#bbbbbb",
        State::Exited => "#ffffff",
    }
}

const SVG_W: f64 = 1000.0;
const PLOT_X: f64 = 100.0;
const PLOT_W: f64 = 860.0;

impl TimelineReport {
    /// The timeline as a picture: each process's IPC per window, a band per process for
    /// the controller's state, and the pages each process has confined.
    pub fn svg(&self, title: &str) -> String {
        let pids: Vec<Pid> = self
            .windows
            .iter()
            .map(|w| w.row.pid)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let windows = self.windows.last().map_or(1, |w| w.row.window + 1).max(1);
        let x_of = |w: u64| PLOT_X + w as f64 / windows as f64 * PLOT_W;
        let band_w = PLOT_W / windows as f64;
        let (ipc_y, ipc_h) = (110.0, 230.0);
        let bands_y = ipc_y + ipc_h + 30.0;
        let band_h = 14.0;
        let pages_y = bands_y + pids.len() as f64 * (band_h + 4.0) + 40.0;
        let pages_h = 150.0;
        let height = pages_y + pages_h + 50.0;
        let colour_of = |pid: Pid| {
            let i = pids.iter().position(|&p| p == pid).unwrap_or(0);
            PROCESS_COLOURS[i % PROCESS_COLOURS.len()]
        };

        let mut out = svg_start(SVG_W, height, title);
        let _ = writeln!(
            out,
            r#"<text class="caption" x="20" y="50" font-size="12">{windows} controller windows of {} cycles each. Top: each process's instructions per cycle in the window.</text>"#,
            self.window_cycles
        );
        let _ = writeln!(
            out,
            r#"<text class="caption" x="20" y="68" font-size="12">Middle: where its controller was once it had seen the window (an attempt is a profile, then a search). Bottom: the pages it had confined.</text>"#
        );

        // IPC per window, one line per process.
        let top_ipc = self.windows.iter().map(|w| w.ipc).fold(0.0, f64::max);
        let marks = ticks(top_ipc * 1.05);
        let scale = marks.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
        y_axis(&mut out, PLOT_X, ipc_y, PLOT_W, ipc_h, &marks, "", "IPC");
        for &pid in &pids {
            let points: Vec<String> = self
                .windows
                .iter()
                .filter(|w| w.row.pid == pid)
                .map(|w| {
                    let x = x_of(w.row.window) + band_w / 2.0;
                    format!("{x:.1},{:.1}", ipc_y + ipc_h - w.ipc / scale * ipc_h)
                })
                .collect();
            let _ = writeln!(
                out,
                r#"<polyline class="ipc" data-pid="{pid}" points="{}" fill="none" stroke="{}" stroke-width="1.5"/>"#,
                points.join(" "),
                colour_of(pid)
            );
        }

        // The controller's state, a band per process.
        for (i, &pid) in pids.iter().enumerate() {
            let y = bands_y + i as f64 * (band_h + 4.0);
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="{}">pid {pid}</text>"#,
                PLOT_X - 5.0,
                y + band_h - 3.0,
                colour_of(pid)
            );
            for w in self.windows.iter().filter(|w| w.row.pid == pid) {
                let _ = writeln!(
                    out,
                    r#"<rect class="state" data-state="{}" x="{:.2}" y="{y:.1}" width="{:.2}" height="{band_h}" fill="{}"/>"#,
                    w.row.state,
                    x_of(w.row.window),
                    band_w,
                    state_colour(w.row.state)
                );
            }
        }
        let states = [State::Observe, State::Profile, State::Search, State::Steady];
        let names: Vec<String> = states.iter().map(|s| s.to_string()).collect();
        let entries: Vec<(&str, &str)> = states
            .iter()
            .zip(&names)
            .map(|(&s, n)| (state_colour(s), n.as_str()))
            .collect();
        legend(
            &mut out,
            PLOT_X,
            bands_y + pids.len() as f64 * (band_h + 4.0) + 16.0,
            &entries,
        );

        // Pages confined, a step line per process.
        let top_pages = self
            .windows
            .iter()
            .map(|w| w.row.confined)
            .max()
            .unwrap_or(0);
        let marks = ticks(top_pages.max(1) as f64);
        let scale = marks.last().copied().unwrap_or(1.0);
        y_axis(
            &mut out,
            PLOT_X,
            pages_y,
            PLOT_W,
            pages_h,
            &marks,
            "",
            "pages confined",
        );
        for &pid in &pids {
            let mut points = Vec::new();
            for w in self.windows.iter().filter(|w| w.row.pid == pid) {
                let y = pages_y + pages_h - w.row.confined as f64 / scale * pages_h;
                points.push(format!("{:.1},{y:.1}", x_of(w.row.window)));
                points.push(format!("{:.1},{y:.1}", x_of(w.row.window + 1)));
            }
            let _ = writeln!(
                out,
                r#"<polyline class="confined" data-pid="{pid}" points="{}" fill="none" stroke="{}" stroke-width="1.5"/>"#,
                points.join(" "),
                colour_of(pid)
            );
        }

        // The window axis, under the pages.
        let axis_y = pages_y + pages_h;
        let _ = writeln!(
            out,
            r#"<line x1="{PLOT_X}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="{FRAME}"/>"#,
            PLOT_X + PLOT_W
        );
        for v in ticks(windows as f64) {
            if v > windows as f64 {
                break;
            }
            let _ = writeln!(
                out,
                r#"<text class="tick" x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{v:.0}</text>"#,
                x_of(v as u64),
                axis_y + 16.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text class="axis-title" x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">window</text>"#,
            PLOT_X + PLOT_W / 2.0,
            axis_y + 36.0
        );
        let _ = writeln!(
            out,
            r#"<line x1="{PLOT_X}" y1="{:.1}" x2="{PLOT_X}" y2="{:.1}" stroke="{GRID}"/>"#,
            ipc_y, axis_y
        );
        out.push_str("</svg>\n");
        out
    }
}
