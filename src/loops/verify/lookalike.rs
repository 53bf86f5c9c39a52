//! Look-alike names, for `guard:entities` ([`super::entities`]): a name of the gate query that
//! the memory leaves out while it names a near twin of it instead.
//!
//! The trained verifier reads "Galloway Tower elevator 3 passed state inspection" as an answer
//! to "elevator 3 at Calloway Tower passed state inspection": WordPiece cuts the two names into
//! mostly the same pieces, and the sentence around them is the same. Numbers are compared by
//! [`super::entities`]; this file covers the names numbers do not: `core-sw2` for `core-sw1`
//! (the digit is glued to letters, so it is a name), `rack D4` for `rack B4`, `Banco Ribera`
//! for `Banco Ribeira`.
//!
//! A query **name** is a token with both letters and digits (`core-sw1`, `B4`, `gpu-02`), or a
//! capitalised word of four letters or more that does not open the query (`Calloway`). Its
//! **twin** in the memory has the same length and the same shape (letters, digits and
//! punctuation in the same places, the same capital or not at the start) and differs by one
//! character (a name with digits, or a word of five letters or more; two for eight or more; two
//! inflections of one word, `Approved` and `Approves`, are not twins), or, for a word of six letters or more,
//! by one letter added or dropped inside it (not at its end, so `German` / `Germany` and
//! `Austin` / `Austins` are not twins). The rule fires only when the memory does not contain
//! the name itself, the twin is not a word of the query too ("moved from v1 to v2" may be
//! answered by "nothing left on v1"), and no three-digit-or-longer number of the name is in the
//! memory ("00042 has all of it" answers "checkout-00042"). A name written another way
//! (`DC North` for `DC-North`, "the third switch") is left to the model.

/// One token: ASCII letters and digits, joined by single `-`, `_` or `.`.
fn tokens(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        loop {
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            // A joiner continues the token only between two word characters.
            if i + 1 < bytes.len() && matches!(bytes[i], b'-' | b'_' | b'.') && word(bytes[i + 1]) {
                i += 1;
                continue;
            }
            break;
        }
        out.push(&text[start..i]);
    }
    out
}

/// Digits as `0`, letters as `a` (either case), everything else as itself.
fn shape(token: &str) -> String {
    token
        .chars()
        .map(|c| match c {
            '0'..='9' => '0',
            c if c.is_ascii_alphabetic() => 'a',
            c => c,
        })
        .collect()
}

fn starts_upper(token: &str) -> bool {
    token.chars().next().is_some_and(|c| c.is_ascii_uppercase())
}

/// `long` is `short` with one character added strictly inside it (not first, not last).
fn one_inside(short: &str, long: &str) -> bool {
    let (s, l) = (short.as_bytes(), long.as_bytes());
    l.len() == s.len() + 1 && (1..l.len() - 1).any(|i| l[..i] == s[..i] && l[i + 1..] == s[i..])
}

/// Two forms of one English word: the same stem and two inflection endings ("Approved" /
/// "Approves", "Merged" / "Merger"), which a title-case query and a memory may use for the
/// same thing.
fn inflections(a: &str, b: &str) -> bool {
    const ENDINGS: [&str; 4] = ["ed", "es", "er", "en"];
    let cut = a.len().saturating_sub(2);
    a.len() == b.len()
        && a.len() > 3
        && a.as_bytes()[..cut] == b.as_bytes()[..cut]
        && ENDINGS.iter().any(|e| a.ends_with(e))
        && ENDINGS.iter().any(|e| b.ends_with(e))
}

/// A name of the query, lower-cased, with what the check needs of it.
#[derive(Debug, Clone)]
struct Name {
    text: String,
    lower: String,
    upper: bool,
    shape: String,
    has_digit: bool,
    /// Its digit runs of three or more digits.
    long_numbers: Vec<String>,
}

impl Name {
    /// True when `other` (lower-cased `lower`) is a near twin of this name.
    fn twin(&self, other: &str, lower: &str) -> bool {
        if starts_upper(other) != self.upper || lower == self.lower {
            return false;
        }
        let len = self.lower.len();
        if lower.len() == len && shape(lower) == self.shape {
            let differ = self.lower.bytes().zip(lower.bytes()).filter(|(a, b)| a != b).count();
            if self.has_digit {
                return differ == 1;
            }
            if inflections(&self.lower, lower) {
                return false;
            }
            return (len >= 5 && differ == 1) || (len >= 8 && differ == 2);
        }
        !self.has_digit
            && len >= 6
            && lower.bytes().all(|b| b.is_ascii_alphabetic())
            && (one_inside(&self.lower, lower) || one_inside(lower, &self.lower))
    }
}

/// The query's names and its words, for [`Lookalikes::check`].
#[derive(Debug, Clone)]
pub(super) struct Lookalikes {
    names: Vec<Name>,
    words: Vec<String>,
}

impl Lookalikes {
    pub(super) fn new(query: &str) -> Lookalikes {
        let toks = tokens(query);
        let words: Vec<String> = toks.iter().map(|t| t.to_ascii_lowercase()).collect();
        let mut names: Vec<Name> = Vec::new();
        for (i, t) in toks.iter().enumerate() {
            let has_digit = t.bytes().any(|b| b.is_ascii_digit());
            let has_letter = t.bytes().any(|b| b.is_ascii_alphabetic());
            let capitalised = i > 0 && starts_upper(t) && t.len() >= 4 && !has_digit;
            if !((has_digit && has_letter) || capitalised) || names.iter().any(|n| n.lower == words[i]) {
                continue;
            }
            let long_numbers = t.split(|c: char| !c.is_ascii_digit()).filter(|d| d.len() >= 3).map(str::to_string).collect();
            names.push(Name {
                text: t.to_string(),
                lower: words[i].clone(),
                upper: starts_upper(t),
                shape: shape(&words[i]),
                has_digit,
                long_numbers,
            });
        }
        Lookalikes { names, words }
    }

    /// `Some((name, twin))` when the memory names a twin of a query name it leaves out.
    pub(super) fn check(&self, memory: &str) -> Option<(&str, String)> {
        if self.names.is_empty() {
            return None;
        }
        let lower = memory.to_ascii_lowercase();
        // The memory's tokens the query does not use, each with its lower-cased form.
        let toks: Vec<(&str, String)> =
            tokens(memory).into_iter().map(|t| (t, t.to_ascii_lowercase())).filter(|(_, tl)| !self.words.contains(tl)).collect();
        let mem_numbers: Vec<&str> = memory.split(|c: char| !c.is_ascii_digit()).filter(|d| !d.is_empty()).collect();
        for n in &self.names {
            if lower.contains(&n.lower) || n.long_numbers.iter().any(|d| mem_numbers.contains(&d.as_str())) {
                continue;
            }
            if let Some((t, _)) = toks.iter().find(|(t, tl)| n.twin(t, tl)) {
                return Some((&n.text, t.to_string()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swapped(query: &str, memory: &str) -> Option<String> {
        Lookalikes::new(query).check(memory).map(|(_, twin)| twin)
    }

    #[test]
    fn a_near_twin_of_a_name_is_found() {
        let q = "elevator 3 at Calloway Tower passed state inspection";
        assert_eq!(swapped(q, "Galloway Tower elevator 3 passed state inspection.").as_deref(), Some("Galloway"));
        assert_eq!(swapped("firmware 2.4.1 flashed on switch core-sw1", "firmware 2.4.1 flashed on core-sw2").as_deref(), Some("core-sw2"));
        assert_eq!(swapped("power restored to rack B4", "rack D4 power restored 05:41").as_deref(), Some("D4"));
        assert_eq!(
            swapped("SWIFT RMA with Banco Ribeira authorised", "RMA w/ Banco Ribera live").as_deref(),
            Some("Ribera"),
            "a letter dropped inside"
        );
        assert_eq!(swapped("runner gpu-02 online", "runner gpu-03 status offline → online").as_deref(), Some("gpu-03"));
        assert_eq!(
            swapped("Inventory count at DC-North reconciled", "DC-South count reconciled").as_deref(),
            Some("DC-South"),
            "two letters of eight"
        );
    }

    #[test]
    fn the_name_itself_or_another_form_is_left_to_the_model() {
        let q = "elevator 3 at Calloway Tower passed state inspection";
        assert_eq!(swapped(q, "CALLOWAY TOWER: elevator 3 passed, certificate posted"), None, "case does not matter");
        assert_eq!(swapped(q, "elevator 3 passed state inspection"), None, "a memory without the name says nothing of it");
        assert_eq!(swapped("German localization complete", "Germany team finished the German strings"), None);
        assert_eq!(
            swapped("German localization complete", "the Germany office says localization is complete"),
            None,
            "a letter added at the end is another word"
        );
        assert_eq!(
            swapped("backfill for March 4 finished", "backfill of 2024-03-04 done, row counts match"),
            None,
            "a lower-case word is not a twin of a name"
        );
        assert_eq!(swapped("Q3 export delivered", "third-quarter extract landed in s3://fin/exports"), None, "Q3 and s3 differ in case");
        assert_eq!(
            swapped("all calls moved from partner API v1 to v2", "no service left on partner API v1"),
            None,
            "the query names the other one too"
        );
        assert_eq!(
            swapped("checkout-00042 serving all traffic", "no traffic left on checkout-00041; 00042 has all of it"),
            None,
            "its long number is there"
        );
        assert_eq!(swapped("edge-web01 through edge-web08 on the new conf", "edge-web01–08 reloaded"), None);
        assert_eq!(swapped("budget approved by Mark", "budget approved by Mary"), None, "short words are left to the model");
        assert_eq!(swapped("Q3 Budget Approved", "Board Approves the Q3 Budget"), None, "an inflection is not another name");
        assert_eq!(swapped("Release Branch Merged", "Release Branch Merger done"), None);
        assert_eq!(
            swapped("BGP session to Telvio up", "BGP session to Telvia up.").as_deref(),
            Some("Telvia"),
            "a name's last letters still count"
        );
        assert_eq!(swapped("deploy finished", "deploy of core-sw2 finished"), None, "a query without names");
    }

    #[test]
    fn tokens_keep_joined_names_whole() {
        assert_eq!(tokens("core-sw1, gpu_02 and v2.4.1-rc1; x-"), ["core-sw1", "gpu_02", "and", "v2.4.1-rc1", "x"]);
        assert_eq!(shape("core-sw1"), "aaaa-aa0");
    }
}
