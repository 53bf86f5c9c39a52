//! The HNSW graph saved in a generation folder of the derived files, so a restarted
//! long-lived process reloads it instead of spending minutes rebuilding it.
//!
//! Files, in `index/g<N>/`: `graph.hnsw.graph` and `graph.hnsw.data` (hnsw_rs's dump: the
//! links and the vectors, read only by a process that extends the graph), `graph.links` (the
//! same neighbour lists over the generation's row positions, which every process maps and
//! searches: [`super::links`]), and `graph.meta` (JSON: the store id, the generation, the
//! largest row id the graph covers, its vector count, and the SHA-256 and size of the files).
//! One process at a time builds or extends a generation's graph: it holds `graph.build`
//! (flock), and the others search exactly, or through the links already saved, meanwhile.
//! A save dumps under temporary names, then, under the derived files' lock, renames the dump
//! into place and writes the meta last (also by rename). A load takes the lock only to check
//! the meta and hard-link the files to private names (so a concurrent save cannot swap them
//! half-way), then checks both digests before hnsw_rs reads a byte: hnsw_rs asserts, unwraps
//! and prints to stdout (the MCP channel) on a damaged dump, so a damaged file must never
//! reach it. The load also runs under `catch_unwind`. Any failure means "no saved graph": the
//! caller searches exactly (always correct) and builds a new one in the background.

use std::io::Read;
use std::path::{Path, PathBuf};

use hnsw_rs::hnswio::HnswIo;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::derived::Segment;
use super::hnsw::{HnswIndex, SimdCosine};
use super::links::Links;

const BASENAME: &str = "graph";
const META: &str = "graph.meta";
const PARTS: [&str; 2] = ["hnsw.graph", "hnsw.data"];
const LINKS: &str = "graph.links";
const BUILD_LOCK: &str = "graph.build";

/// What `graph.meta` records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct GraphMeta {
    /// The store the graph was built from (its `store_id`).
    pub store_id: String,
    /// The derived files' generation whose folder holds it.
    pub generation: u64,
    /// Every memory with an id up to this one was in the store when the graph last grew
    /// (forgotten ones are skipped by the exact rescoring).
    pub upto: i64,
    /// Vectors in the graph.
    pub vectors: usize,
    /// SHA-256 (hex) of `graph.hnsw.graph` and `graph.hnsw.data`.
    pub sha256: [String; 2],
    /// Bytes of both dump files.
    pub bytes: u64,
    /// Saved part-built by a process that was still building it: the next process completes
    /// it before searching through it (see `super::searcher`). Absent in older files: false.
    #[serde(default)]
    pub part: bool,
    /// The mapped neighbour lists (absent in older files and in part-built saves).
    #[serde(default)]
    pub links: Option<LinksMeta>,
}

/// What `graph.meta` records of `graph.links`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct LinksMeta {
    /// Row positions covered (the generation's rows when it was written).
    pub nodes: usize,
    /// Every memory with an id up to this one is a node (rows the saving process held only
    /// in memory, past the files, are not: they are scanned exactly).
    pub upto: i64,
    pub sha256: String,
    pub bytes: u64,
}

/// Where a generation's graph is saved, and what it must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphHome {
    /// The generation folder.
    pub dir: PathBuf,
    pub store_id: String,
    pub generation: u64,
}

impl GraphHome {
    /// The saved graph's meta, if it is this generation's and this store's.
    pub fn meta(&self) -> Option<GraphMeta> {
        let m: GraphMeta = serde_json::from_slice(&std::fs::read(self.dir.join(META)).ok()?).ok()?;
        (m.store_id == self.store_id && m.generation == self.generation).then_some(m)
    }

    fn index_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// Takes the right to build or extend this generation's graph, if no other process
    /// holds it (released when the file is dropped).
    pub fn build_lock(&self) -> Option<std::fs::File> {
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(self.dir.join(BUILD_LOCK)).ok()?;
        f.try_lock().ok().map(|_| f)
    }

    /// Maps the saved neighbour lists, if the meta records them for this generation and
    /// store and the file matches its checksum. `Ok(None)`: none saved (or only a part).
    pub fn open_links(&self) -> Result<Option<(Links, GraphMeta)>, String> {
        let Some(meta) = self.meta() else { return Ok(None) };
        let Some(lm) = meta.links.clone().filter(|_| !meta.part) else { return Ok(None) };
        let path = self.dir.join(LINKS);
        // Opened before the digest is taken: a save that renames a new file into place
        // meanwhile cannot make the mapping differ from what was checked.
        let file = std::fs::File::open(&path).map_err(|e| format!("cannot open {LINKS}: {e}"))?;
        let (digest, _) = digest_file(file.try_clone().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        if digest != lm.sha256 {
            return Err(format!("{LINKS} does not match its recorded checksum"));
        }
        let links = Links::open_file(&file)?;
        if links.nodes() != lm.nodes {
            return Err(format!("{LINKS} holds {} nodes, its meta says {}", links.nodes(), lm.nodes));
        }
        Ok(Some((links, meta)))
    }

    /// Saves `index`, which covers the rows up to `upto` (`part`: a build still under way).
    /// With `base` (the generation's mapped rows), a finished graph's neighbour lists are
    /// written over its positions too. Errors are strings for the log.
    pub fn save(&self, index: &HnswIndex, upto: i64, part: bool, base: Option<&Segment>) -> Result<GraphMeta, String> {
        if !self.dir.join("head").is_file() {
            return Err("the generation was replaced; its graph is not saved".into());
        }
        let tmp = format!("{BASENAME}-tmp-{}", std::process::id());
        let links_tmp = self.dir.join(format!("{tmp}.links"));
        let links = match base.filter(|_| !part) {
            Some(b) => {
                let ids = b.ids();
                let lupto = upto.min(b.head.upto);
                let position = |id: i64| if id <= lupto { ids.binary_search(&id).ok() } else { None };
                super::links::write(index, ids.len(), position, &links_tmp)?;
                let (sha256, bytes) = digest(&links_tmp).map_err(|e| format!("cannot read {LINKS}: {e}"))?;
                Some(LinksMeta { nodes: ids.len(), upto: lupto, sha256, bytes })
            }
            None => None,
        };
        let dumped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| index.dump(&self.dir, &tmp)))
            .map_err(|_| "the HNSW dump panicked".to_string())??;
        let from = |part: &str| self.dir.join(format!("{dumped}.{part}"));
        let mut sha256 = [String::new(), String::new()];
        let mut bytes = 0;
        for (i, part) in PARTS.iter().enumerate() {
            let (digest, n) = digest(&from(part)).map_err(|e| format!("cannot read the dump: {e}"))?;
            sha256[i] = digest;
            bytes += n;
        }
        let meta = GraphMeta {
            store_id: self.store_id.clone(),
            generation: self.generation,
            upto,
            vectors: index.len(),
            sha256,
            bytes,
            part,
            links,
        };
        let _lock = super::derived::lock(self.index_dir()).map_err(|e| e.to_string())?;
        remove_orphans(&self.dir);
        let cleanup = || {
            PARTS.iter().for_each(|p| drop(std::fs::remove_file(from(p))));
            let _ = std::fs::remove_file(&links_tmp);
        };
        if !self.dir.join("head").is_file() {
            cleanup(); // the generation was replaced meanwhile: its folder is going away
            return Err("the generation was replaced while the graph was saved".into());
        }
        // A newer save (another process) may already cover more rows: keep it.
        if self.meta().is_some_and(|m| m.upto > upto) {
            cleanup();
            return Ok(meta);
        }
        let _ = std::fs::remove_file(self.dir.join(META));
        for part in PARTS {
            std::fs::rename(from(part), self.dir.join(format!("{BASENAME}.{part}"))).map_err(|e| e.to_string())?;
        }
        if meta.links.is_some() {
            std::fs::rename(&links_tmp, self.dir.join(LINKS)).map_err(|e| e.to_string())?;
        }
        let meta_tmp = self.dir.join(format!("{META}.{}", std::process::id()));
        let json = serde_json::to_vec(&meta).map_err(|e| e.to_string())?;
        std::fs::write(&meta_tmp, json).and_then(|_| std::fs::rename(&meta_tmp, self.dir.join(META))).map_err(|e| e.to_string())?;
        Ok(meta)
    }

    /// Loads the saved graph: `Ok(None)` when there is none for this generation and store,
    /// `Err` when one is there but damaged (or hnsw_rs fails on it).
    pub fn load(&self) -> Result<Option<(HnswIndex, GraphMeta)>, String> {
        let n = LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let private = format!("{BASENAME}-load-{}-{n}", std::process::id());
        let link = |part: &str| self.dir.join(format!("{private}.{part}"));
        let meta = {
            let _lock = super::derived::lock(self.index_dir()).map_err(|e| e.to_string())?;
            let Some(meta) = self.meta() else { return Ok(None) };
            for part in PARTS {
                std::fs::hard_link(self.dir.join(format!("{BASENAME}.{part}")), link(part))
                    .map_err(|e| format!("cannot open the saved graph: {e}"))?;
            }
            meta
        };
        let loaded = self.load_linked(&private, &meta);
        PARTS.iter().for_each(|p| drop(std::fs::remove_file(link(p))));
        loaded.map(|index| Some((index, meta)))
    }

    fn load_linked(&self, private: &str, meta: &GraphMeta) -> Result<HnswIndex, String> {
        for (i, part) in PARTS.iter().enumerate() {
            let (digest, _) = digest(&self.dir.join(format!("{private}.{part}"))).map_err(|e| e.to_string())?;
            if digest != meta.sha256[i] {
                return Err(format!("{BASENAME}.{part} does not match its recorded checksum"));
            }
        }
        let dir = self.dir.clone();
        let private = private.to_string();
        let graph = std::panic::catch_unwind(move || {
            // hnsw_rs ties the reloaded graph's lifetime to the `HnswIo` that read it; the
            // graph lives as long as the process may search it, so the reader is leaked:
            // a few hundred bytes once per load (a process start, or a damaged file).
            let io: &'static mut HnswIo = Box::leak(Box::new(HnswIo::new(&dir, &private)));
            io.load_hnsw::<f32, SimdCosine>().map_err(|e| e.to_string())
        })
        .map_err(|_| "hnsw_rs panicked reading the saved graph".to_string())??;
        let index = HnswIndex::from_graph(graph);
        if index.len() != meta.vectors {
            return Err(format!("the saved graph holds {} vectors, its meta says {}", index.len(), meta.vectors));
        }
        Ok(index)
    }
}

/// Removes dumps and load links left by processes that ended mid-save or mid-load (a server
/// exits at once when its client goes, and may be killed): at 1M rows each is ~2 GB. Files of
/// a live process, this one included, are kept; a pid reused by another process keeps its
/// files until that one ends too. Called under the derived files' lock.
fn remove_orphans(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let rest = name.strip_prefix(&format!("{BASENAME}-tmp-")).or_else(|| name.strip_prefix(&format!("{BASENAME}-load-")));
        let pid = rest.and_then(|r| r.split(['.', '-']).next()).and_then(|p| p.parse::<i32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() as i32 && !alive(pid) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// True unless no process has this pid (a process of another user counts as alive).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

static LOADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The SHA-256 (hex) and size of a file.
fn digest(path: &Path) -> std::io::Result<(String, u64)> {
    digest_file(std::fs::File::open(path)?)
}

fn digest_file(mut f: std::fs::File) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((h.finalize().iter().map(|b| format!("{b:02x}")).collect(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphaned_dumps_of_ended_processes_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!("graph-tmp-{dead}.hnsw.data"),
            format!("graph-load-{dead}-3.hnsw.graph"),
            format!("graph-tmp-{me}.hnsw.data"),
            format!("graph-load-{me}-0.hnsw.graph"),
            "graph.hnsw.data".to_string(),
            "graph.meta".to_string(),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        remove_orphans(dir.path());
        let left: Vec<bool> = names.iter().map(|n| dir.path().join(n).exists()).collect();
        assert_eq!(left, [false, false, true, true, true, true], "{names:?}");
    }
}
