//! The typed record of a loop run, as the store keeps it and the loop engine reads it.
//!
//! A run's status is a [`RunStatus`], its gate a serde-tagged [`GateSpec`] and its applied
//! bounds [`Limits`]; [`RunParams`] is what the `params` column holds. They live here, below
//! both [`crate::storage`] and [`crate::loops`], so the store can hand out typed rows without
//! knowing anything about how loops run, and nothing parses a status or a gate kind from a
//! string twice. A row that does not parse is an error naming the run, never a silent default.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Where a run is: still `running`, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Not ended yet (stored); shown as `interrupted` when its process died.
    Running,
    Converged,
    MaxIterations,
    MaxWallclock,
    MaxTokens,
    NoProgress,
    Cancelled,
    /// A lap failed with an internal error (a database or I/O failure, a damaged row): the
    /// run could not go on. Its reason names the error.
    Error,
    /// Shown for a `running` run whose process died; never stored, never returned by a run.
    Interrupted,
}

impl RunStatus {
    /// Every status, for parsing.
    const ALL: [RunStatus; 9] = [
        RunStatus::Running,
        RunStatus::Converged,
        RunStatus::MaxIterations,
        RunStatus::MaxWallclock,
        RunStatus::MaxTokens,
        RunStatus::NoProgress,
        RunStatus::Cancelled,
        RunStatus::Error,
        RunStatus::Interrupted,
    ];

    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Converged => "converged",
            RunStatus::MaxIterations => "max_iterations",
            RunStatus::MaxWallclock => "max_wallclock",
            RunStatus::MaxTokens => "max_tokens",
            RunStatus::NoProgress => "no_progress",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Error => "error",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// Parses a stored status.
    pub fn parse(s: &str) -> Result<RunStatus> {
        Self::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| Error::Corrupt(format!("unknown run status {s:?}")))
    }

    /// True for every status but `running`.
    pub fn is_terminal(self) -> bool {
        self != RunStatus::Running
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bounds a run actually uses, after clamping.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Limits {
    pub max_iterations: i64,
    pub max_wallclock_s: f64,
    pub poll_interval_s: f64,
    /// 0 = unlimited.
    pub max_tokens: i64,
    /// 0 = disabled.
    pub no_progress_window: i64,
    pub gate_min_score: f64,
}

impl Limits {
    /// The gate threshold as the scores are computed (f32), converted in one place.
    pub fn threshold(&self) -> f32 {
        self.gate_min_score as f32
    }
}

/// What decides a run's laps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "gate", rename_all = "snake_case")]
pub enum GateSpec {
    /// The memory gate: candidates by exact cosine, then the verifier chain.
    Memory {
        gate_query: String,
        #[serde(default)]
        gate_tags: Vec<String>,
        /// Every candidate must pass all of these (runs of the first release had none: plain
        /// cosine, which is what an empty list means when read back).
        #[serde(default)]
        gate_verify: Vec<VerifySpec>,
        /// Entailment probability an `nli:` verifier needs.
        #[serde(default = "default_nli_min")]
        gate_nli_min: f64,
    },
    /// An agent-driven run: a shell command run on each `slm loop step`.
    Command {
        gate_cmd: String,
        /// When the run's wall-clock ends (Unix milliseconds).
        deadline_ms: i64,
        /// The working directory and environment recorded at `loop start`, which every step
        /// runs the command with. Absent only in rows written before they were recorded (such
        /// a run's wall-clock, at most 120 s, has long passed: its next step only ends it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gate_env: Option<GateEnv>,
    },
    /// Memory gates with what one `memory` gate cannot say: several gates joined by
    /// `gate_mode`, a `count` of distinct memories per gate, gates on tags alone, and
    /// `since`. A run that uses none of these is stored as `memory` (the shape every
    /// release reads).
    Gates {
        gates: Vec<GateDef>,
        #[serde(default)]
        gate_mode: GateMode,
        /// Which memories are eligible by when they were written (`None`: all of them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<Since>,
    },
    /// The keyless demo's gate: fails before lap `passes_on_lap`, passes from it on.
    Stub { passes_on_lap: i64 },
}

/// One gate of a [`GateSpec::Gates`] run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateDef {
    /// What the awaited memory says; `None`: a tag-only gate (every eligible memory carrying
    /// all of `tags` passes, unscored, with no model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The exact cosine a candidate needs (unused by a tag-only gate).
    pub min_score: f64,
    #[serde(default)]
    pub verify: Vec<VerifySpec>,
    #[serde(default = "default_nli_min")]
    pub nli_min: f64,
    /// How many distinct memories must pass this gate (a barrier for N writers).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// How a run's gates combine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateMode {
    /// Every gate must pass (the default).
    #[default]
    All,
    /// One gate passing is enough.
    Any,
}

impl GateMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GateMode::All => "all",
            GateMode::Any => "any",
        }
    }
}

/// `since`: which memories a run may count, by when they were written. Stored as the user
/// wrote it (normalised); resolved to an id watermark when the run starts
/// ([`crate::loops::since`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Since {
    /// Written after the run started.
    Start,
    /// Written after the memory that ended the most recent converged run of the same name.
    Last,
    /// Written after this memory (`#1234`).
    After(i64),
    /// Written at or after this time (RFC 3339, UTC as stored).
    Time(String),
    /// Written at most this many seconds before the run started (`15m`, `2h`, `90s`).
    Within(u64),
}

impl Since {
    /// Parses `start`, `last`, `#ID`, an RFC 3339 time or a duration (`90s`, `15m`, `2h`,
    /// `1d`); anything else, a time in the future, or a zero duration is invalid input
    /// naming `since`.
    pub fn parse(s: &str) -> Result<Since> {
        let rule = "must be start, last, #ID (a memory id), an RFC 3339 time, or a duration such as 90s, 15m, 2h, 1d";
        let t = s.trim();
        if t == "start" {
            return Ok(Since::Start);
        }
        if t == "last" {
            return Ok(Since::Last);
        }
        if let Some(id) = t.strip_prefix('#') {
            return match id.parse::<i64>() {
                Ok(n) if n >= 0 => Ok(Since::After(n)),
                _ => Err(Error::invalid("since", s, "#ID needs a memory id, an integer >= 0")),
            };
        }
        if let Ok(at) = chrono::DateTime::parse_from_rfc3339(t) {
            let at = at.with_timezone(&chrono::Utc);
            if at > chrono::Utc::now() {
                return Err(Error::invalid("since", s, "is in the future: no memory has been written after it yet"));
            }
            return Ok(Since::Time(at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)));
        }
        if let Some(secs) = parse_duration(t) {
            return if secs == 0 { Err(Error::invalid("since", s, "a duration must be longer than 0")) } else { Ok(Since::Within(secs)) };
        }
        Err(Error::invalid("since", s, rule))
    }

    /// The form shown in details: `start`, `last`, `#12`, the time, `15m`.
    pub fn label(&self) -> String {
        String::from(self.clone())
    }
}

/// A duration such as `90s`, `15m`, `2h`, `1d` (one integer and one unit), in seconds.
pub fn parse_duration(s: &str) -> Option<u64> {
    let unit = s.chars().last()?;
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let n: u64 = s[..s.len() - 1].parse().ok()?;
    n.checked_mul(mult)
}

impl TryFrom<String> for Since {
    type Error = Error;
    fn try_from(s: String) -> Result<Since> {
        // A stored time was in the past when stored: read it back without the future check.
        match chrono::DateTime::parse_from_rfc3339(s.trim()) {
            Ok(at) => Ok(Since::Time(at.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Micros, true))),
            Err(_) => Since::parse(&s),
        }
    }
}

impl From<Since> for String {
    fn from(s: Since) -> String {
        match s {
            Since::Start => "start".into(),
            Since::Last => "last".into(),
            Since::After(id) => format!("#{id}"),
            Since::Time(t) => t,
            Since::Within(secs) => match secs {
                s if s % 86_400 == 0 => format!("{}d", s / 86_400),
                s if s % 3600 == 0 => format!("{}h", s / 3600),
                s if s % 60 == 0 => format!("{}m", s / 60),
                s => format!("{s}s"),
            },
        }
    }
}

impl GateSpec {
    /// `memory`, `command` or `stub`.
    pub fn kind(&self) -> &'static str {
        match self {
            GateSpec::Memory { .. } => "memory",
            GateSpec::Command { .. } => "command",
            GateSpec::Gates { .. } => "gates",
            GateSpec::Stub { .. } => "stub",
        }
    }
}

/// Where and with what environment a command gate runs: fixed at `loop start`, so whoever
/// steps, from wherever, gets the same verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GateEnv {
    /// The absolute working directory.
    pub cwd: String,
    /// The command's whole environment (nothing else is inherited), by name.
    pub vars: std::collections::BTreeMap<String, String>,
}

/// Default `gate_nli_min`.
pub const DEFAULT_NLI_MIN: f64 = 0.5;

fn default_nli_min() -> f64 {
    DEFAULT_NLI_MIN
}

/// One verifier of the memory gate's chain, as the user names it (`--gate-verify SPEC`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum VerifySpec {
    /// `model`: slm's own trained cross-encoder (shipped in `models/verifier/`).
    Model,
    /// `guard`: the built-in deterministic check of identifiers and polarity.
    Guard,
    /// `guard:identifier`: only the guard's identifier rule (numbers, versions and names of
    /// the query must be in the memory).
    GuardIdentifier,
    /// `guard:entities`: the query's numbers must be in the memory (any form), and a month or
    /// environment it names must not be contradicted by another one.
    GuardEntities,
    /// `none`: plain cosine, no verification.
    None,
    /// `nli:DIR`: a user-supplied ONNX natural-language-inference cross-encoder.
    Nli(std::path::PathBuf),
    /// `cmd:COMMAND`: a shell command (CLI only) that gets the candidate and exits 0 to accept.
    Cmd(String),
}

impl VerifySpec {
    /// Parses `model`, `guard`, `guard:identifier`, `guard:entities`, `none`, `nli:DIR` or `cmd:COMMAND`;
    /// anything else is invalid input naming `gate_verify`.
    pub fn parse(s: &str) -> Result<VerifySpec> {
        let rule = "must be model, guard, guard:identifier, guard:entities, none, nli:DIR or cmd:COMMAND";
        match s.split_once(':') {
            None if s == "model" => Ok(VerifySpec::Model),
            None if s == "guard" => Ok(VerifySpec::Guard),
            Some(("guard", "identifier")) => Ok(VerifySpec::GuardIdentifier),
            Some(("guard", "entities")) => Ok(VerifySpec::GuardEntities),
            None if s == "none" => Ok(VerifySpec::None),
            Some(("nli", dir)) if !dir.trim().is_empty() => Ok(VerifySpec::Nli(dir.into())),
            Some(("nli", _)) => Err(Error::invalid("gate_verify", s, "nli: needs a model directory (nli:DIR)")),
            Some(("cmd", cmd)) if !cmd.trim().is_empty() && !cmd.contains('\0') => Ok(VerifySpec::Cmd(cmd.to_string())),
            Some(("cmd", _)) => Err(Error::invalid("gate_verify", s, "cmd: needs a non-empty shell command without NUL")),
            _ => Err(Error::invalid("gate_verify", s, rule)),
        }
    }

    /// The verifier's name as shown in details and results (`guard`, `nli:DIR`, ...).
    pub fn name(&self) -> String {
        String::from(self.clone())
    }
}

impl TryFrom<String> for VerifySpec {
    type Error = Error;
    fn try_from(s: String) -> Result<VerifySpec> {
        VerifySpec::parse(&s)
    }
}

impl From<VerifySpec> for String {
    fn from(v: VerifySpec) -> String {
        match v {
            VerifySpec::Model => "model".into(),
            VerifySpec::Guard => "guard".into(),
            VerifySpec::GuardIdentifier => "guard:identifier".into(),
            VerifySpec::GuardEntities => "guard:entities".into(),
            VerifySpec::None => "none".into(),
            VerifySpec::Nli(dir) => format!("nli:{}", dir.display()),
            VerifySpec::Cmd(cmd) => format!("cmd:{cmd}"),
        }
    }
}

/// What a run records about itself (the `params` column): its bounds and its gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunParams {
    pub limits: Limits,
    #[serde(flatten)]
    pub gate: GateSpec,
}

/// The first release stored memory and stub gates one level down (`{"limits", "gate": {"gate":
/// "memory", ...}}`); such rows are still read.
#[derive(Deserialize)]
struct NestedParams {
    limits: Limits,
    gate: GateSpec,
}

impl RunParams {
    /// Parses the `params` column of run `run_id`.
    pub fn parse(run_id: &str, json: &str) -> Result<RunParams> {
        serde_json::from_str::<RunParams>(json)
            .or_else(|e| serde_json::from_str::<NestedParams>(json).map(|n| RunParams { limits: n.limits, gate: n.gate }).map_err(|_| e))
            .map_err(|e| Error::Corrupt(format!("run {run_id}: unreadable params ({e})")))
    }

    /// The `params` column's text.
    pub fn to_json(&self) -> String {
        // A struct of strings and numbers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The text of a lap's ledger memory: embedded for recall and counted as tokens. It holds no
/// run id or clock, so its token count is predictable from the name, lap and detail. (Here,
/// below the store, because the store derives a lap's memory from its row: see
/// [`crate::storage::LedgerRows::laps_fold_chunk`].)
pub fn lap_text(name: &str, lap: i64, detail: &str) -> String {
    format!("loop {name} lap {lap}: {detail}")
}

/// The tags of a lap's ledger memory: `loop`, `loop:<name>` and `run:<suffix>` (sorted, as the
/// store keeps them). The run tag keeps identical lap texts of different runs apart.
pub fn lap_tags(name: &str, run_id: &str) -> Vec<String> {
    let suffix = run_id.strip_prefix(name).and_then(|r| r.strip_prefix('-')).unwrap_or(run_id);
    let mut tags = vec!["loop".to_string(), format!("loop:{name}"), format!("run:{suffix}")];
    tags.sort();
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { max_iterations: 3, max_wallclock_s: 5.0, poll_interval_s: 1.0, max_tokens: 0, no_progress_window: 0, gate_min_score: 0.5 }
    }

    #[test]
    fn verifier_specs_parse_and_name_their_field() {
        assert_eq!(VerifySpec::parse("guard").unwrap(), VerifySpec::Guard);
        assert_eq!(VerifySpec::parse("none").unwrap(), VerifySpec::None);
        assert_eq!(VerifySpec::parse("model").unwrap(), VerifySpec::Model);
        assert_eq!(VerifySpec::parse("guard:identifier").unwrap().name(), "guard:identifier");
        assert_eq!(VerifySpec::parse("guard:entities").unwrap().name(), "guard:entities");
        assert_eq!(VerifySpec::parse("nli:/m/x").unwrap(), VerifySpec::Nli("/m/x".into()));
        assert_eq!(VerifySpec::parse("cmd:gh pr view 42 | grep -q APPROVED").unwrap().name(), "cmd:gh pr view 42 | grep -q APPROVED");
        for bad in ["", "Guard", "nli:", "cmd:", "cmd:  ", "regex:x", "guard:1", "Model", "model:x"] {
            assert_eq!(VerifySpec::parse(bad).unwrap_err().field(), Some("gate_verify"), "{bad:?}");
        }
        let json = serde_json::to_string(&vec![VerifySpec::Guard, VerifySpec::Cmd("true".into())]).unwrap();
        assert_eq!(json, r#"["guard","cmd:true"]"#);
    }

    #[test]
    fn statuses_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()).unwrap(), s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert!(RunStatus::parse("runnin").is_err());
    }

    #[test]
    fn params_round_trip_and_read_the_first_release_layouts() {
        let p = RunParams { limits: limits(), gate: GateSpec::Command { gate_cmd: "true".into(), deadline_ms: 7, gate_env: None } };
        assert_eq!(RunParams::parse("r", &p.to_json()).unwrap(), p);
        let env = GateEnv { cwd: "/w".into(), vars: [("PATH".to_string(), "/bin".to_string())].into() };
        let p = RunParams { limits: limits(), gate: GateSpec::Command { gate_cmd: "true".into(), deadline_ms: 7, gate_env: Some(env) } };
        assert_eq!(RunParams::parse("r", &p.to_json()).unwrap(), p);
        // Agent-driven runs were already flat.
        let flat = r#"{"gate":"command","gate_cmd":"make test","limits":{"max_iterations":3,"max_wallclock_s":5.0,"poll_interval_s":1.0,"max_tokens":0,"no_progress_window":0,"gate_min_score":0.5},"deadline_ms":9}"#;
        assert_eq!(
            RunParams::parse("r", flat).unwrap().gate,
            GateSpec::Command { gate_cmd: "make test".into(), deadline_ms: 9, gate_env: None }
        );
        let nested = r#"{"limits":{"max_iterations":3,"max_wallclock_s":5.0,"poll_interval_s":1.0,"max_tokens":0,"no_progress_window":0,"gate_min_score":0.5},"gate":{"gate":"memory","gate_query":"q","gate_tags":["a"]}}"#;
        let n = RunParams::parse("r", nested).unwrap();
        let plain = GateSpec::Memory { gate_query: "q".into(), gate_tags: vec!["a".into()], gate_verify: vec![], gate_nli_min: 0.5 };
        assert_eq!(n.gate, plain, "first-release runs were plain cosine");
        let err = RunParams::parse("run-9", "{").unwrap_err().to_string();
        assert!(err.contains("run-9"), "{err}");
    }
}
