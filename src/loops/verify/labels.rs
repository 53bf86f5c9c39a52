//! Labelled numbers, for `guard:entities` ([`super::entities`]): a number of the gate query
//! with the word that labels it ("semester 2", "batch 7", "row 12", "step 5"). A memory that
//! gives the same label only other numbers ("the semester 1 grade sync completed") speaks of
//! another one, even when the query's number turns up elsewhere in it ("two teachers still
//! have missing comments"): the plain numbers rule of `entities` counts any "2" and lets it
//! through, and the model reads "semester 1" and "semester 2" as near the same text.
//!
//! The label is the word just before the query's number: letters only, three or more, and
//! not a small word that labels nothing ("of 40,000 kits", "in 2024", "above 90"). In the
//! memory, a number belongs to the label when it follows it (through at most a space, `:`,
//! `=`, `#`, `-` or `_`: "semester 2", "row=12", "batch #7", "Phase II", "step two") or an
//! ordinal comes just before it ("second semester", "2nd semester"). The rule refuses only a
//! memory that labels some number with the same word and never the query's: a memory that
//! does not use the label at all, or uses it in the plural ("rows 11 and 12"), is left to the
//! other rules and the model.

use super::number_words::{CARDINALS, ORDINALS};
use super::numerals::{roman, value};

/// Words before a number that do not label it.
const NOT_LABELS: &[&str] = &[
    "the", "and", "for", "from", "into", "with", "than", "over", "under", "above", "below", "least", "most", "within", "after", "before",
    "since", "until", "all", "top", "last", "first", "next", "every", "each", "about", "around", "only", "our", "its", "their", "your",
    "his", "her", "was", "were", "are", "has", "had", "have", "got", "gets", "per", "via", "out", "off", "upto", "exceeds", "through",
    "across", "between", "near", "approx", "nearly", "almost", "just", "another",
];

/// A query number and its label, lower case ("semester", "2").
#[derive(Debug, Clone)]
pub(super) struct Labelled {
    pub label: String,
    pub value: String,
}

/// The words of `text` with their byte offsets: runs of letters or of digits (so "row12"
/// reads as "row" then "12"), other characters dropped.
fn words(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start: Option<(usize, bool)> = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        let kind = if c.is_alphabetic() {
            Some(true)
        } else if c.is_ascii_digit() {
            Some(false)
        } else {
            None
        };
        match (start, kind) {
            (Some((_, a)), Some(b)) if a == b => {}
            (Some((s, _)), _) => {
                out.push((s, &text[s..i]));
                start = kind.map(|k| (i, k));
            }
            (None, Some(k)) => start = Some((i, k)),
            (None, None) => {}
        }
    }
    out
}

/// What lies between two words: at most three characters, each a space or a joiner.
fn joined(text: &str, end_of_first: usize, start_of_second: usize) -> bool {
    let gap = &text[end_of_first..start_of_second];
    gap.chars().count() <= 3 && gap.chars().all(|c| matches!(c, ' ' | ':' | '=' | '#' | '-' | '_' | '\u{a0}'))
}

/// The labelled numbers of a query.
pub(super) fn in_query(query: &str) -> Vec<Labelled> {
    let w = words(query);
    w.windows(2)
        .filter(|p| p[1].1.starts_with(|c: char| c.is_ascii_digit()))
        .filter(|p| joined(query, p[0].0 + p[0].1.len(), p[1].0))
        .filter(|p| p[0].1.chars().count() >= 3 && !NOT_LABELS.contains(&p[0].1.to_lowercase().as_str()))
        // "v2.4", "3.5 GB": a number with a decimal part is a version or a measure, read by
        // the numbers rule.
        // "entry 112-4457781-3": digit groups joined by dashes are one identifier, also read
        // by the numbers rule (which meets it run together, "11244577813").
        .filter(|p| {
            let after = &query[p[1].0 + p[1].1.len()..];
            let dashed = after.starts_with('-') && after[1..].starts_with(|c: char| c.is_ascii_digit());
            !(after.starts_with(['.', ',']) || dashed)
        })
        .map(|p| Labelled { label: p[0].1.to_lowercase(), value: value(p[1].1) })
        .collect()
}

/// The numbers `memory` gives the label `label` (`w` is [`words`]`(memory)`).
fn given(memory: &str, w: &[(usize, &str)], label: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, &(start, word)) in w.iter().enumerate() {
        if !word.eq_ignore_ascii_case(label) {
            continue;
        }
        if let Some(&(next_start, next)) = w.get(i + 1) {
            if joined(memory, start + word.len(), next_start) {
                let lower = next.to_lowercase();
                if next.starts_with(|c: char| c.is_ascii_digit()) {
                    out.push(value(next));
                } else if let Some(n) = roman(next) {
                    out.push(n.to_string());
                } else if let Some((_, n)) = CARDINALS.iter().find(|(c, _)| *c == lower) {
                    out.push(n.to_string());
                }
            }
        }
        if i > 0 {
            let (prev_start, prev) = w[i - 1];
            if joined(memory, prev_start + prev.len(), start) {
                let lower = prev.to_lowercase();
                if let Some((_, n)) = ORDINALS.iter().find(|(o, _)| *o == lower) {
                    out.push(n.to_string());
                }
            }
            // "2nd semester": digits, then the suffix as its own word.
            if i > 1 && matches!(prev.to_lowercase().as_str(), "st" | "nd" | "rd" | "th") {
                let (d_start, d) = w[i - 2];
                if d.starts_with(|c: char| c.is_ascii_digit()) && d_start + d.len() == prev_start {
                    out.push(value(d));
                }
            }
        }
    }
    out
}

/// Whether `memory` has the query's number of two digits or more as a run of its own ("on 311
/// the suite passed" after "build 310 failed"): a number that long is the query's thing named
/// without its label, not a coincidence, so the memory is left to the model. A one-digit number
/// ("2 teachers") is too common to tell.
fn bare(w: &[(usize, &str)], want: &str) -> bool {
    want.len() >= 2 && w.iter().any(|(_, w)| w.starts_with(|c: char| c.is_ascii_digit()) && value(w) == want)
}

/// The first labelled number of the query the memory contradicts, with the number the memory
/// gives its label instead.
pub(super) fn contradicted<'a>(labelled: &'a [Labelled], memory: &str) -> Option<(&'a Labelled, String)> {
    if labelled.is_empty() {
        return None;
    }
    let w = words(memory);
    labelled.iter().find_map(|l| {
        let given = given(memory, &w, &l.label);
        (!given.is_empty() && !given.contains(&l.value) && !bare(&w, &l.value)).then(|| (l, given[0].clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(query: &str, memory: &str) -> bool {
        contradicted(&in_query(query), memory).is_some()
    }

    #[test]
    fn a_label_with_another_number_is_another_one() {
        let q = "semester 2 grade sync completed";
        assert!(refused(q, "the semester 1 grade sync completed; two teachers still owe comments"));
        assert!(!refused(q, "semester 2 grades synced, semester 1 archived"));
        assert!(!refused(q, "second semester grade sync completed; semester 1 was last month"));
        assert!(!refused(q, "2nd semester sync done (semester 1 untouched)"));
        assert!(!refused(q, "grade sync completed for both semesters"), "no label, left to the model");
        assert!(refused("step 5 done", "step 3 of 5 done"));
        assert!(!refused("suite passed on build 311", "flaky on build 310; on 311 the whole suite passed"), "a long number bare is ours");
        assert!(refused("semester 2 sync done", "semester 1 sync done, 2 teachers late"), "a one-digit number bare may be anything");
        assert!(refused("batch 7 burn-in completed", "batch=6 burn-in ok"));
        assert!(!refused("batch 7 burn-in completed", "batch #007 burn-in ok"));
        assert!(!refused("phase 2 invoice paid", "Phase II invoice paid"));
        assert!(refused("phase 2 invoice paid", "Phase III invoice paid"));
        assert!(!refused("row 12 containment installed", "rows 11 and 12: installed"), "plural is not the label");
        assert!(!refused("row 12 containment installed", "row 11 damaged | row 12 installed"));
    }

    #[test]
    fn small_words_and_measures_label_nothing() {
        assert!(in_query("production run of 40,000 kits finished").is_empty());
        assert!(in_query("score above 90 on release 4.2").is_empty());
        assert!(in_query("deployed in 2024").is_empty());
        let l = in_query("Room 512 minibar restocked");
        assert_eq!((l[0].label.as_str(), l[0].value.as_str()), ("room", "512"));
        assert_eq!(words("row12=ok"), [(0, "row"), (3, "12"), (6, "ok")]);
    }
}
