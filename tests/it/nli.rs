//! The gate's NLI verifier (`nli:DIR`) through its real Rust path: ONNX Runtime, the
//! `tokenizers` pair encoding, batching with padding, and id2label mapping. The model is the
//! tiny deterministic one scripts/make-nli-test-model.py builds with the `onnx` package (in
//! `target/pyenv`, installed by scripts/test.sh); its rule: "not" in the premise →
//! contradiction, else entailment, and attended padding → neutral. Labels are ordered
//! contradiction, entailment, neutral, so P(entailment) is e^3/(e^3+2) or 1/(e^3+2).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use slm::nli::NliModel;

const ENTAILS: f32 = 0.909_443; // e^3 / (e^3 + 2)
const CONTRADICTS: f32 = 0.045_278; // 1 / (e^3 + 2)

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds the test model once per test process; `None` (after saying so) when the test venv
/// is absent, i.e. scripts/test.sh has not been run on this machine.
pub(crate) fn model_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let python = manifest().join("target/pyenv/bin/python");
        if !python.exists() {
            eprintln!(
                "SKIPPED: {} is missing; run scripts/test.sh (it installs onnx into target/pyenv) to run the NLI tests",
                python.display()
            );
            return None;
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nli-test-model");
        let out = Command::new(&python)
            .arg(manifest().join("scripts/make-nli-test-model.py"))
            .arg(&dir)
            .arg(manifest().join("models/all-MiniLM-L6-v2/tokenizer.json"))
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "make-nli-test-model.py failed (is onnx installed in target/pyenv? run scripts/test.sh):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(dir)
    })
    .as_deref()
}

fn model() -> Option<&'static NliModel> {
    static MODEL: OnceLock<Option<NliModel>> = OnceLock::new();
    MODEL.get_or_init(|| model_dir().map(|d| NliModel::load(d).expect("load the test NLI model"))).as_ref()
}

fn close(got: f32, want: f32) -> bool {
    (got - want).abs() < 1e-4
}

#[test]
fn nli_entailing_and_contradicting_pairs_in_one_padded_batch() {
    let Some(m) = model() else { return };
    assert_eq!(m.labels(), ["contradiction", "entailment", "neutral"]);
    let pairs = [
        // the longest pair: every other row is padded to it, and padding must be masked out
        ("review complete: PR #42 is approved by the whole team after a second look on Monday", "PR 42 approved"),
        ("PR 42 is NOT approved", "PR 42 approved"),
        ("PR 42 is approved", "PR 42 approved"),
        // "not" only in the hypothesis (segment 1) does not count: token_type_ids are right
        ("PR 42 is approved", "is PR 42 not approved?"),
        ("ok", "ok"),
    ];
    let p = m.entailment(&pairs).unwrap();
    assert_eq!(p.len(), pairs.len());
    assert!(p[0] > 0.5 && p[1] < 0.5, "{p:?}");
    let want = [ENTAILS, CONTRADICTS, ENTAILS, ENTAILS, ENTAILS];
    for (i, (got, want)) in p.iter().zip(want).enumerate() {
        assert!(close(*got, want), "pair {i} {:?}: P(entailment) {got}, want {want}", pairs[i]);
    }
    // The same answer one pair at a time (no padding at all).
    for (pair, batched) in pairs.iter().zip(&p) {
        let alone = m.entailment(&[*pair]).unwrap()[0];
        assert!(close(alone, *batched), "{pair:?}: alone {alone}, batched {batched}");
    }
}

#[test]
fn nli_many_pairs_span_several_batches_in_order() {
    let Some(m) = model() else { return };
    let premises: Vec<String> = (0..37)
        .map(|i| if i % 3 == 0 { format!("build {i} did not pass") } else { format!("build {i} passed {}", "ok ".repeat(i)) })
        .collect();
    let pairs: Vec<(&str, &str)> = premises.iter().map(|p| (p.as_str(), "the build passed")).collect();
    let p = m.entailment(&pairs).unwrap();
    assert_eq!(p.len(), 37);
    for (i, got) in p.iter().enumerate() {
        let want = if i % 3 == 0 { CONTRADICTS } else { ENTAILS };
        assert!(close(*got, want), "pair {i}: {got}, want {want}");
    }
    assert!(m.entailment(&[]).unwrap().is_empty());
}

#[test]
fn nli_long_pairs_are_truncated_to_the_tokenizers_length() {
    let Some(m) = model() else { return };
    // MiniLM's tokenizer.json truncates at 128; "not" past that is cut off, so it entails.
    assert_eq!(m.max_len(), 128);
    let long = format!("{} not", "approved ".repeat(300));
    let p = m.entailment(&[(long.as_str(), "approved"), ("approved not", "approved")]).unwrap();
    assert!(close(p[0], ENTAILS) && close(p[1], CONTRADICTS), "{p:?}");
}

/// A copy of the test model's folder, minus `drop`, with config.json replaced if given.
fn broken_copy(drop: Option<&str>, config: Option<&str>) -> Option<tempfile::TempDir> {
    let src = model_dir()?;
    let tmp = tempfile::tempdir().unwrap();
    for name in ["model.onnx", "tokenizer.json", "config.json"] {
        if Some(name) != drop {
            std::fs::copy(src.join(name), tmp.path().join(name)).unwrap();
        }
    }
    if let Some(c) = config {
        std::fs::write(tmp.path().join("config.json"), c).unwrap();
    }
    Some(tmp)
}

fn expect_invalid(dir: &Path, names: &str) {
    let err = NliModel::load(dir).expect_err("load must fail");
    assert!(err.is_invalid_input(), "{err:?}");
    assert_eq!(err.field(), Some("gate_verify"), "{err}");
    assert!(err.to_string().contains(names), "message should name {names}: {err}");
}

#[test]
fn nli_missing_or_wrong_files_are_invalid_gate_verify_input() {
    // Needs no model: the folder does not exist.
    let tmp = tempfile::tempdir().unwrap();
    expect_invalid(&tmp.path().join("no-such-nli"), "no-such-nli");
    expect_invalid(tmp.path(), "model.onnx");

    let Some(_) = model_dir() else { return };
    for name in ["model.onnx", "tokenizer.json", "config.json"] {
        let d = broken_copy(Some(name), None).unwrap();
        expect_invalid(d.path(), name);
    }
    let no_entailment = r#"{"id2label": {"0": "contradiction", "1": "neutral"}}"#;
    expect_invalid(broken_copy(None, Some(no_entailment)).unwrap().path(), "no entailment label");
    let generic = r#"{"id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}"#;
    expect_invalid(broken_copy(None, Some(generic)).unwrap().path(), "config.json id2label has no entailment");
    // A label count that does not match the model's output is caught at inference, not guessed.
    let two = broken_copy(None, Some(r#"{"id2label": {"0": "entailment", "1": "not_entailment"}}"#)).unwrap();
    let m = NliModel::load(two.path()).unwrap();
    let err = m.entailment(&[("a", "b")]).unwrap_err();
    assert!(err.to_string().contains("want [1, 2]"), "{err}");
    // A file that is not an ONNX model names model.onnx.
    let junk = broken_copy(None, None).unwrap();
    std::fs::write(junk.path().join("model.onnx"), b"not a model").unwrap();
    expect_invalid(junk.path(), "model.onnx");
}
