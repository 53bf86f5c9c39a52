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
//! same value (leading zeros do not count). Extra numbers in the memory are fine. A number
//! with thousands separators ("40,000") is one number, met by the memory's "40000", "40,000",
//! "40k", "40 thousand" or "forty-thousand" (the sibling module `numerals` reads scales,
//! several-word numbers and "Phase II"), or by its groups each stated ("101 and 102" for
//! "101,102"). Digit groups joined by dashes ("7720-416", "112-4457781-3", five digits or more)
//! are one identifier, met by its groups, by them run together ("7720416") or by its tail
//! without a shorter leading group ("4457781-3"), never by one group alone. A year is also met
//! by its short form ("calendar '24").
//!
//! A query number that follows a comparison ("above 90", "at least 400", "under 200 ms",
//! "within 5 minutes", "> 0.9") is a bound, not an identifier: a memory meets it when it states
//! the number itself or any number on the bound's side ("perf 94" for "lighthouse score above
//! 90"). Whether the memory's number is the measure the query means is left to the model.
//!
//! A quarter ("Q2") is also met by months inside it alone ("April–June"), and a cloud region's
//! code ("us-east-1") by its place ("US East (N. Virginia)"; the table is the sibling module
//! `regions`), not by a stray "2" or "1".
//!
//! Months (`March`, `Sep`, `2024-03`) and deployment environments (`prod`, `production`,
//! `staging`, `dev`, `uat`, `sandbox`, `preprod`) are closed classes: a memory that names
//! one of the class, and none that the query names, speaks of another one ("period=2024-02" for
//! "March close done", "live in staging" for "deployed to production"). A memory that names
//! none of the class says nothing either way and is left to the model.
//!
//! A query number with a label before it ("semester 2", "batch 7") is refused by a memory that
//! gives that label only other numbers ("semester 1"), though the "2" turns up elsewhere in it
//! (the sibling module `labels`).
//!
//! A query word the memory writes only with the prefix `un-` ("unpaid" for "paid") is refused
//! unless the memory negates something (the sibling module `negated`).
//!
//! Names the numbers rule cannot compare (`core-sw1`, `rack B4`, `Calloway Tower`) are checked
//! for near twins by the sibling module `lookalike`: a memory that leaves a query name out and names a
//! look-alike of it instead ("Galloway Tower") is refused.

use super::labels::{self, Labelled};
use super::lookalike::Lookalikes;
use super::negated::Negated;
use super::number_words::{CARDINALS, ORDINALS};
use super::numerals::{self, value};
use super::regions::{self, Region};
use super::Refusal;

/// A number of the query that the memory must state: its value, and for a value written with
/// thousands separators ("40,000"; also a list such as "101,102") or an identifier of
/// dash-joined digit groups ("7720-416", "112-4457781-3") its groups, which the memory may
/// state instead ("101 and 102"). An identifier is also met by its groups run together
/// ("7720416") and by its tail without leading groups shorter than the rest ("4457781-3": a
/// filer code left off), never by one group alone.
#[derive(Debug, Clone, PartialEq)]
struct Need {
    value: String,
    groups: Vec<String>,
    /// Other values that meet it: an identifier's tails run together.
    also: Vec<String>,
    /// As the refusal names it: the value, or the identifier as written.
    shown: String,
}

impl Need {
    fn met_by(&self, have: &[String]) -> bool {
        have.contains(&self.value)
            || self.also.iter().any(|v| have.contains(v))
            || (!self.groups.is_empty() && self.groups.iter().all(|g| have.contains(g)))
    }

    fn single(digits: &str) -> Need {
        let v = value(digits);
        Need { shown: v.clone(), value: v, groups: Vec::new(), also: Vec::new() }
    }
}

/// Digits an identifier of dash-joined groups needs before it counts as one ("7720-416"):
/// shorter runs are ranges and dates ("1-5", "10-20", "3-4"), whose run-together value ("15")
/// would meet a number they do not say.
const DASHED_MIN_DIGITS: usize = 5;

/// The distinct numbers of `text`'s digit runs, by value (leading zeros dropped), in order; a
/// run may carry thousands separators ("40,000": one number, groups 40 and 0) or join digit
/// groups with dashes ("7720-416", one identifier when it has [`DASHED_MIN_DIGITS`] digits,
/// else each group a number of its own).
/// `names`: skip a run with a letter on both sides, which is part of a name rather than a
/// number (`e2e`, `k8s`, `i18n`), so that "end-to-end" can answer "e2e".
fn digit_runs(text: &str, names: bool) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    let mut push = |need: Need| {
        if !out.contains(&need) {
            out.push(need);
        }
    };
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let mut groups = vec![String::new()];
        let mut dashed = false;
        loop {
            while i < chars.len() && chars[i].is_ascii_digit() {
                groups.last_mut().expect("one group at least").push(chars[i]);
                i += 1;
            }
            // ",ddd" and then no digit: a thousands separator.
            let separator = chars.get(i) == Some(&',')
                && chars.get(i + 1..i + 4).is_some_and(|g| g.iter().all(char::is_ascii_digit))
                && chars.get(i + 4).is_none_or(|c| !c.is_ascii_digit());
            // "-d": a dash between digit groups.
            let dash = chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if !(separator || dash) {
                break;
            }
            dashed |= dash;
            groups.push(String::new());
            i += 1;
        }
        let inside_name = start > 0 && chars[start - 1].is_alphabetic() && i < chars.len() && chars[i].is_alphabetic();
        if names && inside_name {
            continue;
        }
        let digits = groups.concat();
        if groups.len() == 1 {
            push(Need::single(&digits));
        } else if dashed && digits.len() < DASHED_MIN_DIGITS {
            groups.iter().for_each(|g| push(Need::single(g)));
        } else {
            // Tails that leave off leading groups shorter than what they keep, two groups at
            // least: "4457781-3" for "112-4457781-3", not "3".
            let also = (1..groups.len().saturating_sub(1))
                .filter(|&k| groups[..k].concat().len() < groups[k..].concat().len())
                .map(|k| value(&groups[k..].concat()))
                .collect();
            let shown = if dashed { groups.join("-") } else { value(&digits) };
            push(Need { value: value(&digits), groups: groups.iter().map(|g| value(g)).collect(), also, shown });
        }
    }
    out
}

/// Which side of a bound a memory's number must be on. The bound's own value always meets it
/// (a memory that repeats the number is left to the model), so "above 90" and "at least 90"
/// read alike here.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    Above,
    Below,
}

/// Comparison words and signs, as the lower-cased text before a number ends. Longest first, so
/// "no more than" is read before "more than".
const BOUNDS: &[(&str, Side)] = &[
    ("no more than", Side::Below),
    ("no less than", Side::Above),
    ("greater than", Side::Above),
    ("higher than", Side::Above),
    ("more than", Side::Above),
    ("at least", Side::Above),
    ("less than", Side::Below),
    ("lower than", Side::Below),
    ("fewer than", Side::Below),
    ("at most", Side::Below),
    ("exceeds", Side::Above),
    ("above", Side::Above),
    ("over", Side::Above),
    ("below", Side::Below),
    ("under", Side::Below),
    ("within", Side::Below),
    (">=", Side::Above),
    ("≥", Side::Above),
    ("<=", Side::Below),
    ("≤", Side::Below),
    (">", Side::Above),
    ("<", Side::Below),
];

/// The bound a number is, from the text just before it (`None`: an identifier).
fn bound_before(before: &str) -> Option<Side> {
    let lower = before.to_lowercase();
    let tail = lower.trim_end();
    BOUNDS.iter().find_map(|(word, side)| {
        let rest = tail.strip_suffix(word)?;
        // A whole word: "clover 4" is not "over 4".
        let whole = word.chars().all(char::is_alphabetic).then(|| rest.chars().last().is_none_or(|c| !c.is_alphanumeric()));
        whole.unwrap_or(true).then_some(*side)
    })
}

/// A number of the query that is a bound, with the value the memory's numbers are held to.
#[derive(Debug, Clone)]
struct Bound {
    span: (usize, usize),
    digits: String,
    value: f64,
    side: Side,
}

impl Bound {
    fn met_by(&self, n: f64) -> bool {
        match self.side {
            Side::Above => n >= self.value,
            Side::Below => n <= self.value,
        }
    }
}

/// The query's bounds: every number (digits, an optional decimal part) after a comparison.
fn bounds(query: &str) -> Vec<Bound> {
    numbers(query)
        .into_iter()
        .filter_map(|(start, end, text)| {
            Some(Bound { side: bound_before(&query[..start])?, value: text.parse().ok()?, span: (start, end), digits: text })
        })
        .collect()
}

/// Every number of `text` with its byte range: digits with an optional decimal part
/// ("0.92", "1,204" read as 1204), except digits that follow a letter (a name's).
fn numbers(text: &str) -> Vec<(usize, usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let mut digits = String::new();
        while i < b.len() {
            let thousands = b[i] == b','
                && i + 3 < b.len()
                && b[i + 1..i + 4].iter().all(u8::is_ascii_digit)
                && b.get(i + 4).is_none_or(|c| !c.is_ascii_digit());
            if b[i].is_ascii_digit() {
                digits.push(b[i] as char);
            } else if thousands {
                // skip the separator
            } else if b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit) && !digits.contains('.') {
                digits.push('.');
            } else {
                break;
            }
            i += 1;
        }
        // Digits glued to a letter before them are part of a name ("p95", "v2", "h100").
        if start == 0 || !text[..start].chars().next_back().is_some_and(char::is_alphabetic) {
            out.push((start, i, digits));
        }
    }
    out
}

/// The numbers a memory states: its digit runs (a run with thousands separators both whole
/// and by its groups), its number words, and the numbers [`numerals`] reads (with a scale,
/// in several words, roman).
fn stated(memory: &str) -> Vec<String> {
    let mut out = Vec::new();
    for need in digit_runs(memory, false) {
        out.extend(need.groups);
        out.push(need.value);
    }
    out.extend(number_words(memory).map(|v| v.to_string()));
    out.extend(numerals::values(memory).into_iter().map(|v| v.to_string()));
    out.extend(short_years(memory));
    out
}

/// The years a memory writes with an apostrophe and two digits ("calendar '24", "Mar ’25"):
/// 2000 to 2099. The digits themselves are already a number of the memory.
fn short_years(memory: &str) -> Vec<String> {
    let chars: Vec<char> = memory.chars().collect();
    let mut out = Vec::new();
    for i in 0..chars.len() {
        let apostrophe = matches!(chars[i], '\'' | '’');
        let after = chars.get(i + 1..i + 3).is_some_and(|d| d.iter().all(char::is_ascii_digit));
        let alone = chars.get(i + 3).is_none_or(|c| !c.is_alphanumeric());
        let before = i == 0 || !chars[i - 1].is_alphanumeric();
        if apostrophe && after && alone && before {
            out.push(format!("20{}{}", chars[i + 1], chars[i + 2]));
        }
    }
    out
}

/// The values of the number words of `text` (zero to twenty, the tens, first to twelfth).
fn number_words(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.split(|c: char| !c.is_alphabetic())
        .filter_map(|word| CARDINALS.iter().chain(ORDINALS).find(|(w, _)| w.eq_ignore_ascii_case(word)).map(|(_, v)| *v))
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

/// A quarter the query names ("Q2", "2024-Q2"): its number, and the span of the "Q2".
#[derive(Debug, Clone)]
struct Quarter {
    span: (usize, usize),
    n: u32,
}

impl Quarter {
    /// The memory states the quarter's number (as digits or a word: "Q2", "second-quarter"),
    /// or names only months inside the quarter ("April–June", "Apr-Jun").
    /// `have` is [`stated`]`(memory)`, computed once per memory by the caller.
    fn stated_by(&self, have: &[String], memory: &str) -> bool {
        if have.contains(&self.n.to_string()) {
            return true;
        }
        let said = months(memory);
        let inside = |m: &u32| (self.n * 3 - 2..=self.n * 3).contains(m);
        !said.is_empty() && said.iter().all(inside)
    }
}

/// The quarters of `text`: a `Q` and one digit 1-4, standing alone ("Q2", "q3", "FY24-Q1").
fn quarters(text: &str) -> Vec<Quarter> {
    let b = text.as_bytes();
    let alone = |i: usize| b.get(i).is_none_or(|c| !c.is_ascii_alphanumeric());
    (0..b.len().saturating_sub(1))
        .filter(|&i| matches!(b[i], b'Q' | b'q') && (i == 0 || !b[i - 1].is_ascii_alphanumeric()))
        .filter(|&i| matches!(b[i + 1], b'1'..=b'4') && alone(i + 2))
        .map(|i| Quarter { span: (i, i + 2), n: u32::from(b[i + 1] - b'0') })
        .collect()
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
    required: Vec<Need>,
    labelled: Vec<Labelled>,
    quarters: Vec<Quarter>,
    regions: Vec<Region>,
    bounds: Vec<Bound>,
    months: Vec<u32>,
    environments: Vec<&'static str>,
    lookalikes: Lookalikes,
    negated: Negated,
}

impl Entities {
    pub fn new(query: &str) -> Entities {
        let bounds = bounds(query);
        let quarters = quarters(query);
        let regions = regions::in_query(query);
        // A bound's, a quarter's and a region's digits are not required as such (each has its
        // own test below): the numbers left are the identifiers, and only they have labels.
        let mut rest = query.to_string();
        let spans = bounds.iter().map(|b| b.span).chain(quarters.iter().map(|q| q.span)).chain(regions.iter().map(|r| r.span));
        for (start, end) in spans {
            rest.replace_range(start..end, &" ".repeat(end - start));
        }
        let required = digit_runs(&rest, true);
        Entities {
            required,
            labelled: labels::in_query(&rest),
            quarters,
            regions,
            bounds,
            months: months(query),
            environments: environments(query),
            lookalikes: Lookalikes::new(query),
            negated: Negated::new(query),
        }
    }

    /// Accepts the memory, or names the first number it lacks, or the month, environment or
    /// look-alike name that replaces the query's.
    pub fn check(&self, memory: &str) -> Result<(), Refusal> {
        // The numbers the memory states, read once for the numbers and the quarters.
        let have = if self.required.is_empty() && self.quarters.is_empty() { Vec::new() } else { stated(memory) };
        if !self.required.is_empty() {
            if let Some(n) = self.required.iter().find(|n| !n.met_by(&have)) {
                return Err(Refusal { rule: "numbers".into(), reason: format!("does not mention the number {}", n.shown) });
            }
        }
        if let Some((l, other)) = labels::contradicted(&self.labelled, memory) {
            let reason = format!("speaks of {} {other}, not {} {}", l.label, l.label, l.value);
            return Err(Refusal { rule: "numbers".into(), reason });
        }
        if let Some(q) = self.quarters.iter().find(|q| !q.stated_by(&have, memory)) {
            return Err(Refusal { rule: "numbers".into(), reason: format!("does not mention the quarter Q{} or its months", q.n) });
        }
        if let Some(r) = self.regions.iter().find(|r| !r.named_by(memory)) {
            return Err(Refusal { rule: "region".into(), reason: format!("does not name the region {} ({})", r.code, r.place()) });
        }
        if !self.bounds.is_empty() {
            let said: Vec<f64> = numbers(memory).into_iter().filter_map(|(_, _, n)| n.parse().ok()).collect();
            let words: Vec<f64> = number_words(memory).map(f64::from).collect();
            if let Some(b) = self.bounds.iter().find(|b| !said.iter().chain(&words).any(|&n| b.met_by(n))) {
                let side = match b.side {
                    Side::Above => "above",
                    Side::Below => "below",
                };
                return Err(Refusal { rule: "numbers".into(), reason: format!("states no number {side} {} or equal to it", b.digits) });
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
        if let Some((name, twin)) = self.lookalikes.check(memory) {
            return Err(Refusal { rule: "name".into(), reason: format!("names {twin}, not {name}") });
        }
        if let Some((word, un)) = self.negated.check(memory) {
            return Err(Refusal { rule: "negated".into(), reason: format!("says {un}, not {word}") });
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
    fn a_dashed_identifier_is_met_run_together_or_without_a_short_prefix() {
        let q = "Customs entry 112-4457781-3 released";
        assert!(passes(q, "ACE entry=11244577813 disposition=RELEASED"));
        assert!(passes(q, "FYI ent 4457781-3 CBP rls rcvd, pls dispatch."), "the filer code left off");
        assert!(passes(q, "entry 1124457781-3 got its release"));
        assert!(!passes(q, "entry 112-4457781-4 released"), "another last group");
        assert!(!passes(q, "entry 113-4457781-3 released"), "another filer code");
        assert!(!passes(q, "entry 3 released"), "one group alone");
        assert!(passes("loan modification 7720-416 trial complete", "loan 7720416, trial complete"));
        assert!(passes("appeal on parcel 09-118-22 decided", "BOR ruling in on 0911822"));
        assert!(!passes("appeal on parcel 09-118-22 decided", "ruling in on parcel 09-118-23"));
        assert!(!passes("shard 15 rebuilt", "shards 1-5 rebuilt"), "a range is not run together");
        assert!(!passes("report for 2024-03-15 sent", "report for 2023-03-15 sent"), "a date keeps its year");
    }

    #[test]
    fn a_year_is_met_by_its_short_form() {
        assert!(passes("2024 mortgage interest statement sent", "the interest statement for calendar '24 went out"));
        assert!(passes("FY2025 budget approved", "budget for Mar ’25 onward approved"));
        assert!(!passes("2024 mortgage interest statement sent", "the '23 statement went out"));
        assert!(!passes("2024 statement sent", "rock'24 statement"), "an apostrophe inside a word");
    }

    #[test]
    fn a_number_with_separators_or_a_scale_is_one_number() {
        let q = "12,500 welcome packs printed";
        assert!(passes(q, "all 12.5k welcome packs are off the press"));
        assert!(passes(q, "twelve thousand five hundred welcome packs printed"));
        assert!(passes(q, "welcome packs: 12500/12500 printed"));
        assert!(!passes(q, "12k welcome packs printed"), "another number");
        assert!(passes("PRs 101,102 merged", "merged 101 and 102"), "a list reads as its groups");
        assert!(passes("60 cases delivered", "five dozen cases delivered"));
        assert!(passes("phase 2 invoice paid", "our Phase II invoice has been paid"));
        assert!(!passes("phase 2 invoice paid", "our Phase III invoice has been paid"));
        let r = Entities::new("40,000 kits built").check("4,000 kits built").unwrap_err();
        assert!(r.reason.contains("40000"), "{}", r.reason);
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
    fn a_bound_is_met_by_any_number_on_its_side() {
        let q = "lighthouse performance score above 90 on web 4.0 homepage";
        assert!(passes(q, "lighthouse web@4.0 / → perf 94 a11y 98 bp 100 seo 100"));
        assert!(passes(q, "homepage on 4.0 scores 94 on lighthouse perf"));
        assert!(!passes(q, "homepage on 4.0 scores"), "a memory with no number on the bound's side");
        assert!(!passes("p95 latency under 200 ms", "p95 latency now 340 ms"));
        assert!(passes("p95 latency under 200 ms", "p95 latency now 143 ms after the cache fix"));
        assert!(passes("at least 400 tests pass", "1,204 passed, 12 skipped"), "thousands separators");
        assert!(passes("accuracy above 0.9 on the eval set", "eval acc 0.913"));
        assert!(!passes("accuracy above 0.9 on the eval set", "eval acc 0.874"));
        assert!(passes("failover within 5 minutes", "failover completed in four minutes"), "number words");
        assert!(!passes("model v2 accuracy above 0.9", "model v3 accuracy 0.95"), "the identifier 2 is still required");
        let r = Entities::new("more than 8 nodes healthy").check("3 nodes healthy").unwrap_err();
        assert_eq!(r.rule, "numbers");
        assert!(r.reason.contains("above 8"), "{}", r.reason);
        // A word that ends in a comparison word is not one.
        assert!(!passes("clover 4 harvested", "clover 5 harvested"));
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

    #[test]
    fn a_quarter_is_met_by_its_months_and_a_region_by_its_place() {
        let q = "Q2 Gift Aid claim submitted";
        assert!(passes(q, "claim for April–June donations lodged"));
        assert!(passes(q, "Apr-Jun gift aid claim sent"));
        assert!(passes(q, "second-quarter gift aid claim sent"));
        assert!(!passes(q, "claim for July–September donations lodged"));
        assert!(!passes(q, "claim for March–May donations lodged"), "a month outside the quarter");
        let r = Entities::new(q).check("gift aid claim lodged").unwrap_err();
        assert!(r.reason.contains("Q2"), "{}", r.reason);
        let m = "OTA update server migrated to us-east-1";
        assert!(passes(m, "The OTA service now runs in AWS US East (N. Virginia)."));
        assert!(passes(m, "ota server moved to us-east-1, old region drained"));
        assert_eq!(
            Entities::new(m).check("ota server moved to us-east-2").unwrap_err().rule,
            "region",
            "a region is not a labelled number"
        );
        assert!(!passes(m, "ota server moved to Ohio, 1 region left"), "a stray 1 is not the region");
        assert_eq!(Entities::new(m).check("ota server moved to Oregon").unwrap_err().rule, "region");
        assert!(!passes("build 12 deployed to us-east-1", "build 13 deployed in N. Virginia"), "other numbers stay required");
    }
}
