//! `fraction`: a part of a whole: "3 of 5 shards", "3 out of 5", "118/120 passed". A count of
//! problems ("2 of 50 failed", "0 of 5 failed") is left to the problem word.

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::numbers::{count, count_at};
use super::super::scope::{problem_len, Quiet};
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct Fraction;

impl Rule for Fraction {
    fn name(&self) -> &'static str {
        "fraction"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        let w = t.w(j);
        let (n, m, end) = if let Some((x, y)) = w.split_once('/') {
            (count(x)?, count(y)?, j)
        } else {
            let n = count_at(t, j)?;
            let mut k = j + 1;
            if t.w(k) == "out" {
                k += 1;
            }
            if t.w(k) != "of" {
                return None;
            }
            k += 1;
            if t.is(k, Lists::FRACTION_DETERMINER) {
                k += 1;
            }
            (n, count_at(t, k)?, k)
        };
        if n >= m {
            return None;
        }
        for k in end + 1..end + 5 {
            if !t.is_word(k) {
                break;
            }
            if problem_len(t, k).is_some() {
                return None;
            }
        }
        Some(Hit { class: Class::Partial, a: j, b: end })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_parts() {
        assert_eq!(fires(&Fraction, "3 of 5 shards migrated"), [(Class::Partial, "3 of 5".to_string())]);
        assert_eq!(fires(&Fraction, "3 out of the 5"), [(Class::Partial, "3 out of the 5".to_string())]);
        assert_eq!(fires(&Fraction, "118/120 passed"), [(Class::Partial, "118/120".to_string())]);
        assert!(fires(&Fraction, "8/8 passed").is_empty());
        assert!(fires(&Fraction, "2 of 50 tests failed").is_empty(), "a count of problems");
        assert!(fires(&Fraction, "one of the reviewers approved").is_empty(), "no total");
    }

    #[test]
    fn rejects() {
        assert_rejects("all shards migrated", "3 of 5 shards migrated", "polarity:partial");
        assert_rejects("all 8 integration tests pass", "7 of 8 integration tests pass", "polarity:partial");
    }

    #[test]
    fn accepts() {
        assert_accepts("all 8 integration tests pass", "8/8 integration tests pass");
        assert_accepts("job 4 done", "job 4 done. job 5 is at 3 of 9 steps");
    }
}
