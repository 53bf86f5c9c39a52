//! The dashboard's HTTP routes: the page, and a read-only JSON API over the engine.
//!
//! Every list is paginated (`limit` ≤ 200, `before` = the last id or cursor of the previous
//! page), so the page stays fast with 100k memories and 10k runs. Handlers run the engine's
//! blocking calls on tokio's blocking pool.

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::engine::{Engine, RecallQuery};
use crate::loops;
use crate::memory::Kind;
use crate::Error;

/// The page, compiled in.
const PAGE: &str = include_str!("page.html");
/// Largest page of any list.
const MAX_PAGE: usize = 200;

#[derive(Clone)]
struct AppState {
    engine: Arc<Engine>,
    hosts: Arc<Vec<String>>,
}

/// The dashboard's routes over `engine`, accepting requests whose Host is one of `hosts`.
pub fn router(engine: Arc<Engine>, hosts: Vec<String>) -> Router {
    let state = AppState { engine, hosts: Arc::new(hosts) };
    Router::new()
        .route("/", get(page))
        .route("/api/status", get(status))
        .route("/api/memories", get(memories))
        .route("/api/loops", get(loop_names))
        .route("/api/runs", get(runs))
        .route("/api/runs/{run_id}", get(run))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .with_state(state)
}

/// Refuses requests whose Host header is not the bound address (DNS rebinding).
async fn check_host(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !st.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        let body = json!({"ok": false, "error": {"kind": "forbidden", "message": format!("Host {host:?} is not this dashboard's address")}});
        return (StatusCode::FORBIDDEN, Json(body)).into_response();
    }
    next.run(req).await
}

struct ApiError(Error);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = match &self.0 {
            Error::InvalidInput { .. } => StatusCode::BAD_REQUEST,
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (code, Json(crate::ErrorEnvelope::from(&self.0))).into_response()
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

async fn blocking<T: Serialize + Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Engine) -> crate::Result<T> + Send + 'static,
) -> ApiResult {
    crate::serve::blocking(&st.engine, f).await.map(|v| Json(json!(v))).map_err(ApiError)
}

fn page_limit(limit: Option<usize>) -> crate::Result<usize> {
    let n = limit.unwrap_or(50);
    crate::memory::validate_limit("limit", n, MAX_PAGE)?;
    Ok(n)
}

async fn page() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE))
}

async fn status(State(st): State<AppState>) -> ApiResult {
    blocking(&st, |e| e.status()).await
}

#[derive(Deserialize)]
struct MemoriesQuery {
    /// Semantic search text; without it the newest memories are listed.
    q: Option<String>,
    /// Comma-separated tags (tags cannot contain commas).
    tags: Option<String>,
    /// memory (default), lap or all.
    kind: Option<String>,
    limit: Option<usize>,
    before: Option<i64>,
}

async fn memories(State(st): State<AppState>, Query(q): Query<MemoriesQuery>) -> ApiResult {
    blocking(&st, move |e| {
        let limit = page_limit(q.limit)?;
        let tags: Vec<String> =
            q.tags.as_deref().unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
        let kind = crate::memory::parse_kind_filter("kind", q.kind.as_deref().unwrap_or("memory"))?;
        match q.q.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            Some(text) => {
                let mut rq = RecallQuery::new(text);
                rq.limit = limit;
                rq.tags = tags;
                rq.include_laps = kind != Some(Kind::Memory);
                let mut r = e.recall(&rq)?;
                if let Some(k) = kind {
                    r.hits.retain(|h| h.kind == k);
                }
                Ok(json!({"query": r.query, "hits": r.hits}))
            }
            None => {
                let ms = e.list(&tags, kind, limit, q.before)?;
                let next = if ms.len() == limit { ms.last().map(|m| m.id) } else { None };
                Ok(json!({"memories": ms, "next_before": next}))
            }
        }
    })
    .await
}

async fn loop_names(State(st): State<AppState>) -> ApiResult {
    blocking(&st, |e| Ok(json!({"loops": loops::loop_names(e, 1000)?}))).await
}

#[derive(Deserialize)]
struct RunsQuery {
    name: Option<String>,
    limit: Option<usize>,
    /// Cursor from the previous page's `next_before`.
    before: Option<i64>,
}

fn duration_s(start: &str, end: Option<&str>) -> Option<f64> {
    let s = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let e = chrono::DateTime::parse_from_rfc3339(end?).ok()?;
    Some((e - s).num_milliseconds() as f64 / 1000.0)
}

async fn runs(State(st): State<AppState>, Query(q): Query<RunsQuery>) -> ApiResult {
    blocking(&st, move |e| {
        let (rows, next) = loops::runs_page(e, q.name.as_deref(), page_limit(q.limit)?, q.before)?;
        let runs: Vec<Value> = rows
            .into_iter()
            .map(|r| {
                json!({
                    "run_id": r.run_id, "name": r.name, "status": loops::effective_status(&r), "laps": r.laps,
                    "started_at": r.started_at, "ended_at": r.ended_at,
                    "duration_s": duration_s(&r.started_at, r.ended_at.as_deref()), "reason": r.reason,
                })
            })
            .collect();
        Ok(json!({"runs": runs, "next_before": next}))
    })
    .await
}

#[derive(Deserialize)]
struct RunQuery {
    /// Only laps numbered above this (live updates fetch just the new ones).
    after_lap: Option<i64>,
    limit: Option<usize>,
}

async fn run(State(st): State<AppState>, Path(run_id): Path<String>, Query(q): Query<RunQuery>) -> ApiResult {
    blocking(&st, move |e| {
        let limit = q.limit.unwrap_or(1000);
        crate::memory::validate_limit("limit", limit, 10_000)?;
        let r = loops::run_row(e, &run_id)?;
        let laps = loops::laps(e, &run_id, q.after_lap.unwrap_or(0), limit)?;
        let params = json!(r.params);
        Ok(json!({
            "run_id": r.run_id, "name": r.name, "status": loops::effective_status(&r), "reason": r.reason,
            "laps_total": r.laps, "started_at": r.started_at, "ended_at": r.ended_at,
            "params": params, "laps": laps,
        }))
    })
    .await
}
