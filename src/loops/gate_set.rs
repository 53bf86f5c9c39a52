//! Several gates in one run: a [`GateSet`] of [`MemoryGate`]s joined by `gate_mode`.
//!
//! Each lap brings the index up to date once (one look at the store, whatever the number of
//! gates), sweeps the gates that read the same rows (same tags and watermark) in one pass
//! over the vectors, then asks every gate (each sweeps only what arrived since its last look,
//! so an idle lap costs each gate a scan of nothing), then joins their answers: `all` passes when
//! every gate has its `count` of memories, `any` when one has. A gate that has passed stays passed while
//! its memories exist (each gate rechecks its own). The lap's detail says how far the run
//! is (`2 of 3 gates passed; gate 3: 5 of 8 memories`), then each gate's own detail. The
//! runner, the bounds and the ledger see one gate: a lap counts once whatever the number of
//! gates.

use std::time::Instant;

use super::gate::{Gate, MemoryGate, Observation, SweepRequest};
use crate::record::GateMode;
use crate::Result;

/// Gates joined by a mode.
pub struct GateSet<'e> {
    gates: Vec<MemoryGate<'e>>,
    mode: GateMode,
}

impl<'e> GateSet<'e> {
    pub fn new(gates: Vec<MemoryGate<'e>>, mode: GateMode) -> GateSet<'e> {
        GateSet { gates: gates.into_iter().map(MemoryGate::in_set).collect(), mode }
    }

    /// One look at the store for every gate of the lap (each gate's sweep then reads only the
    /// index). A set of tag-only gates reads the store in its sweeps and needs none.
    fn refresh(&self) -> Result<()> {
        match self.gates.iter().find(|g| g.has_query()) {
            Some(g) => g.host().refresh_for_gate(),
            None => Ok(()),
        }
    }

    /// Sweeps gates that read the same rows (same tags, same watermark: every query gate of
    /// a plain run) in one pass, each at its own threshold, and hands each its sweep: a lap
    /// of three gates reads the vectors once instead of three times.
    fn share_sweeps(&mut self) -> Result<()> {
        let mut groups: Vec<(Vec<String>, i64, Vec<usize>)> = Vec::new();
        for (i, g) in self.gates.iter().enumerate() {
            let Some(SweepRequest { tags, after, .. }) = g.sweep_request() else { continue };
            match groups.iter_mut().find(|(t, a, _)| t == tags && *a == after) {
                Some(group) => group.2.push(i),
                None => groups.push((tags.to_vec(), after, vec![i])),
            }
        }
        for (tags, after, members) in groups.into_iter().filter(|g| g.2.len() > 1) {
            let sweeps = {
                let queries: Vec<(&[f32], f32)> = members.iter().filter_map(|&i| self.gates[i].sweep_request().map(|r| r.query)).collect();
                self.gates[members[0]].host().sweep_many(&queries, &tags, after)?
            };
            for (i, sweep) in members.into_iter().zip(sweeps) {
                self.gates[i].supply(after, sweep);
            }
        }
        Ok(())
    }
}

impl Gate for GateSet<'_> {
    fn observe(&mut self, lap: i64, deadline: Instant) -> Result<Observation> {
        self.refresh()?;
        self.share_sweeps()?;
        let mut seen = Vec::with_capacity(self.gates.len());
        for g in &mut self.gates {
            seen.push(g.observe(lap, deadline)?);
        }
        let done = seen.iter().filter(|o| o.passed).count();
        let passed = match self.mode {
            GateMode::All => done == seen.len(),
            GateMode::Any => done > 0,
        };
        let mut detail = format!(
            "{done} of {} gates passed ({} needed)",
            seen.len(),
            match self.mode {
                GateMode::All => "all",
                GateMode::Any => "any",
            }
        );
        for (i, o) in seen.iter().enumerate() {
            detail.push_str(&format!("; gate {}: {}", i + 1, o.detail));
        }
        // The memory that reports the run: the passing gate's, else the best seen anywhere.
        let lead = seen
            .iter()
            .find(|o| o.passed)
            .or_else(|| {
                seen.iter()
                    .filter(|o| o.best_score.is_some())
                    .max_by(|a, b| a.best_score.partial_cmp(&b.best_score).unwrap_or(std::cmp::Ordering::Equal))
            })
            .or(seen.first());
        let (best_score, best_memory_id, verified_by) =
            lead.map_or((None, None, Vec::new()), |o| (o.best_score, o.best_memory_id, o.verified_by.clone()));
        Ok(Observation {
            passed,
            best_score,
            best_memory_id,
            eligible: seen.iter().map(|o| o.eligible).sum(),
            detail,
            rejected: seen.iter().flat_map(|o| o.rejected.iter().cloned()).collect(),
            verified_by: if passed { verified_by } else { Vec::new() },
            gates: seen.into_iter().flat_map(|o| o.gates).collect(),
        })
    }

    fn setup_tokens(&self) -> u64 {
        self.gates.iter().map(|g| g.setup_tokens()).sum()
    }

    fn prepare_wait(&self) {
        self.gates.iter().for_each(|g| g.prepare_wait());
    }

    fn probe(&mut self) -> Result<bool> {
        // Every gate takes in what arrived, whichever answers first.
        self.refresh()?;
        self.share_sweeps()?;
        let mut fresh = false;
        for g in &mut self.gates {
            fresh |= g.probe()?;
        }
        Ok(fresh)
    }
}
