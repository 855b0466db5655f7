//! config.json model facts: never panic; traits only from what the file says (in the JSON
//! dialect Python's `json` reads, so serde_json alone may refuse a file that is Known).
#![no_main]
use infera_facts::model::{self, ModelFacts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let facts = model::from_config("/models/m", std::path::Path::new("/models/m/config.json"), data);
    if let ModelFacts::Known(m) = facts {
        if m.multimodal {
            assert!(m.evidence.iter().any(|e| e.starts_with("multimodal")));
        }
        if m.mla {
            assert!(m.evidence.iter().any(|e| e.starts_with("MLA")));
        }
    }
});
