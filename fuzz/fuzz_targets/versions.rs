//! Version files and torch's version.py: never panic; what parses is consistent.
#![no_main]
use infera_exec::facts::{rocm, torch};
use infera_exec::version::{Spec, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Some((v, major, minor)) = rocm::parse_version_file(text) {
        assert!(v.starts_with(&format!("{major}.{minor}")), "{v} vs {major}.{minor}");
        assert!(v.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    }
    if let Some((v, major, minor)) = rocm::parse_version_header(text) {
        assert!(v.starts_with(&format!("{major}.{minor}.")));
    }
    let _ = rocm::parse_hip_version(text);
    let t = torch::parse(text, std::path::Path::new("/x/torch/version.py"));
    let _ = (t.rocm(), t.is_cuda());
    if let Some(v) = Version::parse(text) {
        assert_eq!(v.cmp(&v), std::cmp::Ordering::Equal);
    }
    if let Ok(s) = Spec::parse(text) {
        let _ = Version::parse("0.11.0").map(|v| s.contains(&v));
    }
});
