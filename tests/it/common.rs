//! Helpers shared by the integration tests: a temporary data root, a way to run `slm`, and
//! `slm mcp` driven line by line over its stdio.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

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
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("slm {args:?} printed invalid JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
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
/// `slm loop run ARGS --json` on `root`, started with its output piped.
pub fn spawn_loop_run(root: &Root, args: &[&str]) -> Child {
    let mut a = vec!["loop", "run"];
    a.extend_from_slice(args);
    a.push("--json");
    root.cmd(&a).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn loop run")
}

/// The result a finished `slm loop run --json` printed (its last line).
pub fn loop_result(child: Child) -> Value {
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts an exit code and returns stderr.
pub fn expect_exit(o: &Output, code: i32, what: &str) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{what}: wrong exit code; stderr: {err}");
    // src/main.rs's hook turns a panic into one "internal error … please report this" line.
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE") && !err.contains("please report this"), "{what}: panic: {err}");
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

/// `slm mcp` with its stdin and stdout, reading replies on a thread so a missing one is a
/// failed assertion, not a hung test. Its stderr goes to a file in the root's temp dir.
pub struct RawMcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    pub replies: mpsc::Receiver<String>,
    stderr_path: PathBuf,
}

impl RawMcp {
    /// Starts `slm mcp` on `root` and completes the initialize handshake.
    pub fn start(root: &Root) -> RawMcp {
        RawMcp::start_with(root, &[])
    }

    /// The same, with `args` after `slm mcp` (e.g. `--profile whole`).
    pub fn start_with(root: &Root, args: &[&str]) -> RawMcp {
        RawMcp::start_env(root, args, &[])
    }

    /// The same, with `env` added to the server's environment.
    pub fn start_env(root: &Root, args: &[&str], env: &[(&str, &str)]) -> RawMcp {
        let stderr_path =
            tempfile::Builder::new().prefix("mcp-stderr").tempfile_in(root.tmp.path()).unwrap().into_temp_path().keep().unwrap();
        let mut child = root
            .cmd(&[&["mcp"], args].concat())
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut m = RawMcp { child, stdin, replies, stderr_path };
        m.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
            .to_string(),
        );
        assert_eq!(m.reply()["result"]["serverInfo"]["name"], "slm");
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        m
    }

    /// Writes one line (a newline is added).
    pub fn send(&mut self, line: &str) {
        self.send_bytes(line.as_bytes());
    }

    /// Writes one line of raw bytes (not necessarily UTF-8).
    pub fn send_bytes(&mut self, line: &[u8]) {
        self.stdin
            .write_all(line)
            .and_then(|()| self.stdin.write_all(b"\n"))
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("slm mcp stopped reading ({e}); stderr: {}", self.stderr()));
    }

    /// The next reply; 30 s without one fails (the client would hang).
    pub fn reply(&self) -> Value {
        let line = self.replies.recv_timeout(Duration::from_secs(30)).expect("no reply from slm mcp");
        serde_json::from_str(&line).unwrap()
    }

    /// Calls tool `name` (request id `id`) and returns its structured result.
    pub fn tool(&mut self, id: u64, name: &str, args: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}}).to_string());
        loop {
            let m = self.reply();
            if m["id"] == id {
                return m["result"]["structuredContent"].clone();
            }
        }
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for RawMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
