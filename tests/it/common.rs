//! Helpers shared by the integration tests: a temporary data root, a way to run `slm`, and
//! `slm mcp` driven line by line over its stdio.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Stderr as text.
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

/// The longest an MCP client scenario may take: 300 s (each takes seconds; their loops' own
/// bounds are at most 60 s), or `SLM_TEST_CLIENT_LIMIT_S` seconds (to see the report a hang
/// gives: set it below a scenario's time).
pub fn client_limit() -> Duration {
    let secs = std::env::var("SLM_TEST_CLIENT_LIMIT_S").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    Duration::from_secs(secs)
}

/// Runs `cmd` (a client that starts servers of its own) to its end, for at most `limit`. A hang
/// is a failed test, never a CI run that overruns its time: past the limit this panics with
/// what the command printed so far (its servers' stderr included), the threads of every
/// process still running on `data_root` (gdb's backtraces, when gdb is installed) and, on
/// PostgreSQL, the store's sessions and the locks they wait for; then kills them all.
pub fn output_within(cmd: &mut Command, limit: Duration, data_root: &Path) -> Output {
    // A group of its own, so the kill reaches what it started (unless that left the group).
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn().expect("spawn");
    // Read on threads into shared buffers: a server that outlives the client holds the pipes
    // open, so a timed-out run cannot wait for their end.
    let drain = |mut r: Box<dyn Read + Send>| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b = buf.clone();
        let t = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = r.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (buf, t)
    };
    let (out, out_t) = drain(Box::new(child.stdout.take().unwrap()));
    let (err, err_t) = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let _ = out_t.join();
            let _ = err_t.join();
            let take = |b: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock().unwrap());
            return Output { status, stdout: take(&out), stderr: take(&err) };
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut report = format!("still running after {} s: {:?}\n", limit.as_secs(), cmd);
    let root = data_root.to_string_lossy().into_owned();
    let mut pids = vec![child.id()];
    pids.extend(processes_naming(&root));
    pids.sort_unstable();
    pids.dedup();
    for pid in &pids {
        report.push_str(&process_threads(*pid));
    }
    if let Ok(url) = std::env::var("SLM_TEST_STORE") {
        if url == "postgres" {
            report.push_str(&crate::pg::Cluster::shared().sql(
                "postgres",
                "SELECT string_agg(format('pid %s db %s %s wait %s/%s xact %s: %s', a.pid, a.datname, a.state, \
                 a.wait_event_type, a.wait_event, now() - a.xact_start, left(a.query, 160)) || \
                 coalesce(' WAITS FOR ' || l.locktype || ' ' || coalesce(l.objid::text, '') || ' ' || l.mode, ''), E'\\n') \
                 FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted WHERE a.datname IS NOT NULL",
            ));
        }
    }
    // SAFETY: signals the group this function started (its id is the child's pid).
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    for pid in &pids {
        // SAFETY: a plain signal to a process of this test.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    let _ = child.wait();
    let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    panic!("{report}\n--- stdout:\n{}\n--- stderr:\n{}", text(&out), text(&err));
}

/// The processes whose command line names `needle` (the servers a client started on a root).
fn processes_naming(needle: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle)))
        .collect()
}

/// What a process's threads are doing: gdb's backtraces when gdb can attach, else each
/// thread's name and kernel wait channel.
fn process_threads(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map(|c| String::from_utf8_lossy(&c).replace('\0', " ")).unwrap_or_default();
    let mut s = format!("\n=== process {pid}: {cmdline}\n");
    let gdb = Command::new("timeout")
        .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-nx", "-ex", "thread apply all bt 16"])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            // The frames, without gdb's chatter about loading symbols.
            for line in text.lines().filter(|l| l.starts_with('#') || l.starts_with("Thread ")) {
                s.push_str(line);
                s.push('\n');
            }
        }
        _ => {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return s };
            for t in tasks.flatten() {
                let p = t.path();
                let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default().trim().to_string();
                s.push_str(&format!("thread {} {} wchan {}\n", t.file_name().to_string_lossy(), read("comm"), read("wchan")));
            }
        }
    }
    s
}
