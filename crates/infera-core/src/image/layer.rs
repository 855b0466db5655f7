//! One layer in one streaming pass: the blob hashed as it is read (its digest), then
//! decompressed (gzip or zstd by their magic bytes, else a plain tar) and hashed again (its
//! diff_id), each tar entry turned into a change of the tree. Each digest is computed on a
//! thread of its own beside the decompression (SHA-256 of a layer costs as much as zstd's
//! decoding of it). Entries that would reach out
//! of the image are refused, never followed; a layer past the bounds is refused.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::Digest as _;

use super::source::Source;
use super::tarstream::{after, bound, Between, Bound};
use super::tree::{Changes, Kept, Node, Put};
use super::ImageError;

/// What to keep of a file, given its path in the image, its size and its mode.
pub type Keep = dyn Fn(&Path, u64, u32) -> Want + Sync;

pub enum Want {
    /// Its first bytes: its size for all of it, a few hundred for its header, 0 for nothing.
    Head(u64),
    /// The parts a reader that seeks will read, chosen as the bytes stream past.
    Capture(Box<dyn Capture>),
}

/// Chooses what to keep of one file while its bytes stream past, once and in order.
pub trait Capture {
    /// The bytes at offset `at`.
    fn feed(&mut self, at: u64, bytes: &[u8]);
    /// `len` zero bytes at offset `at`: a sparse file's hole, told without its bytes (a hole
    /// of gigabytes costs what the capture keeps of it, not its length).
    fn zeros(&mut self, at: u64, len: u64);
    /// What was kept of the file of `size` bytes.
    fn finish(self: Box<Self>, size: u64) -> crate::at::Ranges;
}

/// A layer's uncompressed bytes.
const MAX_BYTES: u64 = 1 << 40;
/// Uncompressed over compressed bytes, checked past `RATIO_AFTER` of output: real layers
/// are under 20:1 (10:1 for a layer of binaries); gzip of zeros is 1032:1, zstd's unbounded.
const MAX_RATIO: u64 = 100;
const RATIO_AFTER: u64 = 1 << 30;
/// A name or link target: PATH_MAX, past which no runtime can create or open it.
const MAX_NAME: usize = 4096;
/// How often a long layer's progress is said, in uncompressed bytes.
pub const PROGRESS_EVERY: u64 = 2 << 30;
/// A kept file (the largest file a fact reads whole).
const MAX_KEPT: u64 = 64 << 20;

/// What one image may hold over all its layers, read in parallel: entries, the bytes of
/// their names, the bytes of the files kept. Real engine images: about a million entries,
/// a hundred MB of names, tens of MB kept.
#[derive(Debug, Default)]
pub struct Totals {
    entries: AtomicU64,
    names: AtomicU64,
    kept: AtomicU64,
}

const MAX_ENTRIES: u64 = 4_000_000;
const MAX_NAME_BYTES: u64 = 512 << 20;
const MAX_KEPT_TOTAL: u64 = 256 << 20;

impl Totals {
    /// Count `n` more of one total; Err(what) past its bound.
    fn add(&self, which: &AtomicU64, n: u64, max: u64, what: &str) -> Result<(), String> {
        if which.fetch_add(n, Ordering::Relaxed).saturating_add(n) > max {
            return Err(format!("more than {what} in the image"));
        }
        Ok(())
    }
}

/// A layer's bytes that are not what they should be: a blob that ends before its size, a
/// compressed stream its codec refuses.
#[derive(Debug)]
struct Damage(String);

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damage {}

/// Whether an error is one of this reader's own (a bound, damage), to pass on as it is.
fn ours(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Bound>() || i.is::<Damage>())
}

/// A blob of a known size: its end before that size is damage (a copy cut short), said with
/// the byte it ends at.
struct Sized<R> {
    inner: R,
    read: u64,
    size: Option<u64>,
}

impl<R: Read> Read for Sized<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        match self.size {
            Some(size) if n == 0 && !buf.is_empty() && self.read < size => Err(std::io::Error::other(Damage(format!(
                "its blob ends at byte {} of the {size} its descriptor gives (truncated? copy it again)",
                self.read
            )))),
            _ => Ok(n),
        }
    }
}

/// A decompressor: what it refuses of its stream (a bad CRC, a corrupt block, an end in the
/// middle) is damage.
struct Codec<R> {
    inner: R,
    name: &'static str,
}

impl<R: Read> Read for Codec<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            if ours(&e) {
                e
            } else {
                std::io::Error::other(Damage(format!("its {} stream cannot be decompressed: {e}", self.name)))
            }
        })
    }
}

/// SHA-256 of a stream on a thread of its own, beside the decompression: the bytes are handed
/// over in chunks of `CHUNK` through a channel of `IN_FLIGHT` (so a layer holds at most a few
/// MiB more). Where no thread can be started, hashed in line.
struct Sha {
    pending: Vec<u8>,
    tx: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    thread: Option<std::thread::JoinHandle<sha2::Sha256>>,
    inline: Option<sha2::Sha256>,
}

const CHUNK: usize = 1 << 20;
const IN_FLIGHT: usize = 4;

impl Sha {
    fn new() -> Sha {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT);
        let spawned = std::thread::Builder::new().name("sha256".into()).spawn(move || {
            let mut h = sha2::Sha256::new();
            for chunk in rx {
                h.update(&chunk);
            }
            h
        });
        match spawned {
            Ok(thread) => Sha { pending: Vec::with_capacity(CHUNK), tx: Some(tx), thread: Some(thread), inline: None },
            Err(_) => Sha { pending: Vec::new(), tx: None, thread: None, inline: Some(sha2::Sha256::new()) },
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        if let Some(h) = &mut self.inline {
            return h.update(bytes);
        }
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= CHUNK {
            self.send();
        }
    }

    fn send(&mut self) {
        let chunk = std::mem::replace(&mut self.pending, Vec::with_capacity(CHUNK));
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(chunk).is_ok());
        if !sent {
            // The thread is gone (it cannot fail but by a panic): the digest cannot be made.
            self.tx = None;
        }
    }

    /// The digest, `sha256:…`; None if the hashing thread was lost.
    fn finalize(mut self) -> Option<String> {
        if let Some(h) = self.inline.take() {
            return Some(format!("sha256:{:x}", h.finalize()));
        }
        if !self.pending.is_empty() {
            self.send();
        }
        drop(self.tx.take());
        let h = self.thread.take()?.join().ok()?;
        Some(format!("sha256:{:x}", h.finalize()))
    }
}

/// A reader that counts, and hashes, what passes through it; with `ratio_of` (the
/// compressed bytes' count), it is a decompressed stream held to `MAX_RATIO`.
struct Hashing<'p, R> {
    inner: R,
    hash: Option<Sha>,
    bytes: Rc<Cell<u64>>,
    ratio_of: Option<Rc<Cell<u64>>>,
    /// Told the bytes every `PROGRESS_EVERY`.
    progress: Option<&'p dyn Fn(u64)>,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hash {
            h.update(&buf[..n]);
        }
        let before = self.bytes.get();
        let bytes = before + n as u64;
        self.bytes.set(bytes);
        if let Some(p) = self.progress.filter(|_| bytes / PROGRESS_EVERY > before / PROGRESS_EVERY) {
            p(bytes);
        }
        if bytes > MAX_BYTES {
            return Err(bound(format!("more than {} GiB uncompressed", MAX_BYTES >> 30)));
        }
        if let Some(c) =
            self.ratio_of.as_ref().map(|c| c.get()).filter(|c| bytes > RATIO_AFTER && bytes / MAX_RATIO > *c)
        {
            return Err(bound(format!(
                "{} GiB from {} KiB compressed, a ratio over {MAX_RATIO}:1 (a decompression bomb)",
                bytes >> 30,
                c >> 10
            )));
        }
        Ok(n)
    }
}

fn hashing<'p, R: Read>(inner: R, verify: bool, ratio_of: Option<Rc<Cell<u64>>>) -> Hashing<'p, R> {
    Hashing { inner, hash: verify.then(Sha::new), bytes: Rc::default(), ratio_of, progress: None }
}

/// A layer to read: its number (1 = the bottom one), its member, what its blob must hash to
/// (None: a docker-archive's layer) and its length, what its tar must hash to.
pub struct Layer<'a> {
    pub n: usize,
    pub name: &'a str,
    pub digest: Option<&'a str>,
    pub size: Option<u64>,
    pub diff_id: &'a str,
}

/// A layer that could not be read as a tar, whose blob is not the one its manifest names: a
/// byte flipped, a copy cut or altered (`image-digest-mismatch`, "copy it again"), not a
/// layer of another format. None when its blob is what the manifest says, or cannot tell.
pub fn altered(src: &Source, l: &Layer) -> Option<ImageError> {
    let expected = l.digest?;
    let mut blob = src.member(l.name).ok()?.take(l.size.map_or(u64::MAX, |s| s.saturating_add(1)));
    let mut sha = sha2::Sha256::new();
    std::io::copy(&mut blob, &mut sha).ok()?;
    let found = format!("sha256:{:x}", sha.finalize());
    (found != expected).then(|| ImageError::DigestMismatch {
        reference: src.reference().to_string(),
        what: format!("layer {}'s blob", l.n),
        name: l.name.to_string(),
        expected: expected.to_string(),
        found,
    })
}

/// Read a layer in one pass: its changes, its uncompressed size and its blob's. `progress`
/// is told the uncompressed bytes and the blob's bytes read so far.
pub fn read(
    src: &Source,
    l: &Layer,
    keep: &Keep,
    totals: &Totals,
    verify: bool,
    progress: &dyn Fn(u64, u64),
) -> Result<(Changes, u64, u64), ImageError> {
    let (n, name) = (l.n, l.name);
    let blob = src.member(name).map_err(|why| src.unread(&format!("layer {n}"), name, why))?;
    // One byte more than its size, so that a longer blob is seen, never read to its end.
    let blob = Sized { inner: blob.take(l.size.map_or(u64::MAX, |s| s.saturating_add(1))), read: 0, size: l.size };
    let compressed = hashing(blob, verify && l.digest.is_some(), None);
    let read_bytes = compressed.bytes.clone();
    let mut blob = BufReader::with_capacity(1 << 20, compressed);
    let io = |e: std::io::Error| io_error(src, n, name, e);
    let magic = blob.fill_buf().map_err(io)?.get(..4).map(<[u8]>::to_vec).unwrap_or_default();
    let (decoded, ratio): (Box<dyn Read>, _) = match magic.as_slice() {
        [0x1f, 0x8b, ..] => (
            Box::new(Codec { inner: flate2::bufread::MultiGzDecoder::new(&mut blob), name: "gzip" }),
            Some(read_bytes.clone()),
        ),
        [0x28, 0xb5, 0x2f, 0xfd] => (
            Box::new(Codec { inner: zstd::Decoder::with_buffer(&mut blob).map_err(io)?, name: "zstd" }),
            Some(read_bytes.clone()),
        ),
        _ => (Box::new(&mut blob), None),
    };
    let blob_read = read_bytes.clone();
    let told = move |bytes| progress(bytes, blob_read.get());
    let mut tar_stream = hashing(decoded, verify, ratio);
    tar_stream.progress = Some(&told);
    let changes = entries(src, n, &mut tar_stream, keep, totals)?;
    // The tar ends before its padding and the compressed stream's end: read them for the digests.
    std::io::copy(&mut tar_stream, &mut std::io::sink()).map_err(io)?;
    let lost = || io(std::io::Error::other("the thread hashing it was lost"));
    let found_diff = tar_stream.hash.take().map(|h| h.finalize().ok_or_else(lost)).transpose()?;
    let bytes = tar_stream.bytes.get();
    drop(tar_stream);
    std::io::copy(&mut blob, &mut std::io::sink()).map_err(io)?;
    let found_blob = blob.into_inner().hash.map(|h| h.finalize().ok_or_else(lost)).transpose()?;
    check(src, l, read_bytes.get(), found_blob, found_diff)?;
    Ok((changes, bytes, read_bytes.get()))
}

/// The blob's size and digest, and the tar's diff_id, are what the manifest and config say.
fn check(src: &Source, l: &Layer, size: u64, blob: Option<String>, diff: Option<String>) -> Result<(), ImageError> {
    let mismatch = |what: &str, expected: String, found: String| ImageError::DigestMismatch {
        reference: src.reference().to_string(),
        what: format!("layer {}'s {what}", l.n),
        name: l.name.to_string(),
        expected,
        found,
    };
    if let Some(s) = l.size.filter(|s| *s != size) {
        let found = if size > s { format!("more than {s} bytes") } else { format!("{size} bytes") };
        return Err(mismatch("size", format!("{s} bytes (the manifest's)"), found));
    }
    if let (Some(d), Some(f)) = (l.digest, blob) {
        if d != f {
            return Err(mismatch("blob", d.to_string(), f));
        }
    }
    match diff {
        Some(f) if f != l.diff_id => Err(mismatch("diff_id", l.diff_id.to_string(), f)),
        _ => Ok(()),
    }
}

/// A read error: a bound passed is `image-too-large`, damage `image-damaged`, anything else
/// (a stream that is no tar) `image-format`.
fn io_error(src: &Source, n: usize, name: &str, e: std::io::Error) -> ImageError {
    let inner = e.get_ref();
    if let Some(Bound(what)) = inner.and_then(|i| i.downcast_ref::<Bound>()) {
        return ImageError::TooLarge { reference: src.reference().to_string(), layer: n, what: what.clone() };
    }
    let what = if name.is_empty() { format!("layer {n}") } else { format!("layer {n} (`{name}`)") };
    match inner.and_then(|i| i.downcast_ref::<Damage>()) {
        Some(Damage(reason)) => {
            ImageError::Damaged { reference: src.reference().to_string(), what, reason: reason.clone() }
        }
        None => src.format(format!("{what}: {e}")),
    }
}

/// The layer's tar, entry by entry, as changes.
fn entries(src: &Source, n: usize, r: &mut dyn Read, keep: &Keep, totals: &Totals) -> Result<Changes, ImageError> {
    let io = |e: std::io::Error| io_error(src, n, "", e);
    let (stream, left) = Between::new(r);
    let mut archive = tar::Archive::new(stream);
    let mut c = Changes::default();
    for e in archive.entries().map_err(io)? {
        let mut e = e.map_err(io)?;
        left.set(u64::MAX);
        let raw = e.path().map_err(io)?.into_owned();
        let (path, put, read) = entry(src, n, &mut e, &raw, keep, totals)?;
        // What the tar crate skips of this entry (to its 512-byte padding), then its headers.
        left.set(after(e.size(), read));
        let Some(put) = put else { continue };
        if !whiteout(&path, &mut c).map_err(|what| unsafe_entry(src, n, what, &raw))? {
            c.puts.push((path, put));
        }
    }
    Ok(c)
}

fn unsafe_entry(src: &Source, n: usize, what: &str, entry: &Path) -> ImageError {
    ImageError::UnsafeEntry {
        reference: src.reference().to_string(),
        layer: n,
        what: what.to_string(),
        entry: shown(entry),
    }
}

/// A name as a message shows it: a hostile one can be 4 KiB.
fn shown(p: &Path) -> String {
    let s = p.to_string_lossy().escape_debug().to_string();
    match s.char_indices().nth(200) {
        Some((at, _)) => format!("{}… ({} bytes)", &s[..at], p.as_os_str().len()),
        None => s,
    }
}

/// One entry: its path in the image, what it puts (None: nothing a tree holds), and the
/// bytes of its data read.
fn entry<R: Read>(
    src: &Source,
    n: usize,
    e: &mut tar::Entry<R>,
    raw: &Path,
    keep: &Keep,
    totals: &Totals,
) -> Result<(PathBuf, Option<Put>, u64), ImageError> {
    let too_large = |what: String| ImageError::TooLarge { reference: src.reference().to_string(), layer: n, what };
    totals.add(&totals.entries, 1, MAX_ENTRIES, &format!("{MAX_ENTRIES} entries")).map_err(too_large)?;
    let len = raw.as_os_str().len() as u64;
    totals
        .add(&totals.names, len, MAX_NAME_BYTES, &format!("{} MiB of names", MAX_NAME_BYTES >> 20))
        .map_err(too_large)?;
    let path = name(raw).map_err(|what| unsafe_entry(src, n, what, raw))?;
    let io = |e: std::io::Error| io_error(src, n, "", e);
    let link = |e: &tar::Entry<R>| -> Result<PathBuf, ImageError> {
        let t = e.link_name().map_err(io)?.map(|t| t.into_owned()).unwrap_or_default();
        let bytes = t.as_os_str().as_bytes();
        if bytes.len() > MAX_NAME || bytes.contains(&0) {
            return Err(unsafe_entry(src, n, "a link target longer than PATH_MAX (4096) or with a NUL byte", raw));
        }
        Ok(t)
    };
    let mode = e.header().mode().unwrap_or(0);
    let put = match e.header().entry_type() {
        tar::EntryType::Directory => Node::Dir { mode },
        // The old GNU sparse type is expanded by the tar crate (its size is the real one).
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
            let sparse = pax_sparse(e).map_err(|why| unsafe_entry(src, n, &why, raw))?;
            let path = match sparse.as_ref().and_then(|s| s.name.as_ref()) {
                Some(real) => name(real).map_err(|what| unsafe_entry(src, n, what, real))?,
                None => path,
            };
            let size = sparse.as_ref().map_or(e.size(), |s| s.size);
            if size > MAX_BYTES {
                return Err(too_large(format!("a file of {} GiB", size >> 30)));
            }
            let want = keep(&path, size, mode);
            let (data, read) = match sparse {
                None => kept(e, size, want).map_err(io)?,
                Some(s) => expanded(e, s, want).map_err(|why| match why {
                    SparseError::Io(e) => io(e),
                    SparseError::Map(why) => unsafe_entry(src, n, &why, raw),
                })?,
            };
            let bytes = match &data {
                Some(Kept::Head(d)) => d.len() as u64,
                // The marks a capture recorded are kept too.
                Some(Kept::Parts(r)) => r.kept() + r.marks.as_ref().map_or(0, |m| (m.len() * 16) as u64),
                None => 0,
            };
            let what = format!("{} MiB of the files the facts read", MAX_KEPT_TOTAL >> 20);
            totals.add(&totals.kept, bytes, MAX_KEPT_TOTAL, &what).map_err(too_large)?;
            return Ok((path, Some(Put::Node(Node::File { mode, size, data })), read));
        }
        tar::EntryType::Symlink => Node::Symlink { target: link(e)? },
        tar::EntryType::Link => {
            let target = link(e)?;
            let target =
                inside(&target).ok_or_else(|| unsafe_entry(src, n, "a hard link out of the image", &target))?;
            return Ok((path, Some(Put::HardLink(target)), 0));
        }
        tar::EntryType::Char => Node::Special { mode: nix::libc::S_IFCHR | mode },
        tar::EntryType::Block => Node::Special { mode: nix::libc::S_IFBLK | mode },
        tar::EntryType::Fifo => Node::Special { mode: nix::libc::S_IFIFO | mode },
        _ => return Ok((path, None, 0)), // pax and GNU headers are read by the tar crate; nothing else is a file
    };
    Ok((path, Some(Put::Node(put)), 0))
}

/// A member's PAX sparse records, when it has them (see [`super::sparse`]).
fn pax_sparse<R: Read>(e: &mut tar::Entry<R>) -> Result<Option<super::sparse::Sparse>, String> {
    let Some(exts) = e.pax_extensions().map_err(|e| e.to_string())? else { return Ok(None) };
    let mut records: Vec<(String, Vec<u8>)> = Vec::new();
    for x in exts {
        let x = x.map_err(|e| e.to_string())?;
        if let Some(k) = x.key().ok().filter(|k| k.starts_with("GNU.sparse.")) {
            records.push((k.to_string(), x.value_bytes().to_vec()));
        }
    }
    super::sparse::of_pax(records.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
        .map_err(|why| format!("a sparse file whose map cannot be read ({why})"))
}

/// Why a PAX sparse member cannot be expanded.
enum SparseError {
    Io(std::io::Error),
    /// A map its data does not match.
    Map(String),
}

/// A PAX sparse member's data expanded (holes as zeros) and kept as `want` says; the bytes
/// of the member's data read.
fn expanded<R: Read>(
    e: &mut tar::Entry<R>,
    s: super::sparse::Sparse,
    want: Want,
) -> Result<(Option<Kept>, u64), SparseError> {
    let condensed = e.size();
    let mut counted = Counted { inner: e, n: 0 };
    let blocks = match s.map {
        Some(b) => b,
        None => {
            let map = super::sparse::read_map(&mut counted);
            map.map_err(|why| SparseError::Map(format!("a sparse file whose map cannot be read ({why})")))?.0
        }
    };
    let data: u64 = blocks.iter().map(|(_, l)| l).sum();
    if counted.n.saturating_add(data) != condensed {
        let held = condensed.saturating_sub(counted.n);
        return Err(SparseError::Map(format!(
            "a sparse file whose map lists {data} bytes of data where it holds {held}"
        )));
    }
    if blocks.last().is_some_and(|(o, l)| o + l > s.size) {
        return Err(SparseError::Map(format!("a sparse file: a block past the file's size of {} bytes", s.size)));
    }
    let k = match want {
        // Its data blocks fed where they are, its holes told as such.
        Want::Capture(c) if s.size <= MAX_CAPTURE => Some(captured_sparse(&mut counted, &blocks, s.size, c)?),
        want => {
            let x = super::sparse::Expanded::new(&mut counted, blocks, s.size);
            let mut x = x.map_err(|why| SparseError::Map(format!("a sparse file: {why}")))?;
            kept(&mut x, s.size, want).map_err(SparseError::Io)?.0
        }
    };
    Ok((k, counted.n))
}

/// A sparse file captured: each data block's bytes fed at its offset, each hole (between the
/// blocks, and after the last) told to the capture as zeros.
fn captured_sparse(
    data: &mut dyn Read,
    blocks: &[(u64, u64)],
    size: u64,
    mut c: Box<dyn Capture>,
) -> Result<Kept, SparseError> {
    let mut buf = vec![0u8; 256 << 10];
    let mut at = 0u64;
    for &(off, len) in blocks {
        if off > at {
            c.zeros(at, off - at);
        }
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
            let n = data.read(&mut buf[..want]).map_err(SparseError::Io)?;
            if n == 0 {
                let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the sparse member's data ends early");
                return Err(SparseError::Io(eof));
            }
            c.feed(off + len - left, &buf[..n]);
            left -= n as u64;
        }
        at = off + len;
    }
    if size > at {
        c.zeros(at, size - at);
    }
    Ok(Kept::Parts(std::sync::Arc::new(c.finish(size))))
}

/// A reader that counts what it reads.
struct Counted<R> {
    inner: R,
    n: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

/// The largest file whose GPU code is read from the stream (a library's code is a few GB).
const MAX_CAPTURE: u64 = 16 << 30;

/// What `want` keeps of a file of `size` bytes read from `e`, and the bytes of it read.
fn kept(e: &mut dyn Read, size: u64, want: Want) -> std::io::Result<(Option<Kept>, u64)> {
    let want = match want {
        Want::Capture(_) if size > MAX_CAPTURE => Want::Head(0),
        w => w,
    };
    match want {
        Want::Head(n) => {
            let n = n.min(size).min(MAX_KEPT);
            if n == 0 {
                return Ok((None, 0));
            }
            let mut v = Vec::with_capacity(n as usize);
            e.take(n).read_to_end(&mut v)?;
            let read = v.len() as u64;
            Ok((Some(Kept::Head(v.into())), read))
        }
        Want::Capture(mut c) => {
            let (mut buf, mut at) = (vec![0u8; 256 << 10], 0u64);
            loop {
                let n = e.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                c.feed(at, &buf[..n]);
                at += n as u64;
            }
            Ok((Some(Kept::Parts(std::sync::Arc::new(c.finish(size)))), at))
        }
    }
}

/// A tar name as a path of the image; Err(what) when it leaves the image, holds a NUL
/// byte or is longer than PATH_MAX.
fn name(raw: &Path) -> Result<PathBuf, &'static str> {
    let bytes = raw.as_os_str().as_bytes();
    if bytes.len() > MAX_NAME {
        return Err("a name longer than PATH_MAX (4096 bytes)");
    }
    if bytes.contains(&0) {
        return Err("a name with a NUL byte");
    }
    inside(raw).ok_or("a name that leaves the image (`..` or absolute)")
}

/// A whiteout entry (`.wh.NAME`, `.wh..wh..opq`) recorded in `c`: Ok(true); any other
/// entry: Ok(false).
fn whiteout(path: &Path, c: &mut Changes) -> Result<bool, &'static str> {
    let name = path.file_name().map(|f| f.to_string_lossy()).unwrap_or_default();
    let Some(hidden) = name.strip_prefix(".wh.") else { return Ok(false) };
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    match hidden {
        ".wh..opq" => c.opaque.push(dir),
        "" => return Err("an empty whiteout"),
        "." | ".." => return Err("a whiteout of `.` or `..` (no runtime removes a directory's own entry)"),
        name => c.whiteouts.push(dir.join(name)),
    }
    Ok(true)
}

/// A tar name as a path of the image (`/`-rooted), or None when it leaves it: a `..`
/// component, or an absolute name. `.` and empty components go, as `Path::components`
/// drops them (done on the bytes: it runs once per entry of every layer).
fn inside(name: &Path) -> Option<PathBuf> {
    let b = name.as_os_str().as_bytes();
    if b.first() == Some(&b'/') {
        return None;
    }
    let mut p = Vec::with_capacity(b.len() + 1);
    for c in b.split(|x| *x == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return None,
            c => {
                p.push(b'/');
                p.extend_from_slice(c);
            }
        }
    }
    if p.is_empty() {
        p.push(b'/');
    }
    Some(PathBuf::from(std::ffi::OsString::from_vec(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tarstream::MAX_HEADERS;

    #[test]
    fn the_image_totals_are_shared_by_its_layers() {
        let t = Totals::default();
        assert!(t.add(&t.entries, MAX_ENTRIES - 1, MAX_ENTRIES, "E").is_ok());
        assert!(t.add(&t.entries, 1, MAX_ENTRIES, "E").is_ok());
        assert_eq!(t.add(&t.entries, 1, MAX_ENTRIES, "E"), Err("more than E in the image".to_string()));
        assert!(t.add(&t.kept, MAX_KEPT_TOTAL, MAX_KEPT_TOTAL, "K").is_ok(), "each total on its own");
    }

    #[test]
    fn names_inside_the_image() {
        let p = |s: &str| inside(Path::new(s)).map(|p| p.display().to_string());
        assert_eq!(p("./usr//lib/./x/").as_deref(), Some("/usr/lib/x"));
        assert_eq!(p(".").as_deref(), Some("/"));
        assert_eq!(p("a/../b"), None);
        assert_eq!(p("/etc"), None);
        assert_eq!(p("..."), Some("/...".into()));
    }

    #[test]
    fn the_budget_between_entries_covers_the_skipped_rest() {
        assert_eq!(after(0, 0), MAX_HEADERS);
        assert_eq!(after(1, 0), 512 + MAX_HEADERS);
        assert_eq!(after(1000, 1000), 24 + MAX_HEADERS);
        assert_eq!(after(u64::MAX, 0), u64::MAX);
    }
}
