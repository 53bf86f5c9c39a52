//! The polarity rules: where a text states an outcome class ([`Class`]). [`RULES`] is the
//! ordered table; [`Scan`] walks a text's words and, at each word that is not quiet
//! ([`super::scope`]) and not inside a conditional ("if anything breaks"), asks the rules in
//! order and keeps the first hit. A question mark states [`Class::Uncertain`] over the words
//! before it. Each rule lives in its own file, with its tests.

mod fraction;
mod lexicon;
mod modal;
mod negation;
mod only_some;
mod percent;
mod progressive;
mod remaining;
mod status;
mod still;

use super::class::Class;
use super::lexicon::Lists;
use super::scope::Quiet;
use super::tokens::{Text, TokKind};

/// Tokens `a..=b` of a text state something of `class`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hit {
    pub class: Class,
    pub a: usize,
    pub b: usize,
}

/// One polarity rule: given a text, its quiet words and a word position, whether an outcome
/// is stated starting there.
pub(super) trait Rule: Sync {
    /// Its name in the docs, the tests and trace logs (`negation`, `status`, ...). The
    /// rejection's rule name is the class's ([`Class::rule`]): several rules state one class.
    fn name(&self) -> &'static str;
    fn at(&self, t: &Text, j: usize, quiet: &Quiet) -> Option<Hit>;
}

/// The rules, in the order they are tried at each word.
pub(super) const RULES: &[&dyn Rule] = &[
    &negation::Negation,
    &status::Status,
    &still::Still,
    &fraction::Fraction,
    &percent::Percent,
    &remaining::Remaining,
    &only_some::OnlySome,
    &progressive::Progressive,
    &modal::Modal,
    &lexicon::Lexicon,
];

/// The polarity rules' names, in table order.
pub(super) fn names() -> impl Iterator<Item = &'static str> {
    RULES.iter().map(|r| r.name())
}

/// An outcome stated in a text.
pub(super) struct Marker {
    pub class: Class,
    pub a: usize,
    pub b: usize,
    /// Inside "if ...", "unless ...": hypothetical, states nothing.
    pub conditional: bool,
}

/// Every outcome a text states, in order.
pub(super) struct Scan {
    pub markers: Vec<Marker>,
}

impl Scan {
    pub(super) fn new(t: &Text) -> Scan {
        Scan::with(t, RULES, true)
    }

    /// The scan without the rule named `skip` (a polarity rule's name, or `question`), to
    /// measure what that rule adds.
    pub(super) fn without(t: &Text, skip: &str) -> Scan {
        let rules: Vec<&dyn Rule> = RULES.iter().copied().filter(|r| r.name() != skip).collect();
        Scan::with(t, &rules, skip != "question")
    }

    /// The scan with only `rules` (a rule's tests run it alone), and question marks read as
    /// uncertainty when `questions`.
    #[inline(always)]
    fn with(t: &Text, rules: &[&dyn Rule], questions: bool) -> Scan {
        let n = t.len();
        let quiet = Quiet::of(t);
        let mut markers = Vec::new();
        let mut cond = false;
        let mut j = 0;
        while j < n {
            let kind = t.toks[j].kind;
            if kind != TokKind::Word {
                if kind == TokKind::Question && questions {
                    // A question asks; it does not state.
                    let mut a = j;
                    while a > 0 && t.is_word(a - 1) && j - a < 4 {
                        a -= 1;
                    }
                    markers.push(Marker { class: Class::Uncertain, a, b: j, conditional: false });
                }
                if kind != TokKind::Percent {
                    cond = false;
                }
                j += 1;
                continue;
            }
            if quiet.at(j) {
                j += 1;
                continue;
            }
            if t.is(j, Lists::CONDITIONAL) || (t.w(j) == "in" && t.w(j + 1) == "case") {
                cond = true;
                j += 1;
                continue;
            }
            if let Some((rule, hit)) = rules.iter().find_map(|r| r.at(t, j, &quiet).map(|h| (r, h))) {
                tracing::trace!(rule = rule.name(), class = ?hit.class, words = t.quote(hit.a, hit.b), conditional = cond, "guard: an outcome");
                markers.push(Marker { class: hit.class, a: hit.a, b: hit.b, conditional: cond });
                j = hit.b.max(j) + 1;
                continue;
            }
            j += 1;
        }
        Scan { markers }
    }
}

/// Helpers for the rules' tests.
#[cfg(test)]
pub(super) mod testing {
    use super::super::tokens::tokenize;
    use super::super::Guard;
    use super::*;

    /// What `rule` alone finds in `text`, as (class, quoted words), questions excluded.
    pub fn fires(rule: &dyn Rule, text: &str) -> Vec<(Class, String)> {
        let t = tokenize(text);
        Scan::with(&t, &[rule], true)
            .markers
            .iter()
            .filter(|m| t.kind(m.b) != Some(TokKind::Question))
            .map(|m| (m.class, t.quote(m.a, m.b).to_string()))
            .collect()
    }

    /// The whole guard's verdict: `None` accepts, else the rejection's rule name.
    pub fn verdict(query: &str, memory: &str) -> Option<&'static str> {
        Guard::new(query).check(memory).err().map(|r| r.rule)
    }

    pub fn assert_rejects(query: &str, memory: &str, rule: &str) {
        assert_eq!(verdict(query, memory), Some(rule), "{query:?} vs {memory:?}");
    }

    pub fn assert_accepts(query: &str, memory: &str) {
        assert_eq!(verdict(query, memory), None, "{query:?} vs {memory:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::tokens::tokenize;
    use super::*;

    #[test]
    fn rule_names_are_unique() {
        let mut names: Vec<&str> = RULES.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
    }

    #[test]
    fn questions_and_conditionals_state_nothing() {
        let t = tokenize("did the deploy fail? if it breaks, call me");
        let s = Scan::new(&t);
        let got: Vec<(Class, bool)> = s.markers.iter().map(|m| (m.class, m.conditional)).collect();
        // "fail" inside the question is still found (a question also asks), "breaks" is no
        // marker, the question itself is uncertain.
        assert!(got.contains(&(Class::Uncertain, false)), "{got:?}");
        let t = tokenize("ping me in case anything failed");
        assert!(Scan::new(&t).markers.iter().all(|m| m.conditional));
        // A clause mark ends the condition; a percent sign does not.
        let t = tokenize("if 40% fail, stop. it failed");
        let s = Scan::new(&t);
        assert_eq!(s.markers.iter().map(|m| m.conditional).collect::<Vec<_>>(), [true, false]);
    }
}
