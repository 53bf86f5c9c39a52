//! Finding the model files and the ONNX Runtime library on disk.
//!
//! `scripts/setup.sh` puts them in the repository's `models/` folder. The binary looks there
//! (walking up from its own location, so `target/release/slm` finds `models/` two levels up)
//! unless `SLM_MODEL_DIR` (the folder holding `model.onnx` and the tokenizer files) or
//! `ORT_DYLIB_PATH` (the runtime library file) say otherwise. Nothing is ever downloaded.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Where the model's folder and the runtime library are.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// Folder with `model.onnx`, `tokenizer.json`, `config.json`, `special_tokens_map.json`,
    /// `tokenizer_config.json`.
    pub model_dir: PathBuf,
    /// The ONNX Runtime shared library.
    pub ort_lib: PathBuf,
}

/// The model folder's name inside `models/`.
pub const MODEL_SUBDIR: &str = "all-MiniLM-L6-v2";
/// The runtime library's path inside `models/`.
pub const ORT_SUBPATH: &str = "onnxruntime/libonnxruntime.so.1.31.1";
/// The files a model folder must hold.
pub const MODEL_FILES: [&str; 5] = ["model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"];

const HINT: &str = "run scripts/setup.sh from the slm repository, or set SLM_MODEL_DIR and ORT_DYLIB_PATH";

impl ModelFiles {
    /// Locates the files from the environment and the executable's location. Does not read them.
    pub fn locate() -> Result<Self> {
        let env_model = std::env::var_os("SLM_MODEL_DIR").filter(|v| !v.is_empty()).map(PathBuf::from);
        let env_ort = std::env::var_os("ORT_DYLIB_PATH").filter(|v| !v.is_empty()).map(PathBuf::from);
        let models_root = find_models_root();
        let model_dir = env_model
            .or_else(|| models_root.as_ref().map(|r| r.join(MODEL_SUBDIR)))
            .ok_or_else(|| Error::Model { message: format!("model files not found: {HINT}") })?;
        let ort_lib = env_ort
            .or_else(|| models_root.as_ref().map(|r| r.join(ORT_SUBPATH)))
            .ok_or_else(|| Error::Model { message: format!("ONNX Runtime library not found: {HINT}") })?;
        let files = ModelFiles { model_dir, ort_lib };
        files.check()?;
        Ok(files)
    }

    /// Locates only the ONNX Runtime library (`ORT_DYLIB_PATH`, else `models/` as in
    /// [`ModelFiles::locate`]), for a model that lives elsewhere (the gate's `nli:DIR`).
    pub(crate) fn locate_ort_lib() -> Result<PathBuf> {
        let lib = std::env::var_os("ORT_DYLIB_PATH")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| find_models_root().map(|r| r.join(ORT_SUBPATH)))
            .ok_or_else(|| Error::Model { message: format!("ONNX Runtime library not found: {HINT}") })?;
        if !lib.is_file() {
            return Err(Error::Model { message: format!("ONNX Runtime library missing: {}: {HINT}", lib.display()) });
        }
        Ok(lib)
    }

    /// Checks that every file exists, so a missing one is a one-line error before any loading.
    pub fn check(&self) -> Result<()> {
        for name in MODEL_FILES {
            let p = self.model_dir.join(name);
            if !p.is_file() {
                return Err(Error::Model { message: format!("model file missing: {}: {HINT}", p.display()) });
            }
        }
        if !self.ort_lib.is_file() {
            return Err(Error::Model { message: format!("ONNX Runtime library missing: {}: {HINT}", self.ort_lib.display()) });
        }
        Ok(())
    }
}

/// Walks up from the executable (then from the working directory) to the first folder that
/// holds `models/<MODEL_SUBDIR>/model.onnx`, and returns that `models/` folder.
pub(crate) fn find_models_root() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok().and_then(|p| p.canonicalize().ok());
    let cwd = std::env::current_dir().ok();
    exe.iter().filter_map(|p| p.parent()).chain(cwd.as_deref()).find_map(search_up)
}

fn search_up(start: &Path) -> Option<PathBuf> {
    start.ancestors().map(|dir| dir.join("models")).find(|m| m.join(MODEL_SUBDIR).join("model.onnx").is_file())
}
