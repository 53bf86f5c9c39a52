//! The store's hard edges (issue #15, items 3, 4, 5, 8), each through the real binary:
//! tag-count limits as invalid input, a data root on a read-only mount, an import that fills
//! its disk part-way, and an emptied or damaged database file.
//!
//! Read-only media and a full disk are made for real in a private mount namespace
//! (`unshare -m`: a read-only bind mount, a small tmpfs), which needs root or user
//! namespaces; where neither works the test says why on stderr and returns.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::common::{expect_exit, slm_bin, stderr, Root};

/// Runs `slm --data-dir <root> ARGS --json` and parses its stderr's error envelope.
fn error_envelope(out: &Output) -> Value {
    let err = stderr(out);
    let line = err.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON error on stderr: {err}"));
    serde_json::from_str(line).unwrap()
}

fn tag_args(flag: &str, n: usize) -> Vec<String> {
    (0..n).flat_map(|i| [flag.to_string(), format!("t{i}")]).collect()
}

#[test]
fn tag_counts_beyond_the_limit_are_invalid_input_on_every_command() {
    let root = Root::new();
    let many: Vec<String> = (0..64).map(|i| format!("t{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let id = root.remember("a memory carrying sixty-four tags", &refs);

    // At the limit, filters work.
    let mut args = vec!["recall".to_string(), "sixty-four tags".into()];
    args.extend(tag_args("--tag", 64));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(root.json(&a)["hits"][0]["id"], id);
    let mut args = vec!["list".to_string()];
    args.extend(tag_args("--tag", 64));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(root.json(&a)["memories"].as_array().map(Vec::len), Some(1), "list with 64 tags");

    // Beyond it: exit 2 naming the field, never a raw SQLite error (these were exit 1 with
    // "too many terms in compound SELECT" / "Expression tree is too large").
    for (cmd, flag, n, field) in [
        ("recall", "--tag", 600, "tags"),
        ("list", "--tag", 1100, "tags"),
        ("remember", "--tag", 65, "tags"),
        ("loop", "--gate-tag", 600, "gate_tags"),
    ] {
        let mut args: Vec<String> = match cmd {
            "recall" => vec!["recall".into(), "q".into()],
            "list" => vec!["list".into()],
            "remember" => vec!["remember".into(), "another memory".into()],
            _ => ["loop", "run", "--name", "many", "--gate-query", "q", "--max-iterations", "1"].map(String::from).to_vec(),
        };
        args.extend(tag_args(flag, n));
        args.push("--json".into());
        let out = root.cmd(&args.iter().map(String::as_str).collect::<Vec<_>>()).output().unwrap();
        expect_exit(&out, 2, &format!("{cmd} with {n} tags"));
        let e = error_envelope(&out);
        assert_eq!(e["error"]["kind"], "invalid_input", "{cmd}: {e}");
        assert_eq!(e["error"]["field"], field, "{cmd}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("at most 64"), "{cmd}: {e}");
    }
    // Nothing was written by the refused calls: no second memory, no run.
    assert_eq!(root.count(), 1);
    assert_eq!(root.json(&["loop", "history"])["runs"].as_array().map(Vec::len), Some(0));
}

/// Runs `argv` in a private mount namespace (`unshare FLAG`: `-m` as root, `-rm` through a
/// user namespace) after `setup` (shell commands) succeeded; `None` when that fails.
fn in_namespace(flag: &str, setup: &str, argv: &[&str]) -> Option<Output> {
    let script = format!("{setup} || exit 97; exec \"$@\"");
    let out = Command::new("unshare").args([flag, "sh", "-c", &script, "sh"]).args(argv).stdin(Stdio::null()).output().ok()?;
    (out.status.code() != Some(97) && !stderr(&out).starts_with("unshare:")).then_some(out)
}

/// A data root and an empty mount point where it appears read-only.
struct ReadOnly {
    root: Root,
    mnt: PathBuf,
    flag: &'static str,
}

impl ReadOnly {
    fn setup(&self) -> String {
        format!("mount --bind -o ro '{}' '{}'", self.root.dir().display(), self.mnt.display())
    }

    /// `slm --data-dir <read-only view> ARGS`.
    fn run(&self, args: &[&str]) -> Option<Output> {
        let bin = slm_bin();
        let mut argv = vec![bin.to_str().unwrap(), "--data-dir", self.mnt.to_str().unwrap()];
        argv.extend_from_slice(args);
        in_namespace(self.flag, &self.setup(), &argv)
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.run(&a).unwrap();
        expect_exit(&out, 0, &format!("read-only {args:?}"));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn read_only_root() -> Option<ReadOnly> {
    let root = Root::new();
    let mnt = root.tmp.path().join("ro");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(root.dir()).unwrap();
    let mut ro = ReadOnly { root, mnt, flag: "-m" };
    // The probe must fail to write: then the mount is real and read-only, root included.
    for flag in ["-m", "-rm"] {
        ro.flag = flag;
        let probe = in_namespace(flag, &ro.setup(), &["touch", ro.mnt.join("probe").to_str().unwrap()]);
        if probe.is_some_and(|out| !out.status.success() && stderr(&out).contains("Read-only")) {
            return Some(ro);
        }
    }
    eprintln!("SKIPPED: cannot make a read-only bind mount here (unshare -m or -rm, then mount --bind -o ro)");
    None
}

#[test]
fn a_read_only_data_root_serves_every_read_and_refuses_writes_by_name() {
    let Some(ro) = read_only_root() else { return };
    let root = &ro.root;
    let id = root.remember("the release build on main is green", &["ci"]);
    root.remember("lunch is at noon", &[]);
    // The gate names what the memory says ("on main"): this test is about the read-only root,
    // not the verifier, which under-trusts true signals more specific than the query (the
    // model card's "What it misses").
    let run = root.json(&["loop", "run", "--name", "rel", "--gate-query", "release build on main is green", "--max-iterations", "2"]);
    assert_eq!(run["status"], "converged");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    // The run's ledger laps are embedded by a background `slm embed-pending`: let it finish,
    // so the store is cleanly closed (no write-ahead log left) before it goes read-only. (The
    // log alone is not enough to wait on: it is gone for a moment between the run's exit and
    // the background process's first open, longer on a busy machine.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let pending = root.open_store().pending_rows(1).unwrap().len();
        if pending == 0 && !root.dir().join("slm.db-wal").exists() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the store was never closed cleanly ({pending} rows pending)");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let before = std::fs::read(root.db_path()).unwrap();

    // Reads: every one answers from the read-only view (all failed "unable to open database file").
    let listed = ro.json(&["list"]);
    assert_eq!(listed["memories"].as_array().map(Vec::len), Some(2));
    let hits = ro.json(&["recall", "is the release green", "--tag", "ci"]);
    assert_eq!(hits["hits"][0]["id"], id);
    let status = ro.json(&["status"]);
    assert_eq!(status["read_only"], true);
    assert_eq!(status["memories"], 2);
    assert_eq!(ro.json(&["status", "--check"])["integrity"], "ok");
    assert_eq!(ro.json(&["loop", "history"])["runs"][0]["run_id"], run_id.as_str());
    assert_eq!(ro.json(&["loop", "show", &run_id])["status"], "converged");

    // Writes: exit 1, kind read_only, naming the data root.
    for args in [&["remember", "a new memory"][..], &["forget", &id.to_string()][..]] {
        let mut a = args.to_vec();
        a.push("--json");
        let out = ro.run(&a).unwrap();
        expect_exit(&out, 1, &format!("{args:?} on read-only media"));
        let e = error_envelope(&out);
        assert_eq!(e["error"]["kind"], "read_only", "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains("data root is read-only") && msg.contains(ro.mnt.to_str().unwrap()), "{msg}");
    }

    // A loop still converges (the ledger is fail-open) and says once that it kept no record.
    let out = ro
        .run(&["loop", "run", "--name", "rel", "--gate-query", "release build on main is green", "--max-iterations", "2", "--json"])
        .unwrap();
    let err = expect_exit(&out, 0, "loop run on read-only media");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "converged");
    assert!(result["termination"]["ledger_errors"].as_u64().unwrap() >= 1);
    assert_eq!(err.matches("the ledger cannot be written").count(), 1, "said once: {err}");
    assert!(err.contains("data root is read-only"), "{err}");

    // The MCP server reads too.
    let bin = slm_bin();
    let script = format!("{} || exit 97; exec \"$@\"", ro.setup());
    let mut child = Command::new("unshare")
        .args([ro.flag, "sh", "-c", &script, "sh", bin.to_str().unwrap(), "--data-dir", ro.mnt.to_str().unwrap(), "mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
    let _init = lines.next().unwrap().unwrap();
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "is the release green"}}}),
    );
    let r: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["hits"][0]["id"], id, "{r}");
    drop(stdin);
    let _ = child.wait();

    // Nothing touched the files.
    assert_eq!(std::fs::read(root.db_path()).unwrap(), before);
}

#[test]
fn an_import_that_fills_the_disk_prints_what_it_committed_and_resumes_by_rerunning() {
    let root = Root::new();
    let mnt = root.tmp.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let out_dir = root.tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let input = root.tmp.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    let total = 1500;
    for i in 0..total {
        writeln!(f, "{}", json!({"content": format!("import line {i}: note about component {} and its owner {}", i % 41, i * 7)})).unwrap();
    }
    drop(f);
    // On a 1 MiB tmpfs a few batches fit; then the disk is full. After the failure the same
    // script grows the filesystem and re-runs the import, inside the same namespace.
    let bin = slm_bin();
    let data = mnt.join("data");
    let o = |name: &str| out_dir.join(name).display().to_string();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs '{mnt}' || exit 97
         '{bin}' --data-dir '{data}' import '{input}' --json >'{a}' 2>'{b}'; echo $? >'{c}'
         mount -o remount,size=64m '{mnt}' || exit 98
         '{bin}' --data-dir '{data}' import '{input}' --json >'{d}' 2>'{e}'; echo $? >'{f}'
         '{bin}' --data-dir '{data}' status --json >'{g}'",
        mnt = mnt.display(),
        bin = bin.display(),
        data = data.display(),
        input = input.display(),
        a = o("first.json"),
        b = o("first.err"),
        c = o("first.rc"),
        d = o("second.json"),
        e = o("second.err"),
        f = o("second.rc"),
        g = o("status.json"),
    );
    let ran = ["-m", "-rm"].iter().find_map(|flag| {
        let out = Command::new("unshare").args([flag, "sh", "-c", &script]).output().ok()?;
        (out.status.code() != Some(97) && !stderr(&out).starts_with("unshare:")).then_some(out)
    });
    let Some(ran) = ran else {
        eprintln!("SKIPPED: cannot mount a small tmpfs here (unshare -m / mount -t tmpfs)");
        return;
    };
    assert!(ran.status.success(), "script failed: {}", stderr(&ran));
    let read = |name: &str| std::fs::read_to_string(out_dir.join(name)).unwrap();

    // The first import failed part-way: exit 1, the error, and the summary with how to resume.
    assert_eq!(read("first.rc").trim(), "1", "first import: {}", read("first.err"));
    let err = read("first.err");
    assert!(err.contains("full"), "the cause is named: {err}");
    assert!(err.contains("Re-run the same import to resume") && err.contains("deduplicated"), "{err}");
    let first: Value = serde_json::from_str(&read("first.json")).expect("summary on stdout with --json");
    let committed = first["last_committed_line"].as_u64().unwrap();
    let imported = first["imported"].as_u64().unwrap();
    assert!(imported > 0 && imported < total, "some batches committed: {first}");
    assert_eq!(committed, imported, "every line up to the last committed one is stored: {first}");
    assert_eq!(imported % slm::import::BATCH as u64, 0, "whole batches: {first}");
    assert!(err.contains(&format!("every line up to {committed} is committed")), "{err}");

    // Re-running finishes the job, storing nothing twice.
    assert_eq!(read("second.rc").trim(), "0", "second import: {}", read("second.err"));
    let second: Value = serde_json::from_str(&read("second.json")).unwrap();
    assert_eq!(second["deduped"].as_u64().unwrap(), imported);
    assert_eq!(second["imported"].as_u64().unwrap(), total - imported);
    let status: Value = serde_json::from_str(&read("status.json")).unwrap();
    assert_eq!(status["memories"].as_u64().unwrap(), total);
}

fn damage(path: &Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn an_emptied_database_is_an_error_not_a_new_store() {
    let root = Root::new();
    root.remember("something worth keeping", &[]);
    // A brand-new data root (an empty directory) still starts a store.
    let fresh = Root::new();
    std::fs::create_dir(fresh.dir()).unwrap();
    assert_eq!(fresh.count(), 0);

    std::fs::File::create(root.db_path()).unwrap(); // truncate to 0 bytes
    for args in [&["list", "--json"][..], &["status", "--json"][..], &["remember", "x", "--json"][..]] {
        let out = root.run(args);
        expect_exit(&out, 1, &format!("{args:?} on an emptied slm.db"));
        let e = error_envelope(&out);
        assert_eq!(e["error"]["kind"], "corrupt", "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("is empty (0 bytes)"), "{e}");
    }
    assert_eq!(std::fs::metadata(root.db_path()).unwrap().len(), 0, "the emptied file was left as it was");
}

#[test]
fn damaged_pages_are_reported_as_corrupt_with_the_check_and_status_check_finds_them() {
    let root = Root::new();
    let input = root.tmp.path().join("in.jsonl");
    let lines: String = (0..300).map(|i| format!("{}\n", json!({"content": format!("memory {i} about topic {}", i % 17)}))).collect();
    std::fs::write(&input, lines).unwrap();
    root.json(&["import", input.to_str().unwrap()]);
    let status = root.json(&["status"]);
    assert_eq!(status["integrity"], "not checked");
    assert!(status["created_at"].as_str().is_some(), "creation is recorded: {status}");
    assert_eq!(root.json(&["status", "--check"])["integrity"], "ok");

    // Break the cell pointers of a page in the middle of the file (memories' leaf pages).
    let pages = std::fs::metadata(root.db_path()).unwrap().len() / 4096;
    damage(&root.db_path(), (pages / 2) * 4096 + 8, &[0xff; 4]);

    let out = root.run(&["list", "--limit", "1000", "--json"]);
    expect_exit(&out, 1, "list over a damaged page");
    let e = error_envelope(&out);
    assert_eq!(e["error"]["kind"], "corrupt", "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("quick_check:") && !msg.ends_with("quick_check: ok"), "{msg}");

    let out = root.run(&["status", "--check", "--json"]);
    expect_exit(&out, 1, "status --check on a damaged file");
    let s: Value = serde_json::from_slice(&out.stdout).expect("the status is printed");
    let verdict = s["integrity"].as_str().unwrap();
    assert!(verdict != "ok" && verdict != "not checked" && verdict.contains(&format!("page {}", pages / 2 + 1)), "{verdict}");
}
