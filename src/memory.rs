//! The memory data model shared by the store, the engine and every surface, plus the rules
//! that user-supplied content and tags must follow (SPEC §1).
//!
//! Field names here are the JSON field names of every surface, so the CLI's `--json`, the MCP
//! tools and the dashboard's API cannot drift apart.

use serde::Serialize;

use crate::{Error, Result};

/// Largest content accepted, in bytes (64 KiB).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Longest tag accepted, in characters.
pub const MAX_TAG_CHARS: usize = 128;
/// Most distinct tags on one memory, and in one tag filter (recall, list, a loop's gate).
pub const MAX_TAGS: usize = 64;

/// What a stored row is: something an agent wrote, or a loop ledger entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Written by `remember`; eligible for recall and for loop gates.
    Memory,
    /// A loop ledger lap; never eligible for a gate, hidden from recall unless asked for.
    Lap,
}

impl Kind {
    /// The value stored in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Lap => "lap",
        }
    }

    /// Parses the `kind` column.
    pub fn parse(s: &str) -> Result<Kind> {
        match s {
            "memory" => Ok(Kind::Memory),
            "lap" => Ok(Kind::Lap),
            other => Err(Error::Corrupt(format!("unknown memory kind {other:?}"))),
        }
    }
}

/// Parses the kind filter every surface takes (`memory`, `lap` or `all`; `all` = `None`).
pub fn parse_kind_filter(field: &'static str, s: &str) -> Result<Option<Kind>> {
    match s {
        "memory" => Ok(Some(Kind::Memory)),
        "lap" => Ok(Some(Kind::Lap)),
        "all" => Ok(None),
        other => Err(Error::invalid(field, other, "must be memory, lap or all")),
    }
}

/// A stored memory as every surface shows it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Memory {
    pub id: i64,
    pub content: String,
    pub tags: Vec<String>,
    pub created_at: String,
    pub kind: Kind,
    /// When the memory expires (RFC 3339 UTC); absent for a memory that never does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl Memory {
    /// True when the memory has expired at `now` (see [`crate::expiry`]).
    pub fn expired_at(&self, now: &str) -> bool {
        crate::expiry::expired(self.expires_at.as_deref(), now)
    }
}

/// One recall result, best first in a list of hits.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Hit {
    pub id: i64,
    pub content: String,
    pub tags: Vec<String>,
    /// Exact cosine similarity between the query and this memory, in [-1, 1].
    pub score: f32,
    pub created_at: String,
    pub kind: Kind,
    /// When the memory expires (RFC 3339 UTC); absent for a memory that never does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// The result of `remember`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Remembered {
    pub id: i64,
    /// True when the same content with the same tags was already stored; `id` is that memory.
    pub deduped: bool,
}

/// Checks memory content: 1 byte to 64 KiB of UTF-8 (the type already guarantees UTF-8).
pub fn validate_content(field: &'static str, content: &str) -> Result<()> {
    if content.is_empty() {
        return Err(Error::invalid(field, content, "must be 1 byte to 64 KiB of text; it is empty"));
    }
    if content.len() > MAX_CONTENT_BYTES {
        return Err(Error::invalid(field, content, format!("must be 1 byte to 64 KiB of text; it is {} bytes", content.len())));
    }
    Ok(())
}

/// Checks one tag: 1–128 characters, no whitespace, no commas.
pub fn validate_tag(tag: &str) -> Result<()> {
    let n = tag.chars().count();
    if n == 0 || n > MAX_TAG_CHARS {
        return Err(Error::invalid("tag", tag, format!("must be 1-128 characters; it has {n}")));
    }
    if tag.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(Error::invalid("tag", tag, "must not contain whitespace or commas"));
    }
    Ok(())
}

/// Validates a list of tags and returns them as a sorted set (duplicates removed) of at
/// most [`MAX_TAGS`]. Every surface's tags (a memory's, a filter's, a gate's) pass here.
pub fn normalize_tags<S: AsRef<str>>(tags: &[S]) -> Result<Vec<String>> {
    let mut out = Vec::with_capacity(tags.len());
    for t in tags {
        validate_tag(t.as_ref())?;
        out.push(t.as_ref().to_string());
    }
    out.sort();
    out.dedup();
    if out.len() > MAX_TAGS {
        return Err(Error::invalid(
            "tags",
            format!("{} tags", out.len()),
            format!("at most {MAX_TAGS} distinct tags; there are {}", out.len()),
        ));
    }
    Ok(out)
}

/// Checks a similarity threshold: finite and in [-1, 1].
pub fn validate_score(field: &'static str, s: f64) -> Result<()> {
    if !s.is_finite() || !(-1.0..=1.0).contains(&s) {
        return Err(Error::invalid(field, s, "must be a finite number in [-1, 1]"));
    }
    Ok(())
}

/// Checks a result count: 1 to `max`.
pub fn validate_limit(field: &'static str, n: usize, max: usize) -> Result<()> {
    if n == 0 || n > max {
        return Err(Error::invalid(field, n, format!("must be between 1 and {max}")));
    }
    Ok(())
}

/// The current time as RFC 3339 UTC with microseconds, e.g. `2026-11-30T09:13:05.123456Z`.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_bounds() {
        assert!(validate_content("content", "x").is_ok());
        assert!(validate_content("content", &"x".repeat(MAX_CONTENT_BYTES)).is_ok());
        let e = validate_content("content", &"x".repeat(MAX_CONTENT_BYTES + 1)).unwrap_err();
        assert!(e.to_string().contains("64 KiB"), "{e}");
        assert_eq!(validate_content("content", "").unwrap_err().field(), Some("content"));
    }

    #[test]
    fn tag_rules() {
        assert!(validate_tag("pr-42").is_ok());
        assert!(validate_tag("loop:demo").is_ok());
        for bad in ["", "a b", "a,b", "tab\there"] {
            assert!(validate_tag(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(validate_tag(&"t".repeat(129)).is_err());
        assert_eq!(normalize_tags(&["b", "a", "b"]).unwrap(), vec!["a", "b"]);
        let many: Vec<String> = (0..=MAX_TAGS).map(|i| format!("t{i}")).collect();
        assert_eq!(normalize_tags(&many[..MAX_TAGS]).unwrap().len(), MAX_TAGS);
        assert_eq!(normalize_tags(&many).unwrap_err().field(), Some("tags"));
        // Duplicates do not count.
        let dup: Vec<&str> = std::iter::repeat_n("same", 1000).collect();
        assert_eq!(normalize_tags(&dup).unwrap(), vec!["same"]);
    }

    #[test]
    fn score_rules() {
        assert!(validate_score("min_score", 0.5).is_ok());
        for bad in [f64::NAN, f64::INFINITY, -1.5, 1.01] {
            assert!(validate_score("min_score", bad).is_err());
        }
    }
}
