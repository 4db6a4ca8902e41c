//! The profile pictures as one SVG document, readable without the paper: the miss-rate
//! histogram (ROCS Fig. 2) and the compacted address-space map (ROCS Fig. 3), each with
//! axis titles, ticks and a legend, confined pages marked, and a caption.

use std::collections::BTreeSet;
use std::fmt::Write;

use rocs_core::{MissRateStack, PageProfile, VirtPage};

use super::{address_map_columns, histogram_bins, MapColumn};

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 850.0;
/// Left edge and width of both plots (room for the y axes on the left).
const PLOT_X: f64 = 100.0;
const PLOT_W: f64 = 820.0;

const HITS: &str = "#2e86c1";
const MISSES: &str = "#c0392b";
const OTHER: &str = "#95a5a6";
const CONFINED: &str = "#e67e22";
const RATE: &str = "#8e44ad";
pub(crate) const GRID: &str = "#dddddd";
pub(crate) const FRAME: &str = "#888888";

/// Bins of the histogram: 10 percentage points each.
const BINS: usize = 10;

/// A column this many times the median height is pointed out by name.
const HOT_COLUMN: f64 = 3.0;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG document's opening of `width` by `height` on white, with its title; the caller
/// closes it with `</svg>`.
pub(crate) fn svg_start(width: f64, height: f64, title: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="20" y="28" font-size="16" font-weight="bold">{}</text>"#,
        esc(title)
    );
    out
}

/// Round steps (1, 2 or 5 times a power of ten) from 0 to at least `max`, at most 6 of them.
pub(crate) fn ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| s * 5.0 >= max)
        .unwrap_or(10.0 * power);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick's label: no decimals unless the step needs them, and as many as it does (steps
/// of 0.05 read 0.05, 0.1, 0.15).
fn tick_label(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').to_string()
    }
}

/// A y axis at `x` for values 0..=`top` drawn over `y`..`y + h`: grid lines across `w`,
/// labelled ticks, and the axis title written upwards.
#[allow(clippy::too_many_arguments)]
pub(crate) fn y_axis(
    out: &mut String,
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    marks: &[f64],
    unit: &str,
    title: &str,
) {
    let top = marks.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
    let _ = writeln!(out, r#"<g class="y-axis">"#);
    for &v in marks {
        let ty = y + h - v / top * h;
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="{GRID}"/>"#,
            x + w
        );
        let _ = writeln!(
            out,
            r#"<text class="tick" x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}{unit}</text>"#,
            x - 5.0,
            ty + 4.0,
            tick_label(v)
        );
    }
    let (tx, ty) = (x - 52.0, y + h / 2.0);
    let _ = writeln!(
        out,
        r#"<text class="axis-title" x="{tx:.1}" y="{ty:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {tx:.1} {ty:.1})">{}</text>"#,
        esc(title)
    );
    let _ = writeln!(out, "</g>");
}

/// A legend row at (x, y): a swatch and a label per entry; a swatch of "dashed" draws a
/// dashed line.
pub(crate) fn legend(out: &mut String, x: f64, y: f64, entries: &[(&str, &str)]) {
    let _ = writeln!(out, r#"<g class="legend">"#);
    let mut lx = x;
    for (colour, label) in entries {
        if *colour == "dashed" {
            let _ = writeln!(
                out,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{FRAME}" stroke-dasharray="3,2"/>"#,
                lx + 6.0,
                y - 11.0,
                lx + 6.0,
                y + 1.0
            );
        } else {
            let _ = writeln!(
                out,
                r#"<rect class="swatch" x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{colour}"/>"#,
                y - 10.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{y:.1}" font-size="12">{}</text>"#,
            lx + 17.0,
            esc(label)
        );
        lx += 17.0 + 7.0 * label.chars().count() as f64 + 22.0;
    }
    let _ = writeln!(out, "</g>");
}

/// ROCS Fig. 2: the share of pages in each band of their own miss rate, the confined ones
/// at the bottom of each bar in their own colour.
fn histogram(out: &mut String, stack: &MissRateStack, confined: &BTreeSet<VirtPage>, y: f64) {
    let (x, w, h) = (PLOT_X, PLOT_W, 220.0);
    let _ = writeln!(out, r#"<g id="histogram">"#);
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{:.1}" font-size="14" font-weight="bold">Pages by their own LLC miss rate ({} pages with LLC samples)</text>"#,
        y - 12.0,
        stack.len()
    );
    if stack.is_empty() {
        let _ = writeln!(
            out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="{FRAME}"/>"#
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="12">no page has LLC samples (these samples carry no data source)</text>"#,
            x + 10.0,
            y + h / 2.0
        );
        let _ = writeln!(out, "</g>");
        return;
    }
    let counts = histogram_bins(stack, BINS);
    let mut confined_counts = vec![0u64; BINS];
    for e in stack
        .entries()
        .iter()
        .filter(|e| confined.contains(&e.page))
    {
        confined_counts[((e.miss_rate * BINS as f64) as usize).min(BINS - 1)] += 1;
    }
    let total = stack.len() as f64;
    let share = |n: u64| n as f64 / total * 100.0;
    let marks = ticks(counts.iter().map(|&c| share(c)).fold(0.0, f64::max));
    let top = *marks.last().unwrap();
    y_axis(out, x, y, w, h, &marks, "%", "share of pages");
    let bw = w / BINS as f64;
    for (i, (&all, &conf)) in counts.iter().zip(&confined_counts).enumerate() {
        let (lo, hi) = (i * 100 / BINS, (i + 1) * 100 / BINS);
        let bx = x + i as f64 * bw + 2.0;
        let mut base = y + h;
        for (class, n, colour) in [("confined", conf, CONFINED), ("bar", all - conf, MISSES)] {
            if n == 0 {
                continue;
            }
            let bh = share(n) / top * h;
            base -= bh;
            let _ = writeln!(
                out,
                r#"<rect class="{class}" x="{bx:.1}" y="{base:.1}" width="{:.1}" height="{bh:.1}" fill="{colour}"><title>miss rate {lo}-{hi}%: {n} of {all} pages {}</title></rect>"#,
                bw - 4.0,
                if class == "confined" {
                    "confined"
                } else {
                    "not confined"
                }
            );
        }
        if all > 0 {
            let _ = writeln!(
                out,
                r#"<text class="count" x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{all}</text>"#,
                bx + bw / 2.0 - 2.0,
                base - 4.0
            );
        }
    }
    let _ = writeln!(
        out,
        r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="{FRAME}"/>"#
    );
    for i in 0..=BINS {
        let _ = writeln!(
            out,
            r#"<text class="tick x-tick" x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}%</text>"#,
            x + i as f64 * bw,
            y + h + 15.0,
            i * 100 / BINS
        );
    }
    let _ = writeln!(
        out,
        r#"<text class="axis-title" x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">the page's LLC miss rate: its sampled LLC misses / (LLC hits + misses); the last bar includes 100%</text>"#,
        x + w / 2.0,
        y + h + 32.0
    );
    let _ = writeln!(out, "</g>");
    legend(
        out,
        x,
        y + h + 54.0,
        &[
            (MISSES, "pages not confined"),
            (CONFINED, "pages confined in the pollute buffer"),
        ],
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">the number over each bar: its pages</text>"#,
        x + w,
        y + h + 54.0
    );
}

/// The mean samples per sampled page of a column: columns hold different numbers of
/// pages, so the mean keeps them comparable.
fn per_page(c: &MapColumn, n: u64) -> f64 {
    n as f64 / c.pages.max(1) as f64
}

/// ROCS Fig. 3: samples per page along the compacted address space (hits, misses, other),
/// which columns hold confined pages, and each column's miss rate.
fn address_map(out: &mut String, profile: &PageProfile, confined: &BTreeSet<VirtPage>, y: f64) {
    let (x, w) = (PLOT_X, PLOT_W);
    let (bars_h, mark_h, rate_h) = (190.0, 12.0, 80.0);
    let mark_y = y + bars_h + 6.0;
    let rate_y = mark_y + mark_h + 10.0;
    let cols = address_map_columns(profile, (w / 2.0) as usize);
    let _ = writeln!(out, r#"<g id="address-map">"#);
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{:.1}" font-size="14" font-weight="bold">The address space, compacted: samples per page and miss rate ({} sampled pages in address order)</text>"#,
        y - 12.0,
        profile.len()
    );
    if cols.is_empty() {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="12">no samples</text>"#,
            x + 10.0,
            y + bars_h / 2.0
        );
        let _ = writeln!(out, "</g>");
        return;
    }
    let heights: Vec<f64> = cols.iter().map(|c| per_page(c, c.accesses())).collect();
    let marks = ticks(heights.iter().copied().fold(0.0, f64::max));
    let top = *marks.last().unwrap();
    y_axis(out, x, y, w, bars_h, &marks, "", "samples per page");
    let rate_marks = [0.0, 50.0, 100.0];
    y_axis(out, x, rate_y, w, rate_h, &rate_marks, "%", "miss rate");
    let shift = profile.page_shift();
    let cw = w / cols.len() as f64;
    for (i, c) in cols.iter().enumerate() {
        let cx = x + i as f64 * cw;
        let mut base = y + bars_h;
        for (class, n, colour) in [
            ("hits", c.counts.hits, HITS),
            ("misses", c.counts.misses, MISSES),
            ("other", c.counts.other, OTHER),
        ] {
            if n == 0 {
                continue;
            }
            let bh = per_page(c, n.into()) / top * bars_h;
            base -= bh;
            let _ = writeln!(
                out,
                r#"<rect class="{class}" x="{cx:.2}" y="{base:.2}" width="{:.2}" height="{bh:.2}" fill="{colour}"><title>{:#x}-{:#x} ({} sampled pages): {} hits, {} misses, {} other</title></rect>"#,
                cw.max(0.5),
                c.first.addr(shift),
                c.last.addr(shift) + (1 << shift) - 1,
                c.pages,
                c.counts.hits,
                c.counts.misses,
                c.counts.other
            );
        }
        if c.gap_before {
            let _ = writeln!(
                out,
                r#"<line class="gap" x1="{cx:.2}" y1="{y:.1}" x2="{cx:.2}" y2="{:.1}" stroke="{FRAME}" stroke-dasharray="3,2"/>"#,
                rate_y + rate_h
            );
        }
        let held = confined.range(c.first..=c.last).count();
        if held > 0 {
            let span = (c.last.0 - c.first.0 + 1) as f64;
            let _ = writeln!(
                out,
                r#"<rect class="confined" x="{cx:.2}" y="{mark_y:.1}" width="{:.2}" height="{mark_h:.1}" fill="{CONFINED}" fill-opacity="{:.2}"><title>{:#x}: {held} pages confined</title></rect>"#,
                cw.max(0.5),
                (held as f64 / span).clamp(0.3, 1.0),
                c.first.addr(shift)
            );
        }
        if let Some(r) = c.counts.miss_rate() {
            let rh = r * rate_h;
            let _ = writeln!(
                out,
                r#"<rect class="rate" x="{cx:.2}" y="{:.2}" width="{:.2}" height="{rh:.2}" fill="{RATE}"/>"#,
                rate_y + rate_h - rh,
                cw.max(0.5)
            );
        }
    }
    for (ty, th) in [(y, bars_h), (rate_y, rate_h)] {
        let _ = writeln!(
            out,
            r#"<rect x="{x:.1}" y="{ty:.1}" width="{w:.1}" height="{th:.1}" fill="none" stroke="{FRAME}"/>"#
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">confined</text>"#,
        x - 5.0,
        mark_y + mark_h - 2.0
    );
    hottest_column(out, &cols, &heights, shift, y, cw);
    address_ticks(out, &cols, shift, rate_y + rate_h, cw);
    let _ = writeln!(out, "</g>");
    legend(
        out,
        x,
        rate_y + rate_h + 54.0,
        &[
            (HITS, "LLC hits"),
            (MISSES, "LLC misses"),
            (OTHER, "other samples"),
            (CONFINED, "holds confined pages"),
            (RATE, "miss rate"),
            ("dashed", "unsampled pages skipped"),
        ],
    );
}

/// Name the column that towers over the others (a small, hot object), so that it is read
/// as data and not as a glitch.
fn hottest_column(
    out: &mut String,
    cols: &[MapColumn],
    heights: &[f64],
    shift: u32,
    y: f64,
    cw: f64,
) {
    let mut sorted = heights.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let Some((i, &most)) = heights.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) else {
        return;
    };
    if most < HOT_COLUMN * median.max(f64::MIN_POSITIVE) {
        return;
    }
    let c = &cols[i];
    let cx = PLOT_X + (i as f64 + 0.5) * cw;
    let right = cx > PLOT_X + PLOT_W / 2.0;
    let _ = writeln!(
        out,
        r#"<text class="hottest" x="{:.1}" y="{:.1}" font-size="11" text-anchor="{}">{} {:#x}: {} samples per page ({} hits, {} misses), {:.0}x the median column</text>"#,
        if right { cx - 6.0 } else { cx + 6.0 },
        y + 14.0,
        if right { "end" } else { "start" },
        if right { "hottest →" } else { "← hottest" },
        c.first.addr(shift),
        tick_label(most),
        c.counts.hits,
        c.counts.misses,
        most / median.max(f64::MIN_POSITIVE)
    );
}

/// Addresses under the map: the first page of every fifth of the columns.
fn address_ticks(out: &mut String, cols: &[MapColumn], shift: u32, y: f64, cw: f64) {
    let n = cols.len();
    let mut shown = BTreeSet::new();
    for i in 0..=4 {
        shown.insert((n - 1) * i / 4);
    }
    for i in shown {
        let cx = PLOT_X + i as f64 * cw;
        let anchor = match i {
            0 => "start",
            i if i == n - 1 => "end",
            _ => "middle",
        };
        let tx = if i == n - 1 { PLOT_X + PLOT_W } else { cx };
        let _ = writeln!(
            out,
            r#"<line x1="{cx:.1}" y1="{y:.1}" x2="{cx:.1}" y2="{:.1}" stroke="{FRAME}"/>"#,
            y + 4.0
        );
        let _ = writeln!(
            out,
            r#"<text class="tick x-tick" x="{tx:.1}" y="{:.1}" font-size="11" text-anchor="{anchor}">{:#x}</text>"#,
            y + 16.0,
            cols[i].first.addr(shift)
        );
    }
    let _ = writeln!(
        out,
        r#"<text class="axis-title" x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">virtual address of the sampled pages, {} pages per column (stretches without samples squeezed out)</text>"#,
        PLOT_X + PLOT_W / 2.0,
        y + 32.0,
        cols.iter().map(|c| c.pages).max().unwrap_or(1)
    );
}

/// A whole SVG document: title, caption, the histogram (Fig. 2) and the address map
/// (Fig. 3). `confined` marks the pages in the pollute buffer (empty: none).
pub fn profile_svg(
    profile: &PageProfile,
    stack: &MissRateStack,
    confined: &BTreeSet<VirtPage>,
    title: &str,
) -> String {
    let mut out = svg_start(WIDTH, HEIGHT, title);
    let sampled_confined = profile
        .sorted()
        .iter()
        .filter(|(p, _)| confined.contains(p))
        .count();
    let _ = writeln!(
        out,
        r#"<text class="caption" x="20" y="50" font-size="12">{} samples over {} pages of {} KiB; {} of them confined in the pollute buffer (orange).</text>"#,
        profile.samples_total(),
        profile.len(),
        (1u64 << profile.page_shift()) >> 10,
        sampled_confined
    );
    let _ = writeln!(
        out,
        r#"<text class="caption" x="20" y="68" font-size="12">A page's miss rate is the share of its sampled loads that reached the last-level cache (LLC) and missed it: pages that stream miss, pages that are reused hit.</text>"#
    );
    histogram(&mut out, stack, confined, 120.0);
    address_map(&mut out, profile, confined, 470.0);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocs_core::DataSource::*;
    use roxmltree::{Document, Node};

    /// Pages 0..10 with miss rate i/10 (10 samples each), page 100 with only `Other`, and
    /// page 200 hot: 300 hits.
    fn profile() -> PageProfile {
        let mut p = PageProfile::new(12);
        for page in 0..10u64 {
            for k in 0..10 {
                p.record(page << 12, if k < page { LlcMiss } else { LlcHit });
            }
        }
        p.record(100 << 12, Other);
        for _ in 0..300 {
            p.record(200 << 12, LlcHit);
        }
        p
    }

    fn class<'a>(doc: &'a Document, group: &str, class: &str) -> Vec<Node<'a, 'a>> {
        let g = doc
            .descendants()
            .find(|n| n.attribute("id") == Some(group))
            .unwrap_or_else(|| panic!("no group {group}"));
        g.descendants()
            .filter(|n| {
                n.attribute("class")
                    .is_some_and(|c| c.split(' ').any(|c| c == class))
            })
            .collect()
    }

    fn texts<'a>(nodes: &[Node<'a, 'a>]) -> Vec<&'a str> {
        nodes.iter().filter_map(|n| n.text()).collect()
    }

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(ticks(30.2), vec![0.0, 10.0, 20.0, 30.0, 40.0]);
        assert_eq!(ticks(224.0), vec![0.0, 50.0, 100.0, 150.0, 200.0, 250.0]);
        let labels: Vec<String> = ticks(1.0).into_iter().map(tick_label).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(ticks(0.0).len(), 6, "an empty plot still has a scale");
        for max in [0.3, 7.0, 99.0, 1234.0] {
            let t = ticks(max);
            assert!(t.len() <= 7 && *t.last().unwrap() >= max, "{max}: {t:?}");
        }
    }

    #[test]
    fn both_figures_have_axes_ticks_a_legend_and_the_confined_pages() {
        let p = profile();
        let stack = MissRateStack::from_profile(&p);
        let confined: BTreeSet<VirtPage> = [8, 9].map(VirtPage).into();
        let svg = profile_svg(&p, &stack, &confined, "t <&> 1");
        let doc = Document::parse(&svg).expect("well-formed XML");
        let root = doc.root_element();
        assert!(root.has_tag_name(("http://www.w3.org/2000/svg", "svg")));
        // The title comes back as it was given: the markup in it was escaped.
        let first = doc.descendants().find(|n| n.has_tag_name("text")).unwrap();
        assert_eq!(first.text(), Some("t <&> 1"));

        // The histogram: a tick at every bin edge, a share scale, both axes titled, a bar
        // count per bin that adds up to the stack, the two confined pages in their colour.
        let x: Vec<&str> = texts(&class(&doc, "histogram", "x-tick"));
        let edges: Vec<String> = (0..=10).map(|i| format!("{}%", i * 10)).collect();
        assert_eq!(x, edges);
        let y = texts(&class(&doc, "histogram", "tick"));
        assert!(y.contains(&"0%") && y.len() >= 3 + 11, "{y:?}");
        assert_eq!(class(&doc, "histogram", "axis-title").len(), 2);
        let counted: u64 = texts(&class(&doc, "histogram", "count"))
            .iter()
            .map(|t| t.parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, stack.len() as u64);
        let marked = class(&doc, "histogram", "confined");
        assert_eq!(marked.len(), 2, "bins 80-90% and 90-100%");
        assert!(marked.iter().all(|n| n.attribute("fill") == Some(CONFINED)));

        // The address map: a samples scale, a miss-rate scale, addresses, the confined
        // pages marked, gaps drawn, and the hot page named.
        let ticks = texts(&class(&doc, "address-map", "tick"));
        for t in ["0", "100%", "50%", "0x0", "0xc8000"] {
            assert!(ticks.contains(&t), "{t} not in {ticks:?}");
        }
        assert_eq!(class(&doc, "address-map", "axis-title").len(), 3);
        let marks = class(&doc, "address-map", "confined");
        assert_eq!(marks.len(), 2, "pages 8 and 9, a column each");
        assert_eq!(class(&doc, "address-map", "gap").len(), 2);
        let hot = texts(&class(&doc, "address-map", "hottest"));
        assert!(
            hot.len() == 1 && hot[0].contains("0xc8000: 300 samples per page"),
            "{hot:?}"
        );
        let legend: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("legend"))
            .flat_map(|g| g.descendants().filter_map(|n| n.text()))
            .filter(|t| !t.trim().is_empty())
            .collect();
        for entry in [
            "LLC hits",
            "LLC misses",
            "pages confined in the pollute buffer",
        ] {
            assert!(legend.contains(&entry), "{entry} not in {legend:?}");
        }
        every_shape_lies_inside_the_picture(&doc);

        // Nothing confined: nothing marked.
        let svg = profile_svg(&p, &stack, &BTreeSet::new(), "t");
        let doc = Document::parse(&svg).unwrap();
        assert!(class(&doc, "histogram", "confined").is_empty());
        assert!(class(&doc, "address-map", "confined").is_empty());
    }

    fn every_shape_lies_inside_the_picture(doc: &Document) {
        let view: Vec<f64> = doc
            .root_element()
            .attribute("viewBox")
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        let num = |n: &Node, a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
        let mut shapes = 0;
        for n in doc.descendants().filter(|n| n.has_tag_name("rect")) {
            let (Some(x), Some(y), Some(w), Some(h)) = (
                num(&n, "x"),
                num(&n, "y"),
                num(&n, "width"),
                num(&n, "height"),
            ) else {
                continue;
            };
            shapes += 1;
            assert!(w >= 0.0 && h >= 0.0);
            assert!(x >= view[0] && x + w <= view[0] + view[2], "x {x} w {w}");
            assert!(y >= view[1] && y + h <= view[1] + view[3], "y {y} h {h}");
        }
        for n in doc.descendants().filter(|n| n.has_tag_name("text")) {
            let (x, y) = (num(&n, "x").unwrap(), num(&n, "y").unwrap());
            assert!(
                x >= 0.0 && x <= view[2] && y >= 0.0 && y <= view[3],
                "{:?}",
                n.text()
            );
        }
        assert!(shapes >= 20, "{shapes}");
    }

    #[test]
    fn a_profile_without_llc_samples_says_so() {
        let mut p = PageProfile::new(12);
        p.record(0x1000, Other);
        let svg = profile_svg(&p, &MissRateStack::from_profile(&p), &BTreeSet::new(), "t");
        let doc = Document::parse(&svg).unwrap();
        let all: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(all.iter().any(|t| t.starts_with("no page has LLC samples")));
    }
}
