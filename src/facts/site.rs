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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineInstall {
    #[serde(rename = "name")]
    pub engine: Engine,
    pub version: String,
    /// The dist-info directory (container path).
    pub record: PathBuf,
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

/// `vllm-0.11.0.dist-info` → ("vllm", "0.11.0").
fn dist_record(entry: &str) -> Option<(&str, &str)> {
    let stem = entry.strip_suffix(".dist-info").or_else(|| entry.strip_suffix(".egg-info"))?;
    let (name, version) = stem.split_once('-')?;
    Some((name, version))
}

/// Engines installed in the site directories, and which of `probe` (the overlay trees'
/// top-level modules) the image provides. Each site directory is read once for the
/// engines' dist-info; the probes are `stat`s, so a site-packages ten times larger costs
/// one longer directory read, not ten times the work.
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
    // An engine not found by its package's version file (an editable install keeps only
    // its dist-info in site-packages): one read of each site directory, for dist-info names.
    if engines.is_empty() {
        for dir in site_dirs {
            let mut found: Vec<EngineInstall> = Vec::new();
            for n in root.list(dir) {
                let Some(n) = n.to_str() else { continue };
                let Some((name, version)) = dist_record(n) else { continue };
                let name = name.to_ascii_lowercase().replace('_', "-");
                if let Some(info) = crate::engines::TABLE.iter().find(|i| i.dist == name) {
                    found.push(EngineInstall {
                        engine: info.engine,
                        version: version.to_string(),
                        record: dir.join(n),
                    });
                }
            }
            found.sort_by(|a, b| a.record.cmp(&b.record));
            for e in found {
                if !engines.iter().any(|x| x.engine == e.engine) {
                    engines.push(e);
                }
            }
        }
    }
    engines.sort_by_key(|e| e.engine.name());
    (index, engines)
}

/// Engines found by reading their package's version file: no directory listing, so a
/// site-packages ten times larger costs nothing more. The dist-info of that version is the
/// record when present.
fn probe_versions(root: &Root, dir: &Path) -> Vec<EngineInstall> {
    let mut out = Vec::new();
    for info in &crate::engines::TABLE {
        let Some(file) = info.version_files.first() else { continue };
        let path = dir.join(file);
        let Ok(text) = root.read_small_string(&path) else { continue };
        let Some(version) = text.lines().find_map(|l| {
            let l = l.trim_start();
            if !(l.starts_with("__version__") || l.starts_with("version")) {
                return None;
            }
            let q = l.rfind(['\'', '"'])?;
            let start = l[..q].rfind(['\'', '"'])?;
            Some(l[start + 1..q].to_string())
        }) else {
            continue;
        };
        if version.is_empty() {
            continue;
        }
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
            dist_record("vllm-0.11.1rc2.dev0+g1.rocm700.dist-info"),
            Some(("vllm", "0.11.1rc2.dev0+g1.rocm700"))
        );
    }
}
