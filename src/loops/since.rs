//! `since`: which memories a run's gates may count, by when they were written.
//!
//! A [`Since`] (checked at the boundary, stored with the run) becomes a [`Watermark`] when
//! the run starts: an id, since ids are committed in order on both stores. Only rows above
//! it are eligible. `start` is the largest id committed when the run starts; `last` is the
//! newest memory that passed the most recent converged run of the same loop name (read from
//! its stored result); `#ID` is that id; a time (or a duration before the start) is the
//! newest row written before it. The gates ([`super::gate::MemoryGate`]) only see the
//! watermark; the detail of every lap names what it kept out.

use super::gate::Watermark;
use crate::engine::Engine;
use crate::record::{RunStatus, Since};
use crate::Result;

/// How many of a loop's newest runs `since last` looks through for a converged one.
const LAST_RUNS: usize = 1000;

/// Resolves `since` for a run of loop `name` starting now.
pub fn resolve(engine: &Engine, name: &str, since: &Since) -> Result<Watermark> {
    let after = match since {
        Since::Start => engine.store().max_id()?,
        Since::Last => last_match(engine, name)?.unwrap_or(0),
        Since::After(id) => *id,
        Since::Time(at) => engine.store().last_id_before(at)?,
        // A duration reaching past the calendar's start keeps nothing out.
        Since::Within(secs) => match chrono::TimeDelta::try_seconds(i64::try_from(*secs).unwrap_or(i64::MAX))
            .and_then(|d| chrono::Utc::now().checked_sub_signed(d))
        {
            Some(at) => engine.store().last_id_before(&at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))?,
            None => 0,
        },
    };
    Ok(Watermark { after, label: format!("since {}", since.label()) })
}

/// The newest memory that passed the most recent converged run of `name` (every gate's,
/// for a run of several), if there is one.
fn last_match(engine: &Engine, name: &str) -> Result<Option<i64>> {
    for run in engine.store().run_history(Some(name), LAST_RUNS)? {
        if run.status != RunStatus::Converged {
            continue;
        }
        let Some(result) = run.result.as_deref().and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok()) else { continue };
        let mut ids: Vec<i64> = result.pointer("/match/id").and_then(|v| v.as_i64()).into_iter().collect();
        if let Some(gates) = result.get("matches").and_then(|m| m.as_array()) {
            for g in gates {
                for m in g.get("memories").and_then(|m| m.as_array()).into_iter().flatten() {
                    ids.extend(m.get("id").and_then(|v| v.as_i64()));
                }
            }
        }
        if let Some(max) = ids.into_iter().max() {
            return Ok(Some(max));
        }
    }
    Ok(None)
}
