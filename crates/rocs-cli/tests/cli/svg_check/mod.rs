//! Reading the profile SVG in tests: parsed with roxmltree, its parts found by the ids and
//! classes render/svg.rs gives them.

use roxmltree::{Document, Node};

/// The document, which must be one well-formed SVG element.
pub fn parse(svg: &str) -> Document<'_> {
    let doc = Document::parse(svg).expect("the SVG is well-formed XML");
    assert!(
        doc.root_element()
            .has_tag_name(("http://www.w3.org/2000/svg", "svg")),
        "the root is not an SVG element"
    );
    doc
}

/// The elements of class `class` inside the group with id `group`.
pub fn in_group<'a>(doc: &'a Document, group: &str, class: &str) -> Vec<Node<'a, 'a>> {
    let g = doc
        .descendants()
        .find(|n| n.attribute("id") == Some(group))
        .unwrap_or_else(|| panic!("the SVG has no group {group:?}"));
    g.descendants()
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split(' ').any(|c| c == class))
        })
        .collect()
}

/// Every text of the document, in order.
pub fn texts<'a>(doc: &'a Document) -> Vec<&'a str> {
    doc.descendants().filter_map(|n| n.text()).collect()
}

/// A profile without LLC data (page faults, or a PMU without a data source): the histogram
/// says so, the map draws `pages` sampled pages as "other" samples only, and nothing is
/// marked confined.
pub fn assert_no_llc_picture(doc: &Document, samples: u64, pages: usize) {
    let all = texts(doc);
    assert!(
        all.iter().any(|t| t.starts_with("no page has LLC samples")),
        "{all:?}"
    );
    assert!(in_group(doc, "histogram", "bar").is_empty());
    let caption = format!("{samples} samples over {pages} pages of 4 KiB; 0 of them confined");
    assert!(
        all.iter().any(|t| t.starts_with(&caption)),
        "{caption:?} not in {all:?}"
    );
    assert!(!in_group(doc, "address-map", "other").is_empty());
    for class in ["hits", "misses", "confined"] {
        assert!(in_group(doc, "address-map", class).is_empty(), "{class}");
    }
    // The map's columns carry every sample: their titles name their counts.
    let other: u64 = in_group(doc, "address-map", "other")
        .iter()
        .map(|n| {
            let title = n.first_element_child().and_then(|t| t.text()).unwrap();
            let n = title.rsplit_once(", ").unwrap().1;
            n.trim_end_matches(" other").parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(other, samples);
}
