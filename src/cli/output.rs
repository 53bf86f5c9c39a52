//! Printing results: aligned tables for people, JSON objects for programs.
//!
//! JSON shapes are the contract shared with the MCP tools (SPEC §1, issue #2):
//! remember → `{"id","deduped"}`, recall → `{"query","hits":[...]}`, list →
//! `{"memories":[...]}`, status → `{"data_dir","db_path","memories","model","index",...}`.

use std::path::PathBuf;

use serde_json::json;

use slm::engine::{Recalled, Status};
use slm::import::ImportSummary;
use slm::memory::{Memory, Remembered};

/// Prints results in the format the user asked for.
pub struct Printer {
    pub json: bool,
}

/// One line of at most `max` characters, for a table cell.
fn cell(s: &str, max: usize) -> String {
    let one_line: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max - 1).collect::<String>())
    }
}

/// Prints rows as a left-aligned table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len() - 1;
        let s: Vec<String> =
            cells.into_iter().enumerate().map(|(i, c)| if i == last { c } else { format!("{c:<w$}", w = widths[i]) }).collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

pub fn short_time(ts: &str) -> String {
    // 2026-11-30T09:13:05.123456Z → 2026-11-30 09:13:05
    ts.get(..19).map(|s| s.replace('T', " ")).unwrap_or_else(|| ts.to_string())
}

impl Printer {
    fn print_json(&self, v: serde_json::Value) {
        println!("{v}");
    }

    pub fn remembered(&self, r: &Remembered) {
        if self.json {
            self.print_json(json!(r));
        } else if r.deduped {
            println!("already remembered as #{}", r.id);
        } else {
            println!("remembered #{}", r.id);
        }
    }

    pub fn recalled(&self, r: &Recalled) {
        if self.json {
            self.print_json(json!(r));
            return;
        }
        if r.hits.is_empty() {
            println!("no memories match");
            return;
        }
        // An EXPIRES column only when some hit expires: most stores have none.
        let expiring = r.hits.iter().any(|h| h.expires_at.is_some());
        let rows: Vec<Vec<String>> = r
            .hits
            .iter()
            .map(|h| {
                let mut row = vec![h.id.to_string(), format!("{:.3}", h.score), cell(&h.tags.join(","), 24), short_time(&h.created_at)];
                if expiring {
                    row.push(h.expires_at.as_deref().map_or_else(|| "-".to_string(), short_time));
                }
                row.push(cell(&h.content, 80));
                row
            })
            .collect();
        if expiring {
            table(&["ID", "SCORE", "TAGS", "CREATED", "EXPIRES", "CONTENT"], &rows);
        } else {
            table(&["ID", "SCORE", "TAGS", "CREATED", "CONTENT"], &rows);
        }
    }

    pub fn memories(&self, ms: &[Memory]) {
        if self.json {
            self.print_json(json!({"memories": ms}));
            return;
        }
        if ms.is_empty() {
            println!("no memories");
            return;
        }
        let expiring = ms.iter().any(|m| m.expires_at.is_some());
        let rows: Vec<Vec<String>> = ms
            .iter()
            .map(|m| {
                let mut row = vec![m.id.to_string(), m.kind.as_str().to_string(), cell(&m.tags.join(","), 24), short_time(&m.created_at)];
                if expiring {
                    row.push(m.expires_at.as_deref().map_or_else(|| "-".to_string(), short_time));
                }
                row.push(cell(&m.content, 80));
                row
            })
            .collect();
        if expiring {
            table(&["ID", "KIND", "TAGS", "CREATED", "EXPIRES", "CONTENT"], &rows);
        } else {
            table(&["ID", "KIND", "TAGS", "CREATED", "CONTENT"], &rows);
        }
    }

    pub fn forgotten(&self, ids: &[i64]) {
        if self.json {
            self.print_json(json!({"forgotten": ids}));
        } else if ids.is_empty() {
            println!("nothing to forget");
        } else {
            let list: Vec<String> = ids.iter().map(|i| format!("#{i}")).collect();
            println!("forgot {}", list.join(" "));
        }
    }

    pub fn status(&self, s: &Status) {
        if self.json {
            self.print_json(json!(s));
            return;
        }
        let opt = |p: &Option<PathBuf>| p.as_ref().map_or("-".to_string(), |p| p.display().to_string());
        let rows = vec![
            vec!["data dir".into(), s.data_dir.display().to_string()],
            vec!["database".into(), s.db_path.display().to_string()],
            vec!["schema".into(), format!("v{}", s.schema_version)],
            vec!["memories".into(), s.memories.to_string()],
            vec!["ledger laps".into(), s.laps.to_string()],
            vec!["model".into(), s.model.clone()],
            vec![
                "model files".into(),
                s.model_error.clone().unwrap_or_else(|| match &s.models_source {
                    Some(from) => format!("{} ({from})", opt(&s.model_dir)),
                    None => opt(&s.model_dir),
                }),
            ],
            vec!["runtime".into(), opt(&s.runtime)],
            vec!["index".into(), format!("{} (HNSW from {} memories, in long-lived processes)", s.index.mode, s.index.hnsw_min_memories)],
            vec!["memory".into(), memory_line(&s.memory)],
            vec!["access".into(), if s.read_only { "read-only".into() } else { "read-write".into() }],
            vec!["created".into(), s.created_at.clone().unwrap_or_else(|| "-".into())],
            vec!["integrity".into(), s.integrity.clone()],
        ];
        table(&["FIELD", "VALUE"], &rows);
    }

    pub fn imported(&self, s: &ImportSummary) {
        if self.json {
            self.print_json(json!(s));
            return;
        }
        for sk in &s.skipped {
            eprintln!("slm: line {}: skipped: {}", sk.line, sk.error);
        }
        let records = if s.records > 0 { format!(" (and {} loop records)", s.records) } else { String::new() };
        println!("imported {} new{records}, {} already stored, {} skipped, of {} lines", s.imported, s.deduped, s.skipped.len(), s.lines);
    }

    /// An import that stopped on an error: what was committed, and how to resume. The error
    /// itself is reported by the caller.
    pub fn import_stopped(&self, s: &ImportSummary) {
        if self.json {
            self.print_json(json!(s));
        }
        for sk in &s.skipped {
            eprintln!("slm: line {}: skipped: {}", sk.line, sk.error);
        }
        let through = match s.last_committed_line {
            0 => "no line was committed".to_string(),
            n => format!("every line up to {n} is committed"),
        };
        eprintln!(
            "slm: import stopped after reading {} lines: {} imported, {} already stored, {} skipped; {through}. \
             Re-run the same import to resume: lines already stored are deduplicated, never stored twice.",
            s.lines,
            s.imported,
            s.deduped,
            s.skipped.len()
        );
    }
}

/// `12 MB resident (3 MB private, 9 MB file-backed); maps 150 MB of vectors, 4 MB of graph`.
fn memory_line(m: &slm::memstat::ProcessMemory) -> String {
    let mb = |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{} MB", b.div_ceil(1 << 20)));
    let mut line = format!("{} resident ({} private, {} file-backed)", mb(m.rss_bytes), mb(m.anon_bytes), mb(m.file_bytes));
    if m.vectors_mapped_bytes > 0 || m.graph_mapped_bytes > 0 {
        line += &format!("; maps {} of vectors, {} of graph", mb(Some(m.vectors_mapped_bytes)), mb(Some(m.graph_mapped_bytes)));
    }
    if m.graph_private {
        line += "; building the graph (held privately until it is saved)";
    }
    line
}
