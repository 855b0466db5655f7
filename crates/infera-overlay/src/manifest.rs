//! The manifest of one overlay tree (`trees/<family>/manifest.toml`):
//! its types, parsing and validation. Unknown keys are errors, so a typo cannot
//! silently turn a capability off.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use infera_core::pyassign::is_identifier;
use infera_core::rootfs::parse_minor;

pub const SCHEMA: u32 = 1;

/// infera's router module (`[server] module` of the shipped manifests).
pub const SERVER_MODULE: &str = "infera.server";

/// The minimal manifest: the contract every launcher version reads (examples, tests).
pub const MINIMAL: &str = r#"schema = 1
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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Abi {
    /// CPython minor the tree's extensions were built for, e.g. "3.12".
    pub python: String,
    /// The HIP ABI major its compiled code binds (the N of `libamdhip64.so.N` in DT_NEEDED),
    /// e.g. "7" — what the family name's `rocm7` means. DESIGN's minimal contract spells it
    /// `rocm`, which is read as the same.
    #[serde(alias = "rocm")]
    pub hip: String,
    /// A bound on the image's ROCm release (not the ABI), e.g. ">=7.0, <11".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm_release: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EngineEntry {
    pub module: String,
    /// Base engine versions this module supports, e.g. ">=0.10, <0.12".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<String>,
    /// Versions outside `versions` the module is known to fail on (measured, not merely
    /// untested), and why: `--allow engine-version` is refused there, since it cannot help.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fails: Vec<Fails>,
}

/// Engine versions a tree's module cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Fails {
    /// A PEP 440 bound, e.g. ">=0.29".
    pub versions: String,
    /// What happens there, in a line (named in the refusal).
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub module: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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
    /// Which copy the child imports when the engine image ships the capability's modules
    /// too (vLLM's ROCm images ship `mooncake`): the image's (`base`, the default: the tree's
    /// copy, kept in `capabilities/<name>/`, is left off the path) or the tree's (`tree`,
    /// with a warning naming both versions).
    #[serde(default, skip_serializing_if = "Prefer::is_default")]
    pub prefer: Prefer,
}

/// Which copy of a capability's modules the child imports when the image has them too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Prefer {
    /// The engine image's own copy.
    #[default]
    Base,
    /// The tree's copy, ahead of the image's.
    Tree,
}

impl Prefer {
    pub fn is_default(&self) -> bool {
        *self == Prefer::Base
    }
}

impl Manifest {
    pub fn python_minor(&self) -> (u32, u32) {
        parse_minor(&self.abi.python).unwrap_or((0, 0))
    }
    pub fn hip_major(&self) -> u32 {
        self.abi.hip.parse().unwrap_or(0)
    }
    /// Is this capability offered to `engine` (None = the router)?
    pub fn offers(&self, cap: &str, engine: Option<&str>) -> bool {
        match self.capabilities.get(cap) {
            None => false,
            Some(c) => c.engines.is_empty() || engine.is_some_and(|e| c.engines.iter().any(|x| x == e)),
        }
    }
}

/// What is wrong with a manifest (the file is named by the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("{0}")]
    Unreadable(String),
    #[error("not valid UTF-8")]
    NotUtf8,
    /// TOML syntax, unknown keys, wrong types (the parser's own message).
    #[error("{0}")]
    Toml(String),
    #[error("schema = {found} is not supported (this launcher reads schema {SCHEMA})")]
    Schema { found: u32 },
    #[error("family `{family}` must be lowercase letters, digits, `.`, `_` or `-`")]
    FamilyName { family: String },
    #[error("family `{family}` does not match its directory `trees/{dir}`")]
    FamilyDir { family: String, dir: String },
    #[error("abi.python = `{value}` must be a CPython minor such as \"3.12\"")]
    AbiPython { value: String },
    #[error("abi.hip (or rocm) = `{value}` must be a HIP ABI major such as \"7\"")]
    AbiHip { value: String },
    #[error("abi.rocm_release = `{spec}`: {cause}")]
    AbiRelease { spec: String, cause: infera_core::version::SpecError },
    #[error("[engines.{name}]: unknown engine (this launcher knows {})", infera_facts::engines::Engine::names().join(", "))]
    UnknownEngine { name: String },
    #[error("[engines.{name}] module `{module}` is not a Python module name")]
    EngineModule { name: String, module: String },
    #[error("[engines.{name}] versions = `{spec}`: {cause}")]
    EngineVersions { name: String, spec: String, cause: infera_core::version::SpecError },
    #[error("[server] module `{module}` is not a Python module name")]
    ServerModule { module: String },
    #[error("the tree offers no [engines.*] and no [server]: nothing to run")]
    NothingToRun,
    #[error("capability `{name}` must be lowercase letters, digits, `.`, `_` or `-`")]
    CapabilityName { name: String },
    #[error("[capabilities.{name}] module `{module}` is not a Python module name (paths are not allowed)")]
    CapabilityModule { name: String, module: String },
    #[error(
        "[capabilities.{name}] library `{lib}` escapes the tree's lib/ (give a file name such as \"libhipfile.so.0\")"
    )]
    CapabilityLibrary { name: String, lib: String },
    #[error("[capabilities.{name}] is offered to engine `{engine}`, which the tree has no [engines.{engine}] for")]
    CapabilityEngine { name: String, engine: String },
    #[error("[capabilities.{name}] names no modules and no libraries: nothing would be checked")]
    CapabilityEmpty { name: String },
    #[error("[env] `{key}` is not an environment variable name")]
    EnvName { key: String },
    #[error(
        "[env] `{key}` is composed by the launcher (the tree's directories are prepended to it); a tree cannot set it"
    )]
    EnvComposed { key: String },
    #[error("[env] {key} contains a NUL byte")]
    EnvNul { key: String },
    #[error(
        "[env] {key} = `{value}`: {key} {loads}; a manifest may only point it inside the tree (`{{tree}}/…`, no `..`)"
    )]
    EnvLoadsCode { key: String, value: String, loads: &'static str },
    #[error("[env] {key} = `{value}`: {key} {loads}; a manifest may not set it")]
    EnvNamesCode { key: String, value: String, loads: &'static str },
    #[error("allow_shadow entry `{entry}` is not a top-level module name")]
    AllowShadow { entry: String },
}

/// Parse and validate. `dir_name` is the tree's directory name, which must equal `family`.
pub fn parse(text: &str, dir_name: &str) -> Result<Manifest, ManifestError> {
    let m: Manifest = toml::from_str(text).map_err(|e| ManifestError::Toml(e.to_string().trim_end().to_string()))?;
    validate(&m, dir_name)?;
    Ok(m)
}

pub fn is_dotted_module(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_identifier)
}

pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && !s.starts_with('.')
}

pub fn validate(m: &Manifest, dir_name: &str) -> Result<(), ManifestError> {
    use ManifestError as E;
    if m.schema != SCHEMA {
        return Err(E::Schema { found: m.schema });
    }
    if !is_name(&m.family) {
        return Err(E::FamilyName { family: m.family.clone() });
    }
    if m.family != dir_name {
        return Err(E::FamilyDir { family: m.family.clone(), dir: dir_name.to_string() });
    }
    match parse_minor(&m.abi.python) {
        Some((3, _)) if m.abi.python.matches('.').count() == 1 => {}
        _ => return Err(E::AbiPython { value: m.abi.python.clone() }),
    }
    if m.abi.hip.is_empty() || !m.abi.hip.bytes().all(|b| b.is_ascii_digit()) || m.abi.hip.len() > 3 {
        return Err(E::AbiHip { value: m.abi.hip.clone() });
    }
    if let Some(spec) = &m.abi.rocm_release {
        infera_core::version::Spec::parse(spec).map_err(|cause| E::AbiRelease { spec: spec.clone(), cause })?;
    }
    for (name, e) in &m.engines {
        if infera_facts::engines::Engine::from_name(name).is_none() {
            return Err(E::UnknownEngine { name: name.clone() });
        }
        if !is_dotted_module(&e.module) {
            return Err(E::EngineModule { name: name.clone(), module: e.module.clone() });
        }
        for v in e.versions.iter().chain(e.fails.iter().map(|f| &f.versions)) {
            infera_core::version::Spec::parse(v).map_err(|cause| E::EngineVersions {
                name: name.clone(),
                spec: v.clone(),
                cause,
            })?;
        }
    }
    if let Some(s) = m.server.as_ref().filter(|s| !is_dotted_module(&s.module)) {
        return Err(E::ServerModule { module: s.module.clone() });
    }
    if m.engines.is_empty() && m.server.is_none() {
        return Err(E::NothingToRun);
    }
    for (name, c) in &m.capabilities {
        validate_capability(m, name, c)?;
    }
    for (k, v) in &m.env {
        if !is_env_name(k) {
            return Err(E::EnvName { key: k.clone() });
        }
        if LAUNCHER_ENV.contains(&k.as_str()) || k.starts_with("INFERA_") {
            return Err(E::EnvComposed { key: k.clone() });
        }
        if v.contains('\0') {
            return Err(E::EnvNul { key: k.clone() });
        }
        code_env(k, v)?;
    }
    if let Some(s) = m.allow_shadow.iter().find(|s| !is_identifier(s)) {
        return Err(E::AllowShadow { entry: s.clone() });
    }
    Ok(())
}

fn validate_capability(m: &Manifest, name: &str, c: &Capability) -> Result<(), ManifestError> {
    use ManifestError as E;
    let name_ = || name.to_string();
    if !is_name(name) {
        return Err(E::CapabilityName { name: name_() });
    }
    if let Some(module) = c.modules.iter().find(|x| !is_dotted_module(x)) {
        return Err(E::CapabilityModule { name: name_(), module: module.clone() });
    }
    let bad_lib = |l: &&String| l.contains('/') || *l == ".." || *l == "." || l.is_empty() || l.contains('\0');
    if let Some(lib) = c.libraries.iter().find(bad_lib) {
        return Err(E::CapabilityLibrary { name: name_(), lib: lib.clone() });
    }
    if let Some(e) = c.engines.iter().find(|e| !m.engines.contains_key(*e)) {
        return Err(E::CapabilityEngine { name: name_(), engine: e.clone() });
    }
    if c.modules.is_empty() && c.libraries.is_empty() {
        return Err(E::CapabilityEmpty { name: name_() });
    }
    Ok(())
}

/// The JSON Schema of `manifest.toml`: the committed file, which the unit tests generate
/// from these types and compare (the generator stays out of the shipped binary).
pub fn schema_json() -> String {
    include_str!("../../../manifests/manifest.schema.json").to_string()
}

#[cfg(test)]
mod schema_tests {
    #[test]
    fn committed_schema_is_generated_from_the_types() {
        let schema = schemars::schema_for!(super::Manifest);
        let generated = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if std::env::var_os("INFERA_UPDATE_DOCS").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/manifest.schema.json");
            std::fs::write(path, &generated).unwrap();
            return;
        }
        assert_eq!(
            super::schema_json(),
            generated,
            "manifests/manifest.schema.json is stale: write this test's `generated` to it"
        );
    }
}

/// Variables whose value makes the child load code from a path: the dynamic loader's
/// (ld.so(8)), glibc's, CPython's (its "Environment variables" documentation), the shells'
/// (bash(1) INVOCATION, sh(1p), zsh(1) STARTUP FILES: the command form can run a shell),
/// Perl's (perlrun), Node's and Ruby's module paths, and the libraries an engine process loads
/// (libibverbs' providers, OpenSSL's modules, the ROCm runtime's tool libraries). A manifest
/// may set them only to paths inside its own tree.
pub const CODE_PATH_ENV: [(&str, &str); 23] = [
    ("BASH_ENV", "is a file bash runs before any non-interactive script"),
    ("ENV", "is a file sh and bash (as sh) run at start"),
    ("ZDOTDIR", "is where zsh reads its start-up files (.zshenv, run by every zsh)"),
    ("PERL5LIB", "adds directories Perl loads modules from"),
    ("PERLLIB", "adds directories Perl loads modules from"),
    ("NODE_PATH", "adds directories Node loads modules from"),
    ("RUBYLIB", "adds directories Ruby loads libraries from"),
    ("LD_PRELOAD", "preloads shared objects into every process"),
    ("LD_AUDIT", "loads audit modules into every process"),
    ("LD_ORIGIN_PATH", "changes where $ORIGIN libraries are found"),
    ("GCONV_PATH", "loads glibc's iconv modules (shared objects) from it"),
    ("PYTHONHOME", "replaces the standard library CPython imports"),
    ("PYTHONSTARTUP", "is a file CPython runs"),
    ("PYTHONUSERBASE", "adds a site directory whose .pth files CPython runs"),
    ("PYTHONPLATLIBDIR", "changes where CPython finds its compiled standard library"),
    ("RDMAV_DRIVERS", "loads RDMA providers (shared objects) by path"),
    ("IBV_DRIVERS", "loads RDMA providers (shared objects) by path"),
    ("OPENSSL_CONF", "is a configuration that loads OpenSSL modules"),
    ("OPENSSL_MODULES", "loads OpenSSL provider modules from it"),
    ("OPENSSL_ENGINES", "loads OpenSSL engines from it"),
    ("HSA_TOOLS_LIB", "loads ROCm runtime tool libraries"),
    ("ROCP_TOOL_LIBRARIES", "loads ROCm profiler tool libraries"),
    ("HIP_TRACE_API_LIB", "loads a HIP tracing library"),
];

/// Variables whose value names code to import rather than a path (CPython imports the
/// module it names): never from a manifest.
pub const CODE_NAME_ENV: [(&str, &str); 8] = [
    ("PYTHONBREAKPOINT", "names a callable CPython imports"),
    ("LD_PROFILE", "names a shared object the loader profiles (and writes output for)"),
    ("PERL5OPT", "holds options Perl runs with (`-M` loads a module, `-d` a debugger)"),
    ("PERL5DB", "is Perl code the debugger runs"),
    ("NODE_OPTIONS", "holds options Node runs with (`--require`, `--import`, `--loader` load code)"),
    ("RUBYOPT", "holds options Ruby runs with (`-r` loads a library)"),
    ("SHELLOPTS", "can turn on bash's xtrace, whose PS4 bash expands (commands included)"),
    ("PS4", "is expanded by bash under xtrace (a command substitution runs)"),
];

/// A code-loading variable from a manifest: each of its paths `{tree}` or `{tree}/…` with
/// no `..` (where it then resolves is checked against the tree when the tree is loaded);
/// a variable that names code is refused; PYTHONWARNINGS may not name a category by
/// module (`-W ::pkg.Warning` imports `pkg`).
fn code_env(k: &str, v: &str) -> Result<(), ManifestError> {
    if let Some((_, loads)) = CODE_PATH_ENV.iter().find(|(n, _)| *n == k) {
        let bad = code_paths(k, v).any(|p| match p.strip_prefix("{tree}") {
            Some(rest) => !(rest.is_empty() || rest.starts_with('/')) || rest.split('/').any(|c| c == ".."),
            None => true,
        });
        if bad {
            return Err(ManifestError::EnvLoadsCode { key: k.into(), value: v.into(), loads });
        }
    }
    if let Some((_, loads)) = CODE_NAME_ENV.iter().find(|(n, _)| *n == k) {
        if !(k == "PYTHONBREAKPOINT" && v == "0") {
            return Err(ManifestError::EnvNamesCode { key: k.into(), value: v.into(), loads });
        }
    }
    if k == "PYTHONWARNINGS" && v.split(',').any(|f| f.split(':').nth(2).is_some_and(|c| c.contains('.'))) {
        let loads = "names a warning category by module, which CPython imports";
        return Err(ManifestError::EnvNamesCode { key: k.into(), value: v.into(), loads });
    }
    Ok(())
}

/// The paths of a code-loading variable's value (`:`-separated; LD_PRELOAD also by spaces).
pub fn code_paths<'a>(k: &str, v: &'a str) -> impl Iterator<Item = &'a str> {
    let preload = k == "LD_PRELOAD";
    v.split(move |c: char| c == ':' || (preload && c.is_ascii_whitespace())).filter(|p| !p.is_empty())
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

    const GOOD: &str = MINIMAL;

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
            let e = parse(&text, "rocm7-py312").unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }
}
