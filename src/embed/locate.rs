//! Finding the model files and the ONNX Runtime library on disk.
//!
//! The models (the embedding model and the gate verifier) live in one *models folder*, found in
//! this order:
//! 1. `$SLM_MODELS` (a folder laid out like the repository's `models/`);
//! 2. the installed package's files: the Python wheel (`scripts/build-wheel.sh`) installs the
//!    binary as `PREFIX/bin/slm` and the models as `PREFIX/share/slm-memory/models/`, so the binary
//!    looks two levels up from its own (symlinks resolved, as `uv tool` and `pipx` link it);
//! 3. the repository's `models/`, filled by `scripts/setup.sh`: the first `models/` walking up
//!    from the binary (so `target/release/slm` finds it two levels up), then from the working
//!    directory.
//!
//! The ONNX Runtime library is `$ORT_DYLIB_PATH` if set, else `onnxruntime/` inside the models
//! folder (where setup.sh puts it), else the `onnxruntime` Python package installed beside the
//! binary (`PREFIX/lib/python3.*/site-packages/onnxruntime/capi/`, the wheel's dependency), which
//! must be the version slm is built against. `SLM_MODEL_DIR` still names the embedding model's
//! own folder, for a model kept elsewhere. Nothing is ever downloaded.
//!
//! Every error says where it looked and what would fix it; `slm status` says which folder and
//! which library a process uses ([`ModelFiles::source`]).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The model folder's name inside `models/`.
pub const MODEL_SUBDIR: &str = "all-MiniLM-L6-v2";
/// The ONNX Runtime version slm is built against (the `ort` crate's API version).
pub const ORT_VERSION: &str = "1.31.1";
/// The runtime library's path inside `models/`.
pub const ORT_SUBPATH: &str = "onnxruntime/libonnxruntime.so.1.31.1";
/// The runtime library's file name.
const ORT_FILE: &str = "libonnxruntime.so.1.31.1";
/// The files a model folder must hold.
pub const MODEL_FILES: [&str; 5] = ["model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"];
/// Where an installed package keeps its files, relative to its prefix (the folder above
/// `bin/`): `models/` and the plugin's `marketplace/`. Not `share/slm`: with `pip install
/// --user` the prefix is `~/.local`, and `~/.local/share/slm` is the default data root.
const PACKAGE_SHARE: &str = "share/slm-memory";
/// The models folder inside [`PACKAGE_SHARE`].
const PACKAGE_MODELS: &str = "share/slm-memory/models";

const HINT: &str = "install the slm-memory package (pip install slm-memory), run scripts/setup.sh from the slm repository, \
                    or set SLM_MODELS";

/// Which of the look-up places the models folder came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `$SLM_MODELS`.
    Env,
    /// The installed package's files (`PREFIX/share/slm-memory/models`).
    Package,
    /// A repository's `models/` (scripts/setup.sh).
    Repository,
    /// `$SLM_MODEL_DIR` named the embedding model's own folder.
    ModelDir,
}

impl Source {
    /// How `slm status` names it.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Env => "SLM_MODELS",
            Source::Package => "installed package",
            Source::Repository => "repository",
            Source::ModelDir => "SLM_MODEL_DIR",
        }
    }
}

/// The models folder and where it came from.
#[derive(Debug, Clone)]
pub struct ModelsRoot {
    pub dir: PathBuf,
    pub source: Source,
}

/// Where the model's folder and the runtime library are.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// Folder with `model.onnx`, `tokenizer.json`, `config.json`, `special_tokens_map.json`,
    /// `tokenizer_config.json`.
    pub model_dir: PathBuf,
    /// The ONNX Runtime shared library.
    pub ort_lib: PathBuf,
    /// Where the model's folder came from (`None`: given by a caller, not looked up).
    pub source: Option<Source>,
}

impl ModelFiles {
    /// Locates the files from the environment and the executable's location. Does not read them.
    pub fn locate() -> Result<Self> {
        let env_model = env_path("SLM_MODEL_DIR");
        let (model_dir, source, root) = match (env_model, models_root()) {
            (Some(dir), root) => (dir, Some(Source::ModelDir), root.ok()),
            (None, Ok(r)) => (r.dir.join(MODEL_SUBDIR), Some(r.source), Some(r)),
            (None, Err(e)) => return Err(e),
        };
        let ort_lib = ort_lib(root.as_ref())?;
        let files = ModelFiles { model_dir, ort_lib, source };
        files.check()?;
        Ok(files)
    }

    /// Locates only the ONNX Runtime library (as [`ModelFiles::locate`] does), for a model that
    /// lives elsewhere (the gate's `nli:DIR`).
    pub(crate) fn locate_ort_lib() -> Result<PathBuf> {
        let lib = ort_lib(models_root().ok().as_ref())?;
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

    /// Where the embedder may write what it derives from the model (its pre-optimised copy,
    /// [`super::onnx::prepare_optimized_model`], and the token counter's vocabulary file,
    /// `tokenizer.count-v2`): beside the model in a repository or a user's own folder, but never
    /// inside an installed package (which may be read-only, and whose uninstall must remove
    /// every file it holds) however the folder was named: there, a folder of the user's cache
    /// (`$XDG_CACHE_HOME/slm`, else `~/.cache/slm`) named for the model file's size and this
    /// slm's version (a reinstall of the same version reuses it; other versions' folders are
    /// removed when a new one is made). `None`: nowhere to write (no home).
    pub fn cache_dir(&self) -> Option<PathBuf> {
        let packaged =
            self.source == Some(Source::Package) || exe_prefix().is_some_and(|p| in_dir(&self.model_dir, &p.join(PACKAGE_MODELS)));
        if !packaged {
            return Some(self.model_dir.clone());
        }
        let len = std::fs::metadata(self.model_dir.join("model.onnx")).ok()?.len();
        let cache = env_path("XDG_CACHE_HOME").filter(|p| p.is_absolute()).or_else(|| env_path("HOME").map(|h| h.join(".cache")))?;
        Some(cache.join("slm").join(format!("{MODEL_SUBDIR}-{len}-v{}", env!("CARGO_PKG_VERSION"))))
    }

    /// [`ModelFiles::cache_dir`], made if missing; a user-cache folder made now replaces the
    /// folders of other versions beside it.
    pub(crate) fn make_cache_dir(&self) -> Option<PathBuf> {
        let dir = self.cache_dir()?;
        if dir != self.model_dir && !dir.is_dir() {
            std::fs::create_dir_all(&dir).ok()?;
            prune_cache_siblings(&dir);
        }
        Some(dir)
    }
}

/// Removes the cache folders of other model files or slm versions beside `current` (see
/// [`ModelFiles::cache_dir`]); called when `current` is first made. Best effort.
fn prune_cache_siblings(current: &Path) {
    let (Some(parent), Some(name)) = (current.parent(), current.file_name().and_then(|n| n.to_str())) else { return };
    for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let other = e.file_name();
        let Some(other) = other.to_str() else { continue };
        if other != name && other.starts_with(&format!("{MODEL_SUBDIR}-")) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// True when `path` is `dir` or inside it (both resolved where they exist).
fn in_dir(path: &Path, dir: &Path) -> bool {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    canon(path).starts_with(canon(dir))
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// True when `dir` is a models folder: it holds the embedding model.
fn is_models_dir(dir: &Path) -> bool {
    dir.join(MODEL_SUBDIR).join("model.onnx").is_file()
}

/// The executable's own path, symlinks resolved (`uv tool` and `pipx` link it into
/// `~/.local/bin`).
fn exe() -> Option<PathBuf> {
    std::env::current_exe().ok()?.canonicalize().ok()
}

/// The prefix an installed binary lives under: the folder above the one holding the executable.
fn exe_prefix() -> Option<PathBuf> {
    Some(exe()?.parent()?.parent()?.to_path_buf())
}

/// The installed package's own folder (`PREFIX/share/slm-memory`), whether or not it exists:
/// where the wheel puts the models and the plugin marketplace.
pub fn package_share() -> Option<PathBuf> {
    exe_prefix().map(|p| p.join(PACKAGE_SHARE))
}

/// Finds the models folder (see the module's doc for the order), or says where it looked.
pub fn models_root() -> Result<ModelsRoot> {
    if let Some(dir) = env_path("SLM_MODELS") {
        if is_models_dir(&dir) {
            return Ok(ModelsRoot { dir, source: Source::Env });
        }
        return Err(Error::Model {
            message: format!("SLM_MODELS is {} but it holds no {MODEL_SUBDIR}/model.onnx: fix or unset SLM_MODELS", dir.display()),
        });
    }
    let prefix = exe_prefix();
    if let Some(dir) = prefix.as_ref().map(|p| p.join(PACKAGE_MODELS)).filter(|d| is_models_dir(d)) {
        return Ok(ModelsRoot { dir, source: Source::Package });
    }
    let exe_dir = exe().and_then(|p| p.parent().map(Path::to_path_buf));
    let cwd = std::env::current_dir().ok();
    if let Some(dir) = exe_dir.iter().chain(cwd.iter()).find_map(|start| search_up(start)) {
        return Ok(ModelsRoot { dir, source: Source::Repository });
    }
    let shown = |p: Option<PathBuf>| p.map_or("?".to_string(), |p| p.display().to_string());
    Err(Error::Model {
        message: format!(
            "model files not found; looked in: $SLM_MODELS (unset); {} (installed package); models/ in the folders above {} \
             and {} (repository): {HINT}",
            shown(prefix.map(|p| p.join(PACKAGE_MODELS))),
            shown(exe_dir),
            shown(cwd)
        ),
    })
}

fn search_up(start: &Path) -> Option<PathBuf> {
    start.ancestors().map(|dir| dir.join("models")).find(|m| is_models_dir(m))
}

/// The runtime library: `$ORT_DYLIB_PATH`, the models folder's `onnxruntime/`, or the
/// `onnxruntime` package installed beside the binary. A package of another version is an error
/// naming both versions (the library's C API must match the one slm is built against).
fn ort_lib(root: Option<&ModelsRoot>) -> Result<PathBuf> {
    if let Some(lib) = env_path("ORT_DYLIB_PATH") {
        return Ok(lib);
    }
    if let Some(lib) = root.map(|r| r.dir.join(ORT_SUBPATH)).filter(|l| l.is_file()) {
        return Ok(lib);
    }
    let packages = exe_prefix().map(|p| site_packages(&p)).unwrap_or_default();
    // Ours anywhere in the environment first (a `pip --user` prefix may hold several Pythons,
    // one with another version), then the first other version, to name it.
    if let Some(lib) = packages.iter().map(|d| d.join("onnxruntime").join("capi").join(ORT_FILE)).find(|l| l.is_file()) {
        return Ok(lib);
    }
    for dir in &packages {
        let capi = dir.join("onnxruntime").join("capi");
        if let Some(other) = installed_ort_version(dir, &capi).filter(|v| v != ORT_VERSION) {
            return Err(Error::Model {
                message: format!(
                    "onnxruntime {other} is installed in {}, but slm needs onnxruntime {ORT_VERSION}: pip install \
                     onnxruntime=={ORT_VERSION} (in the same environment as slm)",
                    dir.display()
                ),
            });
        }
    }
    match root {
        // The repository without its runtime: setup.sh fetches it.
        Some(r) if r.source != Source::Package => Ok(r.dir.join(ORT_SUBPATH)),
        _ => Err(Error::Model {
            message: format!(
                "ONNX Runtime library not found: no {ORT_SUBPATH} in the models folder and no onnxruntime {ORT_VERSION} \
                 package beside the binary: pip install onnxruntime=={ORT_VERSION}, or set ORT_DYLIB_PATH"
            ),
        }),
    }
}

/// `PREFIX/lib*/python3*/{site,dist}-packages` folders that exist.
fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else { continue };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3")))
            .collect();
        pythons.sort();
        for py in pythons {
            for kind in ["site-packages", "dist-packages"] {
                let d = py.join(kind);
                if d.is_dir() && !out.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// The version of an `onnxruntime` package in `site` that is not ours: from its `.dist-info`
/// folder's name, else from the library file's name.
fn installed_ort_version(site: &Path, capi: &Path) -> Option<String> {
    let from_dist_info = std::fs::read_dir(site).ok()?.flatten().find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        let rest = name.strip_prefix("onnxruntime-")?.strip_suffix(".dist-info")?;
        Some(rest.to_string())
    });
    from_dist_info.or_else(|| {
        std::fs::read_dir(capi).ok()?.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("libonnxruntime.so.").map(str::to_string)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_packages_finds_every_python_of_a_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        for d in ["lib/python3.11/site-packages", "lib/python3.12/site-packages", "lib/python3.11/dist-packages", "lib/other/site-packages"]
        {
            std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        }
        let found: Vec<String> =
            site_packages(tmp.path()).iter().map(|p| p.strip_prefix(tmp.path()).unwrap().display().to_string()).collect();
        assert_eq!(found, ["lib/python3.11/site-packages", "lib/python3.11/dist-packages", "lib/python3.12/site-packages"]);
    }

    #[test]
    fn another_onnxruntime_version_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let capi = tmp.path().join("onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        std::fs::write(capi.join("libonnxruntime.so.1.32.0"), b"").unwrap();
        assert_eq!(installed_ort_version(tmp.path(), &capi).as_deref(), Some("1.32.0"));
        std::fs::create_dir_all(tmp.path().join("onnxruntime-1.32.0.dist-info")).unwrap();
        assert_eq!(installed_ort_version(tmp.path(), &capi).as_deref(), Some("1.32.0"));
    }
}
