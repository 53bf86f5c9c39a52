//! Token counts by the model's own tokenizer, cheap enough for every loop lap and to load.
//!
//! Loops count the tokens of each lap's ledger text (SPEC: `max_tokens`), so a thousand
//! waiting loops count a thousand texts a second. A full `encode` allocates per character
//! (alignments, normalised strings) and was most of an idle lap's cost. For a BERT pipeline
//! (BertNormalizer, BertPreTokenizer, WordPiece: all-MiniLM-L6-v2's), the count is exactly
//! additive over whitespace-separated words: the normaliser acts per character and turns
//! whitespace into spaces, the pre-tokeniser splits on whitespace first, and WordPiece sees
//! one pre-token at a time. So the count is the special tokens of the template plus, for each
//! word, its count alone, which is remembered: lap texts repeat their words. (A "word" ends
//! at white space the normaliser keeps as space: with `clean_text` it deletes the three
//! control characters among Unicode's white space, U+000B, U+000C and U+0085, which so join
//! their neighbours into one word; see [`separates`].) Any other pipeline is counted with a
//! full `encode`.
//!
//! Loading is made cheap too, because `slm loop demo` and every `loop run` pay for it.
//! Building a `Tokenizer` from the file costs 20–50 ms: WordPiece fills a vocabulary map and
//! its reverse (30,522 owned strings each, SipHash), and the added vocabulary walks them
//! again. A count needs none of the ids. So for a BERT file, [`LeanBert`] keeps the crate's
//! own normaliser and pre-tokeniser (all the Unicode rules) and only the vocabulary strings
//! (sorted, in one string: [`Vocab`]), and runs WordPiece's greedy longest-match over it (the same loop as
//! `tokenizers::models::wordpiece`, counting instead of building tokens). A word that holds an
//! added token (`[CLS]`, `[SEP]`, …) is split by the added vocabulary first in the real
//! pipeline, so such a word goes to the whole tokenizer, loaded then and only then. The unit
//! tests check the lean count equals a full `encode`, word by word and text by text, over
//! hand-picked edge cases, this crate's own docs and seeded random Unicode.
//!
//! Even so, parsing the 466 KB JSON into that set took 15–35 ms, the longest step of a
//! tag-only `slm loop run`, which loads no model at all. So the lean counter is also kept as a
//! derived file ([`TokenCounter::from_file_cached`]: one JSON header line, then the vocabulary
//! one string per line, in byte order), tied to the tokenizer file's size and modification time
//! and rebuilt whenever they change; reading it is one copy and a scan for newlines.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use parking_lot::Mutex;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{
    AddedToken, Normalizer, NormalizerWrapper, OffsetReferential, OffsetType, PostProcessor, PreTokenizedString, PreTokenizer,
    PreTokenizerWrapper, Tokenizer,
};

/// The sections of a `tokenizer.json` a counting BERT tokenizer needs.
#[derive(Deserialize)]
struct BertFile {
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    normalizer: NormalizerWrapper,
    pre_tokenizer: PreTokenizerWrapper,
    post_processor: Option<PostProcessorWrapper>,
    model: WordPieceFile,
}

/// A WordPiece model section, its vocabulary read as a set (the ids are not needed).
#[derive(Deserialize)]
struct WordPieceFile {
    #[serde(rename = "type")]
    kind: String,
    unk_token: String,
    continuing_subword_prefix: String,
    max_input_chars_per_word: usize,
    vocab: VocabSet,
}

/// The vocabulary's strings; their ids are skipped while parsing.
struct VocabSet(Option<Vocab>);

impl<'de> Deserialize<'de> for VocabSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VocabSet;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of vocabulary strings to ids")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<VocabSet, A::Error> {
                let mut words = Vec::with_capacity(map.size_hint().unwrap_or(32_768));
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    words.push(k);
                }
                Ok(VocabSet(Vocab::from_words(words)))
            }
        }
        d.deserialize_map(V)
    }
}

/// The vocabulary's strings, sorted and joined into one string, one per line.
///
/// Loading it from the derived file is one copy and a scan for line ends; the hash set it
/// replaced cost 30,522 allocations and hashes on every start, a third of a tag-only `slm loop
/// run`'s CPU. A look-up is a binary search (15 comparisons), and counted words are memoised
/// above it, so the search is paid once a word.
struct Vocab {
    /// Every string followed by `\n`, in byte order.
    text: Box<str>,
    /// Where each string starts in `text`, then `text.len()`.
    starts: Vec<u32>,
}

impl Vocab {
    /// The vocabulary of these strings (sorted here; duplicates kept once); `None` when one
    /// is empty or holds a newline, which this form cannot store (a BERT vocabulary has none;
    /// such a file is counted by the whole tokenizer).
    fn from_words(mut words: Vec<String>) -> Option<Vocab> {
        words.sort_unstable();
        words.dedup();
        let mut text = String::with_capacity(words.iter().map(|w| w.len() + 1).sum());
        for w in &words {
            text.push_str(w);
            text.push('\n');
        }
        Vocab::from_lines(text.into_boxed_str())
    }

    /// The vocabulary of `text`: strings each ended by `\n`, strictly ascending in byte order
    /// and none empty; `None` for anything else (a damaged derived file is not used).
    fn from_lines(text: Box<str>) -> Option<Vocab> {
        u32::try_from(text.len()).ok()?;
        if !text.is_empty() && !text.ends_with('\n') {
            return None;
        }
        let mut starts = Vec::with_capacity(text.len() / 6);
        starts.push(0u32);
        let mut prev: &str = "";
        let mut at = 0usize;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                let w = &text[at..i];
                if w.is_empty() || (starts.len() > 1 && w <= prev) {
                    return None;
                }
                prev = w;
                at = i + 1;
                starts.push(at as u32);
            }
        }
        Some(Vocab { text, starts })
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn get(&self, i: usize) -> &str {
        &self.text[self.starts[i] as usize..self.starts[i + 1] as usize - 1]
    }

    fn contains(&self, word: &str) -> bool {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).cmp(word) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }
}

/// A BERT pipeline reduced to what counting needs: normaliser, pre-tokeniser, and WordPiece
/// over the vocabulary set.
pub struct LeanBert {
    normalizer: NormalizerWrapper,
    pre_tokenizer: PreTokenizerWrapper,
    vocab: Vocab,
    prefix: String,
    max_chars: usize,
    /// Tokens the template adds around one sequence (`[CLS]`, `[SEP]`).
    specials: usize,
    /// The added tokens' contents, lowercased and as given: a word holding one is counted by
    /// the whole tokenizer.
    added: Vec<(String, String)>,
}

impl LeanBert {
    /// Reads a BERT-style `tokenizer.json` (BertNormalizer, BertPreTokenizer, WordPiece whose
    /// unknown token is in its vocabulary); `None` for any other file.
    pub fn parse(json: &[u8]) -> Option<LeanBert> {
        let f: BertFile = serde_json::from_slice(json).ok()?;
        let bert = matches!(f.normalizer, NormalizerWrapper::BertNormalizer(_))
            && matches!(f.pre_tokenizer, PreTokenizerWrapper::BertPreTokenizer(_))
            && f.model.kind == "WordPiece"
            && f.model.vocab.0.as_ref().is_some_and(|v| v.contains(&f.model.unk_token));
        if !bert {
            return None;
        }
        let vocab = f.model.vocab.0?;
        Some(LeanBert {
            normalizer: f.normalizer,
            pre_tokenizer: f.pre_tokenizer,
            vocab,
            prefix: f.model.continuing_subword_prefix,
            max_chars: f.model.max_input_chars_per_word,
            specials: f.post_processor.map_or(0, |p| p.added_tokens(false)),
            added: f.added_tokens.into_iter().filter(|a| !a.content.is_empty()).map(|a| (a.content.to_lowercase(), a.content)).collect(),
        })
    }

    /// True when the whole tokenizer must count `word`: it holds an added token, which the
    /// real pipeline splits off before normalising (compared without case, to be safe for
    /// tokens matched on normalised text).
    fn needs_full(&self, word: &str) -> bool {
        !self.added.is_empty() && {
            let lower = word.to_lowercase();
            self.added.iter().any(|(a_lower, a)| word.contains(a.as_str()) || lower.contains(a_lower.as_str()))
        }
    }

    /// Tokens of one whitespace-free word, no special tokens.
    fn count_word(&self, word: &str) -> tokenizers::Result<usize> {
        let mut n = tokenizers::NormalizedString::from(word);
        self.normalizer.normalize(&mut n)?;
        let mut pre = PreTokenizedString::from(n);
        self.pre_tokenizer.pre_tokenize(&mut pre)?;
        Ok(pre.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(piece, _, _)| self.word_piece(piece)).sum())
    }

    /// WordPiece's greedy longest match, counted: the pieces of `s`, or 1 (the unknown token)
    /// when it is too long or some remainder matches nothing.
    fn word_piece(&self, s: &str) -> usize {
        if s.chars().count() > self.max_chars {
            return 1;
        }
        let mut buf = String::with_capacity(self.prefix.len() + s.len());
        let (mut start, mut pieces) = (0, 0);
        while start < s.len() {
            let mut end = s.len();
            loop {
                if start >= end {
                    return 1;
                }
                let found = if start == 0 {
                    self.vocab.contains(&s[..end])
                } else {
                    buf.clear();
                    buf.push_str(&self.prefix);
                    buf.push_str(&s[start..end]);
                    self.vocab.contains(buf.as_str())
                };
                if found {
                    break;
                }
                end -= s[start..end].chars().next_back().map_or(1, char::len_utf8);
            }
            pieces += 1;
            start = end;
        }
        pieces
    }
}

/// What identifies a tokenizer file's contents for the derived file: its size and its
/// modification time (nanoseconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    len: u64,
    mtime_ns: u64,
}

impl Stamp {
    fn of(path: &std::path::Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        let mtime_ns = u64::try_from(m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos()).ok()?;
        Some(Stamp { len: m.len(), mtime_ns })
    }
}

/// The derived file's first line; the vocabulary follows, one string per line in byte order.
#[derive(Serialize, Deserialize)]
struct CacheHeader {
    version: u32,
    /// The slm that wrote it (the normaliser's serialised form is the `tokenizers` crate's).
    slm: String,
    source: Stamp,
    normalizer: NormalizerWrapper,
    pre_tokenizer: PreTokenizerWrapper,
    prefix: String,
    max_chars: usize,
    specials: usize,
    added: Vec<(String, String)>,
    /// How many vocabulary lines follow (a cut-off file is not used).
    words: usize,
}

/// The derived file's format; another version is rebuilt.
const CACHE_VERSION: u32 = 2;

/// The derived file's last line: holds spaces, so it is no vocabulary string (a BERT
/// vocabulary has none); a file cut anywhere lacks it.
const CACHE_END: &str = "end of vocabulary";

impl LeanBert {
    /// The lean counter from its derived file, if that file is whole and was made from the
    /// tokenizer file as it is now.
    fn from_cache(bytes: &[u8], source: Stamp) -> Option<LeanBert> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (first, rest) = text.split_once('\n')?;
        let rest = rest.strip_suffix(CACHE_END)?;
        let h: CacheHeader = serde_json::from_str(first).ok()?;
        if h.version != CACHE_VERSION || h.source != source || h.slm != env!("CARGO_PKG_VERSION") {
            return None;
        }
        let vocab = Vocab::from_lines(rest.into())?;
        if vocab.len() != h.words {
            return None;
        }
        Some(LeanBert {
            normalizer: h.normalizer,
            pre_tokenizer: h.pre_tokenizer,
            vocab,
            prefix: h.prefix,
            max_chars: h.max_chars,
            specials: h.specials,
            added: h.added,
        })
    }

    /// Writes the derived file (to a private name, then renamed into place, so a reader sees
    /// a whole file or none). Best effort: a folder it cannot write only costs the next start
    /// the parse. A vocabulary string holding a newline or empty (none in a BERT vocabulary)
    /// cannot be written this way, and nothing is.
    fn write_cache(&self, path: &std::path::Path, source: Stamp) {
        if self.vocab.contains(CACHE_END) {
            return;
        }
        let header = CacheHeader {
            version: CACHE_VERSION,
            slm: env!("CARGO_PKG_VERSION").to_string(),
            source,
            normalizer: self.normalizer.clone(),
            pre_tokenizer: self.pre_tokenizer.clone(),
            prefix: self.prefix.clone(),
            max_chars: self.max_chars,
            specials: self.specials,
            added: self.added.clone(),
            words: self.vocab.len(),
        };
        let Ok(mut out) = serde_json::to_string(&header) else { return };
        out.push('\n');
        out.push_str(&self.vocab.text);
        out.push_str(CACHE_END);
        // Unique per process and per call: two threads of one process may both write it.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
        let written = path.parent().is_some_and(|d| std::fs::create_dir_all(d).is_ok())
            && std::fs::write(&tmp, out).is_ok()
            && std::fs::rename(&tmp, path).is_ok();
        if !written {
            let _ = std::fs::remove_file(&tmp);
            tracing::debug!("could not write the token counter's derived file {}", path.display());
        }
    }
}

/// True when `c` ends a word for a BERT pipeline. The normaliser's `clean_text` deletes
/// control characters (Unicode "other") before it turns white space into spaces; the only
/// white-space characters that are also controls are U+000B, U+000C and U+0085 (tab, line
/// feed and carriage return it keeps as white space).
fn separates(c: char, clean_text: bool) -> bool {
    c.is_whitespace() && !(clean_text && matches!(c, '\u{b}' | '\u{c}' | '\u{85}'))
}

/// `clean_text` of a BERT normaliser (false for anything else).
fn cleans(n: Option<&NormalizerWrapper>) -> bool {
    matches!(n, Some(NormalizerWrapper::BertNormalizer(b)) if b.clean_text)
}

/// Most words remembered before the memo starts again.
const MEMO: usize = 65_536;

/// Counts tokens (no padding, no truncation): by [`LeanBert`] where it can, else by the
/// whole tokenizer.
pub struct TokenCounter {
    lean: Option<LeanBert>,
    /// The whole tokenizer: given, or loaded from `path` on the first word that needs it.
    full: OnceLock<std::result::Result<Tokenizer, String>>,
    path: Option<PathBuf>,
    /// Tokens the template adds; `None` when counts are not additive over words.
    specials: Option<usize>,
    /// The normaliser deletes control characters (see [`separates`]).
    clean_text: bool,
    words: Mutex<HashMap<Box<str>, u32>>,
}

impl TokenCounter {
    /// Wraps `tokenizer` (padding and truncation must already be off).
    pub fn new(tokenizer: Tokenizer) -> Self {
        let bert = matches!(tokenizer.get_normalizer(), Some(NormalizerWrapper::BertNormalizer(_)))
            && matches!(tokenizer.get_pre_tokenizer(), Some(PreTokenizerWrapper::BertPreTokenizer(_)))
            && matches!(tokenizer.get_model(), tokenizers::ModelWrapper::WordPiece(_));
        let specials = if bert { tokenizer.encode("", true).ok().map(|e| e.len()) } else { None };
        let clean_text = cleans(tokenizer.get_normalizer());
        let full = OnceLock::new();
        let _ = full.set(Ok(tokenizer));
        TokenCounter { lean: None, full, path: None, specials, clean_text, words: Mutex::new(HashMap::new()) }
    }

    /// Reads `tokenizer.json` at `path`: the lean counter for a BERT file, else the whole
    /// tokenizer. With a `cache` path, the lean counter is read from that derived file when it
    /// was made from this tokenizer file, and written there when it was not.
    pub fn from_file_cached(path: PathBuf, cache: Option<PathBuf>) -> std::result::Result<Self, String> {
        let stamp = Stamp::of(&path);
        if let (Some(c), Some(s)) = (&cache, stamp) {
            if let Some(lean) = std::fs::read(c).ok().and_then(|b| LeanBert::from_cache(&b, s)) {
                return Ok(Self::lean(lean, path));
            }
        }
        let json = std::fs::read(&path).map_err(|e| format!("cannot read tokenizer {}: {e}; run scripts/setup.sh", path.display()))?;
        match LeanBert::parse(&json) {
            Some(lean) => {
                if let (Some(c), Some(s)) = (&cache, stamp) {
                    lean.write_cache(c, s);
                }
                Ok(Self::lean(lean, path))
            }
            None => Ok(TokenCounter::new(whole(&json, &path)?)),
        }
    }

    fn lean(lean: LeanBert, path: PathBuf) -> Self {
        TokenCounter {
            specials: Some(lean.specials),
            clean_text: cleans(Some(&lean.normalizer)),
            lean: Some(lean),
            full: OnceLock::new(),
            path: Some(path),
            words: Mutex::new(HashMap::new()),
        }
    }

    /// The whole tokenizer, loading it on first use.
    fn full(&self) -> tokenizers::Result<&Tokenizer> {
        self.full
            .get_or_init(|| {
                let path = self.path.clone().ok_or("no tokenizer file")?;
                let json = std::fs::read(&path).map_err(|e| format!("cannot read tokenizer {}: {e}", path.display()))?;
                whole(&json, &path)
            })
            .as_ref()
            .map_err(|m| m.clone().into())
    }

    /// Tokens of one word, no special tokens.
    fn count_word(&self, word: &str) -> tokenizers::Result<usize> {
        match &self.lean {
            Some(l) if !l.needs_full(word) => l.count_word(word),
            _ => Ok(self.full()?.encode(word, false)?.len()),
        }
    }

    /// The number of tokens the model sees for `text`, special tokens included.
    pub fn count(&self, text: &str) -> tokenizers::Result<usize> {
        let Some(specials) = self.specials else {
            return Ok(self.full()?.encode(text, true)?.len());
        };
        let mut total = specials;
        for word in text.split(|c| separates(c, self.clean_text)).filter(|w| !w.is_empty()) {
            if let Some(&n) = self.words.lock().get(word) {
                total += n as usize;
                continue;
            }
            let n = self.count_word(word)?;
            let mut memo = self.words.lock();
            if memo.len() >= MEMO {
                memo.clear();
            }
            memo.insert(word.into(), n as u32);
            total += n;
        }
        Ok(total)
    }
}

/// The whole tokenizer of a file, padding and truncation off (tokenizer.json pads every text
/// to 128 tokens and truncates; a count must see neither).
fn whole(json: &[u8], path: &std::path::Path) -> std::result::Result<Tokenizer, String> {
    let mut t = Tokenizer::from_bytes(json).map_err(|e| format!("cannot read tokenizer {}: {e}; run scripts/setup.sh", path.display()))?;
    t.with_padding(None);
    t.with_truncation(None).map_err(|e| format!("tokenizer: {e}"))?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_tokenizer() -> (PathBuf, Tokenizer) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2/tokenizer.json");
        let json = std::fs::read(&path).expect("the model's tokenizer (scripts/setup.sh)");
        let t = whole(&json, &path).unwrap();
        (path, t)
    }

    /// Texts where a hand-written count could go wrong: accents, CJK, controls, punctuation,
    /// added tokens inside words, words past WordPiece's 100 characters, unknown pieces.
    const EDGES: &[&str] = &[
        "",
        "   ",
        "loop ci lap 12: no eligible memories yet; threshold 0.800",
        "loop ci lap 13: best match #42 scored 0.613 < threshold 0.800; 3 eligible memories",
        "Héllo\tWORLD\n\nnaïve café — 東京タワー unbelievably-long-hyphenated_word",
        "[CLS] inside text [SEP] and [UNK]x [MASK] [cls] a[SEP]b [PAD][PAD]",
        "tabs\u{a0}non-breaking\u{2003}em-space\u{0}control\u{7}bell \u{feff}bom \u{200b}zw",
        "emoji 🚀🚀 and numbers 3.14159, 1e-9, 0x1F ☃️ 👩‍👩‍👧",
        "combining e\u{301}te\u{301} Ångström ﬁne ＦＵＬＬＷＩＤＴＨ ١٢٣ Ελληνικά русский 한국어 中文字符",
        "PR #42 is NOT approved; v2.4.1-rc.3 release/2.4 src/main.rs:120 (see https://x.y/z?q=1&r=2)",
        "ǅungla ß ẞ İstanbul ﬀ Ⅻ ⅻ ㎒ ½ ² ℌ 𝔥𝔢𝔩𝔩𝔬 ｶﾀｶﾅ",
    ];

    /// Seeded random strings over ranges the normaliser treats differently.
    fn random_texts(n: usize) -> Vec<String> {
        const RANGES: &[(u32, u32)] = &[
            (0x20, 0x7e),
            (0x0, 0x20),
            (0xa0, 0x17f),
            (0x300, 0x36f),
            (0x370, 0x3ff),
            (0x400, 0x4ff),
            (0x600, 0x6ff),
            (0x2000, 0x206f),
            (0x3040, 0x30ff),
            (0x4e00, 0x4e80),
            (0xac00, 0xac40),
            (0xff00, 0xffef),
            (0x1f300, 0x1f64f),
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..n)
            .map(|_| {
                let len = (next() % 40) as usize;
                (0..len)
                    .filter_map(|_| {
                        if next() % 5 == 0 {
                            return Some(' ');
                        }
                        let (lo, hi) = RANGES[(next() % RANGES.len() as u64) as usize];
                        char::from_u32(lo + (next() % u64::from(hi - lo + 1)) as u32)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn lean_counts_equal_full_encodes() {
        let (path, full) = model_tokenizer();
        let c = TokenCounter::from_file_cached(path, None).unwrap();
        assert!(c.lean.is_some(), "all-MiniLM-L6-v2 is a BERT file: the lean counter must serve it");
        let docs = [include_str!("../../README.md"), include_str!("../../ARCHITECTURE.md"), include_str!("../../docs/loops.md")];
        let long = "supercalifragilisticexpialidocious".repeat(5); // > 100 chars: one [UNK]
        let texts: Vec<String> = EDGES
            .iter()
            .map(|s| s.to_string())
            .chain([long])
            .chain(docs.iter().flat_map(|d| d.lines().map(str::to_string)))
            .chain(random_texts(3_000))
            .collect();
        for text in &texts {
            let want = full.encode(text.as_str(), true).unwrap().len();
            for _ in 0..2 {
                // The second pass comes from the memo.
                assert_eq!(c.count(text).unwrap(), want, "{text:?}");
            }
        }
        // Only words holding an added token loaded the whole tokenizer.
        let fresh = TokenCounter::from_file_cached(model_tokenizer().0, None).unwrap();
        fresh.count(&texts[2]).unwrap();
        assert!(fresh.full.get().is_none(), "a plain lap text must not load the whole tokenizer");
    }

    #[test]
    fn the_derived_file_counts_alike_and_follows_its_source() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("tokenizer.json");
        std::fs::copy(model_tokenizer().0, &source).unwrap();
        let cache = tmp.path().join("cache/tokenizer.count");
        let (_, full) = model_tokenizer();
        let texts: Vec<String> = EDGES.iter().map(|s| s.to_string()).chain(random_texts(500)).collect();
        let check = |c: &TokenCounter| {
            for text in &texts {
                assert_eq!(c.count(text).unwrap(), full.encode(text.as_str(), true).unwrap().len(), "{text:?}");
            }
        };
        // The first load parses the JSON and writes the derived file; the second reads it.
        check(&TokenCounter::from_file_cached(source.clone(), Some(cache.clone())).unwrap());
        let written = std::fs::read(&cache).expect("the derived file is written");
        let stamp = Stamp::of(&source).unwrap();
        let from_file = LeanBert::from_cache(&written, stamp).expect("the derived file reads back");
        assert_eq!(from_file.vocab.len(), 30_522);
        check(&TokenCounter::from_file_cached(source.clone(), Some(cache.clone())).unwrap());
        // A changed source (here only its time) is not read from the old file, which is rebuilt.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        std::fs::File::options().write(true).open(&source).unwrap().set_modified(later).unwrap();
        assert!(LeanBert::from_cache(&written, Stamp::of(&source).unwrap()).is_none());
        check(&TokenCounter::from_file_cached(source.clone(), Some(cache.clone())).unwrap());
        assert!(LeanBert::from_cache(&std::fs::read(&cache).unwrap(), Stamp::of(&source).unwrap()).is_some(), "rebuilt");
        // A cut-off or damaged file is not used.
        for cut in [&written[..written.len() / 2], &written[..written.len() - 1]] {
            assert!(LeanBert::from_cache(cut, stamp).is_none(), "a file cut at {} bytes was used", cut.len());
        }
        std::fs::write(&cache, b"{not json\nx").unwrap();
        check(&TokenCounter::from_file_cached(source, Some(cache)).unwrap());
    }

    #[test]
    fn a_whole_tokenizer_counts_alike() {
        let (_, full) = model_tokenizer();
        let c = TokenCounter::new(full.clone());
        assert!(c.specials.is_some(), "all-MiniLM-L6-v2 is a BERT pipeline");
        for text in EDGES.iter().map(|s| s.to_string()).chain(random_texts(300)) {
            assert_eq!(c.count(&text).unwrap(), full.encode(text.as_str(), true).unwrap().len(), "{text:?}");
        }
    }
}
