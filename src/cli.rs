//! The command line (DESIGN.md "Command line"): the low level mirrors argv and only
//! validates; `Request` is the resolved form the planner reads.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::{BoolishValueParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use thiserror::Error;

use crate::engines::Engine;
use crate::envvars::{self as ev, Env};
use crate::spec::{InitSpec, Privileges};
use infera_exec_derive::Refuse;

#[derive(Debug, Parser)]
#[command(
    name = "infera-exec",
    version,
    about = "Container command for infera pods: detect the image, pick the overlay tree, plan, exec.",
    after_help = "Exit codes: 0 ok, 2 usage, 65 invalid overlay/manifest, 66 missing, 69 unsupported, \
                  78 engine configuration refused, 126 cannot execute, 127 not found."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Exec the engine worker (`python -m <engine module> ENGINE_ARGS...`).
    Worker(RunArgs),
    /// Exec the router (`python -m infera.server ROUTER_ARGS...`).
    Server(RunArgs),
    /// Capability dry run: print the facts and the capability table, exec nothing.
    Check(RunArgs),
    /// Copy this overlay into DEST (the initContainer fallback for clusters without image volumes).
    Install {
        /// Where to put the overlay (an emptyDir mount).
        dest: PathBuf,
        /// The overlay to copy (default: the one this binary is in).
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Build-side tools for the overlay's manifests and integrity records.
    #[command(subcommand)]
    Manifest(ManifestCommand),
}

#[derive(Debug, Subcommand)]
pub enum ManifestCommand {
    /// Print the JSON Schema of manifest.toml.
    Schema,
    /// Derive a staged tree's facts from its files and write its integrity record (payload.json).
    Generate {
        /// The tree directory (`<overlay>/trees/<family>`).
        tree: PathBuf,
        /// Compare against the existing payload.json instead of writing it.
        #[arg(long)]
        check: bool,
    },
    /// Validate every manifest of an overlay and check each tree against its record.
    Verify {
        /// The overlay directory.
        #[arg(env = ev::INFERA_OVERLAY, default_value = "/opt/infera")]
        overlay: PathBuf,
        /// Also compare every file's BLAKE3 digest (default: presence and sizes).
        #[arg(long)]
        digest: bool,
    },
}

/// `--engine`: one of the engine table's names, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineChoice {
    Auto,
    One(Engine),
}

/// `auto` and the table's engine names. Works on the raw value so that a non-UTF-8 value
/// is reported as an invalid `--engine` value (lossily shown), not as a generic error.
#[derive(Clone)]
struct EngineChoiceParser;

impl TypedValueParser for EngineChoiceParser {
    type Value = EngineChoice;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<EngineChoice, clap::Error> {
        let text = value.to_string_lossy();
        if text == "auto" {
            return Ok(EngineChoice::Auto);
        }
        if let Some(e) = Engine::from_name(&text) {
            return Ok(EngineChoice::One(e));
        }
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let mut err = clap::Error::new(ErrorKind::InvalidValue).with_cmd(cmd);
        let arg = arg.map_or_else(|| "--engine".to_string(), ToString::to_string);
        err.insert(ContextKind::InvalidArg, ContextValue::String(arg));
        err.insert(ContextKind::InvalidValue, ContextValue::String(text.into_owned()));
        let valid = std::iter::once("auto").chain(Engine::names()).map(String::from).collect();
        err.insert(ContextKind::ValidValue, ContextValue::Strings(valid));
        Err(err)
    }
    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let names = std::iter::once("auto").chain(Engine::names());
        Some(Box::new(names.map(clap::builder::PossibleValue::new)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The overlay directory.
    #[arg(long, env = ev::INFERA_OVERLAY, default_value = "/opt/infera", value_name = "DIR")]
    pub overlay: PathBuf,
    /// Read every container path under DIR (an unpacked image); the plan still names container paths.
    #[arg(long, env = ev::INFERA_ROOT, default_value = "/", value_name = "DIR")]
    pub root: PathBuf,
    /// The engine to run; `auto` picks the one installed in the image.
    #[arg(long, env = ev::INFERA_ENGINE, value_parser = EngineChoiceParser, default_value = "auto")]
    pub engine: EngineChoice,
    /// Capabilities the pod needs (comma-separated, repeatable): mooncake, hipfile, ...
    #[arg(long, env = ev::INFERA_REQUIRE, value_delimiter = ',', value_name = "CAP[,CAP]")]
    pub require: Vec<String>,
    /// Force an overlay tree (with a warning) instead of matching the image's ABI.
    #[arg(long, env = ev::INFERA_FAMILY, value_name = "NAME")]
    pub family: Option<String>,
    /// Override a refusal rule knowingly (comma-separated rule codes, repeatable).
    #[arg(long, env = ev::INFERA_ALLOW, value_delimiter = ',', value_name = "CODE[,CODE]")]
    pub allow: Vec<String>,
    /// Print the plan the real run would exec, and exit with the code it would refuse with.
    #[arg(long, env = ev::INFERA_DRY_RUN, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub dry_run: bool,
    /// Output format of the plan (dry run, check, refusals).
    #[arg(long, env = ev::INFERA_OUTPUT, value_enum, default_value = "text")]
    pub output: Output,
    /// Stay as a tiny init (reap, forward signals) instead of exec'ing.
    #[arg(long, env = ev::INFERA_INIT, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub init: bool,
    /// In --init mode, forward signals to the child's process group.
    #[arg(long, env = ev::INFERA_INIT_GROUP, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub init_group: bool,
    /// In --init mode, SIGKILL what is left this many seconds after a forwarded SIGTERM.
    #[arg(long, env = ev::INFERA_INIT_GRACE, value_name = "SECONDS")]
    pub init_grace: Option<f64>,
    /// Drop every Linux capability but these before exec (comma-separated; `none` keeps nothing).
    #[arg(long, env = ev::INFERA_DROP_CAPS, value_delimiter = ',', value_name = "CAP[,CAP]")]
    pub drop_caps: Option<Vec<String>>,
    /// Set no_new_privs before exec.
    #[arg(long, env = ev::INFERA_NO_NEW_PRIVS, value_parser = BoolishValueParser::new(), default_value = "false", num_args = 0, default_missing_value = "true")]
    pub no_new_privs: bool,
    /// Arguments for the engine or router, passed byte for byte and in order.
    #[arg(last = true, value_name = "ARGS", value_parser = clap::value_parser!(OsString))]
    pub args: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Worker,
    Server,
    Check,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Server => "server",
            Role::Check => "check",
        }
    }
    /// `check` plans the worker.
    pub fn runs_engine(self) -> bool {
        self != Role::Server
    }
}

/// `INFERA_VERIFY`: check the selected tree against its integrity record before exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    Off,
    Size,
    Digest,
}

/// What the pod asked for, resolved from argv and environment, every value validated.
#[derive(Debug, Clone)]
pub struct Request {
    pub role: Role,
    pub engine: EngineChoice,
    pub require: Vec<String>,
    pub family: Option<String>,
    pub allow: Vec<String>,
    pub args: Vec<OsString>,
    pub root: PathBuf,
    pub overlay: PathBuf,
    pub dry_run: bool,
    pub output: Output,
    pub init: Option<InitSpec>,
    pub privileges: Privileges,
    pub verify: Verify,
}

/// A day: longer grace periods are a typo, and would overflow time arithmetic.
pub const MAX_GRACE_SECONDS: f64 = 86_400.0;

/// Values the argument parser accepted but that do not mean anything.
#[derive(Debug, Clone, PartialEq, Error, Refuse)]
pub enum UsageError {
    #[error("--init-grace {value}: expected a number of seconds from 0 to {MAX_GRACE_SECONDS}")]
    #[refuse(code = "init-grace-invalid", exit = Usage)]
    InitGrace { value: f64 },
    #[error("--drop-caps: `{name}` is not a Linux capability")]
    #[refuse(
        code = "drop-caps-invalid",
        exit = Usage,
        hint = "name capabilities as in capabilities(7), e.g. net_bind_service or CAP_IPC_LOCK"
    )]
    DropCaps { name: String },
    #[error("INFERA_ALLOW / --allow names `{name}`, which is not a rule; rules: {}", rules.join(", "))]
    #[refuse(code = "allow-unknown", exit = Usage)]
    AllowUnknown { name: String, rules: Vec<String> },
    #[error("{}=`{value}`: expected size, digest or off", ev::INFERA_VERIFY)]
    #[refuse(code = "verify-invalid", exit = Usage)]
    Verify { value: String },
    #[error("argument {index} after `--` contains a NUL byte")]
    #[refuse(code = "arg-nul", exit = Usage, hint = "an execve argument cannot hold NUL; fix the pod spec's args")]
    ArgNul { index: usize },
}

/// `net_bind_service,CAP_KILL` → the set, sorted; `none` (or empty) → keep nothing.
pub fn parse_caps(list: &[String]) -> Result<Vec<caps::Capability>, UsageError> {
    use std::str::FromStr;
    let mut keep = Vec::new();
    for name in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none")) {
        let cap = caps::Capability::from_str(&caps::to_canonical(name))
            .map_err(|_| UsageError::DropCaps { name: name.to_string() })?;
        if !keep.contains(&cap) {
            keep.push(cap);
        }
    }
    keep.sort_by_key(|c| c.to_string());
    Ok(keep)
}

/// Trimmed, without empties and duplicates, in order.
fn clean(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

impl Request {
    pub fn resolve(role: Role, a: RunArgs, env: &Env) -> Result<Request, UsageError> {
        if let Some(g) = a.init_grace.filter(|g| !(0.0..=MAX_GRACE_SECONDS).contains(g)) {
            return Err(UsageError::InitGrace { value: g });
        }
        let init = a.init.then_some(InitSpec { group: a.init_group, grace_seconds: a.init_grace });
        let keep_caps = a.drop_caps.as_deref().map(parse_caps).transpose()?;
        let allow = clean(a.allow);
        let rules = crate::rules::codes();
        if let Some(name) = allow.iter().find(|x| !rules.contains(&x.as_str())) {
            return Err(UsageError::AllowUnknown {
                name: name.clone(),
                rules: rules.iter().map(|r| r.to_string()).collect(),
            });
        }
        let verify = match ev::get(env, ev::INFERA_VERIFY).map(|v| v.to_string_lossy()).as_deref() {
            None | Some("" | "off" | "0") => Verify::Off,
            Some("size") => Verify::Size,
            Some("digest") => Verify::Digest,
            Some(other) => return Err(UsageError::Verify { value: other.to_string() }),
        };
        Ok(Request {
            role,
            engine: a.engine,
            require: clean(a.require),
            family: a.family.filter(|f| !f.is_empty()),
            allow,
            args: a.args,
            root: a.root,
            overlay: a.overlay,
            dry_run: a.dry_run || role == Role::Check,
            output: a.output,
            init,
            privileges: Privileges { keep_caps, no_new_privs: a.no_new_privs },
            verify,
        })
    }
}
