//! The engine args as the engine will read them: the command line, plus the engine's
//! `--config FILE.yaml` whose options both engines place before the command line's.

use std::ffi::OsString;
use std::path::PathBuf;

use thiserror::Error;

use crate::dialect::{self, Parsed};
use crate::engines::{Engine, OptionList, Spelling};
use crate::facts::engine_config::{self, ConfigFacts};
use crate::facts::Facts;
use crate::finding::Finding;
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
pub struct Read {
    pub parsed: Parsed,
    pub defaults: bool,
}

pub fn read(
    e: Engine,
    list: Option<&OptionList>,
    args: &[OsString],
    facts: &Facts,
    findings: &mut Vec<Finding>,
) -> Result<Read, ConfigError> {
    let pairs = dialect::config_pairs(args);
    let (at, file) = match pairs.as_slice() {
        [] => return Ok(Read { parsed: dialect::read_in(e, list, args), defaults: true }),
        [one] => one.clone(),
        many => return Err(ConfigError::Twice { count: many.len(), engine: e.name() }),
    };
    let Some(file) = file else { return Err(ConfigError::NoFile) };
    let without = |findings: &mut Vec<Finding>, why: String| {
        findings.push(Finding::warn(
            "engine-config-unread",
            format!("{why}: no defaults added (one could override what the file sets); the rules read the command line only"),
        ));
        Read { parsed: dialect::read_with_config(e, list, &[], args, at), defaults: false }
    };
    match facts.engine_configs.get(&file) {
        Some(ConfigFacts::Known { path, entries }) => {
            let has = |o: &str| match list {
                Some(l) => l.names().contains(&o),
                None => crate::engines::Opt::ALL
                    .iter()
                    .filter_map(|x| e.spelling(*x))
                    .any(|sp| matches!(sp, Spelling::Bool { off, .. } if off == o)),
            };
            let config_args: Vec<OsString> =
                engine_config::to_args(e, entries, &has).into_iter().map(OsString::from).collect();
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
            Ok(Read { parsed, defaults: true })
        }
        Some(ConfigFacts::NotYaml { path }) => Err(ConfigError::NotYaml { path: path.clone(), engine: e.name() }),
        Some(ConfigFacts::Missing { path }) if facts.root.is_host_root() => {
            Err(ConfigError::Missing { path: path.clone(), engine: e.name() })
        }
        Some(ConfigFacts::Missing { path }) => Ok(without(
            findings,
            format!("--config `{}` is not in the image root (a volume in the pod?)", path.display()),
        )),
        Some(ConfigFacts::Unreadable { path, reason }) => {
            Ok(without(findings, format!("--config `{}` could not be read here ({reason})", path.display())))
        }
        None => Ok(without(findings, format!("--config `{}` was not read", file.to_string_lossy()))),
    }
}
