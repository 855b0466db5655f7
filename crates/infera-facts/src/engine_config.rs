//! The engine's `--config FILE.yaml`: both engines turn the YAML file's top-level mapping
//! into args placed *before* the command line's (vLLM's FlexibleArgumentParser
//! `load_config_file`, sglang's `ConfigArgumentMerger`), so the command line wins over the
//! file and the file over the defaults. The launcher reads the file the same way (PyYAML's
//! `safe_load`: YAML 1.1 booleans `yes`/`on`, `~` null, `0x`/`0o`/`_` and base-60 integers,
//! `<<` merge keys, a repeated key keeping its first place with its last value) and
//! reasons about the effective values, adding no default the file sets.
//!
//! The events come from saphyr-parser; they are composed here because no serde reader of
//! YAML keeps PyYAML's 1.1 resolution: serde-saphyr (on the same parser) resolves plain
//! scalars by YAML 1.2 rules (`1e3` a float, `0o17` an int, `1:30` a string, `.inf` not a
//! float) and hands a visitor typed values, never a scalar's text and style, so the
//! difference cannot be adapted at the edge (tried, 0.0.x).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde::Serialize;

use crate::engines::{ConfigFalse, Engine};
use infera_core::rootfs::{self, Root};

/// A YAML value as PyYAML's safe loader gives it to Python.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Null,
    Bool(bool),
    /// Python's `str()` of the int.
    Int(String),
    /// The text of a float (the launcher reasons about no float option).
    Float(String),
    Str(String),
    Seq(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    /// How many values this one is, itself and all it holds.
    fn size(&self) -> usize {
        match self {
            Value::Seq(items) => 1 + items.iter().map(Value::size).sum::<usize>(),
            Value::Map(pairs) => 1 + pairs.iter().map(|(_, v)| v.size()).sum::<usize>(),
            _ => 1,
        }
    }

    /// Python's `str(value)`, which both engines pass as the option's value.
    fn py_str(&self) -> String {
        match self {
            Value::Null => "None".into(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Int(s) | Value::Float(s) | Value::Str(s) => s.clone(),
            Value::Seq(_) | Value::Map(_) => self.json().to_string(),
        }
    }

    /// `json.dumps(value)` (the engines' rendering of a mapping), as a JSON value.
    fn json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(s) | Value::Float(s) => {
                serde_json::from_str::<J>(s).ok().filter(J::is_number).unwrap_or_else(|| J::String(s.clone()))
            }
            Value::Str(s) => J::String(s.clone()),
            Value::Seq(v) => J::Array(v.iter().map(Value::json).collect()),
            Value::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), v.json())).collect()),
        }
    }
}

/// What the launcher knows of a `--config` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum ConfigFacts {
    Known {
        path: PathBuf,
        entries: Vec<(String, Value)>,
    },
    /// An absolute path that is not in the container.
    Missing {
        path: PathBuf,
    },
    /// Not a `.yaml`/`.yml` name: both engines refuse it before reading.
    NotYaml {
        path: PathBuf,
    },
    Unreadable {
        path: PathBuf,
        reason: String,
    },
}

/// Read the config file named after `--config` (relative to the program's working directory).
pub fn detect(root: &Root, reference: &std::ffi::OsStr, chdir: Option<&Path>) -> ConfigFacts {
    let given = PathBuf::from(reference);
    let path = match (given.is_absolute(), chdir) {
        (true, _) => given,
        (false, Some(dir)) => dir.join(given),
        (false, None) => {
            return ConfigFacts::Unreadable {
                path: given,
                reason: "a relative path, and the program keeps the launcher's working directory".into(),
            }
        }
    };
    // As both engines test the name: `str.endswith((".yaml", ".yml"))`, case and all.
    let name = path.as_os_str().as_encoded_bytes();
    if !(name.ends_with(b".yaml") || name.ends_with(b".yml")) {
        return ConfigFacts::NotYaml { path };
    }
    if root.resolve(&path).is_err() {
        return ConfigFacts::Missing { path };
    }
    let text = match root.read_small_string(&path) {
        Ok(t) => t,
        Err(e) => return ConfigFacts::Unreadable { path, reason: rootfs::io_reason(&e) },
    };
    match parse(&text) {
        Ok(entries) => ConfigFacts::Known { path, entries },
        Err(reason) => ConfigFacts::Unreadable { path, reason },
    }
}

/// The top-level mapping of a YAML document (an empty document is an empty mapping).
pub fn parse(text: &str) -> Result<Vec<(String, Value)>, String> {
    let mut events = Vec::new();
    for ev in Parser::new_from_str(text) {
        let (ev, span) = ev.map_err(|e| format!("not YAML: {e}"))?;
        events.push((ev, span.start.line()));
    }
    let mut r = Reader { it: events.into_iter().peekable(), anchors: HashMap::new(), left: MAX_VALUES };
    let mut docs = 0;
    let mut top = None;
    while let Some((ev, line)) = r.it.next() {
        match ev {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            Event::DocumentStart(_) => {
                docs += 1;
                if docs > 1 {
                    return Err("more than one YAML document (the engines load one)".into());
                }
                if matches!(r.it.peek(), Some((Event::DocumentEnd, _))) {
                    top = Some(Value::Null);
                    continue;
                }
                top = Some(node(&mut r, line, 0)?);
            }
            other => return Err(format!("unexpected YAML event {other:?} at line {line}")),
        }
    }
    match top {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Map(m)) => Ok(m),
        Some(_) => Err("the top level is not a mapping of option names to values".into()),
    }
}

/// The events of one document, the values anchored so far (an alias is a copy of its
/// anchor's value, as PyYAML gives the same object twice) and how many more values may be
/// made: aliases of aliases would otherwise grow a small file exponentially.
struct Reader<'a> {
    it: std::iter::Peekable<std::vec::IntoIter<(Event<'a>, usize)>>,
    anchors: HashMap<usize, Value>,
    left: usize,
}

/// How deep a config's values may nest (the engines' own configs nest two or three levels).
const MAX_DEPTH: usize = 64;
/// How many values a config may expand to, aliases counted at each use.
const MAX_VALUES: usize = 100_000;

fn node(r: &mut Reader, line: usize, depth: usize) -> Result<Value, String> {
    let Some((ev, line)) = r.it.next() else { return Err(format!("YAML ends early after line {line}")) };
    if depth > MAX_DEPTH {
        return Err(format!("values nested more than {MAX_DEPTH} levels deep at line {line}"));
    }
    let is_alias = matches!(ev, Event::Alias(_));
    let (value, anchor) = match ev {
        Event::Scalar(text, style, anchor, tag) => {
            (scalar(&text, style, tag.as_ref().map(|t| t.suffix.as_str())), anchor)
        }
        Event::SequenceStart(anchor, _) => {
            let mut v = Vec::new();
            loop {
                if matches!(r.it.peek(), Some((Event::SequenceEnd, _))) {
                    r.it.next();
                    break (Value::Seq(v), anchor);
                }
                v.push(node(r, line, depth + 1)?);
            }
        }
        Event::MappingStart(anchor, _) => (mapping(r, line, depth)?, anchor),
        Event::Alias(id) => match r.anchors.get(&id) {
            Some(v) => (v.clone(), 0),
            None => return Err(format!("an alias at line {line} names no anchor before it")),
        },
        other => return Err(format!("unexpected YAML event {other:?} at line {line}")),
    };
    // One value made here, or a copy of all an alias names.
    let made = if is_alias { value.size() } else { 1 };
    r.left = r.left.checked_sub(made).ok_or(format!("the values expand past {MAX_VALUES} (aliases) by line {line}"))?;
    if anchor != 0 {
        r.anchors.insert(anchor, value.clone());
    }
    Ok(value)
}

/// A mapping's pairs, after its start event.
fn mapping(r: &mut Reader, line: usize, depth: usize) -> Result<Value, String> {
    let mut m: Vec<(String, Value)> = Vec::new();
    // `<<` (YAML 1.1's merge key, which PyYAML's safe loader applies): the mappings
    // it names, their pairs before the mapping's own (the first merged one wins).
    let mut merged: Vec<(String, Value)> = Vec::new();
    loop {
        if matches!(r.it.peek(), Some((Event::MappingEnd, _))) {
            r.it.next();
            // A Python dict of the merged pairs then the own ones: a key keeps its
            // first place and takes its last value.
            let mut out: Vec<(String, Value)> = Vec::new();
            for (k, v) in merged.into_iter().chain(m) {
                match out.iter_mut().find(|(x, _)| *x == k) {
                    Some(slot) => slot.1 = v,
                    None => out.push((k, v)),
                }
            }
            return Ok(Value::Map(out));
        }
        let merge = matches!(r.it.peek(), Some((Event::Scalar(t, ScalarStyle::Plain, _, None), _)) if t == "<<");
        let key = match node(r, line, depth + 1)? {
            Value::Str(s) => s,
            Value::Int(s) | Value::Float(s) => s,
            other => return Err(format!("a mapping key at line {line} is not a name: {other:?}")),
        };
        let value = node(r, line, depth + 1)?;
        if merge {
            let maps = match value {
                Value::Map(pairs) => vec![pairs],
                Value::Seq(items) if items.iter().all(|i| matches!(i, Value::Map(_))) => {
                    items.into_iter().filter_map(|i| if let Value::Map(p) = i { Some(p) } else { None }).collect()
                }
                _ => return Err(format!("the merge key `<<` at line {line} needs a mapping or a list of mappings")),
            };
            for (k, v) in maps.into_iter().flatten() {
                if !merged.iter().any(|(x, _)| *x == k) {
                    merged.push((k, v));
                }
            }
            continue;
        }
        m.push((key, value));
    }
}

/// A scalar as PyYAML's SafeLoader resolves it (YAML 1.1): only plain scalars are
/// resolved; quoted and block scalars are strings.
fn scalar(text: &str, style: ScalarStyle, tag: Option<&str>) -> Value {
    match tag {
        Some("str") => return Value::Str(text.into()),
        Some("bool") | Some("int") | Some("null") | Some("float") | None => {}
        Some(_) => return Value::Str(text.into()),
    }
    if style != ScalarStyle::Plain {
        return Value::Str(text.into());
    }
    match text {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => return Value::Bool(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => return Value::Bool(false),
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        _ => {}
    }
    if let Some(n) = yaml11_int(text) {
        return Value::Int(n);
    }
    if is_yaml11_float(text) {
        return Value::Float(text.into());
    }
    Value::Str(text.into())
}

/// PyYAML's int: `[-+]?0b[01_]+`, `[-+]?0[0-7_]+` (octal), `[-+]?(0|[1-9][0-9_]*)`,
/// `[-+]?0x[0-9a-fA-F_]+`, `[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+` (base 60: `1:00` is 60).
/// Python's `str()` of the value.
fn yaml11_int(t: &str) -> Option<String> {
    let (neg, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if let Some((first, rest)) = body.split_once(':') {
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        let head: String = first.chars().filter(|c| *c != '_').collect();
        let ok = first.starts_with(|c: char| ('1'..='9').contains(&c))
            && first.chars().all(|c| c.is_ascii_digit() || c == '_')
            && rest.split(':').all(|p| digits(p) && p.len() <= 2 && p.parse::<u32>().is_ok_and(|n| n < 60));
        if !ok {
            return None;
        }
        let mut n: u128 = head.parse().ok()?;
        for p in rest.split(':') {
            n = n.checked_mul(60)?.checked_add(p.parse().ok()?)?;
        }
        return Some(if neg { format!("-{n}") } else { n.to_string() });
    }
    let (radix, digits) = if let Some(d) = body.strip_prefix("0b") {
        (2, d)
    } else if let Some(d) = body.strip_prefix("0x") {
        (16, d)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        if body.starts_with('_') {
            return None;
        }
        (10, body)
    };
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() || !digits.chars().all(|c| c == '_' || c.is_digit(radix)) {
        return None;
    }
    let n = u128::from_str_radix(&clean, radix).ok()?;
    Some(if neg && n != 0 { format!("-{n}") } else { n.to_string() })
}

/// PyYAML's float: `[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?`, `[-+]?\.(inf|Inf|INF)`,
/// `\.(nan|NaN|NAN)` (a float needs its dot: `1e3` is a string).
fn is_yaml11_float(t: &str) -> bool {
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    if matches!(body, ".inf" | ".Inf" | ".INF") || matches!(t, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(p) => (&body[..p], Some(&body[p + 1..])),
        None => (body, None),
    };
    let Some(dot) = mantissa.find('.') else { return false };
    let (int, frac) = (&mantissa[..dot], &mantissa[dot + 1..]);
    let int_ok = int.is_empty()
        || (int.starts_with(|c: char| c.is_ascii_digit()) && int.chars().all(|c| c.is_ascii_digit() || c == '_'));
    let frac_ok = frac.chars().all(|c| c.is_ascii_digit() || c == '_');
    let exp_ok =
        exp.is_none_or(|e| e.len() > 1 && e.starts_with(['-', '+']) && e[1..].chars().all(|c| c.is_ascii_digit()));
    int_ok && frac_ok && exp_ok && !(int.is_empty() && frac.is_empty())
}

/// The args the engine makes of the file, in the file's order. `has_option`: whether the
/// engine's parser has a long option (vLLM adds `--no-KEY` for a false boolean only then).
pub fn to_args(engine: Engine, entries: &[(String, Value)], has_option: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in entries {
        let flag = format!("--{key}");
        match value {
            Value::Bool(true) => out.push(flag),
            Value::Bool(false) => match engine.info().config_false {
                ConfigFalse::NoFlag => {
                    let no = format!("--no-{key}");
                    if has_option(&no) || has_option(&format!("--no-{}", key.replace('_', "-"))) {
                        out.push(no);
                    }
                }
                ConfigFalse::Omitted => {}
            },
            Value::Seq(items) => {
                if !items.is_empty() {
                    out.push(flag);
                    out.extend(items.iter().map(Value::py_str));
                }
            }
            Value::Map(_) => {
                out.push(flag);
                out.push(value.json().to_string());
            }
            other => {
                out.push(flag);
                out.push(other.py_str());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::Str(x.into())
    }

    #[test]
    fn scalars_as_pyyaml_safe_load_reads_them() {
        let text = "a: yes\nb: off\nc: ~\nd: 0x10\ne: 1_000\nf: 010\ng: '8'\nh: 0.9\ni: 1e3\nj: fp8_e4m3\nk: -4\nl:\nm: \"on\"\n";
        let m = parse(text).unwrap();
        let want = vec![
            ("a".to_string(), Value::Bool(true)),
            ("b".into(), Value::Bool(false)),
            ("c".into(), Value::Null),
            ("d".into(), Value::Int("16".into())),
            ("e".into(), Value::Int("1000".into())),
            ("f".into(), Value::Int("8".into())),
            ("g".into(), s("8")),
            ("h".into(), Value::Float("0.9".into())),
            ("i".into(), s("1e3")),
            ("j".into(), s("fp8_e4m3")),
            ("k".into(), Value::Int("-4".into())),
            ("l".into(), Value::Null),
            ("m".into(), s("on")),
        ];
        assert_eq!(m, want);
    }

    /// As PyYAML's `safe_load` builds the dict: merge keys applied (own keys win, the first
    /// merged mapping wins among merged ones), a repeated key keeps its first place with its
    /// last value, YAML 1.1's base-60 ints.
    #[test]
    fn merge_keys_repeated_keys_and_base_60() {
        let m = parse("<<: {kv-cache-dtype: fp8_e4m3, tensor-parallel-size: 2}\ntensor-parallel-size: 8\n").unwrap();
        assert_eq!(
            m,
            vec![("kv-cache-dtype".into(), s("fp8_e4m3")), ("tensor-parallel-size".into(), Value::Int("8".into()))]
        );
        let m = parse("<<: [{a: 1}, {a: 2, b: 3}]\nc: 4\n").unwrap();
        let int = |n: &str| Value::Int(n.into());
        assert_eq!(m, vec![("a".into(), int("1")), ("b".into(), int("3")), ("c".into(), int("4"))]);
        let m = parse("tensor-parallel-size: 8\nmax-num-seqs: 4\ntensor-parallel-size: 4\n").unwrap();
        assert_eq!(m, vec![("tensor-parallel-size".into(), int("4")), ("max-num-seqs".into(), int("4"))]);
        let m = parse("a: 1:00\nb: -1:30:00\nc: 1:60\nd: '1:00'\n").unwrap();
        assert_eq!(
            m,
            vec![("a".into(), int("60")), ("b".into(), int("-5400")), ("c".into(), s("1:60")), ("d".into(), s("1:00"))]
        );
        assert!(parse("<<: 3\n").is_err(), "a merge of a scalar is an error in PyYAML too");
        // A quoted `<<` is an ordinary key.
        assert_eq!(parse("'<<': x\n").unwrap(), vec![("<<".into(), s("x"))]);
    }

    #[test]
    fn args_as_each_engine_makes_them() {
        let text = "tensor-parallel-size: 4\nenable-prefix-caching: false\nenforce-eager: true\n\
                    kv-transfer-config:\n  kv_connector: MooncakeConnector\n  kv_role: kv_producer\n\
                    served-model-name: [a, b]\nnothing: []\n";
        let m = parse(text).unwrap();
        let has = |o: &str| o == "--no-enable-prefix-caching";
        assert_eq!(
            to_args(Engine::Vllm, &m, &has),
            [
                "--tensor-parallel-size",
                "4",
                "--no-enable-prefix-caching",
                "--enforce-eager",
                "--kv-transfer-config",
                r#"{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}"#,
                "--served-model-name",
                "a",
                "b",
            ]
        );
        assert_eq!(
            to_args(Engine::Sglang, &m, &has)[..4],
            ["--tensor-parallel-size", "4", "--enforce-eager", "--kv-transfer-config"]
        );
    }

    /// The file and the args vLLM 0.33.0's own `load_config_file` made of it (run against
    /// the PyPI wheel): `['--model', '/models/kimi-k3', '--tensor-parallel-size', '4',
    /// '--max_num_seqs', '64', '--no-enable-prefix-caching', '--kv-transfer-config',
    /// '{"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"}']`.
    #[test]
    fn the_same_args_as_vllms_own_loader() {
        let text = "model: /models/kimi-k3\ntensor-parallel-size: 4\nmax_num_seqs: 0x40\nenable-prefix-caching: off\n\
                    kv-transfer-config:\n  kv_connector: MooncakeConnector\n  kv_role: kv_producer\n";
        let list = crate::engines::option_list(Engine::Vllm, Some("0.33.0")).unwrap();
        let args = to_args(Engine::Vllm, &parse(text).unwrap(), &|o| list.names().contains(&o));
        assert_eq!(
            args[..7],
            [
                "--model",
                "/models/kimi-k3",
                "--tensor-parallel-size",
                "4",
                "--max_num_seqs",
                "64",
                "--no-enable-prefix-caching"
            ]
        );
        assert_eq!(args[7], "--kv-transfer-config");
        let v: serde_json::Value = serde_json::from_str(&args[8]).unwrap();
        assert_eq!(v, serde_json::json!({"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"}));
        assert_eq!(args.len(), 9);
    }

    /// Anchors and aliases as PyYAML 6.0.3's safe_load gives them (answers recorded from it):
    /// an alias is its anchor's value, a merge key takes one; aliases of aliases are bounded.
    #[test]
    fn anchors_and_aliases_as_pyyaml_reads_them() {
        let json = |t: &str| Value::Map(parse(t).unwrap()).json().to_string();
        assert_eq!(json("a: &x 1\nb: *x\n"), r#"{"a":1,"b":1}"#);
        // (serde_json sorts the keys; the order is the pairs')
        let merge = "base: &b {kv-cache-dtype: fp8_e4m3, tp: 2}\n<<: *b\ntp: 4\n";
        assert_eq!(json(merge), r#"{"base":{"kv-cache-dtype":"fp8_e4m3","tp":2},"kv-cache-dtype":"fp8_e4m3","tp":4}"#);
        let keys: Vec<String> = parse(merge).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["kv-cache-dtype", "tp", "base"]);
        assert_eq!(json("l: &l [1, 2]\nm: *l\n"), r#"{"l":[1,2],"m":[1,2]}"#);
        let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            laughs += &format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", "));
        }
        assert!(parse(&laughs).unwrap_err().contains("expand past 100000"), "{laughs}");
    }

    #[test]
    fn what_is_not_a_flat_mapping_is_said() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("---\n...\n").unwrap(), vec![]);
        assert!(parse("- a\n- b\n").unwrap_err().contains("not a mapping"));
        assert!(parse("s: *nope\n").is_err());
        assert!(parse("a: [1\n").unwrap_err().starts_with("not YAML"));
        assert!(parse("a: 1\n---\nb: 2\n").unwrap_err().contains("more than one"));
        // Hostile nesting is refused, not a stack overflow.
        let deep = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert!(parse(&deep(100)).unwrap_err().contains("nested more than 64 levels"));
        assert!(parse(&deep(100_000)).unwrap_err().contains("recursion limit exceeded"));
        // A repeated key: the last wins.
        assert_eq!(parse("a: 1\na: 2\n").unwrap(), vec![("a".to_string(), Value::Int("2".into()))]);
    }
}
