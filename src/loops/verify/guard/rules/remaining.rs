//! `remaining`: a count still to do: "2 left", "3 tests remaining", "a few more to go";
//! "nothing left" and "0 left" are not (the count must be above zero).

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::numbers::count_at;
use super::super::scope::Quiet;
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Remaining;

impl Rule for Remaining {
    fn name(&self) -> &'static str {
        "remaining"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        let some = count_at(t, j).is_some_and(|n| n > 0) || t.is(j, Lists::FEW);
        if !some {
            return None;
        }
        for k in j + 1..j + 4 {
            if !t.is_word(k) {
                return None;
            }
            if t.is(k, Lists::REMAINING) {
                return Some(Hit { class: Class::Partial, a: j, b: k });
            }
            if t.w(k) == "to" && t.w(k + 1) == "go" {
                return Some(Hit { class: Class::Partial, a: j, b: k + 1 });
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
    fn finds_what_is_left() {
        assert_eq!(fires(&Remaining, "2 left"), [(Class::Partial, "2 left".to_string())]);
        assert_eq!(fires(&Remaining, "3 tests remaining"), [(Class::Partial, "3 tests remaining".to_string())]);
        assert_eq!(fires(&Remaining, "a few more to go"), [(Class::Partial, "few more to go".to_string())]);
        assert!(fires(&Remaining, "0 left").is_empty());
        assert!(fires(&Remaining, "3 tests, 0 left").is_empty(), "a clause mark ends the count");
    }

    #[test]
    fn rejects() {
        assert_rejects("triage done", "triage almost done, 2 tickets left", "polarity:partial");
        assert_rejects("uploads finished", "uploads finished but 3 files remain", "polarity:partial");
    }

    #[test]
    fn accepts() {
        assert_accepts("backlog cleared", "backlog cleared, nothing left to triage");
        assert_accepts("batch 1 processed", "batch 1 processed. batch 2 has 40 rows left");
    }
}
