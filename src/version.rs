//! Engine versions and the bounds a manifest puts on them (a PEP 440 subset:
//! release numbers, pre-releases and dev releases ordered before the release,
//! local tags such as `+rocm700` ignored).

use std::cmp::Ordering;

#[derive(Debug, Clone)]
pub struct Version {
    release: Vec<u64>,
    /// (stage, n): dev = 0, a = 1, b = 2, rc = 3; None = final release.
    pre: Option<(u8, u64)>,
    /// `.postN`: after the release it follows.
    post: Option<u64>,
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim().trim_start_matches('v');
        let s = s.split('+').next()?;
        let digits_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let rel = s[..digits_end].trim_end_matches('.');
        if rel.is_empty() {
            return None;
        }
        let release: Vec<u64> = rel.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let mut rest = &s[digits_end..];
        let (mut pre, mut post) = (None, None);
        // Segments in PEP 440 order: [pre][.postN][.devN], separators optional.
        while !rest.is_empty() {
            rest = rest.trim_start_matches(['.', '-', '_']);
            let (kind, tail) = [("post", 9u8), ("dev", 0), ("rc", 3), ("a", 1), ("b", 2)]
                .iter()
                .find_map(|(p, k)| rest.strip_prefix(p).map(|t| (*k, t)))?;
            let n: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
            let num = if n.is_empty() { 0 } else { n.parse().ok()? };
            rest = &tail[n.len()..];
            match kind {
                9 => post = Some(num),
                // A dev release of a post release still sorts after the release; keep it simple.
                0 if post.is_some() => {}
                k => pre = Some((k, num)),
            }
        }
        Some(Version { release, pre, post })
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.release.len().max(other.release.len());
        for i in 0..n {
            let a = self.release.get(i).copied().unwrap_or(0);
            let b = other.release.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        let pre = match (&self.pre, &other.pre) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => a.cmp(b),
        };
        pre.then(self.post.cmp(&other.post))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A version bound that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{clause}` needs an operator (>=, <, <=, >, ==, !=)")]
    NoOperator { clause: String },
    #[error("`{clause}` has no version number")]
    NoVersion { clause: String },
}

#[derive(Debug, Clone)]
pub struct Spec {
    clauses: Vec<(String, Version)>,
}

impl Spec {
    pub fn parse(s: &str) -> Result<Spec, SpecError> {
        let mut clauses = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let op = [">=", "<=", "==", "!=", ">", "<"]
                .iter()
                .find(|op| part.starts_with(**op))
                .ok_or_else(|| SpecError::NoOperator { clause: part.to_string() })?;
            let v =
                Version::parse(&part[op.len()..]).ok_or_else(|| SpecError::NoVersion { clause: part.to_string() })?;
            clauses.push((op.to_string(), v));
        }
        Ok(Spec { clauses })
    }

    pub fn contains(&self, v: &Version) -> bool {
        self.clauses.iter().all(|(op, b)| match op.as_str() {
            ">=" => v >= b,
            "<=" => v <= b,
            ">" => v > b,
            "<" => v < b,
            "==" => v == b,
            _ => v != b,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_and_bounds() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("0.11.0") > v("0.11.0rc2"));
        assert!(v("0.11.1.dev0+g1.rocm700") < v("0.11.1"));
        assert!(v("0.12") == v("0.12.0"));
        assert!(v("0.5.4.post2") > v("0.5.4"));
        assert!(v("0.5.4post1") < v("0.5.4.post2"));
        assert!(v("0.5.4.post2") < v("0.5.5rc1"));
        assert!(Spec::parse(">=0.4.9, <0.6").unwrap().contains(&v("0.5.4.post2")));
        assert!(v("1.0.0.dev3") < v("1.0.0a1"));
        let spec = Spec::parse(">=0.10, <0.12").unwrap();
        assert!(spec.contains(&v("0.11.0+rocm700")));
        assert!(!spec.contains(&v("0.12.0")));
        assert!(!spec.contains(&v("0.9.2")));
        assert!(Spec::parse("0.10").is_err());
        assert!(Version::parse("abc").is_none());
    }
}
