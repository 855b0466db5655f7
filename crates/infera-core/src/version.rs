//! Engine versions and the bounds a manifest puts on them: PEP 440, read by `pep440_rs`
//! (uv's), so a bound means what it means to pip: `<0.34` excludes `0.34.0rc1`, a bound
//! without a local tag ignores the installed one's (`0.11.0+rocm700` is in `<0.12`).

use std::str::FromStr;

pub use pep440_rs::Version;

/// A version as an installed package records it; None when it is not PEP 440, or when it
/// is setuptools-scm's stand-in for a release it could not find (`untagged`).
pub fn parse(s: &str) -> Option<Version> {
    Version::from_str(s.trim()).ok().filter(|v| !is_untagged(v))
}

/// setuptools-scm's version for a checkout without release tags (a shallow clone in an
/// image build): `0.1.dev<commits>+g<hash>` — not a release 0.1, an unknown one. vLLM's
/// version comes from setuptools-scm, and a running vLLM on MI355X reported `0.1.dev19253`
/// (the Infera snapshot's infera/common/engine_metrics.py). Returns the commit when named.
pub fn untagged(s: &str) -> Option<&str> {
    let v = Version::from_str(s.trim()).ok()?;
    is_untagged(&v).then(|| s.split_once("+g").map_or("", |(_, h)| h.split('.').next().unwrap_or("")))
}

fn is_untagged(v: &Version) -> bool {
    v.release() == [0, 1] && v.dev().is_some() && v.pre().is_none() && v.post().is_none()
}

/// A version bound that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{clause}` needs an operator (>=, <, <=, >, ==, !=, ~=)")]
    NoOperator { clause: String },
    #[error("`{clause}` is not a PEP 440 bound: {reason}")]
    Invalid { clause: String, reason: String },
}

#[derive(Debug, Clone)]
pub struct Spec(pep440_rs::VersionSpecifiers);

impl Spec {
    pub fn parse(s: &str) -> Result<Spec, SpecError> {
        // A bare version is the common slip (`0.10` for `>=0.10`): said as such, not as the
        // parser's generic "expected operator".
        if let Some(clause) = s.split(',').map(str::trim).find(|c| !c.starts_with(['<', '>', '=', '!', '~'])) {
            return Err(SpecError::NoOperator { clause: clause.to_string() });
        }
        pep440_rs::VersionSpecifiers::from_str(s)
            .map(Spec)
            .map_err(|e| SpecError::Invalid { clause: s.trim().to_string(), reason: e.to_string() })
    }

    pub fn contains(&self, v: &Version) -> bool {
        self.0.contains(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_and_bounds() {
        let v = |s| parse(s).unwrap();
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
        assert!(matches!(Spec::parse("0.10"), Err(SpecError::NoOperator { .. })));
        assert!(matches!(Spec::parse(">=abc"), Err(SpecError::Invalid { .. })));
        assert!(parse("abc").is_none());
    }

    #[test]
    fn setuptools_scms_untagged_version_is_unknown() {
        assert!(parse("0.1.dev19253+g5f76ae224").is_none());
        assert!(parse("0.1.dev19253").is_none());
        assert_eq!(untagged("0.1.dev19253+g5f76ae224.rocm700"), Some("5f76ae224"));
        assert_eq!(untagged("0.1.dev19253"), Some(""));
        assert_eq!(untagged("0.11.1.dev0+g1"), None);
        assert!(parse("0.1.0").is_some() && parse("0.1.1.dev3").is_some());
    }

    /// PEP 440 (and pip): an exclusive upper bound excludes that release's pre-releases.
    #[test]
    fn a_pre_release_of_the_bound_is_outside_it() {
        let spec = Spec::parse(">=0.9, <0.34").unwrap();
        assert!(!spec.contains(&parse("0.34.0rc1").unwrap()));
        assert!(!spec.contains(&parse("0.34.0.dev0+rocm720").unwrap()));
        assert!(spec.contains(&parse("0.33.1rc1").unwrap()));
    }
}
