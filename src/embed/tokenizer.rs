//! The tokenizer the embedding model reads, built by slm on its own thread so that it loads
//! while ONNX Runtime builds the model's session on another core.
//!
//! fastembed builds both in turn: the session (about 40 ms) and then the tokenizer, whose
//! `tokenizer.json` holds a 30,522-word vocabulary that takes about 30 ms to parse into hash
//! maps. A one-shot `slm recall` waits for both before it can embed its query, so in turn
//! they were half of its time on a small store. [`super::onnx`] now hands fastembed a
//! [`PLACEHOLDER`] tokenizer (a two-word vocabulary, parsed in microseconds), builds the real
//! one here at the same time, and swaps it in before the first embedding.
//!
//! [`load`] configures the tokenizer by the rules fastembed's own loader applies to a
//! user-defined model (padding to the longest text of a batch, truncation at the model's
//! limit, the special tokens of `special_tokens_map.json`); the test below holds the two to
//! the same encodings and settings, so a fastembed upgrade that changes its rules fails here
//! instead of shifting vectors.

use tokenizers::{AddedToken, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::ModelFiles;

/// Longest input, in tokens, that the model reads (fastembed's default; the model's own
/// limit in `tokenizer_config.json` is the same 512).
pub const MAX_LENGTH: usize = 512;

/// A valid WordPiece tokenizer with a two-word vocabulary: what fastembed parses while the
/// real one loads beside it. It never tokenizes anything: [`super::onnx`] replaces it first.
pub const PLACEHOLDER: &[u8] = br###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,
"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
"max_input_chars_per_word":100,"vocab":{"[UNK]":0,"[PAD]":1}}}"###;

fn json(files: &ModelFiles, name: &str) -> Result<serde_json::Value, String> {
    let p = files.model_dir.join(name);
    let bytes = std::fs::read(&p).map_err(|e| format!("cannot read model file {}: {e}; run scripts/setup.sh", p.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("model file {} is not valid JSON: {e}", p.display()))
}

/// The model's tokenizer from `files`, configured as fastembed configures it.
pub fn load(files: &ModelFiles) -> Result<Tokenizer, String> {
    let bad = |what: &str| format!("{}: {what}", files.model_dir.join("tokenizer_config.json").display());
    let config = json(files, "config.json")?;
    let special = json(files, "special_tokens_map.json")?;
    let tokenizer_config = json(files, "tokenizer_config.json")?;
    let path = files.model_dir.join("tokenizer.json");
    let mut tokenizer = Tokenizer::from_file(&path).map_err(|e| format!("cannot load {}: {e}", path.display()))?;

    // Some models give a huge float here ("no limit"), hence f64 and the clamp.
    let model_max = tokenizer_config["model_max_length"].as_f64().ok_or_else(|| bad("no numeric model_max_length"))?;
    let max_length = MAX_LENGTH.min(model_max as f32 as usize);
    let pad = &tokenizer_config["pad_token"];
    let pad_token = pad.as_str().or_else(|| pad["content"].as_str()).ok_or_else(|| bad("no string pad_token"))?.to_string();
    let pad_id = config["pad_token_id"].as_u64().map(|id| id as u32).or_else(|| tokenizer.token_to_id(&pad_token)).unwrap_or(0);
    tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, pad_token, pad_id, ..Default::default() }));
    tokenizer
        .with_truncation(Some(TruncationParams { max_length, ..Default::default() }))
        .map_err(|e| format!("cannot set the tokenizer's truncation: {e}"))?;

    let Some(special) = special.as_object() else { return Ok(tokenizer) };
    for value in special.values() {
        let token = match value {
            serde_json::Value::String(content) => Some(AddedToken { content: content.clone(), special: true, ..Default::default() }),
            _ => match (
                value["content"].as_str(),
                value["single_word"].as_bool(),
                value["lstrip"].as_bool(),
                value["rstrip"].as_bool(),
                value["normalized"].as_bool(),
            ) {
                (Some(content), Some(single_word), Some(lstrip), Some(rstrip), Some(normalized)) => {
                    Some(AddedToken { content: content.into(), special: true, single_word, lstrip, rstrip, normalized })
                }
                _ => None,
            },
        };
        if let Some(t) = token {
            tokenizer.add_special_tokens([t]).map_err(|e| format!("cannot add a special token: {e}"))?;
        }
    }
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastembed::{InitOptionsUserDefined, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel};

    fn read(files: &ModelFiles, name: &str) -> Vec<u8> {
        std::fs::read(files.model_dir.join(name)).unwrap()
    }

    /// What fastembed itself builds from the same files (with the model loaded the plain way).
    fn fastembeds(files: &ModelFiles) -> Tokenizer {
        let env = super::super::onnx::runtime(files).unwrap();
        let tokenizer_files = TokenizerFiles {
            tokenizer_file: read(files, "tokenizer.json"),
            config_file: read(files, "config.json"),
            special_tokens_map_file: read(files, "special_tokens_map.json"),
            tokenizer_config_file: read(files, "tokenizer_config.json"),
        };
        let model = UserDefinedEmbeddingModel::new(read(files, "model.onnx"), tokenizer_files);
        let options = InitOptionsUserDefined::new().with_environment(env).with_max_length(MAX_LENGTH);
        TextEmbedding::try_new_from_user_defined(model, options).unwrap().tokenizer
    }

    #[test]
    fn loads_what_fastembed_would() {
        let files = ModelFiles::locate().expect("model files (scripts/setup.sh)");
        let ours = load(&files).unwrap();
        let theirs = fastembeds(&files);
        assert_eq!(format!("{:?}", ours.get_padding()), format!("{:?}", theirs.get_padding()));
        assert_eq!(format!("{:?}", ours.get_truncation()), format!("{:?}", theirs.get_truncation()));
        let sorted = |t: &Tokenizer| {
            let mut v: Vec<String> = t.get_added_tokens_decoder().iter().map(|(id, t)| format!("{id} {t:?}")).collect();
            v.sort();
            v
        };
        assert_eq!(sorted(&ours), sorted(&theirs));
        let long = "the release is approved and merged ".repeat(120);
        let texts = [
            "PR #42 is approved",
            "NOT approved: [CLS] tokens [SEP] and [MASK] inside text",
            "Ünïcödé, emoji 🚀, CJK 漢字 and a tab\there",
            "",
            long.as_str(),
        ];
        let a = ours.encode_batch(texts.to_vec(), true).unwrap();
        let b = theirs.encode_batch(texts.to_vec(), true).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.get_ids(), y.get_ids());
            assert_eq!(x.get_attention_mask(), y.get_attention_mask());
            assert_eq!(x.get_type_ids(), y.get_type_ids());
        }
        assert_eq!(a[4].get_ids().len(), MAX_LENGTH, "a long text is truncated at the model's limit");
    }

    #[test]
    fn the_placeholder_parses() {
        assert!(Tokenizer::from_bytes(PLACEHOLDER).is_ok());
    }
}
