//! slm's own gate verifier (`model`, issue #25) through the real binary: the shipped model's
//! checksums, its accuracy on the corpus' test split and on the dev set (`slm gate eval`, the
//! default chain), its lazy loading, and the errors of a damaged or missing model file.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{expect_exit, slm_bin, Root};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn verifier_dir() -> PathBuf {
    repo().join("models/verifier")
}

/// The last stdout line as JSON (a loop run prints its laps first).
fn last_json(out: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `slm gate eval FILE --json` with the given extra flags.
fn eval(file: &Path, extra: &[&str]) -> Value {
    let out = std::process::Command::new(slm_bin()).arg("gate").arg("eval").arg(file).args(extra).arg("--json").output().unwrap();
    expect_exit(&out, 0, "gate eval");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (right among the passable pairs, pairs passable, false passes, near misses) at one
/// threshold: true signals below the threshold are not passable by any verifier.
fn passable(t: &Value) -> (u64, u64, u64, u64) {
    let a = &t["all"];
    let n = |k: &str| a[k].as_u64().unwrap();
    (n("right"), n("pairs") - n("below_threshold"), n("false_passes"), n("near_misses"))
}

#[test]
fn the_shipped_verifier_matches_its_checksums() {
    let dir = verifier_dir();
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let mut names = Vec::new();
    for line in sums.lines() {
        let (sum, name) = line.split_once("  ").unwrap();
        let bytes = std::fs::read(dir.join(name)).unwrap();
        use sha2::Digest;
        let got: String = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, sum, "{name}");
        names.push(name.to_string());
    }
    assert_eq!(names, ["model.onnx", "tokenizer.json", "config.json"]);
    let size = std::fs::metadata(dir.join("model.onnx")).unwrap().len();
    assert!(size <= 30 * 1024 * 1024, "model.onnx is {size} bytes, the repository allows 30 MB");
}

/// The shipped model's figures with the default chain (models/verifier/README.md), as
/// regression floors a little below what was measured: (gate_min_score, least right among
/// the passable pairs, most near misses passing), as fractions. Issue #25's bar (0.95 right,
/// 0.02 passing) is not reached yet; these hold the model where it is (round 16, one pair a
/// run, on the split with round 17's topics: 0.3 90.6 % / 4.2 %, 0.5 92.6 % / 3.3 %). The
/// verdicts do not depend on their batch, so the figures are exact from run to run.
const TEST_SPLIT_FLOORS: [(f64, f64, f64); 2] = [(0.3, 0.900, 0.045), (0.5, 0.920, 0.035)];
/// Right answers on tests/data/gate-dev.tsv (25 pairs) at 0.3 and 0.5, at least. Round 16
/// scores 22 (round 13 scored 23): it never saw these pairs (round 8, which scored 24, was
/// trained on copies of five of them; see the model card). No near miss of the file passes.
const DEV_SET_FLOOR: u64 = 22;

#[test]
fn the_default_gate_holds_its_measured_accuracy_on_the_test_split_and_the_dev_set() {
    let r = eval(&repo().join("data/gate/test.tsv"), &["--gate-min-score", "0.3", "--gate-min-score", "0.5"]);
    assert!(r["verifiers"].as_array().unwrap().iter().any(|v| v == "model"), "the default chain runs the model: {r}");
    for (t, (s, right_min, fp_max)) in r["thresholds"].as_array().unwrap().iter().zip(TEST_SPLIT_FLOORS) {
        let (right, pairs, fp, near) = passable(t);
        assert_eq!(t["gate_min_score"].as_f64().unwrap(), s);
        assert!(pairs >= 1000, "the test split is too small to measure: {pairs}");
        assert!(right as f64 >= right_min * pairs as f64, "at {s}: right {right}/{pairs} (< {right_min}): {}", t["per_category"]);
        assert!(fp as f64 <= fp_max * near as f64, "at {s}: {fp}/{near} near misses pass (> {fp_max}): {}", t["per_category"]);
    }
    let r = eval(&repo().join("tests/data/gate-dev.tsv"), &["--gate-min-score", "0.3", "--gate-min-score", "0.5"]);
    for t in r["thresholds"].as_array().unwrap() {
        let right = t["all"]["right"].as_u64().unwrap();
        assert!(right >= DEV_SET_FLOOR, "dev set at {}: {right}/25: {}", t["gate_min_score"], r["errors"]);
        // Its 14 near misses ("NOT approved" for "approved" and the like) never pass.
        assert_eq!(t["all"]["false_passes"], 0, "dev set at {}: {}", t["gate_min_score"], r["errors"]);
    }
}

/// A verdict is a function of (query, memory, model) (SPEC §4): the int8 model's activation
/// scale is per ONNX Runtime call, so the verifier runs one pair a call. Before that, these
/// seed pairs scored 0.90 beside a sibling and 0.51 alone (round 12), or 0.99 and 0.57
/// (round 13). The probabilities must be bit-for-bit the same alone and in company, whatever
/// the company's lengths.
#[test]
fn a_verdict_does_not_depend_on_the_pairs_verified_beside_it() {
    use slm::loops::verify::model::VerifierModel;
    let model = VerifierModel::load(&verifier_dir()).unwrap();
    let long = "status update: ".to_string() + &"the nightly job ran, the cache was warmed, the logs rotated; ".repeat(12);
    let cases = [
        (
            "database migration complete",
            "the schema migration of the orders database completed without errors",
            "migration of the orders database failed at step 3 and was rolled back",
        ),
        ("invoice 1031 paid", "invoice 1031 is overdue and unpaid", "payment received for invoice 1031"),
    ];
    for (query, memory, sibling) in cases {
        let alone = model.probabilities(query, &[memory]).unwrap()[0];
        for company in [vec![sibling, memory], vec![memory, sibling, long.as_str()], vec![long.as_str(), memory]] {
            let probs = model.probabilities(query, &company).unwrap();
            let at = company.iter().position(|m| *m == memory).unwrap();
            assert_eq!(probs[at].to_bits(), alone.to_bits(), "{query:?} <- {memory:?}: {} alone, {} beside {company:?}", alone, probs[at]);
        }
    }
}

#[test]
fn gate_check_names_the_model_and_its_probability() {
    let root = Root::new();
    let out = root.run(&[
        "gate",
        "check",
        "--query",
        "deployed to production",
        "--memory",
        "image built and pushed to the registry",
        "--gate-verify",
        "model",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    expect_exit(&out, 3, "gate check on another step of the workflow");
    assert!(text.contains("model: rejects: the verifier gives 0."), "{text}");
    assert!(text.contains("that it says \"deployed to production\""), "{text}");
    let out = root.run(&[
        "gate",
        "check",
        "--query",
        "deployed to production",
        "--memory",
        "the deploy to production is done, all pods healthy",
        "--gate-verify",
        "model",
    ]);
    expect_exit(&out, 0, "gate check on a true signal");
}

#[test]
fn gate_eval_refuses_a_malformed_file_naming_the_line_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("query\tmemory\tlabel\nq\tm\t1\nq\tm2\tmaybe\n", "invalid label", "line 3"),
        ("query\tmemory\tlabel\nq\tm\t1\nq\tm2\n", "invalid line", "line 3"),
        ("query\tmemory\nq\tm\n", "invalid label", "header"),
    ];
    for (text, field, line) in cases {
        let f = tmp.path().join("pairs.tsv");
        std::fs::write(&f, text).unwrap();
        let out = std::process::Command::new(slm_bin()).args(["gate", "eval"]).arg(&f).output().unwrap();
        let err = expect_exit(&out, 2, "gate eval on a malformed file");
        assert!(err.contains(field) && err.contains(line), "{field}, {line}: {err}");
    }
    let out = std::process::Command::new(slm_bin()).args(["gate", "eval", "/nonexistent/pairs.tsv"]).output().unwrap();
    assert!(expect_exit(&out, 2, "gate eval on a missing file").contains("invalid file"));
}

/// A copy of the shipped model with one file damaged (or removed).
fn broken_copy(tmp: &Path, damage: &str) -> PathBuf {
    let dir = tmp.join("verifier");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["model.onnx", "tokenizer.json", "config.json", "SHA256SUMS"] {
        std::fs::copy(verifier_dir().join(name), dir.join(name)).unwrap();
    }
    match damage {
        "missing" => std::fs::remove_file(dir.join("model.onnx")).unwrap(),
        _ => {
            let mut bytes = std::fs::read(dir.join("model.onnx")).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
            std::fs::write(dir.join("model.onnx"), bytes).unwrap();
        }
    }
    dir
}

#[test]
fn a_damaged_or_missing_model_is_an_error_naming_the_file_and_no_loop_passes_unverified() {
    for damage in ["damaged", "missing"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = broken_copy(tmp.path(), damage);
        let root = Root::new();
        let run = |extra: &[&str]| {
            let mut a = vec!["loop", "run", "--name", "ship", "--gate-query", "deployed to production", "--gate-min-score", "0.5"];
            a.extend_from_slice(extra);
            a.push("--json");
            root.cmd(&a).env("SLM_VERIFIER_DIR", &dir).output().unwrap()
        };
        // No candidate: the model is never loaded, so the broken file does not matter and the
        // run ends on its bound.
        root.remember("lunch is at noon today", &[]);
        let out = run(&["--max-iterations", "2", "--poll-interval-s", "0.25"]);
        expect_exit(&out, 3, "a run with no candidate loads no model");
        // A candidate: the model must load, fails, and the run does not converge.
        root.remember("v2.3 is deployed to production", &[]);
        let out = run(&["--max-iterations", "2"]);
        let err = expect_exit(&out, 1, &format!("a run whose candidate needs a {damage} model"));
        assert!(err.contains("model.onnx") && err.contains(dir.to_str().unwrap()), "{damage}: {err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("converged"), "{damage}: passed unverified");
        let out = root
            .cmd(&["gate", "check", "--query", "deployed to production", "--memory", "deployed to production"])
            .env("SLM_VERIFIER_DIR", &dir)
            .output()
            .unwrap();
        let err = expect_exit(&out, 1, "gate check with a broken model");
        assert!(err.contains("model.onnx"), "{err}");
    }
}

#[test]
fn at_the_default_threshold_another_agents_unrelated_news_ends_no_loop() {
    // At gate_min_score 0.0 every memory is a candidate, so the verifier is the only judge:
    // the guard let an approval end a wait for a deploy (issue #25).
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &[]);
    let args = [
        "loop",
        "run",
        "--name",
        "deploy",
        "--gate-query",
        "deploy finished",
        "--max-iterations",
        "2",
        "--poll-interval-s",
        "0.25",
        "--json",
    ];
    let out = root.run(&args);
    expect_exit(&out, 3, "a wait for a deploy over an approval");
    let r = last_json(&out);
    assert_eq!(r["status"], "max_iterations", "{r}");
    assert!(r["termination"]["rejected_candidates"].as_u64().unwrap() >= 1, "{r}");
    let good = root.remember("the deploy finished, all pods are healthy", &[]);
    let out = root.run(&args);
    expect_exit(&out, 0, "the deploy signal ends the wait");
    let r = last_json(&out);
    assert_eq!(r["match"]["id"], good, "{r}");
    assert!(r["match"]["verified_by"].as_array().unwrap().iter().any(|v| v == "model"), "{r}");
}

/// What each check adds to the shipped model on the corpus' dev split (where choices are
/// made), counted over the pairs the model passes: near misses only that check stops, and true
/// signals only it blocks. `guard:entities` (the default chain's other verifier) must still
/// stop the wrong numbers, months and environments the model passes, or it has no place in
/// the default chain;
/// the full `guard` beside the model must block more true signals than it stops near misses
/// (why the default chain is not `guard, model`: the model has made its polarity rules
/// redundant, and they remain for the model-free `guard` alone). Each guard rule's share is
/// printed for the closing notes (issue #27).
#[test]
fn beside_the_model_entities_stop_wrong_numbers_and_the_guard_blocks_more_than_it_stops() {
    use slm::loops::verify::entities::Entities;
    use slm::loops::verify::guard::Guard;
    use slm::loops::verify::model::VerifierModel;
    let text = std::fs::read_to_string(repo().join("data/gate/dev.tsv")).unwrap();
    let mut by_query: std::collections::BTreeMap<String, Vec<(String, bool)>> = Default::default();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        by_query.entry(f[0].to_string()).or_default().push((f[1].to_string(), f[2] == "1"));
    }
    let model = VerifierModel::load(&verifier_dir()).unwrap();
    let names = Guard::rule_names();
    // (near misses stopped, true signals blocked): by entities, by the whole guard, and by
    // each guard rule alone (those the guard without it lets through).
    let (mut entities, mut guard) = ((0, 0), (0, 0));
    let mut rule = vec![(0usize, 0usize); names.len()];
    let count = |w: &mut (usize, usize), label: bool| if label { w.1 += 1 } else { w.0 += 1 };
    let mut pairs = 0;
    let mut blocked = Vec::new();
    for (query, rows) in &by_query {
        let memories: Vec<&str> = rows.iter().map(|(m, _)| m.as_str()).collect();
        let p = model.probabilities(query, &memories).unwrap();
        let (all, ents) = (Guard::new(query), Entities::new(query));
        let without: Vec<Guard> = names.iter().map(|n| Guard::without(query, n)).collect();
        for ((memory, label), p) in rows.iter().zip(p) {
            pairs += 1;
            if p < model.min() {
                continue; // the model blocks it: nothing beside it decides
            }
            if ents.check(memory).is_err() {
                count(&mut entities, *label);
                if *label {
                    blocked.push(format!("{query:?} <- {memory:?}"));
                }
            }
            if all.check(memory).is_ok() {
                continue;
            }
            count(&mut guard, *label);
            for (k, g) in without.iter().enumerate() {
                if g.check(memory).is_ok() {
                    count(&mut rule[k], *label);
                }
            }
        }
    }
    assert!(pairs > 2000, "the dev split was read ({pairs} pairs)");
    eprintln!("beside the model on dev ({pairs} pairs): near misses stopped / true signals blocked");
    eprintln!("  guard:entities {} / {}", entities.0, entities.1);
    for b in &blocked {
        eprintln!("    blocked: {b}");
    }
    eprintln!("  guard          {} / {}   (only this rule:)", guard.0, guard.1);
    for (n, (stops, blocks)) in names.iter().zip(&rule) {
        eprintln!("    {n:<12} {stops:>4} / {blocks}");
    }
    // A near miss passed ends a wait on the wrong work; a true signal blocked makes it wait
    // longer, within its bounds. Measured with this model: 10 stopped (numbers, months and
    // environments the model reads past), 11 blocked (paraphrased numbers: "five weeks" for
    // "35 days", "the legacy CI box" for "jenkins-01").
    assert!(
        entities.0 >= 8,
        "guard:entities beside the model stops only {} near misses (blocks {}): reconsider it",
        entities.0,
        entities.1
    );
    assert!(
        guard.1 > guard.0,
        "the guard beside the model now stops {} near misses for {} true signals: reconsider the default chain",
        guard.0,
        guard.1
    );
}
