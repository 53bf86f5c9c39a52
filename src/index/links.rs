//! The HNSW graph as every long-lived process searches it: the neighbour lists of a
//! generation's graph in one flat file, `g<N>/graph.links`, memory-mapped, with the vectors
//! read from the generation's mapped `vectors` file. Both live in the page cache, so three
//! servers on one data root hold one copy of the graph between them instead of three
//! private ones (hnsw_rs's in-memory graph costs about 5 KB a memory: its own copy of each
//! vector plus its point structures).
//!
//! hnsw_rs only builds: the process that builds or extends a graph (`index::searcher`) writes
//! hnsw_rs's dump (to resume or extend it later) and this file from it, then drops hnsw_rs's
//! structures and searches through the file like everyone else. Nodes are positions in the
//! generation's row files, so a neighbour is read without a lookup. The search is the
//! standard HNSW one (greedy descent through the upper layers, a beam of `ef` on layer 0);
//! it only proposes candidates, which the searcher rescores exactly.
//!
//! Layout (little-endian):
//!
//! ```text
//! header   HEADER bytes: MAGIC, nodes n (u64), degree of layer 0 (u32), of the upper
//!          layers (u32), top layer (u32), entry node (u32), 8 reserved bytes, then for layers
//!          1..=MAX_LAYERS the number of nodes in each (u64)
//! layer 0  n × degree0 u32: the neighbours of node p at p × degree0 (NONE pads)
//! layer l  count_l u32: its nodes, ascending; then count_l × degree u32: their neighbours
//! ```
//!
//! A damaged file cannot crash a search: every neighbour is bounds-checked against the
//! caller's row count, and the file's size against its header. The meta beside it records
//! its SHA-256, checked once when a process maps it.

use std::collections::BinaryHeap;
use std::path::Path;

use memmap2::Mmap;

use super::hnsw::HnswIndex;

const MAGIC: &[u8; 8] = b"SLMLNK01";
/// Upper layers the header has room for (hnsw_rs is built with 16).
const MAX_LAYERS: usize = 16;
const HEADER: usize = 40 + 8 * MAX_LAYERS;
/// No neighbour in this slot.
const NONE: u32 = u32::MAX;

/// A mapped `graph.links` file.
pub struct Links {
    map: Mmap,
    nodes: usize,
    degree0: usize,
    degree: usize,
    top: usize,
    entry: u32,
    /// Byte offset of each upper layer's node list, and its node count (index 0 unused).
    layers: Vec<(usize, usize)>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links").field("nodes", &self.nodes).field("top", &self.top).field("bytes", &self.map.len()).finish()
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Distances are compared as integers of their bits: they are never negative (1 - cos,
/// clamped at 0), and for non-negative floats the bit order is the numeric order.
type Dist = u32;

fn dist_key(d: f32) -> Dist {
    d.max(0.0).to_bits()
}

impl Links {
    /// Maps `path` and checks that its size matches its header.
    pub fn open(path: &Path) -> Result<Links, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Links::open_file(&file)
    }

    /// Maps an open links file.
    pub fn open_file(file: &std::fs::File) -> Result<Links, String> {
        // SAFETY: the file is written once under a temporary name and renamed into place; it
        // is never modified after, so the mapping's bytes do not change under us.
        let map = unsafe { Mmap::map(file) }.map_err(|e| format!("cannot map graph.links: {e}"))?;
        Links::parse(map)
    }

    fn parse(map: Mmap) -> Result<Links, String> {
        let bad = |what: &str| format!("graph.links is damaged: {what}");
        if map.len() < HEADER || &map[..8] != MAGIC {
            return Err(bad("no header"));
        }
        let nodes = u64_at(&map, 8) as usize;
        let (degree0, degree) = (u32_at(&map, 16) as usize, u32_at(&map, 20) as usize);
        let (top, entry) = (u32_at(&map, 24) as usize, u32_at(&map, 28));
        if top > MAX_LAYERS || degree0 == 0 || degree == 0 || degree0 > 1024 || degree > 1024 || nodes > u32::MAX as usize {
            return Err(bad("header out of range"));
        }
        if nodes > 0 && entry as usize >= nodes {
            return Err(bad("entry node out of range"));
        }
        let mut off = HEADER.checked_add(nodes.checked_mul(degree0 * 4).ok_or_else(|| bad("size"))?).ok_or_else(|| bad("size"))?;
        let mut layers = vec![(0, 0)];
        for l in 1..=top {
            let count = u64_at(&map, 40 + 8 * (l - 1)) as usize;
            layers.push((off, count));
            off = count.checked_mul(4 * (1 + degree)).and_then(|b| b.checked_add(off)).ok_or_else(|| bad("size"))?;
        }
        if off != map.len() {
            return Err(bad(&format!("{} bytes, its header describes {off}", map.len())));
        }
        Ok(Links { map, nodes, degree0, degree, top, entry, layers })
    }

    /// Nodes of layer 0 (rows covered, memories or not).
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Bytes mapped.
    pub fn bytes(&self) -> usize {
        self.map.len()
    }

    /// The neighbours of `node` at `layer` (none when it is not in that layer).
    fn neighbours(&self, layer: usize, node: u32) -> impl Iterator<Item = u32> + '_ {
        let (start, degree) = if layer == 0 {
            if (node as usize) < self.nodes {
                (Some(HEADER + node as usize * self.degree0 * 4), self.degree0)
            } else {
                (None, 0)
            }
        } else {
            let (off, count) = self.layers[layer];
            let list = &self.map[off..off + count * 4];
            // Binary search in the layer's ascending node list.
            let (mut lo, mut hi) = (0usize, count);
            let mut found = None;
            while lo < hi {
                let mid = (lo + hi) / 2;
                let v = u32_at(list, mid * 4);
                match v.cmp(&node) {
                    std::cmp::Ordering::Less => lo = mid + 1,
                    std::cmp::Ordering::Greater => hi = mid,
                    std::cmp::Ordering::Equal => {
                        found = Some(mid);
                        break;
                    }
                }
            }
            (found.map(|i| off + count * 4 + i * self.degree * 4), self.degree)
        };
        let slots = start.map_or(0, |_| degree);
        let start = start.unwrap_or(0);
        (0..slots).map(move |i| u32_at(&self.map, start + i * 4)).take_while(|&n| n != NONE)
    }

    /// Up to `ef` node positions near the query, best first. `dist(pos)` is the query's
    /// distance to the row at `pos` (1 - cosine); only positions below `rows` are visited
    /// (the caller's mapped rows: a file written by a process that mapped more is still safe).
    pub fn search(&self, dist: impl Fn(usize) -> f32, ef: usize, rows: usize) -> Vec<usize> {
        let limit = self.nodes.min(rows);
        if limit == 0 {
            return Vec::new();
        }
        let ok = |n: u32| (n as usize) < limit;
        // The entry is always visible to the searcher (it is a node up to the graph's upto);
        // should it not be, any node starts a layer-0 search (upper layers hold no other).
        let mut ep = if ok(self.entry) { self.entry } else { 0 };
        let mut d_ep = dist_key(dist(ep as usize));
        for layer in (1..=self.top).rev() {
            loop {
                let mut moved = false;
                for n in self.neighbours(layer, ep).filter(|&n| ok(n)) {
                    let d = dist_key(dist(n as usize));
                    if d < d_ep {
                        (ep, d_ep, moved) = (n, d, true);
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        // Layer 0: `todo` is a min-heap of nodes to expand, `best` a max-heap of the `ef`
        // closest seen.
        let ef = ef.max(1);
        let mut visited = vec![0u64; limit.div_ceil(64)];
        let mut seen = |n: u32| {
            let (w, b) = (n as usize / 64, n as usize % 64);
            let was = visited[w] >> b & 1 == 1;
            visited[w] |= 1 << b;
            was
        };
        seen(ep);
        let mut todo = BinaryHeap::new();
        let mut best = BinaryHeap::new();
        todo.push(std::cmp::Reverse((d_ep, ep)));
        best.push((d_ep, ep));
        while let Some(std::cmp::Reverse((d, node))) = todo.pop() {
            if best.len() >= ef && best.peek().is_some_and(|&(worst, _)| d > worst) {
                break;
            }
            for n in self.neighbours(0, node) {
                if !ok(n) || seen(n) {
                    continue;
                }
                let dn = dist_key(dist(n as usize));
                if best.len() < ef || best.peek().is_some_and(|&(worst, _)| dn < worst) {
                    todo.push(std::cmp::Reverse((dn, n)));
                    best.push((dn, n));
                    if best.len() > ef {
                        best.pop();
                    }
                }
            }
        }
        best.into_sorted_vec().into_iter().map(|(_, n)| n as usize).collect()
    }
}

/// Writes `index`'s neighbour lists to `path` as a links file over `nodes` positions, for
/// the rows whose position `position(row id)` gives (rows it maps to `None` are left out,
/// and so are links to them). Errors are strings for the log.
pub fn write(index: &HnswIndex, nodes: usize, position: impl Fn(i64) -> Option<usize>, path: &Path) -> Result<(), String> {
    let lists = index.neighbour_lists();
    let pos = |id: i64| position(id).filter(|&p| p < nodes && p < NONE as usize).map(|p| p as u32);
    let (degree0, degree) = (2 * super::hnsw::M, super::hnsw::M);
    let top = lists.iter().map(|(_, layers)| layers.len().saturating_sub(1)).max().unwrap_or(0).min(MAX_LAYERS);
    let mut layer0 = vec![NONE; nodes * degree0];
    let mut upper: Vec<Vec<(u32, Vec<u32>)>> = vec![Vec::new(); top + 1];
    let mut entry: Option<(usize, u32)> = None;
    for (id, layers) in &lists {
        let Some(p) = pos(*id) else { continue };
        for (l, ns) in layers.iter().enumerate().take(top + 1) {
            let ns: Vec<u32> = ns.iter().filter_map(|n| pos(*n)).collect();
            if l == 0 {
                for (slot, n) in layer0[p as usize * degree0..][..degree0].iter_mut().zip(&ns) {
                    *slot = *n;
                }
            } else {
                upper[l].push((p, ns.into_iter().take(degree).collect()));
            }
        }
        let level = layers.len().saturating_sub(1).min(top);
        if entry.is_none_or(|(l, _)| level > l) {
            entry = Some((level, p));
        }
    }
    let (top, entry) = entry.map_or((0, 0), |(l, p)| (l, p));
    let mut out = Vec::with_capacity(HEADER + layer0.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(nodes as u64).to_le_bytes());
    out.extend_from_slice(&(degree0 as u32).to_le_bytes());
    out.extend_from_slice(&(degree as u32).to_le_bytes());
    out.extend_from_slice(&(top as u32).to_le_bytes());
    out.extend_from_slice(&entry.to_le_bytes());
    out.extend_from_slice(&0i64.to_le_bytes());
    // One count per upper layer the header has room for; layers above the top hold none.
    let counts = (1..=MAX_LAYERS).map(|l| if l <= top { upper.get(l).map_or(0, Vec::len) } else { 0 });
    counts.for_each(|count| out.extend_from_slice(&(count as u64).to_le_bytes()));
    debug_assert_eq!(out.len(), HEADER);
    layer0.iter().for_each(|n| out.extend_from_slice(&n.to_le_bytes()));
    for layer in upper.iter_mut().take(top + 1).skip(1) {
        layer.sort_unstable_by_key(|(p, _)| *p);
        layer.iter().for_each(|(p, _)| out.extend_from_slice(&p.to_le_bytes()));
        for (_, ns) in layer.iter() {
            (0..degree).for_each(|i| out.extend_from_slice(&ns.get(i).copied().unwrap_or(NONE).to_le_bytes()));
        }
    }
    std::fs::write(path, &out).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;

    fn vectors(n: usize) -> Vec<Vec<f32>> {
        (0..n).map(|i| HashEmbedder::vector(&format!("note {i} about topic {} and {}", i % 37, i % 11))).collect()
    }

    #[test]
    fn the_mapped_graph_finds_what_an_exact_scan_finds() {
        let vecs = vectors(3000);
        // Row ids 10, 20, ...: positions are what the file holds.
        let items: Vec<(i64, &[f32])> = vecs.iter().enumerate().map(|(i, v)| (10 * (i as i64 + 1), v.as_slice())).collect();
        let index = HnswIndex::build(&items);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.links");
        write(&index, vecs.len(), |id| (id % 10 == 0).then(|| (id / 10 - 1) as usize), &path).unwrap();
        let links = Links::open(&path).unwrap();
        assert_eq!(links.nodes(), 3000);
        let (mut found, mut wanted) = (0, 0);
        for q in (0..3000).step_by(97) {
            let query = &vecs[q];
            let dist = |p: usize| 1.0 - crate::spaces::cosine(query, &vecs[p]);
            let got = links.search(dist, 64, vecs.len());
            assert_eq!(got[0], q, "a stored vector is its own nearest neighbour");
            let mut exact: Vec<(f32, usize)> = (0..vecs.len()).map(|p| (dist(p), p)).collect();
            exact.sort_by(|a, b| a.0.total_cmp(&b.0));
            let top: Vec<usize> = exact.iter().take(10).map(|e| e.1).collect();
            found += top.iter().filter(|p| got.contains(p)).count();
            wanted += 10;
        }
        assert!(found * 100 >= wanted * 95, "recall@10 of the mapped graph: {found}/{wanted}");
    }

    #[test]
    fn a_truncated_or_foreign_file_is_refused_and_rows_past_the_caller_are_never_visited() {
        let vecs = vectors(400);
        let items: Vec<(i64, &[f32])> = vecs.iter().enumerate().map(|(i, v)| (i as i64 + 1, v.as_slice())).collect();
        let index = HnswIndex::build(&items);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.links");
        write(&index, 400, |id| Some(id as usize - 1), &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        assert!(Links::open(&path).unwrap_err().contains("damaged"));
        std::fs::write(&path, b"not a graph").unwrap();
        assert!(Links::open(&path).unwrap_err().contains("damaged"));
        std::fs::write(&path, &bytes).unwrap();
        let links = Links::open(&path).unwrap();
        let visited = std::cell::RefCell::new(Vec::new());
        let got = links.search(
            |p| {
                visited.borrow_mut().push(p);
                1.0 - crate::spaces::cosine(&vecs[7], &vecs[p])
            },
            32,
            200,
        );
        assert!(visited.borrow().iter().all(|&p| p < 200) && got.iter().all(|&p| p < 200));
        assert!(!got.is_empty());
    }
}
