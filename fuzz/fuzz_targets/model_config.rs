//! config.json model facts: never panic; traits only from what the JSON says.
#![no_main]
use infera_exec::facts::model::{self, ModelFacts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let facts = model::from_config("/models/m", std::path::Path::new("/models/m/config.json"), data);
    if let ModelFacts::Known(m) = facts {
        let v: serde_json::Value = serde_json::from_slice(data).expect("Known only from JSON");
        if m.multimodal {
            assert!(v.get("vision_config").is_some());
        }
        if m.mla {
            assert!(m.evidence.iter().any(|e| e.starts_with("MLA")));
        }
    }
});
