//! torch's own record of its build, `torch/version.py`, read as text (never imported).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::rootfs::Root;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Torch {
    pub version: Option<String>,
    pub hip: Option<String>,
    pub cuda: Option<String>,
    pub path: PathBuf,
}

impl Torch {
    /// ROCm major and minor from `hip = '7.2.26015-...'`, else the `+rocm7.2.0` tag.
    pub fn rocm(&self) -> Option<(u32, Option<u32>)> {
        if let Some(h) = &self.hip {
            let mut it = h.split(['.', '-']);
            let major = it.next()?.parse().ok()?;
            return Some((major, it.next().and_then(|m| m.parse().ok())));
        }
        let v = self.version.as_deref()?;
        let tag = v.split_once("+rocm")?.1;
        let digits: String = tag.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        // `+rocmsdk20251116` carries a date, not a version.
        if digits.is_empty() || tag.starts_with("sdk") {
            return None;
        }
        let mut it = digits.split('.');
        let major = it.next()?.parse().ok()?;
        Some((major, it.next().and_then(|m| m.parse().ok())))
    }

    /// A CUDA build: `cuda` set and `hip` None.
    pub fn is_cuda(&self) -> bool {
        self.cuda.is_some() && self.hip.is_none()
    }
}

/// Parse `version.py`. Both `hip = '...'` and annotated `hip: Optional[str] = '...'` forms.
pub fn parse(text: &str, path: &Path) -> Torch {
    let mut t = Torch { version: None, hip: None, cuda: None, path: path.to_path_buf() };
    for line in text.lines() {
        let Some((lhs, rhs)) = line.split_once('=') else {
            continue;
        };
        let name = lhs.split(':').next().unwrap_or("").trim();
        let value = parse_value(rhs.trim());
        match name {
            "__version__" => t.version = value,
            "hip" => t.hip = value,
            "cuda" => t.cuda = value,
            _ => {}
        }
    }
    t
}

/// `'7.2.0'` / `"7.2.0"` → Some; `None` or anything else → None.
fn parse_value(s: &str) -> Option<String> {
    let s = s.split('#').next().unwrap_or("").trim();
    let q = s.chars().next()?;
    if q != '\'' && q != '"' {
        return None;
    }
    let inner = &s[1..];
    let end = inner.find(q)?;
    let v = &inner[..end];
    (!v.is_empty()).then(|| v.to_string())
}

pub fn detect(root: &Root, site_dirs: &[PathBuf]) -> Option<Torch> {
    site_dirs.iter().find_map(|d| {
        let p = d.join("torch/version.py");
        let text = root.read_small_string(&p).ok()?;
        Some(parse(&text, &p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_annotated() {
        let p = Path::new("/x/torch/version.py");
        let old = "__version__ = '2.9.1+rocm7.2.0.git1234'\ndebug = False\ncuda = None\nhip = '7.2.26015-fc0010cf6a'\n";
        let t = parse(old, p);
        assert_eq!(t.rocm(), Some((7, Some(2))));
        assert!(!t.is_cuda());
        let new = "from typing import Optional\n__version__ = '2.9.1+rocm7.1.0'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n";
        let t = parse(new, p);
        assert_eq!(t.hip, None);
        assert_eq!(t.rocm(), Some((7, Some(1))));
        let sdk = "__version__ = '2.9.1+rocmsdk20251116'\nhip = None\ncuda = None\n";
        assert_eq!(parse(sdk, p).rocm(), None);
        let cuda = "__version__ = '2.9.0+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n";
        let t = parse(cuda, p);
        assert!(t.is_cuda());
        assert_eq!(t.rocm(), None);
    }
}
