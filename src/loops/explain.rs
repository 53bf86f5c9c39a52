//! `slm gate check`: one gate decision, explained, without running a loop.
//!
//! The tool a user reaches for when a loop did not end as expected: it scores one memory (a
//! stored one by id, or a text) against a gate query exactly as a lap would (exact cosine
//! against the threshold, then every verifier of the chain) and reports each verifier's
//! verdict, not only the first refusal.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::params::check_verify;
use super::verify::{Candidate, Chain};
use crate::engine::Engine;
use crate::memory::{self, Kind};
use crate::{Error, Result};

/// What to check: a gate (query, threshold, verifiers) and one memory.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    pub query: String,
    /// A text to check, or...
    pub memory: Option<String>,
    /// ...a stored memory's id.
    pub id: Option<i64>,
    pub gate_min_score: f64,
    pub gate_verify: Vec<String>,
    pub gate_nli_min: f64,
}

/// One verifier's verdict.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VerifierVerdict {
    pub verifier: String,
    pub accepted: bool,
    pub rule: Option<String>,
    pub reason: Option<String>,
}

/// The explanation of one decision.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GateCheck {
    pub query: String,
    pub memory_id: Option<i64>,
    pub content: String,
    /// Exact cosine between the query and the memory.
    pub score: f32,
    pub threshold: f64,
    /// The memory is a candidate: eligible and at or above the threshold.
    pub candidate: bool,
    pub verifiers: Vec<VerifierVerdict>,
    /// The gate would pass on this memory.
    pub passed: bool,
    /// One sentence saying why.
    pub reason: String,
}

/// Checks everything in a request that needs no data root (query, threshold, verifiers,
/// memory text), so the CLI can refuse bad input before it opens, or creates, anything.
pub fn validate(r: &CheckRequest) -> Result<Vec<crate::record::VerifySpec>> {
    super::params::check_gate_query("query", &r.query)?;
    memory::validate_score("gate_min_score", r.gate_min_score)?;
    let specs = check_verify(&r.gate_verify, r.gate_nli_min)?;
    if let Some(text) = &r.memory {
        memory::validate_content("memory", text)?;
    }
    Ok(specs)
}

/// Explains whether the gate would pass on one memory.
pub fn gate_check(engine: &Engine, r: &CheckRequest) -> Result<GateCheck> {
    let specs = validate(r)?;
    let (memory_id, content, eligible) = match (&r.memory, r.id) {
        (Some(text), None) => (None, text.clone(), true),
        (None, Some(id)) => {
            let m = engine.get(&[id])?.pop().ok_or_else(|| Error::NotFound { what: "memory", id: id.to_string() })?;
            (Some(id), m.content, m.kind == Kind::Memory)
        }
        _ => return Err(Error::invalid("memory", "", "give exactly one of --memory TEXT or --id N")),
    };
    let q = engine.embedder().embed_one(&r.query)?;
    let m = engine.embedder().embed_one(&content)?;
    let score = crate::spaces::cosine(&q, &m);
    let candidate = eligible && score >= r.gate_min_score as f32;
    let c = Candidate { id: memory_id.unwrap_or(0), content: content.clone(), tags: Vec::new(), score };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut verifiers = Vec::new();
    for spec in &specs {
        // Each verifier on its own, so every verdict is shown.
        let mut chain = Chain::build(std::slice::from_ref(spec), &r.query, r.gate_nli_min)?;
        if chain.names().is_empty() {
            continue; // `none`
        }
        let v = chain.verify(std::slice::from_ref(&c), deadline)?;
        let rejected = v.rejected.into_iter().next();
        verifiers.push(VerifierVerdict {
            verifier: spec.name(),
            accepted: v.accepted.is_some(),
            rule: rejected.as_ref().map(|x| x.rule.clone()),
            reason: rejected.map(|x| x.reason),
        });
    }
    let passed = candidate && verifiers.iter().all(|v| v.accepted);
    let reason = if !eligible {
        "a ledger lap is never gate-eligible".to_string()
    } else if !candidate {
        format!("it scores {score:.3} < threshold {:.3}: not a candidate", r.gate_min_score)
    } else if let Some(v) = verifiers.iter().find(|v| !v.accepted) {
        format!(
            "it scores {score:.3} but {} ({}, by {})",
            v.reason.as_deref().unwrap_or("was refused"),
            v.rule.as_deref().unwrap_or("?"),
            v.verifier
        )
    } else if verifiers.is_empty() {
        format!("it scores {score:.3} >= threshold {:.3} (plain cosine)", r.gate_min_score)
    } else {
        let names: Vec<&str> = verifiers.iter().map(|v| v.verifier.as_str()).collect();
        format!("it scores {score:.3} >= threshold {:.3} and passes {}", r.gate_min_score, names.join(", "))
    };
    Ok(GateCheck { query: r.query.clone(), memory_id, content, score, threshold: r.gate_min_score, candidate, verifiers, passed, reason })
}
