//! Helpers shared by the integration tests: a temporary data root and a way to run `slm`.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// The `slm` binary cargo built for these tests.
pub fn slm_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_slm"))
}

/// A temporary data root, deleted on drop; its rows live in its SQLite file, or in a shared
/// PostgreSQL database when `store` is set.
pub struct Root {
    pub tmp: tempfile::TempDir,
    /// The `--store` URL every command of this root gets (`None`: SQLite).
    pub store: Option<String>,
}

impl Root {
    /// A fresh data root with its own store: the SQLite file, or, with
    /// `SLM_TEST_STORE=postgres`, a fresh database on the tests' private PostgreSQL server (so
    /// the shared behaviour tests run against both stores: see scripts/test.sh).
    pub fn new() -> Root {
        if std::env::var("SLM_TEST_STORE").is_ok_and(|v| v == "postgres") {
            return Root::on(&crate::pg::Cluster::shared().database());
        }
        Root { tmp: tempfile::tempdir().expect("tempdir"), store: None }
    }

    /// A data root of its own whose rows live in the PostgreSQL database at `url` (another
    /// "host" of that store).
    pub fn on(url: &str) -> Root {
        Root { tmp: tempfile::tempdir().expect("tempdir"), store: Some(url.to_string()) }
    }

    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    /// A `slm` command with `--data-dir` set to this root.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(slm_bin());
        c.arg("--data-dir").arg(self.dir()).args(args);
        c.env_remove("SLM_DATA_DIR");
        match &self.store {
            Some(url) => c.env("SLM_STORE", url),
            None => c.env_remove("SLM_STORE"),
        };
        c
    }

    /// Runs `slm ARGS` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("spawn slm")
    }

    /// Runs `slm ARGS --json`, asserts success and parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.run(&a);
        assert!(out.status.success(), "slm {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("slm {args:?} printed invalid JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    /// Remembers `content` with tags and returns its id.
    pub fn remember(&self, content: &str, tags: &[&str]) -> i64 {
        let mut args = vec!["remember", content];
        for t in tags {
            args.push("--tag");
            args.push(t);
        }
        self.json(&args)["id"].as_i64().expect("id")
    }

    /// The number of memories stored (`status`).
    pub fn count(&self) -> u64 {
        self.json(&["status"])["memories"].as_u64().expect("memories")
    }

    /// Opens this root's store directly: its SQLite file, or its PostgreSQL database.
    pub fn open_store(&self) -> slm::storage::Store {
        match &self.store {
            Some(url) => {
                let url = slm::storage::PgUrl::from_flag(Some(url)).unwrap().unwrap();
                slm::storage::Store::open_at(&slm::storage::Location::Postgres(url)).unwrap()
            }
            None => slm::storage::Store::open(&self.db_path()).unwrap(),
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir().join("slm.db")
    }
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts an exit code and returns stderr.
pub fn expect_exit(o: &Output, code: i32, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{what}: wrong exit code; stderr: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{what}: panic: {err}");
    err
}

/// Waits until a run of loop `name` shows as running in history; returns its run id.
pub fn wait_running(root: &Root, name: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let h = root.json(&["loop", "history", "--name", name]);
        if let Some(r) = h["runs"].as_array().and_then(|r| r.first()) {
            if r["final_status"] == "running" {
                return r["run_id"].as_str().unwrap().to_string();
            }
        }
        assert!(std::time::Instant::now() < deadline, "run of {name} never showed as running");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
