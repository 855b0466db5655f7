//! Engine versions and the bounds a manifest puts on them: PEP 440, read by `pep440_rs`
//! (uv's), so a bound means what it means to pip: `<0.34` excludes `0.34.0rc1`, a bound
//! without a local tag ignores the installed one's (`0.11.0+rocm700` is in `<0.12`).

use std::str::FromStr;

pub use pep440_rs::Version;

/// A version as an installed package records it; None when it is not PEP 440.
pub fn parse(s: &str) -> Option<Version> {
    Version::from_str(s.trim()).ok()
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

    /// PEP 440 (and pip): an exclusive upper bound excludes that release's pre-releases.
    #[test]
    fn a_pre_release_of_the_bound_is_outside_it() {
        let spec = Spec::parse(">=0.9, <0.34").unwrap();
        assert!(!spec.contains(&parse("0.34.0rc1").unwrap()));
        assert!(!spec.contains(&parse("0.34.0.dev0+rocm720").unwrap()));
        assert!(spec.contains(&parse("0.33.1rc1").unwrap()));
    }
}
