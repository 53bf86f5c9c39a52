//! Derived vector files: the store's vectors laid out contiguously in the data root, memory-
//! mapped by every process, so a million vectors cost one shared copy in the page cache
//! instead of 1.5 GB of heap per process.
//!
//! The store stays the source of truth; these files are a cache of it that any process can
//! extend or rebuild. Layout, under `<data root>/index/`:
//!
//! ```text
//! lock          flock(2): held exclusively by whoever appends or rebuilds
//! current       the live generation's number (replaced atomically by rename)
//! g<N>/head     HEAD_LEN bytes: magic, dim, the store's id, rows, upto, counts, checksum
//! g<N>/ids      i64 per row (ascending)      g<N>/kinds    u8 per row (0 memory, 1 lap)
//! g<N>/vectors  384 f32 per row              g<N>/quant    quant::REC bytes per row
//! g<N>/pending  i64 per row stored without a vector yet (scored from the store instead)
//! g<N>/forgotten i64 per row known to be forgotten (skipped; dropped by a rebuild)
//! ```
//!
//! Every row with an id `<= upto` is in exactly one of: the row files, `pending`, or nowhere
//! because it was forgotten before it was appended. Appenders write the data first and the
//! head last (with a checksum), so a reader that sees a head sees complete rows up to
//! `rows`; bytes past `rows` (an appender killed mid-way) are ignored and overwritten by the
//! next appender. Files only grow within a generation, so a mapping never loses its pages; a
//! rebuild writes a new generation and switches `current`, and old mappings keep their
//! (unlinked) files. Readers take no lock. Whether the files match the store (the store id,
//! and sampled rows compared byte for byte) is checked by the engine, which can read both.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapOptions};

use super::quant::{self, REC};
use crate::embed::DIM;
use crate::memory::Kind;
use crate::{Error, Result};

/// Visits stored rows as `(id, kind, vector bytes)` (empty bytes: no vector yet).
pub type RowVisitor<'a> = dyn FnMut(i64, Kind, &[u8]) -> Result<()> + 'a;

/// `load(after, visit)`: visits every stored row with an id above `after`, in id order.
pub type RowSource<'a> = dyn FnMut(i64, &mut RowVisitor<'_>) -> Result<()> + 'a;

/// The folder in the data root.
pub const DIR: &str = "index";
const MAGIC: &[u8; 8] = b"SLMIDX01";
const HEAD_LEN: usize = 96;
const VEC_BYTES: usize = DIM * 4;

/// What a generation's `head` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Head {
    /// The store these files mirror (its `store_id` meta value, 32 hex digits).
    pub store_id: [u8; 32],
    /// Rows in the row files.
    pub rows: u64,
    /// Every row id up to this one is accounted for.
    pub upto: i64,
    /// Entries in `pending`.
    pub pending: u64,
    /// Entries in `forgotten`.
    pub forgotten: u64,
}

impl Head {
    fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&(DIM as u32).to_le_bytes());
        b[16..48].copy_from_slice(&self.store_id);
        b[48..56].copy_from_slice(&self.rows.to_le_bytes());
        b[56..64].copy_from_slice(&self.upto.to_le_bytes());
        b[64..72].copy_from_slice(&self.pending.to_le_bytes());
        b[72..80].copy_from_slice(&self.forgotten.to_le_bytes());
        let sum = fnv(&b[..88]);
        b[88..96].copy_from_slice(&sum.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Head> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        if b.len() != HEAD_LEN || &b[..8] != MAGIC || b[8..12] != (DIM as u32).to_le_bytes() || fnv(&b[..88]) != u64_at(88) {
            return None;
        }
        let mut store_id = [0u8; 32];
        store_id.copy_from_slice(&b[16..48]);
        Some(Head { store_id, rows: u64_at(48), upto: u64_at(56) as i64, pending: u64_at(64), forgotten: u64_at(72) })
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, x| (h ^ u64::from(*x)).wrapping_mul(0x100000001b3))
}

/// The `store_id` as the fixed-width bytes a head records.
pub fn store_id_bytes(id: &str) -> [u8; 32] {
    let mut out = [b'0'; 32];
    id.bytes().take(32).enumerate().for_each(|(i, c)| out[i] = c);
    out
}

/// One process's read-only view of a generation: the row files mapped up to `head.rows`.
pub struct Segment {
    pub generation: u64,
    /// The generation's folder (where a saved HNSW graph of it lives too).
    pub dir: PathBuf,
    pub head: Head,
    ids: Option<Mmap>,
    kinds: Option<Mmap>,
    vectors: Option<Mmap>,
    quant: Option<File>,
    /// The vectors file, for rescoring windows.
    vector_file: Option<File>,
    /// Rows stored without a vector when they were appended.
    pub pending: Vec<i64>,
    /// Rows known to be forgotten.
    pub forgotten: Vec<i64>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("generation", &self.generation).field("head", &self.head).finish()
    }
}

impl Segment {
    /// Rows held.
    pub fn len(&self) -> usize {
        self.head.rows as usize
    }

    /// True when no rows are held.
    pub fn is_empty(&self) -> bool {
        self.head.rows == 0
    }

    /// Bytes this segment keeps mapped (ids, kinds, `f32` vectors; the int8 copy is mapped
    /// a window at a time by scans).
    pub fn mapped_bytes(&self) -> usize {
        [&self.ids, &self.kinds, &self.vectors].iter().map(|m| m.as_ref().map_or(0, |m| m.len())).sum()
    }

    /// The ids, ascending.
    pub fn ids(&self) -> &[i64] {
        // The map is page-aligned and holds `rows` whole little-endian i64 (checked at load).
        self.ids.as_ref().map_or(&[], |m| unsafe { std::slice::from_raw_parts(m.as_ptr().cast(), self.len()) })
    }

    /// The kind of the row at `pos`.
    #[inline]
    pub fn kind(&self, pos: usize) -> Kind {
        match self.kinds.as_ref().map_or(0, |m| m[pos]) {
            0 => Kind::Memory,
            _ => Kind::Lap,
        }
    }

    /// The vector at `pos`.
    #[inline]
    pub fn vector(&self, pos: usize) -> &[f32] {
        let all: &[f32] = self.vectors.as_ref().map_or(&[], |m| unsafe { std::slice::from_raw_parts(m.as_ptr().cast(), self.len() * DIM) });
        &all[pos * DIM..(pos + 1) * DIM]
    }

    /// Maps the quantised records of rows `range` (pre-faulted), or `None` if that fails (the
    /// caller then scores those rows from the `f32` vectors). A scan maps one window at a
    /// time and drops it after use, so its resident memory stays at a window per thread
    /// however large the store is. `range.start` must be a multiple of [`WINDOW`].
    pub fn quant_window(&self, range: std::ops::Range<usize>) -> Option<Mmap> {
        debug_assert!(range.start.is_multiple_of(WINDOW) && range.end <= self.len());
        let file = self.quant.as_ref()?;
        if range.is_empty() {
            return None;
        }
        unsafe { MmapOptions::new().offset((range.start * REC) as u64).len(range.len() * REC).populate().map(file) }
            .map_err(|e| tracing::warn!("cannot map the quantised vectors, scanning f32: {e}"))
            .ok()
    }
}

/// The `f32` vector at row `i` of a window mapped by [`Segment::vector_window`].
#[inline]
pub fn as_vector(map: &Mmap, i: usize) -> &[f32] {
    let bytes = &map[i * VEC_BYTES..(i + 1) * VEC_BYTES];
    // The map is page-aligned and each row is 1,536 bytes, so every row is f32-aligned.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), DIM) }
}

impl Segment {
    /// Maps the `f32` vectors of rows `range` (not pre-faulted: a rescoring pass touches only
    /// the rows it scores), or `None` if that fails. `range.start * 1,536` must be a multiple
    /// of the page size (any multiple of 8 rows is).
    pub fn vector_window(&self, range: std::ops::Range<usize>) -> Option<Mmap> {
        debug_assert!(range.start.is_multiple_of(8) && range.end <= self.len());
        let file = self.vector_file.as_ref()?;
        if range.is_empty() {
            return None;
        }
        unsafe { MmapOptions::new().offset((range.start * VEC_BYTES) as u64).len(range.len() * VEC_BYTES).map(file) }
            .map_err(|e| tracing::warn!("cannot map a vector window: {e}"))
            .ok()
    }
}

/// Rows per scan window: 16,384 records of 392 bytes are 1,568 whole pages (6.3 MB), so every
/// window starts on a page boundary.
pub const WINDOW: usize = 16_384;

/// The derived files of one data root.
pub struct Derived {
    dir: PathBuf,
}

fn io(what: impl std::fmt::Display, path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    let what = what.to_string();
    move |e| Error::io(format!("{what} {}", path.display()), e)
}

impl Derived {
    /// The derived files under `root`, creating the folder when it can; `None` when the data
    /// root cannot hold them (read-only media): searches then keep vectors in memory.
    pub fn open(root: &Path) -> Option<Derived> {
        let dir = root.join(DIR);
        if std::fs::create_dir_all(&dir).is_err() && !dir.is_dir() {
            return None;
        }
        Some(Derived { dir })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn gen_dir(&self, g: u64) -> PathBuf {
        self.dir.join(format!("g{g}"))
    }

    /// The live generation, if any.
    pub fn current(&self) -> Option<u64> {
        std::fs::read_to_string(self.dir.join("current")).ok()?.trim().parse().ok()
    }

    /// Reads the live generation's head (None: no files yet, or unreadable).
    pub fn head(&self) -> Option<(u64, Head)> {
        let g = self.current()?;
        read_head(&self.gen_dir(g)).map(|h| (g, h))
    }

    /// Maps the live generation (None when there is none or it is unreadable).
    pub fn load(&self) -> Result<Option<Segment>> {
        for _ in 0..3 {
            let Some(g) = self.current() else { return Ok(None) };
            match self.load_gen(g) {
                Ok(Some(s)) => return Ok(Some(s)),
                // Switched and removed between reading `current` and opening: look again.
                Ok(None) if self.current() != Some(g) => continue,
                other => return other,
            }
        }
        Ok(None)
    }

    fn load_gen(&self, g: u64) -> Result<Option<Segment>> {
        let dir = self.gen_dir(g);
        let Some(head) = read_head(&dir) else { return Ok(None) };
        let rows = head.rows as usize;
        let open = |name: &str| File::open(dir.join(name));
        let (ids, kinds, vectors, quant) = match (open("ids"), open("kinds"), open("vectors"), open("quant")) {
            (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
            _ => return Ok(None),
        };
        // A file shorter than the head promises is damage, not a race (data is written first).
        for (f, per) in [(&ids, 8usize), (&kinds, 1), (&vectors, VEC_BYTES), (&quant, REC)] {
            let len = f.metadata().map_err(io("cannot stat", &dir))?.len();
            if len < (rows * per) as u64 {
                return Err(Error::Corrupt(format!("derived file in {} is shorter than its head says", dir.display())));
            }
        }
        let map = |f: &File, per: usize| -> Result<Option<Mmap>> {
            if rows == 0 {
                return Ok(None);
            }
            unsafe { MmapOptions::new().len(rows * per).map(f) }.map(Some).map_err(io("cannot map", &dir))
        };
        let list = |name: &str, n: u64| -> Result<Vec<i64>> {
            let mut buf = vec![0u8; n as usize * 8];
            if n > 0 {
                File::open(dir.join(name)).and_then(|f| f.read_exact_at(&mut buf, 0)).map_err(io("cannot read", &dir))?;
            }
            Ok(buf.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
        };
        Ok(Some(Segment {
            generation: g,
            dir: dir.clone(),
            head,
            ids: map(&ids, 8)?,
            kinds: map(&kinds, 1)?,
            vectors: map(&vectors, VEC_BYTES)?,
            vector_file: Some(vectors),
            quant: Some(quant),
            pending: list("pending", head.pending)?,
            forgotten: list("forgotten", head.forgotten)?,
        }))
    }

    fn lock(&self) -> Result<File> {
        lock(&self.dir)
    }

    /// Appends rows newer than the live generation's `upto`, as `load(after, visit)` yields
    /// them (`(id, kind, vector bytes)`, empty bytes = no vector yet), and forgotten ids.
    /// Creates generation 1 when there is none. Returns the head now on disk, or `None` when
    /// the live generation belongs to another store (the caller rebuilds). Holds the lock for
    /// the whole append; `progress(rows appended so far)` is called every window.
    pub fn append(
        &self,
        store_id: &[u8; 32],
        forgotten: &[i64],
        load: &mut RowSource<'_>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Option<Head>> {
        let _lock = self.lock()?;
        let g = match self.current() {
            Some(g) => g,
            None => {
                self.create_gen(1, store_id)?;
                self.switch(1)?;
                1
            }
        };
        let dir = self.gen_dir(g);
        let Some(mut head) = read_head(&dir) else {
            return Ok(None);
        };
        if &head.store_id != store_id {
            return Ok(None);
        }
        let mut w = Writer::open(&dir, head)?;
        for id in forgotten.iter().filter(|id| **id <= head.upto) {
            w.forgotten(*id)?;
        }
        head = w.stream(head.upto, load, progress)?;
        Ok(Some(head))
    }

    /// Writes a whole new generation from `load(0, visit)` and makes it live; old
    /// generations are removed (processes that mapped them keep their pages).
    pub fn rebuild(&self, store_id: &[u8; 32], load: &mut RowSource<'_>, progress: &mut dyn FnMut(u64)) -> Result<Head> {
        let _lock = self.lock()?;
        let old = self.current();
        let g = old.map_or(1, |g| g + 1);
        let dir = self.gen_dir(g);
        let _ = std::fs::remove_dir_all(&dir);
        self.create_gen(g, store_id)?;
        let head = read_head(&dir).ok_or_else(|| Error::Corrupt(format!("cannot read the new head in {}", dir.display())))?;
        let head = Writer::open(&dir, head)?.stream(0, load, progress)?;
        self.switch(g)?;
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with('g') && name != format!("g{g}") && name[1..].parse::<u64>().is_ok() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(head)
    }

    fn create_gen(&self, g: u64, store_id: &[u8; 32]) -> Result<()> {
        let dir = self.gen_dir(g);
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        for name in ["ids", "kinds", "vectors", "quant", "pending", "forgotten"] {
            File::create(dir.join(name)).map_err(io("cannot create", &dir))?;
        }
        let head = Head { store_id: *store_id, ..Head::default() };
        write_head(&dir, &head)
    }

    fn switch(&self, g: u64) -> Result<()> {
        let tmp = self.dir.join(format!("current.{}", std::process::id()));
        std::fs::write(&tmp, format!("{g}\n")).map_err(io("cannot write", &tmp))?;
        std::fs::rename(&tmp, self.dir.join("current")).map_err(io("cannot switch", &self.dir))
    }
}

/// Takes the derived files' lock of the folder `index_dir` (held until the file is dropped).
pub fn lock(index_dir: &Path) -> Result<File> {
    let p = index_dir.join("lock");
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(&p).map_err(io("cannot open", &p))?;
    f.lock().map_err(io("cannot lock", &p))?;
    Ok(f)
}

fn read_head(dir: &Path) -> Option<Head> {
    let f = File::open(dir.join("head")).ok()?;
    let mut b = [0u8; HEAD_LEN];
    // The head is rewritten in place by one small write; a torn read fails its checksum.
    for _ in 0..50 {
        if f.read_exact_at(&mut b, 0).is_ok() {
            if let Some(h) = Head::decode(&b) {
                return Some(h);
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    None
}

fn write_head(dir: &Path, head: &Head) -> Result<()> {
    let p = dir.join("head");
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(&p).map_err(io("cannot open", &p))?;
    f.write_all_at(&head.encode(), 0).map_err(io("cannot write", &p))
}

/// Buffers appended rows and writes them at the offsets the head implies, head last.
struct Writer {
    dir: PathBuf,
    head: Head,
    files: [File; 6],
    ids: Vec<u8>,
    kinds: Vec<u8>,
    vectors: Vec<u8>,
    quant: Vec<u8>,
    pending: Vec<u8>,
    forgotten: Vec<u8>,
    rows_buffered: u64,
}

impl Writer {
    fn open(dir: &Path, head: Head) -> Result<Writer> {
        let o = |n: &str| OpenOptions::new().write(true).open(dir.join(n)).map_err(io("cannot open", dir));
        Ok(Writer {
            dir: dir.to_path_buf(),
            head,
            files: [o("ids")?, o("kinds")?, o("vectors")?, o("quant")?, o("pending")?, o("forgotten")?],
            ids: Vec::new(),
            kinds: Vec::new(),
            vectors: Vec::new(),
            quant: Vec::new(),
            pending: Vec::new(),
            forgotten: Vec::new(),
            rows_buffered: 0,
        })
    }

    fn buffered(&self) -> usize {
        self.rows_buffered as usize
    }

    fn row(&mut self, id: i64, kind: Kind, blob: &[u8]) -> Result<()> {
        if id <= self.head.upto {
            return Ok(());
        }
        if blob.is_empty() {
            self.pending.extend_from_slice(&id.to_le_bytes());
        } else {
            if blob.len() != VEC_BYTES {
                return Err(Error::Corrupt(format!("row {id}: stored vector has {} bytes, want {VEC_BYTES}", blob.len())));
            }
            let v: Vec<f32> = blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let at = self.quant.len();
            self.quant.resize(at + REC, 0);
            quant::encode(&v, &mut self.quant[at..]);
            self.ids.extend_from_slice(&id.to_le_bytes());
            self.kinds.push(u8::from(kind == Kind::Lap));
            self.vectors.extend_from_slice(blob);
            self.rows_buffered += 1;
        }
        self.head.upto = id;
        Ok(())
    }

    fn forgotten(&mut self, id: i64) -> Result<()> {
        self.forgotten.extend_from_slice(&id.to_le_bytes());
        Ok(())
    }

    /// Writes what is buffered, then the head that covers it.
    fn flush(&mut self) -> Result<()> {
        let h = self.head;
        let rows = h.rows;
        let bufs: [(&Vec<u8>, u64); 6] = [
            (&self.ids, rows * 8),
            (&self.kinds, rows),
            (&self.vectors, rows * VEC_BYTES as u64),
            (&self.quant, rows * REC as u64),
            (&self.pending, h.pending * 8),
            (&self.forgotten, h.forgotten * 8),
        ];
        for ((buf, at), f) in bufs.iter().zip(&self.files) {
            if !buf.is_empty() {
                f.write_all_at(buf, *at).map_err(io("cannot write to", &self.dir))?;
            }
        }
        self.head.rows += self.rows_buffered;
        self.head.pending += (self.pending.len() / 8) as u64;
        self.head.forgotten += (self.forgotten.len() / 8) as u64;
        write_head(&self.dir, &self.head)?;
        for b in [&mut self.ids, &mut self.kinds, &mut self.vectors, &mut self.quant, &mut self.pending, &mut self.forgotten] {
            b.clear();
        }
        self.rows_buffered = 0;
        Ok(())
    }

    /// Writes every row `load` yields after `after`, a window of rows at a time (head after
    /// each, `progress(rows so far)`), and returns the final head.
    fn stream(mut self, after: i64, load: &mut RowSource<'_>, progress: &mut dyn FnMut(u64)) -> Result<Head> {
        let mut n = 0u64;
        load(after, &mut |id, kind, blob| {
            self.row(id, kind, blob)?;
            n += 1;
            if self.buffered() >= 4096 {
                self.flush()?;
                progress(n);
            }
            Ok(())
        })?;
        let head = self.finish()?;
        progress(n);
        Ok(head)
    }

    fn finish(mut self) -> Result<Head> {
        self.flush()?;
        let _ = self.files[0].flush();
        Ok(self.head)
    }
}
