//! What the image's site directories hold: top-level importable names (to detect
//! shadowing) and the engines installed there (dist-info / egg-info).
//! Each directory is listed once; nothing inside the packages is read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::engines::Engine;
use infera_core::names::Dist;
use infera_core::names::{egg_name, pep503};
use infera_core::rootfs::Root;

#[derive(Debug, Clone, Default)]
pub struct SiteIndex {
    /// top-level module name → first site directory that provides it (sys.path order).
    pub modules: BTreeMap<String, PathBuf>,
    /// The distributions recorded in the site directories, when they were listed (an
    /// engine not found by its version file, or a probed module the image has).
    pub dists: Vec<Dist>,
}

impl SiteIndex {
    /// The image's copy of top-level module `m`: where it is and the distribution that
    /// installed it, if recorded.
    pub fn provider(&self, m: &str) -> Option<(&Path, Option<&Dist>)> {
        let dir = self.modules.get(m)?;
        Some((dir, Dist::of(&self.dists, dir, m)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineInstall {
    #[serde(rename = "name")]
    pub engine: Engine,
    pub version: String,
    /// The dist-info directory, or the version file (container path).
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub record: PathBuf,
    /// Where the engine's parser passes `deprecated=` to argparse (`FILE:LINE`), which
    /// argparse takes from CPython 3.13 on: infera's wrapper, which builds that parser on a
    /// plain ArgumentParser, raises TypeError there on an older CPython.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argparse_deprecated: Option<String>,
    /// A parser source that exists but cannot be read as Python (`FILE`: why): whether it
    /// passes `deprecated=` is not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argparse_unread: Option<String>,
}

/// The largest parser source read (vLLM's arg_utils.py is about 100 KB).
pub const PARSER_SOURCE_LIMIT: u64 = 4 << 20;

/// Where the engine's parser sources pass argparse `deprecated=` (read as Python:
/// [`crate::pyscan`]), as `FILE:LINE`, looked for in the site directories and in an egg's
/// own; and the first source that exists but cannot be read, with why.
pub fn argparse_deprecated(root: &Root, site_dirs: &[PathBuf], e: &EngineInstall) -> (Option<String>, Option<String>) {
    let egg = e.record.extension().is_some_and(|x| x == "egg").then_some(e.record.as_path());
    let dirs = site_dirs.iter().map(PathBuf::as_path).chain(egg);
    let mut unread = None;
    for d in dirs {
        for file in e.engine.info().parser_sources {
            let path = d.join(file);
            let text = match root.read_file(&path, PARSER_SOURCE_LIMIT) {
                Ok(bytes) => crate::pyscan::decode(&bytes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(infera_core::rootfs::io_reason(&e)),
            };
            match text.and_then(|t| crate::pyscan::deprecated_line(&t)) {
                Ok(Some(n)) => return (Some(format!("{}:{n}", path.display())), None),
                Ok(None) => {}
                Err(why) => {
                    unread.get_or_insert(format!("`{}`: {why}", path.display()));
                }
            }
        }
    }
    (None, unread)
}

/// Engines installed in the site directories. An engine is found by the literal in its
/// version file first (no directory listing); a site directory is listed only for an engine
/// not found that way (an editable install keeps only its dist-info in site-packages; a
/// wheel's `version.py` may compute the version). `only`: the one engine the request names
/// (the others are not looked for).
pub fn engines(root: &Root, site_dirs: &[PathBuf], minor: (u32, u32), only: Option<Engine>) -> Vec<EngineInstall> {
    let wanted = |e: Engine| only.is_none_or(|o| o == e);
    let mut engines: Vec<EngineInstall> = Vec::new();
    for dir in site_dirs {
        if let Some(e) = egg(root, dir).filter(|e| wanted(e.engine) && !engines.iter().any(|x| x.engine == e.engine)) {
            engines.push(e);
            continue;
        }
        for e in probe_versions(root, dir, wanted) {
            if !engines.iter().any(|x| x.engine == e.engine) {
                engines.push(e);
            }
        }
    }
    if Engine::all().filter(|e| wanted(*e)).any(|i| !engines.iter().any(|e| e.engine == i)) {
        let mut index = SiteIndex::default();
        let none = BTreeSet::new();
        probe_into(root, site_dirs, minor, &none, Some(&wanted), &mut index, &mut engines);
    }
    engines.sort_by_key(|e| e.engine.name());
    engines
}

/// Look for the `probe` modules in the site directories (adding them and their
/// distributions to `index`): the selected tree's modules, once the tree is known.
pub fn probe(root: &Root, site_dirs: &[PathBuf], minor: (u32, u32), probe: &BTreeSet<String>, index: &mut SiteIndex) {
    let mut none = Vec::new();
    probe_into(root, site_dirs, minor, probe, None, index, &mut none);
}

/// The modules of `probe` found in the site directories, and the records that answer a
/// question: the distribution of a module found, and (with `engines_wanted`) an engine's
/// record when its version file was not found.
fn probe_into(
    root: &Root,
    site_dirs: &[PathBuf],
    minor: (u32, u32),
    probe: &BTreeSet<String>,
    engines_wanted: Option<&dyn Fn(Engine) -> bool>,
    index: &mut SiteIndex,
    engines: &mut Vec<EngineInstall>,
) {
    let ext = format!(".cpython-{}{}-x86_64-linux-gnu.so", minor.0, minor.1);
    let mut found_here: Vec<String> = Vec::new();
    // Each candidate's path written into one buffer (five names per module per directory).
    let mut cand = std::ffi::OsString::new();
    for dir in site_dirs {
        for m in probe {
            if index.modules.contains_key(m) {
                continue;
            }
            let hit = ["", ".py", ext.as_str(), ".abi3.so", ".so"].iter().any(|suffix| {
                cand.clear();
                cand.push(dir);
                if !dir.as_os_str().as_encoded_bytes().ends_with(b"/") {
                    cand.push("/");
                }
                cand.push(m);
                cand.push(suffix);
                root.metadata(Path::new(&cand)).is_ok()
            });
            if hit {
                index.modules.insert(m.clone(), dir.clone());
                found_here.push(m.clone());
            }
        }
    }
    if engines_wanted.is_none() && found_here.is_empty() {
        return;
    }
    let wanted = |e: Engine| engines_wanted.is_some_and(|w| w(e));
    for dir in site_dirs {
        // Only the records that answer a question are kept: an engine's, or the
        // distribution of a module the image shares with a tree.
        let mut found: Vec<(Dist, String)> = Vec::new();
        root.each_name(dir, |n| {
            let b = std::os::unix::ffi::OsStrExt::as_bytes(n);
            if !(b.ends_with(b".dist-info") || b.ends_with(b".egg-info")) {
                return;
            }
            let Some(entry) = n.to_str() else { return };
            let Some((name, version)) = Dist::parse(entry) else { return };
            let engine = engine_of(name).is_some_and(|e| wanted(e) && !engines.iter().any(|x| x.engine == e));
            let hit = found_here.iter().any(|m| index.modules.get(m) == Some(dir) && Dist::provides(name, m));
            if engine || hit {
                let d = Dist { dir: dir.clone(), name: name.to_string(), version: version.to_string() };
                found.push((d, entry.to_string()));
            }
        });
        found.sort_by(|a, b| a.1.cmp(&b.1));
        for (d, entry) in found {
            if let Some(e) = engine_of(&d.name).filter(|e| wanted(*e) && !engines.iter().any(|x| x.engine == *e)) {
                engines.push(EngineInstall {
                    engine: e,
                    version: d.version.clone(),
                    record: dir.join(entry),
                    argparse_deprecated: None,
                    argparse_unread: None,
                });
            }
            index.dists.push(d);
        }
    }
}

/// An engine installed as an egg (`setup.py install`, named by `easy-install.pth`): a zipped
/// `.egg` file that zipimport reads, or a directory with `EGG-INFO/` beside the package.
/// Its name says what it is, as pkg_resources reads it (`Distribution.from_location`).
fn egg(root: &Root, path: &Path) -> Option<EngineInstall> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".egg")?;
    let (dist, version) = egg_name(stem)?;
    let engine = engine_of(dist)?;
    let m = root.metadata(path).ok()?;
    let record = if m.is_file() {
        path.to_path_buf()
    } else if m.is_dir() && root.is_dir(&path.join("EGG-INFO")) {
        path.join("EGG-INFO")
    } else {
        return None;
    };
    Some(EngineInstall {
        engine,
        version: version.to_string(),
        record,
        argparse_deprecated: None,
        argparse_unread: None,
    })
}

/// The engine whose distribution this is (`vllm`, `sglang`), names compared as PEP 503
/// normalises them (case, and runs of `-`, `_`, `.` as one `-`).
fn engine_of(dist: &str) -> Option<Engine> {
    let norm = pep503(dist);
    crate::engines::TABLE.iter().find(|i| pep503(i.dist) == norm).map(|i| i.engine)
}

/// Engines found by the literal version in their package's version file (`vllm/_version.py`,
/// `sglang/_version.py`): read as module-level assignments, so a computed `__version__`
/// (sglang's `version.py` asks importlib.metadata) is never taken for a version. The
/// dist-info of that version is the record when present.
fn probe_versions(root: &Root, dir: &Path, wanted: impl Fn(Engine) -> bool) -> Vec<EngineInstall> {
    let mut out = Vec::new();
    for info in crate::engines::TABLE.iter().filter(|i| wanted(i.engine)) {
        let found = info.version_files.iter().find_map(|file| {
            let path = dir.join(file);
            let text = root.read_small_string(&path).ok()?;
            let v = infera_core::pyassign::literal(&text, "__version__")
                .or_else(|| infera_core::pyassign::literal(&text, "version"))?;
            Some((v, path))
        });
        let Some((version, path)) = found else { continue };
        let dist = dir.join(format!("{}-{version}.dist-info", info.dist));
        let record = if root.metadata(&dist).is_ok() { dist } else { path };
        out.push(EngineInstall {
            engine: info.engine,
            version,
            record,
            argparse_deprecated: None,
            argparse_unread: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(infera_core::names::module_name("torch"), Some("torch"));
        assert_eq!(infera_core::names::module_name("six.py"), Some("six"));
        assert_eq!(
            infera_core::names::module_name("_cffi_backend.cpython-312-x86_64-linux-gnu.so"),
            Some("_cffi_backend")
        );
        assert_eq!(infera_core::names::module_name("vllm-0.11.0.dist-info"), None);
        assert_eq!(infera_core::names::module_name("distutils-precedence.pth"), None);
        assert_eq!(infera_core::names::module_name("__pycache__"), None);
        assert_eq!(
            Dist::parse("vllm-0.11.1rc2.dev0+g1.rocm700.dist-info"),
            Some(("vllm", "0.11.1rc2.dev0+g1.rocm700"))
        );
        let d = |name: &str| Dist { dir: PathBuf::from("/s"), name: name.into(), version: "1".into() };
        let dists = [d("mooncake_transfer_engine_rocm"), d("moon"), d("hipfile")];
        assert_eq!(
            Dist::of(&dists, Path::new("/s"), "mooncake").map(|d| d.name.as_str()),
            Some("mooncake_transfer_engine_rocm")
        );
        assert_eq!(Dist::of(&dists, Path::new("/s"), "moo"), None);
        assert_eq!(Dist::of(&dists, Path::new("/other"), "hipfile"), None);
    }

    /// Names as pkg_resources and PEP 503 read them.
    #[test]
    fn egg_names() {
        assert_eq!(Dist::parse("vllm-0.11.0-py3.12.egg-info"), Some(("vllm", "0.11.0")));
        assert_eq!(Dist::parse("vllm-0.11.0.egg-info"), Some(("vllm", "0.11.0")));
        assert_eq!(Dist::parse("vllm.egg-info"), None, "a develop checkout's record has no version");
        assert_eq!(egg_name("vllm-0.5.0+rocm603-py3.9-linux-x86_64"), Some(("vllm", "0.5.0+rocm603")));
        for name in ["vllm", "VLLM", "vLLM", "sglang", "SGLang"] {
            assert!(engine_of(name).is_some(), "{name}");
        }
        assert_eq!(engine_of("vllm_omni"), None);
        assert_eq!(pep503("Mooncake__Transfer.-Engine"), "mooncake-transfer-engine");
    }
}
