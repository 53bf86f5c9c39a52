//! Token counts by the model's own tokenizer, cheap enough for every loop lap.
//!
//! Loops count the tokens of each lap's ledger text (SPEC: `max_tokens`), so a thousand
//! waiting loops count a thousand texts a second. A full `encode` allocates per character
//! (alignments, normalised strings) and was most of an idle lap's cost. For a BERT pipeline
//! (BertNormalizer, BertPreTokenizer, WordPiece: all-MiniLM-L6-v2's), the count is exactly
//! additive over whitespace-separated words: the normaliser acts per character and turns
//! whitespace into spaces, the pre-tokeniser splits on whitespace first, and WordPiece sees
//! one pre-token at a time. So the count is the special tokens of the template plus, for each
//! word, its count alone, which is remembered: lap texts repeat their words. Any other
//! pipeline is counted with a full `encode`. The unit test checks both ways agree.
//!
//! Loading is made cheap too ([`load_bert`]): `Tokenizer::from_file` reads the 30,522-word
//! vocabulary through serde's untagged-enum buffering and took 30–50 ms, most of a `slm loop
//! demo`. A BERT tokenizer file is instead read section by section into its concrete types
//! (the vocabulary straight into WordPiece's map) and assembled; anything else falls back to
//! `from_file`. A test checks the assembled tokenizer counts exactly as the loaded one.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::Deserialize;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, NormalizerWrapper, PreTokenizerWrapper, Tokenizer};

/// The sections of a `tokenizer.json` a counting BERT tokenizer needs, each read into its
/// concrete type (not `ModelWrapper`, whose untagged enum buffers the whole vocabulary).
#[derive(Deserialize)]
struct BertFile {
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    normalizer: NormalizerWrapper,
    pre_tokenizer: PreTokenizerWrapper,
    post_processor: Option<PostProcessorWrapper>,
    model: WordPiece,
}

/// Assembles the tokenizer of a BERT-style `tokenizer.json` (BertNormalizer,
/// BertPreTokenizer, WordPiece) without padding or truncation; `None` for any other file, which
/// the caller then loads whole.
pub fn load_bert(json: &[u8]) -> Option<Tokenizer> {
    let f: BertFile = serde_json::from_slice(json).ok()?;
    if !matches!(f.normalizer, NormalizerWrapper::BertNormalizer(_))
        || !matches!(f.pre_tokenizer, PreTokenizerWrapper::BertPreTokenizer(_))
    {
        return None;
    }
    let mut t = Tokenizer::new(f.model);
    t.with_normalizer(Some(f.normalizer)).ok()?;
    t.with_pre_tokenizer(Some(f.pre_tokenizer));
    t.with_post_processor(f.post_processor);
    let (special, plain): (Vec<AddedToken>, Vec<AddedToken>) = f.added_tokens.into_iter().partition(|a| a.special);
    t.add_special_tokens(special).ok()?;
    t.add_tokens(plain).ok()?;
    Some(t)
}

/// Most words remembered before the memo starts again.
const MEMO: usize = 65_536;

/// A tokenizer that counts tokens (no padding, no truncation).
pub struct TokenCounter {
    tokenizer: Tokenizer,
    /// Tokens the template adds (`[CLS]`, `[SEP]`); `None` when counts are not additive.
    specials: Option<usize>,
    words: Mutex<HashMap<Box<str>, u32>>,
}

impl TokenCounter {
    /// Wraps `tokenizer` (padding and truncation must already be off).
    pub fn new(tokenizer: Tokenizer) -> Self {
        let bert = matches!(tokenizer.get_normalizer(), Some(NormalizerWrapper::BertNormalizer(_)))
            && matches!(tokenizer.get_pre_tokenizer(), Some(PreTokenizerWrapper::BertPreTokenizer(_)))
            && matches!(tokenizer.get_model(), tokenizers::ModelWrapper::WordPiece(_));
        let specials = if bert { tokenizer.encode("", true).ok().map(|e| e.len()) } else { None };
        TokenCounter { tokenizer, specials, words: Mutex::new(HashMap::new()) }
    }

    /// The number of tokens the model sees for `text`, special tokens included.
    pub fn count(&self, text: &str) -> tokenizers::Result<usize> {
        let Some(specials) = self.specials else {
            return Ok(self.tokenizer.encode(text, true)?.len());
        };
        let mut total = specials;
        for word in text.split(char::is_whitespace).filter(|w| !w.is_empty()) {
            if let Some(&n) = self.words.lock().get(word) {
                total += n as usize;
                continue;
            }
            let n = self.tokenizer.encode(word, false)?.len();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_by_word_counts_equal_full_encodes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2/tokenizer.json");
        let mut t = Tokenizer::from_file(&path).expect("the model's tokenizer (scripts/setup.sh)");
        t.with_padding(None);
        t.with_truncation(None).unwrap();
        let full = t.clone();
        let c = TokenCounter::new(t);
        assert!(c.specials.is_some(), "all-MiniLM-L6-v2 is a BERT pipeline");
        let texts = [
            "",
            "   ",
            "loop ci lap 12: no eligible memories yet; threshold 0.800",
            "loop ci lap 13: best match #42 scored 0.613 < threshold 0.800; 3 eligible memories",
            "Héllo\tWORLD\n\nnaïve café — 東京タワー unbelievably-long-hyphenated_word",
            "[CLS] inside text [SEP] and [UNK]x [MASK]",
            "tabs\u{a0}non-breaking\u{2003}em-space\u{0}control\u{7}bell",
            &"supercalifragilisticexpialidocious".repeat(5), // longer than WordPiece's 100 chars
            "emoji 🚀🚀 and numbers 3.14159, 1e-9, 0x1F",
            "combining e\u{301}te\u{301} Ångström ﬁne ＦＵＬＬＷＩＤＴＨ ١٢٣ Ελληνικά русский 한국어 中文字符",
            "PR #42 is NOT approved; v2.4.1-rc.3 release/2.4 src/main.rs:120 (see https://x.y/z?q=1&r=2)",
        ];
        let json = std::fs::read(&path).unwrap();
        let lean = TokenCounter::new(load_bert(&json).expect("all-MiniLM-L6-v2 is a BERT tokenizer file"));
        assert!(lean.specials.is_some());
        for text in texts {
            assert_eq!(lean.count(text).unwrap(), full.encode(text, true).unwrap().len(), "assembled: {text:?}");
            for _ in 0..2 {
                // The second pass comes from the memo.
                assert_eq!(c.count(text).unwrap(), full.encode(text, true).unwrap().len(), "{text:?}");
            }
        }
    }
}
