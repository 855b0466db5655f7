//! The known-bad engine configurations as data (`manifests/rules.toml`): their types and the
//! shipped table, which `build.rs` parses, validates (known engines, traits, unique codes) and
//! compiles in, so no start parses it. `plan::rules` applies them; `--allow` names them.

#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule {
    pub code: &'static str,
    /// The engines it applies to (empty: every engine).
    pub engines: &'static [&'static str],
    pub when: When,
    pub message: &'static str,
    pub fix: &'static str,
}

/// Every condition given must hold (see `manifests/rules.toml`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct When {
    pub model: Option<&'static [Trait]>,
    pub kv_cache_dtype: Option<&'static [&'static str]>,
    pub load_format: Option<&'static [&'static str]>,
    pub max_seqs_over: Option<u64>,
    pub prefix_caching: Option<OnOff>,
    pub chunked_prefill: Option<OnOff>,
    pub tp_over_gpus: Option<bool>,
    pub tp_divides_heads: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trait {
    Mla,
    Hybrid,
    #[expect(dead_code, reason = "in manifests/rules.toml's vocabulary; no rule names it today")]
    Multimodal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnOff {
    On,
    Off,
}

include!(concat!(env!("OUT_DIR"), "/rules.rs"));

/// The rules shipped in the binary.
pub(crate) fn shipped() -> &'static [Rule] {
    SHIPPED
}

/// The codes of the shipped rules (what `--allow` accepts).
pub(crate) fn codes() -> Vec<&'static str> {
    SHIPPED.iter().map(|r| r.code).collect()
}

#[cfg(test)]
mod tests {
    /// A rule limited to an engine the table does not have would never fire.
    #[test]
    fn every_rule_names_engines_of_the_table() {
        for r in super::shipped() {
            for e in r.engines {
                assert!(infera_facts::engines::Engine::names().contains(e), "rule {}: unknown engine {e}", r.code);
            }
        }
    }

    #[test]
    fn shipped_rules_compiled_in() {
        let rules = super::shipped();
        assert!(rules.len() >= 6);
        let mut codes = super::codes();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), rules.len(), "rule codes are unique");
        let mla = rules.iter().find(|r| r.code == "kv-fp8-mla").unwrap();
        assert_eq!(mla.when.model, Some(&[super::Trait::Mla][..]));
        assert!(mla.when.kv_cache_dtype.is_some_and(|k| k.contains(&"fp8_e4m3")));
    }
}
