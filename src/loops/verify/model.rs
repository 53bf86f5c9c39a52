//! `model`: slm's own gate verifier, a small cross-encoder trained for "has this happened?".
//!
//! The model is all-MiniLM-L6-v2 fine-tuned on the team's corpus (`data/gate/`, trained by
//! `scripts/train-verifier.py`, described in `models/verifier/README.md`) and shipped in the
//! repository as an int8 ONNX file. It reads (premise = the candidate memory, hypothesis = the
//! gate query) together and gives P(the memory states that the query's event has happened);
//! the candidate passes at [`VerifierModel::min`] or above, a figure chosen on the dev split
//! and stored in the model's `config.json` (`slm_min_probability`), so a retrained model
//! carries its own threshold.
//!
//! Two costs are kept off the paths that do not need the model:
//! - **Loading is lazy and once per process.** Building a chain with `model` reads nothing; the
//!   model loads the first time a lap has a candidate to verify ([`shared`]), so a poll with
//!   no new memories, and a lap 1 over a store with no candidate, load nothing. A run that
//!   goes on to wait loads it in the background then ([`warm_in_background`]), so the signal
//!   it waits for is verified without a load in between. Every run of
//!   the process then shares the one session (it runs on the embedder's ONNX Runtime
//!   environment, through [`crate::nli::NliModel`], which already drives sentence-pair
//!   cross-encoders).
//! - **A verdict is computed once per (query, memory) in a process.** The probability is a
//!   function of the two texts and the model, so it is cached (`Verdicts`): 1,000 loops
//!   waiting on one query verify a new candidate once.
//!
//! The shipped files are checked against the checksums compiled into the binary
//! (`models/verifier/SHA256SUMS`) before they are loaded: a damaged or missing file is an
//! [`Error::Model`] naming it (exit 1 on the CLI), and the loop never passes unverified.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{Candidate, Refusal, Verifier};
use crate::nli::NliModel;
use crate::{Error, Result};

/// The verifier's folder inside `models/`.
pub const VERIFIER_SUBDIR: &str = "verifier";

/// `sha256  name` lines of the shipped files, as written by the training script.
const SHA256SUMS: &str = include_str!("../../../models/verifier/SHA256SUMS");

/// Verdicts kept per process before the cache starts over (a verdict is ~100 bytes of key).
const CACHE_MAX: usize = 100_000;

/// The loaded model and its acceptance threshold.
pub struct VerifierModel {
    nli: NliModel,
    min: f32,
    /// Characters the base tokenizer cannot see, and the word each becomes before
    /// tokenisation (`slm_symbols` in config.json, written by the training script, which
    /// applies the same table; `slm_dropped` lists characters removed).
    symbols: HashMap<char, String>,
    dropped: Vec<char>,
    dir: PathBuf,
}

impl std::fmt::Debug for VerifierModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifierModel").field("dir", &self.dir).field("min", &self.min).finish_non_exhaustive()
    }
}

impl VerifierModel {
    /// Where the shipped model is: `$SLM_VERIFIER_DIR`, else `verifier/` in the models folder
    /// (found as [`crate::embed::locate::models_root`] finds it; its error says where it looked).
    pub fn locate() -> Result<PathBuf> {
        if let Some(dir) = std::env::var_os("SLM_VERIFIER_DIR").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(dir));
        }
        crate::embed::locate::models_root().map(|r| r.dir.join(VERIFIER_SUBDIR))
    }

    /// Checks every file of `dir` against the compiled-in checksums, then loads it.
    pub fn load(dir: &Path) -> Result<VerifierModel> {
        for (sum, name) in expected() {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).map_err(|e| Error::Model {
                message: format!("gate verifier model file missing or unreadable: {}: {e}", path.display()),
            })?;
            let got = hex(&Sha256::digest(&bytes));
            if got != sum {
                return Err(Error::Model {
                    message: format!(
                        "gate verifier model file damaged: {} (sha256 {got}, expected {sum}); restore it from the \
                         repository",
                        path.display()
                    ),
                });
            }
        }
        let config_path = dir.join("config.json");
        let config: serde_json::Value =
            std::fs::read_to_string(&config_path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(serde_json::Value::Null);
        let bad = |what: &str| Error::Model { message: format!("gate verifier config.json {what}: {}", config_path.display()) };
        let min = config
            .get("slm_min_probability")
            .and_then(|x| x.as_f64())
            .filter(|x| (0.0..=1.0).contains(x))
            .ok_or_else(|| bad("has no slm_min_probability in [0, 1]"))? as f32;
        let one_char = |s: &str| {
            let mut c = s.chars();
            c.next().filter(|_| c.next().is_none())
        };
        let mut symbols = HashMap::new();
        for (k, v) in config.get("slm_symbols").and_then(|m| m.as_object()).into_iter().flatten() {
            let (Some(c), Some(word)) = (one_char(k), v.as_str()) else {
                return Err(bad("has an slm_symbols entry that is not one character to a string"));
            };
            symbols.insert(c, word.to_string());
        }
        let dropped = config
            .get("slm_dropped")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
            .map(|v| v.as_str().and_then(one_char).ok_or_else(|| bad("has an slm_dropped entry that is not one character")))
            .collect::<Result<Vec<char>>>()?;
        // The files matched their checksums, so a failure here is the installation's (the
        // runtime library), reported as a model error whatever NliModel calls it.
        let nli = NliModel::load(dir).map_err(|e| match e {
            Error::InvalidInput { value, rule, .. } => Error::Model { message: format!("gate verifier {value}: {rule}") },
            other => other,
        })?;
        Ok(VerifierModel { nli, min, symbols, dropped, dir: dir.to_path_buf() })
    }

    /// P(the memory states that the query's event has happened), per memory.
    pub fn probabilities(&self, query: &str, memories: &[&str]) -> Result<Vec<f32>> {
        let query = self.normalize(query);
        let memories: Vec<String> = memories.iter().map(|m| self.normalize(m)).collect();
        let pairs: Vec<(&str, &str)> = memories.iter().map(|m| (m.as_str(), query.as_str())).collect();
        self.nli.entailment(&pairs)
    }

    /// The text as the model was trained to read it: each symbol of `slm_symbols` becomes
    /// its word between spaces, each `slm_dropped` character goes (as the training script's
    /// `normalize`).
    fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            if self.dropped.contains(&c) {
                continue;
            }
            match self.symbols.get(&c) {
                Some(word) => {
                    out.push(' ');
                    out.push_str(word);
                    out.push(' ');
                }
                None => out.push(c),
            }
        }
        out
    }

    /// The probability a candidate needs to pass: the shipped `slm_min_probability`, unless
    /// [`measure_at`] set another for this process.
    pub fn min(&self) -> f32 {
        MIN_OVERRIDE.get().copied().unwrap_or(self.min)
    }
}

/// Another operating point, for `slm gate eval --model-min` only (measuring what a stricter
/// or looser threshold would do); loops always use the shipped one. The first call wins.
static MIN_OVERRIDE: OnceLock<f32> = OnceLock::new();

/// Makes `p` the probability this process's model verifier needs (kept in `MIN_OVERRIDE`).
pub fn measure_at(p: f32) {
    let _ = MIN_OVERRIDE.set(p);
}

fn expected() -> impl Iterator<Item = (&'static str, &'static str)> {
    SHA256SUMS.lines().filter_map(|l| l.split_once("  ")).map(|(s, n)| (s.trim(), n.trim()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

static MODEL: OnceLock<std::result::Result<Arc<VerifierModel>, String>> = OnceLock::new();

/// The process's one model, loaded on first use. A failed load is kept too: every run that
/// needs the model then fails with the same message instead of retrying the load per lap.
pub fn shared() -> Result<Arc<VerifierModel>> {
    MODEL
        .get_or_init(|| {
            let started = Instant::now();
            let m = VerifierModel::locate().and_then(|d| VerifierModel::load(&d)).map(Arc::new).map_err(|e| e.to_string());
            tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, ok = m.is_ok(), "gate verifier model loaded");
            m
        })
        .clone()
        .map_err(|message| Error::Model { message })
}

/// Set once a background load has been asked for (see [`warm_in_background`]).
static WARMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Loads the model on a thread of its own, once per process, unless it is loaded or loading.
/// A run calls this when it starts waiting (lap 1 found nothing to pass): the load (~170 ms)
/// then happens while the run is idle, not after the signal it waits for has committed, so
/// the first verification costs one inference. A run that converges on lap 1, or a lap with
/// no candidate, still loads only for a candidate; a failed load is kept, and the first
/// candidate's verification reports it (the loop never passes unverified).
pub fn warm_in_background() {
    if MODEL.get().is_some() || WARMING.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("slm-verifier-load".into()).spawn(|| {
        let _ = shared();
    });
    if let Err(e) = spawned {
        tracing::debug!("cannot start the verifier's background load: {e}");
    }
}

/// True once this process has loaded the model (for status and tests).
pub fn loaded() -> bool {
    MODEL.get().is_some_and(|m| m.is_ok())
}

/// Verdicts of this process: (query, memory) → probability.
struct Verdicts {
    map: Mutex<HashMap<(String, String), f32>>,
    /// Held while the model runs, so concurrent runs that want the same pair wait for the
    /// first to compute it instead of computing it again.
    compute: Mutex<()>,
}

static VERDICTS: OnceLock<Verdicts> = OnceLock::new();

fn verdicts() -> &'static Verdicts {
    VERDICTS.get_or_init(|| Verdicts { map: Mutex::new(HashMap::new()), compute: Mutex::new(()) })
}

/// Probabilities for `memories` against `query`, from the cache where known; the rest go to
/// the model (one pair per run: see [`NliModel::entailment`]).
pub fn probabilities(query: &str, memories: &[&str]) -> Result<Vec<f32>> {
    let v = verdicts();
    let lookup = |out: &mut Vec<Option<f32>>| {
        let map = v.map.lock().unwrap_or_else(|p| p.into_inner());
        for (slot, m) in out.iter_mut().zip(memories) {
            if slot.is_none() {
                *slot = map.get(&(query.to_string(), (*m).to_string())).copied();
            }
        }
    };
    let mut out = vec![None; memories.len()];
    lookup(&mut out);
    if out.iter().any(Option::is_none) {
        let _running = v.compute.lock().unwrap_or_else(|p| p.into_inner());
        lookup(&mut out); // another run may have computed them while this one waited
        let todo: Vec<usize> = (0..memories.len()).filter(|&i| out[i].is_none()).collect();
        if !todo.is_empty() {
            let model = shared()?;
            let texts: Vec<&str> = todo.iter().map(|&i| memories[i]).collect();
            let probs = model.probabilities(query, &texts)?;
            let mut map = v.map.lock().unwrap_or_else(|p| p.into_inner());
            if map.len() + todo.len() > CACHE_MAX {
                map.clear();
            }
            for (&i, p) in todo.iter().zip(probs) {
                out[i] = Some(p);
                map.insert((query.to_string(), memories[i].to_string()), p);
            }
        }
    }
    Ok(out.into_iter().map(|p| p.unwrap_or(0.0)).collect())
}

/// `model` bound to one gate query.
pub struct ModelVerifier {
    query: String,
}

impl ModelVerifier {
    /// Loads nothing: the model loads when the first candidate needs it.
    pub fn new(query: &str) -> ModelVerifier {
        ModelVerifier { query: query.to_string() }
    }
}

impl Verifier for ModelVerifier {
    fn name(&self) -> String {
        "model".into()
    }

    fn prepare(&self) {
        warm_in_background();
    }

    fn check(&mut self, batch: &[&Candidate], _deadline: Instant) -> Result<Vec<Option<Refusal>>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<&str> = batch.iter().map(|c| c.content.as_str()).collect();
        let probs = probabilities(&self.query, &texts)?;
        let min = shared()?.min();
        Ok(probs
            .into_iter()
            .map(|p| {
                (p < min)
                    .then(|| Refusal { rule: "model".into(), reason: format!("the verifier gives {p:.2} that it says \"{}\"", self.query) })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_checksums_name_the_three_shipped_files() {
        let names: Vec<&str> = expected().map(|(_, n)| n).collect();
        assert_eq!(names, ["model.onnx", "tokenizer.json", "config.json"]);
        assert!(expected().all(|(s, _)| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())));
    }

    #[test]
    fn a_missing_or_damaged_file_is_a_model_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = VerifierModel::load(dir.path()).unwrap_err();
        assert!(matches!(e, Error::Model { .. }) && e.to_string().contains("model.onnx"), "{e}");
        std::fs::write(dir.path().join("model.onnx"), b"not a model").unwrap();
        let e = VerifierModel::load(dir.path()).unwrap_err();
        assert!(e.to_string().contains("damaged") && e.to_string().contains("model.onnx"), "{e}");
    }
}
