//! The MCP tools: thin adapters from typed arguments to the engine and back.
//!
//! Every engine call runs on tokio's blocking pool (embedding and SQLite block), so a long
//! `slm_loop_run` never holds up other requests on the connection: rmcp spawns each request
//! as its own task. Failures come back as tool results with `isError: true`, slm's one-line
//! message as their text content, the error's `{kind, field, message}` under `_meta["slm/error"]`
//! and no `structuredContent` (see [`ToolError`]); a loop that ends on a bound is a normal
//! result.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, Implementation, MetaObject, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, Json, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::profile::{Profile, TOOLS};
use crate::engine::{Engine, RecallQuery, Recalled, Status};
use crate::import::ImportSummary;
use crate::loops::{self, Cancel, CancelOutcome, CheckedLoop, History, LapEvent, LoopParams, RunResult, Show};
use crate::memory::{Memory, Remembered};
use crate::Error;

/// The `_meta` key of a failed call's `{kind, field, message}`.
pub const ERROR_META_KEY: &str = "slm/error";

/// A failed tool call, as the crate's one error envelope.
///
/// It becomes a result with `isError: true`, the message as text content (what every client
/// shows: "invalid limit: 0 (must be between 1 and 1000)") and the envelope's body under
/// `_meta["slm/error"]` for programs. It carries no `structuredContent`: the MCP spec says
/// structured content must conform to the tool's output schema, and the TypeScript SDK (1.x)
/// validates it against the success schema even on errors, so an error object there replaced
/// slm's message with a schema-mismatch error. Widening every output schema to admit the error
/// shape would instead weaken the success contract for every client.
#[derive(Debug, Clone)]
pub struct ToolError(pub crate::ErrorEnvelope);

impl From<&Error> for ToolError {
    fn from(e: &Error) -> Self {
        ToolError(crate::ErrorEnvelope::from(e))
    }
}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, rmcp::ErrorData> {
        let body = self.0.error;
        let mut result = CallToolResult::error(vec![ContentBlock::text(body.message.clone())]);
        let mut meta = serde_json::Map::new();
        meta.insert(ERROR_META_KEY.into(), serde_json::to_value(&body).unwrap_or_default());
        result.meta = Some(MetaObject(meta));
        Ok(result.into())
    }
}

/// What the helpers return. The tool methods spell it out: rmcp derives a tool's output
/// schema from a return type whose last segment is literally `Json`, and an alias hides it.
type ToolResult<T> = Result<Json<T>, ToolError>;

fn tool_result<T>(r: crate::Result<T>) -> ToolResult<T> {
    r.map(Json).map_err(|e| ToolError::from(&e))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberArgs {
    /// The text to remember: 1 byte to 64 KiB.
    pub content: String,
    /// Tags: each 1-128 characters, no whitespace or commas.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Expire the memory this many seconds from now (> 0): from then on no loop gate counts
    /// it and recall and list hide it. Remembering it again renews (or clears) the expiry.
    #[serde(default)]
    pub ttl_s: Option<f64>,
    /// Expire the memory at this RFC 3339 time (in the future). Not with `ttl_s`.
    #[serde(default)]
    pub expires_at: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetArgs {
    /// Memory ids (at least one, unless `expired`).
    #[serde(default)]
    pub ids: Vec<i64>,
    /// Delete every memory that has expired by now instead (none is not an error).
    #[serde(default)]
    pub expired: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallArgs {
    /// What to look for (1 byte to 64 KiB).
    pub query: String,
    /// Most hits to return, 1-1000. Default 10.
    #[serde(default = "d10")]
    pub limit: i64,
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only hits scoring at least this exact cosine, in [-1, 1].
    #[serde(default)]
    pub min_score: Option<f64>,
    /// Include loop ledger laps (included anyway when a `loop:*` tag is given).
    #[serde(default)]
    pub include_laps: bool,
    /// Include memories that have expired (hidden by default).
    #[serde(default)]
    pub include_expired: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Most memories to list, 1-1000. Default 20.
    #[serde(default = "d20")]
    pub limit: i64,
    /// `memory` (default), `lap` (ledger laps) or `all`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Only ids below this one (paging: pass the last id of the previous page).
    #[serde(default)]
    pub before: Option<i64>,
    /// Include memories that have expired (hidden by default).
    #[serde(default)]
    pub include_expired: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdsArgs {
    /// Memory ids.
    pub ids: Vec<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// Only runs of this loop name (all loops when absent).
    #[serde(default)]
    pub name: Option<String>,
    /// Most runs, 1-1000, newest first. Default 20.
    #[serde(default = "d20")]
    pub limit: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowArgs {
    /// The run id (from slm_loop_run or slm_loop_history).
    pub run_id: String,
    /// Most laps, 1-10000. Default 200.
    #[serde(default = "d200")]
    pub limit: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunIdArgs {
    /// The run id to stop.
    pub run_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportItem {
    /// The text to remember.
    pub content: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportArgs {
    /// Up to 1000 memories; invalid ones are reported and skipped, the rest stored.
    pub items: Vec<ImportItem>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DemoArgs {
    /// Lap limit, >= 1 (2 shows a max_iterations stop). Default 20.
    #[serde(default = "d20")]
    pub iterations: i64,
}

fn d10() -> i64 {
    10
}
fn d20() -> i64 {
    20
}
fn d200() -> i64 {
    200
}

/// `{"memories": [...]}`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MemoriesOut {
    pub memories: Vec<Memory>,
}

/// `{"forgotten": [ids]}`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ForgottenOut {
    pub forgotten: Vec<i64>,
}

fn limit(field: &'static str, n: i64) -> crate::Result<usize> {
    usize::try_from(n).map_err(|_| Error::invalid(field, n, "must be a positive integer"))
}

/// The slm MCP server: one engine, the tools of one profile.
#[derive(Clone)]
pub struct SlmServer {
    engine: Arc<Engine>,
    /// The loop runtime every loop of this server shares (its ledger writer, gate views).
    loops: Arc<loops::LoopHost>,
    tool_router: ToolRouter<SlmServer>,
}

impl SlmServer {
    /// A server over `engine` exposing the tools of `profile`.
    pub fn new(engine: Arc<Engine>, profile: Profile) -> Self {
        let mut tool_router = Self::tool_router();
        let keep: Vec<&str> = profile.tools().collect();
        for (name, _) in TOOLS {
            if !keep.contains(name) {
                tool_router.remove_route(name);
            }
        }
        // Strict-validator-clean schemas (Ajv strict, MCP Inspector --strict): see super::schema.
        for route in tool_router.map.values_mut() {
            super::schema::portable(Arc::make_mut(&mut route.attr.input_schema));
            if let Some(out) = route.attr.output_schema.as_mut() {
                super::schema::portable(Arc::make_mut(out));
            }
        }
        let loops = Arc::new(loops::LoopHost::new(Arc::clone(&engine)));
        SlmServer { engine, loops, tool_router }
    }

    /// Runs `f` on the blocking pool and maps its result to a tool result.
    async fn blocking<T, F>(&self, f: F) -> ToolResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Engine) -> crate::Result<T> + Send + 'static,
    {
        tool_result(crate::serve::blocking(&self.engine, f).await)
    }

    /// Runs a loop on the blocking pool, forwarding one progress notification per lap when
    /// the client gave a progress token, and cancelling it on `notifications/cancelled`.
    async fn run_loop<F>(&self, ctx: RequestContext<RoleServer>, total: i64, f: F) -> ToolResult<RunResult>
    where
        F: FnOnce(&loops::LoopHost, &Cancel, &mut dyn FnMut(&LapEvent)) -> crate::Result<RunResult> + Send + 'static,
    {
        let token = ctx.meta.get_progress_token();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LapEvent>();
        let cancel = Arc::new(Cancel::default());
        let engine = Arc::clone(&self.loops);
        let job_cancel = Arc::clone(&cancel);
        // Without a progress token nobody hears about laps: do not wake this task for each.
        let forward = token.is_some();
        let mut job = tokio::task::spawn_blocking(move || {
            f(&engine, &job_cancel, &mut |e| {
                if forward {
                    let _ = tx.send(e.clone());
                }
            })
        });
        let notify = |e: LapEvent| {
            let peer = ctx.peer.clone();
            let token = token.clone();
            async move {
                if let Some(t) = token {
                    let p = ProgressNotificationParam::new(t, e.lap as f64)
                        .with_total(total as f64)
                        .with_message(format!("lap {}: {} ({})", e.lap, e.decision, e.detail));
                    // Bounded: a client that stopped reading must not stall the loop's result.
                    let _ = tokio::time::timeout(Duration::from_secs(1), peer.notify_progress(p)).await;
                }
            }
        };
        let outcome = loop {
            tokio::select! {
                _ = ctx.ct.cancelled(), if !cancel.requested() => cancel.request(),
                Some(e) = rx.recv() => notify(e).await,
                done = &mut job => break done,
            }
        };
        while let Ok(e) = rx.try_recv() {
            notify(e).await;
        }
        tool_result(outcome.unwrap_or_else(|join| Err(Error::Internal(join.to_string()))))
    }
}

#[tool_router]
impl SlmServer {
    /// Store a memory. The same content with the same tags returns the existing id with deduped=true.
    #[tool(annotations(
        title = "Remember",
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn remember(&self, Parameters(a): Parameters<RememberArgs>) -> Result<Json<Remembered>, ToolError> {
        self.blocking(move |e| {
            let ttl = a.ttl_s.map(|s| move || crate::expiry::after_seconds("ttl_s", s));
            let expires = crate::expiry::from_inputs(ttl, a.expires_at.as_deref(), "ttl_s", "expires_at")?;
            e.remember_expiring(&a.content, &a.tags, expires.as_deref())
        })
        .await
    }

    /// Semantic search over memories, best first, scored by exact cosine similarity in [-1, 1].
    #[tool(annotations(title = "Recall", read_only_hint = true, open_world_hint = false))]
    async fn recall(&self, Parameters(a): Parameters<RecallArgs>) -> Result<Json<Recalled>, ToolError> {
        self.blocking(move |e| {
            let q = RecallQuery {
                query: a.query,
                limit: limit("limit", a.limit)?,
                tags: a.tags,
                min_score: a.min_score,
                include_laps: a.include_laps,
                include_expired: a.include_expired,
            };
            e.recall(&q)
        })
        .await
    }

    /// List memories newest first, optionally by tags, kind and page.
    #[tool(annotations(title = "List memories", read_only_hint = true, open_world_hint = false))]
    async fn list_memories(&self, Parameters(a): Parameters<ListArgs>) -> Result<Json<MemoriesOut>, ToolError> {
        self.blocking(move |e| {
            let kind = crate::memory::parse_kind_filter("kind", a.kind.as_deref().unwrap_or("memory"))?;
            let q = crate::engine::ListQuery {
                tags: &a.tags,
                kind,
                limit: limit("limit", a.limit)?,
                before: a.before,
                include_expired: a.include_expired,
            };
            Ok(MemoriesOut { memories: e.list(&q)? })
        })
        .await
    }

    /// Delete memories by id (an unknown id is a not-found error and nothing is deleted), or,
    /// with `expired`, every memory that has expired.
    #[tool(annotations(
        title = "Forget",
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn forget(&self, Parameters(a): Parameters<ForgetArgs>) -> Result<Json<ForgottenOut>, ToolError> {
        self.blocking(move |e| {
            if a.expired && !a.ids.is_empty() {
                return Err(Error::invalid("expired", "true", "give ids or expired, not both"));
            }
            Ok(ForgottenOut { forgotten: if a.expired { e.forget_expired()? } else { e.forget(&a.ids)? } })
        })
        .await
    }

    /// Data root, database, counts, model and index state. Never loads the model.
    #[tool(annotations(title = "Status", read_only_hint = true, open_world_hint = false))]
    async fn status(&self) -> Result<Json<Status>, ToolError> {
        self.blocking(|e| e.status()).await
    }

    /// Block until a memory matching gate_query is retrievable with exact cosine >= gate_min_score, under hard bounds (laps, wall-clock, tokens, no-progress). Every lap is written to a durable ledger. Ending on a bound is a normal result (ok: true). Sends one progress notification per lap; cancellable.
    #[tool(annotations(
        title = "Run a bounded loop",
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn slm_loop_run(
        &self,
        Parameters(p): Parameters<LoopParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<RunResult>, ToolError> {
        let mut verifiers = p.gate_verify.iter().flatten().chain(p.gates.iter().flat_map(|g| g.verify.iter().flatten()));
        if let Some(c) = verifiers.find(|v| v.starts_with("cmd:")) {
            let e = Error::invalid("gate_verify", c, "cmd: verifiers run shell commands and are CLI-only; an MCP tool never runs one");
            return Err(ToolError::from(&e));
        }
        let spec = CheckedLoop::try_from(p).map_err(|e| ToolError::from(&e))?;
        self.run_loop(ctx, spec.limits.max_iterations, move |e, c, on_lap| loops::run_memory_loop(e, &spec, c, on_lap)).await
    }

    /// Runs of one loop (or all loops), newest first.
    #[tool(annotations(title = "Loop history", read_only_hint = true, open_world_hint = false))]
    async fn slm_loop_history(&self, Parameters(a): Parameters<HistoryArgs>) -> Result<Json<History>, ToolError> {
        self.blocking(move |e| loops::history(e, a.name.as_deref(), limit("limit", a.limit)?)).await
    }

    /// A run's laps: decision, gate result, detail, score and budget of each. Unknown run id: not found.
    #[tool(annotations(title = "Show a loop run", read_only_hint = true, open_world_hint = false))]
    async fn slm_loop_show(&self, Parameters(a): Parameters<ShowArgs>) -> Result<Json<Show>, ToolError> {
        self.blocking(move |e| loops::show(e, &a.run_id, limit("limit", a.limit)?)).await
    }

    /// Ask a running loop (in any process) to stop; it ends with status cancelled at its next check.
    #[tool(annotations(
        title = "Cancel a loop run",
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn slm_loop_cancel(&self, Parameters(a): Parameters<RunIdArgs>) -> Result<Json<CancelOutcome>, ToolError> {
        self.blocking(move |e| loops::cancel(e, &a.run_id)).await
    }

    /// Fetch 1-1000 memories by id (unknown ids are left out).
    #[tool(annotations(title = "Get memories", read_only_hint = true, open_world_hint = false))]
    async fn get_memories(&self, Parameters(a): Parameters<IdsArgs>) -> Result<Json<MemoriesOut>, ToolError> {
        self.blocking(move |e| {
            crate::memory::validate_limit("ids", a.ids.len(), 1000)?;
            Ok(MemoriesOut { memories: e.get(&a.ids)? })
        })
        .await
    }

    /// Remember up to 1000 memories at once, embedded in batches; invalid items are reported and skipped.
    #[tool(annotations(
        title = "Import memories",
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn import_memories(&self, Parameters(a): Parameters<ImportArgs>) -> Result<Json<ImportSummary>, ToolError> {
        self.blocking(move |e| {
            crate::memory::validate_limit("items", a.items.len(), 1000)?;
            crate::import::import_items(e, a.items.into_iter().map(|i| (i.content, i.tags)))
        })
        .await
    }

    /// The keyless demo loop: a stub gate fails laps 1-2 and passes lap 3 (recorded as loop convergence-demo).
    #[tool(annotations(
        title = "Demo loop",
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn slm_loop_demo(
        &self,
        Parameters(a): Parameters<DemoArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<RunResult>, ToolError> {
        let spec = CheckedLoop::demo(a.iterations).map_err(|e| ToolError::from(&e))?;
        self.run_loop(ctx, spec.limits.max_iterations, move |e, c, on_lap| loops::demo(e, &spec, c, on_lap)).await
    }
}

/// Arguments that do not deserialize into `T`, as the error every other failure is: kind
/// `invalid_input`, the field at fault (its path, e.g. `tags[1]`), the message.
fn check_args<T: serde::de::DeserializeOwned>(args: &serde_json::Value) -> Option<crate::ErrorEnvelope> {
    let e = serde_path_to_error::deserialize::<_, T>(args).err()?;
    let path = e.path().to_string();
    let inner = e.into_inner().to_string();
    // At the top level serde names the field in its message (missing or unknown field `x`).
    let field = if path != "." { path } else { inner.split('`').nth(1).map_or_else(|| "arguments".to_string(), str::to_string) };
    let message = format!("invalid {field}: {inner}");
    Some(crate::ErrorEnvelope { ok: false, error: crate::ErrorBody { kind: "invalid_input".into(), field: Some(field), message } })
}

/// The argument check of a tool call (see [`check_args`]); `None` lets the call go on.
fn bad_arguments(tool: &str, args: Option<&serde_json::Map<String, serde_json::Value>>) -> Option<crate::ErrorEnvelope> {
    let v = serde_json::Value::Object(args.cloned().unwrap_or_default());
    match tool {
        "remember" => check_args::<RememberArgs>(&v),
        "recall" => check_args::<RecallArgs>(&v),
        "list_memories" => check_args::<ListArgs>(&v),
        "forget" => check_args::<ForgetArgs>(&v),
        "get_memories" => check_args::<IdsArgs>(&v),
        "slm_loop_run" => check_args::<LoopParams>(&v),
        "slm_loop_history" => check_args::<HistoryArgs>(&v),
        "slm_loop_show" => check_args::<ShowArgs>(&v),
        "slm_loop_cancel" => check_args::<RunIdArgs>(&v),
        "import_memories" => check_args::<ImportArgs>(&v),
        "slm_loop_demo" => check_args::<DemoArgs>(&v),
        _ => None,
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SlmServer {
    /// Dispatches to the tool, after checking its arguments: rmcp would answer a type error
    /// with its own text and no `_meta["slm/error"]`; here it is slm's invalid-input error.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        if self.tool_router.has_route(&request.name) {
            if let Some(e) = bad_arguments(&request.name, request.arguments.as_ref()) {
                return ToolError(e).into_call_tool_result();
            }
        }
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(tcc).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("slm", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "slm is a local memory engine. `remember` stores text (embedded locally), `recall` finds it by \
                 meaning with exact cosine scores. `slm_loop_run` blocks until a memory matching a gate query \
                 scores >= gate_min_score, under hard bounds, and records every lap: use it to wait for another \
                 agent's verified work. Agree on gate_tags with the writing agent for precise signals: cosine \
                 measures topic, not truth.",
            )
    }
}
