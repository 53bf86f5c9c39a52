//! The optional natural-language-inference verifier of the gate (`nli:DIR`, SPEC §2).
//!
//! A user who wants a stricter check than cosine similarity supplies an NLI cross-encoder as an
//! ONNX export: `DIR/model.onnx`, `DIR/tokenizer.json` and `DIR/config.json` (whose `id2label`
//! names the classes). [`NliModel::entailment`] reads a (premise, hypothesis) pair jointly,
//! premise = the candidate memory and hypothesis = the query, and returns P(entailment). No
//! model ships with slm and nothing is downloaded; docs/loops.md names public models to export.
//!
//! Relation to the embedder ([`crate::embed`]): both run on the same ONNX Runtime library, and
//! ONNX Runtime allows one environment per process, so this module takes the embedder's
//! environment (`embed::runtime`) instead of creating its own. Unlike the embedder,
//! which encodes texts one at a time into vectors through fastembed, a cross-encoder needs
//! sentence-pair tokenisation (segment ids) and class logits, which fastembed does not offer;
//! so the session and the tokenizer are driven here directly with `ort` and `tokenizers`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::session::Session;
use ort::value::{Tensor, TensorElementType};
use tokenizers::{Tokenizer, TruncationParams};

use crate::embed::ModelFiles;
use crate::{Error, Result};

/// The field every load error names: the gate's verifier list, where `nli:DIR` was given.
const FIELD: &str = "gate_verify";

/// The files an NLI folder must hold.
pub const NLI_FILES: [&str; 3] = ["model.onnx", "tokenizer.json", "config.json"];

/// The longest input when neither the tokenizer nor the config says: BERT-family models have
/// 512 positions.
const DEFAULT_MAX_LEN: usize = 512;

/// An NLI cross-encoder loaded from a user's folder. `Send + Sync`: the session is behind a
/// mutex, because `ort` needs `&mut Session` to run (ONNX Runtime's allocators are not safe to
/// share across concurrent runs).
pub struct NliModel {
    session: Mutex<Session>,
    tokenizer: Tokenizer,
    /// Label names from `id2label`, in index order (as written in config.json).
    labels: Vec<String>,
    /// Index of the entailment logit in the model's output.
    entailment: usize,
    /// Whether the graph declares these inputs (many exports, e.g. RoBERTa's, have no
    /// `token_type_ids`; feeding an undeclared input is an error in ONNX Runtime).
    wants_attention_mask: bool,
    wants_token_type_ids: bool,
    /// The element type of the integer inputs (int64 in every common export; int32 accepted).
    input_type: TensorElementType,
    max_len: usize,
}

impl std::fmt::Debug for NliModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NliModel").field("labels", &self.labels).field("max_len", &self.max_len).finish_non_exhaustive()
    }
}

/// What config.json contributes: the labels and where entailment is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LabelMap {
    pub labels: Vec<String>,
    pub entailment: usize,
    /// `max_position_embeddings`, when present.
    pub max_positions: Option<usize>,
}

/// Parses config.json's text. `Err` holds the rule that was broken, as a phrase.
///
/// `id2label` keys are indices written as strings (`{"0": "contradiction", ...}`) and must be
/// exactly 0..n. Names are compared case-insensitively. An `entailment` label is required; a
/// three-way model must also name `contradiction`, so that a generic `LABEL_0/LABEL_1/LABEL_2`
/// export (whose meaning we cannot know) is refused rather than guessed. Two-label models
/// (`entailment` / `not_entailment`) are fine.
pub(crate) fn parse_config(text: &str) -> std::result::Result<LabelMap, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("config.json is not valid JSON: {e}"))?;
    let id2label = v
        .get("id2label")
        .and_then(|m| m.as_object())
        .ok_or("config.json has no id2label object naming the labels (entailment, contradiction, neutral)")?;
    let mut by_index = BTreeMap::new();
    for (k, name) in id2label {
        let i: usize = k.trim().parse().map_err(|_| format!("config.json id2label key {k:?} is not an index"))?;
        let name = name.as_str().ok_or_else(|| format!("config.json id2label[{k:?}] is not a string"))?;
        if by_index.insert(i, name.to_string()).is_some() {
            return Err(format!("config.json id2label has index {i} twice"));
        }
    }
    let n = by_index.len();
    if n < 2 || by_index.keys().copied().ne(0..n) {
        return Err(format!("config.json id2label must map the indices 0..n (n >= 2), got {:?}", by_index.keys()));
    }
    let labels: Vec<String> = by_index.into_values().collect();
    let find = |want: &str| labels.iter().position(|l| l.trim().eq_ignore_ascii_case(want));
    let names = labels.join(", ");
    let entailment = find("entailment").ok_or_else(|| format!("config.json id2label has no entailment label (labels: {names})"))?;
    if n > 2 && find("contradiction").is_none() {
        return Err(format!("config.json id2label has no contradiction label (labels: {names})"));
    }
    let as_usize = |key: &str| v.get(key).and_then(|x| x.as_u64()).map(|x| x as usize);
    Ok(LabelMap { labels, entailment, max_positions: as_usize("max_position_embeddings") })
}

/// Softmax of one row of logits, stable for large values.
pub(crate) fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = row.iter().map(|x| (x - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

fn invalid(value: &Path, rule: impl Into<String>) -> Error {
    Error::invalid(FIELD, value.display(), rule)
}

fn model_error(e: impl std::fmt::Display) -> Error {
    Error::Model { message: format!("NLI model: {e}") }
}

/// Checks, without loading anything, that `dir` holds the three files a model needs, so a bad
/// `nli:` path is invalid input (naming the missing file) before anything is read or written.
/// All three are checked before any is read, so the first error names a missing file rather
/// than a parse failure of another one.
pub fn check_dir(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        return Err(invalid(dir, format!("nli folder not found; it must hold {}", NLI_FILES.join(", "))));
    }
    for name in NLI_FILES {
        let path = dir.join(name);
        if !path.is_file() || std::fs::File::open(&path).is_err() {
            return Err(invalid(&path, format!("nli folder has no readable {name}")));
        }
    }
    Ok(())
}

impl NliModel {
    /// Loads DIR/model.onnx, DIR/tokenizer.json, DIR/config.json. A missing/unreadable file or a
    /// config without entailment+contradiction labels in id2label →
    /// `Error::invalid("gate_verify", <dir or file>, <rule naming the missing file>)`.
    /// (Two-label entailment / not_entailment models need no contradiction label.)
    ///
    /// Only a missing or broken ONNX Runtime library (the same one the embedder uses) is an
    /// [`Error::Model`]: that is the installation's fault, not the user's folder.
    pub fn load(dir: &Path) -> Result<NliModel> {
        check_dir(dir)?;
        let config_path = dir.join("config.json");
        let config = std::fs::read_to_string(&config_path).map_err(|e| invalid(&config_path, format!("cannot read config.json: {e}")))?;
        let map = parse_config(&config).map_err(|rule| invalid(&config_path, rule))?;

        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| invalid(&tok_path, format!("cannot read tokenizer.json: {e}")))?;
        // The longest input: the tokenizer's own truncation if it has one (it was exported
        // with the model), else the model's positions capped at 512 (RoBERTa says 514 because
        // two positions are reserved), else 512.
        let max_len = tokenizer
            .get_truncation()
            .map(|t| t.max_length)
            .or(map.max_positions.map(|p| p.min(DEFAULT_MAX_LEN)))
            .unwrap_or(DEFAULT_MAX_LEN);
        // No padding: pairs run one a call (`entailment`), and tokenizer.json may say
        // `Fixed(128)` (MiniLM's does), which would only add work.
        tokenizer.with_padding(None);
        // LongestFirst trims the longer of premise and hypothesis first, so a long memory
        // cannot push the (usually short) query out of the window.
        let truncation = TruncationParams { max_length: max_len, ..tokenizer.get_truncation().cloned().unwrap_or_default() };
        tokenizer
            .with_truncation(Some(truncation))
            .map_err(|e| invalid(&tok_path, format!("tokenizer.json cannot truncate to {max_len} tokens: {e}")))?;

        let session = open_session(dir)?;
        let names: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
        let model_path = dir.join("model.onnx");
        if !names.contains(&"input_ids") {
            return Err(invalid(&model_path, format!("model.onnx has no input_ids input (inputs: {})", names.join(", "))));
        }
        if let Some(other) = names.iter().find(|n| !matches!(**n, "input_ids" | "attention_mask" | "token_type_ids")) {
            return Err(invalid(&model_path, format!("model.onnx wants an input slm cannot supply: {other}")));
        }
        let input_type = session.inputs()[0].dtype().tensor_type();
        let input_type = match input_type {
            Some(t @ (TensorElementType::Int64 | TensorElementType::Int32)) => t,
            other => return Err(invalid(&model_path, format!("model.onnx inputs must be int64 or int32, not {other:?}"))),
        };
        if session.outputs().is_empty() {
            return Err(invalid(&model_path, "model.onnx has no output"));
        }
        Ok(NliModel {
            wants_attention_mask: names.contains(&"attention_mask"),
            wants_token_type_ids: names.contains(&"token_type_ids"),
            session: Mutex::new(session),
            tokenizer,
            labels: map.labels,
            entailment: map.entailment,
            input_type,
            max_len,
        })
    }

    /// P(entailment) for each (premise, hypothesis) pair, softmax over the model's logits,
    /// each pair truncated to the model's max length (e.g. 512 or the tokenizer's).
    ///
    /// One pair per ONNX Runtime call, never a padded batch: a dynamically quantised model
    /// (such as slm's own int8 verifier) takes one activation scale per call, so in a batch a
    /// pair's probability moves with its companions (measured 2026-12-07: 55 of 3,302 dev
    /// verdicts flipped, up to 0.97 apart). Alone, the probability is a function of the pair
    /// and the model, which the gate promises (SPEC §4). It costs about 65 % more time per
    /// candidate than a batch of 32 short pairs (benches/verifier.rs: 1.88 ms against 1.14 ms).
    pub fn entailment(&self, pairs: &[(&str, &str)]) -> Result<Vec<f32>> {
        pairs.iter().map(|&pair| self.run_one(pair)).collect()
    }

    /// The label names in index order, for display.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The longest input in tokens (pairs are truncated to it).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// P(entailment) of one pair, in one ONNX Runtime call.
    fn run_one(&self, pair: (&str, &str)) -> Result<f32> {
        // `encode`, not `encode_batch`: the latter hands even one pair to rayon, whose spinning
        // workers took the cores from ONNX Runtime's (measured: 2.7 ms a short pair, against
        // 1.5 ms for the same run from Python).
        let enc = self.tokenizer.encode(pair, true).map_err(|e| model_error(format!("tokenizer: {e}")))?;
        let seq = enc.len();
        let mut feed: Vec<(&str, ort::value::DynValue)> = Vec::with_capacity(3);
        let mut add = |name: &'static str, data: &[u32]| -> Result<()> {
            let value = match self.input_type {
                TensorElementType::Int32 => {
                    let d: Vec<i32> = data.iter().map(|&x| x as i32).collect();
                    Tensor::from_array(([1, seq], d)).map_err(model_error)?.into_dyn()
                }
                _ => {
                    let d: Vec<i64> = data.iter().map(|&x| i64::from(x)).collect();
                    Tensor::from_array(([1, seq], d)).map_err(model_error)?.into_dyn()
                }
            };
            feed.push((name, value));
            Ok(())
        };
        add("input_ids", enc.get_ids())?;
        if self.wants_attention_mask {
            add("attention_mask", enc.get_attention_mask())?;
        }
        if self.wants_token_type_ids {
            add("token_type_ids", enc.get_type_ids())?;
        }

        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let outputs = session.run(feed).map_err(|e| model_error(format!("inference failed: {e}")))?;
        let (shape, logits) =
            outputs[0].try_extract_tensor::<f32>().map_err(|e| model_error(format!("the first output is not a float tensor: {e}")))?;
        let n = self.labels.len();
        if shape.len() != 2 || shape[0] != 1 || shape[1] as usize != n {
            return Err(model_error(format!("the first output has shape {:?}; want [1, {n}] (one logit per id2label entry)", &shape[..])));
        }
        Ok(softmax(logits)[self.entailment])
    }
}

/// Opens `DIR/model.onnx` in the process's one ONNX Runtime environment. The file is given to
/// ONNX Runtime by path (not read into a buffer here), so external weight files next to it
/// are found and memory-mapped by the runtime itself.
fn open_session(dir: &Path) -> Result<Session> {
    let ort_lib = ModelFiles::locate_ort_lib()?;
    // `runtime` only reads `ort_lib`; if the embedder already started the environment, this
    // returns that one and the path is not used again.
    let env = crate::embed::runtime(&ModelFiles { model_dir: dir.to_path_buf(), ort_lib, source: None })
        .map_err(|message| Error::Model { message })?;
    let model_path: PathBuf = dir.join("model.onnx");
    let bad = |e: &dyn std::fmt::Display| invalid(&model_path, format!("ONNX Runtime cannot load model.onnx: {e}"));
    Session::builder(&env).map_err(|e| model_error(&e))?.commit_from_file(&model_path).map_err(|e| bad(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nli_config_maps_labels_in_any_order_and_case() {
        let m = parse_config(r#"{"id2label": {"2": "NEUTRAL", "0": "Contradiction", "1": "ENTAILMENT"}, "max_position_embeddings": 514}"#)
            .unwrap();
        assert_eq!(m.labels, ["Contradiction", "ENTAILMENT", "NEUTRAL"]);
        assert_eq!(m.entailment, 1);
        assert_eq!(m.max_positions, Some(514));
        // Two-label models only need entailment.
        let m = parse_config(r#"{"id2label": {"0": "entailment", "1": "not_entailment"}}"#).unwrap();
        assert_eq!(m.entailment, 0);
    }

    #[test]
    fn nli_config_refuses_generic_or_broken_labels() {
        let generic = parse_config(r#"{"id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}"#);
        assert!(generic.unwrap_err().contains("no entailment label"));
        let no_contra = parse_config(r#"{"id2label": {"0": "entailment", "1": "LABEL_1", "2": "LABEL_2"}}"#);
        assert!(no_contra.unwrap_err().contains("no contradiction label"));
        assert!(parse_config(r#"{"label2id": {}}"#).unwrap_err().contains("no id2label"));
        assert!(parse_config(r#"{"id2label": {"0": "entailment", "2": "x"}}"#).unwrap_err().contains("0..n"));
        assert!(parse_config(r#"{"id2label": {"a": "entailment"}}"#).unwrap_err().contains("not an index"));
        assert!(parse_config("not json").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn nli_softmax_is_stable_and_sums_to_one() {
        let p = softmax(&[1000.0, 0.0, -1000.0]);
        assert!((p[0] - 1.0).abs() < 1e-6 && p[2] == 0.0);
        let p = softmax(&[0.0, 3.0, 0.0]);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((p[1] - 3f32.exp() / (3f32.exp() + 2.0)).abs() < 1e-6);
    }

    #[test]
    fn nli_model_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<NliModel>();
    }
}
