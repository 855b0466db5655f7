//! A manifest read by a scanner of the TOML its manifests are written in, without building
//! a document and deserializing it: every start reads every tree's manifest, and the
//! general path (`toml::from_str` into the serde types) was most of a start's TOML cost.
//!
//! It reads `key = "string"`, `key = 'literal'`, `schema = 1`, arrays of strings (over
//! several lines, with comments and a trailing comma), `[table]` and `[table.name]` headers,
//! comments and blank lines, and gives up (None) on anything else: an escape, a multi-line
//! string, an inline table, a dotted key, an array of tables, a carriage return, a control
//! character, a key or table given twice, an unknown key, a wrong type, a missing field. The
//! caller then parses with `toml::from_str`, which gives the value or the error it always
//! gave. A test compares both on the shipped manifests and on ~200 variants of them.

use std::collections::BTreeMap;

use super::{Abi, Capability, EngineEntry, Manifest, Prefer, ServerEntry};

/// The manifest, when this reader is sure of it.
pub fn parse(text: &str) -> Option<Manifest> {
    let mut r = Reader::default();
    let mut s = Scan { b: text.as_bytes(), text, i: 0 };
    loop {
        s.blank();
        match s.peek() {
            None => break,
            Some(b'\n') => s.i += 1,
            Some(b'#') => s.comment()?,
            Some(b'[') => {
                s.i += 1;
                r.table.clear();
                loop {
                    s.blank();
                    let k = s.key()?;
                    r.table.push(k);
                    s.blank();
                    match s.next()? {
                        b'.' => continue,
                        b']' => break,
                        _ => return None,
                    }
                }
                r.open()?;
                s.end_of_line()?;
            }
            Some(_) => {
                let k = s.key()?;
                s.blank();
                if s.next()? != b'=' {
                    return None;
                }
                s.blank();
                let v = s.value()?;
                r.assign(k, v)?;
                s.end_of_line()?;
            }
        }
    }
    r.finish()
}

/// A control character other than tab, or DEL: what ends a comment (`\n`) or makes it
/// TOML's error (anything else).
static CONTROL: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = c != b'\t' as usize;
        c += 1;
    }
    t[0x7f] = true;
    t
};

/// The scanner: bytes of valid UTF-8 text (the `&str`), a position.
struct Scan<'t> {
    b: &'t [u8],
    text: &'t str,
    i: usize,
}

impl<'t> Scan<'t> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }
    /// Spaces and tabs.
    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }
    /// `# …` to the end of the line, without control characters (TOML's rule).
    fn comment(&mut self) -> Option<()> {
        // One table lookup a byte: most of a manifest's bytes are its comments.
        let rest = &self.b[self.i..];
        let n = rest.iter().position(|&c| CONTROL[c as usize]).unwrap_or(rest.len());
        self.i += n;
        match self.peek() {
            None | Some(b'\n') => Some(()),
            Some(_) => None,
        }
    }
    /// Blanks, then a comment, then the line's end (or the text's).
    fn end_of_line(&mut self) -> Option<()> {
        self.blank();
        if self.peek() == Some(b'#') {
            self.comment()?;
        }
        match self.peek() {
            None => Some(()),
            Some(b'\n') => {
                self.i += 1;
                Some(())
            }
            Some(_) => None,
        }
    }
    /// A bare key (`A-Za-z0-9_-`) or a one-line string without escapes.
    fn key(&mut self) -> Option<&'t str> {
        match self.peek()? {
            b'"' | b'\'' => self.string(),
            _ => {
                let start = self.i;
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
                    self.i += 1;
                }
                (self.i > start).then(|| &self.text[start..self.i])
            }
        }
    }
    /// `"…"` without a backslash, or `'…'`; one line, no control character but tab; not
    /// the opening of a multi-line string.
    fn string(&mut self) -> Option<&'t str> {
        let quote = self.next()?;
        let start = self.i;
        let escapes = quote == b'"';
        let rest = &self.b[start..];
        let end = rest.iter().position(|&c| c == quote || CONTROL[c as usize] || (escapes && c == b'\\'))?;
        if rest[end] != quote {
            return None;
        }
        self.i = start + end + 1;
        let body = &self.text[start..self.i - 1];
        // `""` followed by a quote opens a multi-line string.
        if body.is_empty() && self.peek() == Some(quote) {
            return None;
        }
        Some(body)
    }
    fn value(&mut self) -> Option<Value<'t>> {
        match self.peek()? {
            b'"' | b'\'' => self.string().map(Value::Str),
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.space()?;
                    if self.peek()? == b']' {
                        self.i += 1;
                        return Some(Value::Array(items));
                    }
                    match self.peek()? {
                        b'"' | b'\'' => items.push(self.string()?),
                        _ => return None,
                    }
                    self.space()?;
                    match self.next()? {
                        b',' => {}
                        b']' => return Some(Value::Array(items)),
                        _ => return None,
                    }
                }
            }
            b'0'..=b'9' => {
                // A plain decimal: no sign, underscore, leading zero, fraction or exponent.
                let start = self.i;
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
                let digits = &self.text[start..self.i];
                if digits.len() > 1 && digits.starts_with('0') {
                    return None;
                }
                if !matches!(self.peek(), None | Some(b' ' | b'\t' | b'\n' | b'#')) {
                    return None;
                }
                digits.parse().ok().map(Value::Int)
            }
            _ => None,
        }
    }
    /// Inside an array: blanks, newlines and comments.
    fn space(&mut self) -> Option<()> {
        loop {
            self.blank();
            match self.peek() {
                Some(b'\n') => self.i += 1,
                Some(b'#') => self.comment()?,
                _ => return Some(()),
            }
        }
    }
}

#[derive(Default)]
struct Reader<'t> {
    /// The current table's header keys (`[capabilities.mooncake]` → both).
    table: Vec<&'t str>,
    /// Every header seen (a table twice is TOML's error, left to toml); `current` is the
    /// index of the one keys now go to (0: the top level).
    headers: Vec<Vec<&'t str>>,
    current: usize,
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
        let edits: Vec<(&str, &str)> = vec![
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
            // The scanner's own edges: every one read alike or left to toml.
            ("schema = 1", "schema = 1 # one"),
            ("schema = 1", "schema = 1#one"),
            ("schema = 1", "schema = 1.0"),
            ("schema = 1", "schema = 1e0"),
            ("schema = 1", "schema = 0"),
            ("schema = 1", "schema = true"),
            ("schema = 1", "schema=1"),
            ("schema = 1", "\tschema\t=\t1\t"),
            ("family = ", "\"family\" = "),
            ("family = ", "'family' = "),
            ("family = ", "fam ily = "),
            ("family = \"", "family = \"\"\"rocm7-py31\"\"\"\n# \""),
            ("family = \"", "family = '''"),
            ("family = \"", "family = \"a\" \""),
            ("family = \"", "family = \"\" \""),
            ("[abi]", "[abi] # the ABI"),
            ("[abi]", "[abi]x"),
            ("[abi]", "[abi"),
            ("[abi]", "[]"),
            ("[abi]", "[[abi]]"),
            ("[capabilities.mooncake]", "[capabilities . mooncake]"),
            ("[capabilities.mooncake]", "['capabilities'.\"mooncake\"]"),
            ("modules = [\"mooncake\"]", "modules = [ # the modules\n\"mooncake\"\n]"),
            ("modules = [\"mooncake\"]", "modules = [\"mooncake\"\n\"x\"]"),
            ("modules = [\"mooncake\"]", "modules = [,]"),
            ("modules = [\"mooncake\"]", "modules = [\"mooncake\",,]"),
            ("modules = [\"mooncake\"]", "modules = ['mooncake', \"x#y\"]"),
            ("modules = [\"mooncake\"]", "modules = [\"moon\tcake\"]"),
            ("modules = [\"mooncake\"]", "modules = [\"moon\u{7f}cake\"]"),
            ("modules = [\"mooncake\"]", "modules = [\"mooncake\"] x"),
            ("\n", "\r\n"),
            ("\n", "\n\u{0}"),
            ("\n", "\n# \u{7f}\n"),
            ("schema", "\u{feff}schema"),
            ("description = \"", "description = \"\u{e9}t\u{e9} "),
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
            for &(from, to) in &edits {
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, .. Default::default() })]
        /// A character put in or replaced anywhere in a shipped manifest: the reader agrees
        /// with toml or leaves the text to it.
        #[test]
        fn edits_anywhere_are_read_alike_or_left_to_toml(
            which in 0usize..2,
            at in 0usize..4000,
            replace in proptest::bool::ANY,
            c in proptest::sample::select(vec!['"', '\'', '[', ']', '=', '.', ',', '#', '\n', '\r', '\t', ' ', '\\', '0', 'a', '-', '_', '{', '}', '\u{0}', '\u{7f}', '\u{e9}']),
        ) {
            let text = SHIPPED[which];
            let mut at = at % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let mut t = text.to_string();
            if replace && at < t.len() {
                let end = at + t[at..].chars().next().map_or(0, char::len_utf8);
                t.replace_range(at..end, &c.to_string());
            } else {
                t.insert(at, c);
            }
            agrees(&t);
        }
    }
}
