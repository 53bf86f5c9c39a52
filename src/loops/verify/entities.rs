//! `guard:entities`: every number of the gate query must be in the memory.
//!
//! The trained verifier ([`super::model`]) reads meaning well and digits badly: WordPiece cuts
//! "#902" and "#920" into similar pieces, so "closed #920 as fixed" looks like an answer to
//! "issue #902 closed as fixed". This rule is the exact complement: it knows nothing of
//! meaning and compares numbers exactly. It is gentler than the guard's `identifier` rule
//! (which also requires names such as `E2E` or `PS5` and the kind word before a number), so
//! paraphrases keep passing: "EP03" answers "episode 3", "the 13B model" answers
//! "llama-13b", "second-quarter" answers "Q2", "five" answers "5".
//!
//! A query number is a run of ASCII digits, except one with a letter on both sides (`e2e`,
//! `k8s`: a name, not a number); a memory states it when one of the memory's digit
//! runs, or a number written as a word (zero to twenty, the tens, first to twelfth), has the
//! same value (leading zeros do not count). Extra numbers in the memory are fine.
//!
//! Months (`March`, `Sep`, `2024-03`) and deployment environments (`prod`, `production`,
//! `staging`, `dev`, `uat`, `sandbox`, `preprod`) are closed classes: a memory that names
//! one of the class, and none that the query names, speaks of another one ("period=2024-02" for
//! "March close done", "live in staging" for "deployed to production"). A memory that names
//! none of the class says nothing either way and is left to the model.

use super::number_words::{CARDINALS, ORDINALS};
use super::Refusal;

/// The distinct numbers of `text`'s digit runs, by value (leading zeros dropped), in order.
/// `names`: skip a run with a letter on both sides, which is part of a name rather than a
/// number (`e2e`, `k8s`, `i18n`), so that "end-to-end" can answer "e2e".
fn digit_runs(text: &str, names: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        let inside_name = start > 0 && chars[start - 1].is_alphabetic() && i < chars.len() && chars[i].is_alphabetic();
        if names && inside_name {
            continue;
        }
        let run: String = chars[start..i].iter().collect();
        let v = run.trim_start_matches('0');
        let v = if v.is_empty() { "0" } else { v };
        if !out.iter().any(|x| x == v) {
            out.push(v.to_string());
        }
    }
    out
}

/// The numbers a memory states: its digit runs and its number words.
fn stated(memory: &str) -> Vec<String> {
    let mut out = digit_runs(memory, false);
    let lower = memory.to_lowercase();
    for word in lower.split(|c: char| !c.is_alphabetic()) {
        if let Some((_, v)) = CARDINALS.iter().chain(ORDINALS).find(|(w, _)| *w == word) {
            out.push(v.to_string());
        }
    }
    out
}

const MONTHS: [&str; 12] =
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];

/// The months `text` names (1-12): month names, three-letter abbreviations other than the
/// everyday words "may" and "mar", "sept", and `YYYY-MM` / `YYYY/MM` dates.
fn months(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for w in text.split(|c: char| !c.is_alphabetic()).map(str::to_lowercase) {
        let full = MONTHS.iter().position(|m| *m == w);
        let short = if w.len() == 3 && w != "may" && w != "mar" { MONTHS.iter().position(|m| m.starts_with(w.as_str())) } else { None };
        let sept = (w == "sept").then_some(8);
        if let Some(i) = full.or(short).or(sept) {
            out.push(i as u32 + 1);
        }
    }
    let b = text.as_bytes();
    for i in 0..b.len().saturating_sub(6) {
        let year = b[i] == b'2' && b[i + 1] == b'0' && b[i..i + 4].iter().all(u8::is_ascii_digit);
        let before_ok = i == 0 || !b[i - 1].is_ascii_digit();
        let after_ok = b.get(i + 7).is_none_or(|c| !c.is_ascii_digit());
        if year && before_ok && after_ok && matches!(b[i + 4], b'-' | b'/' | b'.') && b[i + 5..i + 7].iter().all(u8::is_ascii_digit) {
            let m = u32::from(b[i + 5] - b'0') * 10 + u32::from(b[i + 6] - b'0');
            if (1..=12).contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

/// Deployment environments by their usual names. Not "stage" ("the canary stage passed") nor
/// "qa" (a team as often as a place): words with another everyday meaning would block true
/// signals.
const ENVIRONMENTS: &[(&str, &str)] = &[
    ("prod", "production"),
    ("production", "production"),
    ("prd", "production"),
    ("staging", "staging"),
    ("stg", "staging"),
    ("dev", "development"),
    ("development", "development"),
    ("uat", "uat"),
    ("sandbox", "sandbox"),
    ("preprod", "preprod"),
];

fn environments(text: &str) -> Vec<&'static str> {
    let lower = text.to_lowercase();
    lower.split(|c: char| !c.is_alphanumeric()).filter_map(|w| ENVIRONMENTS.iter().find(|(n, _)| *n == w).map(|(_, e)| *e)).collect()
}

/// The rule bound to one query.
#[derive(Debug, Clone)]
pub struct Entities {
    required: Vec<String>,
    months: Vec<u32>,
    environments: Vec<&'static str>,
}

impl Entities {
    pub fn new(query: &str) -> Entities {
        Entities { required: digit_runs(query, true), months: months(query), environments: environments(query) }
    }

    /// Accepts the memory, or names the first number it lacks, or the month or environment
    /// that replaces the query's.
    pub fn check(&self, memory: &str) -> Result<(), Refusal> {
        if !self.required.is_empty() {
            let have = stated(memory);
            if let Some(n) = self.required.iter().find(|n| !have.contains(n)) {
                return Err(Refusal { rule: "numbers".into(), reason: format!("does not mention the number {n}") });
            }
        }
        if !self.months.is_empty() {
            let said = months(memory);
            if !said.is_empty() && !said.iter().any(|m| self.months.contains(m)) {
                let name = |m: u32| MONTHS[m as usize - 1];
                return Err(Refusal { rule: "month".into(), reason: format!("speaks of {}, not {}", name(said[0]), name(self.months[0])) });
            }
        }
        if !self.environments.is_empty() {
            let said = environments(memory);
            if !said.is_empty() && !said.iter().any(|e| self.environments.contains(e)) {
                return Err(Refusal { rule: "environment".into(), reason: format!("speaks of {}, not {}", said[0], self.environments[0]) });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(query: &str, memory: &str) -> bool {
        Entities::new(query).check(memory).is_ok()
    }

    #[test]
    fn the_same_number_in_another_form_passes() {
        assert!(passes("final master for episode 3 exported", "EP03_FINAL.mov status=complete"));
        assert!(passes("llama-13b fine-tune finished", "the 13B model finished its fine-tune"));
        assert!(passes("Q2 report published", "the second-quarter report is out"));
        assert!(passes("6 new annotators onboarded", "all six annotators are onboarded"));
        assert!(passes("wire WT-77120 released", "wire 77120 gone, MT103 out at 11:02"));
        assert!(passes("Detox e2e suite green on build 311", "all end-to-end tests pass for 311"), "e2e is a name");
        assert!(passes("deploy finished", "the deploy of build 7 finished"), "a query without numbers needs none");
    }

    #[test]
    fn another_month_or_environment_is_refused_and_silence_is_left_to_the_model() {
        let e = Entities::new("March bank reconciliation complete");
        assert_eq!(e.check("recon=bank period=2024-02 status=complete").unwrap_err().rule, "month");
        assert!(e.check("recon=bank period=2024-03 status=complete").is_ok());
        assert!(e.check("bank reconciliation complete").is_ok());
        let d = Entities::new("storefront deployed to production");
        assert_eq!(d.check("storefront is live in staging").unwrap_err().rule, "environment");
        assert!(d.check("promoted from staging to prod, storefront live").is_ok());
        assert!(d.check("kubectl -n prod rollout status deploy/storefront: successfully rolled out").is_ok());
        assert!(d.check("storefront deployed, all pods healthy").is_ok());
    }

    #[test]
    fn another_number_is_refused_naming_the_missing_one() {
        let r = Entities::new("issue #902 closed as fixed").check("closed #920 as fixed").unwrap_err();
        assert_eq!(r.rule, "numbers");
        assert!(r.reason.contains("902"), "{}", r.reason);
        assert!(!passes("v5.0 tagged", "v5.1 tagged"));
        assert!(!passes("PR 42 approved", "PR 420 approved"));
        assert!(!passes("build 7 deployed", "build 17 deployed"));
        assert!(!passes("Q2 report published", "Q3 report published"));
    }
}
