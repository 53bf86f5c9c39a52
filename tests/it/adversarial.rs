//! Issue #15's adversarial checks, at CI size (`scripts/adversarial.py` runs them at full size):
//! concurrent writers store every memory once; `kill -9` during `slm import` leaves whole
//! batches and a re-run ends exact; seeded fuzzed CLI calls never panic, exit only with
//! 0/1/2/3/130 and write nothing on exit 2; malformed MCP messages each get exactly one answer
//! with their id, and the server goes on answering.
//!
//! The fuzz is deterministic: `SLM_FUZZ_SEED` picks another seed, and a failure prints the seed
//! and the calls that failed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{RawMcp, Root};

/// How a panic reaches stderr: the hook in src/main.rs prints one "internal error" line.
const PANIC_MARKS: [&str; 5] = ["please report this", "panicked", "RUST_BACKTRACE", "stack backtrace", "memory allocation of"];

/// The import's batch (src/import/mod.rs): lines embedded and committed together.
const BATCH: usize = slm::import::BATCH;

/// Every row of every table but the vectors, as text. A detached `slm embed-pending` fills
/// in ledger vectors after a run ends; no call that exits 2 gets that far.
fn fingerprint(db: &Path) -> String {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let mut out = String::new();
    for q in [
        "SELECT id, kind, content, created_at, hex(dedup_key) FROM memories ORDER BY id",
        "SELECT memory_id, tag FROM memory_tags ORDER BY memory_id, tag",
        "SELECT * FROM loop_runs ORDER BY run_id",
        "SELECT * FROM loop_laps ORDER BY run_id, lap",
        "SELECT key, value FROM meta ORDER BY key",
        "SELECT name, seq FROM sqlite_sequence ORDER BY name",
    ] {
        let mut st = conn.prepare(q).unwrap();
        let n = st.column_count();
        let mut rows = st.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i).unwrap();
                let _ = write!(out, "{v:?}|");
            }
            out.push('\n');
        }
        out.push_str("--\n");
    }
    out
}

fn count(db: &Path, sql: &str) -> i64 {
    try_count(db, sql).unwrap()
}

/// `count`, or the error while the store is still being created.
fn try_count(db: &Path, sql: &str) -> rusqlite::Result<i64> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.query_row(sql, [], |r| r.get(0))
}

fn status_check(root: &Root) -> Value {
    let out = root.run(&["status", "--check", "--json"]);
    assert_eq!(out.status.code(), Some(0), "status --check: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// 8 processes × 25 `slm remember` racing on a fresh data root (its first open included):
/// every call succeeds, exactly 200 memories, 25 per writer's tag, integrity ok.
#[test]
fn eight_writers_store_every_memory_once() {
    let root = Arc::new(Root::new());
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let root = Arc::clone(&root);
            std::thread::spawn(move || {
                (0..25)
                    .filter_map(|i| {
                        let out = root.run(&["remember", &format!("writer {w} finished task {i}"), "--tag", &format!("writer-{w}")]);
                        (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let failures: Vec<String> = writers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(failures.is_empty(), "{} calls failed, first: {:?}", failures.len(), failures.first());
    let s = status_check(&root);
    assert_eq!((s["memories"].as_u64(), s["integrity"].as_str()), (Some(200), Some("ok")), "{s}");
    for w in 0..8 {
        let n = count(&root.db_path(), &format!("SELECT count(*) FROM memory_tags WHERE tag = 'writer-{w}'"));
        assert_eq!(n, 25, "writer {w}");
    }
}

/// The line numbers stored by the import below, sorted, and how many rows carry its tag.
fn imported_lines(db: &Path) -> (Vec<usize>, i64) {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let mut st = conn.prepare("SELECT content FROM memories").unwrap();
    let mut lines: Vec<usize> = st
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|c| c.unwrap().split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    lines.sort_unstable();
    let tags = conn.query_row("SELECT count(*) FROM memory_tags WHERE tag = 'imported'", [], |r| r.get(0)).unwrap();
    (lines, tags)
}

/// `kill -9` once the first batch of a 4-batch import has committed: what is stored is lines
/// 1..L, L a whole number of batches, each with its tag; re-running the import stores the rest
/// and dedups the rest exactly; integrity ok.
#[test]
fn kill_9_during_import_leaves_whole_batches_and_a_rerun_ends_exact() {
    let root = Root::new();
    let total = 4 * BATCH;
    let path = root.tmp.path().join("import.jsonl");
    let text: String = (1..=total)
        .map(|i| {
            json!({"content": format!("imported line {i} says build {} passed", i * 7919 % 1000), "tags": ["imported"]}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    let mut child = root.cmd(&["import", path.to_str().unwrap()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while try_count(&root.db_path(), "SELECT count(*) FROM memories").unwrap_or(0) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the import ended before a batch was seen");
        assert!(Instant::now() < deadline, "no batch committed in 120 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let (lines, tags) = imported_lines(&root.db_path());
    let stored = lines.len();
    assert!(stored < total, "the import finished before the kill");
    assert!(stored % BATCH == 0, "{stored} rows is not a whole number of batches of {BATCH}");
    assert_eq!(lines, (1..=stored).collect::<Vec<_>>(), "the first {stored} lines");
    assert_eq!(tags, stored as i64, "every stored row has its tag");

    let again = root.json(&["import", path.to_str().unwrap()]);
    assert_eq!((again["imported"].as_u64(), again["deduped"].as_u64()), (Some((total - stored) as u64), Some(stored as u64)), "{again}");
    let (lines, tags) = imported_lines(&root.db_path());
    assert_eq!((lines, tags), ((1..=total).collect::<Vec<_>>(), total as i64));
    let s = status_check(&root);
    assert_eq!((s["memories"].as_u64(), s["integrity"].as_str()), (Some(total as u64), Some("ok")), "{s}");
}

/// xorshift64*: a deterministic stream for the fuzz, no crate needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// What an argument's value is drawn from.
#[derive(Clone, Copy, PartialEq)]
enum V {
    Text,
    Tag,
    Name,
    Int,
    /// `loop run`'s laps and seconds: valid and small only, so no run waits long.
    SmallInt,
    SmallFloat,
    Float,
    Id,
    Run,
    File,
    Out,
    Shell,
    Verify,
    EnvSpec,
    Kind,
    Profile,
    ShellName,
    /// `dashboard`'s: never one it could serve with.
    Port,
    Bind,
}

/// A subcommand: its words, positional value, optional flags and flags it always gets.
struct Spec {
    words: &'static [&'static str],
    pos: Option<V>,
    flags: &'static [(&'static str, Option<V>)],
    always: &'static [(&'static str, Option<V>)],
}

const fn spec(
    words: &'static [&'static str],
    pos: Option<V>,
    flags: &'static [(&'static str, Option<V>)],
    always: &'static [(&'static str, Option<V>)],
) -> Spec {
    Spec { words, pos, flags, always }
}

/// The subcommands of `slm --help` (and `search`, the hidden `embed-pending`, bad ones).
const SPECS: &[Spec] = &[
    spec(&["remember"], Some(V::Text), &[("--tag", Some(V::Tag))], &[]),
    spec(
        &["recall"],
        Some(V::Text),
        &[("--limit", Some(V::Int)), ("--tag", Some(V::Tag)), ("--min-score", Some(V::Float)), ("--laps", None)],
        &[],
    ),
    spec(&["search"], Some(V::Text), &[("--limit", Some(V::Int))], &[]),
    spec(&["list"], None, &[("--tag", Some(V::Tag)), ("--limit", Some(V::Int)), ("--kind", Some(V::Kind)), ("--before", Some(V::Id))], &[]),
    spec(&["forget"], Some(V::Id), &[], &[]),
    spec(&["status"], None, &[("--check", None)], &[]),
    spec(&["import"], Some(V::File), &[], &[]),
    spec(&["export"], None, &[("--output", Some(V::Out))], &[]),
    spec(&["index"], None, &[], &[]),
    spec(&["index", "rebuild"], None, &[], &[]),
    spec(&["index", "verify"], None, &[("--queries", Some(V::Int))], &[]),
    spec(&["plugin", "path"], None, &[("--codex", None)], &[]),
    spec(&["completions"], Some(V::ShellName), &[], &[]),
    spec(&["man"], None, &[], &[]),
    spec(
        &["gate", "check"],
        None,
        &[
            ("--memory", Some(V::Text)),
            ("--id", Some(V::Id)),
            ("--gate-min-score", Some(V::Float)),
            ("--gate-verify", Some(V::Verify)),
            ("--gate-nli-min", Some(V::Float)),
        ],
        &[("--query", Some(V::Text))],
    ),
    spec(&["loop", "demo"], None, &[("--iterations", Some(V::Int))], &[]),
    spec(
        &["loop", "run"],
        None,
        &[
            ("--gate-min-score", Some(V::Float)),
            ("--poll-interval-s", Some(V::SmallFloat)),
            ("--max-tokens", Some(V::Int)),
            ("--no-progress-window", Some(V::Int)),
            ("--gate-tag", Some(V::Tag)),
            ("--gate-verify", Some(V::Verify)),
            ("--gate-nli-min", Some(V::Float)),
        ],
        &[
            ("--name", Some(V::Name)),
            ("--gate-query", Some(V::Text)),
            ("--max-iterations", Some(V::SmallInt)),
            ("--max-wallclock-s", Some(V::SmallFloat)),
        ],
    ),
    spec(
        &["loop", "start"],
        None,
        &[
            ("--gate-env", Some(V::EnvSpec)),
            ("--max-iterations", Some(V::Int)),
            ("--max-wallclock-s", Some(V::Float)),
            ("--max-tokens", Some(V::Int)),
            ("--no-progress-window", Some(V::Int)),
        ],
        &[("--name", Some(V::Name)), ("--gate-cmd", Some(V::Shell))],
    ),
    spec(&["loop", "step"], Some(V::Run), &[("--tokens", Some(V::Int)), ("--note", Some(V::Text))], &[]),
    spec(&["loop", "history"], None, &[("--name", Some(V::Name)), ("--limit", Some(V::Int))], &[]),
    spec(&["loop", "show"], Some(V::Run), &[("--limit", Some(V::Int))], &[]),
    spec(&["loop", "cancel"], Some(V::Run), &[], &[]),
    spec(&["embed-pending"], None, &[], &[]),
    spec(&["mcp"], None, &[("--profile", Some(V::Profile))], &[]),
    spec(
        &["dashboard"],
        None,
        &[("--bind", Some(V::Bind)), ("--allow-remote", None), ("--allow-host", Some(V::Name)), ("--token-file", Some(V::File))],
        &[("--port", Some(V::Port))],
    ),
    spec(&["help"], None, &[], &[]),
    spec(&["loop"], None, &[], &[]),
    spec(&["frobnicate"], None, &[], &[]),
    spec(&[], None, &[], &[]),
];

/// The fuzz's world: its data root, files and the ids it can name.
struct Fuzz {
    root: Root,
    rng: Rng,
    nasty: Vec<OsString>,
    good_files: Vec<String>,
    bad_files: Vec<String>,
    ids: Vec<String>,
    runs: Vec<String>,
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

impl Fuzz {
    fn new(seed: u64) -> Fuzz {
        let root = Root::new();
        let files = root.tmp.path().join("files");
        std::fs::create_dir(&files).unwrap();
        let w = |name: &str, body: &[u8]| {
            let p = files.join(name);
            std::fs::write(&p, body).unwrap();
            p.to_str().unwrap().to_string()
        };
        let emb = json!(vec![0.05; 384]);
        let good_files = vec![
            w("valid.jsonl", b"{\"content\":\"fuzz import 1\",\"tags\":[\"imp\"]}\n{\"content\":\"fuzz import 2\"}\n"),
            w("given.jsonl", (json!({"content": "fuzz import with its vector", "embedding": emb}).to_string() + "\n").as_bytes()),
            w("empty.jsonl", b""),
            "-".to_string(),
        ];
        let long = json!({"content": "x".repeat(70_000)}).to_string();
        let bad_files = vec![
            w("truncated.jsonl", b"{\"content\": \"cut off"),
            w("types.jsonl", b"{\"content\": 5}\n{\"content\": \"x\", \"tags\": \"notalist\"}\n[1,2]\nnull\n"),
            w("binary.jsonl", &(0..=255u8).cycle().take(1024).collect::<Vec<_>>()),
            w("utf8.jsonl", b"{\"content\": \"\xff\xfe\"}\n"),
            w("long.jsonl", long.as_bytes()),
            w("embed.jsonl", b"{\"content\":\"short vector\",\"embedding\":[1,2,3]}\n{\"content\":\"nan vector\",\"embedding\":[NaN]}\n"),
            w("fields.jsonl", b"{\"content\":\"x\",\"bogus\":1}\n{\"content\":\"y\",\"kind\":\"other\"}\n"),
            w("records.jsonl", b"{\"loop_run\":{\"name\":\"no id\"}}\n{\"loop_lap\":{\"run_id\":\"nope\",\"lap\":-1}}\n"),
            files.to_str().unwrap().to_string(),
            root.tmp.path().join("missing.jsonl").to_str().unwrap().to_string(),
        ];
        let mut nasty: Vec<OsString> = [
            "",
            "0",
            "-1",
            "-0",
            "NaN",
            "nan",
            "inf",
            "-inf",
            "1e308",
            "1e309",
            "99999999999999999999999",
            "18446744073709551616",
            "9223372036854775808",
            "0x10",
            " 1 ",
            "١٢٣",
            "日本語",
            "🚀",
            "-",
            "--",
            "--json",
            "a,b",
            "has space",
            "\n",
            "'; DROP TABLE memories; --",
            "%s%n",
            "../../etc/passwd",
        ]
        .iter()
        .map(|s| os(s))
        .collect();
        nasty.push(os(&"x".repeat(70_000)));
        nasty.push(OsString::from_vec(b"\xff\xfeinvalid utf-8".to_vec()));
        let mut f = Fuzz { root, rng: Rng(seed.max(1)), nasty, good_files, bad_files, ids: vec![], runs: vec![] };
        for (i, text) in
            ["the deploy of release 9 finished", "nightly build failed on arm64", "review complete: PR #42 is approved", "日本語のメモ"]
                .iter()
                .enumerate()
        {
            f.ids.push(f.root.remember(text, &[&format!("t{i}")]).to_string());
        }
        let run =
            f.root.json(&["loop", "run", "--name", "setup", "--gate-query", "deploy of release 9 finished", "--gate-min-score", "0.5"]);
        f.runs.push(run["run_id"].as_str().unwrap().to_string());
        let started = f.root.json(&["loop", "start", "--name", "agent", "--gate-cmd", "false", "--max-wallclock-s", "120"]);
        f.runs.push(started["run_id"].as_str().unwrap().to_string());
        f
    }

    fn value(&mut self, v: V) -> OsString {
        let safe = matches!(v, V::SmallInt | V::SmallFloat | V::Port | V::Bind);
        if !safe && self.rng.chance(35) {
            let n = self.rng.below(self.nasty.len());
            return self.nasty[n].clone();
        }
        let out = self.root.tmp.path().join(format!("out-{}.jsonl", self.rng.below(1_000_000)));
        let good: Vec<String> = match v {
            V::Text => vec![
                "the deploy finished".into(),
                "nightly build failed on arm64".into(),
                "日本語のメモ".into(),
                "x".repeat(2000),
                "y".repeat(2001),
            ],
            V::Tag => vec!["imp".into(), "t0".into(), "loop:setup".into(), "a-b_c".into(), "t".repeat(128), "t".repeat(129)],
            V::Name => vec!["fuzz".into(), "fuzz.loop:1".into(), "setup".into(), "agent".into(), "n".repeat(129), "ü".into()],
            V::Int => ["1", "2", "5", "10", "0", "1000", "1001"].map(String::from).to_vec(),
            V::SmallInt => ["1", "2", "3"].map(String::from).to_vec(),
            V::SmallFloat => ["0.25", "0.5", "1"].map(String::from).to_vec(),
            V::Float => ["0", "0.5", "-0.5", "1", "-1", "1.5", "0.25"].map(String::from).to_vec(),
            V::Id => self.ids.iter().cloned().chain(["1".into(), "99999".into()]).collect(),
            V::Run => self.runs.iter().cloned().chain(["00000000-0000-0000-0000-000000000000".into(), "nope".into()]).collect(),
            V::File => self.good_files.iter().chain(&self.bad_files).cloned().collect(),
            V::Out => {
                vec![out.to_str().unwrap().into(), "/nonexistent/dir/out.jsonl".into(), self.root.tmp.path().to_str().unwrap().into()]
            }
            V::Shell => ["true", "false", "exit 3", "echo ok", "kill -9 $$", "cat /nonexistent", "exit 256"].map(String::from).to_vec(),
            V::Verify => ["guard", "none", "nli:/nonexistent", "cmd:true", "cmd:false", "cmd:", "bogus", "nli:"].map(String::from).to_vec(),
            V::EnvSpec => ["HOME", "X=1", "=1", "NOT_SET_ANYWHERE_15", "A B=1"].map(String::from).to_vec(),
            V::Kind => ["memory", "lap", "all", "everything"].map(String::from).to_vec(),
            V::Profile => ["core", "code", "full", "power", "whole", "bogus"].map(String::from).to_vec(),
            V::ShellName => ["bash", "zsh", "fish", "elvish", "powershell", "tcsh"].map(String::from).to_vec(),
            V::Port => ["abc", "-1", "70000", "NaN", "", "1e3"].map(String::from).to_vec(),
            V::Bind => ["not-an-address", "0.0.0.0", "999.1.1.1", "::", ""].map(String::from).to_vec(),
        };
        OsString::from(self.rng.pick(&good))
    }

    /// One random command line (after `--data-dir ROOT`).
    fn call(&mut self) -> Vec<OsString> {
        let spec = &SPECS[self.rng.below(SPECS.len())];
        let mut argv: Vec<OsString> = vec![];
        if self.rng.chance(10) {
            let file = self.good_files[0].clone();
            let globals: [&[&str]; 7] = [
                &["--data-dir", "/nonexistent/parent/x"],
                &["--data-dir", &file],
                &["--store", "mysql://x"],
                &["--store", "postgres://"],
                &["--store", "postgres://u@127.0.0.1:1/db"],
                &["-V"],
                &["--help"],
            ];
            argv.extend(self.rng.pick(&globals).iter().map(|s| os(s)));
        }
        argv.extend(spec.words.iter().map(|s| os(s)));
        let mut chosen: Vec<(&str, Option<V>)> = spec.always.to_vec();
        if !spec.flags.is_empty() {
            for _ in 0..self.rng.below(4) {
                chosen.push(*self.rng.pick(spec.flags));
            }
        }
        for i in (1..chosen.len()).rev() {
            chosen.swap(i, self.rng.below(i + 1));
        }
        for (flag, v) in chosen {
            argv.push(os(flag));
            if let Some(v) = v {
                argv.push(self.value(v));
            }
        }
        if let Some(v) = spec.pos {
            if !self.rng.chance(10) {
                for _ in 0..if v == V::Id { 1 + self.rng.below(3) } else { 1 } {
                    argv.push(self.value(v));
                }
            }
        }
        if self.rng.chance(50) {
            argv.push(os("--json"));
        }
        match self.rng.below(100) {
            0..=7 => {
                let at = self.rng.below(argv.len() + 1);
                let bad = *self.rng.pick(&["--bogus", "-z", "--limit=", "--tag", "--json=yes"]);
                argv.insert(at, os(bad));
            }
            8..=12 => {
                argv.pop(); // a flag loses its value, or a command its argument
            }
            13..=16 if argv.len() >= 2 => {
                let last = argv[argv.len() - 2..].to_vec();
                argv.extend(last); // the last flag twice
            }
            _ => {}
        }
        argv
    }

    /// The extremes of every numeric argument, run before the random calls.
    fn edges(&self) -> Vec<Vec<OsString>> {
        let (top, i63) = ("18446744073709551615", "9223372036854775807");
        let run = self.runs[1].as_str();
        let (long, query) = ("x".repeat(70_000), "q".repeat(2001));
        let edges: Vec<Vec<&str>> = vec![
            vec!["index", "verify", "--queries", top],
            vec!["index", "verify", "--queries", "9223372036854775808"],
            vec!["recall", "q", "--limit", top],
            vec!["list", "--before", i63],
            vec!["forget", i63],
            vec!["gate", "check", "--query", "x", "--id", i63],
            vec!["loop", "demo", "--iterations", top],
            vec!["loop", "show", run, "--limit", top],
            vec!["loop", "history", "--limit", top],
            vec![
                "loop",
                "start",
                "--name",
                "big",
                "--gate-cmd",
                "true",
                "--max-iterations",
                i63,
                "--max-wallclock-s",
                "1e308",
                "--max-tokens",
                i63,
            ],
            vec!["loop", "step", run, "--tokens", i63, "--json"],
            vec!["loop", "step", run, "--tokens", i63, "--json"],
            vec!["remember", &long],
            vec!["recall", &long],
            vec!["loop", "run", "--name", "n", "--gate-query", &query],
        ];
        edges.into_iter().map(|e| e.into_iter().map(os).collect()).collect()
    }
}

fn shown(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.chars().count() > 40 {
                format!("{:?}…({} bytes)", s.chars().take(40).collect::<String>(), a.len())
            } else {
                format!("{s:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `slm --data-dir ROOT ARGV` in the root's temp dir with stdin closed; a call still running after 60 s is
/// killed and reported as hung.
fn run_bounded(root: &Root, argv: &[OsString]) -> Result<std::process::Output, String> {
    let mut c = root.cmd(&[]);
    // In the temp dir: `export --output NaN` writes a file named NaN where it runs.
    c.args(argv).current_dir(root.tmp.path()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().map_err(|e| format!("spawn: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.map_err(|e| e.to_string()),
        Err(_) => {
            let _ = std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status();
            Err("hung for 60 s".into())
        }
    }
}

/// The extremes of every numeric argument, then 300 seeded random calls: no panic, every exit
/// code in {0,1,2,3,130}, and nothing written when the exit is 2. Two steps of i64::MAX
/// tokens saturate the run's count instead of wrapping it.
#[test]
fn fuzzed_cli_calls_never_panic_exit_cleanly_and_write_nothing_on_exit_2() {
    let seed = std::env::var("SLM_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(15u64);
    let mut fuzz = Fuzz::new(seed);
    let db = fuzz.root.db_path();
    let edges = fuzz.edges();
    let mut codes: BTreeMap<i32, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut tokens = Vec::new();
    for n in 0..edges.len() + 300 {
        let argv = if n < edges.len() { edges[n].clone() } else { fuzz.call() };
        let before = fingerprint(&db);
        let out = match run_bounded(&fuzz.root, &argv) {
            Ok(out) => out,
            Err(e) => {
                failures.push(format!("call {n}: {e}: slm {}", shown(&argv)));
                continue;
            }
        };
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code().unwrap_or(-1);
        *codes.entry(code).or_default() += 1;
        if let Some(m) = PANIC_MARKS.iter().find(|m| err.contains(*m)) {
            failures.push(format!("call {n}: {m:?} on stderr: slm {}: {}", shown(&argv), err.chars().take(300).collect::<String>()));
        }
        if ![0, 1, 2, 3, 130].contains(&code) {
            failures.push(format!("call {n}: exit {:?}: slm {}: {}", out.status, shown(&argv), err.chars().take(300).collect::<String>()));
        }
        if code == 2 && fingerprint(&db) != before {
            failures.push(format!("call {n}: exit 2 but the store changed: slm {}: {err}", shown(&argv)));
        }
        if n < edges.len() && argv[1] == "step" {
            tokens.push(serde_json::from_slice::<Value>(&out.stdout).ok().and_then(|v| v["budget"]["tokens_used"].as_u64()));
        }
    }
    eprintln!("fuzz seed {seed}: exit codes {codes:?}");
    assert!(failures.is_empty(), "seed {seed} (SLM_FUZZ_SEED): {} failures:\n{}", failures.len(), failures.join("\n"));
    // The first step counts i64::MAX plus its ledger text; the second would wrap past u64::MAX.
    assert!(tokens.len() == 2 && tokens[0] > Some(i64::MAX as u64) && tokens[1] == Some(u64::MAX), "tokens_used saturates: {tokens:?}");
    assert!(codes.get(&0).is_some_and(|&n| n >= 30) && codes.get(&2).is_some_and(|&n| n >= 30), "both successes and refusals: {codes:?}");
}

/// Bad tool arguments for every tool of the `whole` profile.
fn bad_tool_arguments() -> Vec<(&'static str, Value)> {
    let many: Vec<String> = (0..1001).map(|i| format!("t{i}")).collect();
    vec![
        ("remember", json!({})),
        ("remember", json!({"content": 5})),
        ("remember", json!({"content": ""})),
        ("remember", json!({"content": "x".repeat(70_000)})),
        ("remember", json!({"content": "x", "tags": ["has space"]})),
        ("remember", json!({"content": "x", "bogus": 1})),
        ("recall", json!({})),
        ("recall", json!({"query": "x", "limit": -1})),
        ("recall", json!({"query": "x", "limit": 1e300})),
        ("recall", json!({"query": "x", "min_score": 2})),
        ("list_memories", json!({"limit": 0})),
        ("list_memories", json!({"kind": "everything"})),
        ("list_memories", json!({"tags": many})),
        ("forget", json!({"ids": []})),
        ("forget", json!({"ids": [1.5]})),
        ("get_memories", json!({"ids": "x"})),
        ("import_memories", json!({"items": "x"})),
        ("slm_loop_run", json!({"name": "has space", "gate_query": "q"})),
        ("slm_loop_run", json!({"name": "x", "gate_query": "q", "max_wallclock_s": -1})),
        ("slm_loop_run", json!({"name": "x", "gate_query": "q", "gate_verify": ["bogus"]})),
        ("slm_loop_show", json!({"run_id": 5})),
        ("slm_loop_history", json!({"limit": "ten"})),
        ("slm_loop_cancel", json!({"run_id": null})),
        ("slm_loop_demo", json!({"iterations": 0})),
    ]
}

/// One malformed message: its bytes, the ids its answers carry (`Null`: an id that cannot be
/// read; none: a notification), and whether every answer must be an error.
fn mcp_cases() -> Vec<(Vec<u8>, Vec<Value>, bool)> {
    let mut cases: Vec<(Vec<u8>, Vec<Value>, bool)> = vec![];
    let req = |id: Value, method: Value, params: Option<Value>| {
        let mut m = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            m["params"] = p;
        }
        m
    };
    let mut add = |line: &[u8], ids: Vec<Value>, err: bool| cases.push((line.to_vec(), ids, err));
    for raw in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\""[..],
        b"not json",
        b"{",
        b"[1,2",
        b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}}",
        b"\xef\xbb\xbf{}",
        b"\xff\xfe{\"a\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"x\":1e999}}",
    ] {
        add(raw, vec![Value::Null], true);
    }
    let s = |v: Value| v.to_string().into_bytes();
    add(&s(json!({"id": "e1", "method": "ping"})), vec![json!("e1")], true);
    add(&s(json!({"jsonrpc": "1.0", "id": "e2", "method": "ping"})), vec![json!("e2")], true);
    add(&s(json!({"jsonrpc": 2.0, "id": "e3", "method": "ping"})), vec![json!("e3")], true);
    for (n, method) in [json!(5), Value::Null, json!([]), json!({})].into_iter().enumerate() {
        add(&s(req(json!(format!("m{n}")), method, None)), vec![json!(format!("m{n}"))], true);
    }
    for (n, params) in [json!([1]), json!("x"), json!(5), json!(true)].into_iter().enumerate() {
        add(&s(req(json!(format!("p{n}")), json!("tools/list"), Some(params))), vec![json!(format!("p{n}"))], true);
    }
    for bad in [json!(true), json!({}), json!([])] {
        add(&s(req(bad, json!("ping"), None)), vec![Value::Null], true);
    }
    // Numbers rmcp cannot read as an id are answered with them; the extremes it can, normally.
    add(b"{\"jsonrpc\":\"2.0\",\"id\":9223372036854775808,\"method\":\"ping\"}", vec![json!(9223372036854775808u64)], true);
    add(b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", vec![json!(1.5)], true);
    add(b"{\"jsonrpc\":\"2.0\",\"id\":-9223372036854775808,\"method\":\"ping\"}", vec![json!(i64::MIN)], false);
    add(&s(req(json!("s".repeat(10_000)), json!("ping"), None)), vec![json!("s".repeat(10_000))], false);
    add(&s(req(json!(""), json!("ping"), None)), vec![json!("")], false);
    for (n, method) in ["foo/bar", "", "resources/list", "prompts/get"].into_iter().enumerate() {
        add(&s(req(json!(format!("u{n}")), json!(method), None)), vec![json!(format!("u{n}"))], true);
    }
    // Notifications are never answered, whatever their params (unless the envelope is bad).
    add(&s(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {}}})), vec![], false);
    add(&s(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": [], "progress": "x"}})), vec![], false);
    add(&s(json!({"jsonrpc": "2.0", "method": "notifications/bogus", "params": {"a": 1}})), vec![], false);
    add(&s(json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]})), vec![Value::Null], true);
    add(&s(json!({"jsonrpc": "2.0", "id": 424242, "result": {}})), vec![], false);
    // Batches (MCP has none): every member with an id is answered.
    add(b"[]", vec![Value::Null], true);
    add(
        &s(json!([req(json!("b1"), json!("ping"), None), req(json!("b2"), json!("tools/list"), None)])),
        vec![json!("b1"), json!("b2")],
        true,
    );
    add(b"[1,2]", vec![Value::Null, Value::Null], true);
    // tools/call without usable params, an unknown tool, bad arguments for every tool.
    add(&s(req(json!("c0"), json!("tools/call"), None)), vec![json!("c0")], true);
    add(&s(req(json!("c1"), json!("tools/call"), Some(json!({"name": 5})))), vec![json!("c1")], true);
    add(&s(req(json!("c2"), json!("tools/call"), Some(json!({"name": "status", "arguments": [1]})))), vec![json!("c2")], true);
    add(&s(req(json!("c3"), json!("tools/call"), Some(json!({"name": "nope", "arguments": {}})))), vec![json!("c3")], true);
    for (n, (tool, args)) in bad_tool_arguments().into_iter().enumerate() {
        let id = json!(format!("t{n}"));
        add(&s(req(id.clone(), json!("tools/call"), Some(json!({"name": tool, "arguments": args})))), vec![id], true);
    }
    add(
        &s(req(json!("big"), json!("tools/call"), Some(json!({"name": "remember", "arguments": {"content": "z".repeat(2_000_000)}})))),
        vec![json!("big")],
        true,
    );
    add(&b"{".repeat(100_000), vec![Value::Null], true);
    cases
}

fn is_error(a: &Value) -> bool {
    a.get("error").is_some() || a["result"]["isError"] == true
}

/// Every malformed message with an id gets exactly one answer with that id (an unreadable id:
/// one answer with id null; a notification: none); then `ping` is still answered, nothing
/// came late, nothing was written and stderr shows no panic.
#[test]
fn malformed_mcp_messages_each_get_one_answer_and_the_server_goes_on() {
    let root = Root::new();
    root.remember("one memory so the store exists", &[]);
    let before = fingerprint(&root.db_path());
    let mut m = RawMcp::start_with(&root, &["--profile", "whole"]);
    let cases = mcp_cases();
    assert!(cases.len() >= 61, "{} cases", cases.len());
    let answers = |line: String| -> Vec<Value> {
        match serde_json::from_str(&line).unwrap() {
            Value::Array(a) => a,
            v => vec![v],
        }
    };
    let mut failures = Vec::new();
    for (n, (line, expected, err)) in cases.iter().enumerate() {
        let what = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
        let sync = format!("sync-{n}");
        m.send_bytes(line);
        m.send(&json!({"jsonrpc": "2.0", "id": sync, "method": "ping"}).to_string());
        let mut want: BTreeMap<String, usize> = BTreeMap::new();
        for id in expected {
            *want.entry(id.to_string()).or_default() += 1;
        }
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        let mut synced = false;
        // Tool calls run concurrently: wait for the ping's answer and every expected id.
        while !synced || want.iter().any(|(k, v)| k != "null" && got.get(k).copied().unwrap_or(0) < *v) {
            let Ok(line) = m.replies.recv_timeout(Duration::from_secs(30)) else {
                failures.push(format!("case {n}: no answer in 30 s (expected {want:?}, got {got:?}): {what}"));
                break;
            };
            for a in answers(line) {
                if a["id"] == sync.as_str() {
                    synced = true;
                    continue;
                }
                *got.entry(a["id"].to_string()).or_default() += 1;
                if *err && !is_error(&a) {
                    failures.push(format!("case {n}: not an error: {a}: {what}"));
                }
            }
        }
        if got != want {
            failures.push(format!("case {n}: answers {got:?}, expected {want:?}: {what}"));
        }
    }
    m.send(r#"{"jsonrpc":"2.0","id":"final","method":"ping"}"#);
    assert_eq!(m.reply()["id"], "final", "ping after the malformed messages");
    std::thread::sleep(Duration::from_millis(300));
    let late: Vec<String> = m.replies.try_iter().collect();
    assert!(late.is_empty(), "answers after the last ping: {late:?}");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    let stderr = m.stderr();
    assert!(!PANIC_MARKS.iter().any(|p| stderr.contains(p)), "{stderr}");
    drop(m);
    assert_eq!(fingerprint(&root.db_path()), before, "nothing was written");
}
