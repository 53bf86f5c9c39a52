//! `only_some`: a restricted part: "only 3 shards", "only some", "some shards migrated"; not
//! "some times".

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::numbers::count_at;
use super::super::scope::Quiet;
use super::super::tokens::Text;
use super::{Hit, Rule};

pub(in super::super) struct OnlySome;

impl Rule for OnlySome {
    fn name(&self) -> &'static str {
        "only_some"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        let nx = t.w(j + 1);
        let part = match t.w(j) {
            "only" => count_at(t, j + 1).is_some() || t.is(j + 1, Lists::ONLY_PART),
            "some" => nx.len() > 3 && nx.ends_with('s') && !nx.ends_with("ss") && !t.is(j + 1, Lists::NOT_PLURAL_THINGS),
            _ => false,
        };
        part.then_some(Hit { class: Class::Partial, a: j, b: j + 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_parts() {
        assert_eq!(fires(&OnlySome, "only 3 shards moved"), [(Class::Partial, "only 3".to_string())]);
        assert_eq!(fires(&OnlySome, "some shards migrated"), [(Class::Partial, "some shards".to_string())]);
        assert!(fires(&OnlySome, "it failed some times").is_empty());
        assert!(fires(&OnlySome, "some class").is_empty());
        assert!(fires(&OnlySome, "the only blocker").is_empty());
    }

    #[test]
    fn rejects() {
        assert_rejects("all shards migrated", "only some shards migrated", "polarity:partial");
        assert_rejects("hosts patched", "some hosts patched", "polarity:partial");
    }

    #[test]
    fn accepts() {
        assert_accepts("release 3 shipped", "release 3 shipped. release 4 has only 2 features");
        assert_accepts("hosts patched", "all hosts patched");
    }
}
