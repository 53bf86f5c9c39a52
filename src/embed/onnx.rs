//! The product embedder: all-MiniLM-L6-v2 (int8 ONNX) run locally by fastembed.
//!
//! Loading is lazy and happens once per process: `slm status` or `slm list` never pay for it,
//! and a long-lived server can answer its first requests before the model is in memory. The
//! runtime library is loaded with `ort::init_from` before any other ONNX Runtime call, so a
//! missing or wrong library is a clean [`Error::Model`] instead of a panic inside `ort`.

use std::sync::OnceLock;

use ndarray::Array2;
use parking_lot::Mutex;

use fastembed::{InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel};

use super::count::TokenCounter;
use super::tokenizer;
use super::{Embedder, ModelFiles, DIM};
use crate::{Error, Result};

/// The model name recorded in the database and shown by `status`.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2 (int8 ONNX, mean pooling, 384-d)";

/// Texts per ONNX Runtime call when embedding a batch.
const BATCH: usize = 64;

/// Lazily loaded fastembed model plus a tokenizer used only for counting tokens.
pub struct OnnxEmbedder {
    /// Built for a short-lived process: see [`OnnxEmbedder::quick_start`].
    quick: bool,
    /// Where the files are, or why they could not be found (reported at first use, so that
    /// commands that never embed, like `status` and `list`, work without a model).
    files: std::result::Result<ModelFiles, String>,
    model: OnceLock<std::result::Result<Mutex<TextEmbedding>, String>>,
    counter: OnceLock<std::result::Result<TokenCounter, String>>,
}

impl OnnxEmbedder {
    /// Prepares an embedder over `files`; nothing is read until the first embedding.
    pub fn new(files: ModelFiles) -> Self {
        OnnxEmbedder { quick: false, files: Ok(files), model: OnceLock::new(), counter: OnceLock::new() }
    }

    /// Locates the files ([`ModelFiles::locate`]); a failure surfaces at the first embedding.
    pub fn locate() -> Self {
        let files = ModelFiles::locate().map_err(|e| e.to_string());
        OnnxEmbedder { quick: false, files, model: OnceLock::new(), counter: OnceLock::new() }
    }

    /// Tunes the model for a process that embeds a few texts and exits (the one-shot CLI):
    /// ONNX Runtime then skips pre-packing the weights for its matrix kernels. Pre-packing is
    /// what makes a long-lived server's batches fast, but it copies and re-lays 90 MB of
    /// weights at every load: without it the session is ready in about 60 ms instead of
    /// 170 ms, and one short text takes about 6 ms longer. The vectors agree to within
    /// 1e-7 per component (the kernels sum in another order), far below anything a cosine
    /// threshold can see.
    pub fn quick_start(mut self) -> Self {
        self.quick = true;
        self
    }

    /// Starts loading the model and/or the token counter on background threads, so the load
    /// overlaps the caller's other start-up work (opening the store, mapping the index). The
    /// first use waits for the load instead of starting its own; the handles are for a caller
    /// that must not exit while a load is still running inside ONNX Runtime.
    pub fn preload(self: &std::sync::Arc<Self>, model: bool, count: bool) -> Vec<std::thread::JoinHandle<()>> {
        let mut handles = Vec::new();
        if model {
            let me = std::sync::Arc::clone(self);
            handles.extend(std::thread::Builder::new().name("slm-model-load".into()).spawn(move || {
                let _ = me.load();
            }));
        }
        if count {
            let me = std::sync::Arc::clone(self);
            handles.extend(std::thread::Builder::new().name("slm-tokenizer-load".into()).spawn(move || {
                let _ = me.counter();
            }));
        }
        handles
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
            .get_or_init(|| self.files.clone().and_then(|f| load_model(&f, self.quick)))
            .as_ref()
            .map_err(|m| Error::Model { message: m.clone() })
    }
}

impl OnnxEmbedder {
    fn counter(&self) -> Result<&TokenCounter> {
        self.counter
            .get_or_init(|| self.files.clone().and_then(|f| load_counter(&f)))
            .as_ref()
            .map_err(|m| Error::Model { message: m.clone() })
    }
}

fn read(files: &ModelFiles, name: &str) -> std::result::Result<Vec<u8>, String> {
    let p = files.model_dir.join(name);
    std::fs::read(&p).map_err(|e| format!("cannot read model file {}: {e}; run scripts/setup.sh", p.display()))
}

/// Names of the pre-optimised model files, tied to the runtime that wrote them (the file name of
/// the ONNX Runtime library carries its version).
fn optimized_names(files: &ModelFiles) -> (String, String) {
    let lib = files.ort_lib.file_name().and_then(|n| n.to_str()).unwrap_or("ort");
    let tag: String = lib.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    (format!("model.opt2.{tag}.onnx"), format!("model.opt2.{tag}.onnx.data"))
}

/// Writes an optimised copy of `model.onnx` into [`ModelFiles::cache_dir`] (next to the model,
/// except in an installed package), unless present, and returns its path.
///
/// Why: this "int8" model dequantises its weights with ordinary Cast/Mul nodes, so ONNX Runtime
/// constant-folds them into 90 MB of f32 at every load and holds them twice while doing so
/// (a 265 MB process peak). Saving the folded graph once, with its weights in an external
/// file that ONNX Runtime memory-maps, brings a whole `slm recall` to about 100 MB. The copy is
/// saved at the "extended" level (`Level2`: attention, layer-norm and GELU fusions for the CPU
/// provider, no layouts tied to this machine's instruction set), which halves the time of one
/// embedding (10 ms to 6 ms) and leaves nothing for the load to optimise again. Files are written to a private folder and renamed into place,
/// data first and model last, so a present model file means both are complete.
pub fn prepare_optimized_model(files: &ModelFiles) -> std::result::Result<std::path::PathBuf, String> {
    use ort::session::{builder::GraphOptimizationLevel, Session};
    let dir = files.cache_dir().ok_or("no folder to keep it in (HOME is unset)")?;
    let (model_name, data_name) = optimized_names(files);
    let (onnx, data) = (dir.join(&model_name), dir.join(&data_name));
    if onnx.is_file() && data.is_file() {
        return Ok(onnx);
    }
    let env = runtime(files)?;
    let dir = files.make_cache_dir().ok_or_else(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(".opt-tmp-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let fail = |e: &dyn std::fmt::Display| format!("cannot optimise the model: {e}");
    let built = Session::builder(&env)
        .map_err(|e| fail(&e))
        .and_then(|b| b.with_optimization_level(GraphOptimizationLevel::Level2).map_err(|e| fail(&e)))
        .and_then(|b| b.with_intra_threads(1).map_err(|e| fail(&e)))
        .and_then(|b| b.with_optimized_model_path(tmp.join(&model_name)).map_err(|e| fail(&e)))
        .and_then(|b| b.with_config_entry("session.optimized_model_external_initializers_file_name", &data_name).map_err(|e| fail(&e)))
        .and_then(|b| b.with_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024").map_err(|e| fail(&e)))
        .and_then(|mut b| b.commit_from_file(files.model_dir.join("model.onnx")).map_err(|e| fail(&e)));
    let moved = built.and_then(|session| {
        drop(session);
        std::fs::rename(tmp.join(&data_name), &data).map_err(|e| format!("cannot move {data_name}: {e}"))?;
        std::fs::rename(tmp.join(&model_name), &onnx).map_err(|e| format!("cannot move {model_name}: {e}"))
    });
    let _ = std::fs::remove_dir_all(&tmp);
    moved.map(|_| onnx)
}

fn load_model(files: &ModelFiles, quick: bool) -> std::result::Result<Mutex<TextEmbedding>, String> {
    // The query cache's test (and a curious user, with SLM_LOG=debug) sees when the model loads.
    tracing::debug!("loading the embedding model from {}", files.model_dir.display());
    files.check().map_err(|e| e.to_string())?;
    let env = runtime(files)?;
    // fastembed parses a placeholder; the real tokenizer loads beside the session (see
    // super::tokenizer) and replaces it below.
    let tokenizer_files = TokenizerFiles {
        tokenizer_file: tokenizer::PLACEHOLDER.to_vec(),
        config_file: read(files, "config.json")?,
        special_tokens_map_file: read(files, "special_tokens_map.json")?,
        tokenizer_config_file: read(files, "tokenizer_config.json")?,
    };
    let mut options = InitOptionsUserDefined::new().with_environment(env).with_max_length(tokenizer::MAX_LENGTH);
    if quick {
        options = options.with_session_config("session.disable_prepacking", "1");
        // ONNX Runtime's pool threads spin for a while after each run, waiting for the next.
        // A one-shot process runs the model once and then scans its store on every core: a
        // spinning thread would take one of them (a third of a 1M-row scan on two cores).
        options = options.with_session_config("session.intra_op.allow_spinning", "0");
    }
    let optimized = prepare_optimized_model(files);
    let graph = match (&optimized, optimized.as_ref().ok().and_then(|p| p.parent()).and_then(|d| d.to_str())) {
        (Ok(opt), Some(dir)) => {
            // A graph given as bytes finds its external weights file through this folder.
            options = options.with_session_config("session.model_external_initializers_file_folder_path", dir);
            std::fs::read(opt).map_err(|e| format!("cannot read model file {}: {e}", opt.display()))?
        }
        (Err(e), _) => {
            tracing::warn!("using model.onnx directly (more memory): {e}");
            read(files, "model.onnx")?
        }
        (Ok(_), None) => read(files, "model.onnx")?,
    };
    let model = UserDefinedEmbeddingModel::new(graph, tokenizer_files).with_pooling(Pooling::Mean);
    let (embedding, real) = std::thread::scope(|s| {
        let real = std::thread::Builder::new().name("slm-model-vocab".into()).spawn_scoped(s, || tokenizer::load(files));
        let embedding = TextEmbedding::try_new_from_user_defined(model, options);
        let real = match real {
            Ok(h) => h.join().unwrap_or_else(|_| Err("the tokenizer's loading thread panicked".into())),
            Err(_) => tokenizer::load(files), // no thread to spare: load it here, in turn
        };
        (embedding, real)
    });
    let mut embedding =
        embedding.map_err(|e| format!("cannot load the model from {}: {e}; run scripts/setup.sh", files.model_dir.display()))?;
    embedding.tokenizer = real?;
    Ok(Mutex::new(embedding))
}

/// ONNX Runtime allows one environment per process, so every embedder (and the gate's NLI
/// model, [`crate::nli`]) shares the first one.
pub(crate) fn runtime(files: &ModelFiles) -> std::result::Result<ort::environment::Environment, String> {
    static ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        ort::init_from(&files.ort_lib)
            .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}; run scripts/setup.sh", files.ort_lib.display()))?
            .with_name("slm")
            // Microsoft's builds of ONNX Runtime 1.31 (the one setup.sh installs) log usage
            // events to ~/.cache/Microsoft/DeveloperTools and try to send them to Microsoft.
            // A local memory engine sends nothing anywhere. This stops the events; the `slm`
            // binary also sets ORT_DISABLE_TELEMETRY=1 at start, which keeps the runtime from
            // opening its event database at all (a library user may set it too).
            .with_telemetry(false)
            .build()
            .map_err(|e| format!("cannot start ONNX Runtime: {e}"))
    })
    .clone()
}

/// The token counter, from its derived file in [`ModelFiles::cache_dir`] when there is one
/// (see [`super::count`]).
fn load_counter(files: &ModelFiles) -> std::result::Result<TokenCounter, String> {
    let cache = files.make_cache_dir().map(|d| d.join("tokenizer.count-v2"));
    TokenCounter::from_file_cached(files.model_dir.join("tokenizer.json"), cache)
}

impl Embedder for OnnxEmbedder {
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        if texts.is_empty() {
            return Ok(Array2::zeros((0, DIM)));
        }
        let out = self.model()?.lock().embed(texts, Some(BATCH)).map_err(|e| Error::Model { message: format!("embedding failed: {e}") })?;
        let wrong = || Error::Model { message: format!("the model returned vectors of the wrong shape (want {DIM}-d)") };
        if out.len() != texts.len() || out.iter().any(|v| v.len() != DIM) {
            return Err(wrong());
        }
        Array2::from_shape_vec((texts.len(), DIM), out.concat()).map_err(|_| wrong())
    }

    fn count_tokens(&self, text: &str) -> Result<usize> {
        let t = self.counter()?;
        t.count(text).map_err(|e| Error::Model { message: format!("tokenizer: {e}") })
    }

    fn model_name(&self) -> &str {
        MODEL_NAME
    }

    fn is_loaded(&self) -> bool {
        matches!(self.model.get(), Some(Ok(_)))
    }

    fn model_files(&self) -> Option<&ModelFiles> {
        self.files.as_ref().ok()
    }
}
