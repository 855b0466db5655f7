//! Manifest parsing and validation: never panics; what validates survives a JSON round
//! trip unchanged and still validates.
#![no_main]
use infera_overlay::manifest::{self, Manifest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(m) = manifest::parse(text, "rocm7-py312") {
        let json = serde_json::to_string(&m).expect("a parsed manifest serialises");
        let back: Manifest = serde_json::from_str(&json).expect("and reads back");
        assert_eq!(back, m);
        manifest::validate(&back, "rocm7-py312").expect("still valid");
        let _ = (m.python_minor(), m.hip_major());
        // A code-loading variable that validates names only paths inside the tree.
        for (k, v) in &m.env {
            if manifest::CODE_PATH_ENV.iter().any(|(n, _)| n == k) {
                for p in manifest::code_paths(k, v) {
                    let rest = p.strip_prefix("{tree}").expect("inside the tree by its spelling");
                    assert!(rest.is_empty() || rest.starts_with('/'), "{p}");
                    assert!(!rest.split('/').any(|c| c == ".."), "{p}");
                }
            }
            assert!(!manifest::CODE_NAME_ENV.iter().any(|(n, _)| n == k) || v == "0", "{k}={v}");
        }
    }
});
