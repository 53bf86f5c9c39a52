//! Negated states, for `guard:entities` ([`super::entities`]): a word of the gate query that
//! the memory writes only with the prefix `un-` ("unpaid" for "paid", "still unsigned" for
//! "signed", "unpublished twenty minutes later" for "published").
//!
//! WordPiece reads "unpaid" as pieces that include "paid", and the trained verifier gives
//! "invoice 1031 is unpaid" 0.999 for "invoice 1031 paid". The rule is the exact complement of
//! that blind spot: the memory has `un` + a query word of four letters or more, and not the
//! word itself. It stands aside for a memory that negates anything ("no", "not", "nothing",
//! "zero", "0", "never", "no longer", "isn't", ...) or writes a state chain ("→", "->"),
//! because there the un-word is usually undone ("nothing left unpaid", "Unassigned → Dana"):
//! such double negatives are the model's to read. Measured on the train split before it was
//! written: it fired on 28 near misses and 1 true signal of about 39,000 pairs.

/// Words that negate something in the memory, so an un-word may be negated too.
const NEGATORS: &[&str] = &["no", "not", "none", "nothing", "nobody", "zero", "0", "never", "neither", "nor", "without", "longer"];

/// The query's words the rule watches (four letters or more, lower case).
#[derive(Debug, Clone, Default)]
pub(super) struct Negated {
    words: Vec<String>,
}

/// The words of `text` (given in lower case): letters (with apostrophes inside, "isn't") or
/// digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '’').to_string())
        .filter(|w| !w.is_empty())
        .collect()
}

/// `memory` in lower case with "un-" written "un" at the start of a word ("un-published" is
/// "unpublished"; "run-book" stays).
fn joined_un(memory: &str) -> String {
    let lower = memory.to_lowercase();
    let mut out = String::with_capacity(lower.len());
    let mut prev: Option<char> = None;
    let mut rest = lower.as_str();
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("un-") && prev.is_none_or(|p| !p.is_alphanumeric()) {
            out.push_str("un");
            rest = &rest[3..];
            prev = Some('n');
            continue;
        }
        out.push(c);
        prev = Some(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

impl Negated {
    pub(super) fn new(query: &str) -> Negated {
        let mut out: Vec<String> = Vec::new();
        for w in words(&query.to_lowercase()) {
            if w.chars().count() >= 4 && w.chars().all(char::is_alphabetic) && !out.contains(&w) {
                out.push(w);
            }
        }
        Negated { words: out }
    }

    /// The query word the memory negates, with the un-word it writes instead.
    pub(super) fn check(&self, memory: &str) -> Option<(String, String)> {
        if self.words.is_empty() || memory.contains('→') || memory.contains("->") {
            return None;
        }
        let said = words(&joined_un(memory));
        let negates = |w: &String| NEGATORS.contains(&w.as_str()) || w.ends_with("n't") || w.ends_with("n’t");
        if said.iter().any(negates) {
            return None;
        }
        self.words.iter().find_map(|w| {
            let un = format!("un{w}");
            (said.contains(&un) && !said.contains(w)).then(|| (w.clone(), un))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(query: &str, memory: &str) -> bool {
        Negated::new(query).check(memory).is_some()
    }

    #[test]
    fn an_un_word_in_place_of_the_query_word_is_refused() {
        assert!(refused("invoice 1031 paid", "invoice 1031 is overdue and unpaid"));
        assert!(refused("contract amendment signed", "Amendment still unsigned, their CFO is travelling"));
        assert!(refused("acme-utils 1.4.2 published to npm", "1.4.2 went up on npm and was un-published twenty minutes later"));
    }

    #[test]
    fn a_negated_un_word_or_the_word_itself_is_left_to_the_model() {
        assert!(!refused("invoice 1031 paid", "no invoice left unpaid, 1031 included"));
        assert!(!refused("ticket 3302 assigned", "3302 isn't unassigned any more"));
        assert!(!refused("PLAT-512 assigned to Dana", "assignee: Unassigned → Dana"));
        assert!(!refused("invoice 1031 paid", "1031 was unpaid on Monday and paid on Tuesday"));
        assert!(!refused("unassigned tickets triaged", "all unassigned tickets triaged"), "the query's own un-word");
        assert!(!refused("run book updated", "run-book: ok"), "only a word that opens with un- is joined");
        assert!(refused("migration done", "the migration was undone"));
    }
}
