//! `infera-exec manifest schema|generate|verify`: build-side tools for the overlay.

use std::io::Write;
use std::path::Path;

use crate::cli::ManifestCommand;
use crate::error::{Exit, Refusal};
use crate::manifest;
use crate::overlay;
use crate::payload::{self, Problem, Record, RECORD};

pub fn run(cmd: ManifestCommand) -> i32 {
    let result = match cmd {
        ManifestCommand::Schema => {
            let _ = std::io::stdout().write_all(manifest::schema_json().as_bytes());
            Ok(())
        }
        ManifestCommand::Generate { tree, check } => generate(&tree, check),
        ManifestCommand::Verify { overlay, digest } => verify(&overlay, digest),
    };
    match result {
        Ok(()) => 0,
        Err(r) => {
            let _ = std::io::stderr().write_all(r.render().as_bytes());
            r.exit.code()
        }
    }
}

fn listing(problems: &[Problem], prefix: &str) -> String {
    problems.iter().map(|p| format!("\n  {prefix}{p}")).collect()
}

/// Derive the tree's facts and record; refuse when the contents contradict `[abi]`.
pub fn generate(tree: &Path, check: bool) -> Result<(), Refusal> {
    if !tree.is_dir() {
        return Err(Refusal::new(Exit::Missing, "tree-missing", format!("`{}` is not a directory", tree.display())));
    }
    let family = tree.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mpath = tree.join("manifest.toml");
    let text = std::fs::read_to_string(&mpath)
        .map_err(|e| Refusal::new(Exit::Invalid, "manifest-invalid", format!("`{}`: {e}", mpath.display())))?;
    let m = manifest::parse(&text, &family)
        .map_err(|e| Refusal::new(Exit::Invalid, "manifest-invalid", format!("`{}`: {e}", mpath.display())))?;
    let (derived, mut problems) =
        payload::derive(tree, &m).map_err(|e| Refusal::new(Exit::Invalid, "tree-unreadable", e))?;
    let (files, file_problems) =
        payload::record_files(tree).map_err(|e| Refusal::new(Exit::Invalid, "tree-unreadable", e))?;
    problems.extend(file_problems);
    if !problems.is_empty() {
        return Err(Refusal::new(
            Exit::Invalid,
            "payload-contradicts-manifest",
            format!("tree {family} does not match its manifest ({}):{}", mpath.display(), listing(&problems, "")),
        )
        .hint("rebuild the payload for the declared ABI, or fix [abi] / [capabilities] in the manifest"));
    }
    let record = Record { schema: 1, family: family.clone(), derived, files };
    let mut out = std::io::stdout().lock();
    let d = &record.derived;
    let caps: Vec<String> =
        d.capabilities.iter().map(|(n, c)| format!("{n} {}", if c.present { "present" } else { "missing" })).collect();
    let bytes: u64 = record.files.iter().filter_map(|f| f.size).sum();
    let _ = writeln!(
        out,
        "tree {family}: python {} ({} abi3 modules), ROCm {}, libpython {}\ncapabilities: {}\nrecord: {} files, {bytes} bytes",
        if d.python.is_empty() { "-".to_string() } else { d.python.join(", ") },
        d.abi3_modules,
        if d.rocm.is_empty() { "-".to_string() } else { d.rocm.iter().map(u32::to_string).collect::<Vec<_>>().join(", ") },
        if d.libpython.is_empty() { "-".to_string() } else { d.libpython.join(", ") },
        if caps.is_empty() { "-".to_string() } else { caps.join(", ") },
        record.files.len(),
    );
    let rpath = tree.join(RECORD);
    if check {
        let old = payload::read_record(tree)
            .map_err(|e| Refusal::new(Exit::Invalid, "record-invalid", e))?
            .ok_or_else(|| {
                Refusal::new(Exit::Invalid, "record-missing", format!("`{}` does not exist", rpath.display()))
                    .hint("run `infera-exec manifest generate` on the tree")
            })?;
        if old != record {
            let mut diffs = Vec::new();
            if old.derived != record.derived {
                diffs.push(format!("derived facts: recorded {:?}, now {:?}", old.derived, record.derived));
            }
            let a: std::collections::BTreeMap<_, _> = old.files.iter().map(|f| (&f.path, f)).collect();
            let b: std::collections::BTreeMap<_, _> = record.files.iter().map(|f| (&f.path, f)).collect();
            for (p, f) in &b {
                match a.get(p) {
                    None => diffs.push(format!("{p}: new file")),
                    Some(o) if o != f => diffs.push(format!("{p}: changed")),
                    _ => {}
                }
            }
            diffs.extend(a.keys().filter(|p| !b.contains_key(*p)).map(|p| format!("{p}: removed")));
            return Err(Refusal::new(
                Exit::Invalid,
                "record-stale",
                format!(
                    "`{}` is out of date:{}",
                    rpath.display(),
                    diffs.iter().map(|d| format!("\n  {d}")).collect::<String>()
                ),
            )
            .hint("run `infera-exec manifest generate` on the tree"));
        }
        let _ = writeln!(out, "{} is up to date", rpath.display());
        return Ok(());
    }
    let json = serde_json::to_string_pretty(&record).unwrap_or_default() + "\n";
    std::fs::write(&rpath, json)
        .map_err(|e| Refusal::new(Exit::Invalid, "record-unwritable", format!("`{}`: {e}", rpath.display())))?;
    let _ = writeln!(out, "wrote {}", rpath.display());
    Ok(())
}

pub fn verify(overlay_dir: &Path, digest: bool) -> Result<(), Refusal> {
    let ov = overlay::load(overlay_dir, nix::unistd::geteuid().is_root()).map_err(Refusal::from)?;
    let mut problems: Vec<String> = Vec::new();
    let mut files = 0;
    for t in &ov.trees {
        match verify_tree(&t.dir, &t.family, digest) {
            Ok(n) => files += n,
            Err(ps) => problems.extend(ps.iter().map(|p| format!("trees/{}/{p}", t.family))),
        }
    }
    if !problems.is_empty() {
        return Err(Refusal::new(
            Exit::Invalid,
            "integrity",
            format!(
                "the overlay `{}` does not match its integrity records:{}",
                ov.dir.display(),
                problems.iter().map(|p| format!("\n  {p}")).collect::<String>()
            ),
        )
        .hint("the overlay image is corrupted or was modified after `manifest generate`; pull or rebuild it"));
    }
    let _ = writeln!(
        std::io::stdout(),
        "ok: {} trees, {files} files match their records ({})",
        ov.trees.len(),
        if digest { "sizes and BLAKE3 digests" } else { "presence and sizes" }
    );
    Ok(())
}

/// Check one tree against its record; the number of files on success.
pub fn verify_tree(tree: &Path, family: &str, digest: bool) -> Result<usize, Vec<Problem>> {
    let one = |what: String| vec![Problem { path: RECORD.into(), what }];
    let record = match payload::read_record(tree) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(one("no integrity record; run `infera-exec manifest generate` when staging".into())),
        Err(e) => return Err(one(e)),
    };
    if record.family != family {
        return Err(one(format!("records family `{}`, but the tree is `{family}`", record.family)));
    }
    match payload::verify(tree, &record, digest) {
        Ok(ps) if ps.is_empty() => Ok(record.files.len()),
        Ok(ps) => Err(ps),
        Err(e) => Err(one(e)),
    }
}
