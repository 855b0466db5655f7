//! The ROCm userspace of the image, from the files ROCm installs (FACTS.md order),
//! with torch's record as the last source.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use infera_exec_derive::Refuse;
use serde::Serialize;

use super::torch::Torch;
use crate::finding::Finding;
use crate::rootfs::{self, Root};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rocm {
    /// `7.0.0`, or `7` when the source only knows the major.
    pub version: String,
    pub major: u32,
    #[serde(skip)]
    pub minor: Option<u32>,
    /// The file the version came from (container path).
    pub source: String,
    /// The install directory, resolved inside the root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Refuse)]
pub enum RocmError {
    #[error(
        "this image's torch is a CUDA build (torch {torch}, cuda {cuda}, no hip, in `{}`); \
         the infera overlay is built for ROCm",
        path.display()
    )]
    #[refuse(
        code = "cuda-image",
        exit = Unsupported,
        hint = "use the ROCm build of the engine image (e.g. vllm/vllm-openai-rocm, rocm/vllm, lmsysorg/sglang ROCm tags)"
    )]
    Cuda { torch: String, cuda: String, path: PathBuf },
    #[error("no ROCm userspace found in the image (looked at {})", looked.join(", "))]
    #[refuse(
        code = "rocm-missing",
        exit = Unsupported,
        hint = "use a ROCm engine image, or set ROCM_PATH to the image's ROCm install"
    )]
    NotFound { looked: Vec<String> },
}

/// `6.4.1-120`, `7.0.0`, `7.0.2.1-45` → ("6.4.1", 6, 4). Anything else → None.
pub fn parse_version_file(text: &str) -> Option<(String, u32, u32)> {
    let line = text.lines().next()?.trim();
    let ver = line.split('-').next()?;
    let parts: Vec<&str> = ver.split('.').collect();
    // Digits only, no leading zeros (`7.01` is not a ROCm version: fuzzing found it read as 7.1).
    let bad = |p: &&str| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || (p.len() > 1 && p.starts_with('0'));
    if parts.len() < 2 || parts.len() > 4 || parts.iter().any(bad) {
        return None;
    }
    let major = parts[0].parse().ok()?;
    let minor = parts[1].parse().ok()?;
    Some((ver.to_string(), major, minor))
}

/// `#define ROCM_VERSION_MAJOR 7` ... from rocm-core's header.
pub fn parse_version_header(text: &str) -> Option<(String, u32, u32)> {
    let get = |key: &str| -> Option<u32> {
        text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "#define" && it.next()? == key).then_some(())?;
            it.next()?.parse().ok()
        })
    };
    let (ma, mi) = (get("ROCM_VERSION_MAJOR")?, get("ROCM_VERSION_MINOR")?);
    let pa = get("ROCM_VERSION_PATCH").unwrap_or(0);
    Some((format!("{ma}.{mi}.{pa}"), ma, mi))
}

/// `HIP_VERSION_MAJOR=7` lines of share/hip/version. Only the major is a ROCm fact.
pub fn parse_hip_version(text: &str) -> Option<u32> {
    text.lines().find_map(|l| l.trim().strip_prefix("HIP_VERSION_MAJOR=")?.trim().parse().ok())
}

pub fn detect(
    root: &Root,
    rocm_path: Option<&OsString>,
    rocm_home: Option<&OsString>,
    torch: Option<&Torch>,
    findings: &mut Vec<Finding>,
) -> Result<Rocm, RocmError> {
    if let Some(t) = torch.filter(|t| t.is_cuda()) {
        return Err(RocmError::Cuda {
            torch: t.version.clone().unwrap_or_else(|| "?".into()),
            cuda: t.cuda.clone().unwrap_or_default(),
            path: t.path.clone(),
        });
    }
    let mut looked = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for v in [rocm_path, rocm_home].into_iter().flatten() {
        let s = rootfs::os_to_string(v);
        if s.starts_with('/') {
            dirs.push(PathBuf::from(s));
        }
    }
    dirs.push(PathBuf::from("/opt/rocm"));
    dirs.dedup();

    let mut found = None;
    for d in &dirs {
        match root.resolve(d) {
            Ok(r) if root.is_dir(&r) => {
                if let Some(x) = from_install(root, d, &r, &mut looked, findings) {
                    found = Some(x);
                    break;
                }
            }
            _ => looked.push(format!("`{}` (absent)", d.display())),
        }
    }

    let from_torch = torch.and_then(|t| t.rocm().map(|r| (r, t.path.clone())));
    match (found, from_torch) {
        (Some(r), Some(((tmajor, _), tpath))) => {
            if tmajor != r.major {
                findings.push(Finding::warn(
                    "rocm-evidence-conflict",
                    format!(
                        "ROCm {} from `{}` but torch was built for ROCm {tmajor} (`{}`); using the installed ROCm",
                        r.version,
                        r.source,
                        tpath.display()
                    ),
                ));
            }
            Ok(r)
        }
        (Some(r), None) => Ok(r),
        (None, Some(((major, minor), tpath))) => {
            let version = match minor {
                Some(m) => format!("{major}.{m}"),
                None => major.to_string(),
            };
            Ok(Rocm { version, major, minor, source: tpath.display().to_string(), install: None })
        }
        (None, None) => {
            if let Some(t) = torch {
                looked.push(format!("`{}` (no hip, no +rocm tag)", t.path.display()));
            } else {
                looked.push("torch/version.py (no torch in the image's site directories)".into());
            }
            Err(RocmError::NotFound { looked })
        }
    }
}

fn from_install(
    root: &Root,
    dir: &Path,
    resolved: &Path,
    looked: &mut Vec<String>,
    findings: &mut Vec<Finding>,
) -> Option<Rocm> {
    let install = Some(resolved.to_path_buf());
    for rel in [".info/version", "core/.info/version"] {
        let p = dir.join(rel);
        match root.read_small_string(&p) {
            Ok(text) => match parse_version_file(&text) {
                Some((version, major, minor)) => {
                    return Some(Rocm { version, major, minor: Some(minor), source: p.display().to_string(), install })
                }
                None => findings.push(Finding::warn(
                    "rocm-version-unreadable",
                    format!("`{}` does not hold a ROCm version (X.Y.Z[-build]); trying other sources", p.display()),
                )),
            },
            Err(e) => looked.push(format!("`{}` ({})", p.display(), rootfs::io_reason(&e))),
        }
    }
    let h = dir.join("include/rocm-core/rocm_version.h");
    match root.read_small_string(&h) {
        Ok(text) => {
            if let Some((version, major, minor)) = parse_version_header(&text) {
                return Some(Rocm { version, major, minor: Some(minor), source: h.display().to_string(), install });
            }
        }
        Err(e) => looked.push(format!("`{}` ({})", h.display(), rootfs::io_reason(&e))),
    }
    let hv = dir.join("share/hip/version");
    match root.read_small_string(&hv) {
        Ok(text) => {
            if let Some(major) = parse_hip_version(&text) {
                return Some(Rocm {
                    version: major.to_string(),
                    major,
                    minor: None,
                    source: hv.display().to_string(),
                    install,
                });
            }
        }
        Err(e) => looked.push(format!("`{}` ({})", hv.display(), rootfs::io_reason(&e))),
    }
    let lib = dir.join("lib");
    let so = root.list(&lib).into_iter().filter_map(|n| n.into_string().ok()).find_map(|n| {
        let major: u32 = n.strip_prefix("libamdhip64.so.")?.split('.').next()?.parse().ok()?;
        Some((n, major))
    });
    match so {
        Some((name, major)) => Some(Rocm {
            version: major.to_string(),
            major,
            minor: None,
            source: lib.join(name).display().to_string(),
            install,
        }),
        None => {
            looked.push(format!("`{}` (no libamdhip64.so.N)", lib.join("libamdhip64.so.*").display()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_file_formats() {
        assert_eq!(parse_version_file("6.4.1-120\n"), Some(("6.4.1".into(), 6, 4)));
        assert_eq!(parse_version_file("7.0.0\n"), Some(("7.0.0".into(), 7, 0)));
        assert_eq!(parse_version_file("7.0.2.1-45"), Some(("7.0.2.1".into(), 7, 0)));
        assert_eq!(parse_version_file("seven"), None);
        assert_eq!(parse_version_file(""), None);
        assert_eq!(parse_version_file("7..1"), None);
        // Fuzzing regression (fuzz/seeds/versions/regress-leading-zero): was read as 7.1.
        assert_eq!(parse_version_file("7.01-\n"), None);
        assert_eq!(parse_version_file("7.0.0-\n"), Some(("7.0.0".into(), 7, 0)));
    }

    #[test]
    fn header_and_hip() {
        let h = "#define ROCM_VERSION_MAJOR 7\n#define ROCM_VERSION_MINOR 13\n#define ROCM_VERSION_PATCH 0\n";
        assert_eq!(parse_version_header(h), Some(("7.13.0".into(), 7, 13)));
        assert_eq!(parse_hip_version("HIP_VERSION_MAJOR=7\nHIP_VERSION_MINOR=2\n"), Some(7));
    }
}
