//! One layer in one streaming pass: the blob hashed as it is read (its digest), then
//! decompressed (gzip or zstd by their magic bytes, else a plain tar) and hashed again (its
//! diff_id), each tar entry turned into a change of the tree. Entries that would reach out
//! of the image are refused, never followed; a layer past the bounds is refused.

use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

use sha2::Digest as _;

use super::source::Source;
use super::tree::{Changes, Node, Put};
use super::ImageError;

/// How much of a file to keep, given its path in the image, its size and its mode: its
/// size for all of it, a few hundred bytes for its header, 0 for nothing.
pub type Keep = dyn Fn(&Path, u64, u32) -> u64 + Sync;

/// A layer's bounds: its uncompressed bytes, its entries, a kept file's size.
const MAX_BYTES: u64 = 1 << 40;
const MAX_ENTRIES: u64 = 10_000_000;
const MAX_KEPT: u64 = 64 << 20;

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hash: Option<sha2::Sha256>,
    bytes: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hash {
            h.update(&buf[..n]);
        }
        self.bytes += n as u64;
        if self.bytes > MAX_BYTES {
            return Err(std::io::Error::other("more than 1 TiB"));
        }
        Ok(n)
    }
}

fn hashing<R: Read>(inner: R, verify: bool) -> Hashing<R> {
    Hashing { inner, hash: verify.then(sha2::Sha256::new), bytes: 0 }
}

/// Read layer `n` (1 = the bottom one) from member `name`; `digest` is what the blob must
/// hash to (None: a docker-archive's layer), `diff_id` what its tar must. Returns its
/// changes and its uncompressed size.
pub fn read(
    src: &Source,
    n: usize,
    name: &str,
    digest: Option<&str>,
    diff_id: &str,
    keep: &Keep,
    verify: bool,
) -> Result<(Changes, u64), ImageError> {
    let blob = src.member(name).ok_or_else(|| src.missing(&format!("layer {n}"), name))?;
    let mut blob = BufReader::with_capacity(1 << 20, hashing(blob, verify && digest.is_some()));
    let io = |e: std::io::Error| src.format(format!("layer {n} (`{name}`): {e}"));
    let magic = blob.fill_buf().map_err(io)?.get(..4).map(<[u8]>::to_vec).unwrap_or_default();
    let decoded: Box<dyn Read> = match magic.as_slice() {
        [0x1f, 0x8b, ..] => Box::new(flate2::bufread::MultiGzDecoder::new(&mut blob)),
        [0x28, 0xb5, 0x2f, 0xfd] => Box::new(zstd::Decoder::with_buffer(&mut blob).map_err(io)?),
        _ => Box::new(&mut blob),
    };
    let mut tar_stream = hashing(decoded, verify);
    let changes = entries(src, n, &mut tar_stream, keep)?;
    // The tar ends before its padding and the compressed stream's end: read them for the digests.
    std::io::copy(&mut tar_stream, &mut std::io::sink()).map_err(io)?;
    let found_diff = tar_stream.hash.take().map(|h| format!("sha256:{:x}", h.finalize()));
    let bytes = tar_stream.bytes;
    drop(tar_stream);
    std::io::copy(&mut blob, &mut std::io::sink()).map_err(io)?;
    let found_blob = blob.into_inner().hash.map(|h| format!("sha256:{:x}", h.finalize()));
    let mismatch = |what: &str, expected: &str, found: String| ImageError::DigestMismatch {
        reference: src.reference().to_string(),
        what: format!("layer {n}'s {what}"),
        name: name.to_string(),
        expected: expected.to_string(),
        found,
    };
    if let (Some(d), Some(f)) = (digest, found_blob) {
        if d != f {
            return Err(mismatch("blob", d, f));
        }
    }
    match found_diff {
        Some(f) if f != diff_id => Err(mismatch("diff_id", diff_id, f)),
        _ => Ok((changes, bytes)),
    }
}

/// The layer's tar, entry by entry, as changes.
fn entries(src: &Source, n: usize, r: &mut dyn Read, keep: &Keep) -> Result<Changes, ImageError> {
    let unsafe_entry = |what: &str, entry: &Path| ImageError::UnsafeEntry {
        reference: src.reference().to_string(),
        layer: n,
        what: what.to_string(),
        entry: entry.display().to_string(),
    };
    let io = |e: std::io::Error| src.format(format!("layer {n}: {e}"));
    let mut archive = tar::Archive::new(r);
    let mut c = Changes::default();
    for (count, e) in archive.entries().map_err(io)?.enumerate() {
        if count as u64 >= MAX_ENTRIES {
            return Err(ImageError::TooLarge {
                reference: src.reference().to_string(),
                layer: n,
                what: format!("more than {MAX_ENTRIES} entries"),
            });
        }
        let mut e = e.map_err(io)?;
        let raw = e.path().map_err(io)?.into_owned();
        let path = inside(&raw).ok_or_else(|| unsafe_entry("a name that leaves the image (`..` or absolute)", &raw))?;
        if whiteout(&path, &mut c).map_err(|what| unsafe_entry(what, &raw))? {
            continue;
        }
        let h = e.header();
        let mode = h.mode().unwrap_or(0);
        let put = match h.entry_type() {
            tar::EntryType::Directory => Put::Node(Node::Dir { mode }),
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = e.size();
                let want = keep(&path, size, mode).min(size).min(MAX_KEPT);
                let data = if want > 0 {
                    let mut v = Vec::with_capacity(want as usize);
                    (&mut e).take(want).read_to_end(&mut v).map_err(io)?;
                    Some(v)
                } else {
                    None
                };
                Put::Node(Node::File { mode, size, data })
            }
            tar::EntryType::Symlink => {
                let target = e.link_name().map_err(io)?.map(|t| t.into_owned()).unwrap_or_default();
                Put::Node(Node::Symlink { target })
            }
            tar::EntryType::Link => {
                let target = e.link_name().map_err(io)?.map(|t| t.into_owned()).unwrap_or_default();
                let target = inside(&target).ok_or_else(|| unsafe_entry("a hard link out of the image", &target))?;
                Put::HardLink(target)
            }
            tar::EntryType::Char => Put::Node(Node::Special { mode: nix::libc::S_IFCHR | mode }),
            tar::EntryType::Block => Put::Node(Node::Special { mode: nix::libc::S_IFBLK | mode }),
            tar::EntryType::Fifo => Put::Node(Node::Special { mode: nix::libc::S_IFIFO | mode }),
            _ => continue, // pax and GNU headers are read by the tar crate; nothing else is a file
        };
        c.puts.push((path, put));
    }
    Ok(c)
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
        name => c.whiteouts.push(dir.join(name)),
    }
    Ok(true)
}

/// A tar name as a path of the image (`/`-rooted), or None when it leaves it: a `..`
/// component, or an absolute name.
fn inside(name: &Path) -> Option<PathBuf> {
    let mut p = PathBuf::from("/");
    for c in name.components() {
        match c {
            Component::Normal(x) => p.push(x),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(p)
}
