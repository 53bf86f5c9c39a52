//! `guard`: the built-in, deterministic verifier of the loop gate.
//!
//! The gate finds candidates by embedding cosine, which measures topic, not truth: "review of
//! PR #42: NOT approved" is close to "PR #42 approved". `guard` is a second stage with no
//! model: given the gate query and one candidate memory it accepts, or rejects with a reason
//! that the lap detail quotes (`#17 scored 0.77 but says "NOT approved" (polarity:negation)`).
//! It is fast (a few microseconds), explainable and the same on every host. The default chain
//! uses the trained verifier ([`super::model`]) and [`super::entities`] instead; `guard` is for
//! who asks for it (`--gate-verify guard`, or `guard:identifier` for its first rule alone).
//!
//! How it decides, in order:
//! 1. `identifier`: every number and identifier of the query is in the memory (and the
//!    clauses that name only *another* identifier of its kind are noted);
//! 2. `scope`: the words that state no outcome are marked quiet (double negatives, fixes,
//!    history, idioms);
//! 3. `rules`: the polarity rules, an ordered table, find where the memory states an outcome
//!    class (`class`: negation, failure, refusal, partial, pending, planned, reverted,
//!    unpaid, uncertain); a class the query does not state rejects (`polarity:<class>`),
//!    unless it is conditional, in a clause about another identifier, or the query's own
//!    subject ("flaky test" in "flaky test fixed");
//! 4. `polarity:unstated`: a query that states a negative outcome ("deploy failed") rejects a
//!    memory that states none.
//!
//! The words the rules consult are data, in `lexicon`; `tokens` splits a text into words
//! and looks each up once; `numbers` reads numbers and their kinds.

mod class;
mod identifier;
mod lexicon;
mod numbers;
mod rules;
mod scope;
mod tokens;

use class::{Class, Classes};
use identifier::{About, Req};
use lexicon::Lists;
use rules::Scan;
use tokens::tokenize;

/// A compiled query: parse the query once per run, check many candidates.
pub struct Guard {
    reqs: Vec<Req>,
    /// Classes the query itself states (uncertainty excluded: a question asks, it does not state).
    asked: Classes,
    /// `asked` widened by each class's family.
    allowed: Classes,
    /// The query's own words for its first stated class, for `polarity:unstated`.
    asked_quote: String,
    /// (marker word, next word) pairs of the query: "flaky test" names a subject, not an outcome.
    topic: Vec<(String, String)>,
    /// First five letters of the query's longer words: "refunded" is topic for "refund processed".
    stems: Vec<String>,
    /// A rule left out ([`Guard::without`]); `None` in the product.
    skip: Option<&'static str>,
}

/// Why a candidate was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The rule's short stable name: `identifier`, `polarity:<class>` or `polarity:unstated`.
    pub rule: &'static str,
    /// What the candidate says, quoted, for the lap detail: `says "NOT approved"`.
    pub reason: String,
}

/// The polarity scan, without the rule `skip` when measuring.
#[inline]
fn scan(t: &tokens::Text, skip: Option<&str>) -> Scan {
    match skip {
        Some(rule) => Scan::without(t, rule),
        None => Scan::new(t),
    }
}

/// The first five characters of a word of at least five letters, as a cheap stem.
fn stem(w: &str) -> Option<&str> {
    let (k, _) = w.char_indices().nth(4)?;
    let end = k + w[k..].chars().next().map_or(0, char::len_utf8);
    (w.len() > end || w.chars().count() == 5).then(|| &w[..end]).filter(|_| w.chars().all(char::is_alphabetic))
}

impl Guard {
    /// Compiles the query: its required identifiers and the outcome classes it states.
    pub fn new(query: &str) -> Guard {
        Guard::compile(query, None)
    }

    /// The rules [`Guard::without`] can leave out, in the order they apply: `identifier`,
    /// the polarity rules of the table, `question` (a question mark reads as uncertain) and
    /// `unstated` (a query stating an outcome needs a memory that states it).
    pub fn rule_names() -> Vec<&'static str> {
        std::iter::once("identifier").chain(rules::names()).chain(["question", "unstated"]).collect()
    }

    /// The guard without one of its rules ([`Guard::rule_names`]), to measure what the rule
    /// adds (an unknown name leaves everything in). Never used by a gate.
    pub fn without(query: &str, rule: &str) -> Guard {
        let skip = Guard::rule_names().into_iter().find(|n| *n == rule);
        Guard::compile(query, skip)
    }

    #[inline(always)]
    fn compile(query: &str, skip: Option<&'static str>) -> Guard {
        let t = tokenize(query);
        let reqs = identifier::required(&t);
        let mut asked = Classes::default();
        let mut asked_quote = String::new();
        for m in &scan(&t, skip).markers {
            if m.class != Class::Uncertain && !m.conditional {
                if asked.is_empty() {
                    asked_quote = t.quote(m.a, m.b).to_string();
                }
                asked = asked.with(m.class);
            }
        }
        let mut topic = Vec::new();
        for i in 0..t.len() {
            if t.is_word(i + 1) && (t.entry(i).marker.is_some() || t.is(i, Lists::PROBLEM_NOUN)) {
                topic.push((t.w(i).to_string(), t.w(i + 1).to_string()));
            }
        }
        let mut stems: Vec<String> = Vec::new();
        for i in 0..t.len() {
            if let Some(st) = stem(t.w(i)) {
                if !stems.iter().any(|x| x == st) {
                    stems.push(st.to_string());
                }
            }
        }
        Guard { reqs, asked, allowed: asked.widened(), asked_quote, topic, stems, skip }
    }

    /// The identifiers the query requires, normalised, for display/debugging.
    pub fn required(&self) -> Vec<String> {
        self.reqs.iter().map(identifier::describe).collect()
    }

    /// Accepts `memory`, or says which rule rejects it and quotes the words that did.
    pub fn check(&self, memory: &str) -> Result<(), Rejection> {
        self.check_rules(memory, false)
    }

    /// Only the identifier rule (`guard:identifier`).
    pub fn check_identifiers(&self, memory: &str) -> Result<(), Rejection> {
        self.check_rules(memory, true)
    }

    fn check_rules(&self, memory: &str, identifiers_only: bool) -> Result<(), Rejection> {
        let t = tokenize(memory);
        let clauses = t.clauses();
        let about = match self.skip {
            Some("identifier") => identifier::check(&[], &t, &clauses)?,
            _ => identifier::check(&self.reqs, &t, &clauses)?,
        };
        if identifiers_only {
            return Ok(());
        }
        let mut stated = false;
        for m in &scan(&t, self.skip).markers {
            if m.conditional || about.get(clauses[m.a]) == Some(&About::Other) {
                continue;
            }
            if self.allowed.contains(m.class) {
                stated = true;
                continue;
            }
            // The query's own subject ("flaky test", "refund") is topic, not outcome.
            if m.a == m.b && self.topic.iter().any(|(a, b)| a == t.w(m.a) && b == t.w(m.a + 1)) {
                continue;
            }
            if m.a == m.b && stem(t.w(m.a)).is_some_and(|st| self.stems.iter().any(|x| x == st)) {
                continue;
            }
            return Err(Rejection { rule: m.class.rule(), reason: format!("says \"{}\"", t.quote(m.a, m.b)) });
        }
        if !self.asked.is_empty() && !stated && self.skip != Some("unstated") {
            return Err(Rejection { rule: "polarity:unstated", reason: format!("does not say \"{}\"", self.asked_quote) });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tab-separated rows with a header naming query, memory and label (or should_pass), as
    /// `slm gate eval` reads them; `set` keeps the rows of that `category`.
    fn table(text: &str, set: Option<&str>) -> Vec<(String, String, bool)> {
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
        let col = |name: &str| head.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
        let (q, m) = (col("query"), col("memory"));
        let l = head.iter().position(|h| *h == "should_pass" || *h == "label").expect("a label column");
        let s = head.iter().position(|h| *h == "category");
        lines
            .filter(|line| !line.is_empty())
            .map(|line| line.split('\t').collect::<Vec<_>>())
            .filter(|f| set.is_none_or(|want| s.is_some_and(|i| f[i] == want)))
            .map(|f| (f[q].to_string(), f[m].to_string(), f[l] == "1"))
            .collect()
    }

    const DEV: &str = include_str!("../../../../tests/data/gate-dev.tsv");
    const CASES: &str = include_str!("../../../../tests/data/guard-cases.tsv");

    fn run(rows: &[(String, String, bool)]) -> (usize, Vec<String>) {
        let mut right = 0;
        let mut wrong = Vec::new();
        for (q, m, want) in rows {
            let got = Guard::new(q).check(m);
            if got.is_ok() == *want {
                right += 1;
            } else {
                wrong.push(format!("{q:?} vs {m:?}: want {want}, got {got:?}"));
            }
        }
        (right, wrong)
    }

    #[test]
    fn dev_set() {
        let rows = table(DEV, None);
        assert_eq!(rows.len(), 25);
        let (right, wrong) = run(&rows);
        assert!(wrong.is_empty(), "{right}/{} right:\n{}", rows.len(), wrong.join("\n"));
    }

    /// Cases written before the rules were tuned; the rules were then tuned against these,
    /// and the rules added after the blind run, each with a case of its own.
    #[test]
    fn tuned_cases() {
        for set in ["tuned", "rule_example"] {
            let rows = table(CASES, Some(set));
            assert!(rows.len() > 10, "{set}");
            let (right, wrong) = run(&rows);
            assert!(wrong.is_empty(), "{set}: {right}/{} right:\n{}", rows.len(), wrong.join("\n"));
        }
    }

    /// Held out: written with the tuned cases, never looked at while tuning; reports its
    /// score and asserts only a floor, so that it stays honest.
    #[test]
    fn held_out_cases() {
        let rows = table(CASES, Some("held_out"));
        let (right, wrong) = run(&rows);
        println!("held out: {right}/{} right", rows.len());
        for w in &wrong {
            println!("  miss: {w}");
        }
        assert!(rows.len() == 42 && right * 10 >= rows.len() * 7, "held out {right}/{}", rows.len());
    }

    /// Blind: written after the first version passed everything else, scored once before any
    /// further change.
    #[test]
    fn blind_cases() {
        let rows = table(CASES, Some("blind"));
        let (right, wrong) = run(&rows);
        println!("blind: {right}/{} right", rows.len());
        for w in &wrong {
            println!("  miss: {w}");
        }
        assert!(rows.len() == 43 && right + 1 >= rows.len(), "blind {right}/{}", rows.len());
    }

    #[test]
    fn reasons_read_well() {
        let g = Guard::new("PR #42 approved");
        assert_eq!(g.required(), vec!["pr 42".to_string()]);
        let r = g.check("review of PR #42: NOT approved, changes requested").unwrap_err();
        assert_eq!((r.rule, r.reason.as_str()), ("polarity:negation", "says \"NOT approved\""));
        let r = g.check("PR #420 approved").unwrap_err();
        assert_eq!((r.rule, r.reason.as_str()), ("identifier", "does not mention PR #42"));
        let r = Guard::new("deploy failed").check("the deploy of build 9 succeeded").unwrap_err();
        assert_eq!((r.rule, r.reason.as_str()), ("polarity:unstated", "does not say \"failed\""));
        // guard:identifier sees only the identifier.
        assert!(g.check_identifiers("PR #42: NOT approved").is_ok());
    }

    #[test]
    fn topic_words_are_no_outcome() {
        // The query's subject: a marker followed by the same word, or the same stem.
        assert!(Guard::new("flaky test quarantined").check("the flaky test is quarantined").is_ok());
        assert!(Guard::new("customer refund processed").check("the customer was refunded in full").is_ok());
        assert!(Guard::new("test quarantined").check("the flaky test is quarantined").is_err());
    }

    #[test]
    fn never_panics() {
        let odd = [
            "",
            " ",
            "#",
            "##42",
            "v",
            "v.",
            "1,",
            "1,0000",
            ",123",
            "no.",
            "no",
            "not",
            "'ll",
            "n't",
            "\u{130}\u{130}n't",
            "\u{1F600}#42\u{1F600}",
            "\u{0301}x",
            "%",
            "?",
            "??",
            "99.9.9%",
            "1/0",
            "0/0 of 0",
            "k8s",
            "a1b",
            "pr-",
            "-42",
            "--",
            "release/",
            "/2.4",
            "\u{2019}ll",
            "é.ç/ü_ß",
            "18446744073709551616 of 99999999999999999999",
            "may",
            "May",
            "still",
            "is",
            "due",
        ];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let alphabet: Vec<char> = "aNoT #42.-/_,%?:;'\u{2019}0v9 \n\u{e9}\u{130}\u{1F600}failednt".chars().collect();
        let mut inputs: Vec<String> = odd.iter().map(|s| s.to_string()).collect();
        for _ in 0..2000 {
            let len = (next() % 40) as usize;
            inputs.push((0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect());
        }
        inputs.push("not approved #42 ".repeat(20_000));
        inputs.push("x".repeat(300_000));
        for q in inputs.iter().step_by(7) {
            let g = Guard::new(q);
            let _ = g.required();
            for m in inputs.iter().step_by(13) {
                let _ = g.check(m);
            }
        }
    }
}
