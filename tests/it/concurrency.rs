//! Several processes writing one data root at once.

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
