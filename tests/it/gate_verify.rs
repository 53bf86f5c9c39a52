//! Gate verification end to end (issue #10): the real binary, the real embedding model, the
//! generated NLI test model, several processes. Cosine finds candidates; the verifier chain
//! (guard by default, `none`, `cmd:`, `nli:`) decides, and every rejection is recorded.

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{expect_exit, wait_running, Root};

const QUERY: &str = "PR #42 approved";
const NOT_APPROVED: &str = "review of PR #42: NOT approved, changes requested";
const APPROVED: &str = "review complete: PR #42 is approved";

/// The last stdout line as JSON.
fn parse(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

/// `slm loop run ARGS --json` (the README example's bounds unless ARGS overrides them).
fn loop_args<'a>(name: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["loop", "run", "--name", name, "--gate-query", QUERY, "--gate-min-score", "0.5", "--poll-interval-s", "0.5"];
    a.extend_from_slice(extra);
    a.push("--json");
    a
}

fn run_loop(root: &Root, name: &str, extra: &[&str]) -> Output {
    root.run(&loop_args(name, extra))
}

fn spawn_loop(root: &Root, name: &str, extra: &[&str]) -> Child {
    root.cmd(&loop_args(name, extra)).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn loop run")
}

/// The rejections recorded on lap `lap` of `run_id` (`slm loop show`).
fn lap_rejections(root: &Root, run_id: &str, lap: usize) -> Vec<Value> {
    let s = root.json(&["loop", "show", run_id]);
    let l = &s["laps"][lap - 1];
    assert_eq!(l["lap"], lap as i64, "{s}");
    l["rejected"].as_array().unwrap_or_else(|| panic!("lap {lap} has no rejected list: {l}")).clone()
}

/// The generated NLI test model (tests/it/nli.rs builds it); these tests require it.
fn nli_dir() -> &'static Path {
    crate::nli::model_dir().expect("the NLI test model needs target/pyenv with onnx: run scripts/test.sh")
}

#[test]
fn readme_example_no_longer_converges_on_not_approved_and_converges_on_the_approval() {
    let root = Root::new();
    let bad = root.remember(NOT_APPROVED, &[]);

    // The default chain (guard) rejects the contradiction: the run ends on its bound.
    let out = run_loop(&root, "pr-42", &["--max-wallclock-s", "3"]);
    expect_exit(&out, 3, "loop run on the NOT-approved memory");
    let r = parse(&out);
    assert_eq!(r["status"], "max_wallclock", "{r}");
    assert!(r.get("match").is_none_or(Value::is_null), "no match expected: {r}");
    assert!(r["termination"]["rejected_candidates"].as_u64().unwrap() >= 1, "{r}");
    let run_id = r["run_id"].as_str().unwrap();
    let rej = lap_rejections(&root, run_id, 1);
    assert_eq!(rej.len(), 1, "{rej:?}");
    assert_eq!(rej[0]["id"], bad);
    assert_eq!(rej[0]["verifier"], "model");
    assert_eq!(rej[0]["rule"], "model", "{rej:?}");
    assert!(
        rej[0]["reason"].as_str().unwrap().contains("the verifier gives 0.")
            && rej[0]["reason"].as_str().unwrap().contains("PR #42 approved"),
        "{rej:?}"
    );
    // Later laps do not re-verify it, and do not read as if they should have passed.
    let show = root.json(&["loop", "show", run_id]);
    let lap2 = &show["laps"][1];
    assert_eq!(lap2["passed"], false);
    assert!(lap2["detail"].as_str().unwrap().contains("rejected on an earlier lap"), "{lap2}");
    // The human table shows the rejection too.
    let text = String::from_utf8_lossy(&root.run(&["loop", "show", run_id]).stdout).into_owned();
    assert!(text.contains("the verifier gives"), "{text}");

    // A second loop waits; another process remembers the approval; it converges on it.
    let child = spawn_loop(&root, "pr-42", &["--max-wallclock-s", "60", "--max-iterations", "200"]);
    wait_running(&root, "pr-42");
    let good = root.remember(APPROVED, &[]);
    let out = child.wait_with_output().unwrap();
    expect_exit(&out, 0, "loop run after the approval");
    let r = parse(&out);
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], good, "{r}");
    assert_eq!(r["match"]["verified_by"], serde_json::json!(["guard:entities", "model"]), "{r}");
    assert!(r["termination"]["rejected_candidates"].as_u64().unwrap() >= 1, "the NOT-approved memory was rejected first: {r}");

    // `none` asks for plain cosine explicitly: the seed's semantics, converging on the contradiction.
    let root = Root::new();
    let bad = root.remember(NOT_APPROVED, &[]);
    let out = run_loop(&root, "pr-42", &["--max-wallclock-s", "3", "--gate-verify", "none"]);
    expect_exit(&out, 0, "loop run --gate-verify none");
    let r = parse(&out);
    assert_eq!(r["match"]["id"], bad, "{r}");
    assert_eq!(r["match"]["verified_by"], serde_json::json!([]), "{r}");
    assert_eq!(r["termination"]["rejected_candidates"], 0, "{r}");
}

#[test]
fn dev_set_guard_passes_no_near_miss_and_blocks_at_most_one_true_signal() {
    let tsv = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gate-dev.tsv")).unwrap();
    let root = Root::new();
    let (mut right, mut false_pass, mut false_block) = (0, Vec::new(), Vec::new());
    let rows: Vec<&str> = tsv.lines().skip(1).filter(|l| !l.trim().is_empty()).collect();
    assert!(rows.len() >= 25, "the development set has {} rows", rows.len());
    println!("{:<5} {:<6} {:<22} query | memory", "want", "score", "verdict");
    for line in &rows {
        let f: Vec<&str> = line.split('\t').collect();
        let (q, m, want) = (f[0], f[1], f[2] == "1");
        // The guard on its own (the default chain's figures are in gate_model.rs).
        let out = root.run(&["gate", "check", "--query", q, "--memory", m, "--gate-min-score", "0.5", "--gate-verify", "guard", "--json"]);
        let c = parse(&out);
        let passed = c["passed"].as_bool().unwrap();
        // Exit 0 when it would pass, 3 when not.
        expect_exit(&out, if passed { 0 } else { 3 }, "gate check");
        let refusal = c["verifiers"].as_array().unwrap().iter().find_map(|v| v["rule"].as_str().map(String::from));
        let verdict = match refusal {
            Some(rule) => format!("blocked {rule}"),
            _ if passed => "passes".to_string(),
            _ => "below threshold".to_string(),
        };
        println!("{:<5} {:<6.3} {:<22} {q} | {m}", want as u8, c["score"].as_f64().unwrap(), verdict);
        match (want, passed) {
            (true, true) | (false, false) => right += 1,
            (false, true) => false_pass.push(format!("{q} | {m}")),
            (true, false) => false_block.push(format!("{q} | {m}")),
        }
    }
    println!("right {right} / {}, false passes {}, false blocks {}", rows.len(), false_pass.len(), false_block.len());
    assert!(false_pass.is_empty(), "near misses that pass: {false_pass:?}");
    assert!(false_block.len() <= 1, "true signals blocked: {false_block:?}");
    // Nothing was stored by checking texts.
    assert_eq!(root.count(), 0);
}

#[test]
fn cmd_verifier_accepts_rejects_and_is_killed_at_the_deadline() {
    let root = Root::new();
    let bad = root.remember(NOT_APPROVED, &[]);

    // Reject: the command reads the candidate's JSON on stdin and exits 1.
    let grep = "cmd:grep -q 'is approved'";
    let out = run_loop(&root, "cmd", &["--max-wallclock-s", "2", "--gate-verify", grep]);
    expect_exit(&out, 3, "cmd verifier rejecting");
    let r = parse(&out);
    assert!(r["termination"]["rejected_candidates"].as_u64().unwrap() >= 1, "{r}");
    let rej = lap_rejections(&root, r["run_id"].as_str().unwrap(), 1);
    assert_eq!(rej[0]["id"], bad);
    assert_eq!(rej[0]["verifier"], grep);
    assert_eq!(rej[0]["rule"], "exit", "{rej:?}");

    // Accept: the same command on the approving memory.
    let good = root.remember(APPROVED, &[]);
    let out = run_loop(&root, "cmd", &["--max-wallclock-s", "5", "--gate-verify", grep]);
    expect_exit(&out, 0, "cmd verifier accepting");
    let r = parse(&out);
    assert_eq!(r["match"]["id"], good, "{r}");
    assert_eq!(r["match"]["verified_by"], serde_json::json!([grep]), "{r}");

    // The candidate's id in the environment: only the NOT-approved one is accepted, so the
    // better-scoring approval is rejected first and does not hide it.
    let by_id = format!("cmd:test \"$SLM_GATE_MEMORY_ID\" = {bad}");
    let out = run_loop(&root, "cmd", &["--max-wallclock-s", "5", "--gate-verify", &by_id]);
    expect_exit(&out, 0, "cmd verifier by id");
    let r = parse(&out);
    assert_eq!(r["match"]["id"], bad, "{r}");
    assert_eq!(r["termination"]["rejected_candidates"], 1, "{r}");

    // A command slower than the run is killed at the deadline, with its whole process group.
    let marker = format!("30.{}", std::process::id());
    let slow = format!("cmd:sleep {marker}");
    let t = Instant::now();
    let out = run_loop(&root, "slow", &["--max-wallclock-s", "2", "--gate-verify", &slow]);
    let elapsed = t.elapsed();
    expect_exit(&out, 3, "slow cmd verifier");
    assert!(elapsed < Duration::from_secs(10), "the run took {elapsed:?}");
    let r = parse(&out);
    assert_eq!(r["status"], "max_wallclock", "{r}");
    let rej = lap_rejections(&root, r["run_id"].as_str().unwrap(), 1);
    assert_eq!(rej[0]["rule"], "deadline", "{rej:?}");
    let survivors = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker) && c.contains("sleep"))
            .collect()
    };
    let until = Instant::now() + Duration::from_secs(2);
    while !survivors().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(survivors().is_empty(), "the verifying command outlived the run: {:?}", survivors());
}

#[test]
fn nli_verifier_with_the_generated_model() {
    let dir = nli_dir();
    let spec = format!("nli:{}", dir.display());
    let root = Root::new();
    let check = |memory: &str| {
        let out =
            root.run(&["gate", "check", "--query", QUERY, "--memory", memory, "--gate-min-score", "0.5", "--gate-verify", &spec, "--json"]);
        (out.status.code(), parse(&out))
    };
    let (code, c) = check(APPROVED);
    assert_eq!(code, Some(0), "{c}");
    assert_eq!(c["verifiers"][0]["verifier"], spec);
    assert_eq!(c["verifiers"][0]["accepted"], true, "{c}");
    let (code, c) = check("review of PR #42: not approved, changes requested");
    assert_eq!(code, Some(3), "{c}");
    assert_eq!(c["candidate"], true, "it is a candidate by cosine: {c}");
    assert_eq!(c["verifiers"][0]["accepted"], false, "{c}");
    assert_eq!(c["verifiers"][0]["rule"], "entailment", "{c}");
    // A threshold above the model's 0.909 rejects even the entailing memory.
    let out = root.run(&[
        "gate",
        "check",
        "--query",
        QUERY,
        "--memory",
        APPROVED,
        "--gate-min-score",
        "0.5",
        "--gate-verify",
        &spec,
        "--gate-nli-min",
        "0.95",
        "--json",
    ]);
    expect_exit(&out, 3, "nli above the model's probability");

    // A loop with the NLI verifier skips the contradiction and converges on the approval.
    root.remember("review of PR #42: not approved, changes requested", &[]);
    let good = root.remember(APPROVED, &[]);
    let out = run_loop(&root, "nli", &["--max-wallclock-s", "5", "--gate-verify", &spec]);
    expect_exit(&out, 0, "loop run with nli");
    let r = parse(&out);
    assert_eq!(r["match"]["id"], good, "{r}");
    assert_eq!(r["match"]["verified_by"], serde_json::json!([spec]), "{r}");
    // Alone, the contradiction is rejected by the model.
    let root2 = Root::new();
    let bad2 = root2.remember("review of PR #42: not approved, changes requested", &[]);
    let out = run_loop(&root2, "nli", &["--max-wallclock-s", "2", "--gate-verify", &spec]);
    expect_exit(&out, 3, "nli loop on the contradiction");
    let r = parse(&out);
    let rej = lap_rejections(&root2, r["run_id"].as_str().unwrap(), 1);
    assert_eq!((rej[0]["id"].as_i64(), rej[0]["rule"].as_str()), (Some(bad2), Some("entailment")), "{rej:?}");

    // A folder that is not there: exit 2 naming gate_verify and the path; nothing written.
    let fresh = Root::new();
    for args in [
        loop_args("nli", &["--gate-verify", "nli:/nonexistent-slm-nli"]),
        vec!["gate", "check", "--query", QUERY, "--memory", APPROVED, "--gate-verify", "nli:/nonexistent-slm-nli", "--json"],
    ] {
        let out = fresh.run(&args);
        let err = expect_exit(&out, 2, "nli:/nonexistent");
        assert!(err.contains("gate_verify") && err.contains("/nonexistent-slm-nli"), "{err}");
        assert!(!fresh.dir().exists(), "{args:?} created the data dir");
    }
    // A folder missing one file names the file.
    let partial = tempfile::tempdir().unwrap();
    for name in ["model.onnx", "config.json"] {
        std::fs::copy(dir.join(name), partial.path().join(name)).unwrap();
    }
    let spec = format!("nli:{}", partial.path().display());
    let out = fresh.run(&loop_args("nli", &["--gate-verify", &spec]));
    let err = expect_exit(&out, 2, "nli dir without tokenizer.json");
    assert!(err.contains("gate_verify") && err.contains("tokenizer.json"), "{err}");
    assert!(!fresh.dir().exists());
}

#[test]
fn invalid_verifier_input_is_exit_2_naming_the_field_and_writes_nothing() {
    let cases: [(&[&str], &str); 5] = [
        (&["--gate-verify", "regex:x"], "gate_verify"),
        (&["--gate-verify", "cmd:"], "gate_verify"),
        (&["--gate-verify", "none", "--gate-verify", "guard"], "gate_verify"),
        (&["--gate-nli-min", "1.5"], "gate_nli_min"),
        (&["--gate-nli-min", "nan"], "gate_nli_min"),
    ];
    for (extra, field) in cases {
        let root = Root::new();
        let out = run_loop(&root, "bad", extra);
        let err = expect_exit(&out, 2, &format!("loop run {extra:?}"));
        let e: Value = serde_json::from_str(err.lines().last().unwrap_or_default()).unwrap_or_else(|_| panic!("{err}"));
        assert_eq!(e["error"]["field"], field, "{extra:?}: {err}");
        assert_eq!(e["error"]["kind"], "invalid_input", "{err}");
        assert!(!root.dir().exists(), "loop run {extra:?} created the data dir");
        // `slm gate check` refuses the same input, before opening anything.
        let mut a = vec!["gate", "check", "--query", QUERY, "--memory", APPROVED];
        a.extend_from_slice(extra);
        let err = expect_exit(&root.run(&a), 2, &format!("gate check {extra:?}"));
        assert!(err.contains(field), "{extra:?}: {err}");
        assert!(!root.dir().exists(), "gate check {extra:?} created the data dir");
    }
}

#[test]
fn gate_check_by_id_on_a_memory_a_lap_and_an_unknown_id() {
    let root = Root::new();
    let bad = root.remember(NOT_APPROVED, &[]);
    let good = root.remember(APPROVED, &[]);
    let check = |id: i64| root.run(&["gate", "check", "--query", QUERY, "--id", &id.to_string(), "--gate-min-score", "0.5", "--json"]);

    let out = check(good);
    expect_exit(&out, 0, "gate check --id approved");
    let c = parse(&out);
    assert_eq!((c["memory_id"].as_i64(), c["passed"].as_bool()), (Some(good), Some(true)), "{c}");
    assert_eq!(c["content"], APPROVED);

    let out = check(bad);
    expect_exit(&out, 3, "gate check --id NOT approved");
    let c = parse(&out);
    assert_eq!(c["candidate"], true, "{c}");
    assert_eq!(c["verifiers"][0]["verifier"], "guard:entities", "{c}");
    assert_eq!(c["verifiers"][0]["accepted"], true, "#42 is in the memory: {c}");
    assert_eq!(c["verifiers"][1]["rule"], "model", "{c}");
    let text = String::from_utf8_lossy(
        &root.run(&["gate", "check", "--query", QUERY, "--id", &bad.to_string(), "--gate-min-score", "0.5"]).stdout,
    )
    .into_owned();
    assert!(text.starts_with("blocked:") && text.contains("model: rejects"), "{text}");

    // A ledger lap is never eligible, whatever it says and whatever the threshold.
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "laps",
        "--gate-query",
        "never happens",
        "--gate-min-score",
        "0.99",
        "--max-iterations",
        "1",
        "--json",
    ]);
    expect_exit(&out, 3, "one-lap run");
    let laps = root.json(&["list", "--kind", "lap"]);
    let lap = laps["memories"][0]["id"].as_i64().unwrap_or_else(|| panic!("no lap listed: {laps}"));
    let out = root.run(&[
        "gate",
        "check",
        "--query",
        "loop laps lap 1",
        "--id",
        &lap.to_string(),
        "--gate-min-score",
        "-1",
        "--gate-verify",
        "none",
        "--json",
    ]);
    expect_exit(&out, 3, "gate check on a lap");
    let c = parse(&out);
    assert_eq!((c["candidate"].as_bool(), c["passed"].as_bool()), (Some(false), Some(false)), "{c}");
    assert!(c["reason"].as_str().unwrap().contains("never gate-eligible"), "{c}");

    let out = root.run(&["gate", "check", "--query", QUERY, "--id", "987654", "--json"]);
    let err = expect_exit(&out, 1, "gate check on an unknown id");
    assert!(err.contains("not_found") && err.contains("987654"), "{err}");
}

/// `slm gate check --json` of one (query, memory) pair with `guard:entities` alone and no
/// cosine threshold: the exit code and the parsed decision.
fn entities_check(root: &Root, query: &str, memory: &str) -> (Option<i32>, Value) {
    let args = ["gate", "check", "--query", query, "--memory", memory, "--gate-verify", "guard:entities", "--gate-min-score", "0.0"];
    let out = root.run(&[&args[..], &["--json"]].concat());
    (out.status.code(), parse(&out))
}

/// `guard:entities` through the binary and the real embedder: a region code is answered by its
/// place and refused for another region under rule `region`; a quarter is answered by its
/// months and refused for another quarter's.
#[test]
fn gate_check_reads_a_region_by_its_place_and_a_quarter_by_its_months() {
    let root = Root::new();
    let check = |query: &str, memory: &str| entities_check(&root, query, memory);
    let region = "OTA update server migrated to us-east-1";
    let (code, c) = check(region, "The OTA update service now runs in AWS US East (N. Virginia).");
    assert_eq!((code, &c["passed"]), (Some(0), &Value::Bool(true)), "{c}");
    let (code, c) = check(region, "OTA update server migrated to us-east-2");
    assert_eq!(code, Some(3), "{c}");
    assert_eq!(c["verifiers"][0]["rule"], "region", "{c}");
    assert!(c["reason"].as_str().unwrap().contains("us-east-1"), "{c}");

    let quarter = "Q2 Gift Aid claim submitted to HMRC";
    let (code, c) = check(quarter, "April–June Gift Aid claim lodged with HMRC, ref GA-501.");
    assert_eq!((code, &c["passed"]), (Some(0), &Value::Bool(true)), "{c}");
    let (code, c) = check(quarter, "July–September Gift Aid claim lodged with HMRC, ref GA-501.");
    assert_eq!(code, Some(3), "{c}");
    assert!(c["reason"].as_str().unwrap().contains("Q2"), "{c}");
}

/// `guard:entities` through the binary: a number with separators is met by its scaled or
/// worded form, and a labelled number by the same label only (src/loops/verify/labels.rs).
#[test]
fn gate_check_reads_scaled_numbers_and_refuses_another_labelled_one() {
    let root = Root::new();
    let check = |query: &str, memory: &str| entities_check(&root, query, memory);
    let packs = "print run of 12,500 welcome packs finished";
    for memory in ["all 12.5k welcome packs are off the press", "twelve thousand five hundred welcome packs printed and boxed"] {
        let (code, c) = check(packs, memory);
        assert_eq!((code, &c["passed"]), (Some(0), &Value::Bool(true)), "{memory}: {c}");
    }
    let (code, c) = check(packs, "12k welcome packs printed");
    assert_eq!(code, Some(3), "{c}");

    let timetable = "semester 2 timetable published";
    let (code, c) = check(timetable, "semester 1 timetable published; two rooms are still unassigned");
    assert_eq!(code, Some(3), "{c}");
    assert!(c["reason"].as_str().unwrap().contains("semester 1"), "{c}");
    let (code, c) = check(timetable, "second semester timetable is published (semester 1 archived)");
    assert_eq!((code, &c["passed"]), (Some(0), &Value::Bool(true)), "{c}");
}

/// `guard:entities` through the binary: a dashed identifier is answered run together or
/// without its short prefix, never by its last group alone; and a query word the memory writes
/// only as its un- form is refused under rule `negated` by the default chain, while a double
/// negative that uses the same un-word is left to the model.
#[test]
fn gate_check_reads_dashed_identifiers_and_refuses_un_states() {
    let root = Root::new();
    let check = |query: &str, memory: &str| entities_check(&root, query, memory);
    let entry = "customs entry 112-4457781-3 released";
    for memory in ["ACE entry=11244577813 disposition=RELEASED", "CBP release received for ent 4457781-3, dispatching"] {
        let (code, c) = check(entry, memory);
        assert_eq!((code, &c["passed"]), (Some(0), &Value::Bool(true)), "{memory}: {c}");
    }
    let (code, c) = check(entry, "entry 3 released");
    assert_eq!(code, Some(3), "{c}");
    assert!(c["reason"].as_str().unwrap().contains("112-4457781-3"), "{c}");

    let paid = "invoice 1031 paid";
    let out = root.run(&[
        "gate",
        "check",
        "--query",
        paid,
        "--memory",
        "invoice 1031 is overdue and unpaid",
        "--gate-min-score",
        "0.0",
        "--json",
    ]);
    let c = parse(&out);
    assert_eq!(out.status.code(), Some(3), "{c}");
    assert_eq!(c["verifiers"][0]["rule"], "negated", "{c}");
    let (code, c) = check(paid, "no invoice left unpaid this month, 1031 included");
    assert_eq!((code, &c["passed"]), (Some(0), &Value::Bool(true)), "{c}");
}
