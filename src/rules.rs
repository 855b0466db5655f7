//! The known-bad engine configurations, as data (`manifests/rules.toml`): their types and
//! the shipped table. `plan::args` applies them.

use serde::Deserialize;

use crate::engines::Engine;

pub const RULES_TOML: &str = include_str!("../manifests/rules.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub rule: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub code: String,
    #[serde(default)]
    pub engines: Vec<String>,
    pub when: When,
    pub message: String,
    pub fix: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    pub model: Option<Vec<Trait>>,
    pub kv_cache_dtype: Option<Vec<String>>,
    pub load_format: Option<Vec<String>>,
    pub max_seqs_over: Option<u64>,
    pub prefix_caching: Option<OnOff>,
    pub chunked_prefill: Option<OnOff>,
    pub tp_over_gpus: Option<bool>,
    pub tp_divides_heads: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trait {
    Mla,
    Hybrid,
    Multimodal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

/// The rules shipped in the binary, parsed once (validated by a test, so this cannot fail
/// at run time; if it did, the error says so).
pub fn shipped() -> Result<&'static [Rule], &'static str> {
    static RULES: std::sync::OnceLock<Result<Vec<Rule>, String>> = std::sync::OnceLock::new();
    let parsed = RULES.get_or_init(|| {
        let f: RuleFile = toml::from_str(RULES_TOML).map_err(|e| e.to_string())?;
        for r in &f.rule {
            if let Some(e) = r.engines.iter().find(|e| Engine::from_name(e).is_none()) {
                return Err(format!("rule {}: unknown engine {e}", r.code));
            }
        }
        Ok(f.rule)
    });
    parsed.as_deref().map_err(String::as_str)
}

/// The codes of the shipped rules (what `--allow` accepts).
pub fn codes() -> Vec<&'static str> {
    shipped().unwrap_or_default().iter().map(|r| r.code.as_str()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn shipped_rules_parse() {
        let rules = super::shipped().unwrap();
        assert!(rules.len() >= 6);
        let mut codes: Vec<&str> = rules.iter().map(|r| r.code.as_str()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), rules.len(), "rule codes are unique");
    }
}
