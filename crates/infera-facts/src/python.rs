//! The container's CPython: found on the container's PATH, its minor version read from
//! the evidence the image carries (never by importing anything).

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use infera_exec_derive::Refuse;
use serde::Serialize;

use crate::envvars;
use crate::finding::Finding;
use infera_core::names::ext_suffix_minor;
use infera_core::rootfs::{self, parse_minor, Root};

#[derive(Debug, Clone, Serialize)]
pub struct Python {
    /// The path exec'd in the container. For a venv this is the venv's own `bin/python3`
    /// (unresolved), because CPython finds `pyvenv.cfg` next to the path it was started as.
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub executable: PathBuf,
    /// The interpreter file after resolving every symlink inside the root.
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub resolved: PathBuf,
    /// `3.12`
    pub version: String,
    #[serde(skip)]
    pub minor: (u32, u32),
    /// Where the version came from: `interpreter name python3.12`, `pyvenv.cfg`, ...
    pub evidence: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::ser::ser_opt_path")]
    pub venv: Option<PathBuf>,
    /// The image's site directories for this interpreter (container paths).
    #[serde(serialize_with = "crate::ser::ser_paths")]
    pub site_dirs: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Refuse)]
pub enum PythonError {
    #[error("no `python3` can be found: PATH is empty")]
    #[refuse(
        code = "python-missing",
        exit = Missing,
        hint = "set PATH in the pod spec (the image's PATH, e.g. /usr/local/bin:/usr/bin:/bin)"
    )]
    EmptyPath,
    #[error("no `{names}` on the container's PATH ({path})")]
    #[refuse(
        code = "python-missing",
        exit = Missing,
        hint = "run an engine image that has CPython, or put its bin directory on PATH"
    )]
    NotFound { names: String, path: String },
    #[error("the interpreter `{}` cannot be resolved: {reason}", path.display())]
    #[refuse(code = "python-unresolvable", exit = Missing, hint = "the image's python3 link is broken or loops; fix the image")]
    Unresolvable { path: PathBuf, reason: String },
    #[error(
        "the interpreter `{}` is a broken link: {}{}",
        link.display(),
        std::iter::once(link).chain(chain).map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(" → "),
        if *looped { " loops (too many levels of symbolic links)" } else { ", which does not exist in the image" }
    )]
    #[refuse(
        code = "python-link-broken",
        exit = Missing,
        hint = "the image's interpreter link is broken (an update-alternatives or venv left behind?); fix the image, or name the interpreter with INFERA_PYTHON"
    )]
    BrokenLink { link: PathBuf, chain: Vec<PathBuf>, looped: bool },
    #[error(
        "cannot tell the CPython version of `{}`: no versioned name, pyvenv.cfg, \
         lib/python3.X directory or cpython-3XY extension module in the image",
        path.display()
    )]
    #[refuse(
        code = "python-version-unknown",
        exit = Unsupported,
        hint = "use an engine image with a versioned interpreter (python3.X) or a pyvenv.cfg"
    )]
    UnknownVersion { path: PathBuf },
}

/// One piece of evidence for the CPython minor.
#[derive(Debug, Clone)]
struct Evidence {
    what: String,
    minor: (u32, u32),
}

/// `wanted`: the interpreter the request names (INFERA_PYTHON, or the command's), an
/// absolute path or a name to find on PATH; None: `python3`, then `python`.
pub fn detect(
    root: &Root,
    path_var: Option<&OsString>,
    pythonpath: Option<&OsString>,
    wanted: Option<&OsStr>,
    findings: &mut Vec<Finding>,
) -> Result<Python, PythonError> {
    let found = locate(root, path_var, wanted)?;
    let resolved = root.resolve(&found).map_err(|e| unresolvable(root, found.clone(), &e))?;
    let bin_dir = found.parent().unwrap_or(Path::new("/")).to_path_buf();
    let venv_dir = bin_dir.parent().map(Path::to_path_buf).filter(|v| root.is_file(&v.join("pyvenv.cfg")));
    let venv_cfg = venv_dir.as_ref().and_then(|v| root.read_small_string(&v.join("pyvenv.cfg")).ok());
    let mut evidence: Vec<Evidence> = Vec::new();
    // 1. The interpreter's own name, e.g. /usr/bin/python3.12.
    for p in [&resolved, &found] {
        if let Some(m) = p.file_name().and_then(|n| n.to_str()).and_then(parse_minor) {
            evidence.push(Evidence { what: format!("interpreter name `{}`", p.display()), minor: m });
            break;
        }
    }
    // 2. pyvenv.cfg (`version = 3.12.3` from venv, `version_info = ...` from uv/virtualenv).
    if let (Some(v), Some(text)) = (&venv_dir, &venv_cfg) {
        if let Some(m) = pyvenv_minor(text) {
            evidence.push(Evidence { what: format!("`{}`", v.join("pyvenv.cfg").display()), minor: m });
        }
    }
    let candidates = candidates(root, &found, &resolved, venv_dir.as_deref(), venv_cfg.as_deref());
    // 3. The directories that hold the image's packages (torch or an engine) are evidence;
    // an empty python3.X directory left by the OS is not. 4. Extension suffixes of compiled
    // modules, e.g. torch/_C.cpython-312-x86_64-linux-gnu.so.
    for (dir, minor) in &candidates {
        let Some(m) = minor else { continue };
        if holds_packages(root, dir) {
            evidence.push(Evidence { what: format!("packages in `{}`", dir.display()), minor: *m });
            if let Some((file, em)) = torch_ext_minor(root, dir) {
                evidence.push(Evidence { what: format!("extension `{}`", file.display()), minor: em });
            }
        }
    }
    let minor = decide(root, &found, &mut evidence, findings)?;
    let site_dirs = site_dirs(root, &candidates, minor, pythonpath);
    let executable = if venv_dir.is_some() { found.clone() } else { resolved.clone() };
    let mut ev_text: Vec<String> = Vec::new();
    for e in &evidence {
        if e.minor == minor && !ev_text.contains(&e.what) {
            ev_text.push(e.what.clone());
        }
    }
    let version = format!("{}.{}", minor.0, minor.1);
    Ok(Python { executable, resolved, version, minor, evidence: ev_text, venv: venv_dir, site_dirs })
}

/// The interpreter's path: the one named, else the first of `python3`, `python` on PATH.
fn locate(root: &Root, path_var: Option<&OsString>, wanted: Option<&OsStr>) -> Result<PathBuf, PythonError> {
    if let Some(w) = wanted.filter(|w| Path::new(w).is_absolute()) {
        let p = PathBuf::from(w);
        return match root.stat(&p) {
            Ok(_) => Ok(p),
            Err(e) => Err(unresolvable(root, p, &e)),
        };
    }
    let path_str = path_var.map_or_else(|| envvars::DEFAULT_PATH.to_string(), |p| rootfs::os_to_string(p));
    let dirs: Vec<&str> = path_str.split(':').filter(|d| d.starts_with('/')).collect();
    if dirs.is_empty() {
        return Err(PythonError::EmptyPath);
    }
    let names: Vec<String> = match wanted {
        Some(w) => vec![w.to_string_lossy().into_owned()],
        None => vec!["python3".into(), "python".into()],
    };
    find_on_path(root, &dirs, &names)?
        .ok_or_else(|| PythonError::NotFound { names: names.join("` or `"), path: path_str.clone() })
}

/// The site directories CPython would read, each with the minor its path names: a venv's
/// own, then the base's. The prefix of the path found on PATH counts too (`/usr/bin/python3`
/// → `/usr`, whose /usr/local/lib/python3.X/dist-packages Debian-built CPython reads), not
/// only the prefix of the resolved file. A venv made with `--system-site-packages`
/// (`include-system-site-packages = true`): CPython appends the base installation's site
/// directories (its prefix: `home`'s parent, where the venv's interpreter resolves).
fn candidates(
    root: &Root,
    found: &Path,
    resolved: &Path,
    venv_dir: Option<&Path>,
    venv_cfg: Option<&str>,
) -> Vec<(PathBuf, Option<(u32, u32)>)> {
    let base_too = venv_cfg.is_some_and(system_site);
    let base_prefixes: Vec<PathBuf> = match venv_dir {
        Some(_) if !base_too => Vec::new(),
        Some(_) => venv_cfg.and_then(pyvenv_home).into_iter().chain([resolved.to_path_buf()]).collect(),
        None => vec![found.to_path_buf(), resolved.to_path_buf()],
    };
    let mut candidates = venv_dir.map(|v| site_candidates(root, v, true)).unwrap_or_default();
    for pre in base_prefixes.iter().filter_map(|p| p.parent().and_then(Path::parent)) {
        for c in site_candidates(root, pre, false) {
            if !candidates.contains(&c) {
                candidates.push(c);
            }
        }
    }
    candidates
}

/// The minor the evidence gives: the first when all agree; when it disagrees, the
/// interpreter's own evidence (or, on the real root, running it) wins, said as a warning.
/// No evidence: on the real root, running the interpreter, else unknown.
fn decide(
    root: &Root,
    found: &Path,
    evidence: &mut Vec<Evidence>,
    findings: &mut Vec<Finding>,
) -> Result<(u32, u32), PythonError> {
    let distinct: BTreeSet<(u32, u32)> = evidence.iter().map(|e| e.minor).collect();
    let Some(first) = evidence.first() else {
        // Last resort, allowed only on the real root: ask the interpreter itself.
        let ran = if root.is_host_root() { run_interpreter(found) } else { None };
        let m = ran.ok_or_else(|| PythonError::UnknownVersion { path: found.to_path_buf() })?;
        evidence.push(Evidence { what: "running the interpreter".to_string(), minor: m });
        return Ok(m);
    };
    if distinct.len() <= 1 {
        return Ok(first.minor);
    }
    let list: Vec<String> = evidence.iter().map(|e| format!("{}.{} from {}", e.minor.0, e.minor.1, e.what)).collect();
    let (chosen, how) = match root.is_host_root().then(|| run_interpreter(found)).flatten() {
        Some(m) => (m, "running the interpreter settled it"),
        None => (first.minor, "the interpreter's own evidence wins"),
    };
    findings.push(Finding::warn(
        "python-evidence-conflict",
        format!("the image's CPython evidence disagrees: {}; using {}.{} ({how})", list.join("; "), chosen.0, chosen.1),
    ));
    Ok(chosen)
}

/// The site directories of that minor, with what their `easy-install.pth` adds; the image's
/// PYTHONPATH entries first (they come first in sys.path, the base's too).
fn site_dirs(
    root: &Root,
    candidates: &[(PathBuf, Option<(u32, u32)>)],
    minor: (u32, u32),
    pythonpath: Option<&OsString>,
) -> Vec<PathBuf> {
    let mut site_dirs: Vec<PathBuf> = Vec::new();
    for (dir, _) in candidates.iter().filter(|(_, m)| m.is_none() || *m == Some(minor)) {
        site_dirs.push(dir.clone());
        for p in pth_paths(root, dir) {
            if !site_dirs.contains(&p) {
                site_dirs.push(p);
            }
        }
    }
    if let Some(pp) = pythonpath {
        let pp = rootfs::os_to_string(pp);
        for e in pp.split(':').filter(|e| e.starts_with('/')).rev() {
            let p = PathBuf::from(e);
            if root.is_dir(&p) && !site_dirs.contains(&p) {
                site_dirs.insert(0, p);
            }
        }
    }
    site_dirs
}

/// PATH lookup inside the root: each name in every directory, in order.
/// A candidate that exists but cannot be resolved (a symlink loop) is an error, not a skip.
fn find_on_path(root: &Root, dirs: &[&str], names: &[String]) -> Result<Option<PathBuf>, PythonError> {
    // As execvp: a candidate that is not a regular file is passed over for a later one, and
    // is what the run would fail on (126) when there is none.
    let mut not_regular: Option<PathBuf> = None;
    for name in names {
        for d in dirs {
            let cand = Path::new(d).join(name);
            match root.stat(&cand) {
                Ok((_, m)) if m.is_file() => return Ok(Some(cand)),
                Ok(_) => {
                    not_regular.get_or_insert(cand);
                }
                // A link whose target is missing is named as such, not skipped as "no python3".
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && root.link_chain(&cand).is_empty() => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {}
                Err(e) => return Err(unresolvable(root, cand, &e)),
            }
        }
    }
    Ok(not_regular)
}

/// Why an interpreter path cannot be resolved: a broken or looping link (with its chain),
/// or the error itself.
fn unresolvable(root: &Root, path: PathBuf, e: &std::io::Error) -> PythonError {
    let chain = root.link_chain(&path);
    if chain.is_empty() {
        return PythonError::Unresolvable { path, reason: rootfs::io_reason(e) };
    }
    let looped = chain.last().is_some_and(|l| chain[..chain.len() - 1].contains(l) || *l == path) || chain.len() > 40;
    PythonError::BrokenLink { link: path, chain, looped }
}

/// The directories a site directory's `easy-install.pth` adds, as CPython's site.py reads a
/// `.pth` file (a line per path relative to the site directory, `#` comments and `import`
/// lines skipped, only paths that exist): the egg of a `setup.py install` (a directory, or a
/// zipped `.egg` file, which zipimport reads), the checkout of a `setup.py develop`. Only
/// that file, by name: listing every site directory for `*.pth` on each start would cost
/// what the site scan avoids (it lists a directory only when it must).
fn pth_paths(root: &Root, dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = root.read_small_string(&dir.join("easy-install.pth")) else { return Vec::new() };
    let mut out = Vec::new();
    for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if line.starts_with("import ") || line.starts_with("import\t") {
            continue;
        }
        let p = normalise(&dir.join(line));
        let zipped = p.extension().is_some_and(|e| e == "egg") && root.metadata(&p).is_ok_and(|m| m.is_file());
        if (zipped || root.is_dir(&p)) && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// `a/./b/../c` → `a/c`, without touching the file system (CPython's `os.path.abspath`).
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `include-system-site-packages = true` (as CPython's site.py reads it: any case).
fn system_site(text: &str) -> bool {
    text.lines().filter_map(|l| l.split_once('=')).any(|(k, v)| {
        k.trim().eq_ignore_ascii_case("include-system-site-packages") && v.trim().eq_ignore_ascii_case("true")
    })
}

/// The base interpreter's path as pyvenv.cfg's `home` (its bin directory) gives it.
fn pyvenv_home(text: &str) -> Option<PathBuf> {
    let (_, home) =
        text.lines().filter_map(|l| l.split_once('=')).find(|(k, _)| k.trim().eq_ignore_ascii_case("home"))?;
    Some(Path::new(home.trim()).join("python3"))
}

fn pyvenv_minor(text: &str) -> Option<(u32, u32)> {
    let mut fallback = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        match k.trim() {
            "version" | "version_info" => return parse_minor(v.trim()),
            "home" => fallback = Path::new(v.trim()).file_name().and_then(|n| n.to_str()).and_then(parse_minor),
            _ => {}
        }
    }
    fallback
}

/// Candidate site directories under a prefix, with the minor their path names.
fn site_candidates(root: &Root, prefix: &Path, venv: bool) -> Vec<(PathBuf, Option<(u32, u32)>)> {
    let mut out = Vec::new();
    let mut bases: Vec<(PathBuf, &[&str])> = Vec::new();
    if venv {
        bases.push((prefix.join("lib"), &["site-packages"]));
    } else {
        // Debian/Ubuntu put pip's packages in /usr/local/lib/python3.X/dist-packages.
        bases.push((prefix.join("local/lib"), &["dist-packages", "site-packages"]));
        bases.push((prefix.join("lib"), &["site-packages", "dist-packages"]));
    }
    for (lib, kinds) in bases {
        let mut names: Vec<String> = root
            .list(&lib)
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .filter(|n| n.starts_with("python3"))
            .collect();
        names.sort();
        names.reverse(); // newest first, for a stable order
        for n in names {
            let minor = parse_minor(&n);
            if minor.is_none() && n != "python3" {
                continue;
            }
            for k in kinds {
                let mut d = PathBuf::with_capacity(lib.as_os_str().len() + n.len() + k.len() + 2);
                d.push(&lib);
                d.push(&n);
                d.push(k);
                if root.is_dir(&d) {
                    out.push((d, minor));
                }
            }
        }
    }
    out
}

/// Does this site directory hold the image's packages (torch, or an engine)?
fn holds_packages(root: &Root, dir: &Path) -> bool {
    // torch is in every engine image: one stat answers the common case.
    if root.is_dir(&dir.join("torch")) {
        return true;
    }
    let dists: Vec<&str> = crate::engines::TABLE.iter().map(|i| i.dist).chain(["torch"]).collect();
    root.list(dir).iter().any(|n| {
        let n = n.to_string_lossy();
        (n.ends_with(".dist-info") || n.ends_with(".egg-info"))
            && n.split_once('-').is_some_and(|(d, _)| dists.contains(&d))
    })
}

/// `torch/_C.cpython-312-x86_64-linux-gnu.so` → (path, (3, 12)).
fn torch_ext_minor(root: &Root, site: &Path) -> Option<(PathBuf, (u32, u32))> {
    let tdir = site.join("torch");
    root.list(&tdir).into_iter().find_map(|n| {
        let n = n.into_string().ok()?;
        let m = ext_suffix_minor(&n)?;
        Some((tdir.join(n), m))
    })
}

/// The fallback: only on the real root, only when the files could not decide.
fn run_interpreter(path: &Path) -> Option<(u32, u32)> {
    let out = std::process::Command::new(path)
        .args(["-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_minor(String::from_utf8_lossy(&out.stdout).trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pyvenv_forms() {
        assert_eq!(pyvenv_minor("home = /usr/bin\nversion = 3.12.3\n"), Some((3, 12)));
        assert_eq!(pyvenv_minor("home = /x\nversion_info = 3.10.14\n"), Some((3, 10)));
        assert_eq!(pyvenv_minor("home = /usr/local/python3.10\n"), Some((3, 10)));
        assert_eq!(pyvenv_minor("garbage"), None);
    }

    #[test]
    fn ext_suffixes() {
        assert_eq!(ext_suffix_minor("_C.cpython-312-x86_64-linux-gnu.so"), Some((3, 12)));
        assert_eq!(ext_suffix_minor("_C.cpython-313t-x86_64-linux-gnu.so"), Some((3, 13)));
        assert_eq!(ext_suffix_minor("_C.abi3.so"), None);
        assert_eq!(ext_suffix_minor("libtorch.so"), None);
    }
}
