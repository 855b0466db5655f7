//! The Infera payload layout, read as it ships (the stack's `Dockerfile.payload`):
//!
//! - `py3XX/`: one pure-Python tree per CPython minor (infera, kvd, their few C deps);
//! - `native/rocm<N>-py3XX/`: compiled capabilities for (HIP ABI N, CPython minor), with a
//!   one-line `CAPABILITIES` file (`mooncake hipfile`), `lib/` and `bin/`;
//! - `bin/` (infera-exec, infera-router), `patches/<engine>/`.
//!
//! Each CPython minor gives one tree per native tree of that minor (`rocm7-py312`: the
//! native tree first on PYTHONPATH, then the Python tree, as the stack's own launcher orders
//! them) and one tree without native code (`py312`), which is what runs when the image's
//! HIP ABI has no native tree. Capabilities are what CAPABILITIES names and the files hold.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::check::{find_module, inside, not_writable};
use super::{gather, LoadOptions, OverlayError, Paths, Tree, TreeFacts};
use crate::manifest::{
    Abi, Capability, EngineEntry, Manifest, ManifestError, Prefer, ServerEntry, SCHEMA, SERVER_MODULE,
};
use infera_core::rootfs::{self, read_bounded, SMALL_FILE_LIMIT};
use infera_facts::engines::TABLE as ENGINES;

/// The capability kvd is in the Python tree, not the native one.
const PURE_CAPABILITIES: [&str; 1] = ["kvd"];

/// What the stack's launcher assumes when a native tree has no CAPABILITIES file.
const DEFAULT_NATIVE: [&str; 2] = ["mooncake", "hipfile"];

/// `py312` → (3, 12).
pub fn py_tag(name: &str) -> Option<(u32, u32)> {
    let digits = name.strip_prefix("py3")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    Some((3, digits.parse().ok()?))
}

/// `rocm7-py312` → (7, (3, 12)).
pub fn native_key(name: &str) -> Option<(u32, (u32, u32))> {
    let (rocm, py) = name.strip_prefix("rocm")?.split_once('-')?;
    let hip = rocm.parse().ok().filter(|_| rocm.bytes().all(|b| b.is_ascii_digit()))?;
    Some((hip, py_tag(py)?))
}

fn dirs<T>(dir: &Path, key: impl Fn(&str) -> Option<T>) -> Vec<(T, PathBuf)> {
    let mut out: Vec<(String, T, PathBuf)> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| {
                    let n = e.file_name().into_string().ok()?;
                    let k = key(&n)?;
                    Some((n, k, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, k, p)| (k, p)).collect()
}

pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Vec<Tree>, OverlayError> {
    let pys = dirs(dir, py_tag);
    if pys.is_empty() {
        return Err(OverlayError::Empty { dir: dir.to_path_buf() });
    }
    let natives = dirs(&dir.join("native"), native_key);
    if opts.check_writable {
        not_writable(dir)?;
    }
    let mut trees = Vec::new();
    for (minor, py) in &pys {
        for ((hip, _), native) in natives.iter().filter(|((_, m), _)| m == minor) {
            trees.push(tree(dir, *minor, py, Some((*hip, native)), opts)?);
        }
        trees.push(tree(dir, *minor, py, None, opts)?);
    }
    Ok(trees)
}

fn tree(
    overlay: &Path,
    minor: (u32, u32),
    py: &Path,
    native: Option<(u32, &Path)>,
    opts: &LoadOptions,
) -> Result<Tree, OverlayError> {
    let tag = format!("py{}{}", minor.0, minor.1);
    let family = native.map_or_else(|| tag.clone(), |(hip, _)| format!("rocm{hip}-{tag}"));
    let existing = |v: Vec<PathBuf>| -> Vec<PathBuf> { v.into_iter().filter(|p| p.is_dir()).collect() };
    let (site, lib, bin, parts) = match native {
        Some((_, n)) => (
            vec![n.to_path_buf(), py.to_path_buf()],
            existing(vec![n.join("lib"), py.join("lib")]),
            existing(vec![n.join("bin"), overlay.join("bin")]),
            vec![py.to_path_buf(), n.to_path_buf()],
        ),
        None => (
            vec![py.to_path_buf()],
            existing(vec![py.join("lib")]),
            existing(vec![overlay.join("bin")]),
            vec![py.to_path_buf()],
        ),
    };
    for part in &parts {
        inside(overlay, part)?;
    }
    let paths = Paths { site, lib, bin, parts, caps: BTreeMap::new(), contain: overlay.to_path_buf() };
    let native_caps = match native {
        Some((_, n)) => capabilities_file(n)?,
        None => Vec::new(),
    };
    let manifest = derived(&family, minor, native.map(|(h, _)| h), py, &native_caps);
    let facts = if opts.lazy { TreeFacts::default() } else { gather::tree_facts(overlay, &paths, &manifest, opts) };
    if opts.check_writable {
        for part in &paths.parts {
            not_writable(part)?;
        }
    }
    Ok(Tree { family, dir: py.to_path_buf(), manifest, python: minor, hip: native.map(|(h, _)| h), paths, facts })
}

/// The manifest of one directory of the Infera payload as its name and files describe it
/// (`py312`, `native/rocm7-py312`), for `manifest generate`; None for any other directory.
pub fn part_manifest(dir: &Path) -> Option<Result<Manifest, OverlayError>> {
    let name = dir.file_name()?.to_str()?;
    if let Some(minor) = py_tag(name) {
        return Some(Ok(derived(name, minor, None, dir, &[])));
    }
    let in_native = dir.parent().and_then(Path::file_name).is_some_and(|p| p == "native");
    let (hip, minor) = native_key(name).filter(|_| in_native)?;
    Some(capabilities_file(dir).map(|caps| derived(name, minor, Some(hip), dir, &caps)))
}

/// The names of `native/<key>/CAPABILITIES` (space, comma or newline separated).
fn capabilities_file(native: &Path) -> Result<Vec<String>, OverlayError> {
    let path = native.join("CAPABILITIES");
    let bad = |reason: ManifestError| OverlayError::Manifest { path: path.clone(), reason };
    let text = match read_bounded(&path, SMALL_FILE_LIMIT) {
        Ok(b) => String::from_utf8(b).map_err(|_| bad(ManifestError::NotUtf8))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DEFAULT_NATIVE.map(String::from).to_vec()),
        Err(e) => return Err(bad(ManifestError::Unreadable(rootfs::io_reason(&e)))),
    };
    let mut names: Vec<String> = Vec::new();
    for w in text.split([' ', ',', '\n', '\t', '\r']).filter(|w| !w.is_empty()) {
        if !crate::manifest::is_name(w) {
            return Err(bad(ManifestError::CapabilityName { name: w.to_string() }));
        }
        if !names.iter().any(|n| n == w) {
            names.push(w.to_string());
        }
    }
    Ok(names)
}

/// What the files of a pair of trees offer, in the shape of a manifest.
fn derived(family: &str, minor: (u32, u32), hip: Option<u32>, py: &Path, native: &[String]) -> Manifest {
    let engines = ENGINES
        .iter()
        .filter(|i| find_module(py, i.module).is_some())
        .map(|i| (i.name.to_string(), EngineEntry { module: i.module.to_string(), versions: None, fails: Vec::new() }))
        .collect();
    let server = find_module(py, SERVER_MODULE).map(|_| ServerEntry { module: SERVER_MODULE.to_string() });
    let mut capabilities = BTreeMap::new();
    let pure = PURE_CAPABILITIES.iter().filter(|c| find_module(py, c).is_some()).map(|c| c.to_string());
    // The native tree's modules come first on PYTHONPATH, as the stack's launcher puts them,
    // also where the image has its own build (vLLM's images ship mooncake): `prefer = tree`.
    for (name, prefer) in native.iter().map(|n| (n.clone(), Prefer::Tree)).chain(pure.map(|n| (n, Prefer::Base))) {
        let cap = Capability {
            description: None,
            modules: vec![name.clone()],
            libraries: Vec::new(),
            engines: Vec::new(),
            prefer,
        };
        capabilities.insert(name, cap);
    }
    Manifest {
        schema: SCHEMA,
        family: family.to_string(),
        description: Some("derived from the Infera payload layout".into()),
        abi: Abi {
            python: format!("{}.{}", minor.0, minor.1),
            hip: hip.map_or_else(String::new, |h| h.to_string()),
            rocm_release: None,
        },
        engines,
        server,
        capabilities,
        env: BTreeMap::new(),
        allow_shadow: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(py_tag("py312"), Some((3, 12)));
        assert_eq!(py_tag("py310"), Some((3, 10)));
        assert_eq!(py_tag("py3"), None);
        assert_eq!(py_tag("py3x"), None);
        assert_eq!(native_key("rocm7-py312"), Some((7, (3, 12))));
        assert_eq!(native_key("rocm10-py310"), Some((10, (3, 10))));
        assert_eq!(native_key("rocm-py312"), None);
        assert_eq!(native_key("cuda12-py312"), None);
    }
}
