//! Payload truth: what a staged tree really contains, derived from its files (CPython ABI
//! from extension suffixes, ROCm major and libpython from ELF `DT_NEEDED`), and an
//! integrity record (path, size, BLAKE3 of every file) that `manifest verify` checks.
//! Written by `manifest generate` to `trees/<family>/payload.json` at build time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use infera_exec_derive::Refuse;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::manifest::Manifest;
use crate::overlay::{self, Integrity, Problem, Tree};
use infera_core::names::ext_suffix_minor;

pub const RECORD: &str = "payload.json";
/// Files at least this large are hashed with all cores (as b3sum does); smaller ones in parallel with each other.
const BIG_FILE: u64 = 8 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub schema: u32,
    pub family: String,
    pub derived: Derived,
    pub files: Vec<Entry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derived {
    /// CPython minors named by extension module suffixes (`cpython-312` → "3.12").
    pub python: BTreeSet<String>,
    /// Stable-ABI extension modules (`.abi3.so`): noted, not a version.
    pub abi3_modules: usize,
    /// HIP ABI majors from `DT_NEEDED libamdhip64.so.N`.
    #[serde(alias = "rocm")]
    pub hip: BTreeSet<u32>,
    /// libpython sonames the shared objects need.
    pub libpython: BTreeSet<String>,
    /// The CPython each installed distribution's wheel was built for (`*.dist-info/WHEEL`
    /// `Tag: cp312-cp312-…` → "3.12"; `cp312-abi3-…` → ">=3.12"), by distribution.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub wheels: BTreeMap<String, String>,
    /// Declared capability → its modules and libraries that are missing.
    pub capabilities: BTreeMap<String, CapabilityPresence>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilityPresence {
    pub present: bool,
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// A symlink (inside the tree) and its target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// A tree or its record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Refuse)]
pub enum PayloadError {
    #[error("`{}`: {reason}", path.display())]
    #[refuse(code = "tree-unreadable", exit = Invalid)]
    Unreadable { path: PathBuf, reason: String },
    #[error("`{}`: {reason}", path.display())]
    #[refuse(code = "record-invalid", exit = Invalid)]
    RecordInvalid { path: PathBuf, reason: String },
}

fn unreadable(tree: &Path) -> impl FnOnce(std::io::Error) -> PayloadError + '_ {
    move |e| PayloadError::Unreadable { path: tree.to_path_buf(), reason: e.to_string() }
}

/// Every file and symlink under the tree (relative paths, sorted), without the record itself.
fn walk(tree: &Path) -> std::io::Result<Vec<(String, fs::Metadata)>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(tree.join(&rel))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let m = fs::symlink_metadata(e.path())?;
            if m.is_dir() {
                stack.push(r);
            } else {
                let s = r.to_string_lossy().into_owned();
                if s != RECORD {
                    out.push((s, m));
                }
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// `f` on a pool of one thread per core, or on this thread alone where no thread can be
/// started (a pod's pids limit reached): rayon's global pool would abort the process then.
fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .or_else(|_| rayon::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build());
    match pool {
        Ok(p) => p.install(f),
        Err(_) => f(),
    }
}

fn hash_file(path: &Path, size: u64) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new();
    // A FIFO or device in place of a recorded file must not block or be read.
    let mut f = infera_core::rootfs::open_regular(path)?;
    if size >= BIG_FILE {
        drop(f);
        h.update_mmap_rayon(path)?;
    } else {
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                // FUSE and NFS can interrupt a read: it is resumed, not a failed check.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
        }
    }
    Ok(h.finalize().to_hex().to_string())
}

fn not_regular(m: &fs::Metadata) -> String {
    format!("is {} where a file is recorded", infera_core::filekind::Kind::of(m).describe())
}

/// The integrity record of a tree: sizes and digests, hashed in parallel.
pub fn record_files(tree: &Path) -> Result<(Vec<Entry>, Vec<Problem>), PayloadError> {
    let files = walk(tree).map_err(unreadable(tree))?;
    let results: Vec<Result<Entry, Problem>> = in_pool(|| {
        files
            .par_iter()
            .map(|(rel, m)| {
                let p = tree.join(rel);
                if m.file_type().is_symlink() {
                    overlay::check::inside(tree, &p).map_err(|e| Problem::new(rel.clone(), e.to_string()))?;
                    let target = fs::read_link(&p).map_err(|e| Problem::new(rel.clone(), e.to_string()))?;
                    return Ok(Entry {
                        path: rel.clone(),
                        size: None,
                        blake3: None,
                        link: Some(target.to_string_lossy().into_owned()),
                    });
                }
                if !m.is_file() {
                    return Err(Problem::new(rel.clone(), not_regular(m)));
                }
                let digest = hash_file(&p, m.size()).map_err(|e| Problem::new(rel.clone(), e.to_string()))?;
                Ok(Entry { path: rel.clone(), size: Some(m.size()), blake3: Some(digest), link: None })
            })
            .collect()
    });
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for r in results {
        match r {
            Ok(e) => entries.push(e),
            Err(p) => problems.push(p),
        }
    }
    Ok((entries, problems))
}

/// What the tree's shared objects and extension modules say, and the files that
/// disagree with the manifest's `[abi]`.
/// `site`: the tree's package directory, relative to it (`site-packages`, or "" for the
/// Infera layout's trees, whose directory is their package directory).
pub fn derive(tree: &Path, site: &str, manifest: &Manifest) -> Result<(Derived, Vec<Problem>), PayloadError> {
    let files = walk(tree).map_err(unreadable(tree))?;
    // A pure-Python tree (no `[abi] rocm`) may bind no HIP at all.
    let want_py = manifest.abi.python.clone();
    let want_rocm = (!manifest.abi.hip.is_empty()).then(|| manifest.hip_major());
    let mut d = Derived::default();
    let mut problems = Vec::new();
    let elves: Vec<(String, Result<Vec<String>, String>)> = in_pool(|| {
        files
            .par_iter()
            .filter(|(_, m)| m.is_file())
            .filter_map(|(rel, _)| elf_needed(&tree.join(rel)).map(|n| (rel.clone(), n)))
            .collect()
    });
    for (rel, _) in files.iter().filter(|(_, m)| m.is_file()) {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if name.ends_with(".abi3.so") {
            d.abi3_modules += 1;
        } else if let Some((ma, mi)) = ext_suffix_minor(name) {
            let v = format!("{ma}.{mi}");
            if v != want_py {
                problems.push(Problem::new(
                    rel.clone(),
                    format!("extension module for CPython {v}, but [abi] python = \"{want_py}\""),
                ));
            }
            d.python.insert(v);
        }
    }
    let elves_paths: BTreeSet<String> = elves.iter().map(|(r, _)| r.clone()).collect();
    for (rel, needed) in elves {
        match needed {
            Ok(needed) => bindings(&rel, needed, &want_py, want_rocm, &mut d, &mut problems),
            Err(e) => problems.push(Problem::new(rel, format!("unreadable ELF: {e}"))),
        }
    }
    wheel_evidence(tree, &files, &elves_paths, &want_py, &mut d, &mut problems);
    capability_presence(tree, site, manifest, &mut d, &mut problems);
    Ok((d, problems))
}

/// What one ELF file binds (DT_NEEDED): the HIP ABI of `libamdhip64.so.N`, the CPython of
/// `libpython3.X`, each checked against the manifest's `[abi]`.
fn bindings(
    rel: &str,
    needed: Vec<String>,
    want_py: &str,
    want_rocm: Option<u32>,
    d: &mut Derived,
    problems: &mut Vec<Problem>,
) {
    for n in needed {
        if let Some((major, _)) = infera_core::names::parse_hip_soname(&n) {
            match want_rocm {
                Some(w) if w != major => problems.push(Problem::new(
                    rel.to_string(),
                    format!("needs {n} (HIP ABI {major}), but [abi] hip = \"{w}\""),
                )),
                None => problems.push(Problem::new(
                    rel.to_string(),
                    format!("needs {n} (HIP ABI {major}), but this pure-Python tree binds no HIP ABI"),
                )),
                _ => {}
            }
            d.hip.insert(major);
        } else if let Some(rest) = n.strip_prefix("libpython") {
            let minor = rest.split(".so").next().unwrap_or("");
            if minor.starts_with('3') && minor.trim_end_matches(['d', 'm', 't']) != want_py {
                problems.push(Problem::new(rel.to_string(), format!("needs {n}, but [abi] python = \"{want_py}\"")));
            }
            d.libpython.insert(n);
        }
    }
}

/// Each capability's modules and libraries present in the tree, or missing.
fn capability_presence(tree: &Path, site: &str, manifest: &Manifest, d: &mut Derived, problems: &mut Vec<Problem>) {
    let site_dir = tree.join(site);
    let prefix = if site.is_empty() { String::new() } else { format!("{site}/") };
    for (name, cap) in &manifest.capabilities {
        let mut missing = Vec::new();
        // Our layout keeps a capability apart in `capabilities/<name>/` when it can.
        let own = tree.join("capabilities").join(name);
        for m in &cap.modules {
            if overlay::check::find_module(&own, m).is_none() && overlay::check::find_module(&site_dir, m).is_none() {
                missing.push(format!("{prefix}{}", m.replace('.', "/")));
            }
        }
        for l in &cap.libraries {
            if fs::symlink_metadata(tree.join("lib").join(l)).is_err() {
                missing.push(format!("lib/{l}"));
            }
        }
        for m in &missing {
            problems.push(Problem::new(m.clone(), format!("declared by capability `{name}` but missing")));
        }
        d.capabilities.insert(name.clone(), CapabilityPresence { present: missing.is_empty(), missing });
    }
}

/// The CPython a wheel tag binds: `cp312-cp312-…` → Exact(3.12); `cp312-abi3-…` →
/// AtLeast(3.12); `py3-none-any` and the like → None.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagPython {
    Exact(u32, u32),
    AtLeast(u32, u32),
}

pub fn tag_python(tag: &str) -> Option<TagPython> {
    let mut parts = tag.trim().split('-');
    let (interp, abi) = (parts.next()?, parts.next()?);
    let minor = |s: &str| -> Option<(u32, u32)> {
        let d = s.strip_prefix("cp3")?;
        let d = d.trim_end_matches(['d', 'm', 't']);
        (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())).then(|| d.parse().ok().map(|m| (3, m)))?
    };
    match abi {
        "abi3" => minor(interp).map(|(a, b)| TagPython::AtLeast(a, b)),
        "none" => None,
        _ => minor(abi).map(|(a, b)| TagPython::Exact(a, b)),
    }
}

impl std::fmt::Display for TagPython {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TagPython::Exact(a, b) => write!(f, "{a}.{b}"),
            TagPython::AtLeast(a, b) => write!(f, ">={a}.{b}"),
        }
    }
}

/// Is a tree for CPython `want` ("3.12") one this wheel can run in?
fn tag_fits(t: TagPython, want: (u32, u32)) -> bool {
    match t {
        TagPython::Exact(a, b) => (a, b) == want,
        TagPython::AtLeast(a, b) => want >= (a, b),
    }
}

/// The installed distributions' own record of the CPython they were built for: their
/// `WHEEL` tags. Compiled modules whose names carry no CPython suffix (Mooncake's
/// `engine.so`, jax-rocm7-plugin's) are only known to be for another Python through it.
/// A distribution tagged for another CPython is a problem for each of its compiled files
/// (from its RECORD), or for the distribution when it has no RECORD.
fn wheel_evidence(
    tree: &Path,
    files: &[(String, fs::Metadata)],
    elves: &BTreeSet<String>,
    want_py: &str,
    d: &mut Derived,
    problems: &mut Vec<Problem>,
) {
    let Some(want) = infera_core::rootfs::parse_minor(want_py) else { return };
    for (rel, _) in files.iter().filter(|(r, m)| m.is_file() && r.ends_with(".dist-info/WHEEL")) {
        let Ok(text) = infera_core::rootfs::read_bounded(&tree.join(rel), 1 << 20)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
        else {
            continue;
        };
        let tags: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("Tag:")).map(str::trim).collect();
        let pythons: Vec<TagPython> = tags.iter().filter_map(|t| tag_python(t)).collect();
        let Some(first) = pythons.first().copied() else { continue };
        let info_dir = &rel[..rel.len() - "/WHEEL".len()];
        let dist = info_dir.rsplit('/').next().unwrap_or(info_dir).trim_end_matches(".dist-info").to_string();
        d.wheels.insert(dist.clone(), first.to_string());
        if pythons.iter().any(|t| tag_fits(*t, want)) {
            continue;
        }
        let what = format!(
            "from distribution {dist}, whose wheel is tagged {} (CPython {first}), but [abi] python = \"{want_py}\"",
            tags.join(", ")
        );
        // RECORD paths are relative to the directory holding the .dist-info.
        let base = info_dir.rsplit_once('/').map_or(String::new(), |(b, _)| format!("{b}/"));
        let record = infera_core::rootfs::read_bounded(&tree.join(info_dir).join("RECORD"), 64 << 20)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let compiled: Vec<String> = record
            .lines()
            .filter_map(|l| l.split(',').next())
            .map(|p| format!("{base}{p}"))
            .filter(|p| elves.contains(p))
            .collect();
        if compiled.is_empty() {
            problems.push(Problem { path: rel.clone(), what });
        } else {
            problems.extend(compiled.into_iter().map(|path| Problem { path, what: what.clone() }));
        }
    }
}

/// `DT_NEEDED` of an ELF file; None when the file is not ELF.
fn elf_needed(path: &Path) -> Option<Result<Vec<String>, String>> {
    let mut magic = [0u8; 4];
    let mut f = infera_core::rootfs::open_regular(path).ok()?;
    f.read_exact(&mut magic).ok()?;
    if magic != *b"\x7fELF" {
        return None;
    }
    // Read, not mapped: a file changed while it is read is a parse error, not a SIGBUS.
    let mut bytes = magic.to_vec();
    if let Err(e) = f.read_to_end(&mut bytes) {
        return Some(Err(e.to_string()));
    }
    Some(
        goblin::elf::Elf::parse(&bytes)
            .map(|elf| elf.libraries.iter().map(|s| s.to_string()).collect())
            .map_err(|e| e.to_string()),
    )
}

/// Compare a tree against its record. Sizes and presence always; digests with `digest`.
pub fn verify(tree: &Path, record: &Record, digest: bool) -> Result<Vec<Problem>, PayloadError> {
    let files = walk(tree).map_err(unreadable(tree))?;
    let actual: BTreeMap<&str, &fs::Metadata> = files.iter().map(|(p, m)| (p.as_str(), m)).collect();
    let expected: BTreeMap<&str, &Entry> = record.files.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut problems: Vec<Problem> = Vec::new();
    for (path, m) in &actual {
        if !expected.contains_key(path) {
            problems.push(Problem::new(path.to_string(), "extra file, not in the integrity record"));
        }
        if m.file_type().is_symlink() {
            if let Err(e) = overlay::check::inside(tree, &tree.join(path)) {
                problems.push(Problem::new(path.to_string(), e.to_string()));
            }
        }
    }
    let checks: Vec<Option<Problem>> = in_pool(|| {
        record
            .files
            .par_iter()
            .map(|e| {
                let p = e.path.clone();
                let Some(m) = actual.get(e.path.as_str()) else {
                    return Some(Problem::new(p, "missing (in the integrity record)"));
                };
                match (&e.link, m.file_type().is_symlink()) {
                    (Some(t), true) => {
                        let now = fs::read_link(tree.join(&e.path))
                            .map(|x| x.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        return (&now != t)
                            .then(|| Problem::new(p, format!("symlink now points to `{now}`, recorded `{t}`")));
                    }
                    (Some(t), false) => {
                        return Some(Problem::new(p, format!("recorded as a symlink to `{t}`, now a file")))
                    }
                    (None, true) => return Some(Problem::new(p, "recorded as a file, now a symlink")),
                    (None, false) if !m.is_file() => return Some(Problem::new(p, not_regular(m))),
                    (None, false) => {}
                }
                if e.size != Some(m.size()) {
                    return Some(Problem::new(p, format!("size {} bytes, recorded {}", m.size(), e.size.unwrap_or(0))));
                }
                if digest {
                    match hash_file(&tree.join(&e.path), m.size()) {
                        Ok(h) if Some(&h) != e.blake3.as_ref() => {
                            return Some(Problem::new(p, "content changed (BLAKE3 differs from the record)"))
                        }
                        Err(err) => return Some(Problem::new(p, err.to_string())),
                        Ok(_) => {}
                    }
                }
                None
            })
            .collect()
    });
    problems.extend(checks.into_iter().flatten());
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(problems)
}

pub fn read_record(tree: &Path) -> Result<Option<Record>, PayloadError> {
    let p = tree.join(RECORD);
    let invalid = |reason: String| PayloadError::RecordInvalid { path: p.clone(), reason };
    match infera_core::rootfs::read_bounded(&p, 256 << 20) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| invalid(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(invalid(e.to_string())),
    }
}

/// Check one tree against its record; the number of files on success.
pub fn verify_tree(tree: &Path, family: &str, digest: bool) -> Result<usize, Vec<Problem>> {
    let one = |what: String| vec![Problem { path: RECORD.into(), what }];
    let record = match read_record(tree) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(one("no integrity record; run `infera-exec manifest generate` when staging".into())),
        Err(e) => return Err(one(e.to_string())),
    };
    if record.family != family {
        return Err(one(format!("records family `{}`, but the tree is `{family}`", record.family)));
    }
    match verify(tree, &record, digest) {
        Ok(ps) if ps.is_empty() => Ok(record.files.len()),
        Ok(ps) => Err(ps),
        Err(e) => Err(one(e.to_string())),
    }
}

/// A tree checked against its integrity records (every part of it; with `digest`, each
/// file's BLAKE3 too).
pub fn integrity(tree: &Tree, digest: bool) -> Integrity {
    let mut files = 0;
    let mut problems = Vec::new();
    for part in &tree.paths.parts {
        let name = part.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // Problems name files as the overlay holds them: trees/<family>/…, py312/…, native/<key>/….
        let prefix = match part.parent().and_then(Path::file_name).and_then(|p| p.to_str()) {
            Some(p @ ("trees" | "native")) => format!("{p}/{name}"),
            _ => name.clone(),
        };
        match verify_tree(part, &name, digest) {
            Ok(n) => files += n,
            Err(ps) => problems.extend(ps.into_iter().map(|mut p| {
                p.path = format!("{prefix}/{}", p.path);
                p
            })),
        }
    }
    let result = if problems.is_empty() { Ok(files) } else { Err(problems) };
    Integrity { digest, result }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_tags() {
        assert_eq!(tag_python("cp312-cp312-manylinux_2_35_x86_64"), Some(TagPython::Exact(3, 12)));
        assert_eq!(tag_python("cp312-abi3-manylinux_2_28_x86_64"), Some(TagPython::AtLeast(3, 12)));
        assert_eq!(tag_python("cp313-cp313t-manylinux_2_28_x86_64"), Some(TagPython::Exact(3, 13)));
        assert_eq!(tag_python("py3-none-any"), None);
        assert_eq!(tag_python("cp310-none-linux_x86_64"), None);
        assert!(tag_fits(TagPython::AtLeast(3, 10), (3, 12)));
        assert!(!tag_fits(TagPython::AtLeast(3, 12), (3, 10)));
        assert!(!tag_fits(TagPython::Exact(3, 12), (3, 10)));
    }
}
