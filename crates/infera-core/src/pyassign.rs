//! The module-level assignments of a Python file, read as text (never run): what the file
//! says at import time when the assignment is a literal. Lines inside a docstring or any
//! indented block (an `if`, a `try`, a function) do not count — a value there may never be
//! assigned — and a value that is computed is recorded as such, never guessed.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Str(String),
    None,
    /// Assigned, but not from a literal (`importlib.metadata.version("x")`, a name, an f-string).
    Computed,
}

/// `name → value` for every top-level assignment (the last one wins, as at import time).
/// Handles `a = 'x'`, `a = b = 'x'`, `a: Optional[str] = 'x'`, `None`, trailing comments.
pub fn assignments(text: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut in_string: Option<&str> = None;
    for line in text.lines() {
        if let Some(q) = in_string {
            if line.matches(q).count() % 2 == 1 {
                in_string = None;
            }
            continue;
        }
        for q in ["\"\"\"", "'''"] {
            if line.matches(q).count() % 2 == 1 {
                in_string = Some(q);
            }
        }
        if in_string.is_some() || line.starts_with([' ', '\t']) || line.starts_with('#') {
            continue;
        }
        let mut parts: Vec<&str> = split_assign(line);
        if parts.len() < 2 {
            continue;
        }
        let value = parse_value(parts.pop().unwrap_or_default());
        for target in parts {
            // `name: annotation` → name
            let name = target.split(':').next().unwrap_or("").trim();
            if is_identifier(name) {
                out.insert(name.to_string(), value.clone());
            }
        }
    }
    out
}

/// `a = b = 'x'` → ["a ", " b ", " 'x'"], splitting on `=` outside quotes and not part of
/// `==`, `<=`, `>=`, `!=`.
fn split_assign(line: &str) -> Vec<&str> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut end = line.len();
    let mut quote: Option<u8> = None;
    for i in 0..b.len() {
        match (quote, b[i]) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c @ (b'\'' | b'"')) => quote = Some(c),
            (None, b'#') => {
                end = i;
                break;
            }
            (None, b'=') => {
                let prev = if i > 0 { b[i - 1] } else { 0 };
                let next = b.get(i + 1).copied().unwrap_or(0);
                if next != b'=' && !b"=<>!".contains(&prev) {
                    out.push(&line[start..i]);
                    start = i + 1;
                }
            }
            _ => {}
        }
    }
    if !out.is_empty() {
        out.push(&line[start..end.max(start)]);
    }
    out
}

fn parse_value(s: &str) -> Value {
    let s = s.trim();
    if s == "None" {
        return Value::None;
    }
    let Some(q) = s.chars().next().filter(|c| *c == '\'' || *c == '"') else {
        return Value::Computed;
    };
    let inner = &s[1..];
    match inner.find(q) {
        // The whole value is one plain literal (no concatenation, no escapes to resolve).
        Some(end) if inner[end + 1..].trim().is_empty() && !inner[..end].contains('\\') => {
            Value::Str(inner[..end].to_string())
        }
        _ => Value::Computed,
    }
}

/// The literal string assigned to `name`, if the file assigns one.
pub fn literal(text: &str, name: &str) -> Option<String> {
    match assignments(text).remove(name) {
        Some(Value::Str(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// A Python identifier as the launcher meets them (ASCII: module and variable names).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_level_literals_only() {
        let text = r#"
"""Docstring.
hip = 'from the docstring'
"""
from typing import Optional
__version__ = version = '0.5.23'
hip: Optional[str] = '7.15.26333'  # a comment
cuda: Optional[str] = None
debug = False
if False:
    hip = 'dead branch'
try:
    rocm = '10.0.0'
except ImportError:
    pass
computed = importlib.metadata.version("sglang")
x = 'a' + 'b'
y='c'#tight
eq = a == 'b'
"#;
        let a = assignments(text);
        assert_eq!(a["__version__"], Value::Str("0.5.23".into()));
        assert_eq!(a["version"], Value::Str("0.5.23".into()));
        assert_eq!(a["hip"], Value::Str("7.15.26333".into()));
        assert_eq!(a["cuda"], Value::None);
        assert_eq!(a["debug"], Value::Computed);
        assert_eq!(a["computed"], Value::Computed);
        assert_eq!(a["x"], Value::Computed);
        assert_eq!(a["y"], Value::Str("c".into()));
        assert!(!a.contains_key("rocm"), "inside try: not module level");
        assert_eq!(a["eq"], Value::Computed);
        assert_eq!(literal(text, "hip").as_deref(), Some("7.15.26333"));
        assert_eq!(literal(text, "computed"), None);
    }

    #[test]
    fn sglangs_computed_version_file_has_no_version() {
        let version_py = "try:\n    from sglang._version import __version__, __version_tuple__\nexcept ImportError:\n    __version__ = \"0.0.0.dev0\"\n";
        assert_eq!(literal(version_py, "__version__"), None);
    }
}
