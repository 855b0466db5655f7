//! A manifest read straight from the TOML parser's events, without building a document
//! and deserializing it: every start reads every tree's manifest, and the general path
//! (`toml::from_str` into the serde types) is most of a start's TOML cost.
//!
//! It reads the manifests as they are written — `key = "string"`, `schema = 1`, arrays of
//! strings, `[table]` and `[table.name]` headers, comments — and gives up (None) on
//! anything else: a syntax error, an escape or a multi-line string, an inline table, a
//! dotted key, an array of tables, a key or table given twice, an unknown key, a wrong type,
//! a missing field. The caller then parses with `toml::from_str`, which gives the value or
//! the error it always gave. A test compares both on the shipped manifests and on variants.

use std::collections::BTreeMap;

use toml_parser::decoder::Encoding;
use toml_parser::parser::EventReceiver;
use toml_parser::{ErrorSink, ParseError, Source, Span};

use super::{Abi, Capability, EngineEntry, Manifest, Prefer, ServerEntry};

/// The manifest, when this reader is sure of it.
pub fn parse(text: &str) -> Option<Manifest> {
    let source = Source::new(text);
    let tokens: Vec<_> = source.lex().collect();
    let mut r = Reader { text, ..Reader::default() };
    let mut error: Option<ParseError> = None;
    toml_parser::parser::parse_document(&tokens, &mut r, &mut error);
    if error.is_some() || r.failed {
        return None;
    }
    r.finish()
}

#[derive(Default)]
struct Reader<'t> {
    text: &'t str,
    failed: bool,
    /// The current table's header keys (`[capabilities.mooncake]` → both).
    table: Vec<&'t str>,
    in_header: bool,
    /// Every header seen (a table twice is TOML's error, left to toml); `current` is the
    /// index of the one keys now go to (0: the top level).
    headers: Vec<Vec<&'t str>>,
    current: usize,
    key: Option<&'t str>,
    /// After `=`: the value's scalar, or the items of its array.
    value: Option<Value<'t>>,
    in_array: bool,
    /// Every (table, key) set (a key twice is an error, left to toml).
    seen: Vec<(usize, &'t str)>,
    top: Top<'t>,
}

#[derive(Default)]
struct Top<'t> {
    schema: Option<u32>,
    family: Option<&'t str>,
    description: Option<&'t str>,
    python: Option<&'t str>,
    hip: Option<&'t str>,
    rocm_release: Option<&'t str>,
    abi: bool,
    engines: BTreeMap<&'t str, (Option<&'t str>, Option<&'t str>)>,
    server: Option<Option<&'t str>>,
    capabilities: BTreeMap<&'t str, Capability>,
    env: BTreeMap<String, String>,
    allow_shadow: Option<Vec<String>>,
}

enum Value<'t> {
    Str(&'t str),
    Int(u32),
    Array(Vec<&'t str>),
}

impl<'t> Reader<'t> {
    fn fail(&mut self) {
        self.failed = true;
    }

    /// A string scalar's text: a basic string without escapes, or a literal string.
    fn string(&self, span: Span, kind: Option<Encoding>) -> Option<&'t str> {
        let raw = self.text.get(span.start()..span.end())?;
        match kind {
            Some(Encoding::BasicString) if !raw.contains('\\') => raw.strip_prefix('"')?.strip_suffix('"'),
            Some(Encoding::LiteralString) => raw.strip_prefix('\'')?.strip_suffix('\''),
            _ => None,
        }
    }

    /// A key: bare, or quoted as a string this reader reads.
    fn key_text(&self, span: Span, kind: Option<Encoding>) -> Option<&'t str> {
        match kind {
            None => self.text.get(span.start()..span.end()),
            Some(_) => self.string(span, kind),
        }
    }

    /// One `key = value` of the current table.
    fn assign(&mut self, key: &'t str, value: Value<'t>) -> Option<()> {
        if self.seen.iter().any(|&(t, k)| t == self.current && k == key) {
            return None;
        }
        self.seen.push((self.current, key));
        let str_ = |v: Value<'t>| match v {
            Value::Str(s) => Some(s),
            _ => None,
        };
        let list = |v: Value<'t>| match v {
            Value::Array(items) => Some(items.into_iter().map(str::to_string).collect::<Vec<String>>()),
            _ => None,
        };
        let t = &mut self.top;
        match self.table.as_slice() {
            [] => match key {
                "schema" => match value {
                    Value::Int(n) => t.schema = Some(n),
                    _ => return None,
                },
                "family" => t.family = Some(str_(value)?),
                "description" => t.description = Some(str_(value)?),
                "allow_shadow" => t.allow_shadow = Some(list(value)?),
                _ => return None,
            },
            ["abi"] => match key {
                "python" => t.python = Some(str_(value)?),
                // `rocm` is the alias of `hip`; both given is serde's duplicate-field error.
                "hip" | "rocm" if t.hip.is_none() => t.hip = Some(str_(value)?),
                "rocm_release" => t.rocm_release = Some(str_(value)?),
                _ => return None,
            },
            ["engines", name] => {
                let e = t.engines.get_mut(name)?;
                match key {
                    "module" => e.0 = Some(str_(value)?),
                    "versions" => e.1 = Some(str_(value)?),
                    _ => return None,
                }
            }
            ["server"] => match key {
                "module" => t.server = Some(Some(str_(value)?)),
                _ => return None,
            },
            ["capabilities", name] => {
                let c = t.capabilities.get_mut(name)?;
                match key {
                    "description" => c.description = Some(str_(value)?.to_string()),
                    "modules" => c.modules = list(value)?,
                    "libraries" => c.libraries = list(value)?,
                    "engines" => c.engines = list(value)?,
                    "prefer" => {
                        c.prefer = match str_(value)? {
                            "base" => Prefer::Base,
                            "tree" => Prefer::Tree,
                            _ => return None,
                        }
                    }
                    _ => return None,
                }
            }
            ["env"] => {
                t.env.insert(key.to_string(), str_(value)?.to_string());
            }
            _ => return None,
        }
        Some(())
    }

    /// A `[header]` that opens a table this reader knows.
    fn open(&mut self) -> Option<()> {
        if self.headers.contains(&self.table) {
            return None;
        }
        self.headers.push(self.table.clone());
        self.current = self.headers.len();
        let t = &mut self.top;
        match self.table.as_slice() {
            ["abi"] => t.abi = true,
            ["engines", name] => {
                t.engines.insert(name, (None, None));
            }
            ["server"] => t.server = Some(None),
            ["capabilities", name] => {
                let empty = Capability {
                    description: None,
                    modules: Vec::new(),
                    libraries: Vec::new(),
                    engines: Vec::new(),
                    prefer: Prefer::Base,
                };
                t.capabilities.insert(name, empty);
            }
            // `[engines]`, `[capabilities]` alone, or `[env]`: tables that hold tables or strings.
            ["engines"] | ["capabilities"] | ["env"] => {}
            _ => return None,
        }
        Some(())
    }

    fn finish(self) -> Option<Manifest> {
        let t = self.top;
        if !t.abi {
            return None;
        }
        let mut engines = BTreeMap::new();
        for (name, (module, versions)) in t.engines {
            let e = EngineEntry { module: module?.to_string(), versions: versions.map(str::to_string) };
            engines.insert(name.to_string(), e);
        }
        let server = match t.server {
            Some(module) => Some(ServerEntry { module: module?.to_string() }),
            None => None,
        };
        Some(Manifest {
            schema: t.schema?,
            family: t.family?.to_string(),
            description: t.description.map(str::to_string),
            abi: Abi {
                python: t.python?.to_string(),
                hip: t.hip?.to_string(),
                rocm_release: t.rocm_release.map(str::to_string),
            },
            engines,
            server,
            capabilities: t.capabilities.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            env: t.env,
            allow_shadow: t.allow_shadow.unwrap_or_default(),
        })
    }
}

impl<'t> EventReceiver for Reader<'t> {
    fn std_table_open(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.table.clear();
        self.in_header = true;
    }
    fn std_table_close(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.in_header = false;
        if self.open().is_none() {
            self.fail();
        }
    }
    fn array_table_open(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.fail();
    }
    fn inline_table_open(&mut self, _span: Span, _error: &mut dyn ErrorSink) -> bool {
        self.fail();
        true
    }
    fn array_open(&mut self, _span: Span, _error: &mut dyn ErrorSink) -> bool {
        if self.in_array || self.key.is_none() || self.value.is_some() {
            self.fail();
        }
        self.in_array = true;
        self.value = Some(Value::Array(Vec::new()));
        true
    }
    fn array_close(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.in_array = false;
        self.end_value();
    }
    fn simple_key(&mut self, span: Span, kind: Option<Encoding>, _error: &mut dyn ErrorSink) {
        let Some(k) = self.key_text(span, kind) else { return self.fail() };
        if self.in_header {
            self.table.push(k);
        } else if self.key.is_some() {
            // A dotted key (`a.b = …`).
            self.fail();
        } else {
            self.key = Some(k);
        }
    }
    fn key_sep(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        if !self.in_header {
            self.fail();
        }
    }
    fn scalar(&mut self, span: Span, kind: Option<Encoding>, _error: &mut dyn ErrorSink) {
        let v = match kind {
            None => {
                // `schema = 1`: a plain decimal; anything else (bools, floats, dates) is toml's.
                let raw = &self.text[span.start()..span.end()];
                match raw.parse::<u32>() {
                    Ok(n) if raw.bytes().all(|b| b.is_ascii_digit()) && !(raw.len() > 1 && raw.starts_with('0')) => {
                        Value::Int(n)
                    }
                    _ => return self.fail(),
                }
            }
            Some(_) => match self.string(span, kind) {
                Some(s) => Value::Str(s),
                None => return self.fail(),
            },
        };
        match (&mut self.value, v) {
            (Some(Value::Array(items)), Value::Str(s)) if self.in_array => items.push(s),
            (None, v) if !self.in_array && self.key.is_some() => {
                self.value = Some(v);
                self.end_value();
            }
            _ => self.fail(),
        }
    }
    fn error(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.fail();
    }
}

impl Reader<'_> {
    fn end_value(&mut self) {
        let (Some(key), Some(value)) = (self.key.take(), self.value.take()) else { return self.fail() };
        if self.assign(key, value).is_none() {
            self.fail();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: [&str; 2] =
        [include_str!("../../manifests/rocm7-py312.toml"), include_str!("../../manifests/rocm7-py310.toml")];

    /// Where this reader answers, `toml::from_str` gives the same manifest; where toml
    /// refuses, this reader does not answer (so toml's error is the one reported).
    fn agrees(text: &str) -> bool {
        let general: Result<Manifest, _> = toml::from_str(text);
        match (parse(text), general) {
            (Some(q), Ok(g)) => {
                assert_eq!(q, g, "{text}");
                true
            }
            (Some(q), Err(e)) => panic!("the quick reader read {q:?} where toml says {e}:\n{text}"),
            (None, _) => false,
        }
    }

    #[test]
    fn the_shipped_and_minimal_manifests_are_read_quickly_and_alike() {
        for text in SHIPPED.iter().chain([&super::super::MINIMAL]) {
            assert!(agrees(text), "not read by the quick reader:\n{text}");
        }
    }

    /// Variants of every manifest: each line dropped, each line doubled, each line moved
    /// into another table, and edits of the spellings TOML allows — the reader answers
    /// some and agrees wherever it does.
    #[test]
    fn variants_are_read_alike_or_left_to_toml() {
        let edits: [(&str, &str); 24] = [
            ("\"", "'"),
            ("schema = 1", "schema = 01"),
            ("schema = 1", "schema = +1"),
            ("schema = 1", "schema = 1_0"),
            ("schema = 1", "schema = \"1\""),
            ("schema = 1", "schema = 4294967296"),
            ("hip = ", "rocm = "),
            ("[abi]", "[abi]\nrocm = \"7\""),
            ("[abi]", "[ abi ]"),
            ("[abi]", "[\"abi\"]"),
            ("[server]", "[server]\nmodule = \"x\""),
            ("prefer = \"base\"", "prefer = \"tree\""),
            ("prefer = \"base\"", "prefer = \"Base\""),
            ("modules = [\"mooncake\"]", "modules = [\"mooncake\",]"),
            ("modules = [\"mooncake\"]", "modules = [\n  \"mooncake\", # c\n  \"x\"\n]"),
            ("modules = [\"mooncake\"]", "modules = []"),
            ("modules = [\"mooncake\"]", "modules = [1]"),
            ("modules = [\"mooncake\"]", "modules = [[\"a\"]]"),
            ("modules = [\"mooncake\"]", "modules = \"mooncake\""),
            ("[capabilities.mooncake]", "[capabilities]\n[capabilities.mooncake]"),
            ("[capabilities.mooncake]", "[capabilities.\"mooncake\"]"),
            ("module = \"infera.server\"", "module = \"infera.\\u0073erver\""),
            ("family = ", "family.x = "),
            ("[engines.vllm]", "[engines.vllm]\n[engines.vllm]"),
        ];
        let mut answered = 0;
        let mut total = 0;
        for text in SHIPPED.iter().chain([&super::super::MINIMAL]) {
            let lines: Vec<&str> = text.lines().collect();
            let mut variants: Vec<String> = Vec::new();
            for i in 0..lines.len() {
                let mut dropped = lines.clone();
                dropped.remove(i);
                variants.push(dropped.join("\n"));
                let mut doubled = lines.clone();
                doubled.insert(i, lines[i]);
                variants.push(doubled.join("\n"));
                let mut moved = lines.clone();
                let l = moved.remove(i);
                moved.push(l);
                variants.push(moved.join("\n"));
            }
            for (from, to) in edits {
                variants.push(text.replacen(from, to, 1));
            }
            variants.push(format!("{text}\n[env]\nLD_PRELOAD = \"{{tree}}/lib/x.so\"\nA = 'b'\n"));
            variants.push(format!("{text}\n[env]\nA = 1\n"));
            variants.push(format!("{text}\nallow_shadow = [\"x\"]\n"));
            variants.push(format!("allow_shadow = [\"x\"]\n{text}"));
            variants.push(format!("{text}\n[[capabilities.x]]\n"));
            variants.push(format!("{text}\n[capabilities.x]\ndescription = \"\"\"multi\nline\"\"\"\n"));
            for v in &variants {
                total += 1;
                if agrees(v) {
                    answered += 1;
                }
            }
        }
        assert!(answered * 3 > total, "the quick reader answered {answered} of {total}");
    }
}
