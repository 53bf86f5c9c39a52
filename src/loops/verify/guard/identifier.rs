//! The `identifier` rule: every number and identifier of the query (`#42`, `PR-42`, `pull
//! request 42`, `build 7`, `v2.4`, `release/2.4`, `config.yaml`, `twelve`) is in the memory as
//! a whole token (42 is not 420, 2.4 is not 2.40). A kind word before a number (PR, issue,
//! build, invoice, version, ...: [`super::lexicon::KIND_WORDS`]) must not contradict the
//! query's: "issue 42" is not "PR 42", but a bare "#42" or "42" is accepted for either.
//!
//! While it looks, it notes which clauses name the query's identifier and which name only
//! another one of its kind ([`About`]): the polarity rules ignore a marker in a clause about
//! another thing ("PR #42 approved. PR #43 was rejected").

use super::numbers::{canon_num, kind_span_start, kinds_agree, num_atoms};
use super::tokens::Text;
use super::Rejection;

/// One identifier the query requires.
pub(super) struct Req {
    /// Canonical text: "42", "2.4", "config.yaml", "release/2.4".
    canon: String,
    /// The value, when the requirement is an integer (so "twelve" matches "12").
    num: Option<u64>,
    /// The kind word in front of it ("pr", "build", "invoice", "version"), when known.
    kind: Option<&'static str>,
    /// Written with '#': a '#' number in another clause is a different subject.
    hash: bool,
    /// Whole-token identifiers (file names, paths, hashes) rather than numbers.
    text: bool,
    /// As written in the query, for the reason.
    display: String,
}

/// What a clause of the memory is about, as far as the query's identifiers tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum About {
    /// Names none of them, nor another of their kind.
    Unknown,
    /// Names a required identifier.
    Query,
    /// Names only a different identifier of a required one's kind.
    Other,
}

/// Identifiers that are names rather than numbers: file names, paths, snake_case, hashes.
fn is_text_ident(w: &str) -> bool {
    let digit = w.bytes().any(|b| b.is_ascii_digit());
    let alpha = w.chars().any(|c| c.is_alphabetic());
    let sep = w.contains(['.', '/', '_']);
    (digit && alpha) || (sep && alpha && !w.ends_with('.'))
}

/// "k8s" is "kubernetes", "i18n" is "internationalization": first letter, count, last letter.
fn numeronym(short: &str, w: &str) -> bool {
    let b = short.as_bytes();
    if b.len() < 3 || !b[0].is_ascii_alphabetic() || !b[b.len() - 1].is_ascii_alphabetic() {
        return false;
    }
    let Ok(n) = short[1..short.len() - 1].parse::<usize>() else {
        return false;
    };
    let wb = w.as_bytes();
    wb.len() == n + 2 && wb[0] == b[0] && wb[wb.len() - 1] == b[b.len() - 1] && w.is_ascii()
}

/// "release/2.4" in the query matches "release 2.4" in the memory.
fn parts_at(t: &Text, i: usize, canon: &str) -> bool {
    for (k, p) in (i..).zip(canon.split(['/', '-', '_'])) {
        if t.w(k) != p {
            return false;
        }
    }
    canon.contains(['/', '-', '_'])
}

/// The identifiers the tokenized query requires, without repeats.
pub(super) fn required(t: &Text) -> Vec<Req> {
    let mut reqs: Vec<Req> = Vec::new();
    for i in 0..t.len() {
        let w = t.w(i);
        // "one" and "zero" in a query are usually pronouns and quantities, not identifiers.
        if w.is_empty() || w == "one" || w == "zero" {
            continue;
        }
        let mut atoms: Vec<Req> = Vec::new();
        let kind_start = kind_span_start(t, i);
        num_atoms(t, i, &mut |c, n, k, h| {
            atoms.push(Req { canon: c.to_string(), num: n, kind: k, hash: h, text: false, display: t.quote(kind_start, i).to_string() });
        });
        // A name like "config.yaml" or "f2d3ce0" is required whole, unless it is just a kind
        // and a number ("PR-42", "release/2.4", "v2.4", "64gb").
        let kind_and_num = atoms.len() == 1 && (atoms[0].kind.is_some() || canon_num(w).is_some());
        let unit_num = atoms.len() == 1 && w.starts_with(|c: char| c.is_ascii_digit()) && !w.contains(['.', '/', '_']);
        if is_text_ident(w) && !kind_and_num && !unit_num {
            atoms.clear();
            atoms.push(Req { canon: w.to_string(), num: None, kind: None, hash: false, text: true, display: t.quote(i, i).to_string() });
        }
        for a in atoms {
            if !reqs.iter().any(|r| r.canon == a.canon && r.kind == a.kind) {
                reqs.push(a);
            }
        }
    }
    reqs
}

/// How a requirement reads for `slm`'s explain output: "pr 42", "config.yaml".
pub(super) fn describe(r: &Req) -> String {
    match r.kind {
        Some(k) => format!("{k} {}", r.canon),
        None => r.canon.clone(),
    }
}

/// The rule: each of `reqs` is in the memory `t`, else a rejection naming the first missing
/// one (and a same-valued identifier of another kind, when there is one). On success, what
/// each clause (`clauses`: [`Text::clauses`]) is about.
pub(super) fn check(reqs: &[Req], t: &Text, clauses: &[usize]) -> Result<Vec<About>, Rejection> {
    let nclauses = clauses.last().map_or(1, |c| c + 1);
    let mut about = vec![About::Unknown; nclauses];
    for r in reqs {
        let (found, wrong) = find(r, t, clauses, &mut about);
        if !found {
            let reason = match wrong {
                Some(i) => format!("mentions \"{}\", not {}", t.quote(kind_span_start(t, i), i), r.display),
                None => format!("does not mention {}", r.display),
            };
            return Err(Rejection { rule: "identifier", reason });
        }
    }
    Ok(about)
}

/// Whether `r` is in the memory; else a token that names the same value as another kind.
/// Marks the clauses that name `r` or only another identifier of its kind.
fn find(r: &Req, t: &Text, clauses: &[usize], about: &mut [About]) -> (bool, Option<usize>) {
    let mut found = false;
    let mut wrong = None;
    for (i, &c) in clauses.iter().enumerate() {
        if !t.is_word(i) {
            continue;
        }
        if r.text {
            let w = t.w(i);
            if w == r.canon || w.split('/').any(|p| p == r.canon) || parts_at(t, i, &r.canon) || numeronym(&r.canon, w) {
                found = true;
                about[c] = About::Query;
            }
            continue;
        }
        num_atoms(t, i, &mut |canon, n, k, h| {
            let same = canon == r.canon || (n.is_some() && n == r.num);
            if same && kinds_agree(k, r.kind) {
                found = true;
                about[c] = About::Query;
            } else if same {
                wrong = Some(i);
            } else if ((r.kind.is_some() && k == r.kind) || (h && (r.hash || matches!(r.kind, Some("pr" | "issue")))))
                && about[c] == About::Unknown
            {
                about[c] = About::Other;
            }
        });
    }
    (found, wrong)
}

#[cfg(test)]
mod tests {
    use super::super::tokens::tokenize;
    use super::*;

    fn run(query: &str, memory: &str) -> Result<Vec<About>, Rejection> {
        let q = tokenize(query);
        let reqs = required(&q);
        let m = tokenize(memory);
        check(&reqs, &m, &m.clauses())
    }

    #[test]
    fn rejects_a_missing_or_different_identifier() {
        for (q, m) in [
            ("PR #42 approved", "PR #420 approved"),
            ("PR #42 approved", "PR #4 approved, #2 pending"),
            ("release v2.4 published", "release v2.40 published"),
            ("config.yaml updated", "config.yml updated"),
            ("PR-42 approved", "issue #42 approved"),
            ("invoice 1031 paid", "invoice 1013 paid"),
        ] {
            assert_eq!(run(q, m).unwrap_err().rule, "identifier", "{q:?} vs {m:?}");
        }
    }

    #[test]
    fn accepts_the_same_identifier_written_otherwise() {
        for (q, m) in [
            ("PR #42 approved", "pull request 42 got approved"),
            ("PR #42 approved", "Approved: PR-42"),
            ("release v2.4 published", "Version 2.4 was published"),
            ("release v2.4 published", "released 2.4.0"),
            ("twelve interviews done", "12 interviews done"),
            ("i18n shipped", "internationalization shipped"),
            ("release/2.4 cut", "release 2.4 cut"),
            ("invoice 1,031 paid", "invoice 1031 paid"),
            ("PR #42 merged", "merged https://github.com/acme/app/pull/42"),
        ] {
            assert!(run(q, m).is_ok(), "{q:?} vs {m:?}: {:?}", run(q, m).err());
        }
    }

    #[test]
    fn marks_clauses_about_another_identifier() {
        // The second sentence names only PR #43: markers there speak of another thing.
        assert_eq!(run("PR #42 approved", "PR #42 approved. PR #43 was rejected").unwrap(), [About::Query, About::Other]);
        // A clause with no identifier at all is unknown, not another thing.
        assert_eq!(run("PR #42 approved", "PR #42 approved. it was rejected").unwrap(), [About::Query, About::Unknown]);
    }

    #[test]
    fn reasons_name_the_identifier_as_written() {
        assert_eq!(run("PR #42 approved", "PR #420 approved").unwrap_err().reason, "does not mention PR #42");
        assert_eq!(run("PR #42 approved", "issue #42 approved").unwrap_err().reason, "mentions \"issue #42\", not PR #42");
        let q = tokenize("release/2.4 and config.yaml at f2d3ce0");
        assert_eq!(required(&q).iter().map(describe).collect::<Vec<_>>(), ["version 2.4", "config.yaml", "f2d3ce0"]);
    }
}
