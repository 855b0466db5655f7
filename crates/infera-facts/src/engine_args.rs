//! The engine args as the engine will read them, read once, with the engine known: the
//! command line in the engine's dialect, with the `--config FILE.yaml` it names merged
//! before it (both engines place the file's options first; the command line's win). That
//! file is the one this stage reads; the plan reads none.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::dialect::{self, Parsed, Setting};
use crate::engine_config::{self, ConfigFacts};
use crate::engines::{Engine, Opt, OptionList, Spelling};
use crate::finding::Finding;
use infera_core::rootfs::Root;
use infera_exec_derive::Refuse;

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum ConfigError {
    #[error("`--config` is given {count} times; {engine} takes one config file and exits otherwise")]
    #[refuse(code = "engine-config-twice", exit = Usage, hint = "merge the files into one, or give the options on the command line")]
    Twice { count: usize, engine: &'static str },
    #[error("`--config` is the last engine arg: no file follows it")]
    #[refuse(code = "engine-config-invalid", exit = Usage, hint = "give the YAML file after --config")]
    NoFile,
    #[error("--config `{}`: {engine} reads only .yaml/.yml config files and exits on any other", path.display())]
    #[refuse(code = "engine-config-invalid", exit = Usage, hint = "write the options as YAML in a .yaml file")]
    NotYaml { path: PathBuf, engine: &'static str },
    #[error("--config `{}` does not exist in this container; {engine} exits when it cannot read it", path.display())]
    #[refuse(code = "engine-config-missing", exit = Missing, hint = "mount the file (a ConfigMap volume) at that path, or fix --config")]
    Missing { path: PathBuf, engine: &'static str },
}

/// The args as read, and whether the launcher may add defaults (not when a config file it
/// cannot read may set them: a default would override the file).
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub parsed: Parsed,
    pub defaults: bool,
    /// The command line's long options (and `-h`) before `--`, each where it is and as
    /// written: what the checks of the engine's parser judge, read here once.
    pub flags: Vec<Flag>,
    /// The options the engines read as JSON, with vLLM's dotted keys merged
    /// (`--kv-transfer-config.kv_role X`): the value, or why it is not JSON.
    pub json: BTreeMap<Opt, Result<serde_json::Value, String>>,
}

/// A long option on the command line (or `-h`): its position, and its name as written
/// (before any `=VALUE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    pub index: usize,
    pub written: String,
}

impl Read {
    /// A JSON option's value, when it is set and is JSON.
    pub fn json(&self, o: Opt) -> Option<&serde_json::Value> {
        self.json.get(&o).and_then(|r| r.as_ref().ok())
    }

    /// The flags and the JSON options of `args`, read once.
    fn with_tokens(mut self, e: Engine, args: &[OsString]) -> Read {
        self.flags = args
            .iter()
            .enumerate()
            .take_while(|(_, a)| a.as_encoded_bytes() != b"--")
            .filter(|(_, a)| (a.len() > 2 && a.as_encoded_bytes().starts_with(b"--")) || *a == "-h")
            .map(|(index, a)| {
                let written = a.to_string_lossy();
                Flag { index, written: written.split('=').next().unwrap_or_default().to_string() }
            })
            .collect();
        let role = e.info().pd_role;
        let json_opts = [Some(Opt::KvTransferConfig), role.json_key.map(|_| role.opt)];
        for o in json_opts.into_iter().flatten() {
            if let Some(v) = dialect::json_option(e, args, &self.parsed, o).transpose() {
                self.json.insert(o, v);
            }
        }
        self
    }
}

#[derive(Clone)]
pub struct EngineArgs {
    pub engine: Engine,
    /// The engine's full option list for its version, when recorded: abbreviations are
    /// then resolved exactly as its parser resolves them.
    pub list: Option<&'static OptionList>,
    /// The args as read, or why the engine would refuse them (its `--config`).
    pub read: Result<Read, ConfigError>,
    pub findings: Vec<Finding>,
}

impl EngineArgs {
    /// Read `args` as `engine` (installed at `version`) reads them; `chdir`: the working
    /// directory a relative `--config` is found from.
    pub fn read(engine: Engine, version: Option<&str>, args: &[OsString], root: &Root, chdir: Option<&Path>) -> Self {
        let list = crate::engines::option_list(engine, version);
        let mut findings = Vec::new();
        let read = with_config(engine, list, args, root, chdir, &mut findings).map(|r| r.with_tokens(engine, args));
        EngineArgs { engine, list, read, findings }
    }

    /// The model the engine would load (the command line's, else its config file's).
    pub fn model(&self) -> Option<&OsString> {
        match self.read.as_ref().ok()?.parsed.get(Opt::Model)? {
            Setting::Value(m) => Some(m),
            _ => None,
        }
    }
}

fn with_config(
    e: Engine,
    list: Option<&'static OptionList>,
    args: &[OsString],
    root: &Root,
    chdir: Option<&Path>,
    findings: &mut Vec<Finding>,
) -> Result<Read, ConfigError> {
    let pairs = dialect::config_pairs(args);
    let (at, file) = match pairs.as_slice() {
        [] => return Ok(Read { parsed: dialect::read_in(e, list, args), defaults: true, ..Read::default() }),
        [one] => one.clone(),
        many => return Err(ConfigError::Twice { count: many.len(), engine: e.name() }),
    };
    let Some(file) = file else { return Err(ConfigError::NoFile) };
    let without = |findings: &mut Vec<Finding>, why: String| {
        findings.push(Finding::warn(
            "engine-config-unread",
            format!("{why}: no defaults added (one could override what the file sets); the rules read the command line only"),
        ));
        Read { parsed: dialect::read_with_config(e, list, &[], args, at), defaults: false, ..Read::default() }
    };
    match engine_config::detect(root, &file, chdir) {
        ConfigFacts::Known { path, entries } => Ok(merged(e, list, args, at, &path, &entries, findings)),
        ConfigFacts::NotYaml { path } => Err(ConfigError::NotYaml { path, engine: e.name() }),
        ConfigFacts::Missing { path } if root.is_host_root() => Err(ConfigError::Missing { path, engine: e.name() }),
        ConfigFacts::Missing { path } => Ok(without(
            findings,
            format!("--config `{}` is not in the image root (a volume in the pod?)", path.display()),
        )),
        ConfigFacts::Unreadable { path, reason } => {
            Ok(without(findings, format!("--config `{}` could not be read here ({reason})", path.display())))
        }
    }
}

/// The config file's options as the engine turns them into args, read before the command line.
fn merged(
    e: Engine,
    list: Option<&OptionList>,
    args: &[OsString],
    at: usize,
    path: &Path,
    entries: &[(String, engine_config::Value)],
    findings: &mut Vec<Finding>,
) -> Read {
    let has = |o: &str| match list {
        Some(l) => l.names().contains(&o),
        None => Opt::ALL
            .iter()
            .filter_map(|x| e.spelling(*x))
            .any(|sp| matches!(sp, Spelling::Bool { off, .. } if off == o)),
    };
    let config_args: Vec<OsString> = engine_config::to_args(e, entries, &has).into_iter().map(OsString::from).collect();
    let parsed = dialect::read_with_config(e, list, &config_args, args, at);
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    findings.push(Finding::info(
        "engine-config",
        format!(
            "read --config `{}` as {} reads it: {} (before the command line's args, which win over it)",
            path.display(),
            e.name(),
            if keys.is_empty() { "no options".to_string() } else { keys.join(", ") }
        ),
    ));
    Read { parsed, defaults: true, ..Read::default() }
}
