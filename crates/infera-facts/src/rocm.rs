//! The image's ROCm userspace as two facts that must never be confused: the **HIP ABI
//! major** its runtime binds (the N of `libamdhip64.so.N`, what the
//! overlay's compiled code links against, so what a tree is chosen by) and the **ROCm
//! release** (`.info/version`, what hipFile needs 7.2+ of). ROCm 10.0.0 ships HIP 7.15: still
//! `libamdhip64.so.7`. Each comes with its evidence; sources of the same fact that disagree
//! are a finding, sources of the two facts never are.
//!
//! Where they are read: `$ROCM_PATH`, `$ROCM_HOME`, `$HIP_PATH`, `/opt/rocm` (symlinks
//! resolved inside the root), and TheRock's pip install — `_rocm_sdk_devel` / `_rocm_sdk_core`
//! in the interpreter's site directories, whose version record sits in `_rocm_sdk_core` even
//! when ROCM_PATH names `_rocm_sdk_devel` — then torch's `version.py`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use infera_exec_derive::Refuse;
use serde::Serialize;

use super::torch::Torch;
use crate::finding::Finding;
use infera_core::names::parse_hip_soname;
use infera_core::rootfs::{self, Root};

/// The HIP ABI the runtime binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hip {
    pub major: u32,
    /// `7.15.26333`, when the source says more than the major.
    pub version: Option<String>,
    /// The file it came from (container path).
    pub source: String,
}

/// The ROCm release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Release {
    /// `7.2.0`, `10.0.0`, `10.1.0a20260909` (a build suffix `-38` dropped).
    pub version: String,
    pub major: u32,
    pub minor: u32,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rocm {
    pub hip: Hip,
    pub release: Option<Release>,
    /// The install directory the evidence came from, resolved inside the root.
    pub install: Option<PathBuf>,
}

impl Rocm {
    /// `HIP ABI 7 (from …), ROCm 7.2.0 (from …)`, for messages.
    pub fn describe(&self) -> String {
        let hip = format!("HIP ABI {} (from {})", self.hip.major, self.hip.source);
        match &self.release {
            Some(r) => format!("{hip}, ROCm {} (from {})", r.version, r.source),
            None => format!("{hip}, ROCm release not recorded"),
        }
    }
}

// JSON: DESIGN's stable `version` / `major` are the release's; `hip` is the ABI.
impl Serialize for Rocm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Rocm", 6)?;
        st.serialize_field("version", &self.release.as_ref().map(|r| &r.version))?;
        st.serialize_field("major", &self.release.as_ref().map(|r| r.major))?;
        st.serialize_field("source", &self.release.as_ref().map(|r| &r.source))?;
        st.serialize_field("hip", &self.hip)?;
        st.serialize_field("release", &self.release)?;
        st.serialize_field("install", &self.install.as_ref().map(|p| crate::ser::os_json(p.as_os_str())))?;
        st.end()
    }
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
    /// `found`: the image's ROCm install all the same (a refusal's dry run shows every fact).
    Cuda { torch: String, cuda: String, path: PathBuf, found: Option<Box<Rocm>> },
    #[error("no HIP runtime found in the image{} (looked at {})", release.as_ref().map(|r| format!(" (ROCm {} from {})", r.version, r.source)).unwrap_or_default(), looked.join(", "))]
    #[refuse(
        code = "rocm-missing",
        exit = Unsupported,
        hint = "use a ROCm engine image, or set ROCM_PATH to the image's ROCm install; outside the image (a workstation, CI), judge it from its archive (--image ARCHIVE) or its unpacked root (--root DIR)"
    )]
    NotFound { release: Option<Release>, looked: Vec<String> },
}

/// `X.Y[.Z[.P]]`, then a pre-release (`a20260909`, `rc2`, `.dev0`) and a local tag (`+g…`)
/// as nightly SDKs write them; a `-BUILD` suffix (`6.4.1-120`) is dropped. No leading zeros
/// (`7.01` is not a ROCm version: fuzzing found it read as 7.1). → (version, major, minor).
pub fn parse_release(text: &str) -> Option<(String, u32, u32)> {
    // A byte-order mark (a file written by a Windows editor) is not part of the version.
    let line = text.trim_start_matches('\u{feff}').lines().next()?.trim();
    let ver = line.split('-').next()?;
    let numeric_end = ver.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(ver.len());
    let (nums, rest) = ver.split_at(numeric_end);
    // A dot may lead a pre-release or dev suffix (`7.0.dev0`), never a local label (`7.0.+1`).
    let nums = if rest.is_empty() || rest.starts_with('+') { nums } else { nums.strip_suffix('.').unwrap_or(nums) };
    let parts: Vec<&str> = nums.split('.').collect();
    // Digits that fit a u32 (fuzzing found a 60-digit patch accepted here and not comparable
    // as a version), no leading zeros.
    let bad = |p: &&str| {
        p.parse::<u32>().is_err() || !p.bytes().all(|b| b.is_ascii_digit()) || (p.len() > 1 && p.starts_with('0'))
    };
    if parts.len() < 2 || parts.len() > 4 || parts.iter().any(bad) {
        return None;
    }
    if !rest.is_empty() && !valid_suffix(rest) {
        return None;
    }
    Some((ver.to_string(), parts[0].parse().ok()?, parts[1].parse().ok()?))
}

/// `a20260909`, `rc2`, `b1`, `.dev0`, `dev0+g1234`, `+local`.
fn valid_suffix(s: &str) -> bool {
    let (pre, local) = match s.split_once('+') {
        // PEP 440: a local label is alphanumeric segments joined by dots (fuzzing found
        // `7.7.0+.0` accepted here and refused as a version).
        Some((pre, local))
            if local.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric())) =>
        {
            (pre, local)
        }
        Some(_) => return false,
        None => (s, ""),
    };
    let pre = pre.trim_start_matches('.');
    if pre.is_empty() {
        return !local.is_empty();
    }
    ["rc", "a", "b", "dev"].iter().any(|k| {
        pre.strip_prefix(k).is_some_and(|n| {
            // A pre-release may end in `.devN`; a dev release has one dev segment only.
            let (n, dev) = n.split_once(".dev").filter(|_| *k != "dev").unwrap_or((n, "0"));
            n.parse::<u64>().is_ok() && n.bytes().all(|b| b.is_ascii_digit()) && dev.parse::<u64>().is_ok()
        })
    })
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

/// `HIP_VERSION_MAJOR=7` (and MINOR, PATCH) lines of share/hip/version → (major, version).
pub fn parse_hip_version(text: &str) -> Option<(u32, Option<String>)> {
    let get = |k: &str| text.lines().find_map(|l| l.trim().strip_prefix(k)?.trim().parse::<u32>().ok());
    let major = get("HIP_VERSION_MAJOR=")?;
    let version = match (get("HIP_VERSION_MINOR="), get("HIP_VERSION_PATCH=")) {
        (Some(mi), Some(pa)) => Some(format!("{major}.{mi}.{pa}")),
        (Some(mi), None) => Some(format!("{major}.{mi}")),
        _ => None,
    };
    Some((major, version))
}

/// Where to look, in order: the variables, /opt/rocm, TheRock's directories in the
/// interpreter's site directories.
pub struct Where<'a> {
    pub rocm_path: Option<&'a OsString>,
    pub rocm_home: Option<&'a OsString>,
    pub hip_path: Option<&'a OsString>,
    pub site_dirs: &'a [PathBuf],
}

const THEROCK: [&str; 2] = ["_rocm_sdk_devel", "_rocm_sdk_core"];

fn candidates(w: &Where) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for v in [w.rocm_path, w.rocm_home, w.hip_path].into_iter().flatten() {
        let p = PathBuf::from(rootfs::os_to_string(v));
        if p.is_absolute() {
            // TheRock: the version record is in `_rocm_sdk_core` beside `_rocm_sdk_devel`.
            let sibling = p.file_name().is_some_and(|n| THEROCK.iter().any(|t| n == *t));
            let parent = p.parent().map(Path::to_path_buf);
            add(p);
            if let (true, Some(dir)) = (sibling, parent) {
                for t in THEROCK {
                    add(dir.join(t));
                }
            }
        }
    }
    add(PathBuf::from("/opt/rocm"));
    for site in w.site_dirs {
        for t in THEROCK {
            add(site.join(t));
        }
    }
    out
}

/// Evidence found in one install directory.
#[derive(Default)]
struct Found {
    releases: Vec<Release>,
    hips: Vec<Hip>,
}

pub fn detect(root: &Root, w: &Where, torch: Option<&Torch>, findings: &mut Vec<Finding>) -> Result<Rocm, RocmError> {
    let mut looked = Vec::new();
    let mut found = Found::default();
    let mut install = None;
    let mut seen: Vec<PathBuf> = Vec::new();
    for dir in candidates(w) {
        match root.resolve(&dir) {
            Ok(r) if root.is_dir(&r) && !seen.contains(&r) => {
                seen.push(r.clone());
                let before = (found.releases.len(), found.hips.len());
                from_install(root, &dir, &mut found, &mut looked, findings);
                if install.is_none() && (found.releases.len(), found.hips.len()) != before {
                    install = Some(r);
                }
                // TheRock splits one install over `_rocm_sdk_devel` and `_rocm_sdk_core`:
                // go on until both facts have a source.
                if !found.releases.is_empty() && !found.hips.is_empty() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) => looked.push(format!("`{}` ({})", dir.display(), rootfs::io_reason(&e))),
        }
    }
    if let Some(t) = torch.filter(|t| t.is_cuda()) {
        let found = found.hips.first().map(|hip| {
            Box::new(Rocm { hip: hip.clone(), release: found.releases.first().cloned(), install: install.clone() })
        });
        return Err(RocmError::Cuda {
            torch: t.version.clone().unwrap_or_else(|| "?".into()),
            cuda: t.cuda.clone().unwrap_or_default(),
            path: t.path.clone(),
            found,
        });
    }
    if let Some(t) = torch {
        let source = t.path.display().to_string();
        if let Some(major) = t.hip_major() {
            found.hips.push(Hip { major, version: t.hip.clone(), source: source.clone() });
        }
        if let Some((version, major, minor)) = t.release().as_deref().and_then(parse_release) {
            found.releases.push(Release { version, major, minor, source });
        }
    } else {
        looked.push("torch/version.py (no torch in the image's site directories)".into());
    }
    let release = first_agreeing(
        &found.releases,
        |r| (r.major, r.minor),
        findings,
        "rocm-release-conflict",
        |r| format!("ROCm {} from `{}`", r.version, r.source),
    );
    let Some(hip) = first_agreeing(
        &found.hips,
        |h| h.major,
        findings,
        "hip-evidence-conflict",
        |h| format!("HIP ABI {} from `{}`", h.major, h.source),
    ) else {
        if let Some(t) = torch {
            looked.push(format!("`{}` (no hip)", t.path.display()));
        }
        return Err(RocmError::NotFound { release, looked });
    };
    Ok(Rocm { hip, release, install })
}

/// The first piece of evidence; a finding when another source of the same fact disagrees.
fn first_agreeing<T: Clone, K: PartialEq>(
    all: &[T],
    key: impl Fn(&T) -> K,
    findings: &mut Vec<Finding>,
    code: &str,
    describe: impl Fn(&T) -> String,
) -> Option<T> {
    let first = all.first()?;
    let others: Vec<String> = all.iter().filter(|x| key(x) != key(first)).map(&describe).collect();
    if !others.is_empty() {
        findings.push(Finding::warn(code, format!("{} but {}; using the first", describe(first), others.join(", "))));
    }
    Some(first.clone())
}

fn from_install(root: &Root, dir: &Path, found: &mut Found, looked: &mut Vec<String>, findings: &mut Vec<Finding>) {
    let releases = found.releases.len();
    for rel in [".info/version", ".info/version-dev", "core/.info/version"] {
        let p = dir.join(rel);
        match root.read_small_string(&p) {
            Ok(text) => match parse_release(&text) {
                Some((version, major, minor)) => {
                    found.releases.push(Release { version, major, minor, source: p.display().to_string() });
                    break;
                }
                None => findings.push(Finding::warn(
                    "rocm-version-unreadable",
                    format!(
                        "`{}` does not hold a ROCm version (X.Y.Z[-build] or a pre-release such as 10.1.0a20260909); trying other sources",
                        p.display()
                    ),
                )),
            },
            Err(e) => {
                crate::finding::unreadable(findings, "rocm-version-unreadable", &p, &e, "trying other sources");
                looked.push(format!("`{}` ({})", p.display(), rootfs::io_reason(&e)));
            }
        }
    }
    if found.releases.len() == releases {
        let h = dir.join("include/rocm-core/rocm_version.h");
        match root.read_small_string(&h) {
            Ok(text) => {
                if let Some((version, major, minor)) = parse_version_header(&text) {
                    found.releases.push(Release { version, major, minor, source: h.display().to_string() });
                }
            }
            Err(e) => crate::finding::unreadable(findings, "rocm-version-unreadable", &h, &e, "trying other sources"),
        }
    }
    // HIP: the runtime's soname (what DT_NEEDED binds), found through share/hip/version's
    // major with one lookup, else by listing lib/.
    let lib = dir.join("lib");
    let hv = dir.join("share/hip/version");
    let from_file = match root.read_small_string(&hv) {
        Ok(t) => parse_hip_version(&t),
        Err(e) => {
            crate::finding::unreadable(
                findings,
                "hip-version-unreadable",
                &hv,
                &e,
                "the HIP ABI is taken from other sources",
            );
            None
        }
    };
    let soname = from_file
        .as_ref()
        .map(|(major, _)| format!("libamdhip64.so.{major}"))
        .filter(|n| root.metadata(&lib.join(n)).is_ok())
        .and_then(|n| parse_hip_soname(&n).map(|(m, v)| (n, m, v)))
        .or_else(|| {
            let mut names: Vec<(String, u32, Option<String>)> = root
                .list(&lib)
                .into_iter()
                .filter_map(|n| n.into_string().ok())
                .filter_map(|n| parse_hip_soname(&n).map(|(m, v)| (n, m, v)))
                .collect();
            names.sort();
            names.into_iter().next()
        });
    match soname {
        Some((name, major, version)) => {
            // The soname's own version is the HIP build when the file carries it; else the file's.
            let version = version.or_else(|| from_file.as_ref().and_then(|(m, v)| v.clone().filter(|_| *m == major)));
            found.hips.push(Hip { major, version, source: lib.join(name).display().to_string() });
        }
        None => looked.push(format!("`{}` (no libamdhip64.so.N)", lib.join("libamdhip64.so.*").display())),
    }
    if let Some((major, version)) = from_file {
        found.hips.push(Hip { major, version, source: hv.display().to_string() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_formats() {
        assert_eq!(parse_release("6.4.1-120\n"), Some(("6.4.1".into(), 6, 4)));
        assert_eq!(parse_release("7.0.0\n"), Some(("7.0.0".into(), 7, 0)));
        assert_eq!(parse_release("7.0.0+local.1"), Some(("7.0.0+local.1".into(), 7, 0)));
        for bad in ["7.7.0+.0", "7.7.0+", "7.7.0+a..b", "7.7.0+a.", "70.0.+7", "770.0.dev001070.dev00"] {
            assert_eq!(parse_release(bad), None, "{bad}");
        }
        assert_eq!(parse_release("7.0.2.1-45"), Some(("7.0.2.1".into(), 7, 0)));
        assert_eq!(parse_release("10.1.0a20260909\n"), Some(("10.1.0a20260909".into(), 10, 1)));
        assert_eq!(parse_release("7.15.0a20260716"), Some(("7.15.0a20260716".into(), 7, 15)));
        assert_eq!(parse_release("10.0.0rc2"), Some(("10.0.0rc2".into(), 10, 0)));
        assert_eq!(parse_release("7.10.0.dev0+f689a8e"), Some(("7.10.0.dev0+f689a8e".into(), 7, 10)));
        assert_eq!(parse_release("seven"), None);
        assert_eq!(parse_release(""), None);
        assert_eq!(parse_release("7..1"), None);
        assert_eq!(parse_release("7.0.0zz"), None);
        // Fuzzing regression (fuzz/seeds/versions/regress-leading-zero): was read as 7.1.
        assert_eq!(parse_release("7.01-\n"), None);
        assert_eq!(parse_release("7.0.0-\n"), Some(("7.0.0".into(), 7, 0)));
        // Fuzzing regression (fuzz/seeds/versions/regress-huge-patch): not a comparable version.
        assert_eq!(parse_release("7.1.1001010001111111111111111111111111111111111111111111111110101"), None);
        assert_eq!(parse_release("10.0.0a99999999999999999999999"), None);
    }

    #[test]
    fn header_hip_and_soname() {
        let h = "#define ROCM_VERSION_MAJOR   10\n#define ROCM_VERSION_MINOR   0\n#define ROCM_VERSION_PATCH   0\n#define ROCM_BUILD_INFO\t\"10.0.0.0-9999-abc\"\n";
        assert_eq!(parse_version_header(h), Some(("10.0.0".into(), 10, 0)));
        assert_eq!(
            parse_hip_version(
                "HIP_VERSION_MAJOR=7\nHIP_VERSION_MINOR=15\nHIP_VERSION_PATCH=26333\nHIP_VERSION_GITHASH=x\n"
            ),
            Some((7, Some("7.15.26333".into())))
        );
        assert_eq!(parse_hip_soname("libamdhip64.so.7"), Some((7, None)));
        assert_eq!(parse_hip_soname("libamdhip64.so.7.2.26015"), Some((7, Some("7.2.26015".into()))));
        assert_eq!(parse_hip_soname("libamdhip64.so"), None);
        for stray in [
            "libamdhip64.so.6.bak",
            "libamdhip64.so.7~",
            "libamdhip64.so.7.",
            "libamdhip64.so.7..1",
            "libamdhip64.so.x",
        ] {
            assert_eq!(parse_hip_soname(stray), None, "{stray}");
        }
    }
}
