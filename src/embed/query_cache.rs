//! Query vectors kept in the data root, shared by every process that opens it.
//!
//! A one-shot `slm recall` or `slm loop run` spends most of its time loading ONNX Runtime and
//! the model (about 100 ms here) to embed one query, and agents ask the same questions again
//! and again: a gate query is re-run by every `loop run` of that loop, several agents recall
//! the same thing. So the first process to embed a query leaves its vector in
//! `<data root>/queries/`, and the next one reads it instead of loading the model (the CLI
//! checks before it starts the model's background load, see `cli`).
//!
//! A file is named by the sha256 of the model's identity and the query text; the identity
//! digests the model files' paths, sizes and modification times, so a changed model never
//! serves an old vector. Files are written to a temporary name and renamed (a reader sees a
//! whole file or none), carry their own query text (a name collision reads as a miss), and are
//! checked on read (length, finite values, unit norm). Everything here is best effort: a data
//! root that cannot be written just gets no cache. The folder is pruned to [`MAX_ENTRIES`]
//! files, oldest first. The vector is the model's own output for that text, so scores stay
//! exact cosine (SPEC).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::locate::MODEL_FILES;
use super::{ModelFiles, DIM};

/// The folder inside the data root.
pub const DIR: &str = "queries";

/// Most files kept; past it the oldest quarter is removed.
pub const MAX_ENTRIES: usize = 4096;

const MAGIC: &[u8; 8] = b"SLMQV001";

/// The query vectors of one data root for one model.
#[derive(Debug, Clone)]
pub struct QueryCache {
    dir: PathBuf,
    model: [u8; 32],
    max_entries: usize,
}

impl QueryCache {
    /// The cache of `data_dir` for the model in `files`; `None` when a model file cannot be
    /// read (the embedder then reports that itself).
    pub fn new(data_dir: &Path, files: &ModelFiles) -> Option<QueryCache> {
        let mut h = Sha256::new();
        let paths = MODEL_FILES.iter().map(|f| files.model_dir.join(f)).chain(std::iter::once(files.ort_lib.clone()));
        for p in paths {
            let meta = fs::metadata(&p).ok()?;
            let mtime = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
            h.update(p.as_os_str().as_encoded_bytes());
            h.update([0]);
            h.update(meta.len().to_le_bytes());
            h.update(mtime.to_le_bytes());
        }
        Some(QueryCache { dir: data_dir.join(DIR), model: h.finalize().into(), max_entries: MAX_ENTRIES })
    }

    fn path(&self, text: &str) -> PathBuf {
        let mut h = Sha256::new();
        h.update(self.model);
        h.update(text.as_bytes());
        let name: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(name)
    }

    /// True when a vector for `text` is stored (without reading it).
    pub fn contains(&self, text: &str) -> bool {
        self.path(text).is_file()
    }

    /// The stored vector of `text`, if there is a sound one.
    pub fn get(&self, text: &str) -> Option<Vec<f32>> {
        let bytes = fs::read(self.path(text)).ok()?;
        decode(&bytes, text)
    }

    /// Stores the vector of `text` (best effort; called after a miss, so an entry that is
    /// there is a damaged one, or a racing process's identical one: replaced either way).
    pub fn put(&self, text: &str, v: &[f32]) {
        if v.len() != DIM {
            return;
        }
        let mut bytes = Vec::with_capacity(MAGIC.len() + 8 + DIM * 4 + text.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(text.len() as u64).to_le_bytes());
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        bytes.extend_from_slice(text.as_bytes());
        if fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let path = self.path(text);
        let tmp = self.dir.join(format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
        let written = fs::File::create(&tmp).and_then(|mut f| f.write_all(&bytes)).and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.prune();
    }

    /// Keeps the folder under its limit ([`MAX_ENTRIES`]) by removing the oldest quarter.
    fn prune(&self) {
        // Counting names is one directory read; the times are looked up only when over.
        if fs::read_dir(&self.dir).map_or(true, |d| d.count() <= self.max_entries) {
            return;
        }
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> =
            entries.flatten().filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path()))).collect();
        if files.len() <= self.max_entries {
            return;
        }
        files.sort();
        for (_, p) in files.iter().take(files.len() - self.max_entries * 3 / 4) {
            let _ = fs::remove_file(p);
        }
    }
}

/// The vector in `bytes` when they are a whole, sound entry for `text`.
fn decode(bytes: &[u8], text: &str) -> Option<Vec<f32>> {
    let head = MAGIC.len() + 8;
    let (magic, rest) = bytes.split_at_checked(MAGIC.len())?;
    let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?) as usize;
    if magic != MAGIC || bytes.len() != head + DIM * 4 + len || &bytes[head + DIM * 4..] != text.as_bytes() {
        return None;
    }
    let v: Vec<f32> = bytes[head..head + DIM * 4].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    (v.iter().all(|x| x.is_finite()) && (norm - 1.0).abs() < 1e-3).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> ModelFiles {
        let model_dir = dir.join("model");
        fs::create_dir_all(&model_dir).unwrap();
        for f in MODEL_FILES {
            fs::write(model_dir.join(f), f).unwrap();
        }
        let ort_lib = dir.join("libort.so");
        fs::write(&ort_lib, "ort").unwrap();
        ModelFiles { model_dir, ort_lib, source: None }
    }

    fn unit(seed: f32) -> Vec<f32> {
        let v: Vec<f32> = (0..DIM).map(|i| (i as f32 * seed).sin()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn a_stored_vector_is_read_back_bit_for_bit_and_only_for_its_text_and_model() {
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path());
        let c = QueryCache::new(&tmp.path().join("root"), &f).unwrap();
        assert_eq!(c.get("is the build green"), None);
        let v = unit(0.37);
        c.put("is the build green", &v);
        assert_eq!(c.get("is the build green"), Some(v.clone()));
        assert_eq!(c.get("is the build red"), None);
        // A changed model file is another model: its cache starts empty.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(f.model_dir.join("model.onnx"), "another model").unwrap();
        let other = QueryCache::new(&tmp.path().join("root"), &f).unwrap();
        assert_eq!(other.get("is the build green"), None);
    }

    #[test]
    fn damaged_or_foreign_files_are_misses() {
        let tmp = tempfile::tempdir().unwrap();
        let c = QueryCache::new(&tmp.path().join("root"), &files(tmp.path())).unwrap();
        c.put("q", &unit(0.5));
        let p = c.path("q");
        let good = fs::read(&p).unwrap();
        for bad in [&good[..good.len() - 1], &good[..10], b"SLMQV001xxxxxxxx".as_slice()] {
            fs::write(&p, bad).unwrap();
            assert_eq!(c.get("q"), None);
        }
        // Another text under this name (a collision) is a miss.
        let mut foreign = good.clone();
        let n = foreign.len();
        foreign[n - 1] = b'r';
        fs::write(&p, &foreign).unwrap();
        assert_eq!(c.get("q"), None);
        // Not a unit vector: a miss.
        let mut scaled = good.clone();
        scaled[16..20].copy_from_slice(&100.0f32.to_le_bytes());
        fs::write(&p, &scaled).unwrap();
        assert_eq!(c.get("q"), None);
    }

    #[test]
    fn the_folder_is_pruned_oldest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = QueryCache::new(&tmp.path().join("root"), &files(tmp.path())).unwrap();
        c.max_entries = 40;
        let v = unit(0.9);
        for i in 0..=40 {
            c.put(&format!("query {i}"), &v);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let n = fs::read_dir(tmp.path().join("root").join(DIR)).unwrap().count();
        assert_eq!(n, 30, "pruned to three quarters of the limit");
        assert!(c.contains("query 40") && !c.contains("query 0"), "the oldest go first");
    }
}
