//! Memories that expire (#28): "I hold the deploy lock" is true for an hour, then a trap.
//!
//! A memory may carry an `expires_at` time (UTC, microseconds, the same text form as
//! `created_at`, so times compare as text in both stores' SQL). It is set by `remember
//! --ttl`/`--expires-at` (MCP `ttl_s`/`expires_at`) or by an import line, kept by export.
//! From that instant the memory is *expired*: no gate counts it ([`crate::loops::gate`]
//! drops it from its candidates and from the memories that already passed), and `recall`,
//! `list`, the MCP tools and the dashboard hide it unless asked (`include_expired`). The row
//! stays until `slm forget --expired` (or a plain forget) removes it, so an expired lock can
//! still be read for the record. This module only parses and compares; the store filters.

use crate::record::parse_duration;
use crate::{Error, Result};

/// Longest time-to-live accepted: 100 years (past that a time is a typo, not a plan).
pub const MAX_TTL_S: u64 = 100 * 365 * 86_400;

/// The canonical text form of a time: RFC 3339, UTC, microseconds.
fn canonical(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// `now + secs` in canonical form; `field` names the input for the error.
pub fn after_seconds(field: &'static str, secs: f64) -> Result<String> {
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_TTL_S as f64 {
        return Err(Error::invalid(field, secs, "must be a number of seconds above 0 and at most 100 years"));
    }
    let d = chrono::TimeDelta::microseconds((secs * 1e6).round() as i64);
    Ok(canonical(chrono::Utc::now() + d))
}

/// A TTL as people type it (`90s`, `15m`, `2h`, `1d`, or plain seconds) → its expiry time.
pub fn parse_ttl(field: &'static str, s: &str) -> Result<String> {
    let t = s.trim();
    let secs = match parse_duration(t) {
        Some(n) => n as f64,
        None => t.parse::<f64>().map_err(|_| Error::invalid(field, s, "must be a duration such as 90s, 15m, 2h, 1d (or seconds)"))?,
    };
    after_seconds(field, secs)
}

/// An absolute expiry time (RFC 3339, in the future) → canonical form.
pub fn parse_expires_at(field: &'static str, s: &str) -> Result<String> {
    let at = chrono::DateTime::parse_from_rfc3339(s.trim())
        .map_err(|_| Error::invalid(field, s, "must be an RFC 3339 time such as 2026-12-02T18:00:00Z"))?
        .with_timezone(&chrono::Utc);
    if at <= chrono::Utc::now() {
        return Err(Error::invalid(field, s, "is not in the future: the memory would be expired when written"));
    }
    Ok(canonical(at))
}

/// A stored or imported expiry time in canonical form, past or future (an export may hold
/// memories that have expired since; they import as expired).
pub fn normalize(field: &'static str, s: &str) -> Result<String> {
    let at = chrono::DateTime::parse_from_rfc3339(s.trim()).map_err(|_| Error::invalid(field, s, "must be an RFC 3339 time"))?;
    Ok(canonical(at.with_timezone(&chrono::Utc)))
}

/// The expiry of a write from its two optional inputs: `ttl` (parsed by the surface, which
/// knows its form: a duration on the CLI, seconds over MCP) or an absolute `expires_at`
/// (named `at_field`). Giving both is invalid input, whatever the TTL says.
pub fn from_inputs(
    ttl: Option<impl FnOnce() -> Result<String>>,
    expires_at: Option<&str>,
    ttl_field: &'static str,
    at_field: &'static str,
) -> Result<Option<String>> {
    match (ttl, expires_at) {
        (Some(_), Some(a)) => Err(Error::invalid(at_field, a, format!("give {ttl_field} or {at_field}, not both"))),
        (Some(t), None) => t().map(Some),
        (None, Some(a)) => parse_expires_at(at_field, a).map(Some),
        (None, None) => Ok(None),
    }
}

/// True when a memory with this expiry has expired at `now` (canonical text, compared as
/// text: both are fixed-width UTC).
pub fn expired(expires_at: Option<&str>, now: &str) -> bool {
    expires_at.is_some_and(|e| e <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_forms_and_rules() {
        let now = crate::memory::now_rfc3339();
        for ok in ["90s", "15m", "2h", "1d", "30", "0.5"] {
            let at = parse_ttl("ttl", ok).unwrap();
            assert!(at > now, "{ok}: {at} should be after {now}");
            assert_eq!(at.len(), now.len(), "canonical width");
        }
        for bad in ["", "0", "-5", "0s", "soon", "5w", "NaN", "inf"] {
            let e = parse_ttl("ttl", bad).unwrap_err();
            assert_eq!(e.field(), Some("ttl"), "{bad}: {e}");
        }
        assert!(parse_ttl("ttl", "36600d").is_err(), "past 100 years");
    }

    #[test]
    fn absolute_times_must_be_future_and_are_canonical() {
        let at = parse_expires_at("expires_at", "2999-01-01T00:00:00+02:00").unwrap();
        assert_eq!(at, "2998-12-31T22:00:00.000000Z");
        assert_eq!(parse_expires_at("expires_at", "2020-01-01T00:00:00Z").unwrap_err().field(), Some("expires_at"));
        assert_eq!(parse_expires_at("expires_at", "tomorrow").unwrap_err().field(), Some("expires_at"));
        let ttl = || Some(|| parse_ttl("ttl", "1h"));
        let both = from_inputs(ttl(), Some("2999-01-01T00:00:00Z"), "ttl", "expires_at").unwrap_err();
        assert_eq!(both.field(), Some("expires_at"), "{both}");
        assert!(from_inputs(ttl(), None, "ttl", "expires_at").unwrap().is_some());
        let none: Option<fn() -> Result<String>> = None;
        assert_eq!(from_inputs(none, None, "ttl", "expires_at").unwrap(), None);
    }

    #[test]
    fn expiry_compares_as_text() {
        let now = crate::memory::now_rfc3339();
        assert!(!expired(None, &now));
        assert!(expired(Some("2020-01-01T00:00:00.000000Z"), &now));
        assert!(!expired(Some("2999-01-01T00:00:00.000000Z"), &now));
        assert!(expired(Some(&now), &now), "expired at the instant itself");
    }
}
