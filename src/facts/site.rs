//! What the image's site directories hold: top-level importable names (to detect
//! shadowing) and the engines installed there (dist-info / egg-info).
//! Each directory is listed once; nothing inside the packages is read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::engines::Engine;
use crate::rootfs::Root;

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
    pub record: PathBuf,
}

/// A distribution's record in a directory: `mooncake_transfer_engine_rocm-0.3.13.post1.dist-info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dist {
    pub dir: PathBuf,
    pub name: String,
    pub version: String,
}

impl Dist {
    /// The distribution that provides top-level module `module` among `dists`, by name
    /// (`mooncake` → `mooncake`, `mooncake_transfer_engine_rocm`), in `dir`.
    pub fn of<'d>(dists: &'d [Dist], dir: &Path, module: &str) -> Option<&'d Dist> {
        let provides = |d: &&Dist| {
            let n = d.name.to_ascii_lowercase().replace(['-', '.'], "_");
            d.dir == dir && (n == module || n.strip_prefix(module).is_some_and(|r| r.starts_with('_')))
        };
        dists.iter().find(provides)
    }

    /// `mooncake_transfer_engine_rocm-0.3.13.post1.dist-info` → (name, version).
    pub fn parse(entry: &str) -> Option<(&str, &str)> {
        let stem = entry.strip_suffix(".dist-info").or_else(|| entry.strip_suffix(".egg-info"))?;
        stem.split_once('-')
    }

    pub fn describe(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
}

/// Importable top-level name of a site directory entry, if it is one.
pub fn module_name(entry: &str) -> Option<&str> {
    if entry.starts_with('.') || entry == "__pycache__" {
        return None;
    }
    for meta in [".dist-info", ".egg-info", ".data", ".pth", ".egg-link", ".txt", ".json", ".pyc"] {
        if entry.ends_with(meta) {
            return None;
        }
    }
    let name = if let Some(stem) = entry.strip_suffix(".py") {
        stem
    } else if entry.ends_with(".so") {
        entry.split('.').next()?
    } else {
        entry
    };
    is_identifier(name).then_some(name)
}

pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Engines installed in the site directories, and which of `probe` (the overlay trees'
/// top-level modules) the image provides. An engine is found by the literal in its version
/// file first (no directory listing); the probes are `stat`s. Each site directory is listed
/// once, and only when it must be: an engine not found that way (an editable install keeps
/// only its dist-info in site-packages; a wheel's `version.py` may compute the version) or
/// a probed module the image has (to name the distribution that installed it).
pub fn scan(
    root: &Root,
    site_dirs: &[PathBuf],
    minor: (u32, u32),
    probe: &BTreeSet<String>,
) -> (SiteIndex, Vec<EngineInstall>) {
    let mut index = SiteIndex::default();
    let mut engines: Vec<EngineInstall> = Vec::new();
    let ext = format!(".cpython-{}{}-x86_64-linux-gnu.so", minor.0, minor.1);
    for dir in site_dirs {
        for e in probe_versions(root, dir) {
            if !engines.iter().any(|x| x.engine == e.engine) {
                engines.push(e);
            }
        }
        for m in probe {
            if index.modules.contains_key(m) {
                continue;
            }
            let hit = [m.clone(), format!("{m}.py"), format!("{m}{ext}"), format!("{m}.abi3.so"), format!("{m}.so")]
                .iter()
                .any(|c| root.metadata(&dir.join(c)).is_ok());
            if hit {
                index.modules.insert(m.clone(), dir.clone());
            }
        }
    }
    let missing = crate::engines::TABLE.iter().any(|i| !engines.iter().any(|e| e.engine == i.engine));
    if missing || !index.modules.is_empty() {
        for dir in site_dirs {
            let mut names: Vec<String> = root.list(dir).into_iter().filter_map(|n| n.into_string().ok()).collect();
            names.sort();
            for n in names {
                let Some((name, version)) = Dist::parse(&n) else { continue };
                let norm = name.to_ascii_lowercase().replace('_', "-");
                if let Some(info) = crate::engines::TABLE.iter().find(|i| i.dist == norm) {
                    if !engines.iter().any(|x| x.engine == info.engine) {
                        engines.push(EngineInstall {
                            engine: info.engine,
                            version: version.to_string(),
                            record: dir.join(&n),
                        });
                    }
                }
                index.dists.push(Dist { dir: dir.clone(), name: name.to_string(), version: version.to_string() });
            }
        }
    }
    engines.sort_by_key(|e| e.engine.name());
    (index, engines)
}

/// Engines found by the literal version in their package's version file (`vllm/_version.py`,
/// `sglang/_version.py`): read as module-level assignments, so a computed `__version__`
/// (sglang's `version.py` asks importlib.metadata) is never taken for a version. The
/// dist-info of that version is the record when present.
fn probe_versions(root: &Root, dir: &Path) -> Vec<EngineInstall> {
    let mut out = Vec::new();
    for info in &crate::engines::TABLE {
        let found = info.version_files.iter().find_map(|file| {
            let path = dir.join(file);
            let text = root.read_small_string(&path).ok()?;
            let v = super::pyassign::literal(&text, "__version__")
                .or_else(|| super::pyassign::literal(&text, "version"))?;
            Some((v, path))
        });
        let Some((version, path)) = found else { continue };
        let dist = dir.join(format!("{}-{version}.dist-info", info.dist));
        let record = if root.metadata(&dist).is_ok() { dist } else { path };
        out.push(EngineInstall { engine: info.engine, version, record });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(module_name("torch"), Some("torch"));
        assert_eq!(module_name("six.py"), Some("six"));
        assert_eq!(module_name("_cffi_backend.cpython-312-x86_64-linux-gnu.so"), Some("_cffi_backend"));
        assert_eq!(module_name("vllm-0.11.0.dist-info"), None);
        assert_eq!(module_name("distutils-precedence.pth"), None);
        assert_eq!(module_name("__pycache__"), None);
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
}
