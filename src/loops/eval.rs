//! `slm gate eval`: measure the gate on a file of labelled (query, memory) pairs.
//!
//! A user should not have to trust the gate on our word: this runs every pair through the
//! same two stages a lap uses (exact cosine against each threshold, then the verifier chain,
//! every verifier of which must accept) and counts, per threshold and per category, the
//! pairs it got right, the near misses it let through (false passes) and the true signals it
//! blocked (false blocks). Verification does not depend on the threshold, so each pair is
//! verified once and the thresholds only decide which pairs were candidates.
//!
//! The file is a TSV with a header naming its columns: `query`, `memory`, and `label` (or
//! `should_pass`, as in the dev set) with 1 = the gate should pass; `category` is optional.
//! Any other column is ignored, so the training corpus (`data/gate/*.tsv`) reads as it is.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::verify::{model, Candidate, Chain};
use crate::embed::Embedder;
use crate::record::VerifySpec;
use crate::{Error, Result};

/// One labelled pair.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalPair {
    /// Its line in the file (1-based, the header is line 1).
    pub line: usize,
    pub query: String,
    pub memory: String,
    pub should_pass: bool,
    pub category: String,
}

/// Counts for one threshold, over all pairs or one category.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Counts {
    pub pairs: usize,
    pub right: usize,
    /// Near misses (should not pass) that passed.
    pub false_passes: usize,
    pub near_misses: usize,
    /// True signals (should pass) that did not.
    pub false_blocks: usize,
    pub true_signals: usize,
    /// True signals whose cosine is below the threshold: no verifier could pass them.
    pub below_threshold: usize,
}

impl Counts {
    fn add(&mut self, should_pass: bool, passed: bool, candidate: bool) {
        self.pairs += 1;
        self.right += usize::from(should_pass == passed);
        if should_pass {
            self.true_signals += 1;
            self.false_blocks += usize::from(!passed);
            self.below_threshold += usize::from(!candidate);
        } else {
            self.near_misses += 1;
            self.false_passes += usize::from(passed);
        }
    }
}

/// The figures at one threshold.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ThresholdReport {
    pub gate_min_score: f64,
    pub all: Counts,
    pub per_category: BTreeMap<String, Counts>,
}

/// What `slm gate eval` prints.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvalReport {
    pub pairs: usize,
    pub verifiers: Vec<String>,
    pub thresholds: Vec<ThresholdReport>,
    /// Pairs the gate got wrong at the first threshold, for reading (at most 200).
    pub errors: Vec<EvalError>,
}

/// A pair the gate decided wrongly.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EvalError {
    pub line: usize,
    pub query: String,
    pub memory: String,
    pub should_pass: bool,
    pub score: f32,
    pub category: String,
    /// The first verifier's refusal, when one refused.
    pub refused_by: Option<String>,
}

/// Parses the TSV text. Line numbers are 1-based and count the header; a malformed line is
/// invalid input naming its line and field.
pub fn parse_tsv(text: &str) -> Result<Vec<EvalPair>> {
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = loop {
        match lines.next() {
            Some((_, l)) if l.trim().is_empty() => continue,
            Some((_, l)) => break l.split('\t').map(str::trim).collect(),
            None => return Err(Error::invalid("file", "(empty)", "needs a header line naming query, memory and label")),
        }
    };
    let col = |names: &[&str]| header.iter().position(|h| names.contains(h));
    let need = |names: &[&str], field: &'static str| {
        col(names).ok_or_else(|| Error::invalid(field, format!("header {:?}", header.join(" ")), "the header must name this column"))
    };
    let (q, m, l) = (need(&["query"], "query")?, need(&["memory"], "memory")?, need(&["label", "should_pass"], "label")?);
    let c = col(&["category"]);
    let mut out = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != header.len() {
            return Err(Error::invalid(
                "line",
                format!("line {n}: {} fields", f.len()),
                format!("every line needs the header's {} tab-separated fields", header.len()),
            ));
        }
        let text = |idx: usize, field: &'static str| -> Result<String> {
            let v = f[idx].trim();
            if v.is_empty() {
                return Err(Error::invalid(field, format!("line {n}: empty"), "must not be empty"));
            }
            Ok(v.to_string())
        };
        let should_pass = match f[l].trim() {
            "1" => true,
            "0" => false,
            other => return Err(Error::invalid("label", format!("line {n}: {other:?}"), "must be 1 (should pass) or 0")),
        };
        out.push(EvalPair {
            line: n,
            query: text(q, "query")?,
            memory: text(m, "memory")?,
            should_pass,
            category: c.map(|c| f[c].trim().to_string()).filter(|s| !s.is_empty()).unwrap_or_else(|| "all".into()),
        });
    }
    if out.is_empty() {
        return Err(Error::invalid("file", "no pairs", "needs at least one line after the header"));
    }
    Ok(out)
}

/// Texts embedded per call.
const EMBED_BATCH: usize = 64;

/// Runs every pair through the gate at each threshold with the verifier chain `specs`.
/// No store is involved: the pairs are embedded with `embedder`, as a lap would embed them.
pub fn gate_eval(
    embedder: &dyn Embedder,
    pairs: &[EvalPair],
    thresholds: &[f64],
    specs: &[VerifySpec],
    nli_min: f64,
) -> Result<EvalReport> {
    // Exact cosine of every pair, each distinct text embedded once.
    let mut texts: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for p in pairs {
        for t in [p.query.as_str(), p.memory.as_str()] {
            index.entry(t).or_insert_with(|| {
                texts.push(t);
                texts.len() - 1
            });
        }
    }
    let mut vectors = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(EMBED_BATCH) {
        let m = embedder.embed(chunk)?;
        vectors.extend(m.outer_iter().map(|r| r.to_vec()));
    }
    let score = |p: &EvalPair| crate::spaces::cosine(&vectors[index[p.query.as_str()]], &vectors[index[p.memory.as_str()]]);

    // The model's verdicts in batches per query (they are cached, so the chain below reuses them).
    if specs.contains(&VerifySpec::Model) {
        let mut by_query: HashMap<&str, Vec<&str>> = HashMap::new();
        for p in pairs {
            by_query.entry(&p.query).or_default().push(&p.memory);
        }
        for (q, ms) in by_query {
            model::probabilities(q, &ms)?;
        }
    }

    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut chains: HashMap<&str, Chain> = HashMap::new();
    let mut verdicts = Vec::with_capacity(pairs.len());
    for p in pairs {
        let chain = match chains.entry(&p.query) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Chain::build(specs, &p.query, nli_min)?),
        };
        let s = score(p);
        let c = Candidate { id: 0, content: p.memory.clone(), tags: Vec::new(), score: s };
        let v = chain.verify(std::slice::from_ref(&c), deadline)?;
        let refused = v.rejected.first().map(|r| format!("{}: {} ({})", r.verifier, r.reason, r.rule));
        verdicts.push((s, v.accepted.is_some(), refused));
    }
    // The chain's names, from the specs (building another chain would load an nli: model again).
    let verifiers: Vec<String> = specs.iter().filter(|s| **s != VerifySpec::None).map(VerifySpec::name).collect();

    let mut reports = Vec::with_capacity(thresholds.len());
    let mut errors = Vec::new();
    for (ti, &t) in thresholds.iter().enumerate() {
        let mut all = Counts::default();
        let mut per: BTreeMap<String, Counts> = BTreeMap::new();
        for (p, (s, accepted, refused)) in pairs.iter().zip(&verdicts) {
            let candidate = f64::from(*s) >= t;
            let passed = candidate && *accepted;
            all.add(p.should_pass, passed, candidate);
            per.entry(p.category.clone()).or_default().add(p.should_pass, passed, candidate);
            if ti == 0 && passed != p.should_pass && errors.len() < 200 {
                errors.push(EvalError {
                    line: p.line,
                    query: p.query.clone(),
                    memory: p.memory.clone(),
                    should_pass: p.should_pass,
                    score: *s,
                    category: p.category.clone(),
                    refused_by: if candidate { refused.clone() } else { Some(format!("below the threshold {t}")) },
                });
            }
        }
        reports.push(ThresholdReport { gate_min_score: t, all, per_category: per });
    }
    Ok(EvalReport { pairs: pairs.len(), verifiers, thresholds: reports, errors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dev_set_and_the_corpus_layouts_parse() {
        let dev =
            parse_tsv("query\tmemory\tshould_pass\nPR 1 approved\tPR 1 is approved\t1\n\nPR 1 approved\tPR 1: NOT approved\t0\n").unwrap();
        assert_eq!(dev.len(), 2);
        assert!(dev[0].should_pass && !dev[1].should_pass);
        assert_eq!(dev[0].category, "all");
        let corpus = parse_tsv("query\tmemory\tlabel\tcategory\tdomain\nq\tm\t0\tnegation\tci\n").unwrap();
        assert_eq!(corpus[0].category, "negation");
    }

    #[test]
    fn a_malformed_file_names_the_line_and_the_field() {
        let cases = [
            ("", "file"),
            ("query\tmemory\n", "label"),
            ("memory\tlabel\n", "query"),
            ("query\tmemory\tlabel\nq\tm\tyes\n", "label"),
            ("query\tmemory\tlabel\nq\tm\n", "line"),
            ("query\tmemory\tlabel\nq\t \t1\n", "memory"),
            ("query\tmemory\tlabel\n", "file"),
        ];
        for (text, field) in cases {
            let e = parse_tsv(text).unwrap_err();
            assert_eq!(e.field(), Some(field), "{text:?}: {e}");
        }
        let e = parse_tsv("query\tmemory\tlabel\nq\tm\t1\nq\tm\t2\n").unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
    }
}
