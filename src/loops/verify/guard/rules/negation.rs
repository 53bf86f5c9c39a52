//! `negation`: a strong negator and what it negates: "not approved", "isn't merged", "could
//! not upload", "never merged", "no approval". The quote starts at an auxiliary before the
//! negator and reaches across a few fillers to the negated word (and "to" + verb).

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::scope::{negator, Negator, Quiet};
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Negation;

impl Rule for Negation {
    fn name(&self) -> &'static str {
        "negation"
    }

    fn at(&self, t: &Text, j: usize, quiet: &Quiet) -> Option<Hit> {
        let Negator { len, strong } = negator(t, j)?;
        if !strong {
            return None;
        }
        let a = if j > 0 && t.is(j - 1, Lists::AUX) && !quiet.at(j - 1) { j - 1 } else { j };
        let mut k = j + len;
        while t.is_word(k) && t.is(k, Lists::FILLER) && k - j < 4 {
            k += 1;
        }
        let mut b = if t.is_word(k) { k } else { k - 1 };
        if t.w(b) == "to" && t.is_word(b + 1) {
            b += 1;
        }
        Some(Hit { class: Class::Negation, a, b: b.max(j + len - 1) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_negations() {
        assert_eq!(fires(&Negation, "PR #42: NOT approved"), [(Class::Negation, "NOT approved".to_string())]);
        assert_eq!(fires(&Negation, "we could not upload the results"), [(Class::Negation, "could not upload".to_string())]);
        assert_eq!(fires(&Negation, "it has not been paid"), [(Class::Negation, "has not been paid".to_string())]);
        assert_eq!(fires(&Negation, "failed to not even"), [(Class::Negation, "not even".to_string())]);
        // Weak negators and cancelled ones are not negations.
        assert!(fires(&Negation, "merged without a squash").is_empty());
        assert!(fires(&Negation, "finished with no errors").is_empty());
    }

    #[test]
    fn rejects() {
        assert_rejects("PR #42 approved", "PR #42 isn't approved yet", "polarity:negation");
        assert_rejects("PR #42 merged", "PR #42 was never merged", "polarity:negation");
        assert_rejects("PR #42 approved", "nobody approved PR #42", "polarity:negation");
        assert_rejects("tests pass on main", "tests don't pass on main", "polarity:negation");
    }

    #[test]
    fn accepts() {
        assert_accepts("data import done", "data import finished, not a single failure");
        assert_accepts("flaky test fixed", "the flaky test is no longer failing");
        // In another clause, about another PR.
        assert_accepts("PR #42 approved", "PR #42 approved. PR #43 is not approved");
        // A query that states a negation is answered by one.
        assert_accepts("PR #42 not merged", "PR #42 was not merged");
    }
}
