//! `still`: "still" before unfinished work or a marker: "still deploying", "still open",
//! "still missing"; not "still passing" or "still looks good".

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::scope::Quiet;
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Still;

/// A state, not unfinished work: the positive states, "-thing" words and [`Lists::POSITIVE_ING`].
pub(in super::super) fn positive_ing(t: &Text, k: usize) -> bool {
    t.is(k, Lists::POSITIVE_STATE) || t.w(k).ends_with("thing") || t.is(k, Lists::POSITIVE_ING)
}

impl Rule for Still {
    fn name(&self) -> &'static str {
        "still"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        if t.w(j) != "still" || !t.is_word(j + 1) {
            return None;
        }
        if let Some(m) = t.mark(j + 1) {
            return Some(Hit { class: m.class, a: j, b: j + m.len });
        }
        if t.is(j + 1, Lists::POSITIVE_STATE) {
            return None;
        }
        let nx = t.w(j + 1);
        let unfinished = (nx.ends_with("ing") && !positive_ing(t, j + 1))
            || (nx.len() > 4 && nx.ends_with('s') && !nx.ends_with("ss") && !t.is(j + 1, Lists::STATE_VERB))
            || t.is(j + 1, Lists::STILL_UNFINISHED);
        unfinished.then_some(Hit { class: Class::Pending, a: j, b: j + 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_unfinished_work() {
        assert_eq!(fires(&Still, "build 7 is still deploying"), [(Class::Pending, "still deploying".to_string())]);
        assert_eq!(fires(&Still, "PR still open"), [(Class::Pending, "still open".to_string())]);
        assert_eq!(fires(&Still, "notes still missing"), [(Class::Negation, "still missing".to_string())]);
        assert_eq!(fires(&Still, "the queue still grows"), [(Class::Pending, "still grows".to_string())]);
        assert!(fires(&Still, "tests still pass").is_empty());
        assert!(fires(&Still, "it still looks good").is_empty());
        assert!(fires(&Still, "still, it shipped").is_empty());
    }

    #[test]
    fn rejects() {
        assert_rejects("release notes written", "release notes still missing for v2.3", "polarity:negation");
        assert_rejects("invoice 77 paid", "invoice 77 still overdue", "polarity:unpaid");
        assert_rejects("migration finished", "the migration is still running", "polarity:pending");
    }

    #[test]
    fn accepts() {
        assert_accepts("tests pass on main", "tests still pass on main");
        assert_accepts("invoice 1031 paid", "invoice 1031 paid; invoice 1032 is still overdue");
    }
}
