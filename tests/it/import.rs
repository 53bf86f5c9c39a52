//! `slm import`: bulk remember from JSON Lines.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::io::Write;

use slm::embed::{Embedder, OnnxEmbedder};
use slm::spaces::cosine_plain;

use crate::common::{expect_exit, Root};

#[test]
fn imports_valid_lines_and_reports_bad_ones() {
    let root = Root::new();
    let path = root.tmp.path().join("in.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..300 {
        writeln!(f, "{}", serde_json::json!({"content": format!("imported note number {i}"), "tags": ["bulk"]})).unwrap();
        if i == 10 {
            writeln!(f, "{{this is not json").unwrap(); // line 12
        }
        if i == 20 {
            writeln!(f, "{}", serde_json::json!({"content": "bad tag", "tags": ["has space"]})).unwrap(); // line 23
            writeln!(f).unwrap(); // a blank line is not an error
        }
    }
    writeln!(f, "{}", serde_json::json!({"content": "imported note number 0", "tags": ["bulk"]})).unwrap();
    drop(f);

    let out = root.run(&["import", path.to_str().unwrap()]);
    let err = expect_exit(&out, 2, "import with bad lines");
    assert!(err.contains("line 12") && err.contains("line 23"), "{err}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("imported 300 new, 1 already stored, 2 skipped"), "{summary}");
    assert_eq!(root.count(), 300);

    // Imported memories are found like remembered ones, with scores that match a
    // single-text embedding (batching does not change vectors).
    let r = root.json(&["recall", "imported note number 123", "--limit", "1"]);
    assert_eq!(r["hits"][0]["content"], "imported note number 123");
    let e = OnnxEmbedder::locate();
    let a = e.embed_one("imported note number 123").unwrap();
    let b = e.embed_one(r["query"].as_str().unwrap()).unwrap();
    let score = r["hits"][0]["score"].as_f64().unwrap();
    assert!((score - cosine_plain(&a, &b) as f64).abs() < 1e-4, "{score}");

    // Importing again stores nothing new; --json gives the summary object.
    let out = root.run(&["import", path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["imported"], 0);
    assert_eq!(v["deduped"], 301);
    assert_eq!(v["skipped"].as_array().unwrap().len(), 2);
    assert_eq!(v["skipped"][0]["line"], 12);
}

#[test]
fn missing_import_file_is_invalid_input() {
    let root = Root::new();
    let out = root.run(&["import", "/nonexistent/file.jsonl"]);
    let err = expect_exit(&out, 2, "missing file");
    assert!(err.contains("file"), "{err}");
}

/// `slm export` then `slm import` moves a whole store: memories with their vectors, kinds and
/// times, loop runs and laps (linked to their ledger memories), and importing twice stores
/// everything once. The second store's own export is byte-identical to the first's.
#[test]
fn export_and_import_round_trip_a_whole_store() {
    let a = Root::new();
    a.remember("review complete: PR #42 is approved", &["pr-42"]);
    a.remember("the nightly build failed", &[]);
    let run = a.json(&["loop", "run", "--name", "pr-42", "--gate-query", "PR 42 approved", "--gate-min-score", "0.7"]);
    assert_eq!(run["status"], "converged");
    a.json(&["loop", "demo"]);
    let export_a = a.tmp.path().join("a.jsonl");
    let out = a.run(&["export", "--output", export_a.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("exported 6 memories, 2 loop runs, 4 laps"));
    let text = std::fs::read_to_string(&export_a).unwrap();
    assert_eq!(text.lines().count(), 12);
    assert!(text.lines().any(|l| l.starts_with("{\"loop_run\":")) && text.lines().any(|l| l.starts_with("{\"loop_lap\":")));

    let b = Root::new();
    let first = b.json(&["import", export_a.to_str().unwrap()]);
    assert_eq!((first["imported"].as_u64(), first["records"].as_u64()), (Some(6), Some(6)), "{first}");
    let again = b.json(&["import", export_a.to_str().unwrap()]);
    assert_eq!((again["imported"].as_u64(), again["deduped"].as_u64()), (Some(0), Some(12)), "{again}");

    // Standard output works too, and the second store exports exactly the same lines.
    let out = b.run(&["export"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), text, "export → import → export is the identity");
    assert!(String::from_utf8_lossy(&out.stderr).contains("exported 6 memories"));

    // Same vectors, so the same exact scores; the ledger reads the same.
    let (ra, rb) = (a.json(&["recall", "is PR 42 approved?"]), b.json(&["recall", "is PR 42 approved?"]));
    assert_eq!(ra["hits"], rb["hits"]);
    let run_id = run["run_id"].as_str().unwrap();
    let (sa, sb) = (a.json(&["loop", "show", run_id]), b.json(&["loop", "show", run_id]));
    assert_eq!(sa["laps"], sb["laps"]);
    assert_eq!(b.json(&["loop", "history", "--name", "pr-42"])["runs"][0]["laps"], 1);
    let laps = b.json(&["list", "--kind", "lap", "--tag", "loop:pr-42"]);
    assert_eq!(laps["memories"].as_array().unwrap().len(), 1, "the lap's ledger memory came along: {laps}");
}

/// Bad export lines are skipped with the field named, and nothing else is lost.
#[test]
fn import_rejects_bad_record_lines_by_name() {
    let root = Root::new();
    let path = root.tmp.path().join("bad.jsonl");
    let lines = [
        serde_json::json!({"content": "kept", "kind": "memory", "created_at": "2025-01-02T05:04:05+02:00"}).to_string(),
        serde_json::json!({"content": "x", "kind": "everything"}).to_string(),
        serde_json::json!({"content": "y", "created_at": "yesterday"}).to_string(),
        serde_json::json!({"loop_lap": {"run_id": "nope", "lap": 1, "ts": "t", "decision": "continue", "passed": false, "detail": "d", "budget": {}}}).to_string(),
        serde_json::json!({"loop_run": {"name": "missing run id"}}).to_string(),
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    let out = root.run(&["import", path.to_str().unwrap()]);
    let err = expect_exit(&out, 2, "import with bad record lines");
    for (line, what) in [(2, "kind"), (3, "created_at"), (4, "loop_lap.run_id"), (5, "run_id")] {
        assert!(err.lines().any(|l| l.contains(&format!("line {line}:")) && l.contains(what)), "line {line} names {what}: {err}");
    }
    let kept = root.json(&["list"]);
    assert_eq!(kept["memories"].as_array().unwrap().len(), 1);
    assert_eq!(kept["memories"][0]["created_at"], "2025-01-02T03:04:05.000000Z", "created_at is kept, in UTC");
}

/// A `remember` from another process while a long import of precomputed embeddings writes
/// (several 8,192-row transactions and a log that grows to hundreds of megabytes between
/// checkpoints) is stored, within the busy timeout, and the import still stores every line.
#[test]
fn a_remember_during_an_import_gets_through_sqlite_only() {
    let root = Root::new();
    let n = 6 * 8192;
    let path = root.tmp.path().join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    // A unit vector per line, varied so the vectors differ: short text keeps the file small.
    let rest = vec!["0"; slm::embed::DIM - 2].join(",");
    for i in 0..n {
        writeln!(f, r#"{{"content":"bulk line {i}","tags":["bulk"],"embedding":[1,{},{rest}]}}"#, i % 97).unwrap();
    }
    drop(f);
    let mut import = root.cmd(&["import", path.to_str().unwrap(), "--json"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let db = root.db_path();
    let stored = || -> i64 {
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row("SELECT count(*) FROM memories", [], |r| r.get(0)))
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while stored() == 0 {
        assert!(import.try_wait().unwrap().is_none(), "the import ended before a batch was seen");
        assert!(std::time::Instant::now() < deadline, "no batch committed in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(import.try_wait().unwrap().is_none(), "the import ended before the remember started");
    let id = root.remember("remembered while an import writes", &["side"]);
    let out = import.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "import: {}", String::from_utf8_lossy(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["imported"].as_u64(), v["skipped"].as_array().map(Vec::len)), (Some(n as u64), Some(0)), "{v}");
    assert_eq!(root.count(), n as u64 + 1);
    let conn = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let content: String = conn.query_row("SELECT content FROM memories WHERE id = ?1", [id], |r| r.get(0)).unwrap();
    assert_eq!(content, "remembered while an import writes");
}
