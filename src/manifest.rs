//! The manifest of one overlay tree (`trees/<family>/manifest.toml`, DESIGN.md):
//! its types, parsing and validation. Unknown keys are errors, so a typo cannot
//! silently turn a capability off.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::facts::site::is_identifier;
use crate::rootfs::parse_minor;

pub const SCHEMA: u32 = 1;
/// The engines whose flags the launcher knows.
pub const KNOWN_ENGINES: [&str; 2] = ["vllm", "sglang"];

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: u32,
    pub family: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub abi: Abi,
    #[serde(default)]
    pub engines: BTreeMap<String, EngineEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerEntry>,
    #[serde(default)]
    pub capabilities: BTreeMap<String, Capability>,
    /// Defaults for the child's environment; never override a value the pod set.
    /// `{tree}` in a value becomes the tree's directory.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Top-level modules this tree may knowingly shadow in the base image.
    #[serde(default)]
    pub allow_shadow: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Abi {
    /// CPython minor the tree's extensions were built for, e.g. "3.12".
    pub python: String,
    /// ROCm major, e.g. "7".
    pub rocm: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineEntry {
    pub module: String,
    /// Base engine versions this module supports, e.g. ">=0.10, <0.12".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub module: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Python modules that must exist under site-packages.
    #[serde(default)]
    pub modules: Vec<String>,
    /// Shared libraries that must exist under lib/ (file names).
    #[serde(default)]
    pub libraries: Vec<String>,
    /// Offered to these engines only (empty: every engine and the server).
    #[serde(default)]
    pub engines: Vec<String>,
}

impl Manifest {
    pub fn python_minor(&self) -> (u32, u32) {
        parse_minor(&self.abi.python).unwrap_or((0, 0))
    }
    pub fn rocm_major(&self) -> u32 {
        self.abi.rocm.parse().unwrap_or(0)
    }
    /// Is this capability offered to `engine` (None = the router)?
    pub fn offers(&self, cap: &str, engine: Option<&str>) -> bool {
        match self.capabilities.get(cap) {
            None => false,
            Some(c) => c.engines.is_empty() || engine.is_some_and(|e| c.engines.iter().any(|x| x == e)),
        }
    }
}

/// Parse and validate. `dir_name` is the tree's directory name, which must equal `family`.
pub fn parse(text: &str, dir_name: &str) -> Result<Manifest, String> {
    let m: Manifest = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    validate(&m, dir_name)?;
    Ok(m)
}

pub fn is_dotted_module(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_identifier)
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && !s.starts_with('.')
}

pub fn validate(m: &Manifest, dir_name: &str) -> Result<(), String> {
    if m.schema != SCHEMA {
        return Err(format!("schema = {} is not supported (this launcher reads schema {SCHEMA})", m.schema));
    }
    if !is_name(&m.family) {
        return Err(format!("family `{}` must be lowercase letters, digits, `.`, `_` or `-`", m.family));
    }
    if m.family != dir_name {
        return Err(format!("family `{}` does not match its directory `trees/{dir_name}`", m.family));
    }
    match parse_minor(&m.abi.python) {
        Some((3, _)) if m.abi.python.matches('.').count() == 1 => {}
        _ => return Err(format!("abi.python = `{}` must be a CPython minor such as \"3.12\"", m.abi.python)),
    }
    if m.abi.rocm.is_empty() || !m.abi.rocm.bytes().all(|b| b.is_ascii_digit()) || m.abi.rocm.len() > 3 {
        return Err(format!("abi.rocm = `{}` must be a ROCm major such as \"7\"", m.abi.rocm));
    }
    for (name, e) in &m.engines {
        if !KNOWN_ENGINES.contains(&name.as_str()) {
            return Err(format!("[engines.{name}]: unknown engine (this launcher knows {})", KNOWN_ENGINES.join(", ")));
        }
        if !is_dotted_module(&e.module) {
            return Err(format!("[engines.{name}] module `{}` is not a Python module name", e.module));
        }
        if let Some(v) = &e.versions {
            crate::version::Spec::parse(v).map_err(|err| format!("[engines.{name}] versions = `{v}`: {err}"))?;
        }
    }
    if let Some(s) = &m.server {
        if !is_dotted_module(&s.module) {
            return Err(format!("[server] module `{}` is not a Python module name", s.module));
        }
    }
    if m.engines.is_empty() && m.server.is_none() {
        return Err("the tree offers no [engines.*] and no [server]: nothing to run".to_string());
    }
    for (name, c) in &m.capabilities {
        if !is_name(name) {
            return Err(format!("capability `{name}` must be lowercase letters, digits, `.`, `_` or `-`"));
        }
        for module in &c.modules {
            if !is_dotted_module(module) {
                return Err(format!(
                    "[capabilities.{name}] module `{module}` is not a Python module name (paths are not allowed)"
                ));
            }
        }
        for lib in &c.libraries {
            if lib.contains('/') || lib == ".." || lib == "." || lib.is_empty() || lib.contains('\0') {
                return Err(format!(
                    "[capabilities.{name}] library `{lib}` escapes the tree's lib/ (give a file name such as \"libhipfile.so.0\")"
                ));
            }
        }
        for e in &c.engines {
            if !m.engines.contains_key(e) {
                return Err(format!(
                    "[capabilities.{name}] is offered to engine `{e}`, which the tree has no [engines.{e}] for"
                ));
            }
        }
        if c.modules.is_empty() && c.libraries.is_empty() {
            return Err(format!("[capabilities.{name}] names no modules and no libraries: nothing would be checked"));
        }
    }
    for (k, v) in &m.env {
        if !is_env_name(k) {
            return Err(format!("[env] `{k}` is not an environment variable name"));
        }
        if LAUNCHER_ENV.contains(&k.as_str()) || k.starts_with("INFERA_") {
            return Err(format!("[env] `{k}` is composed by the launcher (the tree's directories are prepended to it); a tree cannot set it"));
        }
        if v.contains('\0') {
            return Err(format!("[env] {k} contains a NUL byte"));
        }
    }
    for s in &m.allow_shadow {
        if !is_identifier(s) {
            return Err(format!("allow_shadow entry `{s}` is not a top-level module name"));
        }
    }
    Ok(())
}

/// The JSON Schema of `manifest.toml`, generated from these types.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(Manifest);
    serde_json::to_string_pretty(&schema).unwrap_or_default() + "\n"
}

/// Variables the launcher composes itself for the child.
const LAUNCHER_ENV: [&str; 5] =
    ["PYTHONPATH", "LD_LIBRARY_PATH", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"];

pub fn is_env_name(k: &str) -> bool {
    is_identifier(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
schema = 1
family = "rocm7-py312"
[abi]
python = "3.12"
rocm = "7"
[engines.vllm]
module = "infera.engine.vllm"
[server]
module = "infera.server"
[capabilities.mooncake]
modules = ["mooncake"]
[capabilities.hipfile]
modules = ["hipfile"]
engines = ["vllm"]
"#;

    #[test]
    fn minimal_contract_parses() {
        let m = parse(GOOD, "rocm7-py312").unwrap();
        assert_eq!(m.python_minor(), (3, 12));
        assert!(m.offers("hipfile", Some("vllm")));
        assert!(!m.offers("hipfile", Some("sglang")));
        assert!(!m.offers("hipfile", None));
        assert!(m.offers("mooncake", None));
    }

    #[test]
    fn refusals_name_the_problem() {
        let cases = [
            (GOOD.replace("schema = 1", "schema = 1\nextra = 2"), "unknown field `extra`"),
            (GOOD.replace("python = \"3.12\"", "python = 3.12"), "invalid type"),
            (GOOD.replace("python = \"3.12\"", "python = \"3.x\""), "abi.python"),
            (GOOD.replace("[\"hipfile\"]", "[\"../../etc\"]"), "not a Python module name"),
            (GOOD.replace("family = \"rocm7-py312\"", "family = \"other\""), "does not match its directory"),
            (GOOD.replace("engines = [\"vllm\"]", "engines = [\"sglang\"]"), "no [engines.sglang]"),
            (GOOD.replace("schema = 1", "schema = 2"), "schema = 2"),
        ];
        for (text, want) in cases {
            let e = parse(&text, "rocm7-py312").unwrap_err();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }
}
