//! Pictures of page profiles, in the terminal (unicode blocks) and as SVG:
//! the per-page miss-rate histogram (ROCS Fig. 2) and the compact address-space map of
//! accesses and miss rates (ROCS Fig. 3). Used by `record`, `profile` and the daemon
//! client's `profile`/`stack` commands.

use std::fmt::Write;

use rocs_core::{MissRateStack, PageCounts, PageProfile, VirtPage};

/// Pages per miss-rate bin: bin i holds rates in [i/bins, (i+1)/bins), the last bin
/// includes 1.0.
pub fn histogram_bins(stack: &MissRateStack, bins: usize) -> Vec<u64> {
    let bins = bins.max(1);
    let mut out = vec![0u64; bins];
    for e in stack.entries() {
        let i = ((e.miss_rate * bins as f64) as usize).min(bins - 1);
        out[i] += 1;
    }
    out
}

const EIGHTHS: [char; 9] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉', '█'];
const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// A horizontal bar of `frac` (0..=1) of `width` cells, in eighths of a cell.
fn hbar(frac: f64, width: usize) -> String {
    let eighths = (frac.clamp(0.0, 1.0) * width as f64 * 8.0).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    if eighths & 7 != 0 {
        s.push(EIGHTHS[eighths % 8]);
    }
    let used = s.chars().count();
    s.push_str(&" ".repeat(width.saturating_sub(used)));
    s
}

/// ROCS Fig. 2 in the terminal: the share of pages in each miss-rate bin.
pub fn histogram_text(stack: &MissRateStack, bins: usize, width: usize) -> String {
    let mut out = String::new();
    if stack.is_empty() {
        out.push_str(
            "miss-rate histogram: no page has LLC samples (the samples carry no data source)\n",
        );
        return out;
    }
    let counts = histogram_bins(stack, bins);
    let total = stack.len() as f64;
    let max = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let _ = writeln!(
        out,
        "per-page LLC miss rate ({} pages with LLC samples)",
        stack.len()
    );
    let n = counts.len();
    for (i, &c) in counts.iter().enumerate() {
        let lo = i * 100 / n;
        let hi = (i + 1) * 100 / n;
        let _ = writeln!(
            out,
            "{lo:>3}-{hi:<3}% │{}│ {c:>7} pages {:>5.1}%",
            hbar(c as f64 / max, width),
            100.0 * c as f64 / total
        );
    }
    out
}

/// One column of the address map: the pages it covers and their summed counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapColumn {
    pub first: VirtPage,
    pub last: VirtPage,
    pub counts: PageCounts,
    /// A gap of unsampled pages lies before this column.
    pub gap_before: bool,
}

impl MapColumn {
    fn accesses(&self) -> u64 {
        self.counts.samples()
    }
}

/// Compact the sampled pages (by address, unsampled stretches squeezed out, as in ROCS
/// Fig. 3) into at most `columns` columns.
pub fn address_map_columns(profile: &PageProfile, columns: usize) -> Vec<MapColumn> {
    let pages = profile.sorted();
    if pages.is_empty() {
        return Vec::new();
    }
    let per = pages.len().div_ceil(columns.max(1));
    let mut out = Vec::new();
    let mut prev: Option<VirtPage> = None;
    for chunk in pages.chunks(per) {
        let mut col = MapColumn {
            first: chunk[0].0,
            last: chunk[chunk.len() - 1].0,
            gap_before: prev.is_some_and(|p| chunk[0].0 .0 > p.0 + 1),
            counts: PageCounts::default(),
        };
        for (i, (page, c)) in chunk.iter().enumerate() {
            if i > 0 && page.0 > chunk[i - 1].0 .0 + 1 {
                col.gap_before = true;
            }
            col.counts.hits += c.hits;
            col.counts.misses += c.misses;
            col.counts.other += c.other;
        }
        prev = Some(col.last);
        out.push(col);
    }
    out
}

/// ROCS Fig. 3 in the terminal: accesses per page as vertical bars (`height` rows), the
/// miss rate under them as a shade, and the address ranges.
pub fn address_map_text(profile: &PageProfile, width: usize, height: usize) -> String {
    let mut out = String::new();
    let cols = address_map_columns(profile, width);
    if cols.is_empty() {
        out.push_str("address map: no samples\n");
        return out;
    }
    let shift = profile.page_shift();
    let per = profile.len().div_ceil(cols.len());
    let max = cols
        .iter()
        .map(MapColumn::accesses)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let _ = writeln!(
        out,
        "address space, compacted ({} sampled pages, {} per column; '¦' below marks skipped unsampled pages)",
        profile.len(),
        per
    );
    let height = height.max(1);
    for row in (0..height).rev() {
        out.push_str("samples │");
        for c in &cols {
            let level = c.accesses() as f64 / max * height as f64 - row as f64;
            let idx = (level.clamp(0.0, 1.0) * 8.0).round() as usize;
            out.push(LEVELS[idx]);
        }
        out.push('\n');
    }
    let any_llc = cols.iter().any(|c| c.counts.llc_samples() > 0);
    if any_llc {
        out.push_str("miss %  │");
        for c in &cols {
            out.push(match c.counts.miss_rate() {
                None => ' ',
                Some(r) if r < 0.2 => '░',
                Some(r) if r < 0.5 => '▒',
                Some(r) if r < 0.8 => '▓',
                Some(_) => '█',
            });
        }
        out.push_str("  (░ <20% ▒ <50% ▓ <80% █ ≥80%, blank: no LLC sample)\n");
    } else {
        out.push_str("miss %  │(no data source in these samples)\n");
    }
    out.push_str("gaps    │");
    for c in &cols {
        out.push(if c.gap_before { '¦' } else { ' ' });
    }
    out.push('\n');
    let first = cols[0].first.addr(shift);
    let last = cols[cols.len() - 1].last.addr(shift) + (1 << shift) - 1;
    let _ = writeln!(out, "        └ {first:#x} .. {last:#x}");
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// ROCS Fig. 2 as an SVG fragment at (x, y) of size w x h.
fn histogram_svg_at(
    out: &mut String,
    stack: &MissRateStack,
    bins: usize,
    x: f64,
    y: f64,
    w: f64,
    h: f64,
) {
    let counts = histogram_bins(stack, bins);
    let total = stack.len().max(1) as f64;
    let max = counts.iter().copied().max().unwrap_or(0).max(1) as f64 / total * 100.0;
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">Per-page LLC miss rate ({} pages)</text>"#,
        x,
        y - 8.0,
        stack.len()
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="#888"/>"##
    );
    if stack.is_empty() {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="12">no page has LLC samples (no data source)</text>"#,
            x + 10.0,
            y + h / 2.0
        );
        return;
    }
    let bw = w / counts.len() as f64;
    for (i, &c) in counts.iter().enumerate() {
        let pct = c as f64 / total * 100.0;
        let bh = pct / max * (h - 10.0);
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#c0392b"><title>{}-{}%: {} pages ({:.1}%)</title></rect>"##,
            x + i as f64 * bw + 1.0,
            y + h - bh,
            (bw - 2.0).max(1.0),
            bh,
            i * 100 / counts.len(),
            (i + 1) * 100 / counts.len(),
            c,
            pct
        );
    }
    for t in [0, 50, 100] {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{t}%</text>"#,
            x + w * t as f64 / 100.0,
            y + h + 14.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">miss rate (y: share of pages, max {:.1}%)</text>"#,
        x + w / 2.0,
        y + h + 28.0,
        max
    );
}

/// ROCS Fig. 3 as an SVG fragment: stacked bars of hits (blue), misses (red) and other
/// samples (grey) per column, and the miss rate per column below.
fn address_map_svg_at(out: &mut String, profile: &PageProfile, x: f64, y: f64, w: f64, h: f64) {
    let cols = address_map_columns(profile, (w / 2.0) as usize);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">Address space, compacted: samples per page ({} pages) and miss rate</text>"#,
        x,
        y - 8.0,
        profile.len()
    );
    let bars_h = h * 0.65;
    let rate_y = y + bars_h + 20.0;
    let rate_h = h - bars_h - 20.0;
    let _ = writeln!(
        out,
        r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{bars_h:.1}" fill="none" stroke="#888"/>"##
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x:.1}" y="{rate_y:.1}" width="{w:.1}" height="{rate_h:.1}" fill="none" stroke="#888"/>"##
    );
    if cols.is_empty() {
        return;
    }
    let shift = profile.page_shift();
    let max = cols.iter().map(|c| c.accesses()).max().unwrap_or(1).max(1) as f64;
    let cw = w / cols.len() as f64;
    for (i, c) in cols.iter().enumerate() {
        let cx = x + i as f64 * cw;
        let mut top = y + bars_h;
        for (n, colour) in [
            (c.counts.hits, "#2e86c1"),
            (c.counts.misses, "#c0392b"),
            (c.counts.other, "#95a5a6"),
        ] {
            if n == 0 {
                continue;
            }
            let bh = n as f64 / max * bars_h;
            top -= bh;
            let _ = writeln!(
                out,
                r#"<rect x="{cx:.2}" y="{top:.2}" width="{:.2}" height="{bh:.2}" fill="{colour}"><title>{:#x}: {} hits, {} misses, {} other</title></rect>"#,
                cw.max(0.5),
                c.first.addr(shift),
                c.counts.hits,
                c.counts.misses,
                c.counts.other
            );
        }
        if c.gap_before {
            let _ = writeln!(
                out,
                r##"<line x1="{cx:.2}" y1="{y:.1}" x2="{cx:.2}" y2="{:.1}" stroke="#bbb" stroke-dasharray="2,2"/>"##,
                y + bars_h
            );
        }
        if let Some(r) = c.counts.miss_rate() {
            let rh = r * rate_h;
            let _ = writeln!(
                out,
                r##"<rect x="{cx:.2}" y="{:.2}" width="{:.2}" height="{rh:.2}" fill="#8e44ad"/>"##,
                rate_y + rate_h - rh,
                cw.max(0.5)
            );
        }
    }
    let first = cols[0].first.addr(shift);
    let last = cols[cols.len() - 1].last.addr(shift);
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{:.1}" font-size="11">{first:#x}</text>"#,
        rate_y + rate_h + 14.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{last:#x}</text>"#,
        x + w,
        rate_y + rate_h + 14.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">miss rate 0-100%</text>"#,
        x - 4.0,
        rate_y + rate_h / 2.0
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">blue: LLC hits, red: LLC misses, grey: other samples; dashed: unsampled pages skipped</text>"##,
        x + w / 2.0,
        rate_y + rate_h + 28.0
    );
}

/// A whole SVG document: title, the histogram (Fig. 2) and the address map (Fig. 3).
pub fn profile_svg(profile: &PageProfile, stack: &MissRateStack, title: &str) -> String {
    let (width, height) = (960.0, 720.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="20" y="28" font-size="16">{}</text>"#,
        esc(title)
    );
    histogram_svg_at(&mut out, stack, 10, 120.0, 70.0, 700.0, 200.0);
    address_map_svg_at(&mut out, profile, 120.0, 360.0, 800.0, 300.0);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocs_core::DataSource::*;

    /// Pages 0..10 with miss rate i/10 (10 samples each), page 100 with only `Other`.
    fn profile() -> PageProfile {
        let mut p = PageProfile::new(12);
        for page in 0..10u64 {
            for k in 0..10 {
                p.record(page << 12, if k < page { LlcMiss } else { LlcHit });
            }
        }
        p.record(100 << 12, Other);
        p
    }

    #[test]
    fn histogram_puts_each_page_in_its_miss_rate_bin() {
        let stack = MissRateStack::from_profile(&profile());
        assert_eq!(histogram_bins(&stack, 10), vec![1; 10]);
        assert_eq!(histogram_bins(&stack, 2), vec![5, 5]);
        let text = histogram_text(&stack, 10, 20);
        assert_eq!(text.lines().count(), 11, "{text}");
        assert!(text.contains("10 pages with LLC samples"));
        let empty = histogram_text(&MissRateStack::default(), 10, 20);
        assert!(empty.contains("no data source"));
    }

    #[test]
    fn address_map_compacts_and_marks_gaps() {
        let p = profile();
        let cols = address_map_columns(&p, 100);
        assert_eq!(cols.len(), 11, "one column per page when they fit");
        assert!(cols[10].gap_before && !cols[5].gap_before);
        assert_eq!(cols[3].counts.misses, 3);
        let narrow = address_map_columns(&p, 4);
        assert_eq!(narrow.len(), 4);
        assert_eq!(
            narrow.iter().map(|c| c.counts.samples()).sum::<u64>(),
            p.samples_total()
        );
        let text = address_map_text(&p, 100, 4);
        assert!(
            text.contains("miss %") && text.contains("0x0 .. 0x64fff"),
            "{text}"
        );
    }

    #[test]
    fn svg_is_one_document_with_both_figures_inside_its_view() {
        let p = profile();
        let svg = profile_svg(&p, &MissRateStack::from_profile(&p), "t <&> 1");
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        let root = doc.root_element();
        assert!(root.has_tag_name(("http://www.w3.org/2000/svg", "svg")));
        let view: Vec<f64> = root
            .attribute("viewBox")
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(view.len(), 4);
        assert_eq!(
            doc.descendants().filter(|n| n.has_tag_name("svg")).count(),
            1
        );
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect();
        // The title comes back as it was given: the markup in it was escaped.
        assert_eq!(texts.first(), Some(&"t <&> 1"));
        assert!(
            texts.contains(&"Per-page LLC miss rate (10 pages)"),
            "{texts:?}"
        );
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with("Address space, compacted")),
            "{texts:?}"
        );
        // Every shape with a position and a size lies inside the picture.
        let num = |n: &roxmltree::Node, a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
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
            assert!(
                w >= 0.0 && h >= 0.0,
                "{:?}",
                n.attributes().collect::<Vec<_>>()
            );
            assert!(x >= view[0] && x + w <= view[0] + view[2], "x {x} w {w}");
            assert!(y >= view[1] && y + h <= view[1] + view[3], "y {y} h {h}");
        }
        assert!(shapes >= 10, "a bar per miss-rate bin at least: {shapes}");
    }
}
