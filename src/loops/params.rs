//! Loop parameters: defaults, validation and clamping (SPEC §2), done once at the boundary.
//!
//! Surfaces build a request ([`LoopParams`] for a memory-gated run, [`StartParams`] for an
//! agent-driven one, [`StepParams`] for a step) and convert it with `TryFrom` into a checked
//! value ([`CheckedLoop`], [`CheckedStart`], [`CheckedStep`]); the loop engine takes only
//! checked values and never validates again. A value with no clamp that breaks its rule is
//! invalid input (nothing is written); a value past a clamp is replaced and the replacement
//! is reported in `termination.clamped`.

use serde::{Deserialize, Serialize};

use crate::memory;
pub use crate::record::Limits;
use crate::record::{GateDef, GateEnv, GateSpec, VerifySpec};
use crate::{Error, Result};

/// Hard ceiling on laps.
pub const MAX_ITERATIONS_CAP: i64 = 200;
/// Hard ceiling on wall-clock seconds.
pub const MAX_WALLCLOCK_CAP: f64 = 120.0;
/// Shortest poll interval, in seconds.
pub const POLL_FLOOR: f64 = 0.25;
/// Longest gate query, in characters.
pub const MAX_QUERY_CHARS: usize = 2000;

/// What the caller asks for (the MCP tool's arguments; the CLI's flags).
///
/// One gate is given by the shorthand (`gate_query`, `gate_tags`, `gate_count`); several by
/// `gates`, each with its own query, tags, threshold, verifiers and count. The two forms do
/// not mix. `gate_min_score`, `gate_verify` and `gate_nli_min` are what every gate of
/// `gates` uses unless it sets its own.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoopParams {
    /// Loop name: 1-128 characters of [A-Za-z0-9._:-]; the ledger key and the `loop:<name>` tag.
    pub name: String,
    /// What the awaited memory says (1-2000 characters); embedded once per run. Leave it out with gate_tags for a tag-only gate (every eligible memory carrying all the tags passes, unscored, no model), or give `gates` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_query: Option<String>,
    /// The gate passes when the best exact cosine is >= this; finite, in [-1, 1]. Default 0.0. With `gates`: the threshold of every gate that sets no min_score.
    #[serde(default)]
    pub gate_min_score: f64,
    /// Most laps: >= 1; above 200 is clamped to 200. Default 20.
    #[serde(default = "d_iterations")]
    pub max_iterations: i64,
    /// Most seconds: > 0; above 120 is clamped to 120. Default 15.
    #[serde(default = "d_wallclock")]
    pub max_wallclock_s: f64,
    /// Seconds between laps: > 0; clamped to [0.25, max_wallclock_s]. Default 1.
    #[serde(default = "d_poll")]
    pub poll_interval_s: f64,
    /// Stop once this many tokens are used (model tokenizer); 0 = unlimited. Default 0.
    #[serde(default)]
    pub max_tokens: i64,
    /// Stop when the gate observation is unchanged for this many consecutive laps; 0 = off.
    #[serde(default)]
    pub no_progress_window: i64,
    /// Only memories carrying every one of these tags are eligible (agree on them with the writer). Without gate_query: a tag-only gate.
    #[serde(default)]
    pub gate_tags: Vec<String>,
    /// Verifiers every candidate must pass: "model" (slm's own trained cross-encoder: does the memory say the query's event has happened?), "guard" (deterministic: identifiers and polarity of the query must hold in the memory), "guard:identifier" (only the guard's identifier rule), "guard:entities" (every number of the query is in the memory in any form, and no other month or environment replaces the one it names), "none" (plain cosine), "nli:DIR" (a user-supplied ONNX NLI model). "cmd:..." is CLI-only. Default: ["guard:entities", "model"] for a gate with a query, none for a tag-only gate (text verifiers do not apply to it). With `gates`: the chain of every gate that sets no verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_verify: Option<Vec<String>>,
    /// Entailment probability an nli: verifier needs, in [0, 1]. Default 0.5.
    #[serde(default = "d_nli_min")]
    pub gate_nli_min: f64,
    /// How many distinct memories must pass the gate (a barrier for N writers): 1-1000. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_count: Option<i64>,
    /// Several gates in one run (1-16), joined by gate_mode; not together with gate_query, gate_tags or gate_count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateParams>,
    /// How the gates combine: "all" (every gate must pass; the default) or "any".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_mode: Option<crate::record::GateMode>,
    /// Which memories are eligible, by when they were written: "start" (after this run started), "last" (after the memory that ended the most recent converged run of this loop name; every memory if there is none), "#ID" (after memory ID), an RFC 3339 time, or a duration such as "15m" (at most that long before the run started). Unset: every eligible memory, whenever written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// One gate of `gates`. Unset fields take the run's `gate_min_score`, `gate_verify` and
/// `gate_nli_min`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateParams {
    /// What the awaited memory says (1-2000 characters). Leave it out, with tags, for a tag-only gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Only memories carrying every one of these tags are eligible for this gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// This gate's threshold, in [-1, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// This gate's verifiers (as gate_verify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Vec<String>>,
    /// This gate's nli: threshold, in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nli_min: Option<f64>,
    /// How many distinct memories must pass this gate: 1-1000. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}

/// Most gates in one run.
pub const MAX_GATES: usize = 16;
/// Largest `count` of a gate.
pub const MAX_COUNT: i64 = 1000;

/// The default verifier chain, the best measured on the dev split (models/verifier/README.md).
pub fn default_verify() -> Vec<String> {
    vec!["guard:entities".to_string(), "model".to_string()]
}

fn d_nli_min() -> f64 {
    crate::record::DEFAULT_NLI_MIN
}

fn d_iterations() -> i64 {
    20
}
fn d_wallclock() -> f64 {
    15.0
}
fn d_poll() -> f64 {
    1.0
}

impl LoopParams {
    /// Parameters with the SPEC's defaults.
    pub fn new(name: impl Into<String>, gate_query: impl Into<String>) -> Self {
        LoopParams {
            name: name.into(),
            gate_query: Some(gate_query.into()),
            gate_min_score: 0.0,
            max_iterations: d_iterations(),
            max_wallclock_s: d_wallclock(),
            poll_interval_s: d_poll(),
            max_tokens: 0,
            no_progress_window: 0,
            gate_tags: Vec::new(),
            gate_verify: None,
            gate_nli_min: d_nli_min(),
            gate_count: None,
            gates: Vec::new(),
            gate_mode: None,
            since: None,
        }
    }
}

/// Checks a gate query: 1-2000 characters (`field` names it as the surface does).
pub fn check_gate_query(field: &'static str, query: &str) -> Result<()> {
    let n = query.chars().count();
    if n == 0 || n > MAX_QUERY_CHARS {
        return Err(Error::invalid(field, query, format!("must be 1-2000 characters; it has {n}")));
    }
    Ok(())
}

/// Parses and checks a verifier chain: known specs, `none` alone, an `nli:` directory that
/// holds the files a model needs, a threshold in [0, 1].
pub fn check_verify(specs: &[String], nli_min: f64) -> Result<Vec<VerifySpec>> {
    if specs.is_empty() {
        return Err(Error::invalid(
            "gate_verify",
            "[]",
            "must name at least one verifier (model, guard, guard:identifier, guard:entities, none, nli:DIR, cmd:COMMAND)",
        ));
    }
    if !nli_min.is_finite() || !(0.0..=1.0).contains(&nli_min) {
        return Err(Error::invalid("gate_nli_min", nli_min, "must be a number in [0, 1]"));
    }
    let parsed = specs.iter().map(|s| VerifySpec::parse(s)).collect::<Result<Vec<_>>>()?;
    if parsed.len() > 1 && parsed.contains(&VerifySpec::None) {
        return Err(Error::invalid("gate_verify", specs.join(","), "none (plain cosine) cannot be combined with other verifiers"));
    }
    for spec in &parsed {
        if let VerifySpec::Nli(dir) = spec {
            crate::nli::check_dir(dir)?;
        }
    }
    Ok(parsed)
}

/// One clamp that was applied.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Clamp {
    pub field: &'static str,
    pub requested: serde_json::Value,
    pub applied: serde_json::Value,
}

/// Checks a loop name: 1–128 characters of `[A-Za-z0-9._:-]`.
pub fn validate_name(name: &str) -> Result<()> {
    let ok_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if name.is_empty() || name.len() > 128 || !ok_chars {
        return Err(Error::invalid("name", name, "must be 1-128 characters of [A-Za-z0-9._:-]"));
    }
    Ok(())
}

/// Validates the bounds shared by every kind of gate and applies their clamps.
pub fn bounds(
    name: &str,
    gate_min_score: f64,
    max_iterations: i64,
    max_wallclock_s: f64,
    poll_interval_s: f64,
    max_tokens: i64,
    no_progress_window: i64,
) -> Result<(Limits, Vec<Clamp>)> {
    validate_name(name)?;
    memory::validate_score("gate_min_score", gate_min_score)?;
    if max_iterations < 1 {
        return Err(Error::invalid("max_iterations", max_iterations, "must be an integer >= 1"));
    }
    if !max_wallclock_s.is_finite() || max_wallclock_s <= 0.0 {
        return Err(Error::invalid("max_wallclock_s", max_wallclock_s, "must be a finite number > 0"));
    }
    if !poll_interval_s.is_finite() || poll_interval_s <= 0.0 {
        return Err(Error::invalid("poll_interval_s", poll_interval_s, "must be a finite number > 0"));
    }
    if max_tokens < 0 {
        return Err(Error::invalid("max_tokens", max_tokens, "must be an integer >= 0 (0 = unlimited)"));
    }
    if no_progress_window < 0 {
        return Err(Error::invalid("no_progress_window", no_progress_window, "must be an integer >= 0 (0 = disabled)"));
    }
    let mut clamped = Vec::new();
    let mut clamp = |field: &'static str, requested: serde_json::Value, applied: serde_json::Value| {
        clamped.push(Clamp { field, requested, applied });
    };
    let iterations = if max_iterations > MAX_ITERATIONS_CAP {
        clamp("max_iterations", max_iterations.into(), MAX_ITERATIONS_CAP.into());
        MAX_ITERATIONS_CAP
    } else {
        max_iterations
    };
    let wallclock = if max_wallclock_s > MAX_WALLCLOCK_CAP {
        clamp("max_wallclock_s", max_wallclock_s.into(), MAX_WALLCLOCK_CAP.into());
        MAX_WALLCLOCK_CAP
    } else {
        max_wallclock_s
    };
    let mut poll = poll_interval_s;
    if poll < POLL_FLOOR {
        poll = POLL_FLOOR;
    }
    if poll > wallclock {
        poll = wallclock;
    }
    if poll != poll_interval_s {
        clamp("poll_interval_s", poll_interval_s.into(), poll.into());
    }
    let limits = Limits {
        max_iterations: iterations,
        max_wallclock_s: wallclock,
        poll_interval_s: poll,
        max_tokens,
        no_progress_window,
        gate_min_score,
    };
    Ok((limits, clamped))
}

/// Something the applied bounds imply that the caller may not expect, reported in
/// `termination.notes` (and once on the CLI's stderr): `field` names the bound concerned.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Note {
    pub field: &'static str,
    pub message: String,
}

/// The bounds a waiting (memory-gated) run can never reach. Between two laps the runner
/// waits at most `poll_interval_s` (a feed wake-up only makes a lap sooner, and uses up an
/// iteration too), so `max_iterations` laps wait at most `(max_iterations - 1) ×
/// poll_interval_s` in all. When that is less than `max_wallclock_s`, the run ends on
/// `max_iterations` before its wall-clock (only slow gate evaluations could fill the rest):
/// `max_wallclock_s` is unreachable by waiting. The converse is not provable (wake-ups can
/// use up the laps early), so it is not reported.
pub fn unreachable_bounds(l: &Limits) -> Vec<Note> {
    let waits = (l.max_iterations - 1) as f64 * l.poll_interval_s;
    if waits >= l.max_wallclock_s {
        return Vec::new();
    }
    let fmt = |x: f64| format!("{}", (x * 1000.0).round() / 1000.0);
    let mut message = if l.max_iterations == 1 {
        format!("max_wallclock_s {} cannot be reached: max_iterations 1 evaluates the gate once and never waits", fmt(l.max_wallclock_s))
    } else {
        format!(
            "max_wallclock_s {} cannot be reached by waiting: {} laps (max_iterations) at most {} s apart \
             (poll_interval_s) end the run on max_iterations after about {} s",
            fmt(l.max_wallclock_s),
            l.max_iterations,
            fmt(l.poll_interval_s),
            fmt(waits)
        )
    };
    // What would let the run wait its whole wall-clock, within the caps.
    let laps_needed = (l.max_wallclock_s / l.poll_interval_s).ceil() as i64 + 1;
    let mut fixes = Vec::new();
    if laps_needed <= MAX_ITERATIONS_CAP {
        fixes.push(format!("max_iterations {laps_needed}"));
    }
    if l.max_iterations > 1 {
        let poll = ((l.max_wallclock_s / (l.max_iterations - 1) as f64) * 1000.0).ceil() / 1000.0;
        fixes.push(format!("poll_interval_s {poll}"));
    }
    if !fixes.is_empty() {
        message.push_str(&format!("; to wait up to {} s, use {}", fmt(l.max_wallclock_s), fixes.join(" or ")));
    }
    vec![Note { field: "max_wallclock_s", message }]
}

/// The run-level settings every gate of `gates` inherits.
struct Shared<'a> {
    min_score: f64,
    verify: Option<&'a [String]>,
    nli_min: f64,
}

/// Checks one gate: `index` is its place in `gates` (`None`: the shorthand), used to name
/// the field as the caller wrote it (`gates[2].count`, or `gate_count`).
fn check_gate(g: &GateParams, shared: &Shared<'_>, index: Option<usize>) -> Result<GateDef> {
    // Inside `gates` the field is `gates` and the rule says which gate and key.
    let field = |single: &'static str| if index.is_some() { "gates" } else { single };
    let (f_query, f_tags, f_verify, f_count, f_min) =
        (field("gate_query"), field("gate_tags"), field("gate_verify"), field("gate_count"), field("gate_min_score"));
    let at = |key: &str, rule: &str| match index {
        Some(i) => format!("gates[{i}].{key} {rule}"),
        None => rule.to_string(),
    };
    let rename = |field: &'static str, key: &'static str| {
        move |e: Error| match e {
            Error::InvalidInput { value, rule, .. } => Error::InvalidInput { field, value, rule: at(key, &rule) },
            other => other,
        }
    };
    if let Some(q) = &g.query {
        check_gate_query(f_query, q).map_err(rename(f_query, "query"))?;
    }
    let tags = memory::normalize_tags(&g.tags).map_err(rename(f_tags, "tags"))?;
    if g.query.is_none() && tags.is_empty() {
        let rule = match index {
            None => "is required: give gate_query, or gate_tags for a tag-only gate".to_string(),
            Some(_) => at("query", "or tags is required: a gate needs a query, tags, or both"),
        };
        return Err(Error::invalid(f_query, "(none)", rule));
    }
    let count = g.count.unwrap_or(1);
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(Error::invalid(f_count, count, at("count", "must be an integer in 1-1000 (distinct memories that must pass)")));
    }
    let min_score = g.min_score.unwrap_or(shared.min_score);
    memory::validate_score(f_min, min_score).map_err(rename(f_min, "min_score"))?;
    let nli_min = g.nli_min.unwrap_or(shared.nli_min);
    let verify = match (g.verify.as_deref().or(shared.verify), &g.query) {
        (Some(v), Some(_)) => check_verify(v, nli_min).map_err(rename(f_verify, "verify"))?,
        (None, Some(_)) => check_verify(&default_verify(), nli_min)?,
        (None, None) => Vec::new(),
        (Some(v), None) => {
            let parsed = check_verify(v, nli_min).map_err(rename(f_verify, "verify"))?;
            if let Some(text) = parsed.iter().find(|s| !matches!(s, VerifySpec::Cmd(_) | VerifySpec::None)) {
                return Err(Error::invalid(
                    f_verify,
                    text.name(),
                    at(
                        "verify",
                        "does not apply to a tag-only gate (no query to check the memory's text against): only cmd:COMMAND or none",
                    ),
                ));
            }
            parsed.into_iter().filter(|s| *s != VerifySpec::None).collect()
        }
    };
    Ok(GateDef { query: g.query.clone(), tags, min_score, verify, nli_min, count: count as u32 })
}

/// A memory-gated (or demo) run, checked: the engine runs it as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedLoop {
    pub name: String,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    /// See [`unreachable_bounds`] (none for the demo, whose gate does not wait).
    pub notes: Vec<Note>,
    pub gate: GateSpec,
}

impl TryFrom<LoopParams> for CheckedLoop {
    type Error = Error;

    /// Validates everything and applies the clamps; gate tags are normalised.
    fn try_from(p: LoopParams) -> Result<CheckedLoop> {
        let (limits, clamped) =
            bounds(&p.name, p.gate_min_score, p.max_iterations, p.max_wallclock_s, p.poll_interval_s, p.max_tokens, p.no_progress_window)?;
        let since = p.since.as_deref().map(crate::record::Since::parse).transpose()?;
        let gate_mode = p.gate_mode.unwrap_or_default();
        let shared = Shared { min_score: p.gate_min_score, verify: p.gate_verify.as_deref(), nli_min: p.gate_nli_min };
        let gates = if p.gates.is_empty() {
            let one =
                GateParams { query: p.gate_query, tags: p.gate_tags, min_score: None, verify: None, nli_min: None, count: p.gate_count };
            vec![check_gate(&one, &shared, None)?]
        } else {
            if p.gate_query.is_some() || !p.gate_tags.is_empty() || p.gate_count.is_some() {
                return Err(Error::invalid(
                    "gates",
                    format!("{} gates", p.gates.len()),
                    "cannot be combined with gate_query, gate_tags or gate_count: give each gate's query, tags and count inside gates",
                ));
            }
            if p.gates.len() > MAX_GATES {
                return Err(Error::invalid("gates", format!("{} gates", p.gates.len()), "must hold 1-16 gates"));
            }
            p.gates.iter().enumerate().map(|(i, g)| check_gate(g, &shared, Some(i))).collect::<Result<Vec<_>>>()?
        };
        let plain = gates.len() == 1 && since.is_none() && gates[0].count == 1 && gates[0].query.is_some();
        let gate = if plain {
            // The shape every release reads.
            let g = gates.into_iter().next().expect("one gate");
            GateSpec::Memory { gate_query: g.query.unwrap_or_default(), gate_tags: g.tags, gate_verify: g.verify, gate_nli_min: g.nli_min }
        } else {
            GateSpec::Gates { gates, gate_mode, since }
        };
        let notes = unreachable_bounds(&limits);
        Ok(CheckedLoop { name: p.name, limits, clamped, notes, gate })
    }
}

impl CheckedLoop {
    /// The keyless demo: a stub gate that passes on lap 3, under `iterations` laps.
    pub fn demo(iterations: i64) -> Result<CheckedLoop> {
        // The demo's parameter is `iterations` (CLI and MCP): errors name it, not max_iterations.
        let (limits, clamped) = bounds(super::DEMO_NAME, 1.0, iterations, 10.0, POLL_FLOOR, 0, 0).map_err(|e| match e {
            Error::InvalidInput { field: "max_iterations", value, rule } => Error::InvalidInput { field: "iterations", value, rule },
            e => e,
        })?;
        Ok(CheckedLoop { name: super::DEMO_NAME.into(), limits, clamped, notes: Vec::new(), gate: GateSpec::Stub { passes_on_lap: 3 } })
    }
}

/// Longest gate command accepted, in bytes.
pub const MAX_GATE_CMD: usize = 8192;
/// Longest step note accepted, in characters.
pub const MAX_NOTE: usize = 2000;

/// What `slm loop start` asks for.
#[derive(Debug, Clone)]
pub struct StartParams {
    pub name: String,
    pub gate_cmd: String,
    pub max_iterations: i64,
    pub max_wallclock_s: f64,
    pub max_tokens: i64,
    pub no_progress_window: i64,
    /// Where and with what environment the command will run on every step
    /// ([`capture_gate_env`] takes them from the starting process).
    pub gate_env: GateEnv,
}

/// An agent-driven run, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedStart {
    pub name: String,
    pub gate_cmd: String,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    pub gate_env: GateEnv,
}

/// The variables a command gate keeps from the environment of `slm loop start`, besides
/// every `LC_*` and `SLM_*` one and those named with `--gate-env`: enough for a shell
/// command to find its programs, its home, its locale and its temporary directory.
pub const GATE_ENV_KEEP: [&str; 10] = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM"];

/// The working directory and environment a command gate will run with, taken from this
/// process: the current directory and the variables of [`GATE_ENV_KEEP`], `LC_*`, `SLM_*`
/// (but not an `SLM_STORE` with a password),
/// plus each `extra` entry (`NAME`, whose value is taken from this environment and must be
/// set, or `NAME=VALUE`). Errors name `gate_env`.
pub fn capture_gate_env(extra: &[String]) -> Result<GateEnv> {
    let cwd = std::env::current_dir().map_err(|e| Error::io("cannot read the current directory to record it for the gate", e))?;
    let cwd = cwd.to_str().ok_or_else(|| Error::invalid("gate_cwd", cwd.display(), "must be valid UTF-8"))?.to_string();
    let mut vars = std::collections::BTreeMap::new();
    for (k, v) in std::env::vars_os() {
        let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else { continue };
        // The run record is stored and shown: a store URL carrying a password stays out of it
        // (give it with --gate-env to pass it on knowingly; a passwordless one is kept).
        if k == "SLM_STORE" && crate::storage::pg::redact(v) != v {
            continue;
        }
        if GATE_ENV_KEEP.contains(&k) || k.starts_with("LC_") || k.starts_with("SLM_") {
            vars.insert(k.to_string(), v.to_string());
        }
    }
    for e in extra {
        let (name, value) = match e.split_once('=') {
            Some((n, v)) => (n, v.to_string()),
            None => (e.as_str(), std::env::var(e).map_err(|_| Error::invalid("gate_env", e, "is not set (give NAME=VALUE)"))?),
        };
        let ok_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok_name || value.contains('\0') {
            return Err(Error::invalid("gate_env", e, "must be NAME or NAME=VALUE, NAME of [A-Za-z_][A-Za-z0-9_]*, no NUL"));
        }
        vars.insert(name.to_string(), value);
    }
    Ok(GateEnv { cwd, vars })
}

impl TryFrom<StartParams> for CheckedStart {
    type Error = Error;

    /// The shared bounds plus a non-empty command of at most 8192 bytes without NUL.
    fn try_from(p: StartParams) -> Result<CheckedStart> {
        let (limits, clamped) = bounds(&p.name, 1.0, p.max_iterations, p.max_wallclock_s, POLL_FLOOR, p.max_tokens, p.no_progress_window)?;
        if p.gate_cmd.trim().is_empty() {
            return Err(Error::invalid("gate_cmd", &p.gate_cmd, "must be a non-empty shell command"));
        }
        if p.gate_cmd.len() > MAX_GATE_CMD || p.gate_cmd.contains('\0') {
            return Err(Error::invalid("gate_cmd", &p.gate_cmd, "must be at most 8192 bytes, without NUL"));
        }
        Ok(CheckedStart { name: p.name, gate_cmd: p.gate_cmd, limits, clamped, gate_env: p.gate_env })
    }
}

/// What one `slm loop step` reports besides its run id.
#[derive(Debug, Clone, Default)]
pub struct StepParams {
    /// Tokens the agent spent on this lap's work.
    pub tokens: i64,
    pub note: Option<String>,
}

/// A step's own arguments, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckedStep {
    pub tokens: u64,
    pub note: Option<String>,
}

impl TryFrom<StepParams> for CheckedStep {
    type Error = Error;

    /// Tokens ≥ 0, a note of at most 2000 characters.
    fn try_from(p: StepParams) -> Result<CheckedStep> {
        let tokens = u64::try_from(p.tokens).map_err(|_| Error::invalid("tokens", p.tokens, "must be an integer >= 0"))?;
        if let Some(n) = p.note.as_deref().filter(|n| n.chars().count() > MAX_NOTE) {
            return Err(Error::invalid("note", n, "must be at most 2000 characters"));
        }
        Ok(CheckedStep { tokens, note: p.note })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_clamps() {
        let p = LoopParams::new("ci", "build green");
        let CheckedLoop { limits: l, clamped: c, .. } = p.try_into().unwrap();
        assert_eq!((l.max_iterations, l.max_wallclock_s, l.poll_interval_s), (20, 15.0, 1.0));
        assert!(c.is_empty());
        let mut p = LoopParams::new("ci", "q");
        p.max_iterations = 500;
        p.max_wallclock_s = 1000.0;
        p.poll_interval_s = 0.01;
        let CheckedLoop { limits: l, clamped: c, .. } = p.try_into().unwrap();
        assert_eq!((l.max_iterations, l.max_wallclock_s, l.poll_interval_s), (200, 120.0, 0.25));
        let fields: Vec<_> = c.iter().map(|c| c.field).collect();
        assert_eq!(fields, vec!["max_iterations", "max_wallclock_s", "poll_interval_s"]);
        let mut p = LoopParams::new("ci", "q");
        p.max_wallclock_s = 2.0;
        p.poll_interval_s = 5.0;
        assert_eq!(CheckedLoop::try_from(p).unwrap().limits.poll_interval_s, 2.0);
    }

    #[test]
    fn invalid_values_name_their_field() {
        type Case = (fn(&mut LoopParams), &'static str);
        let cases: Vec<Case> = vec![
            (|p| p.name = "bad name".into(), "name"),
            (|p| p.name = String::new(), "name"),
            (|p| p.gate_query = Some(String::new()), "gate_query"),
            (|p| p.gate_query = None, "gate_query"),
            (|p| p.gate_min_score = f64::NAN, "gate_min_score"),
            (|p| p.gate_min_score = 2.0, "gate_min_score"),
            (|p| p.max_iterations = 0, "max_iterations"),
            (|p| p.max_wallclock_s = f64::INFINITY, "max_wallclock_s"),
            (|p| p.max_wallclock_s = -1.0, "max_wallclock_s"),
            (|p| p.poll_interval_s = f64::NAN, "poll_interval_s"),
            (|p| p.poll_interval_s = 0.0, "poll_interval_s"),
            (|p| p.max_tokens = -1, "max_tokens"),
            (|p| p.no_progress_window = -2, "no_progress_window"),
            (|p| p.gate_tags = vec!["a b".into()], "gate_tags"),
            (|p| p.gate_verify = Some(vec!["regex:x".into()]), "gate_verify"),
            (|p| p.gate_verify = Some(vec![]), "gate_verify"),
            (|p| p.gate_verify = Some(vec!["none".into(), "guard".into()]), "gate_verify"),
            (|p| p.gate_verify = Some(vec!["cmd:".into()]), "gate_verify"),
            (|p| p.gate_verify = Some(vec!["nli:/nonexistent/model".into()]), "gate_verify"),
            (|p| p.gate_count = Some(0), "gate_count"),
            (|p| p.gate_count = Some(1001), "gate_count"),
            (|p| p.since = Some("yesterday".into()), "since"),
            (|p| p.since = Some("2999-01-01T00:00:00Z".into()), "since"),
            (|p| p.since = Some("#-3".into()), "since"),
            (|p| p.since = Some("0m".into()), "since"),
            (|p| p.gates = vec![GateParams { query: Some("a".into()), ..Default::default() }], "gates"),
            (|p| (p.gate_query, p.gates) = (None, vec![GateParams::default()]), "gates"),
            (
                |p| (p.gate_query, p.gates) = (None, vec![GateParams { query: Some("a".into()), count: Some(0), ..Default::default() }]),
                "gates",
            ),
            (|p| (p.gate_query, p.gates) = (None, vec![GateParams { query: Some("a".into()), ..Default::default() }; 17]), "gates"),
            (|p| (p.gate_query, p.gate_tags, p.gate_verify) = (None, vec!["t".into()], Some(vec!["model".into()])), "gate_verify"),
            (|p| p.gate_nli_min = 1.5, "gate_nli_min"),
            (|p| p.gate_nli_min = f64::NAN, "gate_nli_min"),
        ];
        for (f, field) in cases {
            let mut p = LoopParams::new("ok", "q");
            f(&mut p);
            assert_eq!(CheckedLoop::try_from(p).unwrap_err().field(), Some(field));
        }
    }

    #[test]
    fn a_wall_clock_the_laps_cannot_wait_out_is_noted() {
        let notes = |iterations, wallclock, poll| {
            let mut p = LoopParams::new("ci", "q");
            (p.max_iterations, p.max_wallclock_s, p.poll_interval_s) = (iterations, wallclock, poll);
            CheckedLoop::try_from(p).unwrap().notes
        };
        assert!(notes(20, 15.0, 1.0).is_empty(), "the defaults wait 19 s >= 15 s");
        assert!(notes(5, 4.0, 1.0).is_empty(), "4 waits of 1 s fill 4 s exactly");
        let n = notes(20, 60.0, 0.25);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].field, "max_wallclock_s");
        assert!(n[0].message.contains("after about 4.75 s"), "{}", n[0].message);
        // 241 laps would be past the 200 cap: only the poll interval is suggested.
        assert!(n[0].message.ends_with("to wait up to 60 s, use poll_interval_s 3.158"), "{}", n[0].message);
        let n = notes(20, 60.0, 1.0);
        assert!(n[0].message.ends_with("use max_iterations 61 or poll_interval_s 3.158"), "{}", n[0].message);
        // Clamped to 200 laps, 120 s and 0.25 s: the poll interval it would take.
        let n = notes(500, 500.0, 0.1);
        assert!(!n[0].message.contains(" or ") && n[0].message.contains("use poll_interval_s 0.604"), "{}", n[0].message);
        assert!(notes(1, 10.0, 1.0)[0].message.contains("never waits"));
        assert!(CheckedLoop::demo(20).unwrap().notes.is_empty());
    }

    #[test]
    fn start_and_step_are_checked_once() {
        let start = |cmd: &str| StartParams {
            name: "ci".into(),
            gate_cmd: cmd.into(),
            max_iterations: 3,
            max_wallclock_s: 5.0,
            max_tokens: 0,
            no_progress_window: 0,
            gate_env: GateEnv { cwd: "/".into(), vars: Default::default() },
        };
        assert_eq!(CheckedStart::try_from(start("make test")).unwrap().gate_cmd, "make test");
        assert_eq!(CheckedStart::try_from(start("  ")).unwrap_err().field(), Some("gate_cmd"));
        assert_eq!(CheckedStart::try_from(start("a\0b")).unwrap_err().field(), Some("gate_cmd"));
        let step = |tokens, note: Option<&str>| CheckedStep::try_from(StepParams { tokens, note: note.map(str::to_string) });
        assert_eq!(step(5, Some("ok")).unwrap().tokens, 5);
        assert_eq!(step(-1, None).unwrap_err().field(), Some("tokens"));
        assert_eq!(step(0, Some(&"x".repeat(2001))).unwrap_err().field(), Some("note"));
    }
}
