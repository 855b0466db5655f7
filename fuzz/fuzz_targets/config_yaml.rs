//! `--config` YAML as vLLM's parser reads it: never panics (depth, aliases, odd scalars); a
//! mapping's keys come out once each (a repeated key keeps its first place); the args made of
//! it start with a flag, and every entry that is not `false` or an empty list gives one.
#![no_main]
use infera_facts::engines::Engine;
use infera_facts::engine_config::{parse, to_args, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(entries) = parse(text) else { return };
    let mut keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "a key twice in {text:?}");
    let flagged = entries.iter().filter(|(_, v)| !matches!(v, Value::Bool(false)) && *v != Value::Seq(vec![])).count();
    for engine in [Engine::Vllm, Engine::Sglang] {
        let args = to_args(engine, &entries, &|_| false);
        assert!(args.first().is_none_or(|a| a.starts_with("--")), "{args:?}");
        assert!(args.iter().filter(|a| a.starts_with("--")).count() >= flagged, "{entries:?} gave {args:?}");
    }
});
