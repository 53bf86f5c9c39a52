//! Agent-driven loops: the gate is a shell command, and each lap is one `slm loop step`.
//!
//! `start` validates the bounds and the command, fixes them in the run's record and returns
//! the run id; the command cannot be changed afterwards. Each `step` runs the command (exit 0
//! = pass) in its own process group, bounded by the run's remaining wall-clock (killed with its
//! group at the deadline), then records the lap under the database write lock, so steps from
//! several processes number their laps one after another and share one set of counters
//! (tokens, stalled laps). After a terminal status every step is refused with that status.
//! The agent reports its tokens; no-progress compares each lap's gate outcome (exit code and
//! an output digest). The engine, not the agent, decides when the loop is done.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::ledger::{lap_tags, lap_text, new_run_id};
use super::params::{self, Clamp, Limits};
use super::run::decide;
use super::Status;
use crate::engine::Engine;
use crate::memory::{now_rfc3339, Kind};
use crate::storage::{LapRow, RunRow, StepWrite};
use crate::{Error, Result};

/// Longest gate command accepted, in bytes.
pub const MAX_GATE_CMD: usize = 8192;
/// Longest note accepted, in characters.
pub const MAX_NOTE: usize = 2000;
/// How much of the gate's output the lap's detail keeps (the tail), in characters.
const DETAIL_TAIL: usize = 240;
/// Output kept in memory while the gate runs (the tail), in bytes.
const OUTPUT_KEEP: usize = 64 * 1024;

/// What `slm loop start` asks for.
#[derive(Debug, Clone)]
pub struct StartParams {
    pub name: String,
    pub gate_cmd: String,
    pub max_iterations: i64,
    pub max_wallclock_s: f64,
    pub max_tokens: i64,
    pub no_progress_window: i64,
}

/// The result of `start`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Started {
    pub ok: bool,
    pub run_id: String,
    pub name: String,
    pub gate_cmd: String,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    /// When the run's wall-clock ends (RFC 3339 UTC).
    pub deadline: String,
}

/// What a run records about its command gate (the `params` JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CommandParams {
    gate: String,
    gate_cmd: String,
    limits: Limits,
    deadline_ms: i64,
}

/// Counters carried between steps (the `state` JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct StepState {
    tokens_used: u64,
    stalled: i64,
    last_digest: Option<String>,
}

/// How one run of the gate command went.
#[derive(Debug, Clone)]
pub struct GateOutcome {
    /// The exit code; None when killed (deadline) or ended by a signal.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Combined stdout and stderr (the last 64 KiB).
    pub output: String,
    pub elapsed: Duration,
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(format!("{:?}/{}/", self.exit_code, self.timed_out));
        h.update(self.output.as_bytes());
        h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    fn detail(&self, note: Option<&str>) -> String {
        let mut d = if self.timed_out {
            format!("gate command killed at the wall-clock deadline after {:.1} s", self.elapsed.as_secs_f64())
        } else {
            match self.exit_code {
                Some(0) => "gate command passed (exit 0)".to_string(),
                Some(c) => format!("gate command failed (exit {c})"),
                None => "gate command was killed by a signal".to_string(),
            }
        };
        let tail: String = self.output.split_whitespace().collect::<Vec<_>>().join(" ");
        if !tail.is_empty() {
            let n = tail.chars().count();
            let tail: String = tail.chars().skip(n.saturating_sub(DETAIL_TAIL)).collect();
            d.push_str(&format!("; output: {}{tail}", if n > DETAIL_TAIL { "…" } else { "" }));
        }
        if let Some(note) = note.filter(|n| !n.is_empty()) {
            d.push_str(&format!("; note: {note}"));
        }
        d
    }
}

/// Runs `cmd` with `sh -c` in a new process group, for at most `limit`. The group is killed
/// (SIGKILL) when the limit passes, and also once the command exits, so nothing it started
/// outlives the lap.
pub fn run_gate(cmd: &str, limit: Duration) -> Result<GateOutcome> {
    use std::os::unix::process::CommandExt;
    let started = Instant::now();
    if limit.is_zero() {
        return Ok(GateOutcome { exit_code: None, timed_out: true, output: String::new(), elapsed: Duration::ZERO });
    }
    let (mut reader, writer) = std::io::pipe().map_err(|e| Error::io("cannot create a pipe for the gate command", e))?;
    let writer2 = writer.try_clone().map_err(|e| Error::io("cannot create a pipe for the gate command", e))?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("cannot start the gate command with sh", e))?;
    let pgid = child.id() as libc::pid_t;
    let collector = std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * OUTPUT_KEEP {
                kept.drain(..kept.len() - OUTPUT_KEEP);
            }
        }
        let start = kept.len().saturating_sub(OUTPUT_KEEP);
        String::from_utf8_lossy(&kept[start..]).into_owned()
    });
    let deadline = started + limit;
    let (status, timed_out) = loop {
        match child.try_wait() {
            Ok(Some(st)) => break (Some(st), false),
            Ok(None) if Instant::now() >= deadline => break (None, true),
            Ok(None) => std::thread::sleep(Duration::from_millis(5).min(deadline - Instant::now())),
            Err(e) => return Err(Error::io("cannot wait for the gate command", e)),
        }
    };
    // SAFETY: kill(2) on the gate's own process group, which we created; no memory is touched.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let status = match status {
        Some(st) => Some(st),
        None => child.wait().ok(),
    };
    let output = collector.join().unwrap_or_default();
    Ok(GateOutcome {
        exit_code: if timed_out { None } else { status.and_then(|s| s.code()) },
        timed_out,
        output,
        elapsed: started.elapsed(),
    })
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Starts an agent-driven run. Nothing is written when the input is invalid.
pub fn start(engine: &Engine, p: &StartParams) -> Result<Started> {
    let (limits, clamped) = check_start(p)?;
    let run_id = new_run_id(&p.name);
    let deadline_ms = now_ms() + (limits.max_wallclock_s * 1000.0).round() as i64;
    let record = CommandParams {
        gate: "command".into(),
        gate_cmd: p.gate_cmd.clone(),
        limits: limits.clone(),
        deadline_ms,
    };
    let row = RunRow {
        run_id: run_id.clone(),
        name: p.name.clone(),
        params: serde_json::to_string(&record).unwrap_or_default(),
        status: "running".into(),
        reason: None,
        laps: 0,
        started_at: now_rfc3339(),
        ended_at: None,
        pid: 0, // not bound to a process: steps may come from anywhere
        proc_start: 0,
        result: None,
        state: Some(serde_json::to_string(&StepState::default()).unwrap_or_default()),
    };
    engine.store().run_start(&row)?;
    let deadline = chrono::DateTime::from_timestamp_millis(deadline_ms)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default();
    Ok(Started { ok: true, run_id, name: p.name.clone(), gate_cmd: p.gate_cmd.clone(), limits, clamped, deadline })
}

/// Validates `start`'s input: the shared bounds plus a non-empty command.
pub fn check_start(p: &StartParams) -> Result<(Limits, Vec<Clamp>)> {
    let (limits, clamped) = params::bounds(
        &p.name,
        1.0,
        p.max_iterations,
        p.max_wallclock_s,
        params::POLL_FLOOR,
        p.max_tokens,
        p.no_progress_window,
    )?;
    if p.gate_cmd.trim().is_empty() {
        return Err(Error::invalid("gate_cmd", &p.gate_cmd, "must be a non-empty shell command"));
    }
    if p.gate_cmd.len() > MAX_GATE_CMD || p.gate_cmd.contains('\0') {
        return Err(Error::invalid("gate_cmd", &p.gate_cmd, "must be at most 8192 bytes, without NUL"));
    }
    Ok((limits, clamped))
}

/// The result of one step.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stepped {
    pub ok: bool,
    pub run_id: String,
    pub name: String,
    pub lap: i64,
    /// `continue`, or the terminal status this lap reached.
    pub decision: String,
    pub passed: bool,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub detail: String,
    /// `running`, or the run's terminal status.
    pub status: String,
    /// A human sentence on why the run ended, when it did.
    pub reason: Option<String>,
    pub budget: serde_json::Value,
    pub ledger_errors: u64,
}

/// Validates a step's own arguments: tokens ≥ 0, a note of at most 2000 characters.
pub fn check_step_args(tokens: i64, note: Option<&str>) -> Result<()> {
    if tokens < 0 {
        return Err(Error::invalid("tokens", tokens, "must be an integer >= 0"));
    }
    match note {
        Some(n) if n.chars().count() > MAX_NOTE => Err(Error::invalid("note", n, "must be at most 2000 characters")),
        _ => Ok(()),
    }
}

/// Runs one lap of an agent-driven run: the gate command, then the engine's decision.
pub fn step(engine: &Engine, run_id: &str, tokens: i64, note: Option<&str>) -> Result<Stepped> {
    check_step_args(tokens, note)?;
    let run = engine.store().run_get(run_id)?.ok_or_else(|| Error::NotFound { what: "run", id: run_id.to_string() })?;
    let cp: CommandParams = serde_json::from_str(&run.params)
        .ok()
        .filter(|c: &CommandParams| c.gate == "command")
        .ok_or_else(|| Error::invalid("run_id", run_id, "is not an agent-driven run (start one with slm loop start)"))?;
    if run.status != "running" {
        return Err(Error::Ended { run_id: run_id.to_string(), status: run.status });
    }
    let remaining = Duration::from_millis((cp.deadline_ms - now_ms()).max(0) as u64);
    let outcome = run_gate(&cp.gate_cmd, remaining)?;
    let detail = outcome.detail(note);
    let digest = outcome.digest();
    let passed = outcome.passed();
    let l = cp.limits.clone();
    let name = run.name.clone();
    let started_ms = chrono::DateTime::parse_from_rfc3339(&run.started_at).map(|d| d.timestamp_millis()).unwrap_or(0);

    let mut store = engine.store();
    let (lap, text, decision, reason, budget, status) = store.step_locked(run_id, |row| {
        if row.status != "running" {
            return Err(Error::Ended { run_id: row.run_id, status: row.status });
        }
        let mut st: StepState = row.state.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        let lap = row.laps + 1;
        let text = lap_text(&name, lap, &detail);
        st.tokens_used += tokens as u64 + engine.embedder().count_tokens(&text)? as u64;
        st.stalled = if st.last_digest.as_deref() == Some(digest.as_str()) { st.stalled + 1 } else { 0 };
        st.last_digest = Some(digest.clone());
        let now = now_ms();
        let status = decide(&l, passed, lap, st.tokens_used, st.stalled, now >= cp.deadline_ms);
        let decision = status.map_or("continue", Status::as_str).to_string();
        let budget = json!({
            "tokens_used": st.tokens_used, "max_tokens": l.max_tokens,
            "elapsed_s": ((now - started_ms) as f64 / 1000.0), "max_wallclock_s": l.max_wallclock_s,
            "laps": lap, "max_iterations": l.max_iterations,
        });
        let reason = status.map(|s| step_reason(s, lap, &detail, &l, st.tokens_used));
        let end = status.map(|s| {
            let result = json!({"status": s.as_str(), "laps": lap, "reason": reason, "budget": budget});
            (s.as_str().to_string(), reason.clone().unwrap_or_default(), result.to_string())
        });
        let write = StepWrite {
            lap: LapRow {
                lap,
                ts: now_rfc3339(),
                decision: decision.clone(),
                passed,
                detail: detail.clone(),
                score: Some(if passed { 1.0 } else { 0.0 }),
                budget: budget.to_string(),
                memory_id: None,
            },
            state: serde_json::to_string(&st).unwrap_or_default(),
            end,
        };
        let status = status.map_or("running", Status::as_str).to_string();
        Ok((write, (lap, text, decision, reason, budget, status)))
    })?;
    drop(store);

    // The ledger memory is written after the lap is decided, outside the write lock, and
    // without its vector: loading the model would cost a step ~100 ms, so a background
    // `slm embed-pending` (started by the CLI) adds it, and recall embeds it on the fly until
    // then. Like every ledger write it is fail-open.
    let mut ledger_errors = 0;
    match engine.insert_pending(Kind::Lap, &[(text.as_str(), lap_tags(&name, run_id))]) {
        Ok(v) => {
            if let Some(m) = v.first() {
                if engine.store().lap_set_memory(run_id, lap, m.id).is_err() {
                    ledger_errors += 1;
                }
            }
        }
        Err(e) => {
            tracing::warn!(run_id, "ledger memory write failed: {e}");
            ledger_errors += 1;
        }
    }
    Ok(Stepped {
        ok: true,
        run_id: run_id.to_string(),
        name,
        lap,
        decision,
        passed,
        exit_code: outcome.exit_code,
        timed_out: outcome.timed_out,
        detail,
        status,
        reason,
        budget,
        ledger_errors,
    })
}

fn step_reason(s: Status, lap: i64, detail: &str, l: &Limits, tokens: u64) -> String {
    match s {
        Status::Converged => format!("the gate command passed on lap {lap}"),
        Status::MaxIterations => format!("stopped after {lap} laps (max_iterations); the gate never passed: {detail}"),
        Status::MaxTokens => format!("stopped on lap {lap}: {tokens} tokens used, limit {}", l.max_tokens),
        Status::NoProgress => {
            format!("stopped on lap {lap}: the gate outcome did not change for {} laps", l.no_progress_window)
        }
        Status::MaxWallclock => format!("stopped on lap {lap}: the {} s wall-clock limit was reached", l.max_wallclock_s),
        Status::Cancelled | Status::Interrupted => format!("{} on lap {lap}", s.as_str()),
    }
}

/// True when an agent-driven run is still `running` but its deadline has passed: its agent
/// stopped stepping. Shown as `max_wallclock` (the status its next step would record).
pub fn expired(row: &RunRow) -> bool {
    row.status == "running"
        && serde_json::from_str::<CommandParams>(&row.params)
            .is_ok_and(|c| c.gate == "command" && now_ms() > c.deadline_ms)
}

/// True when a stored run is agent-driven.
pub fn is_command_run(row: &RunRow) -> bool {
    serde_json::from_str::<CommandParams>(&row.params).is_ok_and(|c| c.gate == "command")
}
