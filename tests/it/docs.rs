//! The documentation holds together: README.md stays a front door (at most 150 lines), every
//! relative link in the project's Markdown resolves to a file of the repository, and every
//! "SPEC §n" the code or docs cite is a section of `docs/SPEC.md`.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files a reader follows links through.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut files: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "models/verifier/README.md", "models/README.md", "data/gate/WRITING.md"]
            .iter()
            .map(|f| root.join(f))
            .filter(|p| p.is_file())
            .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    docs.retain(|p| p.extension().is_some_and(|e| e == "md"));
    docs.sort();
    assert!(docs.len() >= 8, "docs/ holds the reference: {docs:?}");
    files.extend(docs);
    files
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines; the reference belongs in docs/");
    assert!(readme.contains("scripts/setup.sh") && readme.contains("scripts/test.sh"), "the two commands");
}

#[test]
fn every_relative_link_resolves() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for cap in link.captures_iter(&text) {
            let target = &cap[1];
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap();
            let resolved = dir.join(path);
            assert!(resolved.exists(), "{}: the link {target} does not resolve ({})", doc.display(), resolved.display());
            assert!(within(&resolved, &repo()), "{}: the link {target} leaves the repository", doc.display());
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} links checked");
}

fn within(path: &Path, root: &Path) -> bool {
    path.canonicalize().unwrap().starts_with(root.canonicalize().unwrap())
}

#[test]
fn every_cited_spec_section_is_in_the_repository() {
    let spec = std::fs::read_to_string(repo().join("docs/SPEC.md")).unwrap();
    let cite = regex::Regex::new(r"SPEC §(\d+)").unwrap();
    let mut files = documents();
    let mut stack = vec![repo().join("src"), repo().join("tests"), repo().join("benches")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.ends_with("node_modules") {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs" || e == "md") {
                files.push(p);
            }
        }
    }
    let mut cited = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for cap in cite.captures_iter(&text) {
            let heading = format!("\n## {}. ", &cap[1]);
            assert!(spec.contains(&heading), "{} cites SPEC §{}, which docs/SPEC.md does not have", f.display(), &cap[1]);
            cited += 1;
        }
    }
    assert!(cited > 0, "the code cites the contract");
}
