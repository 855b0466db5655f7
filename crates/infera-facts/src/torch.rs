//! torch's own record of its build, `torch/version.py`, read as module-level literal
//! assignments (never imported): `__version__`, `hip`, `cuda`, and since torch 2.14 `rocm`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use infera_core::pyassign::{self, Value};
use infera_core::rootfs::Root;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Torch {
    pub version: Option<String>,
    /// The HIP version it was built against (`7.2.26015-fc0010cf6a`, `7.15.26333`).
    pub hip: Option<String>,
    pub cuda: Option<String>,
    /// The ROCm release (torch 2.14's `rocm` field), when the file has one.
    pub rocm: Option<String>,
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub path: PathBuf,
}

impl Torch {
    /// The HIP ABI major of the `hip` field.
    pub fn hip_major(&self) -> Option<u32> {
        self.hip.as_deref()?.split(['.', '-']).next()?.parse().ok()
    }

    /// The text of the ROCm release it records (for `rocm::parse_release` to read): the
    /// `rocm` field, else a `+rocmX.Y[.Z]` local tag (`+rocmsdk20251116` carries a date, not
    /// a release; source builds such as `2.13.0a0+git733fca1` carry none).
    pub fn release(&self) -> Option<String> {
        if let Some(r) = &self.rocm {
            return Some(r.clone());
        }
        let tag = self.version.as_deref()?.split_once("+rocm")?.1;
        if tag.starts_with("sdk") {
            return None;
        }
        // `7.2.0.git1234` / `7.2.0.lw.git7e1940d4` / `10.1.0a20260822`: the release part.
        let end = tag.find(".git").or_else(|| tag.find(".lw")).unwrap_or(tag.len());
        Some(tag[..end].to_string())
    }

    /// A CUDA build: `cuda` set and `hip` None.
    pub fn is_cuda(&self) -> bool {
        self.cuda.is_some() && self.hip.is_none()
    }
}

/// Parse `version.py` (plain and annotated forms; only module-level literals count).
pub fn parse(text: &str, path: &Path) -> Torch {
    let a = pyassign::assignments(text);
    let get = |k: &str| match a.get(k) {
        Some(Value::Str(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    Torch {
        version: get("__version__"),
        hip: get("hip"),
        cuda: get("cuda"),
        rocm: get("rocm"),
        path: path.to_path_buf(),
    }
}

pub fn detect(root: &Root, site_dirs: &[PathBuf], findings: &mut Vec<crate::finding::Finding>) -> Option<Torch> {
    site_dirs.iter().find_map(|d| {
        let p = d.join("torch/version.py");
        match root.read_small_string(&p) {
            Ok(text) => Some(parse(&text, &p)),
            Err(e) => {
                let without = "torch's record of its build is not used";
                crate::finding::unreadable(findings, "torch-version-unreadable", &p, &e, without);
                None
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_annotated_and_torch_2_14() {
        let p = Path::new("/x/torch/version.py");
        let old = "__version__ = '2.9.1+rocm7.2.0.git1234'\ndebug = False\ncuda = None\nhip = '7.2.26015-fc0010cf6a'\n";
        let t = parse(old, p);
        assert_eq!((t.hip_major(), t.release().as_deref()), (Some(7), Some("7.2.0")));
        assert!(!t.is_cuda());
        let new = "from typing import Optional\n__version__ = '2.9.1+rocm7.1.0'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n";
        let t = parse(new, p);
        assert_eq!((t.hip.as_deref(), t.release().as_deref()), (None, Some("7.1.0")));
        // torch 2.14 on TheRock ROCm 10: HIP 7.15, release 10.0.0.
        let rock = "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n__version__ = '2.13.0+rocm10.0.0'\ndebug = False\ncuda: Optional[str] = None\ngit_version = 'abc'\nhip: Optional[str] = '7.15.26333'\nrocm: Optional[str] = '10.0.0'\nxpu: Optional[str] = None\n";
        let t = parse(rock, p);
        assert_eq!((t.hip_major(), t.release().as_deref()), (Some(7), Some("10.0.0")));
        // Source-built torch: no +rocm tag, the release is not in this file.
        let src = "__version__ = '2.13.0a0+git733fca1'\ncuda = None\nhip = '7.2.26015-fc0010cf6a'\n";
        assert_eq!(parse(src, p).release(), None);
        assert_eq!(parse("__version__ = '2.9.1+rocmsdk20251116'\nhip = None\n", p).release(), None);
        assert_eq!(
            parse("__version__ = '2.11.0+rocm10.1.0a20260822'\n", p).release().as_deref(),
            Some("10.1.0a20260822")
        );
        let cuda = "__version__ = '2.9.0+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n";
        assert!(parse(cuda, p).is_cuda());
        // A docstring or a dead branch does not decide the build.
        let tricky = "\"\"\"\nhip = '6.0.0'\n\"\"\"\n__version__ = '2.9.0+cu128'\ncuda = '12.8'\nif False:\n    hip = '7.0.0'\nhip = None\n";
        let t = parse(tricky, p);
        assert!(t.is_cuda(), "{t:?}");
    }
}
