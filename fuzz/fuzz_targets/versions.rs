//! Version files, torch's version.py and Python assignments: never panic; what parses is
//! consistent.
#![no_main]
use infera_core::{names, pyassign};
use infera_facts::{rocm, torch};
use infera_core::version::{self, Spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Some((v, major, minor)) = rocm::parse_release(text) {
        // The numbers are the version's own, and the version orders as a version.
        assert!(v.starts_with(&format!("{major}.{minor}")), "{v} vs {major}.{minor}");
        // (setuptools-scm's untagged stand-in, 0.1.devN, parses but is no release: `parse` says None.)
        let parsed = version::parse(&v).or_else(|| version::untagged(&v).and(Some(version::Version::new([0, 1]))));
        assert!(parsed.is_some(), "{v} is a release but not a version");
    }
    if let Some((v, major, minor)) = rocm::parse_version_header(text) {
        assert!(v.starts_with(&format!("{major}.{minor}.")));
    }
    if let Some((major, Some(v))) = rocm::parse_hip_version(text) {
        assert!(v.starts_with(&format!("{major}.")));
    }
    if let Some((major, Some(v))) = names::parse_hip_soname(text) {
        assert!(v.starts_with(&major.to_string()));
    }
    let a = pyassign::assignments(text);
    for k in a.keys() {
        assert!(pyassign::is_identifier(k), "{k:?}");
    }
    let t = torch::parse(text, std::path::Path::new("/x/torch/version.py"));
    let _ = (t.hip_major(), t.is_cuda());
    // The release text torch records, read as a ROCm release (or not).
    let _ = t.release().as_deref().and_then(rocm::parse_release);
    if let Some(v) = version::parse(text) {
        assert_eq!(v.cmp(&v), std::cmp::Ordering::Equal);
    }
    if let Ok(s) = Spec::parse(text) {
        let _ = version::parse("0.11.0").map(|v| s.contains(&v));
    }
});
