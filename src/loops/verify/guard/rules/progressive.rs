//! `progressive`: work in progress: "is deploying", "are being reviewed", "currently
//! migrating"; not "is passing" or "is running" (states: [`super::still::positive_ing`]).

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::scope::Quiet;
use super::super::tokens::Text;
use super::still::positive_ing;
use super::{Hit, Rule};

pub(in super::super) struct Progressive;

impl Rule for Progressive {
    fn name(&self) -> &'static str {
        "progressive"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        if !t.is(j, Lists::PROGRESSIVE_BE) {
            return None;
        }
        let nx = t.w(j + 1);
        if nx.len() < 5 || !nx.ends_with("ing") || positive_ing(t, j + 1) || t.mark(j + 1).is_some() {
            return None;
        }
        Some(Hit { class: Class::Pending, a: j, b: j + 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_work_in_progress() {
        assert_eq!(fires(&Progressive, "build 7 is deploying"), [(Class::Pending, "is deploying".to_string())]);
        assert_eq!(fires(&Progressive, "currently migrating shard 2"), [(Class::Pending, "currently migrating".to_string())]);
        assert!(fires(&Progressive, "CI is passing").is_empty());
        assert!(fires(&Progressive, "service is running fine").is_empty());
        assert!(fires(&Progressive, "it is pending").is_empty(), "a marker: left to the lexicon rule");
    }

    #[test]
    fn rejects() {
        assert_rejects("database migrated", "the database is migrating now", "polarity:pending");
        assert_rejects("docs reviewed", "docs are being reviewed", "polarity:pending");
    }

    #[test]
    fn accepts() {
        assert_accepts("service deployed", "service deployed and is serving traffic");
        assert_accepts("shard 1 migrated", "shard 1 migrated. shard 2 is migrating");
    }
}
