//! `infera-exec manifest schema|generate|verify`: build-side tools for the overlay.
//! Each returns the text for stdout; refusals are printed by the caller.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

use infera_exec_derive::Refuse;

use crate::manifest;
use crate::overlay;
use crate::overlay::Problem;
use crate::payload::{self, Record, RECORD};
use infera_core::error::Refusal;

#[derive(Debug, Error, Refuse)]
pub enum ManifestCmdError {
    #[error("`{}` is not a directory", path.display())]
    #[refuse(code = "tree-missing", exit = Missing)]
    TreeMissing { path: PathBuf },
    #[error("`{}`: {reason}", path.display())]
    #[refuse(code = "manifest-invalid", exit = Invalid)]
    ManifestInvalid { path: PathBuf, reason: manifest::ManifestError },
    #[error("tree {family} does not match its manifest ({}):{}", manifest.display(), listing(problems, ""))]
    #[refuse(
        code = "payload-contradicts-manifest",
        exit = Invalid,
        hint = "rebuild the payload for the declared ABI, or fix [abi] / [capabilities] in the manifest"
    )]
    Contradicts { family: String, manifest: PathBuf, problems: Vec<Problem> },
    #[error("`{}` does not exist", path.display())]
    #[refuse(code = "record-missing", exit = Invalid, hint = "run `infera-exec manifest generate` on the tree")]
    RecordMissing { path: PathBuf },
    #[error("`{}` is out of date:{}", path.display(), diffs.iter().map(|d| format!("\n  {d}")).collect::<String>())]
    #[refuse(code = "record-stale", exit = Invalid, hint = "run `infera-exec manifest generate` on the tree")]
    RecordStale { path: PathBuf, diffs: Vec<String> },
    #[error("`{}`: {reason}", path.display())]
    #[refuse(code = "record-unwritable", exit = Invalid)]
    RecordUnwritable { path: PathBuf, reason: String },
    #[error("the overlay `{}` does not match its integrity records:{}", overlay.display(), problems.iter().map(|p| format!("\n  {p}")).collect::<String>())]
    #[refuse(
        code = "integrity",
        exit = Invalid,
        hint = "the overlay image is corrupted or was modified after `manifest generate`; pull or rebuild it"
    )]
    Integrity { overlay: PathBuf, problems: Vec<String> },
}

/// `manifest schema|generate|verify`, as the command line gave it.
#[derive(Debug, Clone)]
pub enum Command {
    Schema,
    Generate { tree: PathBuf, check: bool },
    Verify { overlay: Option<PathBuf>, digest: bool },
}

pub fn run(cmd: &Command) -> Result<String, Refusal> {
    match cmd {
        Command::Schema => Ok(manifest::schema_json()),
        Command::Generate { tree, check } => generate(tree, *check),
        Command::Verify { overlay, digest } => {
            let dir =
                overlay.clone().unwrap_or_else(|| crate::overlay::discover(std::env::current_exe().ok().as_deref()));
            verify(&dir, *digest)
        }
    }
}

fn listing(problems: &[Problem], prefix: &str) -> String {
    problems.iter().map(|p| format!("\n  {prefix}{p}")).collect()
}

/// Derive the tree's facts and record; refuse when the contents contradict `[abi]`.
pub fn generate(tree: &Path, check: bool) -> Result<String, Refusal> {
    if !tree.is_dir() {
        return Err(ManifestCmdError::TreeMissing { path: tree.to_path_buf() }.into());
    }
    let family = tree.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mpath = tree.join("manifest.toml");
    let invalid = |reason| ManifestCmdError::ManifestInvalid { path: mpath.clone(), reason };
    // Our layout's tree has a manifest; a directory of the Infera payload is described by
    // its name and files (py312, native/rocm7-py312 with CAPABILITIES).
    let (m, site) = match (mpath.exists(), overlay::infera::part_manifest(tree)) {
        (false, Some(derived)) => (derived?, ""),
        _ => {
            let bytes = infera_core::rootfs::read_bounded(&mpath, infera_core::rootfs::SMALL_FILE_LIMIT)
                .map_err(|e| invalid(manifest::ManifestError::Unreadable(infera_core::rootfs::io_reason(&e))))?;
            let text = String::from_utf8(bytes).map_err(|_| invalid(manifest::ManifestError::NotUtf8))?;
            (manifest::parse(&text, &family).map_err(invalid)?, "site-packages")
        }
    };
    let (derived, mut problems) = payload::derive(tree, site, &m)?;
    let (files, file_problems) = payload::record_files(tree)?;
    problems.extend(file_problems);
    if !problems.is_empty() {
        return Err(ManifestCmdError::Contradicts { family, manifest: mpath, problems }.into());
    }
    let record = Record { schema: 1, family: family.clone(), derived, files };
    let mut out = String::new();
    let d = &record.derived;
    let caps: Vec<String> =
        d.capabilities.iter().map(|(n, c)| format!("{n} {}", if c.present { "present" } else { "missing" })).collect();
    let bytes: u64 = record.files.iter().filter_map(|f| f.size).sum();
    let list = |v: Vec<String>| if v.is_empty() { "-".to_string() } else { v.join(", ") };
    let _ = writeln!(
        out,
        "tree {family}: python {} ({} abi3 modules), HIP ABI {}, libpython {}\ncapabilities: {}\nrecord: {} files, {bytes} bytes",
        list(d.python.iter().cloned().collect()),
        d.abi3_modules,
        list(d.hip.iter().map(u32::to_string).collect()),
        list(d.libpython.iter().cloned().collect()),
        list(caps),
        record.files.len(),
    );
    let rpath = tree.join(RECORD);
    if check {
        let old = payload::read_record(tree)?.ok_or_else(|| ManifestCmdError::RecordMissing { path: rpath.clone() })?;
        if old != record {
            return Err(ManifestCmdError::RecordStale { path: rpath, diffs: differences(&old, &record) }.into());
        }
        let _ = writeln!(out, "{} is up to date", rpath.display());
        return Ok(out);
    }
    let json = serde_json::to_string_pretty(&record).unwrap_or_default() + "\n";
    std::fs::write(&rpath, json)
        .map_err(|e| ManifestCmdError::RecordUnwritable { path: rpath.clone(), reason: e.to_string() })?;
    let _ = writeln!(out, "wrote {}", rpath.display());
    Ok(out)
}

fn differences(old: &Record, new: &Record) -> Vec<String> {
    let mut diffs = Vec::new();
    if old.derived != new.derived {
        diffs.push(format!("derived facts: recorded {:?}, now {:?}", old.derived, new.derived));
    }
    let a: std::collections::BTreeMap<_, _> = old.files.iter().map(|f| (&f.path, f)).collect();
    let b: std::collections::BTreeMap<_, _> = new.files.iter().map(|f| (&f.path, f)).collect();
    for (p, f) in &b {
        match a.get(p) {
            None => diffs.push(format!("{p}: new file")),
            Some(o) if o != f => diffs.push(format!("{p}: changed")),
            _ => {}
        }
    }
    diffs.extend(a.keys().filter(|p| !b.contains_key(*p)).map(|p| format!("{p}: removed")));
    diffs
}

pub fn verify(overlay_dir: &Path, digest: bool) -> Result<String, Refusal> {
    let opts = overlay::LoadOptions { check_writable: true, modules: Vec::new(), lazy: false };
    let ov = overlay::load(overlay_dir, &opts)?;
    let mut problems: Vec<String> = Vec::new();
    let mut files = 0;
    // A directory can belong to several trees (the Infera payload's py312 pairs with each
    // native tree of 3.12): each is checked once.
    let mut parts: Vec<&Path> = ov.trees.iter().flat_map(|t| t.paths.parts.iter().map(|p| p.as_path())).collect();
    parts.sort();
    parts.dedup();
    for part in &parts {
        let name = part.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let shown = part.strip_prefix(&ov.dir).unwrap_or(part).display().to_string();
        match payload::verify_tree(part, &name, digest) {
            Ok(n) => files += n,
            Err(ps) => problems.extend(ps.iter().map(|p| format!("{shown}/{p}"))),
        }
    }
    if !problems.is_empty() {
        return Err(ManifestCmdError::Integrity { overlay: ov.dir, problems }.into());
    }
    Ok(format!(
        "ok: {} trees, {files} files match their records ({})\n",
        parts.len(),
        if digest { "sizes and BLAKE3 digests" } else { "presence and sizes" }
    ))
}
