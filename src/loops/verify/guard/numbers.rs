//! Numbers and their kinds as the `identifier` rule ([`super::identifier`]) reads them:
//! "#42", "v2.4", "PR-42", "pull request number 42", "release/2.4", "64gb", "twelve".

use super::lexicon::{self, Entry, Lists};
use super::tokens::{Text, TokKind};

/// A count: digits or a number word (`entry`: the word's lexicon entry, asked only when the
/// word is not digits).
fn count_of<'e>(w: &str, entry: impl FnOnce() -> &'e Entry) -> Option<u64> {
    if !w.is_empty() && w.len() <= 18 && w.bytes().all(|b| b.is_ascii_digit()) {
        w.parse().ok()
    } else {
        entry().num
    }
}

/// A count: digits or a number word.
pub(super) fn count(w: &str) -> Option<u64> {
    count_of(w, || lexicon::lookup(w))
}

/// The count at token `i`, from the entry the tokenizer looked up.
pub(super) fn count_at(t: &Text, i: usize) -> Option<u64> {
    count_of(t.w(i), || t.entry(i))
}

/// A number or version as a canonical string: "v2.4" → "2.4", "007" → "7"; with its integer
/// value and whether it carried a 'v'.
pub(super) fn canon_num(s: &str) -> Option<(&str, Option<u64>, bool)> {
    let b = s.as_bytes();
    let (s, v) = if b.len() > 1 && b[0] == b'v' && b[1].is_ascii_digit() { (&s[1..], true) } else { (s, false) };
    let b = s.as_bytes();
    if b.is_empty() || !b[0].is_ascii_digit() || !b[b.len() - 1].is_ascii_digit() {
        return None;
    }
    if !b.iter().all(|c| c.is_ascii_digit() || *c == b'.') || s.contains("..") {
        return None;
    }
    if s.contains('.') {
        // "2.4.0" is "2.4" (semver); "2.4.1" and "2.40" are not.
        let mut t = s;
        while t.matches('.').count() > 1 && t.ends_with(".0") {
            t = &t[..t.len() - 2];
        }
        return Some((t, None, v));
    }
    let t = s.trim_start_matches('0');
    let t = if t.is_empty() { &s[s.len() - 1..] } else { t };
    Some((t, t.parse().ok(), v))
}

/// What a number names, from the word `w` before it (`prev` is the word before that):
/// [`lexicon::KIND_WORDS`], and "request" after "pull" or "merge".
fn kind_of<'e>(w: &str, prev: &str, entry: impl FnOnce() -> &'e Entry) -> Option<&'static str> {
    if w == "request" {
        return matches!(prev, "pull" | "merge").then_some("pr");
    }
    entry().kind
}

/// [`kind_of`] for a word alone (a part of "PR-42").
pub(super) fn kind_word(w: &str, prev: &str) -> Option<&'static str> {
    kind_of(w, prev, || lexicon::lookup(w))
}

/// [`kind_of`] for the word at token `j`, from the entry the tokenizer looked up.
fn kind_at(t: &Text, j: usize) -> Option<&'static str> {
    kind_of(t.w(j), if j > 0 { t.w(j - 1) } else { "" }, || t.entry(j))
}

/// The kind of the number at token `i`: "PR #42", "pull request number 42", "invoice no. 1031".
pub(super) fn kind_before(t: &Text, i: usize) -> Option<&'static str> {
    let mut j = i;
    for _ in 0..3 {
        if j == 0 {
            return None;
        }
        j -= 1;
        if t.is(j, Lists::NUMBER_LABEL) || t.kind(j) == Some(TokKind::Hard) || t.punct(j) == ":" {
            continue;
        }
        return kind_at(t, j);
    }
    None
}

/// Where the display of a number starts: at its kind word, so the reason reads "PR #42".
pub(super) fn kind_span_start(t: &Text, i: usize) -> usize {
    if kind_before(t, i).is_none() {
        return i;
    }
    let mut j = i;
    while j > 0 && i - j < 4 {
        j -= 1;
        if kind_at(t, j).is_some() {
            if t.w(j) == "request" && j > 0 {
                return j - 1;
            }
            return j;
        }
    }
    i
}

/// Writes `n` in decimal into `buf`, for comparing number words with digits without allocating.
fn fmt_u64(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut k = buf.len();
    loop {
        k -= 1;
        buf[k] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[k..]).unwrap_or("")
}

/// A number found in a token: canonical text, integer value, kind, written with '#'.
pub(super) type AtomSink<'f> = &'f mut dyn FnMut(&str, Option<u64>, Option<&'static str>, bool);

/// Calls `f` for every number token `i` contains: "#42", "42", "v2.4", "PR-42" (kind pr),
/// "pr42", "release/2.4" (kind version), "64gb", "twelve".
pub(super) fn num_atoms(t: &Text, i: usize, f: AtomSink) {
    let w = t.w(i);
    if w.is_empty() {
        return;
    }
    let hash = t.toks[i].hash;
    let before = kind_before(t, i);
    let vkind = |v: bool, k: Option<&'static str>| if v { k.or(Some("version")) } else { k };
    if w.contains(['-', '/']) {
        let mut prev = before;
        for (pi, part) in w.split(['-', '/']).enumerate() {
            if let Some((c, n, v)) = canon_num(part) {
                f(c, n, vkind(v, prev), hash && pi == 0);
            } else if let Some((c, n, k)) = alnum_num(part, prev) {
                f(c, n, k, false);
            }
            prev = kind_word(part, "");
        }
        return;
    }
    if let Some((c, n, v)) = canon_num(w) {
        f(c, n, vkind(v, before), hash);
    } else if let Some((c, n, k)) = alnum_num(w, before) {
        f(c, n, k, hash);
    } else if let Some(n) = lexicon::lookup(w).num {
        let mut buf = [0u8; 20];
        f(fmt_u64(n, &mut buf), Some(n), before, false);
    }
}

/// "pr42" → 42 of kind pr (only for kind prefixes: "sha256" is a name); "64gb" → 64.
fn alnum_num<'a>(w: &'a str, before: Option<&'static str>) -> Option<(&'a str, Option<u64>, Option<&'static str>)> {
    let split = w.find(|c: char| c.is_ascii_digit())?;
    let (head, tail) = w.split_at(split);
    if !head.is_empty() {
        let kind = kind_word(head, "")?;
        let (c, n, _) = canon_num(tail)?;
        return Some((c, n, Some(kind)));
    }
    let d = w.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = w.split_at(d);
    if unit.chars().all(|c| c.is_alphabetic()) {
        let (c, n, _) = canon_num(digits)?;
        return Some((c, n, before));
    }
    None
}

/// Two kinds contradict each other only when both are known.
pub(super) fn kinds_agree(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tokens::tokenize;
    use super::*;

    fn atoms(s: &str) -> Vec<(String, Option<u64>, Option<&'static str>, bool)> {
        let t = tokenize(s);
        let mut out = Vec::new();
        for i in 0..t.len() {
            num_atoms(&t, i, &mut |c, n, k, h| out.push((c.to_string(), n, k, h)));
        }
        out
    }

    #[test]
    fn canonical_numbers() {
        assert_eq!(canon_num("v2.4"), Some(("2.4", None, true)));
        assert_eq!(canon_num("2.4.0"), Some(("2.4", None, false)));
        assert_eq!(canon_num("2.40"), Some(("2.40", None, false)));
        assert_eq!(canon_num("007"), Some(("7", Some(7), false)));
        assert_eq!(canon_num("000"), Some(("0", Some(0), false)));
        assert_eq!(canon_num("1..2"), None);
        assert_eq!(canon_num("v"), None);
    }

    #[test]
    fn kinds_from_the_words_before() {
        assert_eq!(atoms("PR #42"), [("42".into(), Some(42), Some("pr"), true)]);
        assert_eq!(atoms("pull request number 42"), [("42".into(), Some(42), Some("pr"), false)]);
        assert_eq!(atoms("invoice no. 1031"), [("1031".into(), Some(1031), Some("invoice"), false)]);
        assert_eq!(atoms("a request 42"), [("42".into(), Some(42), None, false)], "request alone names no PR");
        assert_eq!(atoms("release/2.4"), [("2.4".into(), None, Some("version"), false)]);
        assert_eq!(
            atoms("pr42 64gb twelve"),
            [("42".into(), Some(42), Some("pr"), false), ("64".into(), Some(64), None, false), ("12".into(), Some(12), None, false)]
        );
        assert!(atoms("sha256").is_empty(), "a name, not a number");
    }

    #[test]
    fn display_starts_at_the_kind() {
        let t = tokenize("merged pull request #42 today");
        assert_eq!(t.quote(kind_span_start(&t, 3), 3), "pull request #42");
        assert!(kinds_agree(Some("pr"), None) && !kinds_agree(Some("pr"), Some("issue")));
        assert_eq!(count("twelve"), Some(12));
        assert_eq!(count("99999999999999999999"), None);
    }
}
