//! Derived vector files (issue #12): a store large enough to get them answers exactly as the
//! in-memory path does (`SLM_INDEX_FILES=off`), survives a restored backup, a foreign copy of
//! the files and kill -9 during catch-up, and imports precomputed embeddings.

use std::io::Write;

use serde_json::Value;

use super::common::{expect_exit, RawMcp, Root};

/// A line of an import file with a pseudo-random unit embedding.
fn line(i: usize, seed: u64) -> String {
    let mut s = seed.wrapping_add(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f64> = (0..384)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    serde_json::json!({"content": format!("generated note {i} from batch {seed}"), "tags": ["gen", format!("g{}", i % 7)], "embedding": v})
        .to_string()
}

fn import(root: &Root, from: usize, n: usize, seed: u64) -> Value {
    let path = root.tmp.path().join(format!("gen-{seed}-{from}.jsonl"));
    let mut f = std::fs::File::create(&path).unwrap();
    for i in from..from + n {
        writeln!(f, "{}", line(i, seed)).unwrap();
    }
    drop(f);
    root.json(&["import", path.to_str().unwrap()])
}

/// Recall through the files and through memory only: ids and scores must be identical.
fn same_as_in_memory(root: &Root, args: &[&str]) {
    let mut a = args.to_vec();
    a.push("--json");
    let files = root.run(&a);
    let memory = root.cmd(&a).env("SLM_INDEX_FILES", "off").output().unwrap();
    expect_exit(&files, 0, "recall with files");
    expect_exit(&memory, 0, "recall in memory");
    let hits = |o: &std::process::Output| -> Vec<(i64, String)> {
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["hits"].as_array().unwrap().iter().map(|h| (h["id"].as_i64().unwrap(), h["score"].to_string())).collect()
    };
    let (f, m) = (hits(&files), hits(&memory));
    assert!(!f.is_empty(), "{args:?}: no hits");
    assert_eq!(f, m, "{args:?}: the files changed a result");
}

fn index(root: &Root) -> Value {
    root.json(&["index"])
}

#[test]
fn a_large_store_is_searched_through_its_files_with_the_same_results() {
    let root = Root::new();
    let approved = root.remember("review complete: PR #42 is approved", &["pr-42"]);
    let s = import(&root, 0, 6000, 1);
    assert_eq!(s["imported"], 6000, "{s}");
    assert_eq!(index(&root)["state"], "missing", "import alone writes no files");

    same_as_in_memory(&root, &["recall", "is PR 42 approved", "--limit", "10"]);
    let idx = index(&root);
    assert_eq!(idx["state"], "ready", "{idx}");
    assert_eq!(idx["rows"], 6001);
    assert_eq!(idx["behind"], 0);
    // The first search built them; later ones map them, with every kind of query.
    same_as_in_memory(&root, &["recall", "is PR 42 approved", "--limit", "50"]);
    same_as_in_memory(&root, &["recall", "generated note", "--limit", "20", "--tag", "g3"]);
    same_as_in_memory(&root, &["recall", "generated note 17", "--limit", "5", "--min-score", "0.1"]);
    // A new memory lives in the in-memory tail until enough arrive, and is found at once.
    let fresh = root.remember("the nightly build on ARM is green", &[]);
    let r = root.json(&["recall", "nightly ARM build green", "--limit", "1"]);
    assert_eq!(r["hits"][0]["id"], fresh);
    // The loop gate sweeps the files too, exactly.
    let run = root.json(&[
        "loop",
        "run",
        "--name",
        "scale",
        "--gate-query",
        "PR 42 approved",
        "--gate-min-score",
        "0.6",
        "--max-iterations",
        "2",
    ]);
    assert_eq!(run["status"], "converged", "{run}");
    assert_eq!(run["match"]["id"], approved, "{run}");
    let v = root.json(&["index", "verify", "--queries", "40"]);
    assert_eq!(v["mismatches"], 0, "{v}");
    // A forget in one process hides the row from the next, though the files still hold it.
    root.json(&["forget", &approved.to_string()]);
    let r = root.json(&["recall", "is PR 42 approved", "--limit", "5"]);
    assert!(r["hits"].as_array().unwrap().iter().all(|h| h["id"] != approved), "{r}");
    same_as_in_memory(&root, &["recall", "is PR 42 approved", "--limit", "10"]);
    // A rebuild compacts it away. It holds rows with vectors: let the loop's background
    // `slm embed-pending` give its lap one first (the repeated queries above no longer load
    // the model, so the test can get here before that process is done).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !root.open_store().pending_rows(10).unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the loop's lap was never embedded");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let rebuilt = root.json(&["index", "rebuild"]);
    // 6,000 imported, the fresh memory and the loop's lap; the forgotten one is gone.
    assert_eq!(rebuilt["rows"], 6000 + 1 + 1, "{rebuilt}");
    assert_eq!(rebuilt["forgotten"], 0);
    same_as_in_memory(&root, &["recall", "nightly ARM build green", "--limit", "10"]);
}

#[test]
fn a_restored_backup_and_foreign_files_are_rebuilt_never_served() {
    let root = Root::new();
    import(&root, 0, 4000, 2);
    root.json(&["recall", "generated note", "--limit", "1"]);
    // Back up the closed store (WAL checkpointed on last close), then let it grow.
    let backup = root.tmp.path().join("backup.db");
    std::fs::copy(root.db_path(), &backup).unwrap();
    import(&root, 4000, 3000, 3);
    root.json(&["recall", "generated note", "--limit", "1"]);
    assert_eq!(index(&root)["upto"], 7000);
    // Restore the backup: ids 4001.. will be issued again for different content.
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(root.dir().join(format!("slm.db{ext}")));
    }
    std::fs::copy(&backup, root.db_path()).unwrap();
    let reused = root.remember("a memory written after the restore", &[]);
    assert!(reused <= 7000, "the restored store reissues ids the files already hold: {reused}");
    let r = root.json(&["recall", "a memory written after the restore", "--limit", "1"]);
    assert_eq!(r["hits"][0]["id"], reused, "{r}");
    assert!(r["hits"][0]["score"].as_f64().unwrap() > 0.99, "the files' old vector for this id is never served: {r}");
    same_as_in_memory(&root, &["recall", "generated note 3999", "--limit", "10"]);
    assert_eq!(index(&root)["upto"], reused, "rebuilt from the restored store");

    // Another store's files copied into this data root are replaced, not used.
    let other = Root::new();
    import(&other, 0, 3000, 4);
    other.json(&["recall", "generated note", "--limit", "1"]);
    std::fs::remove_dir_all(root.dir().join("index")).unwrap();
    let status = std::process::Command::new("cp").arg("-a").arg(other.dir().join("index")).arg(root.dir()).status().unwrap();
    assert!(status.success());
    assert_eq!(index(&root)["state"], "foreign");
    same_as_in_memory(&root, &["recall", "generated note 12", "--limit", "10"]);
    assert_eq!(index(&root)["state"], "ready");
}

#[test]
fn kill_during_catch_up_loses_nothing_and_the_next_open_repairs() {
    let root = Root::new();
    import(&root, 0, 12_000, 5);
    for delay_ms in [150u64, 400, 700, 1000, 1400] {
        let _ = std::fs::remove_dir_all(root.dir().join("index"));
        let mut child = root.cmd(&["recall", "generated note", "--limit", "3"]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Whatever state the kill left, the next search is right and the files end complete.
        same_as_in_memory(&root, &["recall", "generated note 77", "--limit", "10"]);
        let idx = index(&root);
        assert_eq!(idx["rows"], 12_000, "after a kill at {delay_ms} ms: {idx}");
        assert_eq!(idx["behind"], 0);
    }
}

#[test]
fn import_checks_and_normalises_given_embeddings() {
    let root = Root::new();
    let path = root.tmp.path().join("mixed.jsonl");
    let mut v = vec![0.0f64; 384];
    v[0] = 3.0;
    v[1] = 4.0;
    let lines = [
        serde_json::json!({"content": "scaled vector", "embedding": v}).to_string(),
        serde_json::json!({"content": "too short", "embedding": [1.0, 2.0, 3.0]}).to_string(),
        serde_json::json!({"content": "all zeros", "embedding": vec![0.0; 384]}).to_string(),
        serde_json::json!({"content": "not numbers", "embedding": ["a"]}).to_string(),
        serde_json::json!({"content": "no embedding: the model embeds it"}).to_string(),
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    let out = root.run(&["import", path.to_str().unwrap(), "--json"]);
    expect_exit(&out, 2, "import with bad embeddings");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["imported"], 2, "{s}");
    let skipped: Vec<(u64, String)> =
        s["skipped"].as_array().unwrap().iter().map(|x| (x["line"].as_u64().unwrap(), x["error"].as_str().unwrap().to_string())).collect();
    assert_eq!(skipped.iter().map(|s| s.0).collect::<Vec<_>>(), vec![2, 3, 4], "{s}");
    assert!(skipped[0].1.contains("embedding") && skipped[0].1.contains("384"), "{skipped:?}");
    assert!(skipped[1].1.contains("zeros"), "{skipped:?}");
    // The scaled vector was stored normalised: it matches itself with cosine 1 and the text
    // query does not matter to it (the vector is not the model's).
    let db = rusqlite::Connection::open(root.db_path()).unwrap();
    let blob: Vec<u8> = db.query_row("SELECT embedding FROM memories WHERE content = 'scaled vector'", [], |r| r.get(0)).unwrap();
    let f: Vec<f32> = blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert!((f[0] - 0.6).abs() < 1e-6 && (f[1] - 0.8).abs() < 1e-6, "{:?}", &f[..2]);
    // The line without an embedding went through the model and is recalled by meaning.
    let r = root.json(&["recall", "the model embeds a line without a vector", "--limit", "1"]);
    assert_eq!(r["hits"][0]["content"], "no embedding: the model embeds it");
}

/// `slm mcp` with a graph from 1,000 memories: recall once (the first recall is exact and
/// starts the background work), wait until the status shows the graph in use and, when this
/// process built it, until `slm index` shows it saved; returns the status's index part.
/// `same_top` also checks that the graph's best hit is the exact one (a graph proposes
/// candidates: on a few thousand random vectors its top 20 holds the best, on more it may
/// not).
fn mcp_graph(root: &Root, same_top: bool) -> Value {
    let before = index(root)["graph"]["sha256"].clone();
    let mut m = RawMcp::start_env(root, &[], &[("SLM_HNSW_MIN", "1000")]);
    let query = serde_json::json!({"query": "generated note 1234 from batch 9", "limit": 5});
    let exact = m.tool(1, "recall", query.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    let state = loop {
        let s = m.tool(2, "status", serde_json::json!({}))["index"].clone();
        if s["mode"] == "hnsw" && s["hnsw_building"] == false {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no graph in use: {s}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Through the graph the answer is the exact one (a small store, candidates rescored).
    let via_graph = m.tool(3, "recall", query);
    if same_top {
        assert_eq!(via_graph["hits"][0]["id"], exact["hits"][0]["id"], "{exact} vs {via_graph}");
    }
    if state["hnsw_loaded"] == false {
        // Saved after it is in use: wait for the new save before the process ends.
        while index(root)["graph"]["sha256"] == before {
            assert!(std::time::Instant::now() < deadline, "the graph was not saved");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    state
}

/// The graph a long-lived process builds is saved in the generation folder and reloaded,
/// not rebuilt, by the next one; a damaged graph file falls back to exact search and is
/// rebuilt and saved again.
#[test]
fn the_hnsw_graph_is_saved_reloaded_and_rebuilt_when_damaged() {
    let root = Root::new();
    import(&root, 0, 3000, 9);
    let first = mcp_graph(&root, true);
    assert_eq!(first["hnsw_loaded"], false, "the first process builds: {first}");
    assert_eq!(first["hnsw_vectors"], 3000);
    let saved = index(&root)["graph"].clone();
    assert_eq!((saved["vectors"].as_u64(), saved["upto"].as_i64()), (Some(3000), Some(3000)), "{saved}");
    assert!(saved["bytes"].as_u64().unwrap() > 3000 * 1536, "{saved}");

    let second = mcp_graph(&root, true);
    assert_eq!(second["hnsw_loaded"], true, "the next process reloads the saved graph: {second}");
    assert_eq!(second["hnsw_upto"], 3000);

    // Damaged links (truncated) with a whole dump: the search stays exact and right
    // (checked in mcp_graph), and the links are written again from the dump, not rebuilt.
    let g = index(&root);
    let dir = root.dir().join("index").join(format!("g{}", g["generation"]));
    let (links, data) = (dir.join("graph.links"), dir.join("graph.hnsw.data"));
    let truncate = |p: &std::path::Path| {
        let len = std::fs::metadata(p).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(len / 3).unwrap();
        len
    };
    let links_len = truncate(&links);
    let third = mcp_graph(&root, true);
    assert_eq!(third["hnsw_loaded"], true, "the links come again from the saved dump: {third}");
    assert_eq!(std::fs::metadata(&links).unwrap().len(), links_len, "written again, whole");

    // Both damaged: the graph is built again from nothing and saved over them.
    truncate(&links);
    let data_len = truncate(&data);
    let fourth = mcp_graph(&root, true);
    assert_eq!(fourth["hnsw_loaded"], false, "a damaged graph is rebuilt, not loaded: {fourth}");
    assert_eq!(std::fs::metadata(&data).unwrap().len(), data_len, "saved again, whole");
    assert_eq!(mcp_graph(&root, true)["hnsw_loaded"], true, "the rebuilt graph is mapped");
}

/// The `status` tool's `memory` part once recalls have run until the graph (if wanted) is
/// in use and saved; `graph_private` is sampled on every poll, and the largest anonymous
/// figure seen is returned beside it.
fn settled_memory(m: &mut RawMcp, want_graph: bool) -> (Value, u64, bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let (mut peak, mut private_seen) = (0u64, false);
    loop {
        // A search is what starts (or retries) the background work.
        m.tool(1, "recall", serde_json::json!({"query": "generated note 77 from batch 21", "limit": 5}));
        let s = m.tool(2, "status", serde_json::json!({}));
        let mem = s["memory"].clone();
        peak = peak.max(mem["anon_bytes"].as_u64().unwrap());
        private_seen |= mem["graph_private"] == true;
        let ready = !want_graph || (s["index"]["mode"] == "hnsw" && s["index"]["hnsw_building"] == false);
        if ready {
            // The same recall again, through the graph when there is one.
            m.tool(3, "recall", serde_json::json!({"query": "generated note 77 from batch 21", "limit": 5}));
            let mem = m.tool(4, "status", serde_json::json!({}))["memory"].clone();
            return (mem, peak, private_seen);
        }
        assert!(std::time::Instant::now() < deadline, "no graph in use: {s}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Servers on one data root share one graph (issue #26): the first builds it and holds
/// hnsw_rs's structures only while it does; a second server started meanwhile never builds
/// a copy of its own (it scans exactly, then maps the links the first saved), and its
/// private memory stays near that of a server that never uses a graph.
#[test]
fn servers_on_one_data_root_share_one_graph_instead_of_each_holding_a_copy() {
    let root = Root::new();
    import(&root, 0, 12000, 21);
    let graph_env = [("SLM_HNSW_MIN", "1000")];
    let (exact, _, _) = settled_memory(&mut RawMcp::start_env(&root, &[], &[("SLM_HNSW_MIN", "10000000")]), false);
    let exact_anon = exact["anon_bytes"].as_u64().unwrap();
    assert_eq!(exact["graph_mapped_bytes"], 0, "{exact}");
    assert!(exact["vectors_mapped_bytes"].as_u64().unwrap() >= 12000 * 1536, "{exact}");

    let mut first = RawMcp::start_env(&root, &[], &graph_env);
    first.tool(1, "recall", serde_json::json!({"query": "generated note 5 from batch 21"}));
    // The second starts once the first has begun its build (holds the build lock): started
    // before, on a loaded machine, the second's own background work may win the lock.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let s = first.tool(9, "status", serde_json::json!({}));
        if s["index"]["hnsw_building"] == true || s["index"]["mode"] == "hnsw" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the first server never began a graph: {s}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut second = RawMcp::start_env(&root, &[], &graph_env);
    let (one, _, one_built) = settled_memory(&mut first, true);
    let (two, two_peak, two_built) = settled_memory(&mut second, true);
    assert!(one_built || one["graph_mapped_bytes"].as_u64().unwrap() > 0, "{one}");
    assert!(!two_built, "the second server built a graph of its own: {two}");
    assert!(two["graph_mapped_bytes"].as_u64().unwrap() >= 12000 * 32 * 4, "the second maps the links: {two}");
    // hnsw_rs's own copy would be about 5 KB a memory (60 MB here); the mapped graph adds
    // a visited set per search.
    let bound = exact_anon + 20 * (1 << 20);
    assert!(two_peak <= bound, "second server: {two_peak} private bytes at most, exact server {exact_anon}: {two}");
    let third = settled_memory(&mut RawMcp::start_env(&root, &[], &graph_env), true).0;
    assert!(third["anon_bytes"].as_u64().unwrap() <= bound, "third server: {third}, exact server {exact_anon}");
}

/// A server that exits while it builds its graph leaves the part it built saved (every
/// `SLM_GRAPH_SAVE_S` seconds; 0 here: after every chunk), and the next server goes on from
/// that part instead of building from nothing.
#[test]
fn a_graph_build_cut_short_is_saved_and_the_next_server_resumes_it() {
    let root = Root::new();
    import(&root, 0, 9000, 13);
    let mut m = RawMcp::start_env(&root, &[], &[("SLM_HNSW_MIN", "1000"), ("SLM_GRAPH_SAVE_S", "0")]);
    m.tool(1, "recall", serde_json::json!({"query": "generated note 7 from batch 13"}));
    // The recall starts the build (8 chunks of 1,125); stop the server hard at the first
    // part-built save.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    let part = loop {
        let g = index(&root)["graph"].clone();
        if g["part"] == true {
            break g;
        }
        assert!(g["vectors"].is_null(), "the build ended before a part was seen: {g}");
        assert!(std::time::Instant::now() < deadline, "no part-built graph was saved");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    drop(m); // kill -9
    let (vectors, upto) = (part["vectors"].as_u64().unwrap(), part["upto"].as_i64().unwrap());
    assert_eq!(vectors as i64, upto, "a part covers every memory up to its upto: {part}");
    assert_eq!(vectors % 1125, 0, "parts end at chunk ends: {part}");
    assert!(vectors < 9000, "{part}");
    // What the kill left (perhaps a later part than the one seen) is still a part.
    assert_eq!(index(&root)["graph"]["part"], true, "{}", index(&root));

    // The next server starts from the saved part (hnsw_loaded) and completes it.
    let next = mcp_graph(&root, false);
    assert_eq!(next["hnsw_loaded"], true, "resumed, not built from nothing: {next}");
    assert_eq!(next["hnsw_vectors"], 9000, "{next}");
    assert_eq!(next["hnsw_upto"], 9000, "{next}");
}
