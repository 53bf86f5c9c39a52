//! `modal`: future or hypothetical by a modal: "we'll merge", "it'd pass", "may be merged";
//! not the month May ("May 3", "in May").

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::numbers::count_at;
use super::super::scope::Quiet;
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Modal;

impl Rule for Modal {
    fn name(&self) -> &'static str {
        "modal"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        let w = t.w(j);
        let hit = |class| Some(Hit { class, a: j, b: j + 1 });
        if w.ends_with("'ll") {
            return hit(Class::Planned);
        }
        if w.ends_with("'d") && w.len() > 2 {
            return hit(Class::Uncertain);
        }
        if w == "may" {
            let lower = t.quote(j, j).starts_with('m');
            let verb = t.is(j + 1, Lists::MAY_VERB);
            if (lower && t.is_word(j + 1) && count_at(t, j + 1).is_none()) || verb {
                return hit(Class::Uncertain);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_modals() {
        assert_eq!(fires(&Modal, "we'll merge it"), [(Class::Planned, "we'll merge".to_string())]);
        assert_eq!(fires(&Modal, "it'd pass"), [(Class::Uncertain, "it'd pass".to_string())]);
        assert_eq!(fires(&Modal, "it may break"), [(Class::Uncertain, "may break".to_string())]);
        assert_eq!(fires(&Modal, "May be merged"), [(Class::Uncertain, "May be".to_string())]);
        assert!(fires(&Modal, "paid on May 3").is_empty());
        assert!(fires(&Modal, "shipped in May").is_empty());
    }

    #[test]
    fn rejects() {
        assert_rejects("PR #42 merged", "we'll merge PR #42 after lunch", "polarity:planned");
        assert_rejects("PR #42 merged", "PR #42 may be merged today", "polarity:uncertain");
    }

    #[test]
    fn accepts() {
        assert_accepts("invoice 2207 paid", "invoice 2207 paid by wire transfer on 3 May");
        assert_accepts("PR #42 merged", "PR #42 merged. PR #43: we'll merge it later");
    }
}
