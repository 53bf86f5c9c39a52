//! Dependency hygiene that needs no extra tool (cargo-deny covers the rest, see deny.toml).

/// Versions of `name` in Cargo.lock.
fn locked_versions(name: &str) -> Vec<String> {
    let lock: toml::Table = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap().parse().unwrap();
    lock["package"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"].as_str() == Some(name))
        .map(|p| p["version"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn one_sha2_in_the_tree() {
    // slm's own sha2 is the version rmcp brings (issue #14).
    assert_eq!(locked_versions("sha2").len(), 1, "sha2 versions: {:?}", locked_versions("sha2"));
}
