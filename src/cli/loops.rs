//! `slm loop ...`: the bounded-loop commands. Thin: parse, call [`slm::loops`], print.
//!
//! Exit codes for commands that run a loop: 0 converged, 3 ended on a bound, 130 cancelled
//! (Ctrl-C here, or `slm loop cancel` from elsewhere).

use std::sync::Arc;

use clap::Subcommand;
use serde_json::json;

use slm::engine::Engine;
use slm::loops::params::{CheckedStart, CheckedStep, StartParams, StepParams};
use slm::loops::{self, command, Cancel, CheckedLoop, LapEvent, LoopParams, RunResult};
use slm::record::RunStatus;

/// Exit code when a run ended on a bound.
pub const EXIT_BOUND: i32 = 3;
/// Exit code when a run was cancelled.
pub const EXIT_CANCELLED: i32 = 130;

/// `--help` of the commands that run a loop.
const RUN_EXIT_HELP: &str = "Exit codes: 0 converged; 3 a bound ended the run (max_iterations, max_wallclock, \
max_tokens, no_progress); 130 cancelled (Ctrl-C, or `slm loop cancel` from elsewhere); 2 invalid input; 1 operational failure \
(a lap that fails ends its run with status error).";
/// `slm loop step --help`.
const STEP_EXIT_HELP: &str = "Exit codes: 0 the loop goes on, or converged; 3 a bound ended it; 130 it was cancelled; \
1 refused (the run already ended: the message names its final status) or not found; 2 invalid input.";
/// `--help` of the other loop commands.
const PLAIN_EXIT_HELP: &str = "Exit codes: 0 ok; 1 not found or operational failure; 2 invalid input.";

#[derive(Subcommand, Debug)]
pub enum LoopCommand {
    /// Keyless convergence demo: a stub gate fails laps 1-2 and passes lap 3.
    #[command(after_help = RUN_EXIT_HELP)]
    Demo {
        /// Lap limit (2 shows a max_iterations stop).
        #[arg(long, default_value_t = 20, allow_hyphen_values = true)]
        iterations: i64,
    },
    /// Block until a memory matching the gate query scores >= the threshold, under bounds.
    #[command(after_help = RUN_EXIT_HELP)]
    Run(RunArgs),
    /// Start an agent-driven loop whose gate is a shell command (exit 0 = pass); prints the run id.
    #[command(after_help = PLAIN_EXIT_HELP)]
    Start {
        /// Loop name: 1-128 characters of [A-Za-z0-9._:-].
        #[arg(long)]
        name: String,
        /// The gate: run with `sh -c` on every step; fixed for the whole run, as are the directory
        /// it runs in (this one) and its environment (PATH, HOME, USER, LOGNAME, SHELL, LANG,
        /// LANGUAGE, TZ, TMPDIR, TERM, LC_*, SLM_* from this process, plus --gate-env).
        #[arg(long, allow_hyphen_values = true)]
        gate_cmd: String,
        /// Also give the gate this variable: NAME (its value here) or NAME=VALUE; repeatable.
        #[arg(long = "gate-env", value_name = "NAME[=VALUE]")]
        gate_env: Vec<String>,
        /// At most this many laps (>= 1; above 200 is clamped).
        #[arg(long, default_value_t = 20, allow_hyphen_values = true)]
        max_iterations: i64,
        /// At most this many seconds from start (> 0; above 120 is clamped).
        #[arg(long, default_value_t = 15.0, allow_hyphen_values = true)]
        max_wallclock_s: f64,
        /// Stop once the tokens reported by steps (plus ledger text) reach this (0 = unlimited).
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        max_tokens: i64,
        /// Stop when the gate outcome (exit code and output) repeats for this many laps (0 = off).
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        no_progress_window: i64,
    },
    /// One lap of an agent-driven loop: run its gate command and let the engine decide.
    #[command(after_help = STEP_EXIT_HELP)]
    Step {
        run_id: String,
        /// Tokens the agent spent on this lap's work (counted against max_tokens).
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        tokens: i64,
        /// A short note recorded with the lap.
        #[arg(long)]
        note: Option<String>,
    },
    /// Runs newest first, of one loop or of all.
    History {
        #[arg(long)]
        name: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// A run's laps.
    #[command(after_help = PLAIN_EXIT_HELP)]
    Show {
        run_id: String,
        #[arg(long, default_value_t = 200)]
        limit: usize,
    },
    /// Ask a running loop (in any process) to stop.
    #[command(after_help = PLAIN_EXIT_HELP)]
    Cancel { run_id: String },
}

/// The flags of `slm loop run`: the MCP tool's arguments, as flags.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Loop name: 1-128 characters of [A-Za-z0-9._:-].
    #[arg(long)]
    name: String,
    /// What the awaited memory says (1-2000 characters); embedded once. Repeat it for several
    /// gates sharing the other gate flags (joined by --gate-mode); leave it out, with
    /// --gate-tag, for a tag-only gate (no model).
    #[arg(long = "gate-query", value_name = "TEXT")]
    gate_query: Vec<String>,
    /// How many distinct memories must pass each gate (1-1000): a barrier for N writers.
    #[arg(long, allow_hyphen_values = true, value_name = "N")]
    gate_count: Option<i64>,
    /// How several gates combine: all (every gate must pass) or any.
    #[arg(long, value_name = "all|any")]
    gate_mode: Option<String>,
    /// The gates as JSON: an array of {"query", "tags", "min_score", "verify", "nli_min",
    /// "count"} objects (unset keys take the flags' values), or @FILE to read it from a file.
    /// Not with --gate-query, --gate-tag or --gate-count.
    #[arg(long, value_name = "JSON|@FILE")]
    gates: Option<String>,
    /// Only memories written after this count: start (this run's start), last (the memory
    /// that ended this loop's last converged run), #ID, an RFC 3339 time, or a duration
    /// (15m: at most that long before the start).
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
    since: Option<String>,
    /// Pass when the best exact cosine is >= this, in [-1, 1].
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    gate_min_score: f64,
    /// At most this many laps (>= 1; above 200 is clamped).
    #[arg(long, default_value_t = 20, allow_hyphen_values = true)]
    max_iterations: i64,
    /// At most this many seconds (> 0; above 120 is clamped).
    #[arg(long, default_value_t = 15.0, allow_hyphen_values = true)]
    max_wallclock_s: f64,
    /// Seconds between laps (> 0; clamped to [0.25, max_wallclock_s]).
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    poll_interval_s: f64,
    /// Stop once this many tokens are used (0 = unlimited).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    max_tokens: i64,
    /// Stop when the gate observation is unchanged for this many laps (0 = off).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    no_progress_window: i64,
    /// Only memories carrying every one of these tags are eligible.
    #[arg(long = "gate-tag", value_name = "TAG")]
    gate_tags: Vec<String>,
    /// A verifier every candidate must pass: model, guard, guard:identifier, guard:entities, none, nli:DIR, cmd:COMMAND; repeatable. Default: guard:entities then model.
    #[arg(long = "gate-verify", value_name = "SPEC")]
    gate_verify: Vec<String>,
    /// Entailment probability an nli: verifier needs, in [0, 1].
    #[arg(long, default_value_t = slm::record::DEFAULT_NLI_MIN, allow_hyphen_values = true)]
    gate_nli_min: f64,
}

impl TryFrom<RunArgs> for LoopParams {
    type Error = slm::Error;

    /// One --gate-query is the one-gate shorthand; several are one gate each, sharing the
    /// other gate flags; --gates is the JSON form.
    fn try_from(a: RunArgs) -> slm::Result<LoopParams> {
        let gate_mode = match a.gate_mode.as_deref() {
            None => None,
            Some("all") => Some(slm::record::GateMode::All),
            Some("any") => Some(slm::record::GateMode::Any),
            Some(other) => return Err(slm::Error::invalid("gate_mode", other, "must be all or any")),
        };
        let mut gates: Vec<loops::params::GateParams> = match &a.gates {
            None => Vec::new(),
            Some(text) => {
                if !a.gate_query.is_empty() || !a.gate_tags.is_empty() || a.gate_count.is_some() {
                    return Err(slm::Error::invalid(
                        "gates",
                        text,
                        "cannot be combined with --gate-query, --gate-tag or --gate-count: give each gate's query, tags and count inside the JSON",
                    ));
                }
                let json = match text.strip_prefix('@') {
                    Some(path) => std::fs::read_to_string(path)
                        .map_err(|e| slm::Error::invalid("gates", text, format!("cannot read the file: {e}")))?,
                    None => text.clone(),
                };
                let gates: Vec<loops::params::GateParams> = serde_json::from_str(&json).map_err(|e| {
                    slm::Error::invalid(
                        "gates",
                        text,
                        format!("must be a JSON array of gate objects (query, tags, min_score, verify, nli_min, count): {e}"),
                    )
                })?;
                if gates.is_empty() {
                    return Err(slm::Error::invalid("gates", text, "must hold 1-16 gates"));
                }
                gates
            }
        };
        let (gate_query, gate_tags, gate_count) = if a.gate_query.len() > 1 {
            gates = a
                .gate_query
                .iter()
                .map(|q| loops::params::GateParams {
                    query: Some(q.clone()),
                    tags: a.gate_tags.clone(),
                    count: a.gate_count,
                    ..Default::default()
                })
                .collect();
            (None, Vec::new(), None)
        } else {
            (a.gate_query.into_iter().next(), a.gate_tags, a.gate_count)
        };
        Ok(LoopParams {
            name: a.name,
            gate_query,
            gate_min_score: a.gate_min_score,
            max_iterations: a.max_iterations,
            max_wallclock_s: a.max_wallclock_s,
            poll_interval_s: a.poll_interval_s,
            max_tokens: a.max_tokens,
            no_progress_window: a.no_progress_window,
            gate_tags,
            // No flag means the default chain, as the MCP tool's default does.
            gate_verify: if a.gate_verify.is_empty() { None } else { Some(a.gate_verify) },
            gate_nli_min: a.gate_nli_min,
            gate_count,
            gates,
            gate_mode,
            since: a.since,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum GateCommand {
    /// Would the gate pass on this memory? Scores it like a lap and shows every verifier's
    /// verdict. Exit 0: it would pass; 3: it would not.
    Check(GateCheckArgs),
    /// Measure the gate on a TSV of labelled pairs (header: query, memory, label or
    /// should_pass, optional category): right / false passes / false blocks per threshold
    /// and category. Reads no data root.
    Eval(GateEvalArgs),
}

#[derive(clap::Args, Debug)]
pub struct GateEvalArgs {
    /// The TSV file (`-` = stdin).
    file: std::path::PathBuf,
    /// A gate threshold, in [-1, 1]; repeatable. Default: 0.3, 0.4 and 0.5.
    #[arg(long, allow_hyphen_values = true)]
    gate_min_score: Vec<f64>,
    /// A verifier; repeatable (all must accept). Default: the default chain.
    #[arg(long = "gate-verify", value_name = "SPEC")]
    gate_verify: Vec<String>,
    /// Entailment probability an nli: verifier needs, in [0, 1].
    #[arg(long, default_value_t = slm::record::DEFAULT_NLI_MIN, allow_hyphen_values = true)]
    gate_nli_min: f64,
    /// The probability the `model` verifier needs, in [0, 1], to measure another operating
    /// point than the shipped one (config.json's `slm_min_probability`); loops always use
    /// the shipped one.
    #[arg(long, allow_hyphen_values = true)]
    model_min: Option<f64>,
    /// List the pairs decided wrongly at the first threshold.
    #[arg(long)]
    errors: bool,
}

/// `slm gate eval`: reads and checks the file and flags (exit 2 naming the line and field),
/// then prints the table. Exit 0 whatever the figures.
pub fn gate_eval(a: GateEvalArgs, json_out: bool) -> slm::Result<i32> {
    use slm::loops::eval;
    let thresholds = if a.gate_min_score.is_empty() { vec![0.3, 0.4, 0.5] } else { a.gate_min_score };
    for &t in &thresholds {
        slm::memory::validate_score("gate_min_score", t)?;
    }
    let verify = if a.gate_verify.is_empty() { loops::params::default_verify() } else { a.gate_verify };
    let specs = loops::params::check_verify(&verify, a.gate_nli_min)?;
    if specs.iter().any(|s| matches!(s, slm::record::VerifySpec::Cmd(_))) {
        return Err(slm::Error::invalid("gate_verify", verify.join(","), "gate eval runs no shell commands (cmd:)"));
    }
    let text = if a.file.as_os_str() == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(&a.file) }
        .map_err(|e| slm::Error::invalid("file", a.file.display(), format!("cannot be read as UTF-8 text: {e}")))?;
    let pairs = eval::parse_tsv(&text)?;
    if let Some(p) = a.model_min {
        if !(0.0..=1.0).contains(&p) {
            return Err(slm::Error::invalid("model_min", p, "must be a probability in [0, 1]"));
        }
        slm::loops::verify::model::measure_at(p as f32);
    }
    let embedder = slm::embed::OnnxEmbedder::locate();
    let r = eval::gate_eval(&embedder, &pairs, &thresholds, &specs, a.gate_nli_min)?;
    if json_out {
        println!("{}", json!(r));
        return Ok(0);
    }
    println!("{} pairs, verifiers: {}", r.pairs, if r.verifiers.is_empty() { "none".into() } else { r.verifiers.join(", ") });
    for t in &r.thresholds {
        let c = &t.all;
        println!(
            "\ngate_min_score {:.2}: right {}/{} ({:.1} %), false passes {}/{} near misses, false blocks {}/{} true signals ({} below the threshold)",
            t.gate_min_score,
            c.right,
            c.pairs,
            100.0 * c.right as f64 / c.pairs.max(1) as f64,
            c.false_passes,
            c.near_misses,
            c.false_blocks,
            c.true_signals,
            c.below_threshold
        );
        println!("  {:<18} {:>9} {:>12} {:>12}", "category", "right", "false pass", "false block");
        for (name, c) in &t.per_category {
            println!(
                "  {:<18} {:>9} {:>12} {:>12}",
                name,
                format!("{}/{}", c.right, c.pairs),
                format!("{}/{}", c.false_passes, c.near_misses),
                format!("{}/{}", c.false_blocks, c.true_signals)
            );
        }
    }
    if a.errors {
        println!("\nwrong at gate_min_score {:.2}:", thresholds[0]);
        for e in &r.errors {
            println!(
                "  line {} [{}] should {}: score {:.3}, {}\n    query: {}\n    memory: {}",
                e.line,
                e.category,
                if e.should_pass { "pass" } else { "block" },
                e.score,
                e.refused_by.as_deref().unwrap_or("every verifier accepted"),
                e.query,
                e.memory
            );
        }
    }
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct GateCheckArgs {
    /// The gate query.
    #[arg(long)]
    query: String,
    /// The memory text to check.
    #[arg(long, conflicts_with = "id", required_unless_present = "id")]
    memory: Option<String>,
    /// A stored memory to check, by id.
    #[arg(long)]
    id: Option<i64>,
    /// The gate threshold, in [-1, 1].
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    gate_min_score: f64,
    /// A verifier (model, guard, guard:identifier, guard:entities, none, nli:DIR, cmd:COMMAND); repeatable. Default: guard:entities then model.
    #[arg(long = "gate-verify", value_name = "SPEC")]
    gate_verify: Vec<String>,
    /// Entailment probability an nli: verifier needs, in [0, 1].
    #[arg(long, default_value_t = slm::record::DEFAULT_NLI_MIN, allow_hyphen_values = true)]
    gate_nli_min: f64,
}

impl GateCheckArgs {
    pub fn request(self) -> slm::loops::explain::CheckRequest {
        slm::loops::explain::CheckRequest {
            query: self.query,
            memory: self.memory,
            id: self.id,
            gate_min_score: self.gate_min_score,
            gate_verify: if self.gate_verify.is_empty() { loops::params::default_verify() } else { self.gate_verify },
            gate_nli_min: self.gate_nli_min,
        }
    }
}

/// `slm gate check`: prints the explanation; exit 0 when the gate would pass, 3 when not.
pub fn gate_check(engine: &Engine, req: &slm::loops::explain::CheckRequest, json_out: bool) -> slm::Result<i32> {
    let c = slm::loops::explain::gate_check(engine, req)?;
    if json_out {
        println!("{}", json!(c));
    } else {
        println!("{}: {}", if c.passed { "passes" } else { "blocked" }, c.reason);
        println!("score {:.3}, threshold {:.3}", c.score, c.threshold);
        for v in &c.verifiers {
            match (&v.rule, &v.reason) {
                (Some(rule), Some(reason)) => println!("{}: rejects: {reason} ({rule})", v.verifier),
                _ => println!("{}: accepts", v.verifier),
            }
        }
    }
    Ok(if c.passed { 0 } else { EXIT_BOUND })
}

/// A loop command whose input has been checked, once, before the data root is touched.
pub enum Checked {
    /// A memory-gated run or the demo.
    Run(CheckedLoop),
    Start(CheckedStart),
    Step {
        run_id: String,
        step: CheckedStep,
    },
    History {
        name: Option<String>,
        limit: usize,
    },
    Show {
        run_id: String,
        limit: usize,
    },
    Cancel {
        run_id: String,
    },
}

impl LoopCommand {
    /// Validates everything that can be validated without a data root: nothing is written
    /// for invalid input, and the engine gets values it does not check again.
    pub fn check(self) -> slm::Result<Checked> {
        Ok(match self {
            LoopCommand::Demo { iterations } => Checked::Run(CheckedLoop::demo(iterations)?),
            LoopCommand::Run(args) => Checked::Run(CheckedLoop::try_from(LoopParams::try_from(args)?)?),
            LoopCommand::Start { name, gate_cmd, gate_env, max_iterations, max_wallclock_s, max_tokens, no_progress_window } => {
                Checked::Start(CheckedStart::try_from(StartParams {
                    name,
                    gate_cmd,
                    max_iterations,
                    max_wallclock_s,
                    max_tokens,
                    no_progress_window,
                    gate_env: loops::params::capture_gate_env(&gate_env)?,
                })?)
            }
            LoopCommand::Step { run_id, tokens, note } => {
                Checked::Step { run_id, step: CheckedStep::try_from(StepParams { tokens, note })? }
            }
            LoopCommand::History { name, limit } => {
                if let Some(n) = &name {
                    loops::params::validate_name(n)?;
                }
                Checked::History { name, limit }
            }
            LoopCommand::Show { run_id, limit } => Checked::Show { run_id, limit },
            LoopCommand::Cancel { run_id } => Checked::Cancel { run_id },
        })
    }
}

/// A cancel flag raised by Ctrl-C.
fn ctrl_c() -> Arc<Cancel> {
    let cancel = Arc::new(Cancel::default());
    let c = Arc::clone(&cancel);
    // If a handler cannot be installed, Ctrl-C simply kills the process (the run then shows
    // as interrupted): not worth failing the command for.
    let _ = ctrlc::set_handler(move || c.request());
    cancel
}

pub fn dispatch(engine: &Arc<Engine>, cmd: Checked, json_out: bool) -> slm::Result<i32> {
    // The loop runtime, for the commands that run laps (it writes their ledger).
    let host = || loops::LoopHost::new(Arc::clone(engine));
    match cmd {
        Checked::Run(spec) => {
            // Said before the wait, once: why a long wall-clock will end early.
            for n in &spec.notes {
                eprintln!("slm: note: {}", n.message);
            }
            let cancel = ctrl_c();
            let host = host();
            let r = loops::run_memory_loop(&host, &spec, &cancel, &mut |e| print_lap(e, json_out))?;
            let code = finish(&r, json_out);
            // Its ledger laps were stored without vectors: embed them off the waiting path. (Not
            // for the demo: it must stay instant, and recall embeds its three laps on the fly.)
            if matches!(spec.gate, slm::record::GateSpec::Memory { .. } | slm::record::GateSpec::Gates { .. }) {
                // The writer derives the laps' memories as it closes: before the backfill
                // process looks for rows to embed.
                host.flush_ledger();
                // A process that loaded the model for its gates starts the backfill at once;
                // one that never did (tag-only gates) would load it only for its own lap
                // memories, so it leaves them to the next process that embeds until a batch
                // is waiting (recall embeds pending rows on the fly meanwhile).
                if engine.model_loaded() || engine.pending_at_least(LAZY_BACKFILL_ROWS).unwrap_or(true) {
                    spawn_backfill(engine);
                }
            }
            Ok(code)
        }
        Checked::Start(p) => {
            let host = host();
            let st = command::start(&host, &p)?;
            host.flush_ledger();
            if json_out {
                println!("{}", json!(st));
            } else {
                println!("{}", st.run_id);
                let l = &st.limits;
                println!(
                    "bounds: max_iterations {}, max_wallclock_s {} (until {}), max_tokens {}, no_progress_window {}",
                    l.max_iterations, l.max_wallclock_s, st.deadline, l.max_tokens, l.no_progress_window
                );
                for c in &st.clamped {
                    println!("clamped: {} {} -> {}", c.field, c.requested, c.applied);
                }
                print_gate_env(&st.gate_env);
            }
            Ok(0)
        }
        Checked::Step { run_id, step } => {
            let host = host();
            let s = command::step(&host, &run_id, &step)?;
            host.flush_ledger();
            spawn_backfill(engine);
            if json_out {
                println!("{}", json!(s));
            } else {
                println!("lap {}: {}", s.lap, s.decision);
                println!("{}", s.detail);
                match &s.reason {
                    Some(r) => println!("the loop is over ({}): {r}", s.status),
                    None => println!("the loop goes on: do the next piece of work, then step again"),
                }
            }
            Ok(match s.status {
                RunStatus::Running | RunStatus::Converged => 0,
                RunStatus::Cancelled => EXIT_CANCELLED,
                _ => EXIT_BOUND,
            })
        }
        Checked::History { name, limit } => {
            let h = loops::history(engine, name.as_deref(), limit)?;
            if json_out {
                println!("{}", json!(h));
            } else if h.runs.is_empty() {
                println!("no runs");
            } else {
                let rows: Vec<Vec<String>> = h
                    .runs
                    .iter()
                    .map(|r| {
                        vec![
                            r.run_id.clone(),
                            r.final_status.to_string(),
                            r.laps.to_string(),
                            super::output::short_time(&r.ts),
                            r.reason.clone().unwrap_or_default(),
                        ]
                    })
                    .collect();
                super::output::table(&["RUN", "STATUS", "LAPS", "STARTED", "REASON"], &rows);
            }
            Ok(0)
        }
        Checked::Show { run_id, limit } => {
            let s = loops::show(engine, &run_id, limit)?;
            if json_out {
                println!("{}", json!(s));
            } else {
                match &s.reason {
                    Some(r) => println!("run {} (loop {}): {} ({r})", s.run_id, s.name, s.status),
                    None => println!("run {} (loop {}): {}", s.run_id, s.name, s.status),
                }
                if let Some(cmd) = &s.gate_cmd {
                    println!("gate command: {cmd}");
                }
                if let Some(env) = &s.gate_env {
                    print_gate_env(env);
                }
                let rows: Vec<Vec<String>> = s
                    .laps
                    .iter()
                    .map(|l| {
                        vec![
                            l.lap.to_string(),
                            l.decision.clone(),
                            if l.passed { "yes" } else { "no" }.to_string(),
                            l.score.map_or("-".into(), |s| format!("{s:.3}")),
                            l.detail.clone(),
                        ]
                    })
                    .collect();
                super::output::table(&["LAP", "DECISION", "PASSED", "SCORE", "DETAIL"], &rows);
            }
            Ok(0)
        }
        Checked::Cancel { run_id } => {
            let c = loops::cancel(engine, &run_id)?;
            if json_out {
                println!("{}", json!(c));
            } else if c.requested {
                println!("asked run {} to stop", c.run_id);
            } else {
                println!("run {} is not running ({})", c.run_id, c.status);
            }
            Ok(0)
        }
    }
}

/// Rows left without a vector before a `loop run` that never loaded the model starts a
/// backfill for them: one embedding batch, so what recall embeds on the fly stays one batch
/// and an agent polling tag-only gates does not load the model once per run.
const LAZY_BACKFILL_ROWS: usize = 64;

/// Starts `slm embed-pending` in the background, detached, to add the vectors of the ledger
/// memories this step stored without one. Best effort: if it cannot start, recall still
/// embeds those rows on the fly.
fn spawn_backfill(engine: &Engine) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else { return };
    let mut child = std::process::Command::new(exe);
    // The same store, whether it came from SLM_STORE or --store (in the environment, where
    // `ps` does not show a password).
    match engine.data_root_store() {
        Some(url) => child.env("SLM_STORE", url.for_child_env()),
        None => child.env_remove("SLM_STORE"),
    };
    let _ = child
        .arg("--data-dir")
        .arg(engine.data_dir())
        .arg("embed-pending")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
}

/// The recorded directory and environment of a command gate, one variable a line.
fn print_gate_env(env: &slm::record::GateEnv) {
    println!("gate runs in {} with exactly this environment:", env.cwd);
    for (k, v) in &env.vars {
        println!("  {k}={v}");
    }
}

fn print_lap(e: &LapEvent, json_out: bool) {
    if !json_out {
        println!("lap {:>3}  {:<14}  {}", e.lap, e.decision, e.detail);
    }
}

/// `match #12 (0.912, verified by guard:entities, model): the text`; a tag-only gate's
/// memories have no score.
fn print_match(indent: &str, m: &slm::loops::Match, tag_only: bool) {
    let by = if !m.verified_by.is_empty() {
        m.verified_by.join(", ")
    } else if tag_only {
        "its tags".to_string()
    } else {
        "plain cosine".to_string()
    };
    if tag_only {
        println!("{indent}match #{} (verified by {by}): {}", m.hit.id, m.hit.content);
    } else {
        println!("{indent}match #{} ({:.3}, verified by {by}): {}", m.hit.id, m.hit.score, m.hit.content);
    }
}

fn finish(r: &RunResult, json_out: bool) -> i32 {
    if json_out {
        println!("{}", json!(r));
    } else {
        println!("{}: {} ({} laps, run {})", r.status.as_str(), r.reason, r.laps, r.run_id);
        let several = r.matches.len() > 1 || r.matches.iter().any(|g| g.count > 1);
        if several {
            // Every gate's memories: what the orchestrator waited for, one line each.
            for g in &r.matches {
                let what = g.query.as_deref().map_or_else(|| format!("tags {}", g.tags.join(",")), |q| format!("{q:?}"));
                println!("gate {} {what}: {} of {} memories{}", g.gate, g.memories.len(), g.count, if g.passed { ", passed" } else { "" });
                for m in &g.memories {
                    print_match("  ", m, g.query.is_none());
                }
            }
        } else if let Some(m) = &r.matched {
            print_match("", m, r.matches.first().is_some_and(|g| g.query.is_none()));
        }
        if r.termination.ledger_errors > 0 {
            eprintln!("slm: warning: {} ledger writes failed", r.termination.ledger_errors);
        }
    }
    match r.status {
        RunStatus::Converged => 0,
        RunStatus::Cancelled => EXIT_CANCELLED,
        _ => EXIT_BOUND,
    }
}
