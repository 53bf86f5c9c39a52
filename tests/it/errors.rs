//! Bad input gets a clear error naming the field and the rule, the right exit code, and
//! loses nothing; a missing model or runtime is a one-line error saying what to run.

use std::process::Command;

use crate::common::{expect_exit, slm_bin, Root};

#[test]
fn bad_input_is_rejected_and_nothing_is_lost() {
    let root = Root::new();
    root.remember("keep me", &["safe"]);
    let big = "x".repeat(64 * 1024 + 1);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["remember", ""], "content"),
        (vec!["remember", &big], "64 KiB"),
        (vec!["remember", "hello", "--tag", "has space"], "tag"),
        (vec!["remember", "hello", "--tag", "a,b"], "commas"),
        (vec!["recall", "q", "--min-score", "NaN"], "min_score"),
        (vec!["recall", "q", "--min-score", "1.5"], "[-1, 1]"),
        (vec!["recall", "q", "--min-score", "-inf"], "min_score"),
        (vec!["recall", "q", "--limit", "0"], "limit"),
        (vec!["recall", ""], "query"),
        (vec!["list", "--limit", "5000"], "limit"),
        (vec!["forget", "notanumber"], "invalid value"),
        (vec!["recall"], "required"),
    ];
    for (args, needle) in cases {
        let out = root.run(&args);
        let err = expect_exit(&out, 2, &format!("{args:?}"));
        assert!(err.contains(needle), "{args:?}: stderr should mention {needle:?}: {err}");
        assert!(err.lines().count() <= 6, "{args:?}: error should be short: {err}");
    }
    // --json errors are structured and name the field.
    let out = root.run(&["recall", "q", "--min-score", "NaN", "--json"]);
    let err = expect_exit(&out, 2, "json error");
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["field"], "min_score");
    assert_eq!(v["error"]["kind"], "invalid_input");
    // Nothing was lost or added.
    assert_eq!(root.count(), 1);
    let l = root.json(&["list"]);
    assert_eq!(l["memories"][0]["content"], "keep me");
}

#[test]
fn missing_data_dir_parent_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("no/such/parent/data");
    let out = Command::new(slm_bin()).arg("--data-dir").arg(&dir).args(["status"]).output().unwrap();
    let err = expect_exit(&out, 2, "missing parent");
    assert!(err.contains("data_dir") && err.contains("parent"), "{err}");
    assert!(!dir.exists());
    // A file where the data dir should be.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = Command::new(slm_bin()).arg("--data-dir").arg(&file).args(["list"]).output().unwrap();
    let err = expect_exit(&out, 2, "file as data dir");
    assert!(err.contains("must be a directory"), "{err}");
}

#[test]
fn missing_model_or_runtime_is_a_one_line_error() {
    let root = Root::new();
    let tmp = tempfile::tempdir().unwrap();
    // No model files where SLM_MODEL_DIR points.
    let out = root.cmd(&["remember", "hello"]).env("SLM_MODEL_DIR", tmp.path()).output().unwrap();
    let err = expect_exit(&out, 1, "missing model");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("model.onnx") && err.contains("scripts/setup.sh"), "{err}");
    // A runtime library that is not a library.
    let fake = tmp.path().join("libonnxruntime.so");
    std::fs::write(&fake, "not a shared object").unwrap();
    let out = root.cmd(&["recall", "hello"]).env("ORT_DYLIB_PATH", &fake).output().unwrap();
    let err = expect_exit(&out, 1, "bad runtime");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("ONNX Runtime") && err.contains("scripts/setup.sh"), "{err}");
    // Commands that do not embed still work without a model.
    let out = root.cmd(&["status"]).env("SLM_MODEL_DIR", tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(root.count(), 0, "nothing was written by the failed remember");
}
