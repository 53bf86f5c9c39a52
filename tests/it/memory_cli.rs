//! The memory commands end to end: the real binary, the real model, a real data root.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::sync::Arc;

use slm::embed::{Embedder, OnnxEmbedder};
use slm::spaces::cosine_plain;

use crate::common::{stderr, Root};

#[test]
fn paraphrase_ranks_the_right_memory_first() {
    let root = Root::new();
    let fillers = [
        "the weather is nice today",
        "remember to buy milk and eggs",
        "the quarterly report is due on Friday",
        "Rust's borrow checker prevents data races",
        "The pull request number 42 was rejected",
        "the cat sleeps on the sofa",
    ];
    for f in fillers {
        root.remember(f, &[]);
    }
    let target = root.remember("review complete: PR #42 is approved", &["pr-42"]);
    let r = root.json(&["recall", "PR 42 approved", "--limit", "3"]);
    let hits = r["hits"].as_array().unwrap();
    assert_eq!(r["query"], "PR 42 approved");
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0]["id"].as_i64(), Some(target));
    assert_eq!(hits[0]["tags"], serde_json::json!(["pr-42"]));
    // Scores are sorted best first, and the documented fact holds (≈ 0.834).
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!((scores[0] - 0.834).abs() < 0.01, "{scores:?}");
    for key in ["id", "content", "tags", "score", "created_at"] {
        assert!(hits[0].get(key).is_some(), "hit lacks {key}");
    }
    // The alias works and the table has a header.
    let out = root.run(&["search", "PR 42 approved"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("ID") && text.contains("SCORE") && text.contains("PR #42"), "{text}");
}

#[test]
fn scores_equal_an_independent_cosine() {
    let root = Root::new();
    let pairs = [("invoice 1031 is overdue and unpaid", "invoice 1031 paid"), ("the weather is nice", "PR 42 approved")];
    let embedder = OnnxEmbedder::locate();
    for (memory, query) in pairs {
        let id = root.remember(memory, &[]);
        let hits = root.json(&["recall", query, "--limit", "10"]);
        let hit = hits["hits"].as_array().unwrap().iter().find(|h| h["id"].as_i64() == Some(id)).unwrap().clone();
        let a = embedder.embed_one(memory).unwrap();
        let b = embedder.embed_one(query).unwrap();
        let expected = cosine_plain(&a, &b) as f64;
        let got = hit["score"].as_f64().unwrap();
        assert!((got - expected).abs() < 1e-5, "{memory:?} vs {query:?}: slm {got}, independent {expected}");
    }
    // The documented example (SPEC §2): topic, not truth.
    let a = embedder.embed_one("invoice 1031 paid").unwrap();
    let b = embedder.embed_one("invoice 1031 is overdue and unpaid").unwrap();
    assert!((cosine_plain(&a, &b) - 0.88).abs() < 0.03);
}

#[test]
fn tags_filter_dedup_and_forget() {
    let root = Root::new();
    let a = root.remember("deploy finished on staging", &["env-staging", "deploy"]);
    let b = root.remember("deploy finished on production", &["env-prod", "deploy"]);
    root.remember("lunch menu for tuesday", &[]);

    // Tag filter: only memories carrying every tag.
    let r = root.json(&["recall", "deploy finished", "--tag", "deploy", "--tag", "env-prod"]);
    let ids: Vec<i64> = r["hits"].as_array().unwrap().iter().map(|h| h["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![b]);
    let listed = root.json(&["list", "--tag", "deploy"]);
    let ids: Vec<i64> = listed["memories"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![b, a], "newest first");

    // Dedup: same content and tags (in any order) → same id, deduped.
    let again = root.json(&["remember", "deploy finished on staging", "--tag", "deploy", "--tag", "env-staging"]);
    assert_eq!(again["id"].as_i64(), Some(a));
    assert_eq!(again["deduped"], true);
    // Different tags → a new memory.
    let other = root.json(&["remember", "deploy finished on staging", "--tag", "deploy"]);
    assert_eq!(other["deduped"], false);
    assert_ne!(other["id"].as_i64(), Some(a));
    assert_eq!(root.count(), 4);

    // min-score filters weak hits.
    let strong = root.json(&["recall", "deploy finished on staging", "--min-score", "0.99"]);
    assert!(strong["hits"].as_array().unwrap().iter().all(|h| h["score"].as_f64().unwrap() >= 0.99));
    assert!(!strong["hits"].as_array().unwrap().is_empty());

    // Forget: gone from recall and list; forgetting it again is not found (exit 1).
    let f = root.json(&["forget", &a.to_string()]);
    assert_eq!(f["forgotten"], serde_json::json!([a]));
    let r = root.json(&["recall", "deploy finished on staging", "--limit", "10"]);
    assert!(r["hits"].as_array().unwrap().iter().all(|h| h["id"].as_i64() != Some(a)));
    let out = root.run(&["forget", &a.to_string()]);
    let err = crate::common::expect_exit(&out, 1, "forget twice");
    assert!(err.contains("not found"), "{err}");
    assert_eq!(root.count(), 3);
}

#[test]
fn status_reports_paths_counts_and_model_sqlite_only() {
    let root = Root::new();
    root.remember("one", &[]);
    let s = root.json(&["status"]);
    assert_eq!(s["memories"], 1);
    assert_eq!(s["laps"], 0);
    assert_eq!(s["data_dir"].as_str().unwrap(), root.dir().to_str().unwrap());
    assert_eq!(s["db_path"].as_str().unwrap(), root.db_path().to_str().unwrap());
    assert!(s["model"].as_str().unwrap().contains("all-MiniLM-L6-v2"));
    assert_eq!(s["index"]["mode"], "exact");
    assert!(s["model_error"].is_null(), "{s}");
}

#[test]
fn json_flag_is_accepted_anywhere_and_env_selects_the_root() {
    let root = Root::new();
    root.remember("a memory about sailing", &[]);
    // --json after the subcommand and its arguments.
    let out = root.run(&["recall", "sailing", "--json", "--limit", "1"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hits"].as_array().unwrap().len(), 1);
    // SLM_DATA_DIR selects the same root without --data-dir.
    let out = std::process::Command::new(crate::common::slm_bin())
        .args(["status", "--json"])
        .env("SLM_DATA_DIR", root.dir())
        .envs(root.store.iter().map(|s| ("SLM_STORE", s)))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["memories"], 1);
}

/// One process remembers; a second, already running (this test's engine), recalls it
/// without a restart.
#[test]
fn memory_from_another_process_is_visible_without_restart() {
    let root = Root::new();
    root.remember("unrelated note about gardening", &[]);
    let engine = slm::engine::Engine::open(
        &slm::engine::DataRoot { dir: root.dir(), explicit: true, store: None }.with_store(root.store.as_deref()).unwrap(),
        Arc::new(OnnxEmbedder::locate()),
    )
    .unwrap();
    let q = slm::engine::RecallQuery::new("the build is green");
    let before = engine.recall(&q).unwrap();
    assert_eq!(before.hits.len(), 1);
    let id = root.remember("CI build passed: all tests are green", &[]);
    let after = engine.recall(&q).unwrap();
    assert_eq!(after.hits[0].id, id, "the long-lived engine sees the other process's commit");
    // A forget by another process is seen too.
    root.json(&["forget", &id.to_string()]);
    let again = engine.recall(&q).unwrap();
    assert!(again.hits.iter().all(|h| h.id != id));
}

/// A query embedded once is kept in the data root: the next process that recalls it (or waits
/// on it as a gate query) answers without loading the model, with the same hits and scores; a
/// new query still loads it. Damaging the kept vector makes it a miss, never a wrong answer.
#[test]
fn a_repeated_query_is_answered_without_loading_the_model() {
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &["pr-42"]);
    root.remember("the nightly build failed on ARM", &[]);
    let recall = |q: &str| {
        let out = root.cmd(&["recall", q, "--json"]).env("SLM_LOG", "slm=debug").output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let loaded = stderr(&out).contains("loading the embedding model");
        (serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(), loaded)
    };
    let (first, loaded) = recall("is PR 42 approved");
    assert!(loaded, "the first recall of a query embeds it");
    let (again, loaded) = recall("is PR 42 approved");
    assert!(!loaded, "a repeated query is read from the data root");
    assert_eq!(first, again);
    let (_, loaded) = recall("did the build fail");
    assert!(loaded, "a new query loads the model");
    // The gate query of a loop run is kept the same way.
    let run = |max: &str| {
        root.cmd(&[
            "loop",
            "run",
            "--name",
            "cached",
            "--gate-query",
            "is PR 42 approved",
            "--gate-min-score",
            "0.6",
            "--max-iterations",
            max,
            "--json",
        ])
        .env("SLM_LOG", "slm=debug")
        .output()
        .unwrap()
    };
    let out = run("1");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "converged", "{v}");
    assert!(!stderr(&out).contains("loading the embedding model"), "{}", stderr(&out));
    // A damaged entry is a miss: the model loads and the answer is unchanged.
    for e in std::fs::read_dir(root.dir().join("queries")).unwrap() {
        std::fs::write(e.unwrap().path(), b"garbage").unwrap();
    }
    let (damaged, loaded) = recall("is PR 42 approved");
    assert!(loaded);
    assert_eq!(first, damaged);
}
