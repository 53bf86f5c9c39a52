//! What keeps the polarity rules from rejecting good news that merely sounds negative: the
//! words that state no outcome are marked quiet ([`Quiet`]) before the rules
//! ([`super::rules`]) look.
//! - double negatives: a negator ("no", "not", "without", "nothing", "never", "zero", "0")
//!   followed, across a few filler words, by a problem word cancels both: "without errors",
//!   "no failures", "0 failed", "nothing left", "not a single failure", "no longer failing";
//! - resolutions: "fixed the failing test", "the crash was fixed", "errors: none";
//! - history: "passed after 2 failed attempts" (the problem came before the outcome);
//! - idioms: "not only", "no matter", "whether or not" negate nothing.

use super::lexicon::{Lists, IDIOMS};
use super::numbers::count_at;
use super::tokens::{Text, TokKind};

/// A negator at a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Negator {
    /// Its length in tokens ("no longer" is two).
    pub len: usize,
    /// Strong negators state a negation alone; weak ones ("without", "nothing") only cancel
    /// problems ("merged without a squash", "nothing to add").
    pub strong: bool,
}

/// The negator at `j`, if any.
pub(super) fn negator(t: &Text, j: usize) -> Option<Negator> {
    let w = t.w(j);
    let strong = |len| Some(Negator { len, strong: true });
    if w == "no" {
        // "no. 1031" and "no 42" are "number".
        if count_at(t, j + 1).is_some() || t.kind(j + 1) == Some(TokKind::Hard) {
            return None;
        }
        return if t.w(j + 1) == "longer" { strong(2) } else { strong(1) };
    }
    if t.is(j, Lists::STRONG_NEGATOR) {
        return strong(1);
    }
    if t.is(j, Lists::WEAK_NEGATOR) {
        return Some(Negator { len: 1, strong: false });
    }
    if w.ends_with("n't") {
        return strong(1);
    }
    None
}

/// A negator that negates nothing: [`IDIOMS`], and "not" after "or" ("whether or not").
fn idiom(t: &Text, j: usize) -> bool {
    let (a, b) = (t.w(j), t.w(j + 1));
    IDIOMS.iter().any(|&(x, ys)| x == a && ys.contains(&b)) || (a == "not" && j > 0 && t.w(j - 1) == "or")
}

/// A problem at `k` that a negator, a zero or a fix can cancel: its length.
pub(super) fn problem_len(t: &Text, k: usize) -> Option<usize> {
    match t.mark(k) {
        Some(m) if m.problem => Some(m.len),
        Some(_) => None,
        None if t.is(k, Lists::PROBLEM_NOUN) => Some(1),
        None => None,
    }
}

/// The first problem after `k` across at most `max` filler words (and numbers, if allowed).
fn problem_after(t: &Text, mut k: usize, max: usize, numbers: bool) -> Option<(usize, usize)> {
    let mut fills = 0;
    while t.is_word(k) {
        if let Some(l) = problem_len(t, k) {
            return Some((k, l));
        }
        if negator(t, k).is_some() || t.is(k, Lists::RESOLVER) {
            return None;
        }
        if t.is(k, Lists::FILLER) || (numbers && count_at(t, k).is_some()) {
            fills += 1;
            if fills > max {
                return None;
            }
            k += 1;
            continue;
        }
        return None;
    }
    None
}

/// A success word earlier in the same sentence (at most 30 tokens back).
fn succeeded_before(t: &Text, j: usize) -> bool {
    (0..j).rev().take(30).take_while(|&k| t.kind(k) != Some(TokKind::Hard)).any(|k| t.is(k, Lists::SUCCESS))
}

/// The tokens that state no outcome.
pub(super) struct Quiet(Vec<bool>);

impl Quiet {
    pub(super) fn at(&self, j: usize) -> bool {
        self.0.get(j).copied().unwrap_or(false)
    }

    /// Whether any of the `len` tokens from `j` is quiet.
    pub(super) fn any(&self, j: usize, len: usize) -> bool {
        self.0.iter().skip(j).take(len).any(|&q| q)
    }

    fn mark(&mut self, a: usize, len: usize) {
        for q in self.0.iter_mut().skip(a).take(len) {
            *q = true;
        }
    }

    /// Marks the words of `t` that state no outcome: a negator and the problem it cancels
    /// ("no failures"), a problem counted as zero ("0 failed", "errors: none"), a problem fixed
    /// ("fixed the failing test", "the crash was fixed"), a problem before a success ("passed
    /// after 2 failed attempts"), and negators that negate nothing.
    pub(super) fn of(t: &Text) -> Quiet {
        let mut quiet = Quiet(vec![false; t.len()]);
        for j in 0..t.len() {
            if !t.is_word(j) {
                continue;
            }
            if let Some(Negator { len, .. }) = negator(t, j) {
                if idiom(t, j) {
                    quiet.mark(j, 1);
                } else if let Some((k, l)) = problem_after(t, j + len, 4, false).or_else(|| {
                    // One subject noun may sit between: "no rows were dropped", "no reboots required".
                    let nx = t.w(j + len);
                    let noun = !nx.is_empty() && !nx.ends_with("ed") && t.mark(j + len).is_none();
                    if noun {
                        problem_after(t, j + len + 1, 2, false)
                    } else {
                        None
                    }
                }) {
                    quiet.mark(j, len);
                    quiet.mark(k, l);
                }
                continue;
            }
            if count_at(t, j) == Some(0) || t.is(j, Lists::ZERO) {
                if let Some((k, l)) = problem_after(t, j + 1, 3, false) {
                    quiet.mark(k, l);
                }
                continue;
            }
            if t.is(j, Lists::HISTORY) && succeeded_before(t, j) {
                // The problem is history, the outcome came first.
                if let Some((k, l)) = problem_after(t, j + 1, 3, true) {
                    quiet.mark(k, l);
                }
                continue;
            }
            if t.is(j, Lists::RESOLVER) {
                if let Some((k, l)) = problem_after(t, j + 1, 4, true) {
                    quiet.mark(k, l);
                }
                continue;
            }
            let Some(l) = problem_len(t, j) else { continue };
            // A problem counted as none right after it: "errors: none", "errors 0", "leak free".
            let mut k = j + l;
            if t.kind(k) == Some(TokKind::Soft) {
                k += 1;
            }
            if count_at(t, k) == Some(0) || t.is(k, Lists::NOTHING_LEFT) {
                quiet.mark(j, l);
                continue;
            }
            // A problem fixed after it: "the crash was finally fixed", "errors are gone".
            let mut k = j + l;
            let mut f = 0;
            while f < 2 && t.is(k, Lists::FILLER) && !t.is(k, Lists::BE) {
                k += 1;
                f += 1;
            }
            let mut b = 0;
            while b < 3 && t.is(k, Lists::BE) {
                k += 1;
                b += 1;
            }
            if t.is(k, Lists::RESOLVER) || (b > 0 && t.is(k, Lists::GONE)) {
                quiet.mark(j, l);
            }
        }
        quiet
    }
}

#[cfg(test)]
mod tests {
    use super::super::tokens::tokenize;
    use super::*;

    /// The quiet words of `s`.
    fn quiet(s: &str) -> Vec<String> {
        let t = tokenize(s);
        let q = Quiet::of(&t);
        (0..t.len()).filter(|&j| q.at(j)).map(|j| t.w(j).to_string()).collect()
    }

    #[test]
    fn negators_cancel_problems() {
        assert_eq!(quiet("completed without errors"), ["without", "errors"]);
        assert_eq!(quiet("not a single failure"), ["not", "failure"]);
        assert_eq!(quiet("no longer failing"), ["no", "longer", "failing"]);
        assert_eq!(quiet("no rows were dropped"), ["no", "dropped"]);
        // A negator before a non-problem cancels nothing: the negation rule sees it.
        assert!(quiet("not approved").is_empty());
        assert!(quiet("no. 1031 failed").is_empty(), "\"no.\" is a number label");
    }

    #[test]
    fn zeros_fixes_and_history_cancel_problems() {
        assert_eq!(quiet("0 failed"), ["failed"]);
        assert_eq!(quiet("errors: none"), ["errors"]);
        assert_eq!(quiet("fixed the failing test"), ["failing"]);
        assert_eq!(quiet("the crash was fixed"), ["crash"]);
        assert_eq!(quiet("errors are gone"), ["errors"]);
        assert_eq!(quiet("deploy succeeded after 2 failed attempts"), ["failed"]);
        // Without a success before it, "after" makes nothing history.
        assert!(quiet("deploy stopped after 2 failed attempts").is_empty());
    }

    #[test]
    fn idioms_negate_nothing() {
        assert_eq!(quiet("not only merged"), ["not"]);
        assert_eq!(quiet("whether or not it ships"), ["not"]);
        assert_eq!(quiet("no doubt"), ["no"]);
    }

    #[test]
    fn negators_are_strong_or_weak() {
        let t = tokenize("isn't without never no longer");
        assert_eq!(negator(&t, 0), Some(Negator { len: 1, strong: true }));
        assert_eq!(negator(&t, 1), Some(Negator { len: 1, strong: false }));
        assert_eq!(negator(&t, 2), Some(Negator { len: 1, strong: true }));
        assert_eq!(negator(&t, 3), Some(Negator { len: 2, strong: true }));
    }
}
