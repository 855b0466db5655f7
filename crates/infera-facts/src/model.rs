//! Model facts from the model's `config.json`: a local directory, or a repo id resolved
//! in the Hugging Face cache (`refs/main` → snapshot). Read only; never downloaded.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use infera_core::rootfs::{self, Root};

/// Model types whose attention is MLA when `kv_lora_rank` is set (their modelling code in
/// transformers and vLLM).
const MLA_TYPES: &[&str] =
    &["deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k3", "kimi_linear", "deepseek_mtp", "kimi_vl"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Model {
    /// What the args named (`/models/x` or `org/name`).
    pub reference: String,
    /// The config.json read (container path).
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub config: PathBuf,
    pub model_type: Option<String>,
    pub mla: bool,
    pub multimodal: bool,
    pub hybrid: bool,
    pub attention_heads: Option<u64>,
    /// `num_attention_heads` present but not a positive count (`-8`, `0`, `1e30`, `"64"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heads_unusable: Option<String>,
    /// `model_type` present but not a name (a list, an object, a number), as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_type_unusable: Option<String>,
    /// Why each trait was recognised, for messages.
    pub evidence: Vec<String>,
    /// `quantization_config.quant_method`: the checkpoint is stored quantized.
    pub quantization: Option<String>,
    /// `torch_dtype` (or `dtype`): what the weights are stored as.
    pub dtype: Option<String>,
    /// The checkpoint's size, when the directory says it.
    pub weights: Option<Weights>,
    /// The filesystem the model directory is on (root `/` only: the pod's mounts).
    pub filesystem: Option<super::storage::Filesystem>,
}

/// The bytes the weights load: what the checkpoint index says, else the files' sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Weights {
    pub bytes: u64,
    /// `metadata.total_size of model.safetensors.index.json`, `the size of 3 *.safetensors files`.
    pub source: String,
    /// The safetensors files in the order the engines' loaders read them: the index's
    /// `weight_map` files (else every `*.safetensors`), in natural name order (vLLM's
    /// `sorted(hf_weights_files, key=_natural_sort_key)`), each resolved as the container sees
    /// it (links followed inside the root and its volumes: a Hugging Face cache's snapshot
    /// links to its blobs, never a file of this host outside them), as host paths. What a
    /// read-ahead reads; only regular files.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
    /// Why some or all of the files are not there (the index lists too many, a name is not a
    /// regular file in the image): said where the read-ahead is planned.
    #[serde(skip)]
    pub skipped: Option<String>,
}

/// The most files a checkpoint has (Kimi-K3's 1.4 TB is a few hundred): an index listing
/// more is not read for its files (its `total_size` still counts).
pub const MAX_FILES: usize = 65_536;

/// The distinct files of an index's `weight_map` (its values), up to [`MAX_FILES`]: the map
/// itself (a tensor name per entry, possibly hundreds of thousands) is never held.
#[derive(Default)]
struct Shards {
    names: std::collections::HashSet<String>,
    more: bool,
}

impl<'de> serde::Deserialize<'de> for Shards {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Shards;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of tensor names to files")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Shards, A::Error> {
                let mut s = Shards::default();
                while let Some((_, file)) = m.next_entry::<serde::de::IgnoredAny, String>()? {
                    if s.names.len() < MAX_FILES || s.names.contains(&file) {
                        s.names.insert(file);
                    } else {
                        s.more = true;
                    }
                }
                Ok(s)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum ModelFacts {
    Known(Box<Model>),
    /// An absolute path that does not exist in the container.
    Missing {
        reference: String,
        #[serde(serialize_with = "crate::ser::ser_path")]
        path: PathBuf,
        /// What the deepest directory on its way that exists holds nearest to it (`/models/kimi-k3`
        /// for `/models/Kimi-K3`): the path meant, most likely.
        #[serde(serialize_with = "crate::ser::ser_opt_path", skip_serializing_if = "Option::is_none")]
        nearest: Option<PathBuf>,
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
    /// Nested deeper than Python's `json` reads (it raises RecursionError: the engine cannot
    /// load it either).
    #[error("`{}` nests arrays or objects {depth} deep, past what Python's json reads ({MAX_DEPTH})", config.display())]
    TooDeep { config: PathBuf, depth: usize },
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

/// The path nearest to `missing` that exists: under the deepest directory on its way that
/// exists, the name that differs only in case, else the closest spelling.
/// What the nearest-name search looks at: a path no longer than Linux's PATH_MAX, a name no
/// longer than NAME_MAX (longer ones cannot exist, and are not compared), and entries of a
/// similar length until the similarity's work (the product of the two names' lengths, summed)
/// reaches this: about 20,000 names of 50 bytes, some 50 ms.
const NEAREST_WORK: usize = 64 << 20;

fn nearest(root: &Root, missing: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if missing.as_os_str().len() > 4096 {
        return None;
    }
    let mut dir = missing.parent()?;
    let mut name = missing.file_name()?;
    while root.resolve(dir).is_err() {
        name = dir.file_name()?;
        dir = dir.parent()?;
    }
    let name = name.to_str().filter(|n| n.len() <= 255)?;
    let listed = root.list(dir);
    // Only names a similarity could pick (their lengths within half of this one's, or 3), or
    // that begin with it (a name cut short).
    let near = |n: &&str| n.len().abs_diff(name.len()) <= (name.len() / 2).max(3) || n.starts_with(name);
    let mut work = 0usize;
    let names: Vec<&str> = listed
        .iter()
        .filter(|n| n.as_bytes().len() <= 255)
        .filter_map(|n| n.to_str())
        .filter(near)
        .take_while(|n| {
            work += n.len() * name.len();
            work <= NEAREST_WORK
        })
        .collect();
    let found = names.iter().find(|n| n.eq_ignore_ascii_case(name)).copied();
    found.or_else(|| crate::suggest::closest(name, names.iter().copied())).map(|n| dir.join(n))
}

/// `reference` as the engine gets it: bytes (a path need not be UTF-8), shown lossily.
pub fn detect(root: &Root, reference: &std::ffi::OsStr, hf: &HfEnv, probe: bool) -> ModelFacts {
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
            let nearest = nearest(root, &p);
            return ModelFacts::Missing { reference: shown, path: p, nearest };
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
    match root.read_file(&config, READ_LIMIT) {
        Ok(bytes) => match from_config(&shown, &config, &bytes) {
            ModelFacts::Known(mut m) => {
                m.weights = weights(root, &dir);
                m.filesystem = filesystem(root, &dir, m.weights.as_ref().filter(|_| probe));
                ModelFacts::Known(m)
            }
            other => other,
        },
        Err(e) => unreadable(ModelProblem::Io { config, reason: rootfs::io_reason(&e) }),
    }
}

/// The mount the model directory (resolved) is on, from this process's mountinfo, with the
/// block device under it; where the device's facts do not say what it is and `probe` gives
/// the weights, a timed read of their first file.
fn filesystem(root: &Root, dir: &Path, probe: Option<&Weights>) -> Option<super::storage::Filesystem> {
    use super::blockdev::Medium;
    if !root.is_host_root() {
        return None;
    }
    let resolved = std::fs::canonicalize(dir).ok()?;
    let mountinfo = root.read_small_string(Path::new("/proc/self/mountinfo")).ok()?;
    let mut fs = super::storage::filesystem_of(&mountinfo, &resolved)?;
    let dev = |p: &Path| std::fs::metadata(p).ok().map(|m| std::os::unix::fs::MetadataExt::dev(&m));
    fs.shares_root = dev(&resolved).is_some_and(|d| Some(d) == dev(Path::new("/")));
    if !super::mounts::network_fs(&fs.fstype) {
        fs.device = super::blockdev::classify(root, &fs.majmin, &mountinfo);
        let read = |p: &Path| root.read_small_string(p).ok();
        fs.io_cap = fs.device.as_ref().and_then(|_| super::storage::io_cap(read, &[fs.majmin.as_str()]));
    }
    if fs.io_cap.is_none() && fs.device.as_ref().is_some_and(|d| d.medium == Medium::Unknown) {
        fs.probe = probe.and_then(|w| w.files.first()).and_then(|f| super::storage::probe(f));
    }
    Some(fs)
}

/// The checkpoint's size: an index's `metadata.total_size` (what transformers and the
/// engines write beside sharded weights), else the weight files' sizes.
fn weights(root: &Root, dir: &Path) -> Option<Weights> {
    #[derive(serde::Deserialize)]
    struct Index {
        metadata: Meta,
        #[serde(default)]
        weight_map: Shards,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        total_size: f64,
    }
    let index = ["model.safetensors.index.json", "pytorch_model.bin.index.json"].into_iter().find_map(|name| {
        let bytes = root.read_file(&dir.join(name), READ_LIMIT).ok()?;
        let i = serde_json::from_slice::<Index>(&bytes).ok()?;
        let total = i.metadata.total_size;
        (total.is_finite() && total > 0.0).then_some((name, total as u64, i.weight_map))
    });
    let mut skipped = None;
    let mut names: Vec<String> = match &index {
        Some((name, _, map)) if map.more => {
            skipped = Some(format!(
                "{name} lists more than {MAX_FILES} files, more than a checkpoint has: none is read ahead"
            ));
            Vec::new()
        }
        Some((_, _, map)) if !map.names.is_empty() => map.names.iter().cloned().collect(),
        _ => root.list(dir).into_iter().take(MAX_FILES).map(|n| n.to_string_lossy().into_owned()).collect(),
    };
    names.retain(|n| n.ends_with(".safetensors") && !n.contains('/'));
    names.sort_by_key(|a| natural_key(a));
    names.dedup();
    // Each resolved inside the root as the container sees it, and only a regular file.
    let mut files: Vec<(PathBuf, u64)> = Vec::with_capacity(names.len());
    let mut not_files = Vec::new();
    for n in &names {
        match root.stat(&dir.join(n)) {
            Ok((resolved, m)) if m.is_file() => files.push((root.host(&resolved), m.size())),
            Ok((_, m)) => not_files.push(format!("`{n}` is {}", m.kind())),
            Err(e) => not_files.push(format!("`{n}`: {}", rootfs::io_reason(&e))),
        }
    }
    if !not_files.is_empty() {
        let shown: Vec<String> = not_files.iter().take(3).cloned().collect();
        let more = not_files.len().saturating_sub(3);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        skipped.get_or_insert(format!("not read ahead: {}{more}", shown.join(", ")));
    }
    if let Some((name, bytes, _)) = index {
        let source = format!("metadata.total_size of {name}");
        return Some(Weights { bytes, source, files: files.into_iter().map(|(p, _)| p).collect(), skipped });
    }
    (!files.is_empty()).then(|| Weights {
        bytes: files.iter().map(|(_, b)| b).sum(),
        source: format!("the size of {} *.safetensors file{}", files.len(), if files.len() == 1 { "" } else { "s" }),
        files: files.into_iter().map(|(p, _)| p).collect(),
        skipped,
    })
}

/// vLLM's `_natural_sort_key`: runs of digits compared as numbers, the rest as text.
fn natural_key(name: &str) -> Vec<(u8, u128, String)> {
    let mut key = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let digits = rest.chars().next().is_some_and(|c| c.is_ascii_digit());
        let end = rest.find(|c: char| c.is_ascii_digit() != digits).unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        key.push(match run.parse::<u128>() {
            Ok(n) if digits => (0, n, String::new()),
            _ => (1, 0, run.to_string()),
        });
        rest = tail;
    }
    key
}

/// A config.json is a few KB (one with a long list of quantized layers, a few MB); a larger
/// file is not read whole (it grew past the bound while read: said so too).
pub const READ_LIMIT: u64 = 64 << 20;

/// How deep Python's `json` reads arrays and objects nested (CPython 3.12: 1496, 3.10: 994,
/// measured with `json.loads`; its C scanner raises RecursionError past that). The launcher
/// reads the deepest of them, so a config the engine reads gives its facts.
pub const MAX_DEPTH: usize = 1500;

/// Model facts from the bytes of a config.json (read from `config`), read as Python's `json`
/// reads it: the dialect pass first, then serde_json (its own nesting bound of 128 lifted:
/// [`MAX_DEPTH`] bounds it, counted by the dialect pass). Later duplicates win, as in Python.
pub fn from_config(reference: &str, config: &Path, bytes: &[u8]) -> ModelFacts {
    use serde::Deserialize;
    let unreadable = |reason: ModelProblem| ModelFacts::Unreadable { reference: reference.to_string(), reason };
    let (text, depth) = python_dialect(bytes);
    if depth > MAX_DEPTH {
        return unreadable(ModelProblem::TooDeep { config: config.to_path_buf(), depth });
    }
    let mut de = serde_json::Deserializer::from_slice(&text);
    de.disable_recursion_limit();
    match Value::deserialize(&mut de).and_then(|v| de.end().map(|()| v)) {
        Ok(Value::Object(top)) => ModelFacts::Known(Box::new(classify(reference, config.to_path_buf(), &top))),
        Ok(_) => unreadable(ModelProblem::NotObject { config: config.to_path_buf() }),
        Err(e) => unreadable(ModelProblem::NotJson { config: config.to_path_buf(), reason: e.to_string() }),
    }
}

/// Marks a value Python's `json` reads and serde_json cannot keep as written (`NaN`,
/// `Infinity`, `-Infinity`, and numbers other than 64-bit integers): it is carried as a
/// string of this prefix and the literal, and shown as the literal.
const PY_LITERAL: char = '\0';

/// config.json in the dialect Python's `json` reads (transformers and the engines read it
/// so), and how deep it nests: `NaN`, `Infinity`, `-Infinity` and lone UTF-16 surrogate
/// escapes are accepted there and refused by serde_json, which has no option for them, so
/// they are rewritten first — the specials, and numbers other than 64-bit integers (kept as
/// written), into marked strings (`PY_LITERAL`), a lone surrogate into U+FFFD — and
/// everything else is left for serde_json to read or refuse as Python would.
fn python_dialect(b: &[u8]) -> (std::borrow::Cow<'_, [u8]>, usize) {
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut copied, mut depth, mut deepest) = (0, 0, 0usize, 0usize);
    let replace = |out: &mut Option<Vec<u8>>, copied: &mut usize, from: usize, to: usize, with: &[u8]| {
        let o = out.get_or_insert_with(|| Vec::with_capacity(b.len() + 16));
        o.extend_from_slice(&b[*copied..from]);
        o.extend_from_slice(with);
        *copied = to;
    };
    let hex4 = |at: usize| -> Option<u16> {
        let h = b.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let surrogate = |u: u16| (0xD800..0xE000).contains(&u);
    while i < b.len() {
        match b[i] {
            b'"' => {
                // A string: find its end, rewriting lone surrogate escapes.
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] != b'\\' {
                        i += 1;
                        continue;
                    }
                    let Some(u) = (b.get(i + 1) == Some(&b'u')).then(|| hex4(i + 2)).flatten() else {
                        i += 2;
                        continue;
                    };
                    let low = |at: usize| {
                        b.get(at..at + 2) == Some(b"\\u") && hex4(at + 2).is_some_and(|l| (0xDC00..0xE000).contains(&l))
                    };
                    if (0xD800..0xDC00).contains(&u) && low(i + 6) {
                        i += 12;
                    } else if surrogate(u) {
                        replace(&mut out, &mut copied, i, i + 6, b"\\ufffd");
                        i += 6;
                    } else {
                        i += 6;
                    }
                }
                i += 1;
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            c if c == b'-' || c.is_ascii_alphanumeric() => {
                let end = (i..b.len())
                    .find(|&j| !(b[j].is_ascii_alphanumeric() || b"+-.".contains(&b[j])))
                    .unwrap_or(b.len());
                let token = std::str::from_utf8(&b[i..end]).unwrap_or_default();
                // A number that is not a 64-bit integer is kept as written (an f64 would
                // show `1e300` as 300 digits, and 2^64 altered).
                let exact = token.parse::<i64>().is_ok() || token.parse::<u64>().is_ok();
                if matches!(token, "NaN" | "Infinity" | "-Infinity") || (json_number(token) && !exact) {
                    let marked = serde_json::to_string(&format!("{PY_LITERAL}{token}")).unwrap_or_default();
                    replace(&mut out, &mut copied, i, end, marked.as_bytes());
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    let text = match out {
        Some(mut o) => {
            o.extend_from_slice(&b[copied..]);
            std::borrow::Cow::Owned(o)
        }
        None => std::borrow::Cow::Borrowed(b),
    };
    (text, deepest)
}

/// JSON's number grammar, which Python's `json` reads too: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`.
fn json_number(t: &str) -> bool {
    let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let t = t.strip_prefix('-').unwrap_or(t);
    let int = digits(t);
    if int == 0 || (int > 1 && t.starts_with('0')) {
        return false;
    }
    let mut rest = &t[int..];
    if let Some(f) = rest.strip_prefix('.') {
        let n = digits(f);
        if n == 0 {
            return false;
        }
        rest = &f[n..];
    }
    if let Some(e) = rest.strip_prefix(['e', 'E']) {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        let n = digits(e);
        return n > 0 && n == e.len();
    }
    rest.is_empty()
}

/// A value as the user wrote it: a Python-only literal as its literal, else as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if s.starts_with(PY_LITERAL) => s[PY_LITERAL.len_utf8()..].to_string(),
        other => other.to_string(),
    }
}

/// The keys of a level (the top, or `text_config`) the rules read.
const LEVEL_KEYS: [&str; 6] = [
    "model_type",
    "kv_lora_rank",
    "num_attention_heads",
    "layers_block_type",
    "hybrid_override_pattern",
    "linear_attn_config",
];

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

fn classify(reference: &str, config: PathBuf, top: &serde_json::Map<String, Value>) -> Model {
    // Multimodal configs nest the language model in `text_config`; look there first, where
    // a key is set and not null.
    let text = top.get("text_config").and_then(Value::as_object);
    let levels = || text.into_iter().chain(std::iter::once(top));
    let field = |key: &str| levels().find_map(|l| l.get(key).filter(|v| !v.is_null()));
    let types: Vec<&str> =
        [Some(top), text].into_iter().flatten().filter_map(|l| l.get("model_type")?.as_str()).collect();
    let mut evidence = Vec::new();
    let kv_lora = field("kv_lora_rank");
    let mla = match (types.iter().find(|t| MLA_TYPES.contains(t)), kv_lora) {
        (Some(t), Some(r)) => {
            evidence.push(format!("MLA: model_type {t} with kv_lora_rank {}", shown(r)));
            true
        }
        _ => false,
    };
    let multimodal = top.get("vision_config").is_some_and(|v| !v.is_null());
    if multimodal {
        evidence.push("multimodal: vision_config present".into());
    }
    let hybrid_key = LEVEL_KEYS[3..].iter().find(|k| levels().any(|l| l.get(**k).is_some_and(|v| !v.is_null())));
    if let Some(k) = hybrid_key {
        evidence.push(format!("hybrid: {k} present"));
    }
    let heads = field("num_attention_heads");
    let quantization = field("quantization_config")
        .map(|q| q.get("quant_method").and_then(Value::as_str).unwrap_or("unnamed").to_string());
    let dtype = field("torch_dtype").or_else(|| field("dtype")).and_then(Value::as_str).map(str::to_string);
    Model {
        reference: reference.to_string(),
        config,
        model_type: types.first().map(|t| t.to_string()),
        mla,
        multimodal,
        hybrid: hybrid_key.is_some(),
        attention_heads: heads.and_then(Value::as_u64).filter(|h| *h > 0),
        heads_unusable: heads.filter(|v| v.as_u64().is_none_or(|h| h == 0)).map(shown),
        model_type_unusable: [Some(top), text]
            .into_iter()
            .flatten()
            .filter_map(|l| l.get("model_type"))
            .find(|v| !v.is_string() && !v.is_null())
            .map(shown),
        evidence,
        quantization,
        dtype,
        weights: None,
        filesystem: None,
    }
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
        assert_eq!(known(br#"{"num_attention_heads":[64]}"#).heads_unusable.as_deref(), Some("[64]"));
        // A model_type that is not a name is said as it is written.
        let m = known(br#"{"model_type":["deepseek_v3"],"kv_lora_rank":512}"#);
        assert_eq!((m.model_type_unusable.as_deref(), m.mla), (Some(r#"["deepseek_v3"]"#), false));
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

    /// Read as Python's `json` reads it: NaN, Infinity, numbers beyond f64 and lone
    /// surrogates are values there, so the MLA rule still fires; what Python refuses
    /// (`-Inf`, `1.e5`, `01`, trailing commas) stays refused.
    #[test]
    fn python_dialect() {
        let known = |j: &str| match from_config("x", Path::new("/c"), j.as_bytes()) {
            ModelFacts::Known(m) => m,
            other => panic!("{j}: {other:?}"),
        };
        let m =
            known(r#"{"model_type":"deepseek_v3","kv_lora_rank":NaN,"num_attention_heads":Infinity,"x":-Infinity}"#);
        assert!(m.mla, "{m:?}");
        assert_eq!(m.evidence[0], "MLA: model_type deepseek_v3 with kv_lora_rank NaN");
        assert_eq!(m.heads_unusable.as_deref(), Some("Infinity"));
        let m = known(
            r#"{"model_type":"kimi_k2","kv_lora_rank":512,"num_attention_heads":1e400,"n":"\ud800 \udc00 \ud83d\ude00"}"#,
        );
        assert!(m.mla);
        assert_eq!(m.heads_unusable.as_deref(), Some("1e400"));
        assert_eq!(known(r#"{"num_attention_heads":-1E+999}"#).heads_unusable.as_deref(), Some("-1E+999"));
        assert_eq!(known(r#"{"model_type":"a\udfffb"}"#).model_type.as_deref(), Some("a\u{fffd}b"));
        // Strings that merely spell them are strings.
        assert_eq!(known(r#"{"model_type":"NaN 1e400"}"#).model_type.as_deref(), Some("NaN 1e400"));
        for bad in
            [r#"{"a":-Inf}"#, r#"{"a":1.e400}"#, r#"{"a":01}"#, r#"{"a":nan}"#, r#"{"a":1,}"#, r#"{"a":infinity}"#]
        {
            assert!(
                matches!(from_config("x", Path::new("/c"), bad.as_bytes()), ModelFacts::Unreadable { .. }),
                "{bad}"
            );
        }
        // Numbers as written, whatever their size.
        assert_eq!(
            known(r#"{"num_attention_heads":18446744073709551616}"#).heads_unusable.as_deref(),
            Some("18446744073709551616")
        );
        assert_eq!(known(r#"{"num_attention_heads":1e300}"#).heads_unusable.as_deref(), Some("1e300"));
    }

    /// Nesting as deep as Python's `json` reads (a 500-deep field the rules never look at)
    /// does not hide the fields they do; past it, a finding naming the file, never a panic.
    #[test]
    fn nesting_as_python_reads_it() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let j = format!(r#"{{"x":{},"model_type":"deepseek_v3","kv_lora_rank":512}}"#, nested(500));
        let ModelFacts::Known(m) = from_config("x", Path::new("/c"), j.as_bytes()) else { panic!() };
        assert!(m.mla);
        // The deepest Python reads. serde_json takes ~0.35 KiB of stack per level in the
        // release build (~0.5 MiB here, inside std's 2 MiB thread stacks), ~1.6 KiB in a
        // debug build: this test's thread gets the 8 MiB of a main thread.
        let j = format!(r#"{{"x":{},"model_type":"deepseek_v3","kv_lora_rank":512}}"#, nested(MAX_DEPTH - 1));
        let read = std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || matches!(from_config("x", Path::new("/c"), j.as_bytes()), ModelFacts::Known(m) if m.mla))
            .unwrap();
        assert!(read.join().unwrap());
        let deep = format!("{{\"a\":{}}}", nested(5000));
        match from_config("x", Path::new("/m/config.json"), deep.as_bytes()) {
            ModelFacts::Unreadable { reason, .. } => assert_eq!(
                reason.to_string(),
                "`/m/config.json` nests arrays or objects 5001 deep, past what Python's json reads (1500)"
            ),
            other => panic!("{other:?}"),
        }
        // Brackets inside strings do not count.
        let j = format!(r#"{{"s":"{}","model_type":"llama"}}"#, "[".repeat(5000));
        assert!(matches!(from_config("x", Path::new("/c"), j.as_bytes()), ModelFacts::Known(_)));
    }

    /// A 10 MiB config.json (a huge unused field before the ones the rules read) is read.
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
