//! `percent`: progress below 100 %: "40% done", "25% of users"; not "100% done" or "99.9%
//! uptime" (a percentage with no progress word near it).

use super::super::class::Class;
use super::super::lexicon::Lists;
use super::super::numbers::canon_num;
use super::super::scope::Quiet;
use super::super::tokens::{Text, TokKind};
use super::{Hit, Rule};

pub(in super::super) struct Percent;

impl Rule for Percent {
    fn name(&self) -> &'static str {
        "percent"
    }

    fn at(&self, t: &Text, j: usize, _quiet: &Quiet) -> Option<Hit> {
        let w = t.w(j);
        canon_num(w)?;
        let v: f64 = w.parse().ok()?;
        let p = j + 1;
        let is_pct = t.kind(p) == Some(TokKind::Percent) || t.w(p) == "percent";
        if !is_pct || v >= 100.0 {
            return None;
        }
        let lo = j.saturating_sub(3);
        let near = (lo..p + 4).any(|k| k != j && t.is(k, Lists::DONE));
        (t.w(p + 1) == "of" || near).then_some(Hit { class: Class::Partial, a: j, b: p })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_accepts, assert_rejects, fires};
    use super::*;

    #[test]
    fn finds_progress() {
        assert_eq!(fires(&Percent, "backfill is 90% complete"), [(Class::Partial, "90%".to_string())]);
        assert_eq!(fires(&Percent, "enabled for 25 percent of users"), [(Class::Partial, "25 percent".to_string())]);
        assert!(fires(&Percent, "rollout at 100% done").is_empty());
        assert!(fires(&Percent, "99.9% uptime this month").is_empty());
    }

    #[test]
    fn rejects() {
        assert_rejects("feature flag enabled", "feature flag enabled for 25% of users", "polarity:partial");
        assert_rejects("data backfill finished", "data backfill is 90% complete", "polarity:partial");
    }

    #[test]
    fn accepts() {
        assert_accepts("feature flag enabled", "feature flag enabled for 100% of users");
        assert_accepts("shard 1 migrated", "shard 1 migrated. shard 2: 40% done");
    }
}
