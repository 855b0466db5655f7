//! What names say, as the tools that write them mean it: Python distribution records
//! (`NAME-VERSION.dist-info`, eggs as pkg_resources reads them, PEP 503), importable module
//! names, CPython's extension suffixes (PEP 3149) and the HIP runtime's soname.

use std::path::{Path, PathBuf};

use crate::pyassign::is_identifier;

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
        dists.iter().find(|d| d.dir == dir && Dist::provides(&d.name, module))
    }

    /// Does distribution `name` provide top-level `module` by its name (`mooncake`,
    /// `mooncake-transfer-engine-rocm`; case, `-`, `.` and `_` as pip normalises them)?
    pub fn provides(name: &str, module: &str) -> bool {
        let norm = |b: u8| if b == b'-' || b == b'.' { b'_' } else { b.to_ascii_lowercase() };
        let (n, m) = (name.as_bytes(), module.as_bytes());
        n.len() >= m.len()
            && n[..m.len()].iter().zip(m).all(|(a, b)| norm(*a) == *b)
            && (n.len() == m.len() || norm(n[m.len()]) == b'_')
    }

    /// `mooncake_transfer_engine_rocm-0.3.13.post1.dist-info` → (name, version); an
    /// `.egg-info` as pkg_resources reads it (`vllm-0.11.0-py3.12.egg-info` → vllm 0.11.0).
    pub fn parse(entry: &str) -> Option<(&str, &str)> {
        let stem = entry.strip_suffix(".dist-info").or_else(|| entry.strip_suffix(".egg-info"))?;
        egg_name(stem)
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

/// pkg_resources' `EGG_NAME`: `NAME-VERSION(-pyX.Y(-PLATFORM))`, each part without `-`
/// (setuptools writes `-` in a name or version as `_`). None without a version.
pub fn egg_name(stem: &str) -> Option<(&str, &str)> {
    let mut parts = stem.split('-');
    let (name, version) = (parts.next()?, parts.next()?);
    (!name.is_empty() && !version.is_empty()).then_some((name, version))
}

/// PEP 503: `re.sub(r"[-_.]+", "-", name).lower()`.
pub fn pep503(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}
/// `_C.cpython-312-x86_64-linux-gnu.so` → (3, 12); `abi3` and other names → None.
pub fn ext_suffix_minor(name: &str) -> Option<(u32, u32)> {
    let rest = name.split_once(".cpython-")?.1;
    if !rest.ends_with(".so") {
        return None;
    }
    let tag: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if tag.len() < 2 || !tag.starts_with('3') {
        return None;
    }
    Some((3, tag[1..].parse().ok()?))
}
/// `libamdhip64.so.7` → (7, None); `libamdhip64.so.7.2.26015` → (7, Some("7.2.26015")).
/// Only `libamdhip64.so.<digits>(.<digits>)*`, what ld.so would load: a stray
/// `libamdhip64.so.6.bak` or `.so.7~` beside the real library is not a HIP runtime.
pub fn parse_hip_soname(name: &str) -> Option<(u32, Option<String>)> {
    let rest = name.strip_prefix("libamdhip64.so.")?;
    if !rest.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let major = rest.split('.').next()?.parse().ok()?;
    Some((major, rest.contains('.').then(|| rest.to_string())))
}
