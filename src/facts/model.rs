//! Model facts from the model's `config.json`: a local directory, or a repo id resolved
//! in the Hugging Face cache (`refs/main` → snapshot). Read only; never downloaded.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::rootfs::{self, Root};

/// Model types whose attention is MLA when `kv_lora_rank` is set (FACTS.md).
const MLA_TYPES: &[&str] =
    &["deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k3", "kimi_linear", "deepseek_mtp", "kimi_vl"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Model {
    /// What the args named (`/models/x` or `org/name`).
    pub reference: String,
    /// The config.json read (container path).
    pub config: PathBuf,
    pub model_type: Option<String>,
    pub mla: bool,
    pub multimodal: bool,
    pub hybrid: bool,
    pub attention_heads: Option<u64>,
    /// `num_attention_heads` present but not a positive count (`-8`, `0`, `1e30`, `"64"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heads_unusable: Option<String>,
    /// Why each trait was recognised, for messages.
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum ModelFacts {
    Known(Model),
    /// An absolute path that does not exist in the container.
    Missing {
        reference: String,
        path: PathBuf,
    },
    /// A path relative to the working directory (`./m`, `../m`).
    Relative {
        reference: String,
    },
    /// The config could not be read or understood: rules that need it are skipped.
    Unreadable {
        reference: String,
        #[serde(serialize_with = "ser_display")]
        reason: ModelProblem,
    },
}

/// Why a model's config.json gives no facts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelProblem {
    #[error("`{reference}` is neither an absolute path nor a Hugging Face repo id")]
    NotAReference { reference: String },
    #[error("`{}` does not hold a revision", refs.display())]
    NoRevision { refs: PathBuf },
    #[error("`{repo}` is not in the Hugging Face cache (`{}`)", cache.display())]
    NotCached { repo: String, cache: PathBuf },
    #[error("`{}` is missing and `{}` holds several snapshots", refs.display(), snapshots.display())]
    SeveralSnapshots { refs: PathBuf, snapshots: PathBuf },
    #[error("`{}`: {reason}", config.display())]
    Io { config: PathBuf, reason: String },
    #[error("`{}` is not a JSON object", config.display())]
    NotObject { config: PathBuf },
    #[error("`{}` is not JSON: {reason}", config.display())]
    NotJson { config: PathBuf, reason: String },
}

fn ser_display<S: serde::Serializer>(v: &ModelProblem, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

pub struct HfEnv<'a> {
    pub hub_cache: Option<&'a str>,
    pub hf_home: Option<&'a str>,
    pub home: Option<&'a str>,
}

impl HfEnv<'_> {
    /// `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
    pub fn hub(&self) -> PathBuf {
        if let Some(c) = self.hub_cache.filter(|c| !c.is_empty()) {
            return PathBuf::from(c);
        }
        if let Some(h) = self.hf_home.filter(|h| !h.is_empty()) {
            return Path::new(h).join("hub");
        }
        Path::new(self.home.filter(|h| !h.is_empty()).unwrap_or("/root")).join(".cache/huggingface/hub")
    }
}

/// `reference` as the engine gets it: bytes (a path need not be UTF-8), shown lossily.
pub fn detect(root: &Root, reference: &std::ffi::OsStr, hf: &HfEnv) -> ModelFacts {
    use std::os::unix::ffi::OsStrExt;
    let shown = reference.to_string_lossy().into_owned();
    let unreadable = |reason: ModelProblem| ModelFacts::Unreadable { reference: shown.clone(), reason };
    let b = reference.as_bytes();
    if b == b"." || b == b".." || b.starts_with(b"./") || b.starts_with(b"../") {
        return ModelFacts::Relative { reference: shown };
    }
    let dir = if b.starts_with(b"/") {
        let p = PathBuf::from(reference);
        if root.resolve(&p).is_err() {
            return ModelFacts::Missing { reference: shown, path: p };
        }
        p
    } else {
        // A repo id is text; bytes that are not UTF-8 cannot be one.
        match reference.to_str().map(|r| resolve_hf(root, r, hf)) {
            Some(Ok(d)) => d,
            Some(Err(reason)) => return unreadable(reason),
            None => return unreadable(ModelProblem::NotAReference { reference: shown.clone() }),
        }
    };
    let config = dir.join("config.json");
    match root.read_small(&config) {
        Ok(bytes) => from_config(&shown, &config, &bytes),
        Err(e) => unreadable(ModelProblem::Io { config, reason: rootfs::io_reason(&e) }),
    }
}

/// Model facts from the bytes of a config.json (read from `config`).
pub fn from_config(reference: &str, config: &Path, bytes: &[u8]) -> ModelFacts {
    let unreadable = |reason: ModelProblem| ModelFacts::Unreadable { reference: reference.to_string(), reason };
    let config = config.to_path_buf();
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => ModelFacts::Known(classify(reference, config, &v)),
        Ok(_) => unreadable(ModelProblem::NotObject { config }),
        Err(e) => unreadable(ModelProblem::NotJson { config, reason: e.to_string() }),
    }
}

/// `org/name` → `<hub>/models--org--name/snapshots/<refs/main>`.
fn resolve_hf(root: &Root, repo: &str, hf: &HfEnv) -> Result<PathBuf, ModelProblem> {
    let valid = repo.split('/').count() <= 2
        && !repo.is_empty()
        && repo.split('/').all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\0'));
    if !valid {
        return Err(ModelProblem::NotAReference { reference: repo.to_string() });
    }
    let hub = hf.hub();
    let cache = hub.join(format!("models--{}", repo.replace('/', "--")));
    let refs = cache.join("refs/main");
    match root.read_small_string(&refs) {
        Ok(rev) => {
            let rev = rev.trim();
            if rev.is_empty() || rev.contains('/') || rev.contains("..") {
                return Err(ModelProblem::NoRevision { refs });
            }
            Ok(cache.join("snapshots").join(rev))
        }
        Err(_) => {
            // No refs/main (a pinned download): use the only snapshot if there is one.
            let snaps = root.list(&cache.join("snapshots"));
            match snaps.as_slice() {
                [one] => Ok(cache.join("snapshots").join(one)),
                [] => Err(ModelProblem::NotCached { repo: repo.to_string(), cache }),
                _ => Err(ModelProblem::SeveralSnapshots { refs, snapshots: cache.join("snapshots") }),
            }
        }
    }
}

fn classify(reference: &str, config: PathBuf, top: &Value) -> Model {
    // Multimodal configs nest the language model in `text_config`; look there first.
    let text = top.get("text_config").filter(|t| t.is_object());
    let field = |k: &str| -> Option<&Value> {
        text.and_then(|t| t.get(k)).filter(|v| !v.is_null()).or_else(|| top.get(k).filter(|v| !v.is_null()))
    };
    let types: Vec<String> = [Some(top), text]
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("model_type").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut evidence = Vec::new();
    let kv_lora = field("kv_lora_rank");
    let mla_type = types.iter().find(|t| MLA_TYPES.contains(&t.as_str()));
    let mla = match (mla_type, kv_lora) {
        (Some(t), Some(r)) => {
            evidence.push(format!("MLA: model_type {t} with kv_lora_rank {r}"));
            true
        }
        _ => false,
    };
    let multimodal = top.get("vision_config").is_some_and(|v| !v.is_null());
    if multimodal {
        evidence.push("multimodal: vision_config present".into());
    }
    let hybrid_key =
        ["layers_block_type", "hybrid_override_pattern", "linear_attn_config"].into_iter().find(|k| field(k).is_some());
    if let Some(k) = hybrid_key {
        evidence.push(format!("hybrid: {k} present"));
    }
    Model {
        reference: reference.to_string(),
        config,
        model_type: types.first().cloned(),
        mla,
        multimodal,
        hybrid: hybrid_key.is_some(),
        attention_heads: field("num_attention_heads").and_then(Value::as_u64).filter(|h| *h > 0),
        heads_unusable: field("num_attention_heads")
            .filter(|v| v.as_u64().is_none_or(|h| h == 0))
            .map(|v| v.to_string()),
        evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kimi_k3_like() {
        let j: Value = serde_json::from_str(
            r#"{"model_type":"kimi_k3","vision_config":{},"text_config":{"model_type":"kimi_linear","kv_lora_rank":512,
                "num_attention_heads":64,"linear_attn_config":{"kda_layers":[1]}}}"#,
        )
        .unwrap();
        let m = classify("x", PathBuf::from("/x/config.json"), &j);
        assert!(m.mla && m.multimodal && m.hybrid);
        assert_eq!(m.attention_heads, Some(64));
    }

    #[test]
    fn plain_and_null_rank() {
        let j: Value =
            serde_json::from_str(r#"{"model_type":"deepseek_v3","kv_lora_rank":null,"num_attention_heads":128}"#)
                .unwrap();
        let m = classify("x", PathBuf::from("/c"), &j);
        assert!(!m.mla && !m.multimodal && !m.hybrid);
        let j: Value = serde_json::from_str(r#"{"model_type":"llama","num_attention_heads":32}"#).unwrap();
        assert!(!classify("x", PathBuf::from("/c"), &j).mla);
    }
}
