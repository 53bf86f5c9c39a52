//! `nli:DIR`: a user-supplied natural-language-inference cross-encoder as a verifier.
//!
//! The candidate is the premise and the gate query the hypothesis; the candidate passes when
//! the model's P(entailment) reaches the run's `gate_nli_min`. Loading, tokenisation and
//! inference live in [`crate::nli`]; this file only adapts it to the verifier chain. A whole
//! batch goes through the model in one call.

use std::path::Path;
use std::time::Instant;

use super::{Candidate, Refusal, Verifier};
use crate::nli::NliModel;
use crate::Result;

/// An NLI model bound to one gate query and threshold.
pub struct NliVerifier {
    name: String,
    model: NliModel,
    query: String,
    min: f64,
}

impl NliVerifier {
    /// Loads the model in `dir` (an invalid-input error naming `gate_verify` and the missing
    /// file when it cannot).
    pub fn load(dir: &Path, query: &str, min: f64) -> Result<NliVerifier> {
        Ok(NliVerifier { name: format!("nli:{}", dir.display()), model: NliModel::load(dir)?, query: query.into(), min })
    }
}

impl Verifier for NliVerifier {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&mut self, batch: &[&Candidate], _deadline: Instant) -> Result<Vec<Option<Refusal>>> {
        let pairs: Vec<(&str, &str)> = batch.iter().map(|c| (c.content.as_str(), self.query.as_str())).collect();
        let probs = self.model.entailment(&pairs)?;
        Ok(probs
            .into_iter()
            .map(|p| {
                (f64::from(p) < self.min).then(|| Refusal {
                    rule: "entailment".into(),
                    reason: format!("does not entail the query (P(entailment) {p:.2} < {:.2})", self.min),
                })
            })
            .collect())
    }
}
