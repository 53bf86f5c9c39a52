//! `scripts/setup.sh`: idempotent, and loud about a checksum mismatch, leaving nothing behind.

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_second_setup_run_downloads_nothing() {
    let out = Command::new("bash").arg(repo().join("scripts/setup.sh")).arg("--no-build").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("downloading"), "{err}");
    assert_eq!(err.matches("already present").count(), 3, "{err}");
}

#[test]
fn a_checksum_mismatch_fails_loudly_and_leaves_no_file() {
    // A copy of the script whose expected model checksum is wrong, in a scratch tree.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("scripts")).unwrap();
    let script = std::fs::read_to_string(repo().join("scripts/setup.sh")).unwrap();
    let real = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6";
    assert!(script.contains(real));
    let wrong = script.replace(real, &"0".repeat(64));
    std::fs::write(tmp.path().join("scripts/setup.sh"), wrong).unwrap();
    // The runtime is already in place (copied), so only the model is fetched.
    let ort = tmp.path().join("models/onnxruntime");
    std::fs::create_dir_all(&ort).unwrap();
    std::fs::copy(repo().join("models/onnxruntime/libonnxruntime.so.1.31.1"), ort.join("libonnxruntime.so.1.31.1")).unwrap();

    let out = Command::new("bash").arg(tmp.path().join("scripts/setup.sh")).arg("--no-build").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("checksum mismatch for model.onnx"), "{err}");
    let model_dir = tmp.path().join("models/all-MiniLM-L6-v2");
    let left: Vec<_> = std::fs::read_dir(&model_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}
