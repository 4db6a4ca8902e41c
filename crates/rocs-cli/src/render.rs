//! Pictures of page profiles, in the terminal (unicode blocks) and as SVG:
//! the per-page miss-rate histogram (ROCS Fig. 2) and the compact address-space map of
//! accesses and miss rates (ROCS Fig. 3). Used by `record`, `profile` and the daemon
//! client's `profile`/`stack` commands.

use std::fmt::Write;

use rocs_core::{MissRateStack, PageCounts, PageProfile, VirtPage};

mod svg;
pub use svg::profile_svg;
// The axes and legends of every SVG picture rocsctl draws.
pub(crate) use svg::{legend, svg_start, ticks, y_axis, FRAME, GRID};

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
    /// Sampled pages in the column.
    pub pages: u64,
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
            pages: chunk.len() as u64,
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
}
