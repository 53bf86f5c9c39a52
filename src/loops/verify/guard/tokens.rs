//! The guard's tokenizer: words (lowercased, with their byte span in the original for quoting)
//! and the few punctuation marks that matter (clause breaks, '%', '?'); everything else is a
//! separator. Each word's lexicon entry ([`super::lexicon`]) and the marker starting at it are
//! looked up once here, because the rules ask many times.

use super::class::Class;
use super::lexicon::{self, Entry, Lists, Slot, PHRASES};

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokKind {
    Word,
    /// `.` `;` `!` and newline: the end of a sentence or clause.
    Hard,
    /// `,` `:` `(` `)` `[` `]` `|` and dashes: the end of a phrase, not of a sentence.
    Soft,
    Percent,
    /// A '?' followed by a space or the end.
    Question,
}

#[derive(Clone, Copy)]
pub(super) struct Tok {
    /// Span in the lowercased text.
    ls: usize,
    le: usize,
    /// Span in the original text.
    os: usize,
    oe: usize,
    pub kind: TokKind,
    /// A number written right after '#'.
    pub hash: bool,
}

/// A marker (a word or phrase of the lexicon that states a class) starting at a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mark {
    pub class: Class,
    /// Its length in tokens.
    pub len: usize,
    /// A negator, a zero or a fix can cancel it.
    pub problem: bool,
}

/// A tokenized text.
pub(super) struct Text<'a> {
    orig: &'a str,
    low: String,
    pub toks: Vec<Tok>,
    entries: Vec<&'static Entry>,
    marks: Vec<Option<Mark>>,
}

fn alnum(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric()
    } else {
        c.is_alphanumeric()
    }
}

/// Characters that join two alphanumeric runs into one word: "v2.4", "PR-42", "don't".
fn joiner(c: char) -> bool {
    matches!(c, '.' | '-' | '/' | '_' | '\'')
}

/// Typographic quotes and hyphens as their ASCII forms.
fn norm_char(c: char) -> char {
    match c {
        '\u{2019}' | '\u{2018}' | '\u{02bc}' => '\'',
        '\u{2010}' | '\u{2011}' => '-',
        _ => c,
    }
}

/// Three digits and then no digit: the tail of a thousands separator.
fn thousands(chars: &[(usize, char)], k: usize) -> bool {
    k + 3 <= chars.len() && chars[k..k + 3].iter().all(|c| c.1.is_ascii_digit()) && chars.get(k + 3).is_none_or(|c| !c.1.is_ascii_digit())
}

pub(super) fn tokenize(s: &str) -> Text<'_> {
    let chars: Vec<(usize, char)> = s.char_indices().map(|(i, c)| (i, norm_char(c))).collect();
    let n = chars.len();
    let end_of = |i: usize| if i < n { chars[i].0 } else { s.len() };
    let mut low = String::with_capacity(s.len() + 4);
    let mut toks = Vec::with_capacity(n / 4 + 4);
    let mut i = 0;
    while i < n {
        let c = chars[i].1;
        if alnum(c) {
            let start = i;
            let mut j = i + 1;
            while j < n {
                let cj = chars[j].1;
                if alnum(cj) {
                    j += 1;
                } else if j + 1 < n && alnum(chars[j + 1].1) && joiner(cj) {
                    j += 2;
                } else if cj == ',' && chars[j - 1].1.is_ascii_digit() && thousands(&chars, j + 1) {
                    // "1,031" is one number; "1, 2" and "3,4,5" are lists.
                    j += 4;
                } else {
                    break;
                }
            }
            let ls = low.len();
            for &(_, ch) in &chars[start..j] {
                if ch.is_ascii() {
                    if ch != ',' {
                        low.push(ch.to_ascii_lowercase());
                    }
                } else {
                    low.extend(ch.to_lowercase());
                }
            }
            let hash = start > 0 && chars[start - 1].1 == '#' && c.is_ascii_digit();
            toks.push(Tok { ls, le: low.len(), os: chars[start].0, oe: end_of(j), kind: TokKind::Word, hash });
            i = j;
            continue;
        }
        let spaced = |k: usize| k >= n || chars[k].1.is_whitespace();
        let kind = match c {
            '.' | ';' | '!' | '\n' => Some(TokKind::Hard),
            '?' if spaced(i + 1) => Some(TokKind::Question),
            ',' | ':' | '(' | ')' | '[' | ']' | '|' | '\u{2014}' | '\u{2013}' => Some(TokKind::Soft),
            '-' if i > 0 && spaced(i + 1) && chars[i - 1].1.is_whitespace() => Some(TokKind::Soft),
            '%' => Some(TokKind::Percent),
            _ => None,
        };
        if let Some(kind) = kind {
            let ls = low.len();
            low.push(c);
            toks.push(Tok { ls, le: low.len(), os: chars[i].0, oe: end_of(i + 1), kind, hash: false });
        }
        i += 1;
    }
    let mut t = Text { orig: s, low, toks, entries: Vec::new(), marks: Vec::new() };
    t.entries = (0..t.len()).map(|j| lexicon::lookup(t.w(j))).collect();
    t.marks = (0..t.len()).map(|j| mark_at(&t, j)).collect();
    t
}

/// The marker starting at word `j`: a phrase, else the word. Hyphenated words are tried whole,
/// joined ("roll-back") and by parts ("half-done"); "-free" and "non-" compounds are no markers.
fn mark_at(t: &Text, j: usize) -> Option<Mark> {
    if !t.is_word(j) {
        return None;
    }
    let e = t.entry(j);
    let mut bits = e.phrases;
    while bits != 0 {
        let i = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let p = &PHRASES[i];
        let hit = p.slots.iter().enumerate().all(|(k, slot)| match slot {
            Slot::W(ws) => ws.contains(&t.w(j + k)),
            Slot::L(l) => t.is(j + k, *l),
            Slot::Any => true,
        });
        // A phrase's first two tokens are words (an `Any` never comes second).
        if hit {
            return Some(Mark { class: p.class, len: p.slots.len(), problem: p.problem });
        }
    }
    let word = |w: &str| lexicon::lookup(w).marker.map(|(class, problem)| Mark { class, len: 1, problem });
    if let Some((class, problem)) = e.marker {
        return Some(Mark { class, len: 1, problem });
    }
    let w = t.w(j);
    if !w.contains('-') || w.ends_with("-free") || w.starts_with("non-") {
        return None;
    }
    let joined: String = w.chars().filter(|&c| c != '-').collect();
    word(&joined).or_else(|| w.split('-').find_map(word))
}

impl Text<'_> {
    pub(super) fn len(&self) -> usize {
        self.toks.len()
    }

    /// The lowercased word at `i`, or "" for punctuation and past the end.
    pub(super) fn w(&self, i: usize) -> &str {
        match self.toks.get(i) {
            Some(t) if t.kind == TokKind::Word => &self.low[t.ls..t.le],
            _ => "",
        }
    }

    pub(super) fn is_word(&self, i: usize) -> bool {
        self.toks.get(i).is_some_and(|t| t.kind == TokKind::Word)
    }

    pub(super) fn kind(&self, i: usize) -> Option<TokKind> {
        self.toks.get(i).map(|t| t.kind)
    }

    /// The punctuation mark at `i` ("" for words and past the end).
    pub(super) fn punct(&self, i: usize) -> &str {
        match self.toks.get(i) {
            Some(t) if t.kind != TokKind::Word => &self.low[t.ls..t.le],
            _ => "",
        }
    }

    /// The lexicon entry of token `i` (empty for punctuation and past the end).
    pub(super) fn entry(&self, i: usize) -> &'static Entry {
        self.entries.get(i).copied().unwrap_or_else(|| lexicon::lookup(""))
    }

    /// Whether the word at `i` is in one of `lists`.
    pub(super) fn is(&self, i: usize, lists: Lists) -> bool {
        self.entry(i).lists.contains(lists)
    }

    /// The marker starting at token `i`.
    pub(super) fn mark(&self, i: usize) -> Option<Mark> {
        self.marks.get(i).copied().flatten()
    }

    /// The original text from token `a` to token `b`, inclusive.
    pub(super) fn quote(&self, a: usize, b: usize) -> &str {
        let b = b.min(self.len().saturating_sub(1));
        match (self.toks.get(a), self.toks.get(b)) {
            (Some(x), Some(y)) if x.os <= y.oe => self.orig.get(x.os..y.oe).unwrap_or(""),
            _ => "",
        }
    }

    /// The clause number of each token: sentences, and "but"/"while"/"however" inside one,
    /// separate statements about possibly different things.
    pub(super) fn clauses(&self) -> Vec<usize> {
        let mut ids = Vec::with_capacity(self.len());
        let mut c = 0;
        for i in 0..self.len() {
            let k = self.toks[i].kind;
            if k == TokKind::Word && self.is(i, Lists::CLAUSE_BREAK) {
                c += 1;
            }
            ids.push(c);
            if matches!(k, TokKind::Hard | TokKind::Question) {
                c += 1;
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        let t = tokenize(s);
        (0..t.len()).map(|i| if t.is_word(i) { t.w(i).to_string() } else { format!("<{}>", t.punct(i)) }).collect()
    }

    #[test]
    fn joins_identifiers_and_numbers() {
        assert_eq!(words("PR-42 v2.4 release/2.4 don\u{2019}t"), ["pr-42", "v2.4", "release/2.4", "don't"]);
        assert_eq!(words("invoice 1,031; 1, 2"), ["invoice", "1031", "<;>", "1", "<,>", "2"]);
        assert_eq!(words("40% done?  ok"), ["40", "<%>", "done", "<?>", "ok"]);
        assert_eq!(words("a - b a-b x?y"), ["a", "<->", "b", "a-b", "x", "y"]);
    }

    #[test]
    fn hash_numbers_and_quotes() {
        let t = tokenize("Review of #42: NOT approved");
        assert!(t.toks[2].hash && !t.toks[0].hash);
        assert_eq!(t.quote(4, 5), "NOT approved");
        assert_eq!(t.quote(9, 12), "");
    }

    #[test]
    fn marks_phrases_words_and_hyphens() {
        let t = tokenize("rolled back, in the merge queue, half-done, error-free, non-blocking");
        assert_eq!(t.mark(0), Some(Mark { class: Class::Reverted, len: 2, problem: true }));
        assert_eq!(t.mark(3).map(|m| (m.class, m.len)), Some((Class::Pending, 4)));
        assert_eq!(t.mark(8).map(|m| m.class), Some(Class::Partial));
        assert_eq!(t.mark(10), None, "-free compounds state no failure");
        assert_eq!(t.mark(12), None, "non- compounds state nothing");
    }

    #[test]
    fn clauses_split_at_sentences_and_contrasts() {
        let t = tokenize("A done. B failed but C ok");
        assert_eq!(t.clauses(), [0, 0, 0, 1, 1, 2, 2, 2]);
    }
}
