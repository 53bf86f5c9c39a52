//! The product embedder: all-MiniLM-L6-v2 (int8 ONNX) run locally by fastembed.
//!
//! Loading is lazy and happens once per process: `slm status` or `slm list` never pay for it,
//! and a long-lived server can answer its first requests before the model is in memory. The
//! runtime library is loaded with `ort::init_from` before any other ONNX Runtime call, so a
//! missing or wrong library is a clean [`Error::Model`] instead of a panic inside `ort`.

use std::sync::{Mutex, OnceLock};

use fastembed::{InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel};

use super::{Embedder, ModelFiles, DIM};
use crate::{Error, Result};

/// The model name recorded in the database and shown by `status`.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2 (int8 ONNX, mean pooling, 384-d)";

/// Texts per ONNX Runtime call when embedding a batch.
const BATCH: usize = 64;

/// Lazily loaded fastembed model plus a tokenizer used only for counting tokens.
pub struct OnnxEmbedder {
    /// Where the files are, or why they could not be found (reported at first use, so that
    /// commands that never embed, like `status` and `list`, work without a model).
    files: std::result::Result<ModelFiles, String>,
    model: OnceLock<std::result::Result<Mutex<TextEmbedding>, String>>,
    counter: OnceLock<std::result::Result<tokenizers::Tokenizer, String>>,
}

impl OnnxEmbedder {
    /// Prepares an embedder over `files`; nothing is read until the first embedding.
    pub fn new(files: ModelFiles) -> Self {
        OnnxEmbedder { files: Ok(files), model: OnceLock::new(), counter: OnceLock::new() }
    }

    /// Locates the files ([`ModelFiles::locate`]); a failure surfaces at the first embedding.
    pub fn locate() -> Self {
        let files = ModelFiles::locate().map_err(|e| e.to_string());
        OnnxEmbedder { files, model: OnceLock::new(), counter: OnceLock::new() }
    }

    /// The files this embedder reads, or why they are missing.
    pub fn files(&self) -> Result<&ModelFiles> {
        self.files.as_ref().map_err(|m| Error::Model { message: m.clone() })
    }

    /// Loads the model now rather than on first use.
    pub fn load(&self) -> Result<()> {
        self.model().map(|_| ())
    }

    fn model(&self) -> Result<&Mutex<TextEmbedding>> {
        self.model
            .get_or_init(|| self.files.clone().and_then(|f| load_model(&f)))
            .as_ref()
            .map_err(|m| Error::Model { message: m.clone() })
    }
}

fn read(files: &ModelFiles, name: &str) -> std::result::Result<Vec<u8>, String> {
    let p = files.model_dir.join(name);
    std::fs::read(&p).map_err(|e| format!("cannot read model file {}: {e}; run scripts/setup.sh", p.display()))
}

fn load_model(files: &ModelFiles) -> std::result::Result<Mutex<TextEmbedding>, String> {
    files.check().map_err(|e| e.to_string())?;
    let env = runtime(files)?;
    let tokenizer_files = TokenizerFiles {
        tokenizer_file: read(files, "tokenizer.json")?,
        config_file: read(files, "config.json")?,
        special_tokens_map_file: read(files, "special_tokens_map.json")?,
        tokenizer_config_file: read(files, "tokenizer_config.json")?,
    };
    let model = UserDefinedEmbeddingModel::new(read(files, "model.onnx")?, tokenizer_files)
        .with_pooling(Pooling::Mean);
    let options = InitOptionsUserDefined::new().with_environment(env);
    let embedding = TextEmbedding::try_new_from_user_defined(model, options).map_err(|e| {
        format!("cannot load the model from {}: {e}; run scripts/setup.sh", files.model_dir.display())
    })?;
    Ok(Mutex::new(embedding))
}

/// ONNX Runtime allows one environment per process, so every embedder shares the first one.
fn runtime(files: &ModelFiles) -> std::result::Result<ort::environment::Environment, String> {
    static ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        ort::init_from(&files.ort_lib)
            .map_err(|e| {
                format!("cannot load ONNX Runtime from {}: {e}; run scripts/setup.sh", files.ort_lib.display())
            })?
            .with_name("slm")
            .build()
            .map_err(|e| format!("cannot start ONNX Runtime: {e}"))
    })
    .clone()
}

fn load_counter(files: &ModelFiles) -> std::result::Result<tokenizers::Tokenizer, String> {
    let p = files.model_dir.join("tokenizer.json");
    let mut t = tokenizers::Tokenizer::from_file(&p)
        .map_err(|e| format!("cannot read tokenizer {}: {e}; run scripts/setup.sh", p.display()))?;
    // tokenizer.json pads every text to 128 tokens and truncates; a count must see neither.
    t.with_padding(None);
    t.with_truncation(None).map_err(|e| format!("tokenizer: {e}"))?;
    Ok(t)
}

impl Embedder for OnnxEmbedder {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut model = self.model()?.lock().unwrap_or_else(|p| p.into_inner());
        let out = model
            .embed(texts, Some(BATCH))
            .map_err(|e| Error::Model { message: format!("embedding failed: {e}") })?;
        if out.len() != texts.len() || out.iter().any(|v| v.len() != DIM) {
            return Err(Error::Model { message: format!("the model returned vectors of the wrong shape (want {DIM}-d)") });
        }
        Ok(out)
    }

    fn count_tokens(&self, text: &str) -> Result<usize> {
        let t = self
            .counter
            .get_or_init(|| self.files.clone().and_then(|f| load_counter(&f)))
            .as_ref()
            .map_err(|m| Error::Model { message: m.clone() })?;
        let enc = t.encode(text, true).map_err(|e| Error::Model { message: format!("tokenizer: {e}") })?;
        Ok(enc.len())
    }

    fn model_name(&self) -> &str {
        MODEL_NAME
    }

    fn is_loaded(&self) -> bool {
        matches!(self.model.get(), Some(Ok(_)))
    }
}
