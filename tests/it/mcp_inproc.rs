//! The MCP server in-process: an rmcp client over a duplex pipe, every tool and error path,
//! with the real model and a real data root (SQLite, or PostgreSQL under
//! `SLM_TEST_STORE=postgres`).
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, Request, ServerResult};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use slm::embed::OnnxEmbedder;
use slm::engine::{DataRoot, Engine};
use slm::mcp::{Profile, SlmServer};
use slm::storage::PgUrl;

use crate::common::Root;

struct Client {
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

impl ClientHandler for Client {
    async fn on_progress(&self, p: ProgressNotificationParam, _cx: NotificationContext<RoleClient>) {
        let _ = self.progress.send(p);
    }
}

struct Harness {
    client: RunningService<RoleClient, Client>,
    progress: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    _root: Root,
}

async fn start(profile: Profile) -> Harness {
    // Off the runtime: with SLM_TEST_STORE=postgres the store's client blocks on its own.
    let (root, engine) = tokio::task::spawn_blocking(|| {
        let root = Root::new();
        let data = DataRoot { dir: root.dir(), explicit: true, store: PgUrl::from_flag(root.store.as_deref()).unwrap() };
        let engine = Arc::new(Engine::open(&data, Arc::new(OnnxEmbedder::locate())).unwrap());
        (root, engine)
    })
    .await
    .unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = SlmServer::new(engine, profile).serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let client = Client { progress: tx }.serve(client_io).await.unwrap();
    Harness { client, progress: rx, _root: root }
}

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

impl Harness {
    async fn call(&self, tool: &str, a: Value) -> CallToolResult {
        self.client.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args(a))).await.unwrap()
    }

    /// Calls a tool that must succeed and returns its structured content.
    async fn ok(&self, tool: &str, a: Value) -> Value {
        let r = self.call(tool, a.clone()).await;
        assert_ne!(r.is_error, Some(true), "{tool} {a} failed: {r:?}");
        r.structured_content.unwrap_or_else(|| panic!("{tool} returned no structured content"))
    }

    /// Calls a tool that must fail and returns `{"error": _meta["slm/error"]}` (null when the
    /// failure is rmcp's). slm's errors, arguments that do not deserialize included, carry
    /// their message as the text content and no structured content.
    async fn err(&self, tool: &str, a: Value) -> Value {
        let r = self.call(tool, a.clone()).await;
        assert_eq!(r.is_error, Some(true), "{tool} {a} should fail: {r:?}");
        assert!(r.structured_content.is_none(), "{tool}: an error result carries structuredContent: {r:?}");
        match r.meta.as_ref().and_then(|m| m.0.get(slm::mcp::server::ERROR_META_KEY)) {
            Some(body) => {
                let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.as_str());
                assert_eq!(text, body["message"].as_str(), "{tool}: the text content is the message");
                serde_json::json!({ "error": body })
            }
            None => Value::Null,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tools_and_their_errors() {
    let h = start(Profile::Whole).await;
    let tools = h.client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 12);
    for t in &tools {
        assert!(t.output_schema.is_some(), "{} has no output schema", t.name);
        assert!(t.annotations.is_some(), "{} has no annotations", t.name);
    }

    let a = h.ok("remember", json!({"content": "review complete: PR #42 is approved", "tags": ["pr-42"]})).await;
    assert_eq!(a["deduped"], false);
    let id = a["id"].as_i64().unwrap();
    assert_eq!(h.ok("remember", json!({"content": "review complete: PR #42 is approved", "tags": ["pr-42"]})).await["deduped"], true);
    h.ok("remember", json!({"content": "The pull request number 42 was rejected"})).await;
    let r = h.ok("recall", json!({"query": "PR 42 approved", "limit": 2})).await;
    assert_eq!(r["hits"][0]["id"].as_i64(), Some(id));
    assert!((r["hits"][0]["score"].as_f64().unwrap() - 0.834).abs() < 0.01);
    assert!(r["hits"][1]["score"].as_f64().unwrap() < 0.6);
    let l = h.ok("list_memories", json!({"tags": ["pr-42"]})).await;
    assert_eq!(l["memories"].as_array().unwrap().len(), 1);
    let g = h.ok("get_memories", json!({"ids": [id, 424242]})).await;
    assert_eq!(g["memories"][0]["content"], "review complete: PR #42 is approved");
    let imp = h.ok("import_memories", json!({"items": [{"content": "one"}, {"content": "two", "tags": ["t"]}, {"content": ""}]})).await;
    assert_eq!(imp["imported"], 2);
    assert_eq!(imp["skipped"][0]["line"], 3);
    let s = h.ok("status", json!({})).await;
    assert_eq!(s["memories"], 4);
    let f = h.ok("forget", json!({"ids": [id]})).await;
    assert_eq!(f["forgotten"], json!([id]));

    // Error paths: isError, the message as text, _meta naming the field; the server stays up.
    let e = h.err("remember", json!({"content": ""})).await;
    assert_eq!(e["error"]["kind"], "invalid_input");
    assert_eq!(e["error"]["field"], "content");
    assert_eq!(h.err("remember", json!({"content": "x", "tags": ["a b"]})).await["error"]["field"], "tag");
    assert_eq!(h.err("recall", json!({"query": "x", "min_score": 2.0})).await["error"]["field"], "min_score");
    assert_eq!(h.err("recall", json!({"query": "x", "limit": -3})).await["error"]["field"], "limit");
    assert_eq!(h.err("list_memories", json!({"kind": "everything"})).await["error"]["field"], "kind");
    assert_eq!(h.err("forget", json!({"ids": [id]})).await["error"]["kind"], "not_found");
    assert_eq!(h.err("slm_loop_show", json!({"run_id": "nope"})).await["error"]["kind"], "not_found");
    assert_eq!(h.err("slm_loop_cancel", json!({"run_id": "nope"})).await["error"]["kind"], "not_found");
    let cmd = json!({"name": "x", "gate_query": "q", "gate_verify": ["cmd:true"]});
    assert_eq!(h.err("slm_loop_run", cmd).await["error"]["field"], "gate_verify", "MCP never runs a command");
    // Arguments that do not deserialize: slm's invalid-input error, naming the field.
    assert_eq!(h.err("recall", json!({"query": "x", "limit": "ten"})).await["error"]["field"], "limit");
    assert_eq!(h.err("remember", json!({"content": "x", "colour": "red"})).await["error"]["field"], "colour");
    assert!(h.client.call_tool(CallToolRequestParams::new("no_such_tool")).await.is_err());
    assert_eq!(h.ok("status", json!({})).await["memories"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_hide_tools() {
    let h = start(Profile::Core).await;
    let names: Vec<String> = h.client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), 5);
    assert!(!names.iter().any(|n| n.starts_with("slm_loop")));
    assert!(h.client.call_tool(CallToolRequestParams::new("slm_loop_run")).await.is_err(), "hidden tools cannot be called");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_waits_while_the_same_connection_remembers_and_reports_progress() {
    let mut h = start(Profile::Code).await;
    let handle = h
        .client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("slm_loop_run").with_arguments(args(json!({
                "name": "pr-42", "gate_query": "PR 42 approved", "gate_min_score": 0.75,
                "max_wallclock_s": 60, "poll_interval_s": 0.25
            }))))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let token = handle.progress_token.clone();
    // Lap 1 happened: progress arrives while the call is still open.
    let first = h.progress.recv().await.unwrap();
    assert_eq!(first.progress_token, token);
    assert_eq!(first.progress, 1.0);
    // Served on the same connection while the loop waits, and it satisfies the loop.
    let m = h.ok("remember", json!({"content": "review complete: PR #42 is approved"})).await;
    let r = match handle.await_response().await.unwrap() {
        ServerResult::CallToolResult(r) => r,
        other => panic!("unexpected {other:?}"),
    };
    let r = r.structured_content.unwrap();
    assert_eq!(r["status"], "converged");
    assert_eq!(r["match"]["id"], m["id"]);
    assert_eq!(r["match"]["verified_by"], json!(["guard:entities", "model"]), "the default chain verified it");
    let laps = r["laps"].as_i64().unwrap();
    // The server sends every lap's notification before the result, but the client hands
    // notifications to its handler on tasks of their own: a late one may land after the
    // response. Wait for each (bounded), then make sure no extra one follows.
    let mut seen = vec![first.progress];
    while (seen.len() as i64) < laps {
        match tokio::time::timeout(std::time::Duration::from_secs(10), h.progress.recv()).await {
            Ok(Some(p)) => {
                assert_eq!(p.progress_token, token);
                seen.push(p.progress);
            }
            _ => break,
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    while let Ok(p) = h.progress.try_recv() {
        seen.push(p.progress);
    }
    assert_eq!(seen, (1..=laps).map(|l| l as f64).collect::<Vec<_>>(), "one progress notification per lap");

    let hist = h.ok("slm_loop_history", json!({"name": "pr-42"})).await;
    assert_eq!(hist["runs"][0]["laps"], laps);
    let show = h.ok("slm_loop_show", json!({"run_id": r["run_id"]})).await;
    assert_eq!(show["laps"].as_array().unwrap().len() as i64, laps);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_request_or_the_run_stops_the_loop() {
    let h = start(Profile::Whole).await;
    // notifications/cancelled for the request.
    let handle = h
        .client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("slm_loop_run").with_arguments(args(json!({
                "name": "waiter", "gate_query": "never happens", "gate_min_score": 0.99, "max_wallclock_s": 60
            }))))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let run_id = wait_running(&h, "waiter").await;
    handle.cancel(Some("test".into())).await.unwrap();
    assert_eq!(wait_status(&h, "waiter", "cancelled").await, run_id);

    // slm_loop_cancel on a run started by another call.
    let h2 = Arc::new(h);
    let caller = Arc::clone(&h2);
    let job = tokio::spawn(async move {
        caller.call("slm_loop_run", json!({"name": "other", "gate_query": "never", "gate_min_score": 0.99, "max_wallclock_s": 60})).await
    });
    let other = wait_running(&h2, "other").await;
    let c = h2.ok("slm_loop_cancel", json!({"run_id": other})).await;
    assert_eq!(c["requested"], true);
    let r = job.await.unwrap();
    assert_ne!(r.is_error, Some(true), "a cancelled run is a normal result");
    assert_eq!(r.structured_content.unwrap()["status"], "cancelled");

    // The demo, through MCP.
    let d = h2.ok("slm_loop_demo", json!({"iterations": 2})).await;
    assert_eq!(d["status"], "max_iterations");
    assert_eq!(d["laps"], 2);
}

async fn wait_running(h: &Harness, name: &str) -> String {
    wait_status(h, name, "running").await
}

async fn wait_status(h: &Harness, name: &str, status: &str) -> String {
    for _ in 0..600 {
        let hist = h.ok("slm_loop_history", json!({"name": name})).await;
        if let Some(run) = hist["runs"].as_array().and_then(|r| r.first()) {
            if run["final_status"] == status {
                return run["run_id"].as_str().unwrap().to_string();
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("run of {name} never reached {status}");
}
