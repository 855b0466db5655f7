//! The GPU targets a HIP library carries, read from its file without running anything.
//!
//! A HIP library keeps its device code in the ELF section `.hip_fatbin`: clang offload
//! bundles, one after another, each plain (`__CLANG_OFFLOAD_BUNDLE__`, a u64 entry count,
//! then per entry u64 offset, u64 size, u64 id length and the id, such as
//! `hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`) or compressed (`CCOB`, a version 1–3
//! header of 20/24/32 bytes, method 0 zlib or 1 zstd, one stream of a plain bundle whose id
//! table comes first). Formats: clang/lib/Driver/OffloadBundler.cpp and
//! llvm/lib/Object/OffloadBundle.cpp; no maintained crate reads them, hence this reader, which
//! reads only the ELF header and section headers (goblin parses them), each bundle's id table
//! (decompression stops as soon as the table is complete) and at most `MAX_BUNDLES` bundles.
//! Every length is bounded: a truncated or hostile file gives an error, never a large read.
//!
//! It reads at offsets ([`ReadAt`]): a file of a directory root, or what [`Capture`] kept of
//! one as an image archive's layer streamed past — the same parts this reader reads, chosen
//! before the section headers (at the file's end) are seen.

use std::collections::BTreeSet;
use std::io::Read;

use infera_core::at::{Ranges, ReadAt};

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::{Elf, SectionHeader};

const PLAIN: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
const CCOB: &[u8; 4] = b"CCOB";
/// Bundles read per file: enough to see every target set of real libraries (which repeat
/// one set per translation unit); beyond it the result says it was sampled.
pub const MAX_BUNDLES: usize = 64;
/// The largest id table accepted (real ones are under 4 KiB).
const MAX_TABLE: usize = 64 << 10;
/// Compressed bytes fed to a decoder before giving up on reaching the id table.
const MAX_COMPRESSED: u64 = 1 << 20;

/// What a file's bundles say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// Each distinct set of GPU targets (host entries left out), with how many bundles had it.
    pub sets: Vec<(BTreeSet<String>, usize)>,
    /// Bundles read.
    pub bundles: usize,
    /// More bundles followed than were read.
    pub sampled: bool,
}

impl Targets {
    /// Every target of any bundle.
    pub fn all(&self) -> BTreeSet<&str> {
        self.sets.iter().flat_map(|(s, _)| s.iter().map(String::as_str)).collect()
    }
}

/// The targets of an ELF file's `.hip_fatbin`; Ok(None) when it has no such section.
pub fn read(file: &dyn ReadAt, size: u64) -> Result<Option<Targets>, String> {
    let Some((start, len)) = section(file, size)? else { return Ok(None) };
    let end = start.checked_add(len).filter(|e| *e <= size).ok_or("`.hip_fatbin` lies outside the file")?;
    let mut sets: Vec<(BTreeSet<String>, usize)> = Vec::new();
    let (mut pos, mut bundles, mut sampled) = (start, 0usize, false);
    while pos < end {
        if bundles == MAX_BUNDLES {
            sampled = true;
            break;
        }
        let (ids, next) = bundle(file, pos, end)?;
        let set: BTreeSet<String> = ids.into_iter().filter(|i| !i.starts_with("host")).collect();
        match sets.iter_mut().find(|(s, _)| *s == set) {
            Some((_, n)) => *n += 1,
            None => sets.push((set, 1)),
        }
        bundles += 1;
        match next.and_then(|n| next_magic(file, n, end)) {
            Some(n) if n > pos => pos = n,
            _ => break,
        }
    }
    if bundles == 0 {
        return Err("`.hip_fatbin` holds no offload bundle".into());
    }
    Ok(Some(Targets { sets, bundles, sampled }))
}

/// `.hip_fatbin`'s offset and size, from the ELF header and section headers only.
fn section(file: &dyn ReadAt, size: u64) -> Result<Option<(u64, u64)>, String> {
    let mut head = [0u8; 64];
    read_at(file, &mut head, 0).map_err(|_| "too short for an ELF header".to_string())?;
    let h = Elf::parse_header(&head).map_err(|e| format!("not an ELF file: {e}"))?;
    let ctx = Ctx::new(if h.e_ident[4] == 2 { Container::Big } else { Container::Little }, Endian::Little);
    let (count, entsize) = (u64::from(h.e_shnum), u64::from(h.e_shentsize));
    if h.e_shoff == 0 || count == 0 {
        return Ok(None); // no section headers (or more than 65279: no HIP library has that)
    }
    let table = count.checked_mul(entsize).filter(|t| *t <= 1 << 20 && h.e_shoff.saturating_add(*t) <= size);
    let table = table.ok_or("its section header table lies outside the file")?;
    let mut buf = vec![0u8; table as usize];
    read_at(file, &mut buf, h.e_shoff).map_err(|e| e.to_string())?;
    let headers =
        SectionHeader::parse_from(&buf, 0, count as usize, ctx).map_err(|e| format!("bad section headers: {e}"))?;
    let strtab = headers.get(usize::from(h.e_shstrndx)).ok_or("no section name table")?;
    if strtab.sh_size > 1 << 20 || strtab.sh_offset.saturating_add(strtab.sh_size) > size {
        return Err("its section name table lies outside the file".into());
    }
    // A linker puts the names just before the section headers; an image's stream keeps the
    // MiB before them (`Capture`), so the names are read there only, from a file as from an
    // archive: the same answer for the same library.
    let near = h.e_shoff.saturating_sub(1 << 20)..=h.e_shoff.saturating_add(table);
    if !near.contains(&strtab.sh_offset) || !near.contains(&strtab.sh_offset.saturating_add(strtab.sh_size)) {
        return Err(format!(
            "its section name table (at {:#x}) is not in the MiB before its section headers (at {:#x}), where a linker puts it",
            strtab.sh_offset, h.e_shoff
        ));
    }
    let mut names = vec![0u8; strtab.sh_size as usize];
    read_at(file, &mut names, strtab.sh_offset).map_err(|e| e.to_string())?;
    let name = |at: usize| names.get(at..).and_then(|s| s.split(|b| *b == 0).next());
    Ok(headers.iter().find(|s| name(s.sh_name) == Some(b".hip_fatbin")).map(|s| (s.sh_offset, s.sh_size)))
}

/// One bundle at `pos`: its entry ids, and where the next may start (None: unknown).
fn bundle(file: &dyn ReadAt, pos: u64, end: u64) -> Result<(Vec<String>, Option<u64>), String> {
    let mut magic = [0u8; 24];
    read_at(file, &mut magic, pos).map_err(|_| format!("truncated bundle at {pos:#x}"))?;
    if &magic == PLAIN {
        // 4 KiB holds a real id table; a longer one is read once more, up to MAX_TABLE.
        let mut entries = None;
        for want in [4096u64, MAX_TABLE as u64] {
            let mut head = vec![0u8; (end - pos).min(want) as usize];
            read_at(file, &mut head, pos).map_err(|e| e.to_string())?;
            entries = table(&head)?;
            if entries.is_some() || head.len() as u64 == end - pos {
                break;
            }
        }
        let entries = entries.ok_or_else(|| format!("the bundle at {pos:#x} has a truncated id table"))?;
        // An entry's code lies inside the section, or the bundle is not one (its ids unproven).
        if let Some(e) =
            entries.iter().find(|e| e.1.checked_add(e.2).and_then(|x| x.checked_add(pos)).is_none_or(|x| x > end))
        {
            return Err(format!(
                "the bundle at {pos:#x} has an entry (`{}`) of {} bytes at {:#x}, past the `.hip_fatbin` section's end at {end:#x}",
                e.0, e.2, e.1
            ));
        }
        let last = entries.iter().map(|e| e.1 + e.2).max().unwrap_or(0);
        return Ok((entries.into_iter().map(|e| e.0).collect(), pos.checked_add(last.max(1))));
    }
    if &magic[..4] == CCOB {
        let (ids, next) = compressed(file, pos, &magic)?;
        if next.is_some_and(|n| n > end) {
            return Err(format!(
                "the compressed bundle at {pos:#x} claims to end past the `.hip_fatbin` section's end at {end:#x}"
            ));
        }
        return Ok((ids, next));
    }
    Err(format!("no bundle magic at {pos:#x}"))
}

/// A plain bundle's entries (id, offset, size) from its first bytes; Ok(None) when `head`
/// ends before the table does.
/// An entry of a bundle's table: its id, offset and size.
type Entry = (String, u64, u64);

fn table(head: &[u8]) -> Result<Option<Vec<Entry>>, String> {
    let u64_at = |at: usize| head.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    if head.len() >= 24 && &head[..24] != PLAIN {
        return Err("not an offload bundle".into());
    }
    let Some(count) = u64_at(24) else { return Ok(None) };
    if count > 4096 {
        return Err(format!("an offload bundle claims {count} entries"));
    }
    let (mut at, mut out) = (32usize, Vec::new());
    for _ in 0..count {
        let (Some(off), Some(size), Some(len)) = (u64_at(at), u64_at(at + 8), u64_at(at + 16)) else { return Ok(None) };
        if len > 1024 {
            return Err(format!("an offload bundle entry id of {len} bytes"));
        }
        let Some(id) = head.get(at + 24..at + 24 + len as usize) else { return Ok(None) };
        out.push((String::from_utf8_lossy(id).into_owned(), off, size));
        at += 24 + len as usize;
    }
    Ok(Some(out))
}

/// A `CCOB` bundle: decompress until the inner bundle's id table is complete.
fn compressed(file: &dyn ReadAt, pos: u64, head: &[u8; 24]) -> Result<(Vec<String>, Option<u64>), String> {
    let version = u16::from_le_bytes([head[4], head[5]]);
    let method = u16::from_le_bytes([head[6], head[7]]);
    let mut h32 = [0u8; 32];
    read_at(file, &mut h32, pos).map_err(|_| format!("truncated compressed bundle at {pos:#x}"))?;
    let (header, total) = match version {
        1 => (20u64, None),
        2 => (24, Some(u64::from(u32::from_le_bytes(h32[8..12].try_into().unwrap_or_default())))),
        3 => (32, Some(u64::from_le_bytes(h32[8..16].try_into().unwrap_or_default()))),
        v => return Err(format!("compressed bundle version {v} at {pos:#x} is not 1, 2 or 3")),
    };
    let input = Window { file, at: pos + header, left: MAX_COMPRESSED };
    let mut decoder: Box<dyn Read> = match method {
        0 => Box::new(flate2::read::ZlibDecoder::new(input)),
        1 => Box::new(zstd::stream::read::Decoder::new(input).map_err(|e| format!("zstd: {e}"))?),
        m => return Err(format!("compressed bundle method {m} at {pos:#x} is neither zlib (0) nor zstd (1)")),
    };
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(entries) = table(&out)? {
            return Ok((entries.into_iter().map(|e| e.0).collect(), total.map(|t| pos.saturating_add(t.max(1)))));
        }
        let n = decoder.read(&mut chunk).map_err(|e| format!("decompressing the bundle at {pos:#x}: {e}"))?;
        if n == 0 || out.len() > MAX_TABLE {
            return Err(format!("the compressed bundle at {pos:#x} ends before its id table"));
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// How far past a bundle's end the next one's magic is looked for (bundles are aligned:
/// padding is skipped).
const NEXT_WITHIN: u64 = 64 << 10;

/// The next bundle's magic at or after `from`, within `NEXT_WITHIN`: from the marks where a
/// capture recorded them, else by reading.
fn next_magic(file: &dyn ReadAt, from: u64, end: u64) -> Option<u64> {
    if let Some(marks) = file.marks() {
        let limit = end.min(from.saturating_add(NEXT_WITHIN));
        return marks
            .iter()
            .map(|(at, len)| (*at, *len))
            .find(|(at, len)| *at >= from && at + u64::from(*len) <= limit)
            .map(|m| m.0);
    }
    for want in [8u64 << 10, NEXT_WITHIN] {
        let mut buf = vec![0u8; end.saturating_sub(from).min(want) as usize];
        if buf.len() < 4 || read_at(file, &mut buf, from).is_err() {
            return None;
        }
        let find = |m: &[u8]| buf.windows(m.len()).position(|w| w == m);
        if let Some(k) = [find(PLAIN), find(CCOB)].into_iter().flatten().min() {
            return Some(from + k as u64);
        }
        if buf.len() as u64 == end - from {
            return None;
        }
    }
    None
}

fn read_at(file: &dyn ReadAt, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    file.read_exact_at(buf, at)
}

/// A bounded reader over the file from `at`.
struct Window<'f> {
    file: &'f dyn ReadAt,
    at: u64,
    left: u64,
}

impl Read for Window<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (buf.len() as u64).min(self.left).min(16 << 10) as usize;
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}

/// What [`read`] will read of a file, kept as an image layer streams it past: the ELF header,
/// the section header table and the MiB before it (where `.shstrtab` is in a linked library),
/// and from each of the first `MAX_BUNDLES + 8` bundle magics the bytes its id table can
/// need (a plain table, or a compressed one's first zstd block); every magic's offset is
/// recorded for [`next_magic`]. At most about 12 MiB of a library of any size.
#[derive(Default)]
pub struct Capture {
    /// The ELF header as it arrives.
    head: Vec<u8>,
    /// `(start, stop, bytes so far)`: the header, the section header table and the MiB
    /// before it, and a window from each kept magic.
    parts: Vec<(u64, u64, Vec<u8>)>,
    marks: Vec<(u64, u32)>,
    /// The last bytes of the previous piece: a magic may straddle two.
    carry: Vec<u8>,
}

/// The bytes kept from a magic: a plain bundle's largest table, or a compressed bundle's
/// header and a zstd block (128 KiB at most; zlib gives the table sooner).
const PLAIN_KEEP: u64 = MAX_TABLE as u64;
const CCOB_KEEP: u64 = 32 + (128 << 10) + 1024;
/// Magics whose bytes are kept (a few spurious `CCOB` in other sections allowed for), and
/// offsets recorded.
const KEPT_MAGICS: usize = MAX_BUNDLES + 8;
const MAX_MARKS: usize = 1 << 20;

impl Capture {
    pub fn new() -> Capture {
        Capture::default()
    }

    /// The ELF header's section header table, once its 64 bytes are in (with the piece at
    /// `at`): it and 1 MiB before, from what is still to come.
    fn header(&mut self, at: u64) {
        let Ok(h) = Elf::parse_header(&self.head) else { return };
        let table = u64::from(h.e_shnum) * u64::from(h.e_shentsize);
        if h.e_shoff > 0 && table > 0 && table <= 1 << 20 {
            let start = h.e_shoff.saturating_sub(1 << 20).max(at);
            self.parts.push((start, h.e_shoff.saturating_add(table), Vec::new()));
        }
    }

    fn magics(&mut self, at: u64, bytes: &[u8]) {
        let base = at - self.carry.len() as u64;
        let mut hay = std::mem::take(&mut self.carry);
        hay.extend_from_slice(bytes);
        let mut found: Vec<(u64, u32)> =
            memchr::memmem::find_iter(&hay, PLAIN).map(|i| (base + i as u64, 24)).collect();
        found.extend(memchr::memmem::find_iter(&hay, CCOB).map(|i| (base + i as u64, 4)));
        found.sort_unstable();
        for (m, len) in found {
            // A magic wholly in the carry was found with the previous piece.
            if m + u64::from(len) <= at || self.marks.len() >= MAX_MARKS {
                continue;
            }
            self.marks.push((m, len));
            if self.marks.len() <= KEPT_MAGICS {
                let keep = if len == 4 { CCOB_KEEP } else { PLAIN_KEEP };
                let mut first = Vec::new();
                if m < at {
                    first.extend_from_slice(&hay[(m - base) as usize..(at - base) as usize]);
                }
                self.parts.push((m, m + keep, first));
            }
        }
        let from = hay.len().saturating_sub(PLAIN.len() - 1);
        self.carry = hay[from..].to_vec();
    }
}

impl infera_core::image::layer::Capture for Capture {
    fn feed(&mut self, at: u64, bytes: &[u8]) {
        if self.head.len() < 64 && at == self.head.len() as u64 {
            let n = bytes.len().min(64 - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            if self.head.len() == 64 {
                self.parts.push((0, 64, self.head.clone()));
                self.header(at);
            }
        }
        self.magics(at, bytes);
        let end = at + bytes.len() as u64;
        for (start, stop, kept) in &mut self.parts {
            let filled = *start + kept.len() as u64;
            if filled < *stop && filled >= at && filled < end {
                let upto = (*stop).min(end);
                kept.extend_from_slice(&bytes[(filled - at) as usize..(upto - at) as usize]);
            }
        }
    }

    /// A hole: no magic is in it (and none straddles it), the parts it covers get zeros, and
    /// the ELF header, if it starts in it, is all zeros (no ELF: the reader will say so).
    fn zeros(&mut self, at: u64, len: u64) {
        self.carry.clear();
        let end = at.saturating_add(len);
        if self.head.len() < 64 && at == self.head.len() as u64 {
            let n = len.min(64 - self.head.len() as u64) as usize;
            self.head.resize(self.head.len() + n, 0);
            if self.head.len() == 64 {
                self.parts.push((0, 64, self.head.clone()));
                self.header(at);
            }
        }
        for (start, stop, kept) in &mut self.parts {
            let filled = *start + kept.len() as u64;
            if filled < *stop && filled >= at && filled < end {
                let upto = (*stop).min(end);
                kept.resize(kept.len() + (upto - filled) as usize, 0);
            }
        }
    }

    fn finish(self: Box<Self>, size: u64) -> Ranges {
        let parts = self.parts.into_iter().filter(|p| !p.2.is_empty()).map(|(at, _, b)| (at, b.into())).collect();
        Ranges { size, parts, marks: Some(self.marks) }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::io::Write;

    /// A plain bundle of these ids, each with 16 bytes of "code" after the table.
    pub fn plain(ids: &[&str]) -> Vec<u8> {
        let table: usize = 32 + ids.iter().map(|i| 24 + i.len()).sum::<usize>();
        let mut b = PLAIN.to_vec();
        b.extend((ids.len() as u64).to_le_bytes());
        for (k, id) in ids.iter().enumerate() {
            b.extend(((table + 16 * k) as u64).to_le_bytes());
            b.extend(16u64.to_le_bytes());
            b.extend((id.len() as u64).to_le_bytes());
            b.extend(id.as_bytes());
        }
        b.extend(std::iter::repeat_n(0xc0u8, 16 * ids.len()));
        b
    }

    /// A CCOB bundle (version 2 or 3; method 0 zlib) of a plain bundle.
    pub fn ccob(version: u16, inner: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(inner).unwrap();
        let body = z.finish().unwrap();
        let mut b = CCOB.to_vec();
        b.extend(version.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        let header = if version == 2 { 24 } else { 32 };
        let total = (header + body.len()) as u64;
        if version == 2 {
            b.extend((total as u32).to_le_bytes());
            b.extend((inner.len() as u32).to_le_bytes());
        } else {
            b.extend(total.to_le_bytes());
            b.extend((inner.len() as u64).to_le_bytes());
        }
        b.extend(0u64.to_le_bytes()); // hash
        b.extend(body);
        b
    }

    fn file(bytes: &[u8]) -> (tempfile::NamedTempFile, std::fs::File) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        let h = f.reopen().unwrap();
        (f, h)
    }

    const G942: &str = "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-";
    const G950: &str = "hipv4-amdgcn-amd-amdhsa--gfx950";
    const HOST: &str = "host-x86_64-unknown-linux-gnu-";

    #[test]
    fn plain_and_compressed_bundles_give_their_ids() {
        let inner = plain(&[HOST, G942, G950]);
        let (_t, f) = file(&inner);
        assert_eq!(bundle(&f, 0, inner.len() as u64).unwrap().0, [HOST, G942, G950]);
        for v in [2, 3] {
            let c = ccob(v, &inner);
            let (_t, f) = file(&c);
            let (ids, next) = bundle(&f, 0, c.len() as u64).unwrap();
            assert_eq!(ids, [HOST, G942, G950], "v{v}");
            assert_eq!(next, Some(c.len() as u64), "v{v}: the next bundle after this one");
        }
    }

    /// What a capture keeps, fed in pieces of any size (a magic split between two pieces
    /// included), reads as the file does: each bundle's ids, the next one found by its mark.
    #[test]
    fn a_capture_keeps_what_the_reader_reads() {
        use infera_core::image::layer::Capture as _;
        let mut bytes = vec![0x55u8; 1000];
        let first = bytes.len() as u64;
        bytes.extend(plain(&[HOST, G942]));
        bytes.resize(bytes.len() + 300_000, 0x77);
        let second = bytes.len() as u64;
        bytes.extend(ccob(3, &plain(&[G950])));
        bytes.resize(bytes.len() + 5000, 0);
        let size = bytes.len() as u64;
        let kept = |piece: usize| {
            let mut c = Box::new(Capture::new());
            for (k, chunk) in bytes.chunks(piece).enumerate() {
                c.feed((k * piece) as u64, chunk);
            }
            c.finish(size)
        };
        let whole = kept(256 << 10);
        for piece in [7, 23, 24, 4096] {
            assert_eq!(kept(piece), whole, "pieces of {piece}");
        }
        assert_eq!(whole.marks, Some(vec![(first, 24), (second, 4)]));
        assert!(whole.kept() < 200_000, "{} of {size}", whole.kept());
        assert_eq!(bundle(&whole, first, size).unwrap().0, [HOST, G942]);
        assert_eq!(bundle(&whole, second, size).unwrap().0, [G950]);
        assert_eq!(next_magic(&whole, first + 100, size), Some(second).filter(|s| s - first - 100 <= NEXT_WITHIN));
        assert_eq!(next_magic(&whole, second - 10, size), Some(second));
        assert!(read_at(&whole, &mut [0u8; 8], first + 200_000).is_err(), "the rest is not kept");
    }

    /// Truncated and hostile headers: an error naming where, never a panic or a large read.
    #[test]
    fn hostile_bundles_are_errors() {
        let good = plain(&[G942]);
        for cut in [20, 30, 40, 60] {
            let (_t, f) = file(&good[..cut]);
            assert!(bundle(&f, 0, cut as u64).is_err(), "cut at {cut}");
        }
        let mut huge = good.clone();
        huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(table(&huge).unwrap_err(), format!("an offload bundle claims {} entries", u64::MAX));
        let mut long_id = good.clone();
        long_id[48..56].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(table(&long_id).unwrap_err().contains("entry id of"));
        let mut c = ccob(3, &good);
        c[4] = 9;
        let (_t, f) = file(&c);
        assert_eq!(bundle(&f, 0, c.len() as u64).unwrap_err(), "compressed bundle version 9 at 0x0 is not 1, 2 or 3");
        let mut c = ccob(3, &good);
        c.truncate(40);
        let (_t, f) = file(&c);
        assert!(bundle(&f, 0, c.len() as u64).is_err());
        let (_t, f) = file(b"not an elf at all, just text....................................................");
        assert!(read(&f, 80).unwrap_err().starts_with("not an ELF file"));
        // An entry whose code lies terabytes past the section: the bundle is not one.
        let mut far = good.clone();
        far[32..40].copy_from_slice(&(1u64 << 42).to_le_bytes());
        let (_t, f) = file(&far);
        let e = bundle(&f, 0, far.len() as u64).unwrap_err();
        assert!(e.contains("past the `.hip_fatbin` section's end"), "{e}");
        let mut c = ccob(3, &good);
        c[8..16].copy_from_slice(&(1u64 << 42).to_le_bytes());
        let (_t, f) = file(&c);
        assert!(bundle(&f, 0, c.len() as u64).unwrap_err().contains("claims to end past"));
    }
}
