//! The dashboard's HTTP routes: the page, and a read-only JSON API over the engine.
//!
//! Every list is paginated (`limit` ≤ 200, `before` = the last id or cursor of the previous
//! page), so the page stays fast with 100k memories and 10k runs. Handlers run the engine's
//! blocking calls on tokio's blocking pool.

use std::sync::{Arc, LazyLock};

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::auth::{self, Auth};
use super::HostCheck;
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
    hosts: Arc<HostCheck>,
}

/// The dashboard's routes over `engine`, accepting requests whose Host passes `hosts` and,
/// with `auth`, only those carrying the secret. Every response gets the security headers.
pub fn router(engine: Arc<Engine>, hosts: HostCheck, auth: Option<Auth>) -> Router {
    let state = AppState { engine, hosts: Arc::new(hosts) };
    let mut r = Router::new()
        .route("/", get(page))
        .route("/api/status", get(status))
        .route("/api/memories", get(memories))
        .route("/api/loops", get(loop_names))
        .route("/api/runs", get(runs))
        .route("/api/runs/{run_id}", get(run))
        .fallback(not_found);
    // Layers run outermost last-added first: headers, then Host, then the secret.
    if let Some(a) = auth {
        r = r.layer(middleware::from_fn_with_state(Arc::new(a), auth::require));
    }
    r.layer(middleware::from_fn_with_state(state.clone(), check_host)).layer(middleware::map_response(security_headers)).with_state(state)
}

/// Refuses requests whose Host header does not name this dashboard (DNS rebinding).
async fn check_host(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !st.hosts.allows(host) {
        let body = json!({"ok": false, "error": {"kind": "forbidden", "field": null,
            "message": format!("Host {host:?} is not this dashboard's address (see --allow-host)")}});
        return (StatusCode::FORBIDDEN, Json(body)).into_response();
    }
    next.run(req).await
}

/// The page's Content-Security-Policy: nothing remote, the inline script and style allowed by
/// their SHA-256 hashes, fetches to this origin only, no framing.
static CSP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; img-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        inline_hash("script"),
        inline_hash("style")
    )
});

/// `sha256-…` of the text inside the page's one `<tag>` element.
fn inline_hash(tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = PAGE.find(&open).map(|i| i + open.len()).unwrap_or(0);
    let end = PAGE[start..].find(&format!("</{tag}>")).map(|i| start + i).unwrap_or(start);
    format!("sha256-{}", base64(&Sha256::digest(&PAGE.as_bytes()[start..end])))
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= c.len() { A[(n >> shift) as usize & 63] as char } else { '=' });
        }
    }
    out
}

async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    if let Ok(v) = HeaderValue::from_str(&CSP) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    r
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError(Error::NotFound { what: "path", id: uri.path().to_string() })
}

/// `Query`, but a malformed query string answers 400 with the JSON error shape.
struct ApiQuery<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|q| ApiQuery(q.0))
            .map_err(|e| ApiError(Error::invalid("query", parts.uri.query().unwrap_or(""), e.body_text())))
    }
}

/// An optional whole-number query parameter in `min..=max`.
fn whole(field: &'static str, v: Option<&str>, min: i64, max: i64, rule: &str) -> crate::Result<Option<i64>> {
    let Some(s) = v else { return Ok(None) };
    match s.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(Error::invalid(field, s, rule)),
    }
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

async fn blocking<T: Serialize + Send + 'static>(st: &AppState, f: impl FnOnce(&Engine) -> crate::Result<T> + Send + 'static) -> ApiResult {
    crate::serve::blocking(&st.engine, f).await.map(|v| Json(json!(v))).map_err(ApiError)
}

fn page_limit(limit: Option<&str>, default: usize, max: usize) -> Result<usize, ApiError> {
    let rule = format!("must be a whole number between 1 and {max}");
    Ok(whole("limit", limit, 1, max as i64, &rule).map_err(ApiError)?.map_or(default, |n| n as usize))
}

fn before(v: Option<&str>) -> Result<Option<i64>, ApiError> {
    whole("before", v, 1, i64::MAX, "must be a positive whole number (a next_before from the previous page)").map_err(ApiError)
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
    limit: Option<String>,
    before: Option<String>,
    /// `true` shows memories that have expired too (hidden by default).
    include_expired: Option<String>,
}

async fn memories(State(st): State<AppState>, ApiQuery(q): ApiQuery<MemoriesQuery>) -> ApiResult {
    let limit = page_limit(q.limit.as_deref(), 50, MAX_PAGE)?;
    let before = before(q.before.as_deref())?;
    let include_expired = match q.include_expired.as_deref() {
        None | Some("false") | Some("") => false,
        Some("true") => true,
        Some(other) => return Err(ApiError(Error::invalid("include_expired", other, "must be true or false"))),
    };
    blocking(&st, move |e| {
        let tags: Vec<String> =
            q.tags.as_deref().unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
        let kind = crate::memory::parse_kind_filter("kind", q.kind.as_deref().unwrap_or("memory"))?;
        match q.q.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            Some(text) => {
                let mut rq = RecallQuery::new(text);
                rq.limit = limit;
                rq.tags = tags;
                rq.include_laps = kind != Some(Kind::Memory);
                rq.include_expired = include_expired;
                let mut r = e.recall(&rq)?;
                if let Some(k) = kind {
                    r.hits.retain(|h| h.kind == k);
                }
                Ok(json!({"query": r.query, "hits": r.hits}))
            }
            None => {
                let ms = e.list(&crate::engine::ListQuery { tags: &tags, kind, limit, before, include_expired })?;
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
    limit: Option<String>,
    /// Cursor from the previous page's `next_before`.
    before: Option<String>,
}

fn duration_s(start: &str, end: Option<&str>) -> Option<f64> {
    let s = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let e = chrono::DateTime::parse_from_rfc3339(end?).ok()?;
    Some((e - s).num_milliseconds() as f64 / 1000.0)
}

async fn runs(State(st): State<AppState>, ApiQuery(q): ApiQuery<RunsQuery>) -> ApiResult {
    let limit = page_limit(q.limit.as_deref(), 50, MAX_PAGE)?;
    let before = before(q.before.as_deref())?;
    blocking(&st, move |e| {
        let (rows, next) = loops::runs_page(e, q.name.as_deref(), limit, before)?;
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
    after_lap: Option<String>,
    limit: Option<String>,
}

async fn run(State(st): State<AppState>, run_id: Result<Path<String>, PathRejection>, ApiQuery(q): ApiQuery<RunQuery>) -> ApiResult {
    let Path(run_id) = run_id.map_err(|e| ApiError(Error::invalid("run_id", "", e.body_text())))?;
    let limit = page_limit(q.limit.as_deref(), 1000, 10_000)?;
    let after_lap = whole("after_lap", q.after_lap.as_deref(), 0, i64::MAX, "must be a whole number, 0 or more (the last lap seen)")
        .map_err(ApiError)?
        .unwrap_or(0);
    blocking(&st, move |e| {
        let r = loops::run_row(e, &run_id)?;
        let laps = loops::laps(e, &run_id, after_lap, limit)?;
        let params = json!(r.params);
        // An ended run's gates and the memories that passed each (its stored result).
        let matches = r
            .result
            .as_deref()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|v| v.get("matches").cloned())
            .unwrap_or_else(|| json!([]));
        Ok(json!({
            "run_id": r.run_id, "name": r.name, "status": loops::effective_status(&r), "reason": r.reason,
            "laps_total": r.laps, "started_at": r.started_at, "ended_at": r.ended_at,
            "params": params, "laps": laps, "matches": matches,
        }))
    })
    .await
}
