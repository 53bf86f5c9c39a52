//! The Python wheel (issue #29), installed as a user would install it: into a fresh virtual
//! environment from the file `scripts/build-wheel.sh` wrote to `dist/` (scripts/test.sh builds
//! it before the tests), its `onnxruntime` dependency from PyPI, and then used from a folder
//! outside the repository with no `models/` in sight: the demo, remember and recall (scores
//! equal to this clone's build), a loop converging on another process's memory, and an MCP
//! session through the official Python SDK. Then the bad cases (models missing from every
//! place, another onnxruntime), and an uninstall that leaves none of our files behind.
//!
//! Stores: SQLite only (what is under test is the install, not the store).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{expect_exit, slm_bin};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The wheel of this version for this machine in dist/ (a cross-built one may sit beside it).
fn wheel() -> PathBuf {
    let prefix = format!("slm_memory-{}-", env!("CARGO_PKG_VERSION"));
    let found = std::fs::read_dir(repo().join("dist")).into_iter().flatten().flatten().map(|e| e.path()).find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(&format!("_{}.whl", std::env::consts::ARCH)))
    });
    let wheel = found.unwrap_or_else(|| panic!("no dist/{prefix}*.whl: build it with scripts/build-wheel.sh (scripts/test.sh does)"));
    // Built from this code: no source file, manifest or shipped model is newer than the wheel
    // (scripts/test.sh builds it just before the tests).
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    let built = modified(&wheel);
    let sources = files_under(&repo().join("src"))
        .into_iter()
        .map(|f| repo().join("src").join(f))
        .chain(["Cargo.toml", "Cargo.lock", "pyproject.toml", "scripts/build-wheel.sh"].map(|f| repo().join(f)))
        .chain(files_under(&repo().join("models/verifier")).into_iter().map(|f| repo().join("models/verifier").join(f)));
    for source in sources {
        assert!(
            modified(&source) <= built,
            "{} is newer than {}: rebuild it with scripts/build-wheel.sh",
            source.display(),
            wheel.display()
        );
    }
    wheel
}

/// Kills a child left running by a failed assertion.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A fresh venv, its home and a working folder, all outside the repository.
struct Install {
    tmp: tempfile::TempDir,
}

impl Install {
    fn venv(&self) -> PathBuf {
        self.tmp.path().join("venv")
    }
    fn slm(&self) -> PathBuf {
        self.venv().join("bin/slm")
    }
    fn work(&self) -> PathBuf {
        self.tmp.path().join("work")
    }
    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    /// Runs `PROGRAM ARGS` in the working folder with none of a developer's slm settings and a
    /// home of its own (the embedder's cache goes there).
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args).current_dir(self.work()).env("HOME", self.home());
        for var in ["SLM_MODELS", "SLM_MODEL_DIR", "SLM_VERIFIER_DIR", "ORT_DYLIB_PATH", "SLM_DATA_DIR", "SLM_STORE", "XDG_CACHE_HOME"] {
            c.env_remove(var);
        }
        c
    }

    fn slm_cmd(&self, data: &str, args: &[&str]) -> Command {
        let mut c = self.command(&self.slm(), &["--data-dir", data]);
        c.args(args);
        c
    }

    fn run(&self, data: &str, args: &[&str]) -> Output {
        self.slm_cmd(data, args).output().expect("run the installed slm")
    }

    fn json(&self, data: &str, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.run(data, &a);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "slm {a:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"))
    }

    fn pip(&self, args: &[&str]) -> Output {
        let mut a = vec!["-m", "pip", "--disable-pip-version-check", "--quiet"];
        a.extend_from_slice(args);
        let out = self.command(&self.venv().join("bin/python"), &a).output().expect("run pip");
        assert!(out.status.success(), "pip {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        out
    }
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out
}

fn recall_score(hits: &Value) -> f64 {
    hits["hits"][0]["score"].as_f64().unwrap_or_else(|| panic!("no hit: {hits}"))
}

#[test]
fn wheel_installs_runs_outside_the_repository_and_uninstalls_cleanly() {
    let wheel = wheel();
    let inst = Install { tmp: tempfile::tempdir().unwrap() };
    std::fs::create_dir_all(inst.work()).unwrap();
    std::fs::create_dir_all(inst.home()).unwrap();
    assert!(!inst.tmp.path().starts_with(repo()), "the install must be outside the repository");
    let made = Command::new("python3").arg("-m").arg("venv").arg(inst.venv()).status().unwrap();
    assert!(made.success(), "python3 -m venv failed");
    let t0 = Instant::now();
    inst.pip(&["install", wheel.to_str().unwrap()]);
    eprintln!("wheel: pip install {} took {:.1} s", wheel.display(), t0.elapsed().as_secs_f64());

    // Which files it uses: the package's models and the onnxruntime package's library.
    let s = inst.json("data", &["status"]);
    assert_eq!(s["models_source"], "installed package", "{s}");
    let venv = inst.venv().canonicalize().unwrap();
    assert!(s["model_dir"].as_str().unwrap().starts_with(venv.join("share/slm-memory/models").to_str().unwrap()), "{s}");
    let runtime = s["runtime"].as_str().unwrap();
    assert!(runtime.starts_with(venv.to_str().unwrap()) && runtime.ends_with("onnxruntime/capi/libonnxruntime.so.1.31.1"), "{s}");

    // The demo.
    let out = inst.run("data", &["loop", "demo"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("converged"), "{text}\n{}", String::from_utf8_lossy(&out.stderr));

    // The plugin marketplace travels with it (`claude plugin marketplace add` takes this folder).
    let p = inst.json("data", &["plugin", "path"]);
    let market = PathBuf::from(p["marketplace"].as_str().unwrap());
    assert_eq!(market, venv.join("share/slm-memory/marketplace"), "{p}");
    assert!(market.join(".claude-plugin/marketplace.json").is_file() && market.join("plugin/.mcp.json").is_file(), "{p}");

    // remember + recall: the same score as this clone's own build, to 1e-6.
    let text = "the nightly deploy of the api service finished cleanly";
    inst.json("data", &["remember", text]);
    let installed = recall_score(&inst.json("data", &["recall", "api deploy finished"]));
    let clone_root = tempfile::tempdir().unwrap();
    let clone = |args: &[&str]| {
        let out = Command::new(slm_bin()).arg("--data-dir").arg(clone_root.path()).args(args).arg("--json").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(String::from_utf8_lossy(&out.stdout).lines().last().unwrap().as_bytes()).unwrap()
    };
    clone(&["remember", text]);
    let cloned = recall_score(&clone(&["recall", "api deploy finished"]));
    assert!((installed - cloned).abs() < 1e-6, "installed {installed} vs clone {cloned}");
    // Its optimised model copy and the counter's file went to the user's cache, not into the
    // environment.
    let cached = files_under(&inst.home().join(".cache/slm"));
    assert!(cached.iter().any(|f| f.contains("model.opt2.") && f.ends_with(".onnx.data")), "no optimised model in the cache: {cached:?}");
    assert!(cached.iter().any(|f| f.ends_with("tokenizer.count-v2")), "no counter file in the cache: {cached:?}");

    // A loop converging on another process's memory.
    let waiter = inst
        .slm_cmd(
            "data",
            &[
                "loop",
                "run",
                "--name",
                "wheel-wait",
                "--gate-query",
                "review of PR 7 approved",
                "--gate-min-score",
                "0.5",
                "--max-wallclock-s",
                "60",
                "--poll-interval-s",
                "0.25",
                "--json",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut waiter = KillOnDrop(Some(waiter));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = inst.json("data", &["loop", "history", "--name", "wheel-wait"]);
        if h["runs"][0]["final_status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "the loop never showed as running: {h}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let id = inst.json("data", &["remember", "review complete: PR #7 is approved"])["id"].clone();
    let out = waiter.0.take().unwrap().wait_with_output().unwrap();
    let r: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default()).unwrap();
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], id, "{r}");

    // MCP: initialize, tools/list and remember through the official Python SDK.
    let py = repo().join("target/pyenv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/test.sh (it installs the MCP Python SDK)", py.display());
    let script = repo().join("tests/python/mcp_client.py");
    let data = inst.work().join("data");
    let out =
        inst.command(&py, &[script.to_str().unwrap(), "installed", inst.slm().to_str().unwrap(), data.to_str().unwrap()]).output().unwrap();
    assert!(
        out.status.success(),
        "MCP scenario failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Models missing from every place: exit 1, naming the three places looked at.
    let models = inst.venv().join("share/slm-memory/models");
    let aside = inst.venv().join("share/slm-memory/models.aside");
    std::fs::rename(&models, &aside).unwrap();
    let err = expect_exit(&inst.run("data", &["recall", "anything"]), 1, "models missing");
    for place in ["SLM_MODELS", "installed package", "repository"] {
        assert!(err.contains(place), "the error does not name {place}: {err}");
    }
    std::fs::rename(&aside, &models).unwrap();

    // Another onnxruntime in the environment: exit 1, naming both versions.
    inst.pip(&["install", "--no-deps", "onnxruntime==1.32.0"]);
    let err = expect_exit(&inst.run("data", &["recall", "anything"]), 1, "another onnxruntime");
    assert!(err.contains("1.32.0") && err.contains("1.31.1"), "{err}");

    // Uninstalling leaves no file of ours in the environment.
    let ours_before: Vec<String> = files_under(&inst.venv())
        .into_iter()
        .filter(|f| f.contains("slm_memory") || f.contains("share/slm-memory") || f == "bin/slm")
        .collect();
    assert!(ours_before.len() > 10, "{ours_before:?}");
    inst.pip(&["uninstall", "--yes", "slm-memory"]);
    let left: Vec<String> = files_under(&inst.venv())
        .into_iter()
        .filter(|f| f.contains("slm_memory") || f.contains("share/slm-memory") || f == "bin/slm")
        .collect();
    assert!(left.is_empty(), "left behind by pip uninstall: {left:?}");
}
