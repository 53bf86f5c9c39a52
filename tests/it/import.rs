//! `slm import`: bulk remember from JSON Lines.

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
