//! `cmd:COMMAND`: a shell command as a verifier (CLI only).
//!
//! The command gets the candidate as JSON on stdin (`{"id","content","tags","score"}`) and in
//! `SLM_GATE_MEMORY_ID` / `SLM_GATE_CONTENT` (plus `SLM_GATE_QUERY`), and accepts it by
//! exiting 0: e.g. check the real PR state with a CLI before believing the memory. It runs
//! like an agent-driven loop's gate ([`crate::loops::shell::run_gate`]): its own process
//! group, killed at the run's deadline. Its answer may change (the world it checks changes),
//! so a candidate it rejected is asked again on later laps.

use std::time::Instant;

use super::{Candidate, Refusal, Verifier};
use crate::loops::shell::{run_gate, GateInput};
use crate::Result;

/// A verifying command bound to one gate query.
pub struct CmdVerifier {
    command: String,
    query: String,
}

impl CmdVerifier {
    pub fn new(command: &str, query: &str) -> CmdVerifier {
        CmdVerifier { command: command.into(), query: query.into() }
    }
}

impl Verifier for CmdVerifier {
    fn name(&self) -> String {
        format!("cmd:{}", self.command)
    }

    fn check(&mut self, batch: &[&Candidate], deadline: Instant) -> Result<Vec<Option<Refusal>>> {
        let mut out = Vec::with_capacity(batch.len());
        for c in batch {
            let stdin = serde_json::json!({"id": c.id, "content": c.content, "tags": c.tags, "score": c.score});
            let input = GateInput {
                stdin: Some(stdin.to_string().into_bytes()),
                env: vec![
                    ("SLM_GATE_MEMORY_ID".into(), c.id.to_string()),
                    ("SLM_GATE_CONTENT".into(), c.content.clone()),
                    ("SLM_GATE_QUERY".into(), self.query.clone()),
                ],
                recorded: None,
            };
            let o = run_gate(&self.command, deadline.saturating_duration_since(Instant::now()), &input)?;
            out.push(
                (!o.passed()).then(|| Refusal { rule: if o.timed_out { "deadline".into() } else { "exit".into() }, reason: o.refusal() }),
            );
        }
        Ok(out)
    }

    fn sequential(&self) -> bool {
        true
    }

    fn may_change(&self) -> bool {
        true
    }
}
