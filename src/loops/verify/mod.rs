//! The second stage of the memory gate: verifiers that accept or reject a candidate memory.
//!
//! Cosine finds candidates by topic; it cannot tell "PR #42 approved" from "PR #42: NOT
//! approved". The gate ([`super::gate::MemoryGate`]) therefore hands its candidates, best
//! first, to the run's [`Chain`] of verifiers and passes on the first candidate every
//! verifier accepts. Each rejection carries the verifier, a rule name and a reason that the
//! lap detail quotes. Verifiers:
//! - [`model`] (slm's own trained cross-encoder, in the default chain);
//! - [`guard`]: deterministic rules over the text, no model; `guard:identifier` runs only its
//!   identifier rule, and [`entities`] (`guard:entities`, in the default chain) only compares
//!   the query's numbers, quarters, cloud regions, months and environments;
//! - `nli:DIR` ([`nli`]): a user-supplied ONNX entailment model;
//! - `cmd:COMMAND` ([`cmd`]): a shell command that gets the candidate and exits 0 to accept
//!   (CLI only: the MCP surface refuses it);
//! - `none`: plain cosine, for who asks for it explicitly.
//!
//! Cheap verifiers see the whole batch at once; slow ones ([`Verifier::sequential`], a
//! command) see one candidate at a time, best first, and stop at the first that passes.

pub mod cmd;
pub mod entities;
pub mod guard;
mod labels;
mod lookalike;
pub mod model;
mod negated;
pub mod nli;
mod number_words;
mod numerals;
mod regions;

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::record::VerifySpec;
use crate::Result;

/// A candidate memory as verifiers see it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: i64,
    pub content: String,
    pub tags: Vec<String>,
    /// Its exact cosine with the gate query.
    pub score: f32,
}

/// Why a verifier said no: a short stable rule name and a phrase that reads well after
/// "#17 scored 0.77 but ...".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rule: String,
    pub reason: String,
}

/// A candidate a verifier rejected, as laps and results report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rejected {
    pub id: i64,
    pub score: f32,
    /// The verifier that said no (`guard`, `nli:DIR`, `cmd:…`).
    pub verifier: String,
    /// Its rule (`identifier`, `polarity:negation`, `entailment`, `exit`, …).
    pub rule: String,
    pub reason: String,
}

impl Rejected {
    /// `#17 scored 0.767 but says "NOT approved" (polarity:negation)`.
    pub fn sentence(&self) -> String {
        format!("#{} scored {:.3} but {} ({})", self.id, self.score, self.reason, self.rule)
    }

    /// The sentence for a tag-only gate's candidate, which has no score: `#17 carries the
    /// gate tags but ...`.
    pub fn sentence_unscored(&self) -> String {
        format!("#{} carries the gate tags but {} ({})", self.id, self.reason, self.rule)
    }
}

/// One verifier of a chain.
pub trait Verifier: Send {
    /// Its name as the user wrote it (`guard`, `nli:DIR`, `cmd:…`).
    fn name(&self) -> String;
    /// One verdict per candidate, in order: `None` accepts. `deadline` bounds slow work.
    fn check(&mut self, batch: &[&Candidate], deadline: Instant) -> Result<Vec<Option<Refusal>>>;
    /// True for slow verifiers that should see one candidate at a time, best first.
    fn sequential(&self) -> bool {
        false
    }
    /// True when its answer for the same candidate may change later (a command checking the
    /// world): a candidate it rejected is asked again on later laps.
    fn may_change(&self) -> bool {
        false
    }
    /// Called when a run starts waiting: a verifier with a costly first use (a model to load)
    /// may get ready in the background.
    fn prepare(&self) {}
}

/// What a chain decided about a batch of candidates (best first).
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// The index of the first candidate every verifier accepted.
    pub accepted: Option<usize>,
    pub rejected: Vec<Rejected>,
    /// Candidates no sequential verifier got to (one before them passed): not decided.
    pub untested: Vec<usize>,
}

/// The verifiers of one run; all must accept.
pub struct Chain {
    verifiers: Vec<Box<dyn Verifier>>,
}

impl Chain {
    /// Builds the chain for `query`. `none` alone is plain cosine (no verifier); the specs were
    /// checked at the boundary, but a model that fails to load is still an error here, before
    /// the run starts.
    pub fn build(specs: &[VerifySpec], query: &str, nli_min: f64) -> Result<Chain> {
        let mut verifiers: Vec<Box<dyn Verifier>> = Vec::new();
        for spec in specs {
            match spec {
                VerifySpec::None => {}
                VerifySpec::Model => verifiers.push(Box::new(model::ModelVerifier::new(query))),
                VerifySpec::Guard => verifiers.push(Box::new(GuardVerifier(guard::Guard::new(query), false))),
                VerifySpec::GuardIdentifier => verifiers.push(Box::new(GuardVerifier(guard::Guard::new(query), true))),
                VerifySpec::GuardEntities => verifiers.push(Box::new(EntitiesVerifier(entities::Entities::new(query)))),
                VerifySpec::Nli(dir) => verifiers.push(Box::new(nli::NliVerifier::load(dir, query, nli_min)?)),
                VerifySpec::Cmd(command) => verifiers.push(Box::new(cmd::CmdVerifier::new(command, query))),
            }
        }
        Ok(Chain { verifiers })
    }

    /// The names of the verifiers that run (empty: plain cosine).
    pub fn names(&self) -> Vec<String> {
        self.verifiers.iter().map(|v| v.name()).collect()
    }

    /// Lets every verifier get ready for the candidates a waiting run will see.
    pub fn prepare(&self) {
        self.verifiers.iter().for_each(|v| v.prepare());
    }

    /// True when a rejection may be revised on a later lap.
    pub fn may_change(&self) -> bool {
        self.verifiers.iter().any(|v| v.may_change())
    }

    /// Verifies `candidates` (best first): the batch verifiers on all of them, then the
    /// sequential ones on each survivor in order until one passes.
    pub fn verify(&mut self, candidates: &[Candidate], deadline: Instant) -> Result<Verdict> {
        let mut out = Verdict::default();
        let mut alive: Vec<usize> = (0..candidates.len()).collect();
        let (batch, sequential): (Vec<_>, Vec<_>) = self.verifiers.iter_mut().partition(|v| !v.sequential());
        for v in batch {
            if alive.is_empty() {
                break;
            }
            let refs: Vec<&Candidate> = alive.iter().map(|&i| &candidates[i]).collect();
            let verdicts = v.check(&refs, deadline)?;
            let name = v.name();
            let mut next = Vec::with_capacity(alive.len());
            for (i, verdict) in alive.into_iter().zip(verdicts) {
                match verdict {
                    None => next.push(i),
                    Some(r) => out.rejected.push(rejected(&candidates[i], &name, r)),
                }
            }
            alive = next;
        }
        let mut sequential = sequential;
        let mut rest = alive.into_iter();
        'candidates: for i in rest.by_ref() {
            for v in sequential.iter_mut() {
                if let Some(Some(r)) = v.check(&[&candidates[i]], deadline)?.pop() {
                    out.rejected.push(rejected(&candidates[i], &v.name(), r));
                    continue 'candidates;
                }
            }
            out.accepted = Some(i);
            break;
        }
        out.untested = rest.collect();
        Ok(out)
    }
}

fn rejected(c: &Candidate, verifier: &str, r: Refusal) -> Rejected {
    Rejected { id: c.id, score: c.score, verifier: verifier.to_string(), rule: r.rule, reason: r.reason }
}

/// The built-in guard as a verifier: the query is compiled once per run. `true`: only its
/// identifier rule (`guard:identifier`).
struct GuardVerifier(guard::Guard, bool);

impl Verifier for GuardVerifier {
    fn name(&self) -> String {
        if self.1 { "guard:identifier" } else { "guard" }.into()
    }

    fn check(&mut self, batch: &[&Candidate], _deadline: Instant) -> Result<Vec<Option<Refusal>>> {
        Ok(batch
            .iter()
            .map(|c| {
                let verdict = if self.1 { self.0.check_identifiers(&c.content) } else { self.0.check(&c.content) };
                verdict.err().map(|r| Refusal { rule: r.rule.to_string(), reason: r.reason })
            })
            .collect())
    }
}

/// `guard:entities` as a verifier.
struct EntitiesVerifier(entities::Entities);

impl Verifier for EntitiesVerifier {
    fn name(&self) -> String {
        "guard:entities".into()
    }

    fn check(&mut self, batch: &[&Candidate], _deadline: Instant) -> Result<Vec<Option<Refusal>>> {
        Ok(batch.iter().map(|c| self.0.check(&c.content).err()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: i64, content: &str) -> Candidate {
        Candidate { id, content: content.into(), tags: Vec::new(), score: 0.9 - id as f32 / 100.0 }
    }

    struct Script {
        refuse: Vec<i64>,
        seen: std::sync::Arc<std::sync::Mutex<Vec<i64>>>,
    }

    impl Verifier for Script {
        fn name(&self) -> String {
            "script".into()
        }
        fn check(&mut self, batch: &[&Candidate], _: Instant) -> Result<Vec<Option<Refusal>>> {
            self.seen.lock().unwrap().extend(batch.iter().map(|c| c.id));
            Ok(batch
                .iter()
                .map(|c| self.refuse.contains(&c.id).then(|| Refusal { rule: "script".into(), reason: "said no".into() }))
                .collect())
        }
        fn sequential(&self) -> bool {
            true
        }
    }

    #[test]
    fn guard_rejects_the_contradiction_and_passes_the_true_signal_behind_it() {
        let mut chain = Chain::build(&[VerifySpec::Guard], "PR #42 approved", 0.5).unwrap();
        let cands = [cand(1, "review of PR #42: NOT approved, changes requested"), cand(2, "review complete: PR #42 is approved")];
        let v = chain.verify(&cands, Instant::now()).unwrap();
        assert_eq!(v.accepted, Some(1), "a rejected candidate never hides a later true signal");
        assert_eq!(v.rejected.len(), 1);
        let r = &v.rejected[0];
        assert_eq!((r.id, r.verifier.as_str()), (1, "guard"));
        assert!(r.rule.starts_with("polarity"), "{r:?}");
        assert!(r.sentence().starts_with("#1 scored 0.890 but says"), "{}", r.sentence());
    }

    #[test]
    fn none_is_plain_cosine_and_sequential_verifiers_stop_at_the_first_pass() {
        let cands = [cand(1, "x"), cand(2, "y"), cand(3, "z"), cand(4, "w")];
        let mut plain = Chain::build(&[VerifySpec::None], "q", 0.5).unwrap();
        assert!(plain.names().is_empty());
        assert_eq!(plain.verify(&cands, Instant::now()).unwrap().accepted, Some(0));

        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut chain = Chain { verifiers: vec![Box::new(Script { refuse: vec![1], seen: seen.clone() })] };
        let v = chain.verify(&cands, Instant::now()).unwrap();
        assert_eq!(v.accepted, Some(1));
        assert_eq!(v.untested, vec![2, 3]);
        assert_eq!(*seen.lock().unwrap(), vec![1, 2], "nothing after the first pass is run");
    }
}
