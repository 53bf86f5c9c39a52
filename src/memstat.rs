//! What a process's memory is made of, for `slm status` and the MCP `status` tool: the
//! kernel's resident figures (private anonymous pages against shared file-backed ones) and
//! what the search structures map or hold, so a user can see why a server is large.
//!
//! The split matters because several servers share one data root: file-backed pages (the
//! mapped vectors and graph links, the model) are one copy in the page cache for all of
//! them, while anonymous pages are each process's own.

use serde::Serialize;

/// A process's memory, in bytes. The kernel's figures are `null` where `/proc` is absent.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ProcessMemory {
    /// Resident set size.
    pub rss_bytes: Option<u64>,
    /// Resident private anonymous memory: the heap (ONNX Runtime, caches, rows held in
    /// memory), and an HNSW graph while this process builds or extends it.
    pub anon_bytes: Option<u64>,
    /// Resident file-backed pages: mapped vectors, graph links, model weights, the binary.
    /// Shared with every process that maps the same files.
    pub file_bytes: Option<u64>,
    /// Bytes of the derived vector files this process maps (f32, int8, ids, kinds).
    pub vectors_mapped_bytes: u64,
    /// Bytes of the graph's neighbour lists this process maps.
    pub graph_mapped_bytes: u64,
    /// Rows held in this process's heap because they are newer than the files.
    pub tail_rows: usize,
    /// True while this process builds or extends the graph: only then does it hold
    /// hnsw_rs's private structures (about 5 KB a memory), released when the links are saved.
    pub graph_private: bool,
}

/// The kernel's `(rss, anon, file)` resident bytes of this process.
pub fn resident() -> (Option<u64>, Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return (None, None, None) };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_reports_resident_memory_split_into_anonymous_and_file_backed() {
        let (rss, anon, file) = resident();
        let (rss, anon, file) = (rss.unwrap(), anon.unwrap(), file.unwrap());
        assert!(rss > 0 && anon > 0 && file > 0);
        // RssShmem is the third part; rss is never less than the two reported here.
        assert!(anon + file <= rss, "{anon} + {file} > {rss}");
    }
}
