//! Several processes writing one data root at once.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::thread;

use crate::common::Root;

/// 4 processes at a time, 50 `slm remember` each, on a fresh data root: exactly 200 stored,
/// every call succeeds (WAL + busy timeout + short write transactions).
#[test]
fn four_processes_remember_fifty_each() {
    let root = std::sync::Arc::new(Root::new());
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let root = std::sync::Arc::clone(&root);
            thread::spawn(move || {
                let mut failures = Vec::new();
                for i in 0..50 {
                    let content = format!("worker {w} finished task {i}");
                    let out = root.run(&["remember", &content, "--tag", &format!("worker-{w}"), "--json"]);
                    if !out.status.success() {
                        failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = workers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(failures.is_empty(), "{} calls failed, first: {:?}", failures.len(), failures.first());
    assert_eq!(root.count(), 200);
    for w in 0..4 {
        let l = root.json(&["list", "--tag", &format!("worker-{w}"), "--limit", "100"]);
        assert_eq!(l["memories"].as_array().unwrap().len(), 50);
    }
}

/// Runs ending together each start an `slm embed-pending`; one process per data root does the
/// work and the others leave it to the holder, so the pending rows are embedded exactly once
/// (the embedded counts sum to the rows pending) and none is left without a vector.
#[test]
fn concurrent_embed_pending_embed_each_row_once() {
    let root = Root::new();
    root.remember("the first memory loads the store", &[]);
    let tags = vec!["loop:herd".to_string()];
    let texts: Vec<String> = (0..300).map(|i| format!("loop herd lap {i}: gate command failed with exit 1")).collect();
    {
        let mut store = root.open_store();
        let rows: Vec<slm::storage::NewRow<'_>> = texts
            .iter()
            .map(|t| slm::storage::NewRow {
                kind: slm::memory::Kind::Lap,
                content: t,
                tags: &tags,
                embedding: &[],
                created_at: None,
                expires_at: None,
            })
            .collect();
        store.insert(&rows).unwrap();
        assert_eq!(store.pending_rows(1000).unwrap().len(), 300);
    }
    let procs: Vec<_> =
        (0..4).map(|_| root.cmd(&["embed-pending", "--json"]).stdout(std::process::Stdio::piped()).spawn().unwrap()).collect();
    let mut total = 0;
    for p in procs {
        let out = p.wait_with_output().unwrap();
        assert!(out.status.success(), "embed-pending failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        total += v["embedded"].as_u64().unwrap();
    }
    assert_eq!(total, 300, "each pending row is embedded by exactly one process");
    assert!(root.open_store().pending_rows(10).unwrap().is_empty());
    let hits = root.json(&["recall", "gate command failed", "--tag", "loop:herd", "--limit", "3"]);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 3);
}
