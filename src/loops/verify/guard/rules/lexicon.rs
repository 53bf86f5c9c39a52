//! `lexicon`: a marker word or phrase of [`super::super::lexicon`] that is not quiet: "failed",
//! "rolled back", "on hold", "next week". A hedge or future word right before a negator is
//! left to the negation rule ("could not upload"); "due to" is a cause, "due" alone is money
//! owed.

use super::super::class::Class;
use super::super::scope::{negator, Quiet};
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Lexicon;

impl Rule for Lexicon {
    fn name(&self) -> &'static str {
        "lexicon"
    }

    fn at(&self, t: &Text, j: usize, quiet: &Quiet) -> Option<Hit> {
        if t.w(j) == "due" {
            return (t.w(j + 1) != "to").then_some(Hit { class: Class::Unpaid, a: j, b: j });
        }
        let m = t.mark(j)?;
        if quiet.any(j, m.len) {
            return None;
        }
        if matches!(m.class, Class::Uncertain | Class::Planned) && m.len == 1 && negator(t, j + 1).is_some() {
            return None;
        }
        Some(Hit { class: m.class, a: j, b: j + m.len - 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_markers() {
        assert_eq!(fires(&Lexicon, "deploy failed"), [(Class::Failure, "failed".to_string())]);
        assert_eq!(fires(&Lexicon, "release rolled back"), [(Class::Reverted, "rolled back".to_string())]);
        assert_eq!(fires(&Lexicon, "contract on hold"), [(Class::Pending, "on hold".to_string())]);
        assert_eq!(fires(&Lexicon, "payment due Friday"), [(Class::Unpaid, "due".to_string())]);
        assert!(fires(&Lexicon, "delayed due to rain").iter().all(|(c, _)| *c != Class::Unpaid));
        assert!(fires(&Lexicon, "finished without errors").is_empty(), "cancelled");
        assert!(fires(&Lexicon, "could not upload").is_empty(), "left to the negation rule");
    }

    #[test]
    fn rejects() {
        assert_rejects("load test finished", "load test timed out after 30 minutes", "polarity:failure");
        assert_rejects("release 3.1 deployed", "release 3.1 deployed then rolled back", "polarity:reverted");
        assert_rejects("access request granted", "access request declined by security", "polarity:refusal");
        assert_rejects("deploy done", "deploy scheduled for tomorrow morning", "polarity:planned");
    }

    #[test]
    fn accepts() {
        assert_accepts("backup completed", "backup completed without any errors");
        assert_accepts("deploy failed", "the deploy of build 9 failed");
        // A marker used as the query's subject is topic, not outcome.
        assert_accepts("flaky test fixed", "the flaky test was fixed");
        // In another clause, about another invoice.
        assert_accepts("invoice 1031 paid", "invoice 1031 paid; invoice 1032 is overdue");
    }
}
