//! Model facts from the model's `config.json`: a local directory, or a repo id resolved
//! in the Hugging Face cache (`refs/main` → snapshot). Read only; never downloaded.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::rootfs::{self, Root};

mod scan;

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
    match root.open_file(&config) {
        Ok((f, size)) => from_file(&shown, &config, &f, size),
        Err(e) => unreadable(ModelProblem::Io { config, reason: rootfs::io_reason(&e) }),
    }
}

/// Model facts from the bytes of a config.json (read from `config`).
pub fn from_config(reference: &str, config: &Path, bytes: &[u8]) -> ModelFacts {
    from_bytes(reference, config, bytes)
}

/// Model facts from a config.json file of `size` bytes (its descriptor's `fstat`): a
/// small one read, a larger one mapped rather than read. Only the fields the rules use are
/// kept (every other value is skipped as it is parsed), so a config of any size costs heap
/// in proportion to those fields, not to the file.
pub fn from_file(reference: &str, config: &Path, f: &std::fs::File, size: u64) -> ModelFacts {
    let io = |reason: String| ModelFacts::Unreadable {
        reference: reference.to_string(),
        reason: ModelProblem::Io { config: config.to_path_buf(), reason },
    };
    if size <= READ_LIMIT {
        // Read (one read where the file is the size its `fstat` gave): the map, its page
        // faults and its unmap cost more than the copy of a file this small.
        return match rootfs::read_sized(f, size, READ_LIMIT) {
            Ok(bytes) if bytes.len() as u64 <= READ_LIMIT => from_config(reference, config, &bytes),
            // Grown since its `fstat`: mapped as a large one.
            Ok(_) => from_map(reference, config, f, &io),
            Err(e) => io(rootfs::io_reason(&e)),
        };
    }
    from_map(reference, config, f, &io)
}

/// Configs up to this size are read, larger ones mapped.
const READ_LIMIT: u64 = 256 << 10;

fn from_map(reference: &str, config: &Path, f: &std::fs::File, io: &dyn Fn(String) -> ModelFacts) -> ModelFacts {
    // SAFETY: a read-only shared map of a regular file the launcher only reads; the
    // model volume is not rewritten while a pod starts. Populated: every page is read, and
    // one call maps them all (and lets the scanner's prefetches land) where touching them
    // would fault once per 16 pages.
    match unsafe { memmap2::MmapOptions::new().populate().map(f) } {
        Ok(map) => from_config(reference, config, &map),
        Err(e) => io(e.to_string()),
    }
}

fn from_bytes(reference: &str, config: &Path, bytes: &[u8]) -> ModelFacts {
    let unreadable = |reason: ModelProblem| ModelFacts::Unreadable { reference: reference.to_string(), reason };
    let config = config.to_path_buf();
    let top = match read_top(bytes) {
        Ok(t) => t,
        Err(e) if e.is_data() && e.to_string().starts_with(NOT_OBJECT) => {
            return unreadable(ModelProblem::NotObject { config })
        }
        Err(e) => return unreadable(ModelProblem::NotJson { config, reason: e.to_string() }),
    };
    ModelFacts::Known(classify(reference, config, &top))
}

/// The scanner's reading where it gives one (it does for configs as written), serde_json's
/// otherwise: the same answer either way, and every error serde_json's.
fn read_top(bytes: &[u8]) -> Result<Top, serde_json::Error> {
    match scan::top(bytes) {
        Some(t) => Ok(t),
        None => serde_top(bytes),
    }
}

fn serde_top(bytes: &[u8]) -> Result<Top, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    <Top as serde::Deserialize>::deserialize(&mut de).and_then(|t| de.end().map(|()| t))
}

const NOT_OBJECT: &str = "not a JSON object";

/// The fields of one level of a config (the top, or `text_config`) that the rules read.
/// Later duplicates win, as in Python's `json`.
#[derive(Debug, Default, Clone, PartialEq)]
struct Level {
    model_type: Option<String>,
    kv_lora_rank: Option<Value>,
    num_attention_heads: Option<Value>,
    /// `layers_block_type`, `hybrid_override_pattern`, `linear_attn_config` present non-null.
    hybrid: [bool; 3],
}

const HYBRID_KEYS: [&str; 3] = ["layers_block_type", "hybrid_override_pattern", "linear_attn_config"];

#[derive(Debug, Default, Clone, PartialEq)]
struct Top {
    level: Level,
    text: Option<Level>,
    vision: bool,
}

/// A scalar field: kept when it is small (a scalar), skipped otherwise (an object or array
/// where a number belongs is shown by its kind).
struct Small(Option<Value>);

impl<'de> serde::Deserialize<'de> for Small {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Small;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Small, E> {
                Ok(Small(None))
            }
            fn visit_none<E>(self) -> Result<Small, E> {
                Ok(Small(None))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Small, E> {
                Ok(Small(Some(Value::Bool(v))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Small, E> {
                Ok(Small(Some(Value::from(v))))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Small, E> {
                Ok(Small(Some(Value::from(v))))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Small, E> {
                Ok(Small(Some(Value::from(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Small, E> {
                Ok(Small(Some(Value::String(v.to_string()))))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Small, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Small(Some(Value::String("[...]".into()))))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Small, A::Error> {
                while a.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(Small(Some(Value::String("{...}".into()))))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a value is present and not null, skipping it whatever its size.
struct Present(bool);

impl<'de> serde::Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Small::deserialize(d).map(|s| Present(s.0.is_some()))
    }
}

/// `text_config`: a level when it is an object, nothing otherwise.
struct MaybeLevel(Option<Level>);

impl Level {
    /// One entry of a level's map.
    fn entry<'de, A: serde::de::MapAccess<'de>>(&mut self, key: &str, a: &mut A) -> Result<bool, A::Error> {
        match key {
            "model_type" => self.model_type = a.next_value::<Small>()?.0.and_then(|v| v.as_str().map(str::to_string)),
            "kv_lora_rank" => self.kv_lora_rank = a.next_value::<Small>()?.0,
            "num_attention_heads" => self.num_attention_heads = a.next_value::<Small>()?.0,
            k => match HYBRID_KEYS.iter().position(|h| *h == k) {
                Some(i) => self.hybrid[i] = a.next_value::<Present>()?.0,
                None => return Ok(false),
            },
        }
        Ok(true)
    }
}

impl<'de> serde::Deserialize<'de> for MaybeLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MaybeLevel;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<MaybeLevel, A::Error> {
                let mut l = Level::default();
                while let Some(k) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                    if !l.entry(&k, &mut a)? {
                        a.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(MaybeLevel(Some(l)))
            }
            fn visit_unit<E>(self) -> Result<MaybeLevel, E> {
                Ok(MaybeLevel(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<MaybeLevel, E> {
                Ok(MaybeLevel(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<MaybeLevel, E> {
                Ok(MaybeLevel(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<MaybeLevel, E> {
                Ok(MaybeLevel(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<MaybeLevel, E> {
                Ok(MaybeLevel(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<MaybeLevel, E> {
                Ok(MaybeLevel(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<MaybeLevel, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(MaybeLevel(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Top;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(NOT_OBJECT)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Top, A::Error> {
                let mut t = Top::default();
                while let Some(k) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*k {
                        "text_config" => t.text = a.next_value::<MaybeLevel>()?.0,
                        "vision_config" => t.vision = a.next_value::<Present>()?.0,
                        other => {
                            if !t.level.entry(other, &mut a)? {
                                a.next_value::<serde::de::IgnoredAny>()?;
                            }
                        }
                    }
                }
                Ok(t)
            }
        }
        // Anything but an object: "invalid type: ..., expected not a JSON object".
        d.deserialize_map(V).map_err(|e| {
            let s = e.to_string();
            if s.contains(&format!("expected {NOT_OBJECT}")) {
                serde::de::Error::custom(NOT_OBJECT)
            } else {
                e
            }
        })
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

fn classify(reference: &str, config: PathBuf, top: &Top) -> Model {
    // Multimodal configs nest the language model in `text_config`; look there first.
    let text = top.text.as_ref();
    let field = |get: fn(&Level) -> Option<&Value>| get_field(text, &top.level, get);
    let types: Vec<String> =
        [Some(&top.level), text].into_iter().flatten().filter_map(|l| l.model_type.clone()).collect();
    let mut evidence = Vec::new();
    let kv_lora = field(|l| l.kv_lora_rank.as_ref());
    let mla_type = types.iter().find(|t| MLA_TYPES.contains(&t.as_str()));
    let mla = match (mla_type, kv_lora) {
        (Some(t), Some(r)) => {
            evidence.push(format!("MLA: model_type {t} with kv_lora_rank {r}"));
            true
        }
        _ => false,
    };
    let multimodal = top.vision;
    if multimodal {
        evidence.push("multimodal: vision_config present".into());
    }
    let hybrid_key = (0..HYBRID_KEYS.len())
        .find(|i| text.is_some_and(|t| t.hybrid[*i]) || top.level.hybrid[*i])
        .map(|i| HYBRID_KEYS[i]);
    if let Some(k) = hybrid_key {
        evidence.push(format!("hybrid: {k} present"));
    }
    let heads = field(|l| l.num_attention_heads.as_ref());
    Model {
        reference: reference.to_string(),
        config,
        model_type: types.first().cloned(),
        mla,
        multimodal,
        hybrid: hybrid_key.is_some(),
        attention_heads: heads.and_then(Value::as_u64).filter(|h| *h > 0),
        heads_unusable: heads.filter(|v| v.as_u64().is_none_or(|h| h == 0)).map(|v| v.to_string()),
        evidence,
    }
}

/// A field of `text_config` when set there (not null), else of the top level.
fn get_field<'a>(text: Option<&'a Level>, top: &'a Level, get: fn(&Level) -> Option<&Value>) -> Option<&'a Value> {
    text.and_then(|t| get(t)).or_else(|| get(top))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kimi_k3_like() {
        let j = br#"{"model_type":"kimi_k3","vision_config":{},"text_config":{"model_type":"kimi_linear","kv_lora_rank":512,
                "num_attention_heads":64,"linear_attn_config":{"kda_layers":[1]}}}"#;
        let ModelFacts::Known(m) = from_config("x", Path::new("/x/config.json"), j) else { panic!() };
        assert!(m.mla && m.multimodal && m.hybrid);
        assert_eq!(m.attention_heads, Some(64));
    }

    #[test]
    fn plain_and_null_rank() {
        let known = |j: &[u8]| match from_config("x", Path::new("/c"), j) {
            ModelFacts::Known(m) => m,
            other => panic!("{other:?}"),
        };
        let m = known(br#"{"model_type":"deepseek_v3","kv_lora_rank":null,"num_attention_heads":128}"#);
        assert!(!m.mla && !m.multimodal && !m.hybrid);
        assert!(!known(br#"{"model_type":"llama","num_attention_heads":32}"#).mla);
        // Later duplicates win, as in Python's json; null in text_config falls back to the top.
        let m = known(br#"{"model_type":"llama","model_type":"deepseek_v3","kv_lora_rank":512,"text_config":{"kv_lora_rank":null}}"#);
        assert!(m.mla, "{m:?}");
        // Odd types are said, not guessed.
        assert_eq!(known(br#"{"num_attention_heads":"64"}"#).heads_unusable.as_deref(), Some("\"64\""));
        assert_eq!(known(br#"{"num_attention_heads":[64]}"#).heads_unusable.as_deref(), Some("\"[...]\""));
    }

    #[test]
    fn not_an_object_or_not_json() {
        for (j, want) in
            [(&b"[1,2]"[..], "is not a JSON object"), (b"7", "is not a JSON object"), (b"{\"a\":", "is not JSON")]
        {
            match from_config("x", Path::new("/c"), j) {
                ModelFacts::Unreadable { reason, .. } => assert!(reason.to_string().contains(want), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
        // Trailing data is not JSON either.
        assert!(matches!(from_config("x", Path::new("/c"), b"{} {}"), ModelFacts::Unreadable { .. }));
    }

    /// Size alone never makes a config unreadable: a 10 MiB config.json (a huge unused
    /// field before the ones the rules read) is read as a stream.
    #[test]
    fn any_size() {
        let mut j = String::from(r#"{"quantization_config":{"ignored_layers":["#);
        while j.len() < 10 << 20 {
            j.push_str(r#""model.layers.0.self_attn.kv_a_proj_with_mqa","#);
        }
        j.push_str(r#""x"]},"model_type":"deepseek_v3","kv_lora_rank":512,"num_attention_heads":128}"#);
        let ModelFacts::Known(m) = from_config("x", Path::new("/c"), j.as_bytes()) else { panic!() };
        assert!(m.mla);
        assert_eq!(m.attention_heads, Some(128));
    }
}
